"""The qrels input form: queries and a corpus scored against judgments (docs/definitions.md,
"Judgments"), each rule on a hand-worked case, and every measure against a brute-force reference
that scores every document (``reference_judged``), on the host and on the emulated CUDA device."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
from emulated_cuda import fake_cuda_fixture  # noqa: F401
from reference import reference_judged
from retrieval_metrics.formats import read_qrels
from retrieval_metrics.functional.ranking import Exchange
from retrieval_metrics.functional.ranking.sharded import rank_embeddings_sharded

# Four documents on the unit circle and a query at angle 0: cosine order d0, d1, d2, d3.
ANGLES = {"d0": 0.1, "d1": 0.5, "d2": 1.0, "d3": 2.0, "d4": 2.5}


def _unit(angle: float) -> list[float]:
    return [math.cos(angle), math.sin(angle)]


def _corpus(names=("d0", "d1", "d2", "d3")):
    return torch.tensor([_unit(ANGLES[n]) for n in names], dtype=torch.float64), list(names)


def _metric(names, qrels, **options):
    m = rm.RetrievalMetrics(names, qrels=qrels, **options)
    m.set_dtype(torch.float64)
    return m


def test_hand_worked_values_with_a_missing_document_and_grades():
    docs, doc_ids = _corpus()
    # q1 finds d0 d1 d2 d3 in that order; judged: d1 (grade 2), d3 (1), dx (3, not in corpus)
    qrels = {"q1": {"d1": 2, "d3": 1, "dx": 3}}
    m = _metric(["recall@2", "mrr", "map", "ndcg@4", "precision@2", "r_precision"], qrels,
                gain="linear")
    m.update(torch.tensor([_unit(0.0)], dtype=torch.float64), ids=["q1"], role="query")
    m.update(docs, ids=doc_ids, role="gallery")
    values = {k: float(v) for k, v in m.compute().items()}
    # ranks of the relevant documents: 2 and 4; dx is relevant and never retrieved: m = 3
    assert values["recall@2"] == pytest.approx(1 / 3, abs=1e-15)
    assert values["mrr"] == pytest.approx(1 / 2, abs=1e-15)
    assert values["map"] == pytest.approx((1 / 2 + 2 / 4) / 3, abs=1e-15)
    assert values["precision@2"] == pytest.approx(1 / 2, abs=1e-15)
    assert values["r_precision"] == pytest.approx(1 / 3, abs=1e-15)
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)  # dx's grade 3 included
    assert values["ndcg@4"] == pytest.approx(dcg / idcg, abs=1e-15)
    summary = m.summary()
    assert summary.notes["judged documents not in the corpus"] == 1
    assert "judged documents not in the corpus: 1" in str(summary)


def test_exponential_gain_is_the_default():
    docs, doc_ids = _corpus()
    m = _metric(["ndcg@2"], {"q": {"d0": 2, "d1": 3}})
    m.update(torch.tensor([_unit(0.0)], dtype=torch.float64), ids=["q"], role="query")
    m.update(docs, ids=doc_ids, role="gallery")
    dcg = 3 / 1 + 7 / math.log2(3)
    idcg = 7 / 1 + 3 / math.log2(3)
    assert float(m.compute()["ndcg@2"]) == pytest.approx(dcg / idcg, abs=1e-15)


def test_grade_zero_is_not_relevant_and_ids_compare_as_text():
    docs = torch.tensor([_unit(ANGLES[n]) for n in ("d0", "d1", "d2")], dtype=torch.float64)
    # integer ids 10, 11, 12; qrels name them as text and as ints; 10 is judged grade 0
    qrels = {"7": {10: 0, "11": 1}, 8: {"10": -1}}
    m = _metric(["mrr", "recall@1"], qrels)
    m.update(torch.tensor([_unit(0.0), _unit(0.0)], dtype=torch.float64), ids=[7, "8"],
             role="query")
    m.update(docs, ids=torch.tensor([10, 11, 12]), role="gallery")
    values = m.compute()
    # query 7: only 11 relevant, ranked 2nd; query 8: nothing relevant (skipped)
    assert float(values["mrr"]) == 0.5 and float(values["recall@1"]) == 0.0
    rows = m.summary().as_dict()
    assert rows["mrr"]["queries"] == 1 and rows["mrr"]["skipped"] == 1


def test_queries_without_judgments_and_judged_queries_never_given():
    docs, doc_ids = _corpus()
    qrels = {"q1": ["d0"], "q2": ["d2"], "q3": ["d1"], "q4": []}
    queries = torch.tensor([_unit(0.0), _unit(0.0), _unit(0.0)], dtype=torch.float64)
    m = _metric(["hit_rate@1"], qrels)
    m.update(queries, ids=["q1", "q2", "unjudged"], role="query")
    m.update(docs, ids=doc_ids, role="gallery")
    assert float(m.compute()["hit_rate@1"]) == 0.5  # q1 hits, q2 misses; "unjudged" skipped
    notes = m.summary().notes
    assert notes["queries without judgments"] == 1
    assert notes["judged queries not given"] == 2  # q3, and q4 (judged with nothing)
    assert notes["judged documents not in the corpus"] == 0
    # a query without any judgment is in no mean, whatever empty_queries says (as BEIR, MTEB
    # and sentence-transformers leave it out); a judged query with nothing relevant follows it
    zero = _metric(["hit_rate@1"], qrels, empty_queries="zero")
    zero.update(queries, ids=["q1", "q2", "unjudged"], role="query")
    zero.update(docs, ids=doc_ids, role="gallery")
    assert float(zero.compute()["hit_rate@1"]) == 0.5
    assert zero.summary().notes["queries without judgments"] == 1
    empty = _metric(["hit_rate@1"], qrels, empty_queries="zero")
    empty.update(queries, ids=["q1", "q2", "q4"], role="query")
    empty.update(docs, ids=doc_ids, role="gallery")
    assert float(empty.compute()["hit_rate@1"]) == pytest.approx(1 / 3, abs=1e-15)


def test_all_skipped_warns_with_the_qrels_reason():
    docs, doc_ids = _corpus()
    m = _metric(["mrr"], {"q": [], "other": ["d0"]})  # q judged, with nothing relevant
    m.update(torch.tensor([_unit(0.0)], dtype=torch.float64), ids=["q"], role="query")
    m.update(docs, ids=doc_ids, role="gallery")
    with pytest.warns(UserWarning, match="qrels judge no document relevant"):
        assert math.isnan(float(m.compute()["mrr"]))
    # no query the qrels name at all: nothing can be scored, refused by name
    m = _metric(["mrr"], {"other": ["d0"]})
    m.update(torch.tensor([_unit(0.0)], dtype=torch.float64), ids=["q"], role="query")
    m.update(docs, ids=doc_ids, role="gallery")
    with pytest.raises(ValueError, match=r"none of the 1 query ids given \(e.g. 'q'\) is a"):
        m.compute()


def test_identical_string_ids_are_left_out_by_default():
    docs, _ = _corpus()
    # the query is corpus document "a" itself (ArguAna style): it is not ranked, so the
    # relevant "b" (2nd by score) is first
    ids = ["a", "b", "c", "d"]
    m = _metric(["mrr", "recall@1"], {"a": ["b", "a"]})
    m.update(torch.tensor([_unit(ANGLES["d0"])], dtype=torch.float64), ids=["a"], role="query")
    m.update(docs, ids=ids, role="gallery")
    values = m.compute()
    assert float(values["mrr"]) == 1.0 and float(values["recall@1"]) == 1.0
    kept = _metric(["mrr", "recall@1"], {"a": ["b", "a"]}, ignore_identical_ids=False)
    kept.update(torch.tensor([_unit(ANGLES["d0"])], dtype=torch.float64), ids=["a"],
                role="query")
    kept.update(docs, ids=ids, role="gallery")
    values = kept.compute()
    assert float(values["mrr"]) == 1.0 and float(values["recall@1"]) == 0.5


def test_integer_ids_from_two_counters_are_refused_by_name():
    docs, _ = _corpus()
    queries = torch.tensor([_unit(ANGLES["d0"]), _unit(ANGLES["d3"])], dtype=torch.float64)
    qrels = {0: [0], 1: [3]}  # query i's document is d0 / d3: ids from two counters
    m = _metric(["mrr"], qrels)
    m.update(queries, ids=torch.arange(2), role="query")
    m.update(docs, ids=torch.arange(4), role="gallery")
    with pytest.raises(ValueError, match="ignore_identical_ids=False"):
        m.compute()
    two = _metric(["mrr"], qrels, ignore_identical_ids=False)
    two.update(queries, ids=torch.arange(2), role="query")
    two.update(docs, ids=torch.arange(4), role="gallery")
    assert float(two.compute()["mrr"]) == 1.0
    same = _metric(["mrr"], qrels, ignore_identical_ids=True)
    same.update(queries, ids=torch.arange(2), role="query")
    same.update(docs, ids=torch.arange(4), role="gallery")
    # query 0's only relevant document is itself: left out of its ranking, its judgment kept
    # (BEIR's rule): relevant, never retrieved, reciprocal rank 0; query 1 loses document 1
    # from its ranking and finds its document 3 first
    assert float(same.compute()["mrr"]) == 0.5
    assert same.summary().as_dict()["mrr"]["skipped"] == 0
    # the fixed gallery refuses alike, where its queries are ranked: at compute()
    fixed = _metric(["mrr"], qrels)
    fixed.set_gallery(docs, ids=torch.arange(4))
    fixed.update(queries, ids=torch.arange(2), role="query")
    with pytest.raises(ValueError, match="ignore_identical_ids=False"):
        fixed.compute()


def test_batches_in_any_order_repeats_and_the_fixed_gallery_agree():
    torch.manual_seed(0)
    queries, docs = torch.randn(6, 8, dtype=torch.float64), torch.randn(20, 8, dtype=torch.float64)
    q_ids = [f"q{i}" for i in range(6)]
    d_ids = [f"d{i}" for i in range(20)]
    qrels = {f"q{i}": {f"d{(3 * i + j) % 20}": j + 1 for j in range(3)} for i in range(6)}
    names = ["ndcg@10", "recall@5", "map@10", "mrr@10"]
    whole = _metric(names, qrels)
    whole.update(queries, ids=q_ids, role="query")
    whole.update(docs, ids=d_ids, role="gallery")
    expected = whole.compute()
    mixed = _metric(names, qrels)
    mixed.update(docs[10:], ids=d_ids[10:], role="gallery")
    mixed.update(queries[3:], ids=q_ids[3:], role="query")
    mixed.update(docs[:12], ids=d_ids[:12], role="gallery")  # d10, d11 repeated (padding)
    mixed.update(queries[:4], ids=q_ids[:4], role="query")  # q3 repeated
    fixed = _metric(names, qrels)
    fixed.set_gallery(docs, ids=d_ids)
    fixed.update(queries[:2], ids=q_ids[:2], role="query")
    fixed.update(queries[2:], ids=q_ids[2:], role="query")
    for other in (mixed, fixed):
        values = other.compute()
        for name in names:
            assert float(values[name]) == pytest.approx(float(expected[name]), abs=1e-12)
    # an id given twice with different embeddings is refused, as for every form
    bad = _metric(names, qrels)
    bad.update(queries, ids=q_ids, role="query")
    bad.update(docs, ids=d_ids, role="gallery")
    bad.update(docs[:1] + 1, ids=d_ids[:1], role="gallery")
    with pytest.raises(ValueError, match="id"):
        bad.compute()


def test_single_measure_classes_and_read_qrels(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t2\n", encoding="utf-8")
    qrels = read_qrels(path)
    docs, doc_ids = _corpus()
    for cls, kwargs, expected in (
        (rm.RecallAtK, {"k": 2}, 0.5),
        (rm.MRR, {}, 0.5),
        (rm.HitRateAtK, {"k": 1}, 0.0),
        (rm.NDCGAtK, {"k": 3, "gain": "linear"},
         (1 / math.log2(3) + 2 / math.log2(4)) / (2 + 1 / math.log2(3))),
    ):
        m = cls(qrels=qrels, **kwargs)
        m.set_dtype(torch.float64)
        m.update(torch.tensor([_unit(0.0)], dtype=torch.float64), ids=["q1"], role="query")
        m.update(docs, ids=doc_ids, role="gallery")
        assert float(m.compute()) == pytest.approx(expected, abs=1e-15), cls.__name__


def test_what_the_form_refuses():
    q = torch.tensor([_unit(0.0)], dtype=torch.float64)
    with pytest.raises(ValueError, match="role"):
        rm.MRR(qrels={"q": ["d0"]}).update(q, ids=["q"])
    with pytest.raises(ValueError, match="`ids` are needed"):
        rm.MRR(qrels={"q": ["d0"]}).update(q, role="query")
    with pytest.raises(ValueError, match="labels"):
        rm.MRR(qrels={"q": ["d0"]}).update(q, torch.tensor([0]), ids=["q"], role="query")
    with pytest.raises(ValueError, match="relevance"):
        rm.MRR(qrels={"q": ["d0"]}, relevance="label")
    with pytest.raises(ValueError, match="qrels"):
        rm.MRR(relevance="qrels")
    with pytest.raises(ValueError, match="qrels"):
        rm.MRR(ignore_identical_ids=True)
    with pytest.raises(ValueError, match="qrels"):
        rm.MRR(qrels=[["d0"]])
    with pytest.raises(ValueError, match="grade"):
        rm.MRR(qrels={"q": {"d0": "high"}})
    with pytest.raises(ValueError, match="does not read them"):
        rm.MRR(qrels={"q": ["d0"]}).update(ranked_ids=[["d0"]], relevant_ids=[{"d0"}])
    # a sharded gallery takes judgments, not per-query lists of ids that a shard may not hold
    with pytest.raises(ValueError, match='not relevance="ids"'):
        rank_embeddings_sharded(torch.eye(2), torch.eye(2), Exchange(), relevance="ids",
                                query_ids=[0, 1], gallery_ids=[0, 1])


# ------------------------------------------------------------------------- exactness


REFERENCE_KEYS = {
    "hit_rate@{k}": "hit_rate@{k}",
    "recall@{k}": "recall@{k}",
    "precision@{k}": "precision@{k}",
    "map@{k}": "ap@{k}/relevant",
    "mrr@{k}": "rr@{k}",
    "ndcg@{k}": "ndcg@{k}/exponential",
}
WHOLE_KEYS = {"map": "ap", "mrr": "rr", "ndcg": "ndcg/exponential", "r_precision":
              "r_precision", "map@r": "map@r", "minp": "minp"}


def _random_case(seed: int, integer_ids: bool):
    g = torch.Generator().manual_seed(seed)
    num_q, num_d, dim = 23, 61, 6
    queries = torch.randn(num_q, dim, generator=g, dtype=torch.float64)
    docs = torch.randn(num_d, dim, generator=g, dtype=torch.float64)
    if integer_ids:
        q_ids = list(range(100, 100 + num_q))
        d_ids = list(range(110, 110 + num_d))  # queries 110..122 are also documents
    else:
        q_ids = [f"q{i}" for i in range(num_q)]
        d_ids = [f"d{i}" for i in range(num_d)]
        d_ids[:5] = q_ids[:5]  # five queries are corpus documents (identical ids)
    qrels = {}
    for i, qid in enumerate(q_ids):
        if i % 7 == 6:
            continue  # a query without judgments
        count = int(torch.randint(1, 6, (1,), generator=g))
        picked = torch.randperm(num_d, generator=g)[:count].tolist()
        judged = {d_ids[j]: int(torch.randint(-1, 4, (1,), generator=g)) for j in picked}
        if i % 5 == 0:
            judged[f"missing-{i}"] = 2  # a judged document the corpus lacks
        if i % 4 == 0:
            judged[qid] = 1  # its own id judged too
        qrels[qid] = judged
    qrels["never-given"] = {d_ids[0]: 1}
    return queries, docs, q_ids, d_ids, qrels


def _assert_equals_reference(
    values, queries, docs, q_ids, d_ids, qrels, names, keep_judgment=False
):
    q = torch.nn.functional.normalize(queries, dim=1)
    d = torch.nn.functional.normalize(docs, dim=1)
    scores = (q @ d.T).tolist()
    per_query = [
        r for r in reference_judged(scores, q_ids, d_ids, qrels, keep_judgment=keep_judgment)
        if r is not None
    ]
    assert per_query
    for name in names:
        base, _, k = name.partition("@")
        if k and k != "r":
            key = REFERENCE_KEYS[f"{base}@{{k}}"].format(k=k)
        else:
            key = WHOLE_KEYS[name]
        expected = math.fsum(r[key] for r in per_query) / len(per_query)
        assert float(values[name]) == pytest.approx(expected, abs=1e-9), name


NAMES = ["hit_rate@1", "recall@10", "precision@5", "map@10", "mrr@10", "ndcg@10", "map", "mrr",
         "ndcg", "r_precision", "map@r", "minp", "recall@20", "ndcg@3"]


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("integer_ids", [False, True])
def test_every_measure_equals_the_reference_that_scores_every_document(integer_ids, sharded):
    queries, docs, q_ids, d_ids, qrels = _random_case(1, integer_ids)
    m = rm.RetrievalMetrics(
        NAMES, qrels=qrels, ignore_identical_ids=True, gallery_sharded=sharded
    )
    m.set_dtype(torch.float64)
    # batches, queries and corpus interleaved, with repeats
    m.update(docs[:30], ids=d_ids[:30], role="gallery")
    m.update(queries[:10], ids=q_ids[:10], role="query")
    m.update(docs[25:], ids=d_ids[25:], role="gallery")
    m.update(queries[8:], ids=q_ids[8:], role="query")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = m.compute()
    # True is BEIR's rule: a query's own id leaves its ranking, a judgment of it stays
    _assert_equals_reference(
        values, queries, docs, q_ids, d_ids, qrels, NAMES, keep_judgment=True
    )


@pytest.mark.parametrize("sharded", [False, True])
def test_every_measure_equals_the_reference_on_the_emulated_device(fake_cuda, sharded):
    queries, docs, q_ids, d_ids, qrels = _random_case(2, False)
    m = rm.RetrievalMetrics(NAMES, qrels=qrels, gallery_sharded=sharded).to("cuda")
    m.set_dtype(torch.float64)
    m.update(queries.to("cuda"), ids=q_ids, role="query")
    m.update(docs.to("cuda"), ids=d_ids, role="gallery")
    values = m.compute()
    assert all(v.device.type == "cuda" for v in values.values())
    _assert_equals_reference(values, queries, docs, q_ids, d_ids, qrels, NAMES)


# pytrec_eval's names of our measures (trec_eval's: linear gain; recall and P at a cut-off; AP
# over every relevant judgment; relevance level 1)
PYTREC = {"ndcg_cut_10": "ndcg@10", "map_cut_10": "map@10", "recall_10": "recall@10",
          "P_5": "precision@5", "map": "map", "ndcg": "ndcg", "Rprec": "r_precision",
          "recip_rank": "mrr"}


@pytest.mark.parametrize("identical", [None, True])
@pytest.mark.parametrize("sharded", [False, True])
def test_every_measure_equals_pytrec_eval_on_the_full_score_matrix(sharded, identical):
    """trec_eval (pytrec_eval) run on every document's score: the same numbers to 1e-9 (scores
    without ties; the identical ids popped from the run, as BEIR does, and, by default, from
    the judgments too; ``ignore_identical_ids=True``, BEIR's and MTEB's rule, keeps the
    judgments: a query's own id judged relevant is relevant and never retrieved)."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    queries, docs, q_ids, d_ids, qrels = _random_case(3, False)
    scores = (torch.nn.functional.normalize(queries, dim=1)
              @ torch.nn.functional.normalize(docs, dim=1).T)
    run = {q: {d: float(scores[i, j]) for j, d in enumerate(d_ids) if d != q}
           for i, q in enumerate(q_ids)}
    judged = {q: {d: g for d, g in v.items() if d != q or identical} for q, v in qrels.items()}
    # trec_eval scores only the queries of the run that have a relevant judgment
    scored = {q for q, v in judged.items() if q in run and any(g > 0 for g in v.values())}
    per_query = pytrec_eval.RelevanceEvaluator(
        {q: judged[q] for q in scored}, set(PYTREC)
    ).evaluate({q: run[q] for q in scored})
    m = rm.RetrievalMetrics(list(PYTREC.values()), qrels=qrels, gain="linear",
                            gallery_sharded=sharded, ignore_identical_ids=identical)
    m.set_dtype(torch.float64)
    m.update(queries, ids=q_ids, role="query")
    m.update(docs, ids=d_ids, role="gallery")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = m.compute()
    for theirs, ours in PYTREC.items():
        expected = math.fsum(r[theirs] for r in per_query.values()) / len(per_query)
        assert float(values[ours]) == pytest.approx(expected, abs=1e-9), ours


