"""``metric.run(k)``: each query's top K from the metric's states equals a brute force over
every score (binary codes ranked by dot product: exact scores, many ties, broken by the rule),
for same source, queries and gallery, and qrels; written runs read back to the same values by
pytrec_eval. Several processes: tests/metrics/test_distributed_qrels.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from emulated_cuda import fake_cuda_fixture  # noqa: F401
from reference import reference_top_k
from retrieval_metrics.formats import read_trec_run, write_run
from retrieval_metrics.functional import top_k
from retrieval_metrics.functional.ranking.tie_order import id_order_rows, order_ranks


def _codes(n, dim, seed):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 2, (n, dim)).astype(np.float32))


def test_same_source_is_the_brute_force_ties_in_the_states_order():
    """The states hold same-source items by ascending id (the order of per_query()): ties at
    the cut go to the smaller id."""
    x, labels = _codes(40, 5, 0), torch.arange(40) % 7
    ids = [(i * 17) % 40 + 1000 for i in range(40)]
    metric = rm.RetrievalMetrics(["mrr"], similarity="dot")
    for part in torch.arange(40).split(15):
        metric.update(x[part], labels[part], ids=[ids[i] for i in part])
    run = metric.run(6)
    brute = reference_top_k(x, x, 6, ids, {(i, i) for i in range(40)})
    assert set(run) == {str(i) for i in ids}
    for i, qid in enumerate(ids):
        assert run[str(qid)] == [(str(ids[j]), s) for s, j in brute[i]], qid


def test_a_gallery_by_id_is_the_brute_force():
    q, g = _codes(9, 4, 6), _codes(30, 4, 7)
    g_ids = [f"doc{(j * 7) % 30}" for j in range(30)]
    metric = rm.RetrievalMetrics(["mrr"], similarity="dot", ties="id")
    metric.update(g, torch.arange(30) % 5, ids=g_ids, role="gallery")
    metric.update(q, torch.arange(9) % 5, ids=[f"q{i}" for i in range(9)], role="query")
    run = metric.run(10, ids=g_ids + [f"q{i}" for i in range(9)])
    key = order_ranks(id_order_rows(g_ids, "ids")).tolist()  # Python's order: "doc10" < "doc9"
    brute = reference_top_k(q, g, 10, key)
    for i in range(9):
        assert run[f"q{i}"] == [(g_ids[j], s) for s, j in brute[i]], i
    same = rm.RetrievalMetrics(["mrr"], ties="id")
    same.update(q, torch.arange(9) % 5, ids=list(range(9)))
    with pytest.raises(ValueError, match="a same-source run breaks ties"):
        same.run(3)


def test_queries_and_gallery_with_qrels_leave_out_the_querys_own_id(tmp_path):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    q, g = _codes(10, 6, 1), _codes(50, 6, 2)
    q_ids = [f"d{3 * i}" for i in range(10)]  # each query is also a corpus document
    g_ids = [f"d{j}" for j in range(50)]
    qrels = {qid: {g_ids[(i * 7 + 1) % 50]: 1} for i, qid in enumerate(q_ids)}
    metric = rm.RetrievalMetrics(["ndcg@10"], qrels=qrels, similarity="dot")
    metric.update(g, ids=g_ids, role="gallery")
    metric.update(q, ids=q_ids, role="query")
    run = metric.run(8, ids=q_ids + g_ids)
    excluded = {(i, 3 * i) for i in range(10)}
    brute = reference_top_k(q, g, 8, list(range(50)), excluded)  # the gallery in the order given
    # the queries come back in the states' order; each is the brute force's
    for i, qid in enumerate(q_ids):
        assert run[qid] == [(g_ids[j], s) for s, j in brute[i]], qid
    # read back through a TREC file, pytrec_eval scores it as the run
    path = write_run(run, tmp_path / "run.txt")
    back = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(read_trec_run(path))
    direct = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(
        {qid: dict(pairs) for qid, pairs in run.items()})
    assert back == direct


def test_integer_ids_need_no_text_and_string_ids_do():
    x = _codes(12, 4, 3)
    metric = rm.RetrievalMetrics(["mrr"], similarity="dot")
    metric.update(x, torch.arange(12) % 3, ids=torch.arange(100, 112))
    run = metric.run(3)
    assert set(run) == {str(i) for i in range(100, 112)}
    named = rm.RetrievalMetrics(["mrr"])
    named.update(x, torch.arange(12) % 3, ids=[f"s{i}" for i in range(12)])
    with pytest.raises(ValueError, match=r"give run\(k, ids=...\)"):
        named.run(3)
    with pytest.raises(ValueError, match="not among `ids`"):
        named.run(3, ids=[f"s{i}" for i in range(11)])


@pytest.mark.parametrize("ties", ["expected", "id"])
def test_a_fixed_gallery_lists_as_queries_and_gallery_in_updates(ties):
    """set_gallery, then queries in batches (one repeated, as a sampler pads): the run of the
    same items given as role="query" and role="gallery" updates (tied 0/1 codes: the cut's
    ties in gallery order, or by id)."""
    q, g = _codes(7, 4, 5), _codes(30, 4, 4)
    q_ids, g_ids = [f"q{i}" for i in range(7)], [f"d{(7 * i) % 30}" for i in range(30)]
    fixed = rm.RetrievalMetrics(["mrr"], ties=ties)
    fixed.set_gallery(g, torch.arange(30) % 3, ids=g_ids)
    fixed.update(q[:4], torch.arange(4) % 3, ids=q_ids[:4], role="query")
    fixed.update(q[3:], torch.arange(3, 7) % 3, ids=q_ids[3:], role="query")
    both = rm.RetrievalMetrics(["mrr"], ties=ties)
    both.update(g, torch.arange(30) % 3, ids=g_ids, role="gallery")
    both.update(q, torch.arange(7) % 3, ids=q_ids, role="query")
    expected = both.run(6, ids=q_ids + g_ids)
    assert fixed.run(6, ids=q_ids + g_ids) == expected
    assert len(expected) == 7 and all(len(v) == 6 for v in expected.values())


def test_forms_without_both_sides_are_refused_by_name():
    fixed = rm.RetrievalMetrics(["mrr"])
    fixed.set_gallery(_codes(10, 4, 4), torch.arange(10) % 2)
    with pytest.raises(ValueError, match="no data: call `update`"):
        fixed.run(3)
    lists = rm.RetrievalMetrics(["mrr"])
    lists.update(ranked_ids=[["a", "b"]], relevant_ids=[{"b"}])
    with pytest.raises(ValueError, match="came ranked already"):
        lists.run(3)


def test_a_sharded_gallery_on_one_process_is_the_whole_gallery():
    q, g = _codes(6, 4, 8), _codes(20, 4, 9)
    runs = []
    for sharded in (False, True):
        metric = rm.RetrievalMetrics(["mrr"], similarity="dot", gallery_sharded=sharded)
        metric.update(g, torch.arange(20) % 3, ids=torch.arange(100, 120), role="gallery")
        metric.update(q, torch.arange(6) % 3, ids=torch.arange(6), role="query")
        runs.append(metric.run(5))
    assert runs[0] == runs[1]


def test_the_run_on_the_emulated_device_is_the_cpus(fake_cuda):
    q, g = _codes(7, 5, 10), _codes(40, 5, 11)
    runs = []
    for device in ("cpu", "cuda"):
        metric = rm.RetrievalMetrics(["mrr"], similarity="dot").to(device)
        metric.update(g.to(device), (torch.arange(40) % 4).to(device), ids=torch.arange(40),
                      role="gallery")
        metric.update(q.to(device), (torch.arange(7) % 4).to(device), ids=torch.arange(100, 107),
                      role="query")
        runs.append(metric.run(9))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("ids", ["int", "str"])
def test_a_same_source_run_with_ids_on_the_emulated_device_is_the_cpus(ids, fake_cuda):
    """Items given with ids: each query's own id left out of its list, the pairs worked out
    on the host whatever device the ids came on (they met the device's blocks' columns)."""
    x, labels = _codes(30, 5, 12), torch.arange(30) % 6
    given = list(range(500, 530)) if ids == "int" else [f"s{i}" for i in range(30)]
    runs = []
    for device in ("cpu", "cuda"):
        metric = rm.RetrievalMetrics(["mrr"], similarity="dot").to(device)
        metric.update(x.to(device), labels.to(device), ids=given)
        runs.append(metric.run(5, ids=given) if ids == "str" else metric.run(5))
    assert runs[0] == runs[1]
    assert all(qid not in [d for d, _ in items] for qid, items in runs[0].items())


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_a_run_against_a_corpus_on_disk_on_the_emulated_device_is_the_cpus(
    similarity, tmp_path, fake_cuda
):
    """qrels, a corpus on disk given with set_gallery, the queries on the device: the corpus
    is streamed to the queries' device for the run as for compute() (for cosine its divisor
    met the device's rows on the host before), and a query whose id is a document's leaves
    that document out."""
    corpus = torch.randn(40, 6, generator=torch.Generator().manual_seed(13))
    queries = corpus[:4] + 0.1
    path = tmp_path / "corpus.npy"
    np.save(path, corpus.numpy())
    d_ids = [f"d{j}" for j in range(40)]
    q_ids = ["d0", "q1", "q2", "d3"]
    qrels = {qid: {f"d{(i * 7 + 1) % 40}": 1} for i, qid in enumerate(q_ids)}
    runs = []
    for device in ("cpu", "cuda"):
        metric = rm.RetrievalMetrics(["mrr"], qrels=qrels, similarity=similarity).to(device)
        metric.set_gallery(path, ids=d_ids)
        metric.update(queries.to(device), ids=q_ids, role="query")
        runs.append(metric.run(6, ids=q_ids + d_ids))
    assert runs[0] == runs[1]
    assert "d0" not in [d for d, _ in runs[0]["d0"]] and "d3" not in [d for d, _ in runs[0]["d3"]]


@pytest.mark.parametrize(
    "device",
    ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device"))],
)
@pytest.mark.parametrize("num_queries", [1, 3, 5])
def test_the_run_lists_each_relevant_item_at_the_rank_the_metric_counts(num_queries, device):
    """Real-valued scores a unit in the last place apart (30 near-copies of each relevant item):
    the run's scores are the ranking's, so the items it lists above each relevant one are those
    the metric counts above it. With a product of another shape (a few query rows), a single
    query's run put its relevant item 22nd where the metric counted it 3rd."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(num_queries, 768, generator=gen)
    relevant = q + 0.8 * torch.randn(q.shape, generator=gen)
    near = [relevant * (1 + 3e-7 * torch.randn(q.shape, generator=gen)) for _ in range(30)]
    g = torch.cat([relevant, *near, torch.randn(5000, 768, generator=gen)])
    labels = torch.full((g.shape[0],), -1)
    labels[:num_queries] = torch.arange(num_queries)
    g_ids = list(range(100, 100 + g.shape[0]))
    for similarity in ("cosine", "dot"):
        metric = rm.RetrievalMetrics(["mrr"], similarity=similarity, ties="optimistic")
        metric = metric.to(device)
        metric.update(q.to(device), torch.arange(num_queries, device=device),
                      ids=list(range(num_queries)), role="query")
        metric.update(g.to(device), labels.to(device), ids=g_ids, role="gallery")
        # optimistic ties: rank = 1 + the items scoring strictly above the relevant one
        mrr = metric.per_query(ids=list(range(num_queries)))["mrr"]
        run = metric.run(g.shape[0])
        for i in range(num_queries):
            scores = dict(run[str(i)])
            own = scores[str(g_ids[i])]
            listed_above = sum(score > own for score in scores.values())
            assert listed_above + 1 == round(1 / mrr[i]), (similarity, i)


