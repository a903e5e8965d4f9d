"""top_k (each query's K best items, what a run lists) against a brute force: every score in a
Python list, sorted by (-score, tie key). Binary codes ranked by dot product give exact, heavily
tied integer scores, so the tie rule decides most places; blocks of any size give the same
lists. Runs written in TREC, JSON and JSONL read back by this library and by pytrec_eval."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
from reference import reference_top_k
from retrieval_metrics.formats import read_run, read_trec_run, write_run
from retrieval_metrics.functional.ranking import top_lists
from retrieval_metrics.functional.ranking.engine import kernels, running_best
from retrieval_metrics.functional.ranking.engine.counters import COUNTER_ENV, choose_counter
from retrieval_metrics.functional.ranking.top_lists import top_k

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    ),
]


def _codes(n, dim, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (n, dim), generator=gen).float()


def _check(found, brute, k):
    width = found.indices.shape[1]
    assert width <= k
    for i, pairs in enumerate(brute):
        rows = [r for r in found.indices[i].tolist() if r >= 0]
        assert rows == [j for _, j in pairs][:width], f"query {i}"
        scores = found.scores[i, : len(rows)].tolist()
        assert scores == [s for s, _ in pairs][: len(rows)]


@settings(max_examples=25, deadline=None)
@given(
    nq=st.integers(1, 12), ng=st.integers(1, 40), dim=st.integers(1, 6), k=st.integers(1, 45),
    seed=st.integers(0, 10_000), block=st.integers(1, 9),
)
def test_binary_codes_full_of_ties_by_position_any_blocks(nq, ng, dim, k, seed, block):
    q, g = _codes(nq, dim, seed), _codes(ng, dim, seed + 1)
    brute = reference_top_k(q, g, k, list(range(ng)))
    saved = top_lists.BLOCK_G, top_lists.BLOCK_ENTRIES
    try:
        top_lists.BLOCK_G, top_lists.BLOCK_ENTRIES = block, block * 2
        _check(top_k(q, g, k, similarity="dot"), brute, k)
    finally:
        top_lists.BLOCK_G, top_lists.BLOCK_ENTRIES = saved
    _check(top_k(q, g, k, similarity="dot"), brute, k)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_copies_tie_wherever_their_block_falls_whatever_queries_come_with(similarity, device):
    # Real-valued scores: a BLAS rounds a score by the kernel of the panel its row and column
    # fell in. Copies of ten documents in the narrower last gallery block scored a unit in the
    # last place off their originals (listed out of tie order), and a query's scores depended
    # on how many queries were listed with it, unless every product has the ranking's shape.
    gen = torch.Generator().manual_seed(0)
    originals = torch.arange(5, 15)
    g = torch.randn(top_lists.BLOCK_G + 10, 768, generator=gen)
    copies = torch.arange(top_lists.BLOCK_G, top_lists.BLOCK_G + 10)
    g[copies] = g[originals]
    q = torch.cat([g[originals], torch.randn(40, 768, generator=gen)])
    q += 0.5 * torch.randn(q.shape, generator=gen)
    q, g = q.to(device), g.to(device)  # (on CUDA: cuBLAS picks its kernels by shape too)
    every = top_k(q, g, 3, similarity=similarity)
    for count in (1, 3, 5, 10):
        some = top_k(q[:count], g, 3, similarity=similarity)
        assert torch.equal(some.scores, every.scores[:count]), count
        assert torch.equal(some.indices, every.indices[:count]), count
    for i, (original, copy) in enumerate(zip(originals.tolist(), copies.tolist(), strict=True)):
        rows = every.indices[i].tolist()
        assert rows[:2] == [original, copy], (i, rows)  # tied, in gallery order
        assert every.scores[i, 0] == every.scores[i, 1], i


def test_ties_by_id_order_strings_by_code_point():
    q, g = _codes(9, 3, 0), _codes(30, 3, 1)
    ids = [f"doc{(j * 7) % 30}" for j in range(30)]
    key = {j: ids[j] for j in range(30)}  # Python's order of the strings: "doc10" < "doc9"
    found = top_k(q, g, 12, similarity="dot", ties="id", gallery_ids=ids)
    _check(found, reference_top_k(q, g, 12, key), 12)
    by_position = top_k(q, g, 12, similarity="dot")
    assert found.indices.tolist() != by_position.indices.tolist()  # the rule decides


def test_same_source_never_lists_the_query_and_identical_ids_are_left_out():
    x = _codes(25, 4, 3)
    excluded = {(i, i) for i in range(25)}
    found = top_k(x, None, 30, similarity="dot")
    assert found.indices.shape == (25, 24) and (found.indices >= 0).all()
    _check(found, reference_top_k(x, x, 30, list(range(25)), excluded), 30)
    q, g = _codes(6, 4, 4), _codes(20, 4, 5)
    q_ids, g_ids = [f"d{i * 3}" for i in range(6)], [f"d{j}" for j in range(20)]
    excluded = {(i, 3 * i) for i in range(6) if 3 * i < 20}
    found = top_k(q, g, 20, similarity="dot", query_ids=q_ids, gallery_ids=g_ids,
                  exclude_identical_ids=True)
    _check(found, reference_top_k(q, g, 20, list(range(20)), excluded), 20)
    # every place past the items left: -1 and -inf
    assert (found.indices[:, -1] == -1).sum() == len(excluded)
    assert torch.isneginf(found.scores[found.indices == -1]).all()


def test_cosine_and_euclidean_in_float64():
    gen = torch.Generator().manual_seed(0)
    q, g = torch.randn(7, 5, generator=gen, dtype=torch.float64), torch.randn(
        50, 5, generator=gen, dtype=torch.float64)
    cos = (q / q.norm(dim=1, keepdim=True)) @ (g / g.norm(dim=1, keepdim=True)).T
    found = top_k(q, g, 10)
    assert found.indices.tolist() == cos.argsort(dim=1, descending=True)[:, :10].tolist()
    assert torch.allclose(found.scores, cos.sort(dim=1, descending=True).values[:, :10])
    squared = torch.cdist(q, g) ** 2
    found = top_k(q, g, 10, similarity="euclidean")
    assert found.indices.tolist() == squared.argsort(dim=1)[:, :10].tolist()
    # the ranking's score: |q|^2 - |q - g|^2
    shifted = (q * q).sum(1, keepdim=True) - squared.sort(dim=1).values[:, :10]
    assert torch.allclose(found.scores, shifted)


def test_euclidean_near_copies_keep_the_rankings_order():
    # near-copies of the query (a unit in the last place apart): shifted by |q|^2 and clamped
    # at 0 they were written tied at 0.0 where the ranking told them apart, and a reader
    # re-sorting the run by score lost the ranking's order
    separated = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        q = rng.normal(size=(1, 16)).astype(np.float32)
        near = [q[0] * (1 + 3e-7 * rng.normal(size=16)) for _ in range(2)]
        g = torch.from_numpy(np.stack([*near, rng.normal(size=16)]).astype(np.float32))
        found = top_k(torch.from_numpy(q), g, 3, similarity="euclidean")
        for item in (0, 1):
            # the metric's rank of each near-copy, counted apart under both tie rules
            ranks = []
            for ties in ("optimistic", "pessimistic"):
                metric = rm.MRR(similarity="euclidean", ties=ties)
                metric.update(torch.from_numpy(q), torch.tensor([0]), role="query")
                metric.update(g, torch.tensor([0 if j == item else -1 for j in range(3)]),
                              role="gallery")
                ranks.append(round(1 / float(metric.compute())))
            if ranks[0] == ranks[1]:  # the ranking puts it apart: so must the run
                separated += 1
                place = found.indices[0].tolist().index(item)
                assert place == ranks[0] - 1, seed
                scores = found.scores[0].tolist()
                assert scores.count(scores[place]) == 1, (seed, scores)
    assert separated


def test_half_precision_lists_as_its_float32_values():
    gen = torch.Generator().manual_seed(1)
    q, g = torch.randn(20, 16, generator=gen).half(), torch.randn(300, 16, generator=gen).half()
    a, b = top_k(q, g, 25), top_k(q.float(), g.float(), 25)
    assert torch.equal(a.indices, b.indices) and torch.equal(a.scores, b.scores)


@pytest.mark.parametrize("on_disk", [False, True], ids=["tensor", "npy"])
@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_rows_found_short_or_overflowing_as_read_are_listed_again(similarity, on_disk, tmp_path):
    """The gallery's norms are computed as its blocks are read (no pass of their own; under dot
    for a corpus on disk, whose scan for NaN they are): a non-zero row too short for its
    squares (cosine rescales it) or one whose squares overflow float32 (read as zeros until
    its norm is known) makes top_k list again from the path that takes it, so the lists are
    those of a float64 brute force: the short row is the direction of its float64 unit row,
    the large one scores its dot product."""
    gen = torch.Generator().manual_seed(4)
    q, g = torch.randn(5, 4, generator=gen), torch.randn(30, 4, generator=gen)
    g[3] *= 1e-30  # (squares below float32's smallest: a norm of 0 for non-zero values)
    g[11] = 1e-30 * q[0] if similarity == "cosine" else 1e20 * q[0]
    wide_q, wide_g = q.double(), g.double()
    if similarity == "cosine":
        wide_g = wide_g / wide_g.norm(dim=1, keepdim=True)
        wide_q = wide_q / wide_q.norm(dim=1, keepdim=True)
    scores = wide_q @ wide_g.T
    np.save(tmp_path / "g.npy", g.numpy())
    found = top_k(q, str(tmp_path / "g.npy") if on_disk else g, 6, similarity=similarity)
    assert found.indices.tolist() == scores.argsort(dim=1, descending=True)[:, :6].tolist()
    assert found.indices[0, 0] == 11


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"k": 0}, "`k` must be a positive int"), ({"k": 3, "ties": "expected"}, "`ties`"),
     ({"k": 3, "ties": "id"}, "give `gallery_ids`"),
     ({"k": 3, "exclude_identical_ids": True}, "needs `query_ids` and `gallery_ids`")],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        top_k(torch.ones(2, 3), torch.ones(4, 3), **kwargs)


@pytest.mark.parametrize("suffix", [".txt", ".json", ".jsonl"])
def test_runs_written_read_back_by_us_and_by_pytrec_eval(suffix, tmp_path):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    q, g = _codes(8, 5, 6), _codes(40, 5, 7)
    q_ids, g_ids = [f"q{i}" for i in range(8)], [f"d{j:02d}" for j in range(40)]
    run = top_k(q, g, 15, similarity="dot").run(q_ids, g_ids)
    path = write_run(run, tmp_path / f"run{suffix}")
    lists, _ = read_run(path)
    # our reader orders ties as trec_eval does (document id descending); the sets of each
    # score are the written ones
    for qid, pairs in run.items():
        assert sorted(lists[qid]) == sorted(d for d, _ in pairs)
        scores = dict(pairs)
        assert [scores[d] for d in lists[qid]] == sorted(scores.values(), reverse=True)
    if suffix == ".json":
        as_read = json.loads(path.read_text())
    elif suffix == ".txt":
        as_read = read_trec_run(path)
    else:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        as_read = {x["id"]: dict(zip(x["retrieved"], x["scores"], strict=True)) for x in lines}
    assert as_read == {qid: dict(pairs) for qid, pairs in run.items()}
    qrels = {qid: {g_ids[(i * 5 + j) % 40]: 1 + j % 2 for j in range(3)}
             for i, qid in enumerate(q_ids)}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recip_rank"})
    theirs = evaluator.evaluate(as_read)
    ours = evaluator.evaluate({qid: dict(pairs) for qid, pairs in run.items()})
    assert theirs == ours and len(theirs) == 8
    assert np.mean([v["ndcg_cut_10"] for v in theirs.values()]) > 0  # something was retrieved


def test_write_run_refuses_what_a_run_cannot_hold(tmp_path):
    with pytest.raises(ValueError, match="lists document 'd1' twice"):
        write_run({"q": [("d1", 1.0), ("d1", 0.5)]}, tmp_path / "r.txt")
    with pytest.raises(ValueError, match="words without spaces"):
        write_run({"q 1": [("d1", 1.0)]}, tmp_path / "r.txt")
    with pytest.raises(ValueError, match="the score inf"):
        write_run({"q": [("d1", float("inf"))]}, tmp_path / "r.json")


@pytest.mark.parametrize("num_ids", [2, 5])
def test_ids_of_the_wrong_length_under_ties_by_id_are_refused(num_ids):
    """Two ids for four items ranked two of them only (the best item was never listed); five
    raised an IndexError (found by an audit)."""
    q = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    g = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [0.1, 0.1]])
    ids = [f"d{i}" for i in range(num_ids)]
    message = f"`gallery_ids` must hold one id per gallery item \\(4\\), got {num_ids}"
    with pytest.raises(ValueError, match=message):
        top_k(q, g, 2, similarity="dot", ties="id", gallery_ids=ids)


@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_a_run_multiplies_each_query_by_the_corpus_once(similarity):
    # the run's work held to its plan: every query block times every gallery block once, at
    # the ranking's padded shapes (50 queries: 56 rows; 10,000 items: 3 blocks of BLOCK_G;
    # euclidean's extra column), however many items enter the lists block after block
    from work_counts import counting_work

    gen = torch.Generator().manual_seed(0)
    q, g = torch.randn(50, 64, generator=gen), torch.randn(10_000, 64, generator=gen)
    with counting_work() as work:
        top_k(q, g, 100, similarity=similarity)
    width = 64 + (similarity == "euclidean")
    assert work.multiply_adds == 56 * 3 * top_lists.BLOCK_G * width


@settings(max_examples=150, deadline=None)
@given(
    rows=st.integers(1, 12),
    ld=st.integers(1, 300),
    cut=st.floats(0.0, 1.0),
    width=st.integers(0, 40),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_compiled_entering_items_are_those_above_each_rows_kth(rows, ld, cut, width, dtype,
                                                                   seed):
    """kernels.entering_compiled (top_k's later blocks on the CPU: the items scoring above each
    row's K-th kept score) against a brute force of torch's compares: scores from a few values
    (ties with the K-th, which stay out), -inf (excluded items) among them, only the first n
    columns of each row read, and None exactly where a row has more than ``width``."""
    gen = torch.Generator().manual_seed(seed)
    levels = torch.tensor([float("-inf"), -1.0, 0.0, 0.5, 1.0, 2.0], dtype=dtype)
    block = levels[torch.randint(0, 6, (rows, ld), generator=gen)]
    kth = levels[torch.randint(0, 6, (rows, 1), generator=gen)]
    n = round(cut * ld)
    got = kernels.entering_compiled(block, n, kth, width)
    above = block[:, :n] > kth
    if int(above.sum(1).max()) > width:
        assert got is None
        return
    assert got is not None
    per_row, cols = got
    assert per_row.tolist() == above.sum(1).tolist()
    for i in range(rows):
        assert cols[i, : per_row[i]].tolist() == torch.nonzero(above[i]).view(-1).tolist()


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(64, 300),
    extra=st.integers(0, 100),
    width=st.integers(0, 40),
    threads=st.integers(2, 5),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_entering_items_shared_over_threads_are_one_threads(n, extra, width, threads, dtype,
                                                                seed):
    """The entering items of a block's rows shared out over several of torch's threads (rows
    for two takes of a thread and more): one thread's counts and columns, row for row, and -1
    exactly where one thread finds a row of more than ``width`` (whichever thread meets it; the
    rows then stay unread)."""
    module = kernels._count
    if not module.shares_rows():
        assert not sys.platform.startswith("linux"), "torch's OpenMP pool was not found"
        pytest.skip("this platform's passes run on one thread")
    rows = 2 * max(module.ROW_GRAIN, module.TAKE_VALUES // n) + extra
    rng = np.random.default_rng(seed)
    levels = np.array([-np.inf, -1.0, 0.0, 0.5, 1.0, 2.0], dtype=dtype)
    # (mostly low scores: most rows fit in ``width``, some do not)
    block = levels[rng.choice(6, (rows, n + 5), p=[0.3, 0.3, 0.3, 0.08, 0.015, 0.005])]
    kth = levels[rng.integers(2, 6, (rows, 1))]
    found = []
    for team in (1, threads):
        per_row = np.zeros(rows, dtype=np.int64)
        cols = np.zeros((rows, width), dtype=np.int64)
        total = module.entering(block, kth, n, width, per_row, cols, threads=team)
        found.append((total, per_row, cols))
    (total, per_row, cols), (shared_total, shared_per_row, shared_cols) = found
    assert total == shared_total
    if total < 0:
        return
    np.testing.assert_array_equal(per_row, shared_per_row)
    np.testing.assert_array_equal(per_row, (block[:, :n] > kth).sum(1))
    for i in range(rows):
        np.testing.assert_array_equal(cols[i, : per_row[i]], shared_cols[i, : per_row[i]])


@pytest.mark.parametrize("k", [1, 10, 100])
def test_top_k_lists_alike_with_the_compiled_entering_and_without(k, monkeypatch):
    """The same lists (scores and items, ties by position) whether the items entering a
    block's rows are found by the compiled pass or by torch's compares: binary codes by dot
    product, scores full of ties, in blocks of 256 items."""
    codes = _codes(3000, 16, seed=4)
    query = codes[:40]
    monkeypatch.setattr(top_lists, "BLOCK_G", 256)
    compiled = top_k(query, codes, k, similarity="dot")
    monkeypatch.setattr(kernels, "compiles_entering", lambda s: False)
    plain = top_k(query, codes, k, similarity="dot")
    assert torch.equal(compiled.indices, plain.indices)
    assert torch.equal(compiled.scores, plain.scores)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(1, 6),
    widths=st.lists(st.integers(1, 30), min_size=1, max_size=12),
    width=st.integers(1, 20),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    kind=st.sampled_from(["compiled", "compares", "unwaited", "exact"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_running_lists_keep_each_rows_best_in_tie_order(rows, widths, width, dtype, kind,
                                                            seed):
    """running_best's lists (top_k's, block after block) against a brute force: every score of
    every block in one list per row, sorted by score with Python's stable sort (ties in column
    order), cut to ``width``. Blocks of any width (more than ``width`` items entering a row at
    once, a few at a time, none), scores from a few values (ties with the kept lists' worst,
    -0.0 beside 0.0, -inf for excluded items), each block's product wider than its items (the
    padding columns never listed). RunningBest with the compiled pass and with torch's
    compares; an accelerator's: UnwaitedBest (each block's best by torch.topk, which breaks
    ties at a cut as it likes) in every row it does not mark unsure, and with exact=True (the
    columns tied at each block's cut taken smallest first) in every row, none marked."""
    if kind in ("unwaited", "exact"):
        def lists(*args):
            return running_best.UnwaitedBest(*args, exact=kind == "exact")

        unsure = _check_running_lists(rows, widths, width, dtype, seed, lists)
        assert kind == "unwaited" or not any(unsure)
        return
    with pytest.MonkeyPatch.context() as patch:
        if kind == "compares":
            patch.setattr(kernels, "compiles_entering", lambda s: False)
        _check_running_lists(rows, widths, width, dtype, seed)


def _check_running_lists(rows, widths, width, dtype, seed, kind=None):
    gen = torch.Generator().manual_seed(seed)
    levels = torch.tensor([float("-inf"), -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0], dtype=dtype)
    best = (kind or running_best.RunningBest)(rows, width, dtype, torch.device("cpu"),
                                              choose_counter("cpu"))
    masks = torch.empty(3 * rows * max(widths), dtype=torch.bool)
    every: list[list[tuple[float, int]]] = [[] for _ in range(rows)]
    g0 = 0
    for n in widths:
        # later blocks score higher on the whole: items keep entering lists already full
        shift = torch.randint(0, 3, (rows, 1), generator=gen)
        picks = (torch.randint(0, 6, (rows, n + 3), generator=gen) + shift).clamp_max(7)
        product = levels[picks].contiguous()
        s = product[:, :n]
        for i in range(rows):
            every[i] += [(v, g0 + j) for j, v in enumerate(s[i].tolist())]
        best.add(s, g0, masks, product)
        g0 += n
    scores, cols = best.lists()
    # (UnwaitedBest: the rows it is sure of; the others are listed again)
    unsure = getattr(best, "unsure", torch.zeros(rows, dtype=torch.bool)).tolist()
    for i in range(rows):
        if unsure[i]:
            continue
        expected = sorted(every[i], key=lambda pair: -pair[0])[:width]
        assert scores[i].tolist() == [v for v, _ in expected]
        finite = [c for v, c in expected if v != float("-inf")]
        assert cols[i, : len(finite)].tolist() == finite
    return unsure


@settings(max_examples=100, deadline=None)
@given(
    rows=st.integers(1, 6),
    widths=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    width=st.integers(1, 20),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_lists_kept_without_host_waits_are_sure_of_distinct_scores(rows, widths, width,
                                                                       seed):
    """Where no two of a row's scores tie (nor its -inf excluded items, which are never
    listed), UnwaitedBest is sure of every row, and its lists are the brute force's."""
    gen = torch.Generator().manual_seed(seed)
    best = running_best.UnwaitedBest(rows, width, torch.float32, torch.device("cpu"))
    every: list[list[tuple[float, int]]] = [[] for _ in range(rows)]
    g0 = 0
    for n in widths:
        s = torch.randperm(rows * n, generator=gen).view(rows, n).float()
        s[torch.rand(rows, n, generator=gen) < 0.2] = float("-inf")
        for i in range(rows):
            every[i] += [(v, g0 + j) for j, v in enumerate(s[i].tolist()) if v > float("-inf")]
        best.add(s, g0)
        g0 += n
    assert not best.unsure.any()
    scores, cols = best.lists()
    for i in range(rows):
        expected = sorted(every[i], key=lambda pair: -pair[0])[:width]
        assert scores[i, : len(expected)].tolist() == [v for v, _ in expected]
        assert cols[i, : len(expected)].tolist() == [c for _, c in expected]


@settings(max_examples=30, deadline=None)
@given(
    nq=st.integers(1, 12), ng=st.integers(1, 300), dim=st.integers(1, 6),
    k=st.integers(1, 45), seed=st.integers(0, 10_000), codes=st.booleans(),
    budget=st.sampled_from([None, 1 << 12, 1 << 14]), ties=st.sampled_from(["position", "id"]),
)
def test_top_k_without_host_waits_lists_as_a_brute_force(nq, ng, dim, k, seed, codes, budget,
                                                         ties):
    """top_k with an accelerator's lists (torch's whole-block counter, here on the CPU): each
    query block listed by UnwaitedBest, the blocks holding a tie at a cut listed again with
    exact=True; binary codes (ties everywhere) and real scores, the device's blocks or a budget
    of a few blocks, ties by position and by id: the brute force's lists."""
    gen = torch.Generator().manual_seed(seed)
    if codes:
        q, g = _codes(nq, dim, seed), _codes(ng, dim, seed + 1)
    else:
        q, g = torch.randn(nq, dim, generator=gen), torch.randn(ng, dim, generator=gen)
    ids = [f"d{j:04d}" for j in torch.randperm(ng, generator=gen).tolist()]
    options = {"similarity": "dot", "ties": ties, "gallery_ids": ids}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(COUNTER_ENV, "torch")
        found = top_k(q, g, k, memory_budget=budget, **options)
    if codes:
        order = sorted(range(ng), key=lambda j: ids[j])
        key = list(range(ng)) if ties == "position" else [order.index(j) for j in range(ng)]
        _check(found, reference_top_k(q, g, k, key), k)
    else:  # (float32 scores of real values: the CPU's lists of the same products)
        expected = top_k(q, g, k, **options)
        assert torch.equal(found.indices, expected.indices)
        assert torch.equal(found.scores, expected.scores)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("similarity", ["dot", "euclidean", "cosine"])
def test_half_rows_on_a_device_are_multiplied_on_its_tensor_cores(dtype, similarity,
                                                                  monkeypatch):
    """top_k of half-precision rows on the emulated device: every block a product of the half
    rows with float32 results (tensor_cores.HalfProducts, as the ranking multiplies them), not
    of float32 copies. Integer entries (exact products) list as the CPU's upcast rows do;
    cosine's factors per pair give true cosines, within rounding of a float64 brute force, the
    same items. A row whose norm is out of the tensor cores' bounds keeps the float32 path."""
    from emulated_cuda import emulated_cuda
    from retrieval_metrics.functional.ranking.engine import tensor_cores

    calls = [0]
    product = tensor_cores.HalfProducts.product

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return product(self, *args, **kwargs)

    monkeypatch.setattr(tensor_cores.HalfProducts, "product", counted)
    gen = torch.Generator().manual_seed(5)
    if similarity == "cosine":
        q, g = torch.randn(40, 16, generator=gen), torch.randn(3000, 16, generator=gen)
    else:
        q = torch.randint(-3, 4, (40, 16), generator=gen).float()
        g = torch.randint(-3, 4, (3000, 16), generator=gen).float()
    q, g = q.to(dtype), g.to(dtype)
    expected = top_k(q, g, 15, similarity=similarity)
    with emulated_cuda():
        found = top_k(q.cuda(), g.cuda(), 15, similarity=similarity, memory_budget=1 << 16)
        indices, scores = found.indices.cpu(), found.scores.cpu()
    assert calls[0] > 1  # (several blocks, each on the tensor cores)
    assert torch.equal(indices, expected.indices)
    if similarity == "cosine":
        exact = torch.nn.functional.normalize(q.double()) @ torch.nn.functional.normalize(
            g.double()).T
        assert torch.allclose(scores.double(), exact.gather(1, indices), atol=1e-6, rtol=0)
    else:
        assert torch.equal(scores, expected.scores)
    if dtype == torch.bfloat16 and similarity == "cosine":
        calls[0] = 0
        g[7] *= 1e20  # (its squares overflow float32's sums on the tensor cores' path)
        expected = top_k(q, g, 15, similarity=similarity)
        with emulated_cuda():
            found = top_k(q.cuda(), g.cuda(), 15, similarity=similarity)
            assert torch.equal(found.indices.cpu(), expected.indices)
            assert torch.equal(found.scores.cpu(), expected.scores)
        assert calls[0] == 0


def test_a_runs_lines_make_every_kind_of_id_text():
    """TopK.lines names each listed item by the text of its id, made for every entry at once:
    str ids in a list or an array, integers in a tensor, an array, a list, numpy integers and
    0-d tensors in a list (their numbers, not "tensor(5)" as before), each query's pairs best
    first with their scores."""
    q, g = _codes(6, 4, 3), _codes(30, 4, 4)
    found = top_k(q, g, 5, similarity="dot")
    numbers = [7 * j + 1 for j in range(30)]
    kinds = [
        [f"d{n}" for n in numbers], np.array([f"d{n}" for n in numbers]), torch.tensor(numbers),
        np.array(numbers), numbers, [np.int64(n) for n in numbers],
        [torch.tensor(n) for n in numbers],
    ]
    queries = [f"q{i}" for i in range(6)]
    for ids in kinds:
        lines = dict(found.lines(queries, ids))
        assert list(lines) == queries
        for i, qid in enumerate(queries):
            rows = [r for r in found.indices[i].tolist() if r >= 0]
            names = [str(ids[r].item() if hasattr(ids[r], "item") else ids[r]) for r in rows]
            assert lines[qid] == list(zip(names, found.scores[i, : len(rows)].tolist(),
                                          strict=True))
            assert all(type(name) is str for name, _ in lines[qid])
