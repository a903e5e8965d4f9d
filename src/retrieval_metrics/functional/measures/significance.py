"""Paired significance tests over queries, multiple-comparison corrections, wins/ties/losses.

Pure functions of per-query values (two systems scored on the same queries, query i the same
query in both), computed in float64 with torch; scipy and statsmodels are not needed (the tests
check these functions against them). What they mean is in the documentation's page "Comparing
systems" (docs/comparing-systems.md); :func:`retrieval_metrics.compare_systems` applies them to
metric objects.

- :func:`paired_t_test`: the two-sided paired t-test (``scipy.stats.ttest_rel``), the Student t
  distribution through :func:`betainc`, the regularized incomplete beta function;
- :func:`paired_randomization_test`: Fisher's paired randomization (sign-flip) test of the mean
  difference, exact for few queries (``scipy.stats.permutation_test``'s convention);
- :func:`correct_p_values`: Holm, Bonferroni and Benjamini-Hochberg adjusted p-values
  (``statsmodels.stats.multitest.multipletests``);
- :func:`wins_ties_losses`: per-query wins, ties and losses.

Pairs with a NaN on either side (a query one system leaves out) are left out of every function
here, as ``nan_policy="omit"`` leaves them out in scipy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "CORRECTIONS",
    "TESTS",
    "TIE_TOLERANCE",
    "betainc",
    "check_correction",
    "check_test",
    "correct_p_values",
    "paired_randomization_test",
    "paired_t_test",
    "paired_test",
    "wins_ties_losses",
]

TESTS = ("t-test", "randomization")
"""The paired tests, by the names :func:`paired_test` and ``compare_systems(test=...)`` take."""
#: The corrections, by the names :func:`correct_p_values` takes ("none": p-values as they are).
CORRECTIONS = ("holm", "bonferroni", "benjamini-hochberg", "none")
#: Two per-query values within this (absolute, and relative to the baseline's value) are a tie.
TIE_TOLERANCE = 1e-12

# other spellings, named in the error that refuses them
_TEST_HINTS = {
    "t": "t-test", "ttest": "t-test", "t_test": "t-test", "student": "t-test",
    "paired-t": "t-test", "fisher": "randomization", "permutation": "randomization",
    "sign-flip": "randomization",
}  # fmt: skip
_CORRECTION_HINTS = {
    "fdr_bh": "benjamini-hochberg", "bh": "benjamini-hochberg", "fdr": "benjamini-hochberg",
    "benjamini_hochberg": "benjamini-hochberg", "b": "bonferroni", "bonf": "bonferroni",
    "h": "holm", "holm-bonferroni": "holm", "None": "none",
}  # fmt: skip

_EPS = 2.220446049250313e-16  # float64's machine epsilon
_TINY = 1e-300
_MAX_TERMS = 100_000
_CHUNK = 2**22  # sign vectors times queries held at once by the randomization test


def _choice(value: Any, allowed: Sequence[str], argument: str, hints: dict[str, str]) -> str:
    if isinstance(value, str) and value in allowed:
        return value
    hint = hints.get(value) if isinstance(value, str) else None
    if hint is None and isinstance(value, str):
        hint = hints.get(value.strip().lower())
        if hint is None and value.strip().lower() in allowed:
            hint = value.strip().lower()
    names = ", ".join(repr(a) for a in allowed)
    tail = f" ({value!r} is spelled {hint!r} here)" if hint is not None else ""
    raise ValueError(f"`{argument}` must be one of {names}, got {value!r}{tail}")


def check_test(test: Any, argument: str = "test") -> str:
    """``test`` if it names one of :data:`TESTS`, else a ValueError naming ``argument`` and the
    allowed names (and the spelling here of another library's name: ``"fisher"`` is
    ``"randomization"``)."""
    return _choice(test, TESTS, argument, _TEST_HINTS)


def check_correction(method: Any, argument: str = "method") -> str:
    """``method`` if it names one of :data:`CORRECTIONS`, else a ValueError naming ``argument``
    and the allowed names (statsmodels' ``"fdr_bh"`` is ``"benjamini-hochberg"`` here)."""
    return _choice(method, CORRECTIONS, argument, _CORRECTION_HINTS)


# --------------------------------------------------------------------------- inputs


def _vector(values: Any, argument: str) -> Tensor:
    """``values`` as a 1-D float64 CPU tensor, or a ValueError naming ``argument``."""
    if isinstance(values, Tensor):
        v = values.detach().to(device="cpu", dtype=torch.float64)
    else:
        try:
            v = torch.as_tensor(values, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(
                f"`{argument}` must be a 1-D sequence of numbers (a list, array or tensor), "
                f"got {type(values).__name__}"
            ) from None
    if v.dim() != 1:
        raise ValueError(
            f"`{argument}` must be 1-D (one value per query), got shape {tuple(v.shape)}"
        )
    return v


def _pairs(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """The pairs of ``a`` and ``b`` with a number on both sides (NaN pairs left out)."""
    a, b = _vector(a, "a"), _vector(b, "b")
    if a.shape != b.shape:
        raise ValueError(
            f"`a` and `b` must hold one value per query for the same queries, got {a.numel()} "
            f"and {b.numel()} values"
        )
    both = ~(torch.isnan(a) | torch.isnan(b))
    return a[both], b[both]


def _positive_int(value: Any, argument: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{argument}` must be a positive int, got {value!r}")
    return value


# --------------------------------------------------------------------------- incomplete beta


def _stirling_tail(z: float) -> float:
    """lgamma(z) - ((z - 1/2) log z - z + log(2 pi) / 2) for z >= 10 (Stirling's series; the
    first omitted term is below 1e-16 there)."""
    w = 1.0 / (z * z)
    series = 1 / 12 - w * (1 / 360 - w * (1 / 1260 - w * (1 / 1680 - w * (
        1 / 1188 - w * (691 / 360360 - w / 156)))))
    return series / z


def _log_beta(a: float, b: float) -> float:
    """log B(a, b), without the cancellation of lgamma(a) + lgamma(b) - lgamma(a + b) when a or b
    is large (a t-test over 10,000 queries has a = 4999.5)."""
    small, large = min(a, b), max(a, b)
    if large < 10:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    s = a + b
    if small < 10:
        # lgamma(large) - lgamma(s) by Stirling, its large terms cancelled by hand
        return (
            math.lgamma(small)
            + (large - 0.5) * math.log1p(-small / s)
            - small * math.log(s)
            + small
            + _stirling_tail(large)
            - _stirling_tail(s)
        )
    return (
        (a - 0.5) * math.log1p(-b / s)
        + (b - 0.5) * math.log1p(-a / s)
        - 0.5 * math.log(s)
        + 0.5 * math.log(2 * math.pi)
        + _stirling_tail(a)
        + _stirling_tail(b)
        - _stirling_tail(s)
    )


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), converging for
    x < (a + 1) / (a + b + 2)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS + 1):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            step = d * c
            h *= step
        if abs(step - 1.0) < _EPS:
            return h
    raise RuntimeError(f"betainc: no convergence for a={a}, b={b}, x={x}")  # pragma: no cover


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """I_x(a, b) with ``y`` = 1 - x given exactly (no 1 - x cancellation near x = 1)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = a * math.log(x) + b * math.log(y) - _log_beta(a, b)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, y) / b


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (``scipy.special.betainc(a, b, x)``).

    A continued fraction (modified Lentz) in float64, on the side of x where it converges
    (I_x(a, b) = 1 - I_{1-x}(b, a) on the other), with log B(a, b) from Stirling's series for
    large arguments: about 1e-13 relative accuracy in the tails a t-test reads.

    Args:
        a: the first shape parameter, > 0.
        b: the second shape parameter, > 0.
        x: in [0, 1].

    Returns:
        I_x(a, b), a float in [0, 1].

    Example:
        >>> round(betainc(2.0, 3.0, 0.4), 12)  # 1 - 0.6^4 - 4 * 0.4 * 0.6^3
        0.5248
    """
    a, b, x = float(a), float(b), float(x)
    if not (a > 0 and b > 0):
        raise ValueError(f"`a` and `b` must be positive, got a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"`x` must be in [0, 1], got {x}")
    return _betainc(a, b, x, 1.0 - x)


def _student_t_two_sided(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2),
    both df/(df+t^2) and t^2/(df+t^2) computed directly."""
    t2 = t * t
    if math.isinf(t2):
        return 0.0
    total = df + t2
    return _betainc(df / 2.0, 0.5, df / total, t2 / total)


# --------------------------------------------------------------------------- tests


def paired_t_test(a: Any, b: Any) -> float:
    """Two-sided p-value of the paired t-test of ``a`` against ``b``.

    The statistic is t = mean(d) / (sd(d) / sqrt(n)) over the differences d = a - b (sd with
    n - 1), and the p-value P(|T| >= |t|) under Student's t with n - 1 degrees of freedom:
    ``scipy.stats.ttest_rel(a, b).pvalue``, to about 1e-13 relative. Pairs with a NaN on either
    side are left out (scipy's ``nan_policy="omit"``).

    Two rules where scipy returns NaN:

    * fewer than 2 pairs: NaN (no variance to estimate; scipy agrees);
    * zero variance, every difference the same: p = 1 when that difference is 0 (the systems
      agree on every query; scipy: NaN, 0/0), p = 0 otherwise (scipy agrees: t is infinite).

    Args:
        a: per-query values of one system (1-D).
        b: the other system's on the same queries, in the same order (1-D, as long as ``a``).

    Returns:
        The p-value, a float in [0, 1] (NaN with fewer than 2 pairs).

    Example:
        >>> round(paired_t_test([0.5, 0.7, 0.9, 0.6], [0.4, 0.5, 0.6, 0.6]), 6)  # scipy: 0.102728
        0.102728
        >>> paired_t_test([1.0, 0.5], [1.0, 0.5])
        1.0
    """
    a, b = _pairs(a, b)
    n = a.numel()
    if n < 2:
        return math.nan
    d = a - b
    if bool((d == d[0]).all()):
        return 1.0 if float(d[0]) == 0.0 else 0.0
    t = float(d.mean() / (d.std(correction=1) / math.sqrt(n)))
    if math.isnan(t):  # an infinite value among the differences
        return math.nan
    return _student_t_two_sided(t, n - 1)


def _sign_vectors(n: int, exact: bool, count: int, seed: int) -> Iterator[Tensor]:
    """Rows of +1/-1, in chunks: all 2^n of them (``exact``), or ``count`` drawn with a
    ``torch.Generator`` seeded with ``seed``."""
    rows = max(1, _CHUNK // n)
    if exact:
        bits = torch.arange(n, dtype=torch.int64)
        for start in range(0, 2**n, rows):
            index = torch.arange(start, min(2**n, start + rows), dtype=torch.int64)
            yield 1.0 - 2.0 * ((index[:, None] >> bits) & 1).to(torch.float64)
        return
    gen = torch.Generator().manual_seed(seed)
    for start in range(0, count, rows):
        size = min(rows, count - start)
        yield 2.0 * torch.randint(0, 2, (size, n), generator=gen).to(torch.float64) - 1.0


def _enumerates(n: int, num_resamples: int) -> bool:
    """Whether a sign-flip test of ``n`` pairs takes every one of the 2^n sign vectors (they fit
    in ``num_resamples``) rather than ``num_resamples`` drawn ones."""
    return n < 63 and 2**n <= num_resamples


def _sign_flip_p_value(
    n: int,
    null_of: Callable[[Tensor], Tensor],
    observed: float,
    tolerance: float,
    num_resamples: int,
    seed: int,
) -> float:
    """Two-sided p-value of a sign-flip test of ``n`` pairs: ``null_of(signs)`` is the statistic
    under each row of a chunk ``(r, n)`` of +1/-1 sign vectors (-1: the pair's two sides
    swapped), and a null statistic within ``tolerance`` of ``observed`` counts as equal to it.
    Twice the smaller one-sided p-value, at most 1: exact over all 2^n vectors
    (:func:`_enumerates`), else (b + 1) / (m + 1) of ``num_resamples`` vectors drawn with
    ``seed``."""
    exact = _enumerates(n, num_resamples)
    less = greater = 0
    for signs in _sign_vectors(n, exact, num_resamples, seed):
        null = null_of(signs)
        less += int((null <= observed + tolerance).sum())
        greater += int((null >= observed - tolerance).sum())
    if exact:
        p = 2 * min(less, greater) / 2**n
    else:
        p = 2 * (min(less, greater) + 1) / (num_resamples + 1)
    return min(1.0, p)


def paired_randomization_test(
    a: Any, b: Any, num_resamples: int = 10_000, seed: int = 0
) -> float:
    """Two-sided p-value of Fisher's paired randomization (sign-flip) test of the mean
    difference of ``a`` and ``b``.

    Under the null hypothesis the two systems are exchangeable on each query, so the sign of
    each difference d_i = a_i - b_i is as likely + as -. The statistic is mean(d); its null
    distribution is mean(s * d) over sign vectors s. The p-value follows
    ``scipy.stats.permutation_test`` (``permutation_type="samples"``,
    ``alternative="two-sided"``): twice the smaller of the two one-sided p-values, at most 1,
    with a null statistic within 100 machine epsilons (relative) of the observed one counted as
    equal to it.

    * **Exact** when 2^n <= ``num_resamples`` (n pairs; 13 or fewer for 10,000): every sign
      vector, the observed one among them; a one-sided p-value is (null statistics at least as
      extreme) / 2^n. This equals scipy's p-value for any ``n_resamples >= 2**n``.
    * **Random** otherwise: ``num_resamples`` sign vectors drawn with a ``torch.Generator``
      seeded with ``seed``; a one-sided p-value is (b + 1) / (m + 1), b of the m draws at least
      as extreme (scipy's convention for random resamples: the observed arrangement counts as
      one), so it is never 0 and at least 2 / (m + 1) two-sided. The differences are sorted
      first, so the same values in any order give the same p-value.

    Pairs with a NaN on either side are left out.

    Args:
        a: per-query values of one system (1-D).
        b: the other system's on the same queries, in the same order (1-D, as long as ``a``).
        num_resamples: sign vectors drawn when 2^n exceeds it (and the bound for enumerating).
        seed: seed of the drawn sign vectors.

    Returns:
        The p-value, a float in (0, 1] (NaN with no pair).

    Example:
        >>> paired_randomization_test([0.9, 0.8, 0.7, 0.9], [0.5, 0.6, 0.6, 0.4])  # exact, 2^4
        0.125
    """
    a, b = _pairs(a, b)
    num_resamples = _positive_int(num_resamples, "num_resamples")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an int, got {seed!r}")
    n = a.numel()
    if n == 0:
        return math.nan
    d = torch.sort(a - b).values
    observed = float(torch.ones(1, n, dtype=torch.float64) @ d / n)
    gamma = 100 * _EPS * abs(observed)
    return _sign_flip_p_value(n, lambda signs: signs @ d / n, observed, gamma, num_resamples,
                              seed)  # fmt: skip


def paired_test(
    a: Any, b: Any, test: str = "t-test", num_resamples: int = 10_000, seed: int = 0
) -> float:
    """The p-value of the paired test ``test`` names ("t-test": :func:`paired_t_test`;
    "randomization": :func:`paired_randomization_test` with ``num_resamples`` and ``seed``).

    Example:
        >>> paired_test([0.9, 0.8, 0.7, 0.9], [0.5, 0.6, 0.6, 0.4], "randomization")
        0.125
    """
    if check_test(test) == "t-test":
        return paired_t_test(a, b)
    return paired_randomization_test(a, b, num_resamples, seed)


# --------------------------------------------------------------------------- corrections


def correct_p_values(p: Any, method: str = "holm") -> Tensor:
    """Adjusted p-values of a family of comparisons, in the order given.

    * ``"bonferroni"``: min(1, m p_i), m the number of p-values;
    * ``"holm"``: Holm's step-down: sorted ascending, p_(j) times (m - j + 1), made
      non-decreasing (running maximum), at most 1;
    * ``"benjamini-hochberg"``: the false discovery rate step-up: p_(j) times m / j, made
      non-decreasing from the largest down (running minimum), at most 1;
    * ``"none"``: the p-values as given.

    The values equal ``statsmodels.stats.multitest.multipletests(p, method=...)[1]`` for
    ``"bonferroni"``, ``"holm"`` and ``"fdr_bh"``. A NaN p-value (a comparison that could not be
    tested) is left out of the family: its adjusted value is NaN and the others are corrected
    as a family of the m non-NaN ones (statsmodels has no rule for NaN).

    Args:
        p: p-values in [0, 1] (1-D; NaN allowed).
        method: one of :data:`CORRECTIONS`.

    Returns:
        A float64 tensor of the adjusted p-values, in the order of ``p``.

    Example:
        >>> correct_p_values([0.01, 0.04, 0.03], "holm").tolist()
        [0.03, 0.06, 0.06]
        >>> adjusted = correct_p_values([0.01, 0.04, 0.03], "benjamini-hochberg")
        >>> torch.round(adjusted, decimals=12).tolist()
        [0.03, 0.04, 0.04]
    """
    method = check_correction(method)
    p = _vector(p, "p")
    known = ~torch.isnan(p)
    if bool(((p[known] < 0) | (p[known] > 1)).any()):
        raise ValueError(
            f"`p` must hold p-values in [0, 1] (or NaN for a comparison not tested), got "
            f"{p[known][(p[known] < 0) | (p[known] > 1)][:3].tolist()}"
        )
    out = torch.full_like(p, math.nan)
    q = p[known]
    m = q.numel()
    if m == 0:
        out[known] = q
        return out
    if method == "none":
        adjusted = q.clone()
    elif method == "bonferroni":
        adjusted = (q * float(m)).clamp(max=1.0)
    else:
        order = torch.sort(q, stable=True).indices
        ranked = q[order]
        if method == "holm":
            raw = ranked * torch.arange(m, 0, -1, dtype=torch.float64)
            step = torch.cummax(raw, 0).values
        else:
            raw = ranked / (torch.arange(1, m + 1, dtype=torch.float64) / float(m))
            step = torch.cummin(raw.flip(0), 0).values.flip(0)
        adjusted = torch.empty_like(q)
        adjusted[order] = step.clamp(max=1.0)
    out[known] = adjusted
    return out


# --------------------------------------------------------------------------- wins, ties, losses


def wins_ties_losses(a: Any, b: Any, higher_is_better: bool = True) -> tuple[int, int, int]:
    """Queries where ``a`` beats ``b``, ties with it, and loses to it.

    A tie: |a_i - b_i| <= 1e-12 + 1e-12 |b_i| (:data:`TIE_TOLERANCE`, ``torch.isclose`` with
    that rtol and atol), so that values equal but for rounding (an average precision summed in
    another order) tie. Otherwise a win is a higher value (a lower one for ranks:
    ``higher_is_better=False``). Pairs with a NaN on either side are not counted.

    Example:
        >>> wins_ties_losses([1.0, 0.5, 0.2, 0.3], [0.5, 0.5, 0.4, float("nan")])
        (1, 1, 1)
        >>> wins_ties_losses([1.0, 3.0], [2.0, 3.0], higher_is_better=False)  # ranks
        (1, 1, 0)
    """
    a, b = _pairs(a, b)
    tie = torch.isclose(a, b, rtol=TIE_TOLERANCE, atol=TIE_TOLERANCE)
    better = (a > b) if higher_is_better else (a < b)
    wins = int((better & ~tie).sum())
    ties = int(tie.sum())
    return wins, ties, a.numel() - wins - ties