@pytest.mark.parametrize("case", ["own_id", "cameras", "ignore_label", "qrels_kept", "same"])
def test_the_run_leaves_out_what_the_ranking_leaves_out(case):
    """A run lists what compute() ranks (the brute force over every pair the definitions keep):
    a query's own id among the gallery items is the query itself, never listed (it was listed
    first where the table left it out); in re-identification the items of the query's label
    and camera; the ignore label's items for every query; with qrels and
    ``ignore_identical_ids=False`` a document of the query's id is listed, as it is ranked;
    a same-source set never lists the query."""
    q, g = _codes(8, 5, 20), _codes(36, 5, 21)
    q_labels, g_labels = torch.arange(8) % 4, torch.arange(36) % 5
    q_ids, g_ids = list(range(100, 108)), list(range(200, 236))
    for i in range(0, 8, 2):
        g_ids[3 * i + 1] = q_ids[i]  # a query's own id among the gallery's: the same sample,
        g_labels[3 * i + 1] = q_labels[i]  # with its label (and camera, below)
    options, keys, excluded = {}, {}, set()
    if case == "own_id":
        excluded = {(i, j) for i in range(8) for j in range(36) if g_ids[j] == q_ids[i]}
    if case == "cameras":
        q_cams, g_cams = torch.arange(8) % 2, torch.arange(36) % 3
        g_cams[[3 * i + 1 for i in range(0, 8, 2)]] = q_cams[0:8:2]
        keys = {"q": {"cameras": q_cams}, "g": {"cameras": g_cams}}
        excluded = {(i, j) for i in range(8) for j in range(36)
                    if g_ids[j] == q_ids[i] or (g_labels[j] == q_labels[i]
                                                and g_cams[j] == q_cams[i])}
    if case == "ignore_label":
        options = {"ignore_label": 4}
        excluded = {(i, j) for i in range(8) for j in range(36)
                    if g_ids[j] == q_ids[i] or g_labels[j] == 4}
    if case == "qrels_kept":
        qrels = {str(q_ids[i]): {str(g_ids[(5 * i + 2) % 36]): 1} for i in range(8)}
        metric = rm.RetrievalMetrics(["mrr"], similarity="dot", qrels=qrels,
                                     ignore_identical_ids=False)
        metric.update(g, ids=[str(x) for x in g_ids], role="gallery")
        metric.update(q, ids=[str(x) for x in q_ids], role="query")
        run = metric.run(36, ids=[str(x) for x in q_ids + g_ids])
        brute = reference_top_k(q, g, 36, list(range(36)))
        for i, qid in enumerate(q_ids):
            assert run[str(qid)] == [(str(g_ids[j]), s) for s, j in brute[i]], qid
        return
    metric = rm.RetrievalMetrics(["mrr"], similarity="dot", **options)
    if case == "same":
        metric.update(g, g_labels, ids=list(range(300, 336)))
        run = metric.run(12)
        brute = reference_top_k(g, g, 12, list(range(36)), {(i, i) for i in range(36)})
        for i in range(36):
            assert run[str(300 + i)] == [(str(300 + j), s) for s, j in brute[i]]
        return
    metric.update(g, g_labels, ids=g_ids, role="gallery", **keys.get("g", {}))
    metric.update(q, q_labels, ids=q_ids, role="query", **keys.get("q", {}))
    run = metric.run(12)
    brute = reference_top_k(q, g, 12, list(range(36)), excluded)
    assert excluded
    for i, qid in enumerate(q_ids):
        assert run[str(qid)] == [(str(g_ids[j]), s) for s, j in brute[i]], qid