def test_numpy_str_ids_match_the_judgments_of_python_str_ids():
    """Ids taken one by one from a numpy array are np.str_: they must find their judgments (a
    python-str qrels mapping) as str ids do, not count as documents missing from the corpus."""
    docs, doc_ids = _corpus()
    qrels = {"q1": {"d1": 2, "d3": 1}}
    values = []
    for as_numpy in (False, True):
        m = _metric(["mrr", "ndcg@4"], qrels)
        q_ids = [np.array(["q1"])[0]] if as_numpy else ["q1"]
        g_ids = list(np.array(doc_ids)) if as_numpy else doc_ids
        m.update(torch.tensor([_unit(0.0)], dtype=torch.float64), ids=q_ids, role="query")
        m.update(docs, ids=g_ids, role="gallery")
        values.append({k: float(v) for k, v in m.compute().items()})
        assert m.summary().notes.get("judged documents not in the corpus", 0) == 0
    assert values[0] == values[1]
    assert values[0]["mrr"] == pytest.approx(1 / 2, abs=1e-15)


def test_an_empty_batch_of_str_ids_is_no_integer_batch():
    """An update with no rows and ``ids=[]`` (a process or a loader's last batch left empty)
    has ids of no kind: beside str ids it is neither refused as integers nor counted."""
    docs, doc_ids = _corpus()
    qrels = {"q1": {"d1": 2, "d3": 1}}
    values = []
    for empty_first in (False, True):
        m = _metric(["mrr", "ndcg@4"], qrels)
        if empty_first:
            m.update(docs[:0], ids=[], role="gallery")
            m.update(torch.zeros(0, docs.shape[1], dtype=torch.float64), ids=[], role="query")
        m.update(torch.tensor([_unit(0.0)], dtype=torch.float64), ids=["q1"], role="query")
        m.update(docs, ids=doc_ids, role="gallery")
        values.append({k: float(v) for k, v in m.compute().items()})
    assert values[0] == values[1]
    assert values[0]["mrr"] == pytest.approx(1 / 2, abs=1e-15)


