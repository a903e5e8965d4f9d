"""The measures layer against the brute-force reference, on explicit scores with many ties.

Scores go in through ``rank_scores`` (torchmetrics' preds / target / indexes form), so this file
checks the tie rules and every measure, independently of how scores are computed from embeddings.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import assert_query_matches, ours_per_query
from reference import reference_chance, reference_median_rank, reference_query
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking import rank_scores


def random_queries(seed: int, graded: bool, n_queries: int = 12, max_items: int = 8):
    """Queries with integer scores (many ties), random relevance, some with nothing relevant."""
    rng = np.random.default_rng(seed)
    preds, target, indexes = [], [], []
    for q in range(n_queries):
        n = int(rng.integers(1, max_items + 1))
        levels = int(rng.integers(1, 4))
        preds.append(rng.integers(0, levels + 1, n).astype(np.float64))
        if graded:
            t = rng.integers(0, 4, n) * (rng.random(n) < 0.5)
        else:
            t = (rng.random(n) < rng.uniform(0.1, 0.7)).astype(np.int64)
        target.append(t)
        indexes.append(np.full(n, q))
    return (
        torch.tensor(np.concatenate(preds)),
        torch.tensor(np.concatenate(target).astype(np.int64)),
        torch.tensor(np.concatenate(indexes)),
    )


@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "expected"])
@pytest.mark.parametrize("graded", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_every_measure_matches_reference(seed, graded, ties):
    preds, target, indexes = random_queries(seed, graded)
    table = rank_scores(preds, target, indexes)
    max_len = int(torch.bincount(indexes).max())
    ours = ours_per_query(table, ties, cmc_len=max_len)
    for q in range(table.num_queries):
        sel = indexes == q
        grades = target[sel].numpy().astype(np.float64) if graded else None
        ref = reference_query(preds[sel].numpy(), target[sel].numpy() > 0, grades=grades, ties=ties)
        assert_query_matches(ours[q], ref, f"seed {seed} query {q} ties {ties}")


@pytest.mark.parametrize("seed", range(4))
def test_one_large_tie_group_uses_closed_forms(seed):
    """A group longer than the term-by-term limit (16) goes through the digamma closed form.

    The reference enumerates placements of the relevant items (C(N, m) of them) instead of all N!
    orders, which is the same expectation because relevance is all that the metrics see.
    """
    rng = np.random.default_rng(seed)
    n = int(rng.integers(18, 26))
    m = int(rng.integers(1, 4))
    ref = reference_chance(n, m)
    target = torch.zeros(n, dtype=torch.int64)
    target[torch.tensor(rng.choice(n, m, replace=False))] = 1
    table = rank_scores(
        torch.zeros(n, dtype=torch.float64), target, torch.zeros(n, dtype=torch.int64)
    )
    ours = ours_per_query(table, "expected", cmc_len=n)[0]
    ref = dict(ref, m=m, gallery_size=n)
    assert_query_matches(ours, ref, f"n={n} m={m}")


def test_chance_table_equals_random_ranking():
    """The chance level is the value under a uniformly random ranking."""
    for n, m in [(5, 1), (7, 2), (9, 3), (10, 10)]:
        target = torch.zeros(n, dtype=torch.int64)
        target[:m] = 1
        scores = torch.arange(n, dtype=torch.float64)  # any ranking: chance ignores it
        table = M.chance_table(rank_scores(scores, target, torch.zeros(n, dtype=torch.int64)))
        ours = ours_per_query(table, "expected", cmc_len=n)[0]
        assert_query_matches(ours, dict(reference_chance(n, m), m=m, gallery_size=n), f"{n},{m}")
        # single relevant item: hit rate @K = K / N
        if m == 1:
            assert float(M.hit_rate_per_query(table, 3)[0]) == pytest.approx(3 / n)


@pytest.mark.parametrize("convention", ["vsepp", "plain"])
def test_median_rank_conventions(convention):
    rng = np.random.default_rng(3)
    for size in (1, 2, 5, 6, 11):
        ranks = rng.integers(1, 20, size).astype(np.float64)
        ours = float(M.median_rank(torch.tensor(ranks), convention))
        assert ours == reference_median_rank(ranks, convention)
    # the VSE++ floor: median of [1, 2] is 1.5 -> floor(0.5) + 1 = 1
    assert float(M.median_rank(torch.tensor([1.0, 2.0]), "vsepp")) == 1.0
    assert float(M.median_rank(torch.tensor([1.0, 2.0]), "plain")) == 1.5


def test_expected_is_between_pessimistic_and_optimistic():
    preds, target, indexes = random_queries(11, graded=False, n_queries=30)
    table = rank_scores(preds, target, indexes)
    lo = ours_per_query(table, "pessimistic")
    mid = ours_per_query(table, "expected")
    hi = ours_per_query(table, "optimistic")
    for a, b, c in zip(lo, mid, hi, strict=True):
        if b is None:
            continue
        for key in b:
            if key == "first_rank":
                assert c[key] - 1e-12 <= b[key] <= a[key] + 1e-12
            elif key.startswith("ap@") and key.endswith("/retrieved"):
                continue  # a ratio of two random counts: not monotone in the order
            else:
                assert a[key] - 1e-12 <= b[key] <= c[key] + 1e-12, key
