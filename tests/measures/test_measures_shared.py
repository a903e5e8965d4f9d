"""The tie groups a call of several measures shares: built once per (table, tie rule, gain)
inside one call, kept by no one outside it, and never seen by another call or thread."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import torch

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures import ties
from retrieval_metrics.functional.measures.aggregation import query_parts_in_chunks
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.functional.ranking import rank_scores

NAMES = [
    "hit_rate@1", "hit_rate@3", "recall@3", "recall@3/micro", "precision@2", "r_precision",
    "map", "map@r", "map@3", "map_trapezoid", "mrr", "mrr@2", "ndcg", "ndcg@3", "cmc@4",
    "median_rank", "mean_rank", "minp",
]


def scored_table(seed: int, graded: bool, n_queries: int = 20):
    """Integer scores (many ties), random relevance, some queries with nothing relevant."""
    rng = np.random.default_rng(seed)
    preds, target, indexes = [], [], []
    for q in range(n_queries):
        n = int(rng.integers(2, 12))
        preds.append(rng.integers(0, 4, n).astype(np.float64))
        t = rng.integers(0, 4, n) * (rng.random(n) < 0.5) if graded else rng.random(n) < 0.4
        target.append(np.asarray(t, dtype=np.int64))
        indexes.append(np.full(n, q))
    return rank_scores(
        torch.tensor(np.concatenate(preds)),
        torch.tensor(np.concatenate(target)),
        torch.tensor(np.concatenate(indexes)),
    )


def counting_tie_groups(monkeypatch) -> Counter:
    """Count the calls of ties.tie_groups by (table, rule, gain)."""
    calls: Counter = Counter()
    original = ties.tie_groups

    def counted(table, rule=OPTIONS["ties"].default, gain=None, merge_runs=True):
        calls[(id(table), rule, gain)] += 1
        return original(table, rule, gain=gain, merge_runs=merge_runs)

    monkeypatch.setattr(ties, "tie_groups", counted)
    return calls


def test_one_call_builds_the_tie_groups_once_per_table_rule_and_gain(monkeypatch):
    binary, graded = scored_table(0, False), scored_table(1, True)
    assert graded.grade is not None and bool((graded.grade > 1).any())
    calls = counting_tie_groups(monkeypatch)
    for rule in ("expected", "optimistic", "pessimistic"):
        calls.clear()
        M.retrieval_measures(binary, NAMES, ties=rule)
        # every measure reads the same groups (a binary grade's gain is the count)
        assert calls == Counter({(id(binary), rule, None): 1})
        calls.clear()
        M.retrieval_measures(graded, NAMES, ties=rule)
        # NDCG's exponential gain makes its own groups; the others share the plain ones
        assert calls == Counter({(id(graded), rule, None): 1, (id(graded), rule, "exponential"): 1})
        calls.clear()
        M.retrieval_measures(graded, NAMES, ties=rule, gain="linear")
        assert calls == Counter({(id(graded), rule, None): 1})


def test_nothing_is_kept_outside_a_shared_call(monkeypatch):
    table = scored_table(2, False)
    calls = counting_tie_groups(monkeypatch)
    M.retrieval_measures(table, NAMES)
    M.retrieval_measures(table, NAMES)
    assert calls == Counter({(id(table), "expected", None): 2})  # one per call
    calls.clear()
    M.map_at_r_per_query(table)
    M.map_at_r_per_query(table)
    assert sum(calls.values()) == 2  # no cache without one
    cache = M.SharedTieGroups()
    calls.clear()
    M.map_at_r_per_query(table, shared=cache)
    M.hit_rate_per_query(table, 3, shared=cache)
    assert sum(calls.values()) == 1  # the given cache is shared


def test_each_chunk_builds_its_own_groups(monkeypatch):
    tables = [scored_table(3, False), scored_table(4, False)]
    calls = counting_tie_groups(monkeypatch)
    query_parts_in_chunks(tables, NAMES, ties="pessimistic")
    assert calls == Counter({(id(t), "pessimistic", None): 1 for t in tables})


def test_two_threads_each_get_their_single_thread_values():
    tables = [scored_table(5, False, n_queries=60), scored_table(6, True, n_queries=60)]
    expected = [M.retrieval_measures(t, NAMES) for t in tables]
    got: list[list[dict]] = [[], []]
    start = threading.Barrier(2)

    def work(i: int) -> None:
        start.wait()
        for _ in range(10):
            got[i].append(M.retrieval_measures(tables[i], NAMES))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        assert len(got[i]) == 10
        for values in got[i]:
            assert values.keys() == expected[i].keys()
            for name, value in values.items():
                torch.testing.assert_close(value, expected[i][name], rtol=0, atol=0,
                                           equal_nan=True)
