"""Test vectors of the definitions, exactly, plus hand-worked cases for the three tie rules."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking import rank_lists, rank_scores


def values(table, names, **kwargs):
    return {k: float(v) for k, v in M.retrieval_measures(table, names, **kwargs).items()}


def test_vector_1_recall_versus_hit_rate():
    # relevant counts 2, 1, 3; relevant found in the top 4: 1, 1, 0
    table = rank_lists(
        [["a", "x1", "x2", "x3"], ["x4", "b", "x5", "x6"], ["x7", "x8", "x9", "x10"]],
        [{"a", "a2"}, {"b"}, {"c1", "c2", "c3"}],
    )
    assert M.recall_per_query(table, 4).tolist() == [0.5, 1.0, 0.0]
    assert M.hit_rate_per_query(table, 4).tolist() == [1.0, 1.0, 0.0]
    out = values(table, ["recall@4", "hit_rate@4"])
    assert out["recall@4"] == pytest.approx(0.50, abs=1e-12)
    assert out["hit_rate@4"] == pytest.approx(2 / 3, abs=1e-12)


def test_vector_2_ranked_lists():
    table = rank_lists(
        [
            ["d3", "d7", "d1", "d9", "d2"],
            ["d4", "d5", "d8", "d6", "d0"],
            ["d2", "d0", "d5", "d1", "d3"],
        ],
        [{"d1"}, {"d4", "d6"}, {"d8"}],
    )
    assert M.recall_per_query(table, 3).tolist() == [1.0, 0.5, 0.0]
    assert M.precision_per_query(table, 3).tolist() == pytest.approx([1 / 3, 1 / 3, 0.0])
    assert M.hit_rate_per_query(table, 3).tolist() == [1.0, 1.0, 0.0]
    assert M.reciprocal_rank_per_query(table).tolist() == pytest.approx([1 / 3, 1.0, 0.0])
    out = values(table, ["recall@3", "precision@3", "hit_rate@3", "mrr"])
    assert out == pytest.approx(
        {"recall@3": 0.5, "precision@3": 2 / 9, "hit_rate@3": 2 / 3, "mrr": 4 / 9}, abs=1e-12
    )
    assert round(out["precision@3"], 4) == 0.2222 and round(out["mrr"], 4) == 0.4444


@pytest.mark.parametrize(
    ("positions", "r_precision", "map_at_r"),
    [
        ({1}, 0.10, 0.10),
        ({1, 10}, 0.20, 0.12),
        ({1, 2}, 0.20, 0.20),
        (set(range(1, 11)), 1.00, 1.00),
    ],
)
def test_vector_3_map_at_r(positions, r_precision, map_at_r):
    ranked = [f"r{p}" if p in positions else f"n{p}" for p in range(1, 21)]
    relevant = {f"r{p}" for p in positions} | {f"missing{i}" for i in range(10 - len(positions))}
    table = rank_lists([ranked], [relevant])
    assert int(table.num_relevant[0]) == 10
    assert float(M.hit_rate_per_query(table, 1)[0]) == 1.0
    assert float(M.r_precision_per_query(table)[0]) == pytest.approx(r_precision, abs=1e-12)
    assert float(M.map_at_r_per_query(table)[0]) == pytest.approx(map_at_r, abs=1e-12)


def test_vector_4_same_m_precision_is_scaled_recall():
    # every query has m = 2: P@K = (m / K) recall@K
    table = rank_lists(
        [["a", "x", "b", "y", "z"], ["p", "q", "r", "c", "d"], ["e", "f", "g", "h", "i"]],
        [{"a", "b"}, {"c", "d"}, {"e", "zz"}],
    )
    for k in (1, 2, 3, 4, 5):
        torch.testing.assert_close(
            M.precision_per_query(table, k), (2 / k) * M.recall_per_query(table, k)
        )


def test_vector_5_mean_rank_is_sum_of_misses():
    preds = torch.tensor([0.9, 0.5, 0.5, 0.5, 0.1, 0.3, 0.3, 0.2])
    target = torch.tensor([0, 1, 0, 1, 1, 0, 1, 0])
    indexes = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1])
    table = rank_scores(preds, target, indexes)
    for ties in ("expected", "optimistic", "pessimistic"):
        ranks = M.first_rank_per_query(table, ties)
        misses = sum(
            (1 - (M.hit_rate_per_query(table, k, ties) if k else torch.zeros(2)))
            for k in range(0, 6)
        )
        torch.testing.assert_close(ranks, misses)


def test_peer_study_tie_vector_t9():
    """scores [0.9, 0.5, 0.5, 0.5, 0.1], relevance [0, 1, 0, 1, 1] (protocols.md T9)."""
    table = rank_scores(
        torch.tensor([0.9, 0.5, 0.5, 0.5, 0.1]),
        torch.tensor([0, 1, 0, 1, 1]),
        torch.zeros(5, dtype=torch.int64),
    )
    assert float(M.precision_per_query(table, 2)[0]) == pytest.approx(1 / 3)
    assert float(M.recall_per_query(table, 2)[0]) == pytest.approx(2 / 9)
    assert float(M.precision_per_query(table, 3)[0]) == pytest.approx(4 / 9)
    assert float(M.recall_per_query(table, 3)[0]) == pytest.approx(4 / 9)
    assert float(M.precision_per_query(table, 5)[0]) == pytest.approx(0.6)
    assert float(M.average_precision_per_query(table)[0]) == pytest.approx(8 / 15)
    assert float(M.reciprocal_rank_per_query(table)[0]) == pytest.approx(4 / 9)
    assert float(M.ndcg_per_query(table, 3, gain="linear")[0]) == pytest.approx(0.353814, abs=1e-6)
    # first relevant rank: a + (t + 1) / (r + 1) = 1 + 4 / 3
    assert float(M.first_rank_per_query(table)[0]) == pytest.approx(1 + 4 / 3)
    # hit@2 straddles the group: 1 - C(1, 1) / C(3, 1) = 2 / 3
    assert float(M.hit_rate_per_query(table, 2)[0]) == pytest.approx(2 / 3)
    assert float(M.hit_rate_per_query(table, 2, "optimistic")[0]) == 1.0
    assert float(M.hit_rate_per_query(table, 2, "pessimistic")[0]) == 0.0
    # pessimistic: the two relevant items take the last two places of positions 2..4
    assert float(M.first_rank_per_query(table, "pessimistic")[0]) == 3.0


def test_graded_ndcg_t4():
    """grades {d1: 2, d2: 1, d3: 0}, ranking d3 > d2 > d1 (protocols.md T4)."""
    table = rank_lists([["d3", "d2", "d1"]], [{"d1": 2, "d2": 1, "d3": 0}])
    assert float(M.ndcg_per_query(table, 3, gain="linear")[0]) == pytest.approx(0.619906, abs=1e-6)
    assert float(M.ndcg_per_query(table, 3)[0]) == pytest.approx(0.586883, abs=1e-6)


def test_ap_at_k_divisors_t5():
    """Relevant d1, d5; ranking d1, d4, d3, d2, d5; k = 3 (protocols.md T5)."""
    table = rank_lists([["d1", "d4", "d3", "d2", "d5"]], [{"d1", "d5"}])
    ap = M.average_precision_per_query
    assert float(ap(table, 3, divisor="relevant")[0]) == pytest.approx(0.5)
    assert float(ap(table, 3, divisor="retrieved")[0]) == pytest.approx(1.0)
    assert float(ap(table, 3, divisor="min")[0]) == pytest.approx(0.5)
    assert float(ap(table)[0]) == pytest.approx(0.7)


def test_ranked_list_duplicates_and_unretrieved():
    table = rank_lists([["a", "a", "b", "c"]], [{"b", "z"}])
    # "a" repeated keeps its slot: "b" is at position 3; "z" never returned but counts in m
    assert table.above.tolist() == [2] and int(table.num_relevant[0]) == 2
    assert float(M.recall_per_query(table, 3)[0]) == 0.5
    assert float(M.minp_per_query(table)[0]) == 0.0  # not every relevant item was retrieved
    with pytest.raises(ValueError, match=r"ranked_ids\[0\].*'a'"):
        rank_lists([["a", "a"]], [{"a"}], duplicates="error")


def test_empty_queries_policies():
    table = rank_lists([["a", "b"], ["c", "d"]], [{"b"}, set()])
    assert values(table, ["hit_rate@2"])["hit_rate@2"] == 1.0
    assert values(table, ["hit_rate@2"], empty_queries="zero")["hit_rate@2"] == 0.5
    with pytest.raises(ValueError, match="1 queries have no relevant"):
        M.retrieval_measures(table, ["hit_rate@2"], empty_queries="error")
    # rank metrics: "zero" puts an unanswerable query after the whole gallery
    assert values(table, ["mean_rank"], empty_queries="zero")["mean_rank"] == (2 + 3) / 2
    nothing = rank_lists([["a"]], [set()])
    assert math.isnan(values(nothing, ["mrr"])["mrr"])


def test_average_micro_and_class_and_percent():
    table = rank_lists([["a", "b", "x"], ["c", "y", "z"]], [{"a", "b", "q"}, {"c"}])
    macro = values(table, ["recall@2"])["recall@2"]
    micro = values(table, ["recall@2"], average="micro")["recall@2"]
    assert macro == pytest.approx((2 / 3 + 1) / 2)
    assert micro == pytest.approx(3 / 4)
    assert values(table, ["recall@2"], percent=True)["recall@2"] == pytest.approx(100 * macro)
    # micro applies where it is defined; MRR, one score per query, stays the macro mean
    assert values(table, ["mrr"], average="micro")["mrr"] == pytest.approx((1 + 1) / 2)
    with pytest.raises(ValueError, match="micro"):
        M.retrieval_measures(table, ["mrr/micro"])
    classed = dataclasses.replace(table, query_class=torch.tensor([0, 0]))
    # one class holding both queries: the class mean equals the macro mean here
    assert values(classed, ["recall@2"], average="class")["recall@2"] == pytest.approx(macro)