def _tied_case():
    """12 queries, a corpus of 5 distinct rows under 60 str ids (scores tie in groups of 12),
    graded judgments, a judged document the corpus lacks."""
    g = torch.Generator().manual_seed(8)
    rows = torch.randn(5, 4, generator=g, dtype=torch.float64)
    docs = rows[torch.randint(0, 5, (60,), generator=g)]
    queries = torch.randn(12, 4, generator=g, dtype=torch.float64)
    d_ids = [f"d{int(v)}" for v in torch.randperm(600, generator=g)[:60]]
    qrels = {f"q{i}": {d_ids[int(j)]: 1 + int(j) % 2 for j in torch.randperm(60, generator=g)[:4]}
             for i in range(12)}
    qrels["q0"]["not-in-corpus"] = 2
    return queries, docs, [f"q{i}" for i in range(12)], d_ids, qrels


def _by_id_reference(queries, docs, q_ids, d_ids, qrels, k=10):
    """NDCG@k (linear gain) and MRR by sorting every document by (-score, id) in Python."""
    scores = (torch.nn.functional.normalize(queries, dim=1)
              @ torch.nn.functional.normalize(docs, dim=1).T)
    ndcg, mrr = [], []
    for i, q in enumerate(q_ids):
        order = sorted(range(len(d_ids)), key=lambda j: (-float(scores[i, j]), d_ids[j]))
        grades = [qrels[q].get(d_ids[j], 0) for j in order]
        dcg = sum(g / math.log2(r + 2) for r, g in enumerate(grades[:k]))
        ideal = sorted(qrels[q].values(), reverse=True)
        ndcg.append(dcg / sum(g / math.log2(r + 2) for r, g in enumerate(ideal[:k])))
        mrr.append(next((1 / (r + 1) for r, g in enumerate(grades) if g > 0), 0.0))
    return {"ndcg@10": sum(ndcg) / len(ndcg), "mrr": sum(mrr) / len(mrr)}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_ties_by_id_equal_a_python_sort_by_score_then_id(device, request):
    """ties="id" through the class, on the CPU and the emulated CUDA device: each query's
    documents sorted by (-score, id) in Python give the same NDCG@10 and MRR; the tie rule
    matters here (the expected rule's values differ)."""
    if device == "cuda":
        request.getfixturevalue("fake_cuda")
    queries, docs, q_ids, d_ids, qrels = _tied_case()
    expected = _by_id_reference(queries, docs, q_ids, d_ids, qrels)
    values = {}
    for ties in ("id", "expected"):
        m = rm.RetrievalMetrics(["ndcg@10", "mrr"], qrels=qrels, gain="linear", ties=ties)
        m = m.to(device)
        m.set_dtype(torch.float64)
        m.update(docs[:25].to(device), ids=d_ids[:25], role="gallery")
        m.update(queries.to(device), ids=q_ids, role="query")
        m.update(docs[25:].to(device), ids=d_ids[25:], role="gallery")
        values[ties] = {k: float(v) for k, v in m.compute().items()}
    for name, value in expected.items():
        assert values["id"][name] == pytest.approx(value, abs=1e-12), name
        assert values["expected"][name] != pytest.approx(value, abs=1e-6), name


