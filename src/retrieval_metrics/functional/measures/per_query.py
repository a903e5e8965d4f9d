"""Per-query measures: every measure of the library for each query of a :class:`RankTable`.

Each ``*_per_query`` function returns a ``(Q,)`` float64 tensor with NaN for unanswerable queries
(m_q = 0); :mod:`.aggregation` turns them into one value. The definitions, with formulas, are in the
documentation's Definitions page (docs/definitions.md); every tie rule is exact
(:mod:`.ties`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.measures.options import (
    DEFAULT_AP,
    DEFAULT_DIVISOR,
    DEFAULT_GAIN,
    DEFAULT_TIES,
)
from retrieval_metrics.functional.options import OPTIONS, check_option
from retrieval_metrics.functional.primitives import flat_nonzero, repeat
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = [
    "SharedTieGroups",
    "average_precision_per_query",
    "cmc_per_query",
    "dcg_per_query",
    "expected_hits_per_query",
    "f1_per_query",
    "first_rank_per_query",
    "granular_mrr_per_query",
    "hit_rate_per_query",
    "map_at_r_per_query",
    "minp_per_query",
    "ndcg_per_query",
    "precision_per_query",
    "r_precision_per_query",
    "recall_per_query",
    "reciprocal_rank_per_query",
]

AP_KINDS = OPTIONS["ap"].allowed
AP_DIVISORS = OPTIONS["divisor"].allowed


class SharedTieGroups:
    """What the measures of one shared call (one ``retrieval_measures`` call, one chunk of
    ``query_parts_in_chunks``) compute once and share: each table's tie groups under each rule,
    and the groups' precision sums over the whole ranking (AP, MAP@R and AP@K each cut them).

    Made per call and handed down as ``shared=`` to the per-query functions, it is dropped with
    the call: no two calls, and no two threads, ever read one. Without it (``shared=None``)
    nothing is kept. An entry holds its table, so that the table's id, part of the key, cannot
    be taken by another table while the entry lives.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], tuple[RankTable, Any]] = {}

    def get(self, table: RankTable, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """The value kept for ``(table, *key)``, made by ``make()`` the first time."""
        full = (id(table), *key)
        entry = self._entries.get(full)
        if entry is None:
            entry = self._entries[full] = (table, make())
        return entry[1]


def _groups(
    table: RankTable, ties: str, gain: str | None = None, shared: SharedTieGroups | None = None
) -> T.TieGroups:
    if gain in ("linear", "binary") or (
        gain == "exponential" and (table.grade is None or bool((table.grade == 1).all()))
    ):
        # Grades of 1 (binary relevance included) give 2^1 - 1 = 1 = the linear gain: the same
        # groups as the measures without a gain, so they are built once.
        gain = None
    if shared is None:
        return T.tie_groups(table, ties, gain=gain)
    return shared.get(table, ("groups", ties, gain), lambda: T.tie_groups(table, ties, gain=gain))


def _whole_precision_sum(
    table: RankTable, groups: T.TieGroups, ties: str, shared: SharedTieGroups | None
) -> Tensor | None:
    """The groups' precision sums without a cut-off, computed once per shared call (None
    outside one: a single measure gains nothing from computing them)."""
    if shared is None:
        return None

    def whole() -> Tensor:
        return T.expected_precision_sum(groups, torch.full_like(groups.above, UNBOUNDED))

    return shared.get(table, ("precision sums", ties), whole)


def _cutoff(k: int, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`{name}` must be a positive int, got {k!r}")
    return k


def _query_sum(table: RankTable, groups: T.TieGroups, values: Tensor) -> Tensor:
    out = torch.zeros(table.num_queries, dtype=torch.float64)
    return out.index_add_(0, groups.query, values.to(torch.float64))


def _require_depth(table: RankTable, cutoff: Tensor, what: str) -> None:
    """Refuse a measure whose cut-off reaches below the depth the table was ranked to."""
    bad = table.truncated_above(cutoff)
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


def expected_hits_per_query(
    table: RankTable,
    k: int | Tensor | None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """E[h_q(K)]: relevant items in the top K (NaN-free; 0 for unanswerable queries).

    Args:
        table: the rank table.
        k: cut-off K, or one per query as a ``(Q,)`` tensor; None is the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64.
    """
    cutoff = _as_cutoff(table, k)
    _require_depth(table, cutoff, "a cut-off measure")
    groups = _groups(table, ties, shared=shared)
    return _query_sum(table, groups, T.expected_hits(groups, cutoff[groups.query]))


def hit_rate_per_query(
    table: RankTable,
    k: int | Tensor | None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """1[r_q <= K]; under "expected" ties, the probability of a hit in the top K.

    Args:
        table: the rank table.
        k: cut-off K, or one per query as a ``(Q,)`` tensor; None is the whole
            ranking (every id of a ranked list).
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    cutoff = _as_cutoff(table, k)
    q, a, t, r = _groups(table, ties, shared=shared).first_groups()
    p = 1.0 - T.miss_probability(t, r, T.positions_in_cutoff(a, t, cutoff.index_select(0, q)))
    out = torch.zeros(table.num_queries, dtype=torch.float64)
    out[q] = p
    return _unanswerable_nan(table, out)


def recall_per_query(
    table: RankTable,
    k: int | Tensor | None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """h_q(K) / m_q.

    Args:
        table: the rank table.
        k: cut-off K, or one per query as a ``(Q,)`` tensor; None is the whole
            ranking (every id of a ranked list).
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    hits = expected_hits_per_query(table, k, ties, shared=shared)
    return _unanswerable_nan(table, hits / table.num_relevant.clamp_min(1))


def precision_per_query(
    table: RankTable,
    k: int | None = None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
    where_defined: bool = False,
) -> Tensor:
    """h_q(K) / K (the divisor stays K when the gallery is smaller); without a cut-off, the
    relevant items retrieved over the distinct items retrieved (trec_eval's ``set_P``; the
    whole list's precision of LlamaIndex and ragas).

    Args:
        table: the rank table.
        k: cut-off K, or None for the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.
        where_defined: the values of ``empty_queries="nan"``: a query with no relevant item
            scores 0 (precision does not divide by m_q), and one that retrieved nothing is NaN
            (0 / 0). Otherwise the first is NaN and the second 0.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    if k is None:
        hits = expected_hits_per_query(table, None, ties, shared=shared)
        retrieved = _retrieved(table, "precision without a cut-off")
        empty = math.nan if where_defined else 0.0
        values = torch.where(retrieved > 0, hits / retrieved.clamp_min(1), empty)
    else:
        k = _cutoff(k)
        values = expected_hits_per_query(table, k, ties, shared=shared) / k
    return values if where_defined else _unanswerable_nan(table, values)


def f1_per_query(
    table: RankTable,
    k: int | None = None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """F1@K = 2 P R / (P + R) with P = h_q(K) / K and R = h_q(K) / m_q (ranx's ``f1``), which
    is 2 h_q(K) / (K + m_q); 0 without a hit. Without a cut-off, P is the precision of the whole
    list (:func:`precision_per_query`), as trec_eval's ``set_F``. Linear in h_q(K), so its
    expectation under "expected" ties is exact.

    Args:
        table: the rank table.
        k: cut-off K, or None for the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    if k is None:
        hits = expected_hits_per_query(table, None, ties, shared=shared)
        size = _retrieved(table, "f1 without a cut-off").to(torch.float64)
    else:
        k = _cutoff(k)
        hits = expected_hits_per_query(table, k, ties, shared=shared)
        size = torch.full_like(hits, float(k))
    total = size + table.num_relevant.to(torch.float64)
    return _unanswerable_nan(table, torch.where(hits > 0, 2.0 * hits / total.clamp_min(1), 0.0))


def _retrieved(table: RankTable, what: str) -> Tensor:
    """The distinct items each query retrieved, refused where no list length is known."""
    retrieved = table.retrieved
    if bool((retrieved == UNBOUNDED).any()):
        raise ValueError(
            f"{what} divides by the items retrieved, which precomputed ranks do not give; use a "
            "cut-off (precision@K) or ranked lists"
        )
    return retrieved.to(torch.float64)


def granular_mrr_per_query(
    table: RankTable, ties: str = DEFAULT_TIES, *, shared: SharedTieGroups | None = None
) -> Tensor:
    """LlamaIndex's granular MRR (``MRR(use_granular_mrr=True)``): the mean of 1 / rank over
    every relevant item retrieved, 0 when none was. Not the MRR of the literature, which is
    1 / the rank of the first. Under "expected" ties each relevant item's rank is uniform over
    its group's positions, and the number retrieved does not depend on the order, so the value
    is exact.

    Args:
        table: the rank table (the whole ranking: every relevant item located, or a list).
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    cutoff = _as_cutoff(table, None)
    _require_depth(table, cutoff, "granular_mrr")
    groups = _groups(table, ties, shared=shared)
    # sum of 1/p over a group's positions above+1 .. above+size is H(above+size) - H(above);
    # its r relevant items share it evenly (r / size each position)
    end = (groups.above + groups.size).to(torch.float64)
    harmonic = torch.special.digamma(end + 1) - torch.special.digamma(
        groups.above.to(torch.float64) + 1
    )
    per_group = groups.relevant.to(torch.float64) / groups.size.to(torch.float64) * harmonic
    found = table.num_listed.to(torch.float64)
    total = _query_sum(table, groups, per_group)
    return _unanswerable_nan(table, torch.where(found > 0, total / found.clamp_min(1), 0.0))


def r_precision_per_query(
    table: RankTable, ties: str = DEFAULT_TIES, *, shared: SharedTieGroups | None = None
) -> Tensor:
    """h_q(m_q) / m_q: precision at R = m_q, TREC's R-precision (trec_eval's ``Rprec``).

    Args:
        table: the rank table.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    m = table.num_relevant.clamp_min(1)
    return _unanswerable_nan(table, expected_hits_per_query(table, m, ties, shared=shared) / m)


def _precision_sum(
    table: RankTable, cutoff: Tensor, ties: str, shared: SharedTieGroups | None
) -> Tensor:
    _require_depth(table, cutoff, "average precision")
    groups = _groups(table, ties, shared=shared)
    whole = _whole_precision_sum(table, groups, ties, shared)
    return _query_sum(
        table, groups, T.expected_precision_sum(groups, cutoff[groups.query], whole)
    )


def map_at_r_per_query(
    table: RankTable, ties: str = DEFAULT_TIES, *, shared: SharedTieGroups | None = None
) -> Tensor:
    """MAP@R: (1/m) sum_{i <= m} P(i) rel(i), average precision cut at R = m_q and divided by R
    (Musgrave, Belongie and Lim, "A Metric Learning Reality Check", ECCV 2020).

    Args:
        table: the rank table.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    m = table.num_relevant.clamp_min(1)
    return _unanswerable_nan(table, _precision_sum(table, m, ties, shared) / m)


def average_precision_per_query(
    table: RankTable,
    k: int | Tensor | None = None,
    ties: str = DEFAULT_TIES,
    ap: str = DEFAULT_AP,
    divisor: str = DEFAULT_DIVISOR,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """Average precision over the whole ranking, or AP@K with a cut-off.

    ``ap="trapezoid"`` is the rule of the official Market-1501 evaluation code (Zheng et al.,
    ICCV 2015): each relevant item at position p weighs the mean of the precision at p and the
    precision at p - 1 (1 at the top).

    Args:
        table: the rank table.
        k: cut-off, or one per query as a ``(Q,)`` tensor; ``None`` is the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        ap: ``"step"`` (torchreid, trec_eval) or ``"trapezoid"`` (official Market-1501 code; only
            without a cut-off).
        divisor: ``"relevant"`` m_q (Manning et al., trec_eval map_cut), ``"min"``
            min(m_q, K) for AP@K (MSLS), ``"retrieved"`` h_q(K), the relevant items retrieved
            (torchmetrics; Haystack's MAP before 3.1 over its whole list; 0/0 = 0).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    check_option("ap", ap)
    check_option("divisor", divisor)
    m = table.num_relevant.clamp_min(1).to(torch.float64)
    cutoff = _as_cutoff(table, k)
    if ap == "trapezoid":
        if k is not None:
            raise ValueError('`ap="trapezoid"` is defined over the whole ranking; use k=None')
        _require_depth(table, cutoff, "average precision")
        groups = _groups(table, ties, shared=shared)
        step = T.expected_precision_sum(
            groups, cutoff[groups.query], _whole_precision_sum(table, groups, ties, shared)
        )
        extra = T.expected_trapezoid_extra(groups)
        total = _query_sum(table, groups, 0.5 * (step + extra))
        return _unanswerable_nan(table, total / m)
    if divisor == "retrieved":
        return _unanswerable_nan(table, _ap_over_retrieved(table, cutoff, ties, shared))
    total = _precision_sum(table, cutoff, ties, shared)
    if k is not None and divisor == "min":
        m = torch.minimum(m, torch.tensor(float(k), dtype=torch.float64))
    return _unanswerable_nan(table, total / m)


def _ap_over_retrieved(
    table: RankTable, cutoff: Tensor, ties: str, shared: SharedTieGroups | None
) -> Tensor:
    """E[(sum_{p<=K} rel(p) P(p)) / h(K)], 0 when h(K) = 0, exact under expected ties.

    Only the group straddling K makes h(K) random. Conditioning on the number j of its relevant
    items that land in the top part (hypergeometric), that part is a uniformly random arrangement
    of j relevant items in u positions, and the rest of the numerator is unchanged.
    """
    _require_depth(table, cutoff, "average precision")
    groups = _groups(table, ties, shared=shared)
    k = cutoff[groups.query]
    end = groups.above + groups.size
    inside = end <= k
    straddle = (groups.above < k) & ~inside
    fixed_num = _query_sum(
        table,
        groups,
        torch.where(
            inside,
            T.expected_precision_sum(groups, k, _whole_precision_sum(table, groups, ties, shared)),
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
    table: RankTable,
    k: int | Tensor | None = None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """1 / r_q; with a cut-off K, 0 when r_q > K. Expected under random order inside ties.

    Args:
        table: the rank table.
        k: cut-off K, or one per query as a ``(Q,)`` tensor; ``None`` is the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    limit = _as_cutoff(table, k)
    groups = _groups(table, ties, shared=shared)
    per_group = T.expected_reciprocal_first(groups, limit[groups.query])
    return _unanswerable_nan(table, _query_sum(table, groups, per_group))


def first_rank_per_query(
    table: RankTable, ties: str = DEFAULT_TIES, *, shared: SharedTieGroups | None = None
) -> Tensor:
    """r_q, the rank of the best-ranked relevant item (its expectation under "expected" ties).

    Args:
        table: the rank table.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries, infinite when no relevant item was
        retrieved (ranked lists).
    """
    groups = _groups(table, ties, shared=shared)
    out = torch.full((table.num_queries,), math.inf, dtype=torch.float64)
    first = groups.first_index
    out[groups.query[first]] = T.expected_first_position(groups)[first]
    return _unanswerable_nan(table, out)


def ndcg_per_query(
    table: RankTable,
    k: int | None = None,
    ties: str = DEFAULT_TIES,
    gain: str = DEFAULT_GAIN,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """DCG@K / IDCG@K with gain 2^g - 1 ("exponential"), g ("linear") or 1 for every relevant
    item whatever its grade ("binary": sentence-transformers, LlamaIndex); binary grade is 1.

    Discounted cumulated gain of Järvelin and Kekäläinen (ACM TOIS 2002), discount
    1 / log2(1 + p). Under "expected" ties it is the tie-averaged DCG of McSherry and Najork
    (ECIR 2008): a tie group's gain spread evenly over its positions, which is the
    ``gain / size * (discount[hi] - discount[lo])`` below.

    Args:
        table: the rank table.
        k: cut-off K; ``None`` is the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        gain: "exponential" (2^g - 1), "linear" (g) or "binary" (1).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    dcg, idcg = _discounted_gains(table, k, ties, gain, shared)
    value = torch.where(idcg > 0, dcg / idcg.clamp_min(1e-300), 0.0)
    return _unanswerable_nan(table, value)


def _discounted_gains(
    table: RankTable, k: int | None, ties: str, gain: str, shared: SharedTieGroups | None
) -> tuple[Tensor, Tensor]:
    """``(DCG@K, ideal DCG@K)`` per query, under the tie rule (McSherry and Najork's average
    for "expected")."""
    check_option("gain", gain)
    if gain == "binary" and table.grade is not None:
        # every relevant item gains 1: the table read as binary relevance
        table, gain = replace(table, grade=None, ideal_ptr=None, ideal_grade=None), "linear"
    cutoff = _as_cutoff(table, k)
    _require_depth(table, cutoff, "NDCG")
    groups = _groups(table, ties, gain=gain, shared=shared)
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
    # McSherry and Najork's tie-averaged DCG: the group's gain over its size, times the
    # discounts of its positions inside the cut-off
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
    return dcg, idcg


def dcg_per_query(
    table: RankTable,
    k: int | None = None,
    ties: str = DEFAULT_TIES,
    gain: str = DEFAULT_GAIN,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """DCG@K, unnormalised: the sum over the top K of gain / log2(1 + position), with the gain
    of :func:`ndcg_per_query` (2^g - 1, g or 1); ties as there.

    Args:
        table: the rank table.
        k: cut-off K; ``None`` is the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id".
        gain: "exponential" (2^g - 1), "linear" (g) or "binary" (1).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    return _unanswerable_nan(table, _discounted_gains(table, k, ties, gain, shared)[0])


def cmc_per_query(
    table: RankTable, max_rank: int, ties: str = DEFAULT_TIES, *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """P(r_q <= k) for k = 1..max_rank: each query's CMC curve.

    Args:
        table: the rank table.
        max_rank: the last K of the curve.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q, max_rank)`` float64, rows of NaN for unanswerable queries.
    """
    max_rank = _cutoff(max_rank, "max_rank")
    q, a, t, r = _groups(table, ties, shared=shared).first_groups()
    ks = torch.arange(1, max_rank + 1)
    u = torch.minimum((ks[None, :] - a[:, None]).clamp_min(0), t[:, None])
    p = 1.0 - T.miss_probability(t[:, None].expand_as(u), r[:, None].expand_as(u), u)
    out = torch.zeros(table.num_queries, max_rank, dtype=torch.float64)
    out[q] = p
    out[table.num_relevant == 0] = math.nan
    return out


def minp_per_query(
    table: RankTable, ties: str = DEFAULT_TIES, *, shared: SharedTieGroups | None = None
) -> Tensor:
    """mINP: m_q / rank of the last relevant item; 0 if one was never retrieved (Ye et al.,
    "Deep Learning for Person Re-identification: A Survey and Outlook", TPAMI 2021).

    Args:
        table: the rank table.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    complete = table.num_listed == table.num_relevant
    unbounded = table.depth == UNBOUNDED
    bad = ~complete & ~unbounded & (table.num_relevant > 0)
    if bool(bad.any()):
        raise ValueError(
            "mINP needs every relevant item's position, but the ranking was truncated by `depth`"
        )
    groups = _groups(table, ties, shared=shared)
    limit = torch.full((groups.query.numel(),), UNBOUNDED, dtype=torch.int64)
    inv_last = _query_sum(table, groups, T.expected_reciprocal_last(groups, limit))
    value = torch.where(complete, table.num_relevant.to(torch.float64) * inv_last, 0.0)
    return _unanswerable_nan(table, value)