@pytest.mark.parametrize(
    "kind", ["str list", "str array", "int tensor", "int array", "int list", "numpy ints",
             "no ids"],
)
def test_a_runs_ids_are_made_text_in_a_few_steps_whatever_their_kind(kind, monkeypatch):
    """run(k)'s ids as text, for ids given as a list or an array of str, a tensor, an array or a
    list of ints, numpy integers in a list, or none (the positions): each the ``str`` of the id
    as given (a number's Python value), and the run the brute force's. The codes of every
    listed entry are looked up at once: two searches of the ids given (the queries', then every
    listed item's), where each query's list took one of its own (51 for 50 queries)."""
    q, g = _codes(50, 5, 30), _codes(400, 5, 31)
    g_ids = [1000 + 3 * j for j in range(400)]
    q_ids = [5 * i for i in range(50)]
    given = {
        "str list": ([f"q{i}" for i in q_ids], [f"d{j}" for j in g_ids]),
        "str array": (np.array([f"q{i}" for i in q_ids]), np.array([f"d{j}" for j in g_ids])),
        "int tensor": (torch.tensor(q_ids), torch.tensor(g_ids)),
        "int array": (np.array(q_ids), np.array(g_ids)),
        "int list": (q_ids, g_ids),
        "numpy ints": ([np.int64(i) for i in q_ids], [np.int64(j) for j in g_ids]),
        "no ids": (list(range(50)), list(range(400))),
    }[kind]
    # (ties by id, which a brute force orders as well whatever the ids' kind; none: by position)
    metric = rm.RetrievalMetrics(["mrr"], similarity="dot",
                                 ties="expected" if kind == "no ids" else "id")
    if kind == "no ids":
        metric.update(q, torch.zeros(50, dtype=torch.long), role="query")
        metric.update(g, torch.ones(400, dtype=torch.long), role="gallery")
    else:
        metric.update(q, torch.zeros(50, dtype=torch.long), ids=given[0], role="query")
        metric.update(g, torch.ones(400, dtype=torch.long), ids=given[1], role="gallery")
    searches = []
    original = np.searchsorted

    def counted(*args, **kwargs):
        searches.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(np, "searchsorted", counted)
    both = None if kind in ("int tensor", "no ids") else [*given[0], *given[1]]
    run = metric.run(7, ids=both)
    assert len(searches) == 2
    q_text = [str(i) for i in (range(50) if kind == "no ids" else
                               [i.item() if hasattr(i, "item") else i for i in given[0]])]
    g_text = [str(j) for j in (range(400) if kind == "no ids" else
                               [j.item() if hasattr(j, "item") else j for j in given[1]])]
    key = list(range(400)) if kind == "no ids" else order_ranks(
        id_order_rows(given[1].tolist() if kind == "int tensor" else list(given[1]), "ids")
    ).tolist()
    brute = reference_top_k(q, g, 7, key)
    assert sorted(run) == sorted(q_text)
    for i, qid in enumerate(q_text):
        assert run[qid] == [(g_text[j], s) for s, j in brute[i]], qid
        assert all(type(doc) is str for doc, _ in run[qid])