# the options each evaluator's protocol sets, given without it (the whole ranking's values)
PROTOCOL_OPTIONS = {
    "beir": dict(gain="linear", empty_queries="zero", ignore_identical_ids=True),
    "sentence_transformers": dict(gain="binary", divisor="min", empty_queries="skip", ties="id",
                                  ignore_identical_ids=False),
}


@pytest.mark.parametrize("protocol", ["beir", "sentence_transformers"])
def test_a_protocols_run_depth_gives_the_whole_rankings_values(protocol):
    """Under an evaluator's protocol the ranking locates the judged documents within its run's
    depth (1000 for BEIR, the largest cut-off for sentence-transformers) and drops the queries
    with none there from the products: a weak model (most queries far from what is judged),
    graded judgments, documents missing from the corpus and identical ids give every value and
    note of the ranking of the whole corpus, and some queries did leave early."""
    from unittest import mock

    from retrieval_metrics.functional.ranking.engine import counting
    from retrieval_metrics.protocols import EVALUATOR_REPORTS

    g = torch.Generator().manual_seed(11)
    num_q, num_d, dim = 150, 3000, 8
    docs = torch.randn(num_d, dim, generator=g, dtype=torch.float64)
    queries = torch.randn(num_q, dim, generator=g, dtype=torch.float64)
    d_ids = [f"d{i}" for i in range(num_d)]
    q_ids = [f"q{i}" for i in range(num_q)]
    d_ids[:4] = q_ids[:4]  # queries that are corpus documents
    qrels = {}
    for i, qid in enumerate(q_ids):
        picked = torch.randperm(num_d, generator=g)[: 1 + i % 4].tolist()
        qrels[qid] = {d_ids[j]: 1 + (i + j) % 3 for j in picked}
        if i % 3 == 0:  # a third of the queries near a judged document: found in the top ranks
            queries[i] = docs[picked[0]] + 0.05 * torch.randn(dim, generator=g,
                                                              dtype=torch.float64)
        if i % 10 == 0:
            qrels[qid]["missing"] = 2
    names = EVALUATOR_REPORTS[protocol]
    drop_finished = counting.QueryBlock.drop_finished
    results = {}
    for preset in (protocol, None):
        options = {"protocol": preset} if preset else PROTOCOL_OPTIONS[protocol]
        m = rm.RetrievalMetrics(names, qrels=qrels, **options)
        m.set_dtype(torch.float64)
        m.update(docs[:1700], ids=d_ids[:1700], role="gallery")
        m.update(queries, ids=q_ids, role="query")
        m.update(docs[1700:], ids=d_ids[1700:], role="gallery")
        dropped = []

        def recording(block, dropped=dropped):
            kept = drop_finished(block)
            dropped.append(kept is not None)
            return kept

        with mock.patch.object(counting.QueryBlock, "drop_finished", recording):
            values = m.compute()
        results[preset] = (values, m.summary(), any(dropped), m.rank_table())
    (values, summary, dropped, table), (whole, whole_summary, whole_dropped, whole_table) = (
        results.values()
    )
    for name in names:
        assert float(values[name]) == pytest.approx(float(whole[name]), abs=1e-12), name
        # no chance level: the random ranking could not retrieve the missing documents either
        assert summary[name]["chance"] is None and whole_summary[name]["chance"] is None
    notes, whole_notes = summary.notes, whole_summary.notes
    assert dict(notes) == dict(whole_notes)
    assert dict(notes)["judged documents not in the corpus"] == 15
    assert bool((whole_table.depth > 1000).all()) and bool((table.depth < num_d).all())
    assert int(table.num_listed.sum()) < int(whole_table.num_listed.sum())
    assert dropped and not whole_dropped


