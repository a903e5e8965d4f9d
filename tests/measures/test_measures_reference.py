"""The measures layer against the brute-force reference, on explicit scores with many ties.

Scores go in through ``rank_scores`` (torchmetrics' preds / target / indexes form), so this file
checks the tie rules and every measure, independently of how scores are computed from embeddings.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

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


def long_runs(seed: int, n_queries: int = 6):
    """Long binary queries: mostly distinct scores with a few ties of two or three items, and
    dense relevance, so relevant items lie in long runs of consecutive positions (some longer
    than the 16 terms summed directly) beside tie groups, relevant, mixed or not."""
    rng = np.random.default_rng(seed)
    preds, target, indexes = [], [], []
    for q in range(n_queries):
        n = int(rng.integers(20, 46))
        scores = np.arange(n, 0, -1).astype(np.float64)
        for start in rng.choice(n - 3, 4, replace=False):
            scores[start + 1 : start + int(rng.integers(2, 4))] = scores[start]
        order = rng.permutation(n)
        preds.append(scores[order])
        target.append((rng.random(n) < rng.uniform(0.5, 0.97)).astype(np.int64)[order])
        indexes.append(np.full(n, q))
    return (
        torch.tensor(np.concatenate(preds)),
        torch.tensor(np.concatenate(target)),
        torch.tensor(np.concatenate(indexes)),
    )


CASES = (
    [("binary", seed) for seed in range(6)]
    + [("graded", seed) for seed in range(6)]
    + [("long_runs", seed) for seed in range(3)]
)


def make_case(kind: str, seed: int):
    return long_runs(seed) if kind == "long_runs" else random_queries(seed, kind == "graded")


@pytest.mark.parametrize("shared", [False, True], ids=["alone", "shared"])
@pytest.mark.parametrize("ties", ["optimistic", "pessimistic", "expected"])
@pytest.mark.parametrize(("kind", "seed"), CASES)
def test_every_measure_matches_reference(kind, seed, ties, shared):
    """Each measure alone, and all of them in one shared call, where they share the tie groups
    and the whole-ranking precision sums that each AP-like measure cuts at its own K."""
    graded = kind == "graded"
    preds, target, indexes = make_case(kind, seed)
    table = rank_scores(preds, target, indexes)
    max_len = int(torch.bincount(indexes).max())
    cache = M.SharedTieGroups() if shared else None
    ours = ours_per_query(table, ties, cmc_len=max_len, shared=cache)
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


@settings(max_examples=150, deadline=None)
@given(
    ranks=st.lists(
        st.floats(1.0, 5000.0, allow_nan=False) | st.integers(1, 9).map(float) | st.just(math.nan),
        max_size=60,
    ),
    convention=st.sampled_from(["vsepp", "plain"]),
)
def test_median_rank_equals_numpys_median_of_the_answered_queries(ranks, convention):
    """The two middle order statistics selected (not the whole list sorted) give numpy's
    median of the ranks that are not NaN: odd and even counts, repeats, expected (fractional)
    ranks; NaN where every query is unanswered."""
    values = torch.tensor(ranks, dtype=torch.float64)
    ours = float(M.median_rank(values, convention))
    kept = [r for r in values.tolist() if not math.isnan(r)]
    if not kept:
        assert math.isnan(ours)
        return
    assert ours == reference_median_rank(kept, convention)


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


def test_a_shared_call_never_mixes_up_tables():
    """Tables made and dropped one after another with one shared cache (as a shared call over
    chunks would): each gets its own tie groups and precision sums, though a dropped table's
    id may be given to the next one."""
    names = ["map", "map@r", "r_precision", "mrr", "hit_rate@3"]
    specs = [M.parse_metric(name) for name in names]
    cases = [random_queries(seed, False) for seed in range(8)]
    expected = [M.retrieval_measures(rank_scores(*case), names) for case in cases]
    expected_per_query = [
        [M.per_query_values(rank_scores(*case), spec) for spec in specs] for case in cases
    ]
    cache = M.SharedTieGroups()
    for case, want, want_per_query in zip(cases, expected, expected_per_query, strict=True):
        table = rank_scores(*case)  # the table before it is dropped: its id may be reused
        for spec, per_query in zip(specs, want_per_query, strict=True):
            got_per_query = M.per_query_values(table, spec, shared=cache)
            torch.testing.assert_close(got_per_query, per_query, rtol=0, atol=1e-12,
                                       equal_nan=True)
            got = M.aggregate(got_per_query, table)
            assert float(got) == pytest.approx(float(want[spec.name]), abs=1e-12), spec.name