# ------------------------------------------------------------------ run_depth: one pass


def _two_sides(kind: str, similarity: str, run_depth: int | None, dtype=torch.float32):
    """Binary codes (ties at every cut) as 24 queries and a gallery of 90 in updates, judged by
    qrels or by labels; string ids."""
    q, g = _codes(24, 6, 21).to(dtype), _codes(90, 6, 22).to(dtype)
    q_ids, g_ids = [f"q{i}" for i in range(24)], [f"d{j}" for j in range(90)]
    if kind == "qrels":
        qrels = {qid: {g_ids[(5 * i) % 90]: 1, g_ids[(5 * i + 3) % 90]: 2}
                 for i, qid in enumerate(q_ids)}
        metric = rm.RetrievalMetrics(["mrr", "ndcg@10", "recall@5"], qrels=qrels,
                                     similarity=similarity, run_depth=run_depth)
        q_labels = g_labels = None
    else:
        metric = rm.RetrievalMetrics(["mrr", "ndcg@10", "recall@5"], similarity=similarity,
                                     run_depth=run_depth)
        q_labels, g_labels = torch.arange(24) % 5, torch.arange(90) % 5
    for part in torch.arange(90).split(40):
        metric.update(g[part], None if g_labels is None else g_labels[part],
                      ids=[g_ids[j] for j in part], role="gallery")
    metric.update(q, q_labels, ids=q_ids, role="query")
    return metric, q, g, q_ids + g_ids


# (kind, similarity): whether the ranking keeps the lists (a ranking that holds the gallery in
# an order of its own, here euclidean with labels, keeps none: run() ranks again)
ONE_PASS = {("qrels", "dot"): True, ("qrels", "cosine"): True, ("qrels", "euclidean"): True,
            ("labels", "dot"): True, ("labels", "cosine"): True, ("labels", "euclidean"): False}


