"""Two systems scored on the same queries, one measure at a time: :func:`paired_comparison` (the
difference of the measure's own statistic, a paired bootstrap interval of it and a p-value) and
its :class:`Comparison`; :func:`mcnemar_exact`, the exact test of two hit rates. The bootstrap's
draws and statistics are the intervals' (``stats.py``, one system's values), so that a
comparison resamples queries as a summary does."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import significance as S
from retrieval_metrics.functional.measures.significance import _enumerates, _sign_flip_p_value
from retrieval_metrics.functional.measures.stats import (
    _SAME,
    _canonical,
    _check_statistic,
    _class_index,
    _draw_counts,
    _medians,
    _point_value,
    _resamples,
    _statistic_rows,
    _tail,
    _weighted,
)

__all__ = ["Comparison", "mcnemar_exact", "paired_comparison"]


def mcnemar_exact(first: Tensor, second: Tensor) -> float:
    """Two-sided exact McNemar p-value for paired 0/1 outcomes: of the n discordant pairs, k
    the rarer way, min(1, 2 P(X <= k)) for X ~ Bin(n, 1/2) (``scipy.stats.binomtest(k, n)
    .pvalue``). Computed in floating point in at most O(n) steps, to about 1e-13 relative: the
    largest term by Loader's saddle-point formula, the smaller ones below it by the ratio of
    consecutive binomial coefficients (a sum of big-integer coefficients took seconds at
    10,000 discordant pairs and grew as n^2.7)."""
    a = first.to(torch.bool)
    b = second.to(torch.bool)
    only_first = int((a & ~b).sum())
    only_second = int((~a & b).sum())
    n = only_first + only_second
    k = min(only_first, only_second)
    if 2 * k + 1 >= n:
        # k = (n - 1) / 2 or n / 2 (n = 0 too): P(X <= k) >= 1/2, p = 1 exactly
        return 1.0
    return min(1.0, 2.0 * _binomial_half_cdf(k, n))


_LN_2PI = math.log(2 * math.pi)


def _stirling_error(n: int) -> float:
    """log(n!) - log(sqrt(2 pi n) (n / e)^n), for n >= 1: its series (Loader, "Fast and
    accurate computation of binomial probabilities", 2000) where it converges to double
    precision, math.lgamma below (the cancellation there costs about 1e-14, absolute)."""
    if n <= 15:
        return math.lgamma(n + 1.0) - (n + 0.5) * math.log(n) + n - 0.5 * _LN_2PI
    s0, s1, s2, s3, s4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
    nn = float(n) * n
    if n > 500:
        return (s0 - s1 / nn) / n
    if n > 80:
        return (s0 - (s1 - s2 / nn) / nn) / n
    if n > 35:
        return (s0 - (s1 - (s2 - s3 / nn) / nn) / nn) / n
    return (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / n


def _deviance(x: float, mean: float) -> float:
    """x log(x / mean) + mean - x (Loader's bd0), by its series where x is near ``mean``: there
    the direct formula loses its digits to cancellation."""
    if abs(x - mean) < 0.1 * (x + mean):
        v = (x - mean) / (x + mean)
        total = (x - mean) * v
        term = 2 * x * v
        j = 1
        while True:
            term *= v * v
            bigger = total + term / (2 * j + 1)
            if bigger == total:
                return total
            total = bigger
            j += 1
    return x * math.log(x / mean) + mean - x


def _binomial_half_pmf(k: int, n: int) -> float:
    """C(n, k) / 2^n, to a few ulps (Loader's saddle-point form: no factorial is formed)."""
    if k in (0, n):
        return math.ldexp(1.0, -n)  # (0 below 2^-1074, as any double would be)
    half = n / 2
    log_core = (
        _stirling_error(n) - _stirling_error(k) - _stirling_error(n - k)
        - _deviance(k, half) - _deviance(n - k, half)
    )
    log_factor = _LN_2PI + math.log(k) + math.log1p(-k / n)
    return math.exp(log_core - 0.5 * log_factor)


def _binomial_half_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Bin(n, 1/2) and k < n / 2: the terms from the k-th down, each the one
    above times i / (n - i + 1) (< 1: they only shrink), until they no longer change the sum
    (at most k steps; about sqrt(n) where k is near n / 2)."""
    term = _binomial_half_pmf(k, n)
    total = term
    for i in range(k, 0, -1):
        term *= i / (n - i + 1)
        total += term
        if term <= total * 1e-20:
            break
    return total


@dataclass
class Comparison:
    """Paired comparison of one metric between two models on the same queries.

    ``first`` and ``second`` are the two values (the measure's own statistic: a mean, the
    median rank, a micro or class average) on the queries both count, ``difference`` is
    ``first - second``, ``interval`` its paired bootstrap interval. ``test`` is
    ``"exact McNemar"``, ``"paired bootstrap"``, ``"paired randomization"`` (every swap of
    few queries, 2^n <= the resamples, or the bootstrap had no spread) or ``"none"`` (fewer
    than 2 queries: ``p_value`` NaN).
    ``num_bootstrap`` is the number of resamples the interval (and a bootstrap p-value) came
    from; ``None`` when unknown.
    """

    name: str
    first: float
    second: float
    difference: float
    interval: tuple[float, float]
    p_value: float
    test: str
    queries: int
    num_bootstrap: int | None = None

    def p_text(self, digits: int = 4) -> str:
        """The p-value as printed: ``"p = 0.0312"``, ``"p < 0.0001"`` for a bootstrap p-value
        of 0 from 10,000 resamples (none was as extreme, so all it shows is p < 1/resamples),
        or ``"p = n/a"`` where nothing was tested."""
        if math.isnan(self.p_value):
            return "p = n/a"
        if self.test == "paired bootstrap" and self.p_value == 0 and self.num_bootstrap:
            return f"p < {_upper_bound(1, self.num_bootstrap)}"
        return f"p = {self.p_value:.{digits}g}"

    def __str__(self) -> str:
        lo, hi = self.interval
        test = "untested" if self.test == "none" else self.test
        queries = f"{self.queries} {'query' if self.queries == 1 else 'queries'}"
        return (f"{self.name}: {self.first:.4f} vs {self.second:.4f}, difference "
                f"{self.difference:+.4f} [{lo:+.4f}, {hi:+.4f}], {self.p_text()} "
                f"({test}, {queries})")


def _upper_bound(numerator: int, denominator: int) -> str:
    """``numerator / denominator`` to 2 significant digits, rounded up: a bound printed after
    "p <" must not claim more than the resamples show (1/3000 is 0.00034, not 0.00033)."""
    exact = Decimal(numerator) / Decimal(denominator)
    step = Decimal(1).scaleb(exact.adjusted() - 1)
    return format(exact.quantize(step, rounding=ROUND_CEILING).normalize(), "f")


def paired_comparison(
    name: str,
    first: Tensor,
    second: Tensor,
    level: float = 0.95,
    num_bootstrap: int = 10_000,
    seed: int = 0,
    statistic: str = "mean",
    *,
    denominators: tuple[Tensor, Tensor] | None = None,
    classes: Tensor | None = None,
    scale: float = 1.0,
) -> Comparison:
    """Paired comparison of two systems' values on the queries both count (neither NaN).

    ``statistic`` is what each value is of its per-query parts (:func:`value_statistic`):
    ``"mean"`` of ``first`` and ``second``; ``"median"`` / ``"median_vsepp"`` of them (ranks);
    ``"micro"``, ``first`` and ``second`` each query's numerator and ``denominators`` the two
    systems' denominators; ``"class"``, the mean over ``classes`` (each query's, the same in
    both) of the class means. The result holds the two values (``compute()``'s, where both
    systems count the same queries), their difference first - second, its seeded paired
    bootstrap interval (queries resampled, both systems' parts together, the statistic
    recomputed on each side) and a two-sided p-value:

    * the exact McNemar test where the statistic is the mean and every value is 0 or 1 (hit
      rates): pass unit-free values (fractions, not percent), and ``scale`` (100 for percent)
      to report in the metric's unit, so that the test does not depend on the unit;
    * otherwise the paired bootstrap: the share of resampled differences, re-centred on the
      observed one, at least as far from 0 as it is (within 1e-12 of the statistics' size:
      the same differences summed in another order tie). The resamples are drawn from the
      queries sorted first, so the same pairs in any order give the same p-value;
    * where every resampled difference is the same (one value of the difference on every
      query, say), or the queries are so few that their 2^n swaps fit in ``num_bootstrap``
      (a bootstrap of 2 queries has 3 distinct resamples), the bootstrap shows too little
      variability to test against, and a p-value near 0 would claim what it cannot: the
      paired randomization test of the same statistic is used, each query's two values
      swapped (the sign-flip test for a mean), exact for 2^n <= ``num_bootstrap``, otherwise
      ``num_bootstrap`` seeded draws
      (:func:`~retrieval_metrics.functional.measures.significance.paired_randomization_test`'s
      conventions);
    * with fewer than 2 queries nothing is tested: p is NaN and ``test`` ``"none"``.
    """
    if first.shape != second.shape:
        raise ValueError(
            f"the two metrics were computed on different queries ({first.shape[0]} and "
            f"{second.shape[0]}); compare models on the same queries"
        )
    _check_statistic(statistic, first, None if denominators is None else denominators[0],
                     classes)  # fmt: skip
    if statistic == "micro":
        assert denominators is not None
        _check_statistic(statistic, second, denominators[1], classes)
    alpha = _tail(level)  # (checked before the resampling)
    both = ~(torch.isnan(first) | torch.isnan(second))
    a, b = first[both].to(torch.float64), second[both].to(torch.float64)
    n = a.numel()
    if n == 0:
        nan = math.nan
        return Comparison(name, nan, nan, nan, (nan, nan), nan, "none", 0)
    # each side's parts on the queries both count: [a, b] (mean, median), [a, da, b, db]
    # (micro) or [a, b, class] (class); the statistic of columns `sides[0]` against `sides[1]`
    columns = [a, b]
    sides: tuple[list[int], list[int]] = ([0], [1])
    den_a = den_b = cls = None
    num_classes = 0
    if statistic == "micro":
        assert denominators is not None
        den_a, den_b = (d[both].to(torch.float64) for d in denominators)
        columns, sides = [a, den_a, b, den_b], ([0, 1], [2, 3])
    elif statistic == "class":
        assert classes is not None
        cls = classes[both.to(classes.device)].cpu()
        index, num_classes = _class_index(cls)
        columns, sides = [a, b, index], ([0, 2], [1, 2])
    # the values as compute() forms them, on the queries in their order
    value_a = _point_value(a, statistic, den_a, cls) * scale
    value_b = _point_value(b, statistic, den_b, cls) * scale
    if n < 2:
        # one query: every resample is that query, and no test has a variance to go by
        return Comparison(name, value_a, value_b, value_a - value_b, (value_a - value_b,) * 2,
                          math.nan, "none", n, num_bootstrap)  # fmt: skip
    # the queries in an order of their own: the same interval and p-value in any order
    if statistic == "mean":
        ordered = _canonical(a - b)
        dist = torch.cat([ordered[idx].mean(1) for idx in _resamples(n, num_bootstrap, seed)])
        observed = float(ordered.mean())
        size = float(torch.maximum(a.abs().max(), b.abs().max()))
    else:
        rows = _canonical(torch.stack(columns, 1))
        side_columns = [rows[:, side[0]].contiguous() for side in sides]
        parts = []
        for idx in _resamples(n, num_bootstrap, seed):
            if statistic in ("micro", "class"):
                counts = _draw_counts(idx, n)
                drawn = None
                if statistic == "class":  # (the same classes on both sides: counted once)
                    drawn = torch.zeros(counts.shape[0], num_classes, dtype=torch.float64)
                    drawn.index_add_(1, rows[:, -1].to(torch.int64), counts)
                parts.append(torch.cat([
                    _weighted(counts, rows[:, side], statistic, num_classes, drawn)
                    for side in sides
                ], 1))  # fmt: skip
                continue
            # (a median: each side's column drawn alone, the two middle values selected)
            parts.append(torch.stack([_medians(column[idx], statistic == "median_vsepp")
                                      for column in side_columns], 1))  # fmt: skip
        both_sides = torch.cat(parts)
        dist = both_sides[:, 0] - both_sides[:, 1]
        whole = [_statistic_rows(rows[None][..., side], statistic, num_classes)
                 for side in sides]  # fmt: skip
        observed = float(whole[0][0, 0] - whole[1][0, 0])
        size = float(torch.nan_to_num(both_sides.abs(), nan=0.0).max())
    interval = (torch.nanquantile(dist, alpha).item() * scale,
                torch.nanquantile(dist, 1 - alpha).item() * scale)  # fmt: skip
    if statistic == "mean" and bool(
        (((a == 0) | (a == 1)) & ((b == 0) | (b == 1))).all()
    ):
        p_value = mcnemar_exact(a > 0.5, b > 0.5)
        return Comparison(name, value_a, value_b, value_a - value_b, interval, p_value,
                          "exact McNemar", n, num_bootstrap)  # fmt: skip
    same = _SAME * size
    spread = torch.nan_to_num(dist, nan=observed)
    # (a bootstrap of few queries has few distinct resamples: 2 queries gave p < 0.0001 where
    # no paired test of them can go below 0.5; their 2^n swaps are then enumerated instead)
    few = _enumerates(n, num_bootstrap)
    if few or float(spread.max() - spread.min()) <= same:
        p_value = _swap_test(torch.stack(columns, 1), sides, statistic, num_classes,
                             num_bootstrap, seed, same)  # fmt: skip
        test = "paired randomization"
    else:
        centred = (dist - observed).abs()
        # (NaN: a micro resample with no denominator on a side, which says nothing)
        kept = ~torch.isnan(centred)
        p_value = float((centred[kept] >= abs(observed) - same).to(torch.float64).mean())
        test = "paired bootstrap"
    return Comparison(name, value_a, value_b, value_a - value_b, interval, p_value, test, n,
                      num_bootstrap)


def _swap_test(
    rows: Tensor,
    sides: tuple[list[int], list[int]],
    statistic: str,
    num_classes: int,
    num_resamples: int,
    seed: int,
    same: float,
) -> float:
    """Two-sided p-value of the paired randomization test of the difference of ``statistic``
    between the columns ``sides[0]`` and ``sides[1]`` of ``rows`` (one row per query): if the
    two systems were interchangeable, each query's two sides would be as likely swapped as not.
    For the mean this is the sign-flip test of
    :func:`~retrieval_metrics.functional.measures.significance.paired_randomization_test`, with
    its sign vectors and conventions (exact for 2^n <= ``num_resamples``; otherwise
    (b + 1) / (m + 1) of m seeded draws; twice the smaller one-sided p-value, at most 1), and
    null statistics within ``same`` of the observed one counted as equal to it."""
    rows = _canonical(rows)
    if statistic == "mean":
        return S.paired_randomization_test(rows[:, sides[0][0]], rows[:, sides[1][0]],
                                           num_resamples, seed)  # fmt: skip
    n = rows.shape[0]
    first, second = rows[:, sides[0]], rows[:, sides[1]]
    observed = _statistic_rows(first[None], statistic, num_classes) - _statistic_rows(
        second[None], statistic, num_classes
    )

    def null_of(signs: Tensor) -> Tensor:
        swap = (signs < 0)[..., None]  # (r, n, 1): the queries whose two sides trade places
        one = torch.where(swap, second[None], first[None])
        other = torch.where(swap, first[None], second[None])
        return (_statistic_rows(one, statistic, num_classes)
                - _statistic_rows(other, statistic, num_classes))[:, 0]  # fmt: skip

    # (significance's own sign-flip counting: the draws its sign-flip test makes, seed for seed)
    return _sign_flip_p_value(n, null_of, float(observed[0, 0]), same, num_resamples, seed)
