"""Measures: every metric of the library, from a :class:`RankTable`. No embeddings here.

The definitions, with formulas, are in the documentation's Definitions page (docs/definitions.md).

Each ``*_per_query`` function returns a ``(Q,)`` float64 tensor with NaN for unanswerable queries
(m_q = 0); :func:`aggregate` applies ``empty_queries``, ``average`` and ``percent``.
:func:`retrieval_measures` computes several named metrics at once, the way
``RetrievalMetrics`` names them ("hit_rate@1", "map@r", "cmc@50", ...).

All three tie rules are exact (``ties``; see :mod:`retrieval_metrics.functional.ties`).
"""

from __future__ import annotations

import contextlib
import difflib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional import ties as T
from retrieval_metrics.functional.primitives import flat_nonzero, repeat
from retrieval_metrics.functional.table import UNBOUNDED, RankTable, concat_tables

__all__ = [
    "AVERAGES",
    "EMPTY_QUERIES",
    "MEASURES",
    "Measure",
    "MetricSpec",
    "aggregate",
    "aggregate_query_parts",
    "auroc_per_query",
    "average_for",
    "average_precision_per_query",
    "chance_table",
    "cmc_per_query",
    "fall_out_per_query",
    "first_rank_per_query",
    "hit_rate_per_query",
    "map_at_r_per_query",
    "median_rank",
    "minp_per_query",
    "ndcg_per_query",
    "parse_metric",
    "precision_per_query",
    "query_parts_in_chunks",
    "r_precision_per_query",
    "recall_per_query",
    "reciprocal_rank_per_query",
    "retrieval_measures",
    "retrieval_measures_in_chunks",
]

EMPTY_QUERIES = ("skip", "zero", "error")
AVERAGES = ("macro", "micro", "class")
MEDIAN_CONVENTIONS = ("vsepp", "plain")
AP_KINDS = ("step", "trapezoid")
AP_DIVISORS = ("relevant", "min", "retrieved")


# Per shared call (one retrieval_measures call, one chunk of queries): each table's tie groups
# under each rule, shared by every metric, and the groups' precision sums over the whole ranking
# (AP, MAP@R and AP@K each cut them). An entry holds its table, so that the table's id, part of
# the key, cannot be taken by another table while the entry lives.
_GROUP_CACHE: dict[tuple[Any, ...], tuple[RankTable, Any]] | None = None