@pytest.mark.parametrize(("kind", "similarity"), list(ONE_PASS))
def test_run_depth_lists_the_run_from_the_ranking_compute_made(kind, similarity):
    """With run_depth, run(k) after compute() lists what run(k) lists without it (the dot
    product's also the brute force: ties at the cut by the gallery's order), for k below, at
    and above the depth, and the values are the same; where the ranking kept the lists, the
    products of compute() and run(k <= depth) are compute()'s alone (one pass over the
    gallery), and run(k > depth) ranks again."""
    from work_counts import counting_work

    plain, q, g, ids = _two_sides(kind, similarity, None)
    with counting_work() as alone:
        expected_values = plain.compute()
    kept, *_ = _two_sides(kind, similarity, 8)
    with counting_work() as both:
        values = kept.compute()
        runs = {k: kept.run(k, ids=ids) for k in (3, 8)}
    assert values.keys() == expected_values.keys()
    for name, value in values.items():
        assert torch.equal(value, expected_values[name]), name
    for k, run in runs.items():
        assert run == plain.run(k, ids=ids), k
    assert (both.multiply_adds == alone.multiply_adds) is ONE_PASS[(kind, similarity)]
    if similarity == "dot":
        brute = reference_top_k(q, g, 8, list(range(90)))
        for i in range(24):
            assert runs[8][f"q{i}"] == [(f"d{j}", s) for s, j in brute[i]], i
    with counting_work() as deeper:
        assert kept.run(12, ids=ids) == plain.run(12, ids=ids)
    assert deeper.multiply_adds > 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_run_depth_lists_the_same_run_in_any_dtype(dtype):
    plain, _, _, ids = _two_sides("qrels", "cosine", None, dtype)
    kept, *_ = _two_sides("qrels", "cosine", 5, dtype)
    kept.compute()
    assert kept.run(5, ids=ids) == plain.run(5, ids=ids)


def test_the_lists_kept_are_dropped_with_the_states_they_ranked():
    """An update after compute() (or a reset and other data) makes the kept lists stale: run()
    lists the states as they are, by the next ranking, which keeps new lists for compute()
    and the runs after (one ranking for them all)."""
    from work_counts import counting_work

    kept, _, g, ids = _two_sides("labels", "dot", 6)
    plain, *_ = _two_sides("labels", "dot", None)
    kept.compute()
    extra = _codes(10, 6, 23)
    for metric in (kept, plain):
        metric.update(extra, torch.arange(10) % 5, ids=[f"x{j}" for j in range(10)],
                      role="gallery")
    ids = ids + [f"x{j}" for j in range(10)]
    with counting_work() as both:
        run = kept.run(6, ids=ids)
        kept.compute()
        assert kept.run(6, ids=ids) == run
    assert run == plain.run(6, ids=ids)
    with counting_work() as alone:
        plain.compute()
    assert both.multiply_adds == alone.multiply_adds
    # a reset, then other data: ranked afresh (its lists kept by that ranking)
    kept.reset()
    fresh = rm.RetrievalMetrics(["mrr", "ndcg@10", "recall@5"], similarity="dot")
    q = _codes(15, 6, 24)
    for metric in (kept, fresh):
        metric.update(g[:30], torch.arange(30) % 5, ids=[f"d{j}" for j in range(30)],
                      role="gallery")
        metric.update(q, torch.arange(15) % 5, ids=[f"q{i}" for i in range(15)], role="query")
    kept.compute()
    assert kept.run(4, ids=ids) == fresh.run(4, ids=ids)


def test_where_the_ranking_keeps_no_lists_run_ranks_again_with_the_same_run():
    """A set ranked against itself, ties by id (with a gallery in updates and with
    set_gallery) and a query the qrels do not judge (compute()'s ranking ranks the judged
    ones): the run is the one made without run_depth, by a second ranking. (A gallery set
    again after compute(), whose lists are rows of the one before, in test_metric_contract.py:
    test_a_gallery_set_again_after_compute_is_the_one_the_next_compute_ranks.)"""
    from work_counts import counting_work

    x, labels = _codes(40, 5, 31), torch.arange(40) % 6
    q, g = _codes(12, 5, 32), _codes(50, 5, 33)
    g_ids = [f"d{j}" for j in range(50)]
    q_ids = [f"q{i}" for i in range(12)]
    qrels = {qid: {g_ids[3 * i]: 1} for i, qid in enumerate(q_ids[:-1])}  # the last unjudged

    def same_source(depth):
        m = rm.RetrievalMetrics(["mrr"], similarity="dot", run_depth=depth)
        m.update(x, labels, ids=list(range(40)))
        return m, None

    def fixed_by_id(depth):
        m = rm.RetrievalMetrics(["mrr"], similarity="dot", qrels=qrels, ties="id",
                                run_depth=depth)
        m.set_gallery(g, ids=g_ids)
        m.update(q, ids=q_ids, role="query")
        return m, q_ids + g_ids

    def by_id(depth):
        m = rm.RetrievalMetrics(["mrr"], similarity="dot", ties="id", run_depth=depth)
        m.update(g, torch.arange(50) % 4, ids=g_ids, role="gallery")
        m.update(q, torch.arange(12) % 4, ids=q_ids, role="query")
        return m, q_ids + g_ids

    def unjudged(depth):
        m = rm.RetrievalMetrics(["mrr"], similarity="dot", qrels=qrels, run_depth=depth)
        m.update(g, ids=g_ids, role="gallery")
        m.update(q, ids=q_ids, role="query")
        return m, q_ids + g_ids

    for make in (same_source, by_id, unjudged, fixed_by_id):
        (kept, ids), (plain, _) = make(6), make(None)
        kept.compute()
        with counting_work() as again:
            run = kept.run(6, ids=ids)
        assert run == plain.run(6, ids=ids), make.__name__
        assert again.multiply_adds > 0, make.__name__


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "10"])
def test_run_depth_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match=r"`run_depth` must be a positive int or None, got"):
        rm.RetrievalMetrics(["mrr"], run_depth=bad)


