"""per_query(ids=...): each query's value keyed by the ids the user gave, in the user's order."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import retrieval_metrics as rm

# Three ranked lists, by hand: reciprocal rank 1/1, 1/3, 0 (relevant d9 never retrieved);
# recall@2 1/2 ({d1, d4}: d1 found), 0, 0; "empty" has nothing relevant (skipped: NaN).
IDS = ["zeta", "alpha", "mid", "empty"]
RANKED = [["d1", "d2", "d3"], ["d2", "d3", "d5"], ["d1", "d2"], ["d1"]]
RELEVANT = [{"d1", "d4"}, {"d5"}, {"d9"}, set()]
BY_HAND = {"mrr": {"zeta": 1.0, "alpha": 1 / 3, "mid": 0.0},
           "recall@2": {"zeta": 0.5, "alpha": 0.0, "mid": 0.0}}


def _metric() -> rm.RetrievalMetrics:
    metric = rm.RetrievalMetrics(["mrr", "recall@2"])
    metric.update(ranked_ids=RANKED[:2], relevant_ids=RELEVANT[:2], ids=IDS[:2])
    metric.update(ranked_ids=RANKED[2:], relevant_ids=RELEVANT[2:], ids=IDS[2:])
    return metric


def test_per_query_keyed_by_str_ids_in_the_order_given():
    metric = _metric()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a query skipped)
        order = ["mid", "zeta", "empty", "alpha"]
        keyed = metric.per_query(ids=order)
        rows = metric.per_query()
    assert list(keyed) == ["mrr", "recall@2"]
    for name, by_id in keyed.items():
        assert list(by_id) == order
        assert math.isnan(by_id["empty"])
        for qid, value in BY_HAND[name].items():
            assert by_id[qid] == pytest.approx(value)
        # the same values as the unkeyed rows (which come in the order of the ids' codes)
        assert sorted(v for v in by_id.values() if not math.isnan(v)) == pytest.approx(
            sorted(float(v) for v in rows[name] if not math.isnan(float(v))))
    assert metric.per_query(ids=("alpha",)) == {
        "mrr": {"alpha": pytest.approx(1 / 3)}, "recall@2": {"alpha": 0.0}}


def test_per_query_keyed_for_queries_against_a_corpus_with_qrels():
    # cosine: q1 = [1, 0] ranks a (1.0), c (0.71), b (0); q0 = [0, 1] ranks b, c, a
    metric = rm.RetrievalMetrics(["mrr"], qrels={"q1": {"c": 1}, "q0": {"a": 1}})
    metric.update(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), ids=["q1", "q0"], role="query")
    metric.update(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), ids=["a", "b", "c"],
                  role="gallery")
    assert metric.per_query(ids=["q1", "q0"]) == {
        "mrr": {"q1": pytest.approx(0.5), "q0": pytest.approx(1 / 3)}}


def test_per_query_keyed_refuses_unknown_ids_and_queries_without_ids():
    metric = _metric()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"1 of the `ids` are no query's .*\['nope'\]"):
            metric.per_query(ids=["zeta", "nope"])
        with pytest.raises(TypeError, match="single id 'zeta'"):
            metric.per_query(ids="zeta")
    plain = rm.RetrievalMetrics(["mrr"])
    plain.update(ranked_ids=RANKED[:1], relevant_ids=RELEVANT[:1])
    with pytest.raises(ValueError, match="pass `ids=` to update"):
        plain.per_query(ids=["zeta"])


def test_per_query_keyed_when_ranked_in_chunks_of_queries():
    # three large classes and the smallest budget: ranked a chunk of queries at a time
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(600) % 3
    emb = torch.nn.functional.one_hot(labels, 8).float() + 0.8 * torch.randn(600, 8, generator=g)
    ids = [f"s{i}" for i in torch.randperm(600, generator=g).tolist()]
    chunked = rm.RetrievalMetrics(["map@r", "mrr"], memory_budget=2**16)
    chunked.update(emb, labels, ids=ids)
    keyed = chunked.per_query(ids=ids[::-1])
    assert chunked._chunk_parts is not None  # the budget made it rank in chunks
    whole = rm.RetrievalMetrics(["map@r", "mrr"], memory_budget=2**30)
    whole.update(emb, labels, ids=ids)
    expected = whole.per_query(ids=ids[::-1])
    for name in ("map@r", "mrr"):
        assert list(keyed[name]) == ids[::-1]
        assert keyed[name] == pytest.approx(expected[name], abs=1e-12)


def test_per_query_values_are_in_the_metric_s_unit():
    """Under percent=True compute() reported mrr 75.0 while per_query() gave [0.5, 1.0]
    (found by an audit): the rows are now in percent, their mean the value; a rank is not
    scaled."""
    m = rm.RetrievalMetrics(["mrr", "mean_rank"], percent=True)
    m.update(ranked_ids=[["b", "a"], ["a", "b"]], relevant_ids=[{"a"}, {"a"}], ids=["q1", "q2"])
    rows = m.per_query(ids=["q1", "q2"])
    assert rows["mrr"] == {"q1": 50.0, "q2": 100.0}
    assert rows["mean_rank"] == {"q1": 2.0, "q2": 1.0}
    assert float(m.compute()["mrr"]) == 75.0