def test_a_protocols_run_depth_on_the_emulated_device_gives_the_cpus_values(fake_cuda):
    """The device counts every block whole (no query leaves early there: each would be a wait
    on the host); the CPU lets finished queries go. The values are the same."""
    from retrieval_metrics.protocols import EVALUATOR_REPORTS

    g = torch.Generator().manual_seed(4)
    docs = torch.randn(900, 8, generator=g, dtype=torch.float64)
    queries = torch.randn(60, 8, generator=g, dtype=torch.float64)
    queries[::3] = docs[:60:3] + 0.05 * torch.randn(20, 8, generator=g, dtype=torch.float64)
    d_ids, q_ids = [f"d{i}" for i in range(900)], [f"q{i}" for i in range(60)]
    qrels = {q: {f"d{(7 * i) % 900}": 1, f"d{i}": 2} for i, q in enumerate(q_ids)}
    names = EVALUATOR_REPORTS["sentence_transformers"]
    results = []
    for device in ("cpu", "cuda"):
        m = rm.RetrievalMetrics(names, qrels=qrels, protocol="sentence_transformers").to(device)
        m.set_dtype(torch.float64)
        m.update(docs.to(device), ids=d_ids, role="gallery")
        m.update(queries.to(device), ids=q_ids, role="query")
        results.append({k: float(v) for k, v in m.compute().items()})
    assert results[0] == pytest.approx(results[1], abs=1e-12)
    assert results[0]["hit_rate@1"] > 0


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.integers(-6, 40), max_size=12),
    universe=st.lists(st.integers(-6, 40), max_size=80),
    ascending=st.booleans(),
)
def test_corpus_membership_equals_torch_isin(values, universe, ascending):
    """The judged documents' membership of the corpus (``is_in``: the corpus searched in the
    distinct values where it is the larger, the values searched in the sorted result) equals
    ``torch.isin``: repeats on either side, values below and above every id, empty sides, a
    corpus in ascending order (kept whole by ``sorted_ids``) or not."""
    from retrieval_metrics.metrics.forms.qrels import is_in

    v = torch.tensor(values, dtype=torch.int64)
    u = torch.tensor(sorted(universe) if ascending else universe, dtype=torch.int64)
    assert torch.equal(is_in(v, u), torch.isin(v, u))