def _judged_case(scores: str, num_q: int, num_g: int, seed: int):
    """Queries and a corpus of distinct scores (normal numbers) or of ties at every cut
    (binary codes), string ids, one judged document a query."""
    gen = torch.Generator().manual_seed(seed)
    if scores == "distinct":
        q, g = torch.randn(num_q, 8, generator=gen), torch.randn(num_g, 8, generator=gen)
    else:
        q, g = _codes(num_q, 6, seed + 1), _codes(num_g, 6, seed + 2)
    q_ids, g_ids = [f"q{i}" for i in range(num_q)], [f"d{j}" for j in range(num_g)]
    qrels = {qid: {g_ids[(3 * i) % num_g]: 1} for i, qid in enumerate(q_ids)}
    return q, g, q_ids, g_ids, qrels


def _on_the_emulated_device(fake_cuda, scores: str, fixed: bool, num_q: int, num_g: int,
                            seed: int):
    """The CPU's run, the device's and the device's with run_depth=10 (:func:`_judged_case`,
    dot product), each with the host syncs of its updates and compute() (queries and a gallery
    in updates; or, ``fixed``, query updates in batches of 10 against a gallery given with
    set_gallery) and the multiply-adds of its run(10)."""
    from work_counts import counting_work

    q, g, q_ids, g_ids, qrels = _judged_case(scores, num_q, num_g, seed)
    runs, syncs, products = [], [], []
    for device, depth in (("cpu", None), ("cuda", None), ("cuda", 10)):
        metric = rm.RetrievalMetrics(["mrr", "ndcg@10"], qrels=qrels, similarity="dot",
                                     run_depth=depth).to(device)
        if fixed:
            metric.set_gallery(g.to(device), ids=g_ids)
            with fake_cuda.counting() as log:
                for part in torch.arange(num_q).split(10):
                    metric.update(q[part].to(device), ids=[q_ids[i] for i in part],
                                  role="query")
                metric.compute()
        else:
            metric.update(g.to(device), ids=g_ids, role="gallery")
            metric.update(q.to(device), ids=q_ids, role="query")
            with fake_cuda.counting() as log:
                metric.compute()
        syncs.append(len(log))
        with counting_work() as listed:
            runs.append(metric.run(10, ids=q_ids + g_ids))
        products.append(listed.multiply_adds)
    return runs, syncs, products


@pytest.mark.parametrize("scores", ["distinct", "binary codes"])
def test_run_depth_on_the_emulated_device_lists_the_cpus_run(scores, fake_cuda):
    """The device keeps its lists with no wait per block (``UnwaitedBest``), and compute()'s
    host syncs are those without run_depth: with distinct scores the lists are the run, from
    compute()'s ranking alone; where a block's cut may fall in a tie (binary codes), run()
    ranks again. The CPU's run either way."""
    runs, syncs, work = _on_the_emulated_device(fake_cuda, scores, False, 20, 70, 41)
    assert runs[0] == runs[1] == runs[2]
    # (whether the lists hold is read by run(), not by compute(): no sync added there)
    assert syncs[2] == syncs[1]
    assert (work[2] == 0) is (scores == "distinct")


