"""Average precision: AP, AP@K (three divisors, step or trapezoid) and MAP@R.
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.measures.options import (
    DEFAULT_AP,
    DEFAULT_DIVISOR,
    DEFAULT_TIES,
)
from retrieval_metrics.functional.measures.per_query.common import (
    SharedTieGroups,
    as_cutoff,
    query_sum,
    require_depth,
    tie_groups_of,
    unanswerable_nan,
    whole_precision_sum,
)
from retrieval_metrics.functional.options import check_option
from retrieval_metrics.functional.primitives import flat_nonzero
from retrieval_metrics.functional.table import RankTable

__all__ = [
    "average_precision_per_query",
    "map_at_r_per_query",
]


def _precision_sum(
    table: RankTable, cutoff: Tensor, ties: str, shared: SharedTieGroups | None
) -> Tensor:
    require_depth(table, cutoff, "average precision")
    groups = tie_groups_of(table, ties, shared=shared)
    whole = whole_precision_sum(table, groups, ties, shared)
    return query_sum(
        table, groups, T.expected_precision_sum(groups, groups.at_query(cutoff), whole)
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
    return unanswerable_nan(table, _precision_sum(table, m, ties, shared) / m)

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
    cutoff = as_cutoff(table, k)
    if ap == "trapezoid":
        if k is not None:
            raise ValueError('`ap="trapezoid"` is defined over the whole ranking; use k=None')
        require_depth(table, cutoff, "average precision")
        groups = tie_groups_of(table, ties, shared=shared)
        step = T.expected_precision_sum(
            groups, groups.at_query(cutoff), whole_precision_sum(table, groups, ties, shared)
        )
        extra = T.expected_trapezoid_extra(groups)
        total = query_sum(table, groups, 0.5 * (step + extra))
        return unanswerable_nan(table, total / m)
    if divisor == "retrieved":
        return unanswerable_nan(table, _ap_over_retrieved(table, cutoff, ties, shared))
    total = _precision_sum(table, cutoff, ties, shared)
    if k is not None and divisor == "min":
        m = torch.minimum(m, torch.tensor(float(k), dtype=torch.float64))
    return unanswerable_nan(table, total / m)

def _ap_over_retrieved(
    table: RankTable, cutoff: Tensor, ties: str, shared: SharedTieGroups | None
) -> Tensor:
    """E[(sum_{p<=K} rel(p) P(p)) / h(K)], 0 when h(K) = 0, exact under expected ties.

    Only the group straddling K makes h(K) random. Conditioning on the number j of its relevant
    items that land in the top part (hypergeometric), that part is a uniformly random arrangement
    of j relevant items in u positions, and the rest of the numerator is unchanged.
    """
    require_depth(table, cutoff, "average precision")
    groups = tie_groups_of(table, ties, shared=shared)
    k = groups.at_query(cutoff)
    end = groups.above + groups.size
    inside = end <= k
    straddle = (groups.above < k) & ~inside
    fixed_num = query_sum(
        table,
        groups,
        torch.where(
            inside,
            T.expected_precision_sum(groups, k, whole_precision_sum(table, groups, ties, shared)),
            0.0,
        ),
    )
    fixed_hits = query_sum(
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