def test_corpus_membership_does_not_sort_a_corpus_numbered_in_order(monkeypatch):
    """A corpus whose ids ascend (0..N-1) is searched, not sorted: ``torch.isin`` of the
    judged documents against its N ids sorted them all (8.8M ids: 0.64 s of set_gallery's
    first ranking on the CI machine)."""
    from retrieval_metrics.metrics.forms import qrels as Q

    sizes = []
    original = torch.isin

    def counted(a, b, *args, **kwargs):
        sizes.append(b.numel())
        return original(a, b, *args, **kwargs)

    monkeypatch.setattr(Q.torch, "isin", counted)
    corpus = torch.arange(0, 300_000, 3)
    judged = torch.tensor([5, 6, 299_997, 299_999, 12, -3, 300_000])
    got = Q.is_in(judged, corpus)
    assert got.tolist() == [False, True, True, False, True, False, False]
    assert all(size < 1000 for size in sizes), sizes


@pytest.mark.parametrize("fixed", [False, True], ids=["corpus in updates", "set_gallery"])
def test_compute_checks_integer_ids_against_the_corpus_once(fixed, monkeypatch):
    """Integer query ids beside a corpus's (ignore_identical_ids left at None) are checked
    against every corpus id once a compute(), a search of the corpus's ids (the query chunks'
    decision, which label relevance alone takes, searched them a second time)."""
    from retrieval_metrics.metrics.forms import fixed_gallery
    from retrieval_metrics.metrics.forms import qrels as qrels_form

    calls = []
    original = qrels_form.check_identical_ids

    def counted(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(qrels_form, "check_identical_ids", counted)
    monkeypatch.setattr(fixed_gallery, "check_identical_ids", counted)
    docs, _ = _corpus()
    queries = torch.tensor([_unit(ANGLES["d0"]), _unit(ANGLES["d3"])], dtype=torch.float64)
    m = _metric(["mrr"], {10: [0], 11: [3]})
    if fixed:
        m.set_gallery(docs, ids=torch.arange(4))
    else:
        m.update(docs, ids=torch.arange(4), role="gallery")
    m.update(queries, ids=torch.tensor([10, 11]), role="query")
    calls.clear()
    assert float(m.compute()["mrr"]) == 1.0
    assert len(calls) == 1