@pytest.mark.parametrize("corpus", ["tensor", "npy file"])
@pytest.mark.parametrize("relevance", ["qrels", "labels"])
def test_a_fixed_galleries_query_updates_keep_the_runs_lists(corpus, relevance, tmp_path):
    """Query updates against a gallery given once are ranked together at compute(): with
    run_depth, that ranking keeps their lists, and run(k <= depth) lists them (queries
    deduplicated by id, in the order of their id codes, not the updates'; a query given twice
    kept once) with no product beyond compute()'s; the run and the values are those made
    without run_depth, and the dot product's the brute force (binary codes: ties at every
    cut)."""
    from work_counts import counting_work

    q, g = _codes(30, 6, 51), _codes(80, 6, 52)
    g_ids = [f"d{j}" for j in range(80)]
    order = [(7 * i) % 30 for i in range(30)]  # the queries given out of id order
    q_ids = [f"q{i:02d}" for i in range(30)]
    gallery: object = g
    if corpus == "npy file":
        np.save(tmp_path / "corpus.npy", g.numpy())
        gallery = str(tmp_path / "corpus.npy")
    options: dict = {"similarity": "dot"}
    if relevance == "qrels":
        options["qrels"] = {qid: {g_ids[(3 * i) % 80]: 1} for i, qid in enumerate(q_ids)}

    def fed(depth):
        metric = rm.RetrievalMetrics(["mrr", "ndcg@10"], run_depth=depth, **options)
        metric.set_gallery(gallery, None if relevance == "qrels" else torch.arange(80) % 6,
                           ids=g_ids)
        with counting_work() as work:
            for part in (order[:12], order[12:], order[3:5]):  # (two queries given twice)
                metric.update(q[part], None if relevance == "qrels" else torch.tensor(part) % 6,
                              ids=[q_ids[i] for i in part], role="query")
            values = metric.compute()
            run = metric.run(7, ids=q_ids + g_ids)
        return values, run, work.multiply_adds

    kept, plain = fed(7), fed(None)
    assert kept[1] == plain[1]
    for name, value in kept[0].items():
        assert torch.equal(value, plain[0][name]), name
    assert kept[2] < plain[2]
    with counting_work() as updates_only:
        metric = rm.RetrievalMetrics(["mrr", "ndcg@10"], **options)
        metric.set_gallery(gallery, None if relevance == "qrels" else torch.arange(80) % 6,
                           ids=g_ids)
        for part in (order[:12], order[12:], order[3:5]):
            metric.update(q[part], None if relevance == "qrels" else torch.tensor(part) % 6,
                          ids=[q_ids[i] for i in part], role="query")
        metric.compute()
    assert kept[2] == updates_only.multiply_adds
    brute = reference_top_k(q, g, 7, list(range(80)))
    assert sorted(kept[1]) == q_ids  # (each query once)
    for i, qid in enumerate(q_ids):
        assert kept[1][qid] == [(g_ids[j], s) for s, j in brute[i]], qid


@pytest.mark.parametrize("scores", ["distinct", "binary codes"])
def test_a_fixed_gallery_on_the_emulated_device_keeps_its_lists_without_a_wait(
    scores, fake_cuda
):
    """Query updates against a gallery given once, ranked together at compute(): on the
    device the lists are kept with no wait, the updates' and compute()'s host syncs those
    without run_depth. run() reads once whether every block's cut was sure: with distinct
    scores it lists the lists kept (no product), where a cut may fall in a tie (binary codes)
    it ranks again; the CPU's run either way."""
    runs, syncs, products = _on_the_emulated_device(fake_cuda, scores, True, 24, 90, 61)
    assert runs[0] == runs[1] == runs[2]
    assert syncs[2] == syncs[1]
    assert (products[2] == 0) is (scores == "distinct")


def test_run_depth_beyond_the_gallery_lists_every_item_from_the_lists_kept():
    """A gallery of 5 and run_depth=10: compute()'s ranking keeps lists of the 5, and run(8)
    lists them with no product, for a gallery given once and one given in updates."""
    from work_counts import counting_work

    q, d = _codes(6, 4, 71), _codes(5, 4, 72)
    q_ids, d_ids = [f"q{i}" for i in range(6)], [f"d{j}" for j in range(5)]
    qrels = {qid: {d_ids[i % 5]: 1} for i, qid in enumerate(q_ids)}
    brute = reference_top_k(q, d, 8, list(range(5)))
    for fixed in (True, False):
        metric = rm.RetrievalMetrics(["mrr"], qrels=qrels, similarity="dot", run_depth=10)
        if fixed:
            metric.set_gallery(d, ids=d_ids)
        else:
            metric.update(d, ids=d_ids, role="gallery")
        for part in (slice(0, 3), slice(3, 6)):
            metric.update(q[part], ids=q_ids[part], role="query")
        metric.compute()
        with counting_work() as work:
            run = metric.run(8, ids=q_ids + d_ids)
        assert work.multiply_adds == 0, fixed
        for i, qid in enumerate(q_ids):
            assert run[qid] == [(d_ids[j], s) for s, j in brute[i]], (fixed, qid)


def _half_run(similarity: str, corpus: str, depth, folder=None):
    """float16 queries and corpus of normal numbers, the metric on the emulated device
    (products on its tensor cores), one or two judged documents a query, the corpus given in
    updates, or with set_gallery (the queries in updates of 15) in the device's memory
    ("set_gallery"), in the host's ("host") or as a .npy file in ``folder`` ("npy"):
    compute()'s values, run(10), and the multiply-adds of each."""
    from work_counts import counting_work

    gen = torch.Generator().manual_seed(7)
    nq, ng = 40, 3000
    q = torch.randn(nq, 16, generator=gen).to(torch.float16)
    g = torch.randn(ng, 16, generator=gen).to(torch.float16)
    q_ids, g_ids = [f"q{i}" for i in range(nq)], [f"d{j}" for j in range(ng)]
    qrels = {qid: {g_ids[(97 * i) % ng]: 1, g_ids[(31 * i + 3) % ng]: 2}
             for i, qid in enumerate(q_ids)}
    metric = rm.RetrievalMetrics(["mrr", "ndcg@10", "recall@5"], qrels=qrels,
                                 similarity=similarity, run_depth=depth).to("cuda")
    with counting_work() as ranked:
        if corpus == "updates":
            metric.update(g.to("cuda"), ids=g_ids, role="gallery")
            metric.update(q.to("cuda"), ids=q_ids, role="query")
        else:
            given = {"set_gallery": lambda: g.to("cuda"), "host": lambda: g}.get(corpus)
            if given is None:
                np.save(folder / "corpus.npy", g.numpy())
            metric.set_gallery(str(folder / "corpus.npy") if given is None else given(),
                               ids=g_ids)
            for part in torch.arange(nq).split(15):
                metric.update(q[part].to("cuda"), ids=[q_ids[i] for i in part], role="query")
        values = metric.compute()
    with counting_work() as listed:
        run = metric.run(10, ids=q_ids + g_ids)
    return values, run, ranked.multiply_adds, listed.multiply_adds