def _cached(table: RankTable, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    if _GROUP_CACHE is None:
        return make()
    key = (id(table), *key)
    if key not in _GROUP_CACHE:
        _GROUP_CACHE[key] = (table, make())
    return _GROUP_CACHE[key][1]


def _groups(table: RankTable, ties: str, gain: str | None = None) -> T.TieGroups:
    if gain == "linear" or (
        gain == "exponential" and (table.grade is None or bool((table.grade == 1).all()))
    ):
        # Grades of 1 (binary relevance included) give 2^1 - 1 = 1 = the linear gain: the same
        # groups as the measures without a gain, so they are built once.
        gain = None
    return _cached(table, ("groups", ties, gain), lambda: T.tie_groups(table, ties, gain=gain))


def _whole_precision_sum(table: RankTable, groups: T.TieGroups, ties: str) -> Tensor | None:
    """The groups' precision sums without a cut-off, computed once per shared call (None
    outside one: a single measure gains nothing from computing them)."""
    if _GROUP_CACHE is None:
        return None

    def whole() -> Tensor:
        return T.expected_precision_sum(groups, torch.full_like(groups.above, UNBOUNDED))

    return _cached(table, ("precision sums", ties), whole)


@contextlib.contextmanager
def _sharing_tie_groups() -> Iterator[None]:
    """Share tie groups between the measures computed inside (the outermost call owns the cache,
    so nested calls reuse it and the cache never outlives the call)."""
    global _GROUP_CACHE
    outer = _GROUP_CACHE is None
    if outer:
        _GROUP_CACHE = {}
    try:
        yield
    finally:
        if outer:
            _GROUP_CACHE = None


def _cutoff(k: int, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`{name}` must be a positive int, got {k!r}")
    return k


def _query_sum(table: RankTable, groups: T.TieGroups, values: Tensor) -> Tensor:
    out = torch.zeros(table.num_queries, dtype=torch.float64)
    return out.index_add_(0, groups.query, values.to(torch.float64))


def _require_depth(table: RankTable, cutoff: Tensor, what: str) -> None:
    """Refuse a measure whose cut-off reaches below the depth the table was ranked to."""
    unlisted = table.num_listed < table.num_relevant
    bad = unlisted & (table.depth != UNBOUNDED) & (cutoff > table.depth)
    if bool(bad.any()):
        q = int(flat_nonzero(bad)[0])
        raise ValueError(
            f"{what} needs positions down to {int(cutoff[q])} but the ranking was truncated at "
            f"depth {int(table.depth[q])} (query {q}); rank with a larger `depth` or depth=None"
        )


def _unanswerable_nan(table: RankTable, values: Tensor) -> Tensor:
    return torch.where(table.num_relevant > 0, values, torch.full_like(values, math.nan))


def _as_cutoff(table: RankTable, k: int | Tensor | None) -> Tensor:
    if k is None:
        return torch.full((table.num_queries,), UNBOUNDED, dtype=torch.int64)
    if isinstance(k, Tensor):
        return k.to(torch.int64)
    return torch.full((table.num_queries,), _cutoff(k), dtype=torch.int64)


def expected_hits_per_query(table: RankTable, k: int | Tensor, ties: str = "expected") -> Tensor:
    """E[h_q(K)]: relevant items in the top K (NaN-free; 0 for unanswerable queries)."""
    cutoff = _as_cutoff(table, k)
    _require_depth(table, cutoff, "a cut-off measure")
    groups = _groups(table, ties)
    return _query_sum(table, groups, T.expected_hits(groups, cutoff[groups.query]))


def hit_rate_per_query(table: RankTable, k: int | Tensor, ties: str = "expected") -> Tensor:
    """1[r_q <= K]; under "expected" ties, the probability of a hit in the top K."""
    cutoff = _as_cutoff(table, k)
    q, a, t, r = _groups(table, ties).first_groups()
    p = 1.0 - T.miss_probability(t, r, T.positions_in_cutoff(a, t, cutoff.index_select(0, q)))
    out = torch.zeros(table.num_queries, dtype=torch.float64)
    out[q] = p
    return _unanswerable_nan(table, out)


def recall_per_query(table: RankTable, k: int | Tensor, ties: str = "expected") -> Tensor:
    """h_q(K) / m_q."""
    hits = expected_hits_per_query(table, k, ties)
    return _unanswerable_nan(table, hits / table.num_relevant.clamp_min(1))


def precision_per_query(table: RankTable, k: int, ties: str = "expected") -> Tensor:
    """h_q(K) / K (the divisor stays K when the gallery is smaller)."""
    k = _cutoff(k)
    return _unanswerable_nan(table, expected_hits_per_query(table, k, ties) / k)


def r_precision_per_query(table: RankTable, ties: str = "expected") -> Tensor:
    """h_q(m_q) / m_q."""
    m = table.num_relevant.clamp_min(1)
    return _unanswerable_nan(table, expected_hits_per_query(table, m, ties) / m)


def _precision_sum(table: RankTable, cutoff: Tensor, ties: str) -> Tensor:
    _require_depth(table, cutoff, "average precision")
    groups = _groups(table, ties)
    whole = _whole_precision_sum(table, groups, ties)
    return _query_sum(
        table, groups, T.expected_precision_sum(groups, cutoff[groups.query], whole)
    )


def map_at_r_per_query(table: RankTable, ties: str = "expected") -> Tensor:
    """MAP@R (Musgrave et al. 2020): (1/m) sum_{i <= m} P(i) rel(i)."""
    m = table.num_relevant.clamp_min(1)
    return _unanswerable_nan(table, _precision_sum(table, m, ties) / m)


def average_precision_per_query(
    table: RankTable,
    k: int | Tensor | None = None,
    ties: str = "expected",
    ap: str = "step",
    divisor: str = "relevant",
) -> Tensor:
    """Average precision over the whole ranking, or AP@K with a cut-off.

    Args:
        k: cut-off, or one per query as a ``(Q,)`` tensor; ``None`` is the whole ranking.
        ap: ``"step"`` (torchreid, trec_eval) or ``"trapezoid"`` (official Market-1501 code; only
            without a cut-off).
        divisor: for AP@K, ``"relevant"`` m_q (Manning et al., trec_eval map_cut), ``"min"``
            min(m_q, K) (MSLS), ``"retrieved"`` h_q(K) (torchmetrics; 0/0 = 0).
    """
    if ap not in AP_KINDS:
        raise ValueError(f"`ap` must be one of {AP_KINDS}, got {ap!r}")
    if divisor not in AP_DIVISORS:
        raise ValueError(f"`divisor` must be one of {AP_DIVISORS}, got {divisor!r}")
    m = table.num_relevant.clamp_min(1).to(torch.float64)
    cutoff = _as_cutoff(table, k)
    if ap == "trapezoid":
        if k is not None:
            raise ValueError('`ap="trapezoid"` is defined over the whole ranking; use k=None')
        _require_depth(table, cutoff, "average precision")
        groups = _groups(table, ties)
        step = T.expected_precision_sum(
            groups, cutoff[groups.query], _whole_precision_sum(table, groups, ties)
        )
        extra = T.expected_trapezoid_extra(groups)
        total = _query_sum(table, groups, 0.5 * (step + extra))
        return _unanswerable_nan(table, total / m)
    if divisor == "retrieved" and k is not None:
        return _unanswerable_nan(table, _ap_over_retrieved(table, cutoff, ties))
    total = _precision_sum(table, cutoff, ties)
    if k is not None and divisor == "min":
        m = torch.minimum(m, torch.tensor(float(k), dtype=torch.float64))
    return _unanswerable_nan(table, total / m)


def _ap_over_retrieved(table: RankTable, cutoff: Tensor, ties: str) -> Tensor:
    """E[(sum_{p<=K} rel(p) P(p)) / h(K)], 0 when h(K) = 0, exact under expected ties.

    Only the group straddling K makes h(K) random. Conditioning on the number j of its relevant
    items that land in the top part (hypergeometric), that part is a uniformly random arrangement
    of j relevant items in u positions, and the rest of the numerator is unchanged.
    """
    _require_depth(table, cutoff, "average precision")
    groups = _groups(table, ties)
    k = cutoff[groups.query]
    end = groups.above + groups.size
    inside = end <= k
    straddle = (groups.above < k) & ~inside
    fixed_num = _query_sum(
        table,
        groups,
        torch.where(
            inside,
            T.expected_precision_sum(groups, k, _whole_precision_sum(table, groups, ties)),
            0.0,
        ),
    )
    fixed_hits = _query_sum(
        table, groups, torch.where(inside, groups.relevant, 0).to(torch.float64)
    )
    result = torch.where(fixed_hits > 0, fixed_num / fixed_hits.clamp_min(1), 0.0)
    idx = flat_nonzero(straddle)
    if idx.numel() == 0:
        return result
    q = groups.query[idx]
    t, r, a = groups.size[idx], groups.relevant[idx], groups.above[idx]
    u = (k[idx] - a).clamp_min(0)
    before = groups.relevant_before[idx].to(torch.float64)
    n0 = fixed_num[q]
    h0 = fixed_hits[q]
    expectation = torch.zeros(idx.numel(), dtype=torch.float64)
    for j in range(0, int(torch.minimum(r, u).max()) + 1):
        valid = (j <= r) & (j <= u) & (r - j <= t - u)
        jj = torch.full_like(t, j)
        log_p = T.log_binomial(r, jj) + T.log_binomial(t - r, u - jj) - T.log_binomial(t, u)
        p = torch.where(valid, torch.exp(log_p), 0.0)
        beta = torch.where(
            u > 1, (jj - 1).clamp_min(0).to(torch.float64) / (u - 1).clamp_min(1), 0.0
        )
        part = (jj.to(torch.float64) / u.clamp_min(1)) * T.position_sum(before + 1, beta, a, u)
        hits = h0 + j
        value = torch.where(hits > 0, (n0 + part) / hits.clamp_min(1), 0.0)
        expectation += p * value
    result[q] = expectation
    return result


def reciprocal_rank_per_query(
    table: RankTable, k: int | Tensor | None = None, ties: str = "expected"
) -> Tensor:
    """1 / r_q; with a cut-off K, 0 when r_q > K. Expected under random order inside ties."""
    limit = _as_cutoff(table, k)
    groups = _groups(table, ties)
    per_group = T.expected_reciprocal_first(groups, limit[groups.query])
    return _unanswerable_nan(table, _query_sum(table, groups, per_group))


def first_rank_per_query(table: RankTable, ties: str = "expected") -> Tensor:
    """r_q, the rank of the best-ranked relevant item (its expectation under "expected" ties).

    Infinite when no relevant item was retrieved (ranked lists).
    """
    groups = _groups(table, ties)
    out = torch.full((table.num_queries,), math.inf, dtype=torch.float64)
    first = groups.first_index
    out[groups.query[first]] = T.expected_first_position(groups)[first]
    return _unanswerable_nan(table, out)


def ndcg_per_query(
    table: RankTable, k: int | None = None, ties: str = "expected", gain: str = "exponential"
) -> Tensor:
    """DCG@K / IDCG@K with gain 2^g - 1 ("exponential") or g ("linear"); binary grade is 1."""
    cutoff = _as_cutoff(table, k)
    _require_depth(table, cutoff, "NDCG")
    groups = _groups(table, ties, gain=gain)
    end = groups.above + groups.size
    limit = cutoff[groups.query]
    top = int(torch.minimum(end, limit).max()) if end.numel() else 0
    if table.ideal_grade is not None:
        top = max(top, int(table.ideal_ptr.diff().max()) if table.num_queries else 0)
    else:
        top = max(top, int(table.num_relevant.max()) if table.num_queries else 0)
    if k is not None:
        top = min(top, k) if top else 0
    positions = torch.arange(1, top + 1, dtype=torch.float64)
    discount = torch.zeros(top + 1, dtype=torch.float64)
    discount[1:] = torch.cumsum(1.0 / torch.log2(1.0 + positions), 0)
    lo = torch.minimum(groups.above, limit).clamp_max(top)
    hi = torch.minimum(end, limit).clamp_max(top)
    dcg_part = groups.gain / groups.size.to(torch.float64) * (discount[hi] - discount[lo])
    dcg = _query_sum(table, groups, dcg_part)
    if table.ideal_grade is not None and table.ideal_ptr is not None:
        grades = table.ideal_grade
        ideal_gain = torch.pow(2.0, grades) - 1.0 if gain == "exponential" else grades.clone()
        owner = repeat(torch.arange(table.num_queries), table.ideal_ptr.diff())
        pos = torch.arange(grades.numel()) - table.ideal_ptr[:-1][owner] + 1
        keep = pos <= cutoff[owner]
        weight = torch.where(keep, ideal_gain / torch.log2(1.0 + pos.to(torch.float64)), 0.0)
        idcg = torch.zeros(table.num_queries, dtype=torch.float64).index_add_(0, owner, weight)
    else:
        idcg = discount[torch.minimum(table.num_relevant, cutoff).clamp_max(top)]
    value = torch.where(idcg > 0, dcg / idcg.clamp_min(1e-300), 0.0)
    return _unanswerable_nan(table, value)


def cmc_per_query(table: RankTable, max_rank: int, ties: str = "expected") -> Tensor:
    """``(Q, max_rank)``: P(r_q <= k) for k = 1..max_rank (rows of NaN for unanswerable)."""
    max_rank = _cutoff(max_rank, "max_rank")
    q, a, t, r = _groups(table, ties).first_groups()
    ks = torch.arange(1, max_rank + 1)
    u = torch.minimum((ks[None, :] - a[:, None]).clamp_min(0), t[:, None])
    p = 1.0 - T.miss_probability(t[:, None].expand_as(u), r[:, None].expand_as(u), u)
    out = torch.zeros(table.num_queries, max_rank, dtype=torch.float64)
    out[q] = p
    out[table.num_relevant == 0] = math.nan
    return out


def fall_out_per_query(table: RankTable, k: int | Tensor | None = None,
                       ties: str = "expected") -> Tensor:
    """Non-relevant items in the top K over all non-relevant items of the query:
    (min(K, N_q) - h_q(K)) / (N_q - m_q), NaN when every item is relevant. Lower is better.

    The table must list every relevant item (the scores form does).
    """
    n = table.gallery_size
    cutoff = torch.minimum(_as_cutoff(table, k), n)
    hits = expected_hits_per_query(table, cutoff, ties)
    negatives = (n - table.num_relevant).to(torch.float64)
    value = (cutoff.to(torch.float64) - hits) / negatives.clamp_min(1)
    return torch.where(negatives > 0, value, torch.full_like(value, math.nan))


def _ramp_area(f0: Tensor, f1: Tensor, limit: Tensor) -> Tensor:
    """Integral over [0, limit] of the ramp that is 0 up to f0, rises linearly to 1 at f1 and
    stays 1 (a step at f0 when f0 == f1)."""
    width = (f1 - f0).clamp_min(1e-300)
    inside = (limit - f0).clamp_min(0.0) ** 2 / (2 * width)
    full = limit - (f0 + f1) / 2
    return torch.where(limit <= f0, 0.0, torch.where(limit >= f1, full, inside))


def auroc_per_query(
    table: RankTable,
    k: int | Tensor | None = None,
    max_fpr: float | None = None,
    ties: str = "expected",
) -> Tensor:
    """Area under the ROC curve of each query's ranking (its top K with a cut-off), relevant
    items against non-relevant ones; with ``max_fpr``, the McClish-standardised partial area up to
    that false positive rate. NaN when the top K lacks relevant or non-relevant items.

    Tied relevant and non-relevant items are joined by a straight segment of the curve (each
    tied pair counts one half), so the full area is the expected one under random order inside
    ties. The table must list every relevant item (the scores form does). A tie group across
    the K-th position counts as inside the top K.
    """
    if max_fpr is not None and not (0 < max_fpr <= 1):
        raise ValueError(f"`max_fpr` must be in (0, 1], got {max_fpr!r}")
    n = table.gallery_size
    cutoff = torch.minimum(_as_cutoff(table, k), n)
    # A group across the K-th position counts whole: runs of relevant groups stay apart.
    groups = T.tie_groups(table, ties, merge_runs=False)
    inside = groups.above < cutoff[groups.query]
    p_group = torch.where(inside, groups.relevant, 0).to(torch.float64)
    positives = _query_sum(table, groups, p_group)
    negatives = cutoff.to(torch.float64) - positives
    neg_above = (groups.above - groups.relevant_before).to(torch.float64)
    neg_tied = (groups.size - groups.relevant).to(torch.float64)
    n_q = negatives[groups.query].clamp_min(1)
    f0, f1 = neg_above / n_q, (neg_above + neg_tied) / n_q
    limit = 1.0 if max_fpr is None else float(max_fpr)
    area = _ramp_area(f0, f1, torch.full_like(f0, limit))
    value = _query_sum(table, groups, p_group * area) / positives.clamp_min(1)
    if max_fpr is not None and max_fpr != 1:
        low = 0.5 * limit**2
        value = 0.5 * (1 + (value - low) / (limit - low))
    ok = (positives > 0) & (negatives > 0)
    return torch.where(ok, value, torch.full_like(value, math.nan))


def minp_per_query(table: RankTable, ties: str = "expected") -> Tensor:
    """mINP (Ye et al.): m_q / rank of the last relevant item; 0 if one was never retrieved."""
    complete = table.num_listed == table.num_relevant
    unbounded = table.depth == UNBOUNDED
    bad = ~complete & ~unbounded & (table.num_relevant > 0)
    if bool(bad.any()):
        raise ValueError(
            "mINP needs every relevant item's position, but the ranking was truncated by `depth`"
        )
    groups = _groups(table, ties)
    limit = torch.full((groups.query.numel(),), UNBOUNDED, dtype=torch.int64)
    inv_last = _query_sum(table, groups, T.expected_reciprocal_last(groups, limit))
    value = torch.where(complete, table.num_relevant.to(torch.float64) * inv_last, 0.0)
    return _unanswerable_nan(table, value)


# ------------------------------------------------------------------------------------------
# Aggregation
# ------------------------------------------------------------------------------------------


def _empty_fill(values: Tensor, table: RankTable, empty_queries: str, fill: float) -> Tensor:
    if empty_queries not in EMPTY_QUERIES:
        raise ValueError(f"`empty_queries` must be one of {EMPTY_QUERIES}, got {empty_queries!r}")
    empty = table.num_relevant == 0
    if empty_queries == "error" and bool(empty.any()):
        which = flat_nonzero(empty)
        shown = which[:10].tolist()
        raise ValueError(
            f"{int(empty.sum())} queries have no relevant gallery item (queries {shown}"
            f"{' ...' if which.numel() > 10 else ''}); pass empty_queries='skip' or 'zero'"
        )
    if empty_queries == "zero":
        fill_value = torch.full_like(values, fill)
        return torch.where(empty.view(-1, *([1] * (values.dim() - 1))), fill_value, values)
    return values


def aggregate(
    values: Tensor,
    table: RankTable,
    *,
    empty_queries: str = "skip",
    average: str = "macro",
    percent: bool = False,
    numerator: Tensor | None = None,
    denominator: Tensor | None = None,
    fill: float = 0.0,
) -> Tensor:
    """Mean over counted queries, as a 0-d float64 tensor (a vector for CMC rows).

    ``empty_queries``: "skip" leaves unanswerable queries out, "zero" scores them ``fill``,
    "error" raises. ``average``: "macro" (mean over queries), "class" (mean over classes of each
    class's mean; the table needs ``query_class``), "micro" (sum of ``numerator`` over sum of
    ``denominator``, for recall-like metrics). NaN when no query counts.
    """
    if average not in AVERAGES:
        raise ValueError(f"`average` must be one of {AVERAGES}, got {average!r}")
    values = _empty_fill(values, table, empty_queries, fill)
    counted = ~torch.isnan(values) if values.dim() == 1 else ~torch.isnan(values[:, 0])
    scale = 100.0 if percent else 1.0
    if average == "micro":
        if numerator is None or denominator is None:
            raise ValueError('`average="micro"` applies to recall, precision and R-precision only')
        num = numerator[counted].sum()
        den = denominator[counted].sum()
        return (num / den if den > 0 else torch.tensor(math.nan, dtype=torch.float64)) * scale
    if average == "class":
        if table.query_class is None:
            raise ValueError('`average="class"` needs query labels')
        classes, cls_of = torch.unique(table.query_class[counted], return_inverse=True)
        if classes.numel() == 0:
            return _nan_like(values) * scale
        v = values[counted]
        sums = torch.zeros((classes.numel(), *v.shape[1:]), dtype=torch.float64).index_add_(
            0, cls_of, v
        )
        counts = torch.bincount(cls_of, minlength=classes.numel()).to(torch.float64)
        return (sums / counts.view(-1, *([1] * (v.dim() - 1)))).mean(0) * scale
    if not bool(counted.any()):
        return _nan_like(values) * scale
    return values[counted].mean(0) * scale


def _nan_like(values: Tensor) -> Tensor:
    if values.dim() == 1:
        return torch.tensor(math.nan, dtype=torch.float64)
    return torch.full(values.shape[1:], math.nan, dtype=torch.float64)


def median_rank(ranks: Tensor, convention: str = "vsepp") -> Tensor:
    """Median of per-query ranks, NaN entries dropped.

    ``"vsepp"``: floor(median(r - 1)) + 1, as the VSE++ evaluation code computes it; ``"plain"``:
    the ordinary median (mean of the two middle values for an even count).
    """
    if convention not in MEDIAN_CONVENTIONS:
        raise ValueError(f"`convention` must be one of {MEDIAN_CONVENTIONS}, got {convention!r}")
    r = ranks[~torch.isnan(ranks)].sort().values
    n = r.numel()
    if n == 0:
        return torch.tensor(math.nan, dtype=torch.float64)
    mid = (r[(n - 1) // 2] + r[n // 2]) / 2
    if convention == "vsepp":
        return torch.floor(mid - 1) + 1
    return mid


def chance_table(table: RankTable) -> RankTable:
    """The table a uniformly random ranking gives in expectation: one tie group of the whole
    gallery per query. Any measure of it under ``ties="expected"`` is that measure's chance level
    (docs/definitions.md, Chance level); for a single relevant item, hit rate @K is K/N.
    """
    q = table.num_queries
    m = table.num_relevant
    counts = (m > 0).to(torch.int64) * m
    ptr = torch.zeros(q + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=ptr[1:])
    n = int(ptr[-1])
    owner = repeat(torch.arange(q), counts)
    grade = None
    if table.ideal_grade is not None and table.ideal_ptr is not None:
        grade = table.ideal_grade.clone()
    return RankTable(
        ptr=ptr,
        above=torch.zeros(n, dtype=torch.int64),
        tied=table.gallery_size[owner].clone(),
        num_relevant=m.clone(),
        gallery_size=table.gallery_size.clone(),
        depth=table.gallery_size.clone(),
        grade=grade,
        ideal_ptr=table.ideal_ptr,
        ideal_grade=table.ideal_grade,
        query_class=table.query_class,
    )


# ------------------------------------------------------------------------------------------
# Named metrics
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Measure:
    """One named measure: how to compute it per query and what it needs.

    Attributes:
        base: the name before "@" ("hit_rate", "map", ...).
        per_query: ``(table, k, options) -> (Q,)`` values (CMC: ``(Q, K)``); ``options`` holds
            ``ties``, ``ap``, ``divisor`` and ``gain``.
        cutoff: "required" (hit_rate@10), "optional" (map, map@100), "none" (minp) or "r"
            (map@r: R = each query's number of relevant items, also accepted beside "optional").
        depth: positions that must be known exactly, from the cut-off: an int, None for the
            whole ranking, or "relevant" for at least m_q positions per query.
        micro: ``(table, k, ties) -> (numerator, denominator)`` per query for
            ``average="micro"``, or None where a micro average is not defined.
        rank: a rank (lower is better), aggregated as a median or mean of ranks.
    """

    base: str
    per_query: Callable[[RankTable, Any, dict[str, Any]], Tensor]
    cutoff: str = "none"
    depth: Callable[[Any], int | str | None] = lambda k: None
    micro: Callable[[RankTable, Any, str], tuple[Tensor, Tensor]] | None = None
    rank: bool = False


def _first_only(k: Any) -> int:
    return 1  # only each query's best relevant item, which is always located exactly


def _micro_recall(table: RankTable, k: Any, ties: str) -> tuple[Tensor, Tensor]:
    return expected_hits_per_query(table, k, ties), table.num_relevant.to(torch.float64)


def _micro_precision(table: RankTable, k: Any, ties: str) -> tuple[Tensor, Tensor]:
    hits = expected_hits_per_query(table, k, ties)
    return hits, torch.full_like(hits, float(k))


def _micro_r_precision(table: RankTable, k: Any, ties: str) -> tuple[Tensor, Tensor]:
    hits = expected_hits_per_query(table, table.num_relevant.clamp_min(1), ties)
    return hits, table.num_relevant.to(torch.float64)


def _average_precision(table: RankTable, k: Any, o: dict[str, Any]) -> Tensor:
    if k == "r":
        return map_at_r_per_query(table, o["ties"])
    return average_precision_per_query(table, k, o["ties"], ap=o["ap"], divisor=o["divisor"])


#: every named measure, by base name
MEASURES: dict[str, Measure] = {
    m.base: m
    for m in (
        Measure("hit_rate", lambda t, k, o: hit_rate_per_query(t, k, o["ties"]), "required",
                _first_only),
        Measure("recall", lambda t, k, o: recall_per_query(t, k, o["ties"]), "required",
                lambda k: k, _micro_recall),
        Measure("precision", lambda t, k, o: precision_per_query(t, k, o["ties"]), "required",
                lambda k: k, _micro_precision),
        Measure("r_precision", lambda t, k, o: r_precision_per_query(t, o["ties"]), "none",
                lambda k: "relevant", _micro_r_precision),
        Measure("map", _average_precision, "optional",
                lambda k: "relevant" if k == "r" else k),
        Measure("map_trapezoid",
                lambda t, k, o: average_precision_per_query(t, None, o["ties"], ap="trapezoid")),
        Measure("mrr", lambda t, k, o: reciprocal_rank_per_query(t, k, o["ties"]), "optional",
                _first_only),
        Measure("ndcg", lambda t, k, o: ndcg_per_query(t, k, o["ties"], o["gain"]), "optional",
                lambda k: k),
        Measure("cmc", lambda t, k, o: cmc_per_query(t, k, o["ties"]), "required", _first_only),
        Measure("median_rank", lambda t, k, o: first_rank_per_query(t, o["ties"]),
                depth=_first_only, rank=True),
        Measure("mean_rank", lambda t, k, o: first_rank_per_query(t, o["ties"]),
                depth=_first_only, rank=True),
        Measure("minp", lambda t, k, o: minp_per_query(t, o["ties"])),
    )
}
RANK_METRICS = {base for base, m in MEASURES.items() if m.rank}
_NAME = re.compile(rf"^(?P<base>{'|'.join(sorted(MEASURES, key=len, reverse=True))})"
                   rf"(@(?P<k>r|\d+))?(/(?P<average>{'|'.join(AVERAGES)}))?$")


@dataclass(frozen=True)
class MetricSpec:
    """A parsed metric name: ``base``, cut-off ``k`` (None, an int, or "r" for map@r) and the
    ``average`` the name fixes ("recall@5/micro"), None to follow the metric's ``average``."""

    name: str
    base: str
    k: int | str | None
    average: str | None = None

    @property
    def measure(self) -> Measure:
        return MEASURES[self.base]

    @property
    def higher_is_better(self) -> bool:
        return not self.measure.rank

    def depth_needed(self) -> int | str | None:
        """Positions that must be known exactly: an int, None (the whole ranking) or
        "relevant" (at least m_q per query)."""
        return self.measure.depth(self.k)


# Names other libraries and papers use, as (pattern on the lower-cased name, suggestion); "{k}" is
# the cut-off the name carried.
_ALIASES: tuple[tuple[str, str], ...] = (
    (r"r@(?P<k>\d+)", "did you mean hit_rate@{k} (\"R@K\" of image-text, metric-learning and "
     "re-id papers: a relevant item in the top K) or recall@{k} (the IR measure: the share of "
     "relevant items in the top K)?"),
    (r"(rank|top|acc|accuracy|hits?|hr|hitrate|success)[-_@ ]?(?P<k>\d+)",
     "did you mean hit_rate@{k}?"),
    (r"(p|prec|precision)(@|_|_at_)(?P<k>\d+)", "did you mean precision@{k}?"),
    (r"(recall|r)(_|_at_)(?P<k>\d+)", "did you mean recall@{k}?"),
    (r"ndcg_cut_(?P<k>\d+)", "did you mean ndcg@{k}?"),
    (r"map_cut_(?P<k>\d+)", "did you mean map@{k}?"),
    (r"(recip_rank|mean_reciprocal_rank)", "did you mean mrr?"),
    (r"(rprec|r-?prec|r-precision|rprecision)", "did you mean r_precision?"),
    (r"(map@r|mapr|map_at_r|map-r)", "did you mean map@r?"),
    (r"(mean_average_precision|m_ap)", "did you mean map?"),
    (r"(medr|med_r|median)", "did you mean median_rank?"),
    (r"(meanr|mean_r|mnr)", "did you mean mean_rank?"),
    (r"cmc", "did you mean cmc@K (e.g. cmc@50)?"),
    (r"rsum", "rsum is reported by CrossModalRetrieval and RSum (image-text, both directions), "
     "not by a one-direction metric."),
)


def suggest_metric(name: str) -> str | None:
    """A hint for an unknown metric name: the library's name for a common alias ("R@1", "P@10",
    "rank-1", "ndcg_cut_10", ...) or the closest known name for a typo; None if nothing is near."""
    text = str(name).strip().lower()
    head, slash, average = text.partition("/")
    if slash:
        if _NAME.match(head) is None:
            return suggest_metric(head)
        close = difflib.get_close_matches(average, AVERAGES, n=1, cutoff=0.6)
        if close:
            return f"did you mean {head}/{close[0]}?"
        return f"the part after '/' names an average, one of {', '.join(AVERAGES)}."
    for pattern, hint in _ALIASES:
        match = re.fullmatch(pattern, text)
        if match is not None:
            return hint.format(**match.groupdict())
    base, _, k = text.partition("@")
    close = difflib.get_close_matches(base, list(MEASURES), n=1, cutoff=0.75)
    if close:
        return f"did you mean {close[0]}{'@' + k if k else ''}?"
    return None


_MICRO_RULE = (
    'average="micro" (summed numerators over summed denominators) is defined for recall, '
    "precision and r_precision; the other measures are one score per query, averaged as the "
    "macro mean"
)


def parse_metric(name: str) -> MetricSpec:
    """Parse "hit_rate@1", "recall@10", "map@r", "map", "map@100", "mrr", "mrr@10", "ndcg@10",
    "cmc@50", "r_precision", "median_rank", "mean_rank", "minp", "map_trapezoid".

    A name may fix its own average with a suffix: "recall@10/micro", "map@r/class",
    "hit_rate@1/macro" (see :func:`average_for`)."""
    if not isinstance(name, str):
        raise ValueError(f"metric names must be strings, got {name!r}")
    match = _NAME.match(name.strip().lower())
    if match is None:
        hint = suggest_metric(name)
        raise ValueError(
            f"unknown metric {name!r}{': ' + hint if hint else '.'} Known names: hit_rate@K, "
            "recall@K, precision@K, r_precision, map@r, map, map@K, map_trapezoid, mrr, mrr@K, "
            "ndcg, ndcg@K, cmc@K, median_rank, mean_rank, minp, each optionally with /macro, "
            "/micro or /class"
        )
    base, k = match.group("base"), match.group("k")
    cutoff = MEASURES[base].cutoff
    if k == "r" and base != "map":
        raise ValueError(f"unknown metric {name!r}: only map@r takes @r")
    if cutoff == "required" and k is None:
        raise ValueError(f"metric {name!r} needs a cut-off, e.g. {base}@10")
    if cutoff == "none" and k is not None:
        raise ValueError(f"metric {name!r} takes no cut-off; use {base!r}")
    k_value: int | str | None = k if k in (None, "r") else int(k)
    if isinstance(k_value, int) and k_value < 1:
        raise ValueError(f"metric {name!r}: the cut-off must be >= 1")
    average = match.group("average")
    if average is not None:
        if MEASURES[base].rank:
            raise ValueError(
                f"metric {name!r}: a rank is aggregated as a median or mean of ranks; no "
                "average applies"
            )
        if average == "micro" and MEASURES[base].micro is None:
            raise ValueError(f"metric {name!r}: {_MICRO_RULE}")
    return MetricSpec(name=name.strip().lower(), base=base, k=k_value, average=average)


def average_for(spec: MetricSpec, average: str) -> str:
    """The average ``spec`` is aggregated with under a metric's ``average``: the name's own when
    it fixes one; else ``average``, except that "micro" falls back to "macro" for a measure with
    no micro form (a per-query score, where summing numerators over denominators of 1 per query
    is the macro mean anyway)."""
    if spec.average is not None:
        return spec.average
    if average == "micro" and spec.measure.micro is None:
        return "macro"
    return average


def depth_for(names: Iterable[str]) -> tuple[int | None, bool]:
    """The ranking depth that serves all ``names``: ``(depth, cover_relevant)``.

    ``depth=None`` means the whole ranking; ``cover_relevant`` asks for at least m_q positions
    per query (R-precision, MAP@R).
    """
    depth, cover_relevant = 1, False
    for name in names:
        need = parse_metric(name).depth_needed()
        if need == "relevant":
            cover_relevant = True
        elif need is None:
            return None, False
        else:
            depth = max(depth, int(need))
    return depth, cover_relevant


def per_query_values(
    table: RankTable,
    spec: MetricSpec,
    *,
    ties: str = "expected",
    ap: str = "step",
    divisor: str = "relevant",
    gain: str = "exponential",
) -> Tensor:
    """Per-query values of one named metric (CMC: a ``(Q, K)`` matrix)."""
    options = {"ties": ties, "ap": ap, "divisor": divisor, "gain": gain}
    return spec.measure.per_query(table, spec.k, options)


def retrieval_measures(
    table: RankTable,
    names: Sequence[str],
    *,
    ties: str = "expected",
    empty_queries: str = "skip",
    average: str = "macro",
    percent: bool = False,
    ap: str = "step",
    divisor: str = "relevant",
    gain: str = "exponential",
    median: str = "vsepp",
) -> dict[str, Tensor]:
    """Several named metrics from one rank table, as 0-d float64 tensors (CMC: a vector).

    >>> from retrieval_metrics.functional.ranking import rank_lists
    >>> table = rank_lists([["d3", "d7", "d1"], ["d4", "d5"]], [{"d1"}, {"d4", "d6"}])
    >>> {k: round(float(v), 4) for k, v in retrieval_measures(table, ["recall@3", "mrr"]).items()}
    {'recall@3': 0.75, 'mrr': 0.6667}
    """
    return _measures(table, names, ties=ties, empty_queries=empty_queries, average=average,
                     percent=percent, ap=ap, divisor=divisor, gain=gain, median=median)


def chance_measures(table: RankTable, names: Sequence[str], **options) -> dict[str, Tensor]:
    """The chance level of each named metric on ``table``'s galleries: its
    value under a uniformly random ranking, aggregated like :func:`retrieval_measures`.

    A query's chance value depends only on its gallery size and number of relevant items (and
    grades), so each distinct pair is computed once.
    """
    options = {**options, "ties": "expected"}
    if table.ideal_grade is not None or table.num_queries == 0:
        return _measures(chance_table(table), names, **options)
    key = torch.stack([table.gallery_size, table.num_relevant], 1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    representative = torch.zeros(unique.shape[0], dtype=torch.int64).scatter_(
        0, inverse, torch.arange(table.num_queries)
    )
    # The chance table of the representatives only (one item per relevant pair of every query
    # would be as large as the rank table); the aggregation reads the per-query fields alone.
    fields = query_fields(table)
    chance_fields = replace(fields, depth=fields.gallery_size.clone())
    small = chance_table(fields.select(representative))
    return _measures(chance_fields, names, rows=(small, inverse), **options)


def _measures(
    table: RankTable,
    names: Sequence[str],
    *,
    ties: str = "expected",
    empty_queries: str = "skip",
    average: str = "macro",
    percent: bool = False,
    ap: str = "step",
    divisor: str = "relevant",
    gain: str = "exponential",
    median: str = "vsepp",
    rows: tuple[RankTable, Tensor] | None = None,
) -> dict[str, Tensor]:
    """retrieval_measures; with ``rows=(small, index)``, per-query values are computed on
    ``small`` and expanded to ``table``'s queries by ``index`` (queries known to be equal)."""
    if ties not in T.TIES:
        raise ValueError(f"`ties` must be one of {T.TIES}, got {ties!r}")
    with _sharing_tie_groups():
        return _measures_cached(table, names, ties, empty_queries, average, percent, ap,
                                divisor, gain, median, rows)


def _measures_cached(table, names, ties, empty_queries, average, percent, ap, divisor, gain,
                     median, rows) -> dict[str, Tensor]:
    parts = _per_query_parts(table, names, ties, average, ap, divisor, gain, rows)
    return _aggregate_parts(table, parts, empty_queries, average, percent, median)


def _per_query_parts(table, names, ties, average, ap, divisor, gain, rows
                     ) -> dict[str, tuple[Tensor, Tensor | None, Tensor | None]]:
    """Each named metric's per-query values, with the micro numerators and denominators where
    the metric is micro-averaged: everything the aggregation needs besides the table's
    per-query fields."""
    def each_query(fn):
        return fn(table) if rows is None else fn(rows[0])[rows[1]]

    parts: dict[str, tuple[Tensor, Tensor | None, Tensor | None]] = {}
    for name in names:
        spec = parse_metric(name)
        values = each_query(
            lambda t, spec=spec: per_query_values(t, spec, ties=ties, ap=ap, divisor=divisor,
                                                  gain=gain)
        )
        numerator = denominator = None
        if spec.base not in RANK_METRICS and average_for(spec, average) == "micro":
            micro = spec.measure.micro
            assert micro is not None  # average_for and parse_metric leave micro where defined
            if rows is None:
                numerator, denominator = micro(table, spec.k, ties)
            else:
                numerator, denominator = (v[rows[1]] for v in micro(rows[0], spec.k, ties))
        parts[spec.name] = (values, numerator, denominator)
    return parts


def _aggregate_parts(table, parts, empty_queries, average, percent, median) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for name, (values, numerator, denominator) in parts.items():
        spec = parse_metric(name)
        if spec.base in RANK_METRICS:
            if empty_queries == "zero":
                # An unanswerable query ranks after the whole gallery: the worst possible rank.
                worst = table.gallery_size.to(torch.float64) + 1
                values = torch.where(table.num_relevant == 0, worst, values)
            else:
                values = _empty_fill(values, table, empty_queries, 0.0)
            if spec.base == "median_rank":
                out[spec.name] = median_rank(values, median)
            else:
                counted = values[~torch.isnan(values)]
                out[spec.name] = counted.mean() if counted.numel() else torch.tensor(math.nan)
            continue
        out[spec.name] = aggregate(
            values,
            table,
            empty_queries=empty_queries,
            average=average_for(spec, average),
            percent=percent,
            numerator=numerator,
            denominator=denominator,
        )
    return out


def query_fields(table: RankTable) -> RankTable:
    """``table`` without its items: the per-query fields that aggregation reads."""
    return RankTable(
        ptr=torch.zeros(table.num_queries + 1, dtype=torch.int64),
        above=torch.zeros(0, dtype=torch.int64),
        tied=torch.zeros(0, dtype=torch.int64),
        num_relevant=table.num_relevant,
        gallery_size=table.gallery_size,
        depth=table.depth,
        query_class=table.query_class,
        query_id=table.query_id,
    )


QueryParts = dict[str, tuple[Tensor, "Tensor | None", "Tensor | None"]]


def retrieval_measures_in_chunks(
    tables: Iterable[RankTable],
    names: Sequence[str],
    *,
    ties: str = "expected",
    empty_queries: str = "skip",
    average: str = "macro",
    percent: bool = False,
    ap: str = "step",
    divisor: str = "relevant",
    gain: str = "exponential",
    median: str = "vsepp",
    exchange: Callable[[QueryParts, RankTable], tuple[QueryParts, RankTable]] | None = None,
) -> tuple[dict[str, Tensor], RankTable]:
    """:func:`retrieval_measures` of the queries of several tables taken together, one table at a
    time: each is reduced to per-query values before the next one is read, so that a ranking made
    a chunk of queries at a time never holds every relevant pair at once.

    Returns the values and the per-query fields of all the queries (:func:`query_fields`).
    ``exchange(parts, queries)`` returns them for the queries of every process (several
    processes, each with its share of the tables; ``distributed.gather_query_parts``).

    >>> from retrieval_metrics.functional.ranking import rank_lists
    >>> chunks = (rank_lists([["d3", "d7", "d1"]], [{"d1"}]), rank_lists([["d4"]], [{"d4", "d6"}]))
    >>> values, queries = retrieval_measures_in_chunks(chunks, ["recall@3", "mrr"])
    >>> {k: round(float(v), 4) for k, v in values.items()}, queries.num_queries
    ({'recall@3': 0.75, 'mrr': 0.6667}, 2)
    """
    parts, queries = query_parts_in_chunks(
        tables, names, ties=ties, average=average, ap=ap, divisor=divisor, gain=gain
    )
    if exchange is not None:
        parts, queries = exchange(parts, queries)
    return aggregate_query_parts(queries, parts, empty_queries, average, percent, median), queries


def query_parts_in_chunks(
    tables: Iterable[RankTable],
    names: Sequence[str],
    *,
    ties: str = "expected",
    average: str = "macro",
    ap: str = "step",
    divisor: str = "relevant",
    gain: str = "exponential",
) -> tuple[QueryParts, RankTable]:
    """Each named metric's per-query values (and micro numerators and denominators) of the
    queries of several tables, one table at a time, with those queries' fields
    (:func:`query_fields`): what :func:`aggregate_query_parts` turns into values, also after
    gathering the parts of several processes."""
    if ties not in T.TIES:
        raise ValueError(f"`ties` must be one of {T.TIES}, got {ties!r}")
    skeletons: list[RankTable] = []
    chunk_parts: list[dict[str, tuple[Tensor, Tensor | None, Tensor | None]]] = []
    for table in tables:
        with _sharing_tie_groups():  # one chunk's groups at a time
            chunk_parts.append(
                _per_query_parts(table, names, ties, average, ap, divisor, gain, None)
            )
        skeletons.append(query_fields(table))
    if not skeletons:
        raise ValueError("no rank table was given")
    queries = concat_tables(skeletons)

    def joined(parts: list[Tensor | None]) -> Tensor | None:
        return None if parts[0] is None else torch.cat(parts)  # type: ignore[arg-type]

    parts = {
        name: tuple(joined([p[name][i] for p in chunk_parts]) for i in range(3))
        for name in chunk_parts[0]
    }
    return parts, queries  # type: ignore[return-value]


def aggregate_query_parts(
    queries: RankTable,
    parts: QueryParts,
    empty_queries: str = "skip",
    average: str = "macro",
    percent: bool = False,
    median: str = "vsepp",
) -> dict[str, Tensor]:
    """The values of :func:`query_parts_in_chunks`' parts (``queries``: their query fields)."""
    return _aggregate_parts(queries, parts, empty_queries, average, percent, median)
