"""Paired tests, corrections, wins/ties/losses (functional/measures/significance.py) against
scipy.stats.ttest_rel, scipy.stats.permutation_test (exact enumeration), scipy.special.betainc
and statsmodels' multipletests; and against values copied from them, for a CI without
statsmodels."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from retrieval_metrics.functional.measures import significance as S


def scipy_randomization(a, b) -> float:
    """scipy's two-sided paired permutation test of the mean difference, exact (n_resamples
    above 2^n enumerates every sign vector)."""
    return stats.permutation_test(
        (np.asarray(a, dtype=float), np.asarray(b, dtype=float)),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        vectorized=True,
        permutation_type="samples",
        alternative="two-sided",
        n_resamples=10**7,
    ).pvalue


# ---------------------------------------------------------------------------- betainc


@pytest.mark.parametrize("a", [0.5, 1.0, 2.5, 9.5, 10.5, 60.0, 4999.5, 1e5])
@pytest.mark.parametrize("b", [0.5, 1.0, 3.0, 12.0, 300.0])
def test_betainc_equals_scipy(a, b):
    for x in (1e-8, 1e-3, 0.05, 0.3, 0.5, 0.7, 0.95, 0.999, 1 - 1e-9):
        expected = special.betainc(a, b, x)
        got = S.betainc(a, b, x)
        assert got == pytest.approx(expected, rel=1e-10, abs=1e-300), (a, b, x)


def test_betainc_closed_forms_and_arguments():
    # I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 - (1 - x)^b
    assert S.betainc(1, 1, 0.37) == pytest.approx(0.37, rel=1e-14)
    assert S.betainc(3, 1, 0.5) == pytest.approx(0.125, rel=1e-14)
    assert S.betainc(1, 4, 0.5) == pytest.approx(1 - 0.5**4, rel=1e-14)
    assert S.betainc(2, 3, 0.0) == 0.0 and S.betainc(2, 3, 1.0) == 1.0
    with pytest.raises(ValueError, match="`a` and `b` must be positive"):
        S.betainc(0, 1, 0.5)
    with pytest.raises(ValueError, match=r"`x` must be in \[0, 1\]"):
        S.betainc(1, 1, 1.5)


# ---------------------------------------------------------------------------- t-test


@pytest.mark.parametrize("n", [2, 3, 5, 13, 50, 400, 5000, 100_000])
def test_t_test_equals_scipy(n):
    rng = np.random.default_rng(n)
    for shift in (0.0, 0.003, 0.03, 0.3, 3.0):
        a = rng.random(n)
        b = a - shift * rng.random(n) + 0.1 * rng.normal(size=n)
        expected = stats.ttest_rel(a, b).pvalue
        assert S.paired_t_test(a, b) == pytest.approx(expected, rel=1e-10, abs=1e-300)
        # torch tensors, float32 too (read as float64), and the order of a and b
        got = S.paired_t_test(torch.from_numpy(b), torch.from_numpy(a))
        assert got == pytest.approx(expected, rel=1e-10, abs=1e-300)


def test_t_test_on_hand_copied_values():
    """scipy.stats.ttest_rel on these values gave 0.08701750514944698 (scipy 1.17)."""
    a = [0.52, 0.61, 0.33, 0.9, 0.71, 0.45, 0.66, 0.2]
    b = [0.50, 0.55, 0.41, 0.8, 0.52, 0.45, 0.60, 0.1]
    assert S.paired_t_test(a, b) == pytest.approx(0.08701750514944698, rel=1e-12)


def test_t_test_on_binary_values():
    """Hit rates: 0/1 per query, many ties at 0."""
    rng = np.random.default_rng(0)
    a = (rng.random(300) < 0.6).astype(float)
    b = (rng.random(300) < 0.5).astype(float)
    assert S.paired_t_test(a, b) == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-10)


def test_t_test_leaves_nan_pairs_out_as_scipy_omit():
    a = [0.9, math.nan, 0.7, 0.6, 0.8, 0.3]
    b = [0.5, 0.4, math.nan, 0.6, 0.2, 0.1]
    expected = stats.ttest_rel(a, b, nan_policy="omit").pvalue
    assert S.paired_t_test(a, b) == pytest.approx(expected, rel=1e-12)
    assert S.paired_t_test(a, b) == pytest.approx(
        S.paired_t_test([0.9, 0.6, 0.8, 0.3], [0.5, 0.6, 0.2, 0.1]), rel=1e-15
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # scipy on equal differences
def test_t_test_rules_where_scipy_returns_nan():
    # fewer than 2 pairs: NaN (scipy: NaN)
    assert math.isnan(S.paired_t_test([0.5], [0.1]))
    assert math.isnan(S.paired_t_test([], []))
    assert math.isnan(S.paired_t_test([0.5, math.nan], [0.1, 0.2]))
    # equal on every query: p = 1 (scipy: NaN, 0/0)
    assert S.paired_t_test([0.2, 0.5, 0.9], [0.2, 0.5, 0.9]) == 1.0
    # the same nonzero difference on every query: p = 0 (scipy: t infinite, p = 0)
    assert S.paired_t_test([1.0, 2.0, 3.0], [0.0, 1.0, 2.0]) == 0.0
    assert stats.ttest_rel([1.0, 2.0, 3.0], [0.0, 1.0, 2.0]).pvalue == 0.0


def test_t_test_refuses_unpaired_input():
    with pytest.raises(ValueError, match=r"`a` and `b` must hold one value per query.*3 and 2"):
        S.paired_t_test([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"`a` must be 1-D .*\(2, 2\)"):
        S.paired_t_test([[1.0, 2.0], [3.0, 4.0]], [1.0, 2.0])
    with pytest.raises(ValueError, match="`b` must be a 1-D sequence of numbers"):
        S.paired_t_test([1.0, 2.0], ["x", "y"])


# ---------------------------------------------------------------------------- randomization


@pytest.mark.parametrize("n", [2, 3, 4, 6, 9, 13])
def test_randomization_exact_equals_scipy(n):
    rng = np.random.default_rng(100 + n)
    cases = [
        (rng.random(n), rng.random(n)),
        (rng.integers(0, 4, n) / 4, rng.integers(0, 4, n) / 4),  # ties and zero differences
        (np.round(rng.random(n), 1), np.round(rng.random(n), 1)),
        (rng.integers(0, 2, n).astype(float), rng.integers(0, 2, n).astype(float)),
    ]
    a = rng.random(n)
    cases.append((a, a + 0.25))  # one difference throughout: the most extreme arrangement
    cases.append((a, a.copy()))  # no difference: p = 1
    for a, b in cases:
        expected = scipy_randomization(a, b)
        assert S.paired_randomization_test(a, b) == pytest.approx(expected, abs=1e-12), (a, b)


def test_randomization_on_hand_copied_values():
    """scipy.stats.permutation_test, exact (2^8 sign vectors), on these values gave 0.109375."""
    a = [0.52, 0.61, 0.33, 0.9, 0.71, 0.45, 0.66, 0.2]
    b = [0.50, 0.55, 0.41, 0.8, 0.52, 0.45, 0.60, 0.1]
    assert S.paired_randomization_test(a, b) == 0.109375
    # 2^4 sign vectors: all four differences positive is 1 of 16 on each side
    assert S.paired_randomization_test([1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 0.0, 0.0]) == 0.125


def test_randomization_random_resamples():
    rng = np.random.default_rng(7)
    a = rng.random(15)
    b = a - 0.1 + 0.25 * rng.normal(size=15)
    exact = S.paired_randomization_test(a, b, num_resamples=2**15)  # every sign vector
    assert exact == pytest.approx(scipy_randomization(a, b), abs=1e-12)
    drawn = S.paired_randomization_test(a, b, num_resamples=20_000, seed=1)
    # 20,000 draws: the standard error of a p-value near 0.1 is about 0.002
    assert drawn == pytest.approx(exact, abs=0.015)
    # seeded, and the same for the queries in any order
    assert drawn == S.paired_randomization_test(a, b, num_resamples=20_000, seed=1)
    order = rng.permutation(15)
    assert drawn == S.paired_randomization_test(a[order], b[order], num_resamples=20_000, seed=1)
    assert drawn != S.paired_randomization_test(a, b, num_resamples=20_000, seed=2)
    # (b + 1) / (m + 1) per side: never 0, at least 2 / (m + 1)
    far = S.paired_randomization_test(np.ones(40), np.zeros(40), num_resamples=999)
    assert far == pytest.approx(2 / 1000, rel=1e-12)


def test_randomization_edge_cases_and_arguments():
    assert math.isnan(S.paired_randomization_test([], []))
    assert math.isnan(S.paired_randomization_test([math.nan], [1.0]))
    assert S.paired_randomization_test([0.5], [0.1]) == 1.0  # 2 sign vectors, one each side
    with pytest.raises(ValueError, match="`num_resamples` must be a positive int, got 0"):
        S.paired_randomization_test([1.0, 2.0], [0.0, 1.0], num_resamples=0)
    with pytest.raises(ValueError, match="`seed` must be an int"):
        S.paired_randomization_test([1.0, 2.0], [0.0, 1.0], seed=1.5)


def test_paired_test_dispatches_by_name_and_refuses_others():
    a, b = [0.52, 0.61, 0.33, 0.9, 0.71], [0.50, 0.55, 0.41, 0.8, 0.52]
    assert S.paired_test(a, b, "t-test") == S.paired_t_test(a, b)
    assert S.paired_test(a, b, "randomization") == S.paired_randomization_test(a, b)
    with pytest.raises(ValueError, match=r"`test` must be one of 't-test', 'randomization', "
                       r"got 'fisher' \('fisher' is spelled 'randomization' here\)"):
        S.paired_test(a, b, "fisher")
    with pytest.raises(ValueError, match=r"got 'wilcoxon'$"):
        S.paired_test(a, b, "wilcoxon")


# ---------------------------------------------------------------------------- corrections

P = [0.01, 0.04, 0.03, 0.005, 0.2, 0.04, 0.5, 0.0001]
# statsmodels 0.15.0: multipletests(P, method=...)[1].tolist()
STATSMODELS = {
    "holm": [0.06, 0.16, 0.15, 0.035, 0.4, 0.16, 0.5, 0.0008],
    "bonferroni": [0.08, 0.32, 0.24, 0.04, 1.0, 0.32, 1.0, 0.0008],
    "benjamini-hochberg": [0.02666666666666667, 0.05333333333333334, 0.05333333333333334, 0.02,
                           0.2285714285714286, 0.05333333333333334, 0.5, 0.0008],
}  # fmt: skip
STATSMODELS_NAME = {"holm": "holm", "bonferroni": "bonferroni", "benjamini-hochberg": "fdr_bh"}


@pytest.mark.parametrize("method", list(STATSMODELS))
def test_corrections_equal_values_copied_from_statsmodels(method):
    got = S.correct_p_values(P, method)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), STATSMODELS[method], rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", list(STATSMODELS))
def test_corrections_equal_statsmodels(method, monkeypatch):
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    # statsmodels' holm runs gc.collect() on every call: seconds in a test process holding the
    # whole suite's objects, for nothing the p-values depend on
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    np.testing.assert_allclose(
        multitest.multipletests(P, method=STATSMODELS_NAME[method])[1], STATSMODELS[method],
        rtol=0, atol=1e-15,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    for trial in range(30):
        m = int(rng.integers(1, 40))
        p = rng.random(m) ** 3
        if trial % 3 == 0:
            p[rng.integers(0, m, m // 2)] = p[0]  # ties
        if trial % 5 == 0:
            p[0], p[-1] = 1.0, 0.0
        expected = multitest.multipletests(p, method=STATSMODELS_NAME[method])[1]
        got = S.correct_p_values(torch.from_numpy(p), method).numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_corrections_leave_nan_out_of_the_family():
    p = [0.01, math.nan, 0.04, 0.03]
    for method, expected in (
        ("holm", [0.03, math.nan, 0.06, 0.06]),
        ("bonferroni", [0.03, math.nan, 0.12, 0.09]),
        ("benjamini-hochberg", [0.03, math.nan, 0.04, 0.04]),
        ("none", p),
    ):
        got = S.correct_p_values(p, method).numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert torch.isnan(S.correct_p_values([math.nan, math.nan], "holm")).all()
    assert S.correct_p_values([], "holm").numel() == 0


def test_corrections_refuse_other_names_and_values():
    with pytest.raises(ValueError, match=r"`method` must be one of 'holm', 'bonferroni', "
                       r"'benjamini-hochberg', 'none', got 'fdr_bh' \('fdr_bh' is spelled "
                       r"'benjamini-hochberg' here\)"):
        S.correct_p_values(P, "fdr_bh")
    with pytest.raises(ValueError, match=r"got 'Holm' .*'holm'"):
        S.correct_p_values(P, "Holm")
    with pytest.raises(ValueError, match=r"got 'sidak'$"):
        S.correct_p_values(P, "sidak")
    with pytest.raises(ValueError, match=r"`p` must hold p-values in \[0, 1\].*1\.5"):
        S.correct_p_values([0.1, 1.5], "holm")


# ---------------------------------------------------------------------------- wins, ties, losses


def test_wins_ties_losses():
    a = [1.0, 0.5, 0.2, 0.3, 0.7, math.nan]
    b = [0.5, 0.5, 0.4, math.nan, 0.7 + 1e-15, 0.1]
    assert S.wins_ties_losses(a, b) == (1, 2, 1)  # 0.7 and 0.7 + 1e-15 tie; NaN pairs left out
    assert S.wins_ties_losses(a, b, higher_is_better=False) == (1, 2, 1)
    ranks_a, ranks_b = [1.0, 3.0, 5.0, 2.0], [2.0, 3.0, 4.0, 9.0]
    assert S.wins_ties_losses(ranks_a, ranks_b, higher_is_better=False) == (2, 1, 1)
    assert S.wins_ties_losses([0.5 + 1e-9], [0.5]) == (1, 0, 0)  # beyond 1e-12: no tie