@pytest.mark.parametrize("corpus", ["updates", "set_gallery"])
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("folded", [False, True])
def test_run_depth_keeps_the_lists_of_half_rows_on_the_tensor_cores(
    corpus, similarity, folded, fake_cuda, monkeypatch
):
    """Half rows are multiplied on the device's tensor cores. Their one-sided pass counts
    cosine's scores without each query's factor; the lists kept take the true cosines top_k
    lists, from each block's product before its factors (where the counting folds the column
    factor as it reads the block, as Triton's does, too: ``folded``): run(10) lists them with
    no product, the run top_k makes without run_depth, and the values are the same, from as
    many products."""
    from retrieval_metrics.functional.ranking.engine import counters

    if folded:
        if similarity != "cosine":
            pytest.skip("only cosine's factors are folded into the count")
        monkeypatch.setattr(counters.TorchDeviceCounter, "folds_column_factor", True)
    _half_run(similarity, corpus, None)  # (the device's abilities asked once, by products)
    plain = _half_run(similarity, corpus, None)
    kept = _half_run(similarity, corpus, 12)
    assert kept[1] == plain[1]
    for name, value in kept[0].items():
        assert torch.equal(value, plain[0][name]), name
    assert kept[3] == 0 < plain[3]
    assert kept[2] == plain[2]


@pytest.mark.parametrize("corpus", ["host", "npy"])
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_a_half_corpus_off_the_device_lists_the_run_its_ranking_counted(
    corpus, similarity, fake_cuda, tmp_path
):
    """The metric on the device, a float16 corpus held in the host's memory or on disk. The
    host's corpus is ranked on the host (the queries go there), and run() lists it there too:
    it listed on the device, with other scores than those counted (and under cosine failed,
    mixing devices). A file is read onto the device, a block at a time, and multiplied on its
    tensor cores; under cosine its norms are computed as the pass reads it, otherwise than
    top_k computes them, so that pass keeps no lists and run() ranks again. The run is the
    same with or without run_depth, and so are the values."""
    _half_run(similarity, corpus, None, tmp_path)  # (the device's abilities asked once)
    plain = _half_run(similarity, corpus, None, tmp_path)
    kept = _half_run(similarity, corpus, 12, tmp_path)
    assert kept[1] == plain[1]
    for name, value in kept[0].items():
        assert torch.equal(value, plain[0][name]), name
    assert (kept[3] > 0) is (corpus == "npy" and similarity == "cosine")
    assert len(kept[1]) == 40 and all(len(items) == 10 for items in kept[1].values())


def test_the_lists_kept_for_a_fixed_gallery_are_top_ks_in_the_order_given():
    """run_depth with a gallery given once, the queries in three updates, one id given twice
    (the same query again, as a sampler's padding repeats it): run() before compute() ranks
    once, keeping the lists, and compute() ranks nothing more; kept_lists(k) gives each row
    given its top_k, the repeat's rows its first copy's."""
    from work_counts import counting_work

    gen = torch.Generator().manual_seed(5)
    gallery = torch.randn(300, 8, generator=gen)
    g_labels = torch.arange(300) % 20
    queries = torch.randn(30, 8, generator=gen)
    q_labels = torch.arange(30) % 20
    q_ids = torch.arange(100, 130)
    def fed(**options):
        metric = rm.RetrievalMetrics(["mrr", "recall@10"], **options)
        metric.set_gallery(gallery, g_labels)
        for rows in [slice(0, 7), slice(7, 19), slice(19, 30), slice(3, 4)]:  # (3: a repeat)
            metric.update(queries[rows], q_labels[rows], role="query", ids=q_ids[rows])
        return metric

    metric = fed(run_depth=12)
    with counting_work() as work:
        run = metric.run(10)
        values = metric.compute()
    with counting_work() as alone:
        fed().compute()
    assert work.rankings == 1 and work.multiply_adds == alone.multiply_adds
    given = torch.cat([queries, queries[3:4]])
    expected = top_k(given, gallery, 10, similarity="cosine")
    rows, scores = metric.kept_lists(10)
    assert torch.equal(rows, expected.indices)
    assert torch.equal(scores, expected.scores)
    assert run["103"] == [(str(int(r)), float(s)) for r, s in zip(
        expected.indices[3].tolist(), expected.scores[3].tolist(), strict=True)]
    plain = rm.RetrievalMetrics(["mrr", "recall@10"])
    plain.update(queries, q_labels, role="query", ids=q_ids)
    plain.update(gallery, g_labels, role="gallery")
    assert {k: float(v) for k, v in values.items()} == {
        k: float(v) for k, v in plain.compute().items()}
    assert metric.kept_lists(13) is None  # (deeper than run_depth)
