"""Measures of where relevant items rank: reciprocal rank, the first relevant item's rank,
the CMC curve, mINP and LlamaIndex's granular MRR.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.measures.options import (
    DEFAULT_TIES,
)
from retrieval_metrics.functional.measures.per_query.common import (
    SharedTieGroups,
    as_cutoff,
    check_cutoff,
    query_sum,
    require_depth,
    require_first,
    spread_over_queries,
    tie_groups_of,
    unanswerable_nan,
)
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = [
    "cmc_per_query",
    "first_rank_per_query",
    "granular_mrr_per_query",
    "minp_per_query",
    "reciprocal_rank_per_query",
]


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
    cutoff = as_cutoff(table, None)
    require_depth(table, cutoff, "granular_mrr")
    groups = tie_groups_of(table, ties, shared=shared)
    # sum of 1/p over a group's positions above+1 .. above+size is H(above+size) - H(above);
    # its r relevant items share it evenly (r / size each position)
    end = (groups.above + groups.size).to(torch.float64)
    harmonic = torch.special.digamma(end + 1) - torch.special.digamma(
        groups.above.to(torch.float64) + 1
    )
    per_group = groups.relevant.to(torch.float64) / groups.size.to(torch.float64) * harmonic
    found = table.num_listed.to(torch.float64)
    total = query_sum(table, groups, per_group)
    return unanswerable_nan(table, torch.where(found > 0, total / found.clamp_min(1), 0.0))

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
    limit = as_cutoff(table, k)
    require_first(table, limit, "reciprocal rank")
    groups = tie_groups_of(table, ties, shared=shared)
    per_group = T.expected_reciprocal_first(groups, groups.at_query(limit))
    return unanswerable_nan(table, query_sum(table, groups, per_group))

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
    if shared is None:
        return _first_ranks(table, tie_groups_of(table, ties))
    # (median and mean rank read the same ranks: computed once a shared call)
    return shared.get(table, ("first_rank", ties), lambda: _first_ranks(
        table, tie_groups_of(table, ties, shared=shared)
    ))


def _first_ranks(table: RankTable, groups: T.TieGroups) -> Tensor:
    require_first(table, as_cutoff(table, None), "median and mean rank")
    query, above, size, relevant = groups.first_groups
    first = T.expected_first_position(above, size, relevant)
    # (a query without a group has no relevant item retrieved: an infinite rank)
    return unanswerable_nan(table, spread_over_queries(table, query, first, math.inf))

#: queries x ranks of CMC curves computed at once (:func:`cmc_per_query`)
CMC_CELLS = 2**20


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
    max_rank = check_cutoff(max_rank, "max_rank")
    require_first(table, as_cutoff(table, max_rank), "CMC")
    q, a, t, r = tie_groups_of(table, ties, shared=shared).first_groups
    ks = torch.arange(1, max_rank + 1)
    out = torch.zeros(table.num_queries, max_rank, dtype=torch.float64)
    # a part of the queries at a time: the curves' temporaries (positions, probabilities) are
    # four times the output's 8 bytes a query and rank, which is all that stays
    step = max(1, CMC_CELLS // max_rank)
    for lo in range(0, q.numel(), step):
        part = slice(lo, lo + step)
        tp, rp = t[part, None], r[part, None]
        u = torch.minimum((ks[None, :] - a[part, None]).clamp_min(0), tp)
        out[q[part]] = 1.0 - T.miss_probability(tp.expand_as(u), rp.expand_as(u), u)
    out[table.without_relevant] = math.nan
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
    groups = tie_groups_of(table, ties, shared=shared)
    limit = torch.full((groups.query.numel(),), UNBOUNDED, dtype=torch.int64)
    inv_last = query_sum(table, groups, T.expected_reciprocal_last(groups, limit))
    value = torch.where(complete, table.num_relevant.to(torch.float64) * inv_last, 0.0)
    return unanswerable_nan(table, value)
