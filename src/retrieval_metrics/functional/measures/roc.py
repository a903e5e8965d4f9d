"""Measures of a ranking against its non-relevant items too: fall-out and the area under the
ROC curve (torchmetrics' ``RetrievalFallOut`` and ``RetrievalAUROC``; the functional layer only,
on tables that list every relevant item, as the scores form's do)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.measures.options import DEFAULT_TIES
from retrieval_metrics.functional.measures.per_query import (
    SharedTieGroups,
    expected_hits_per_query,
)
from retrieval_metrics.functional.measures.per_query.common import (
    as_cutoff,
    query_sum,
    require_depth,
)
from retrieval_metrics.functional.primitives import flat_nonzero
from retrieval_metrics.functional.table import RankTable

__all__ = ["auroc_per_query", "fall_out_per_query"]


def fall_out_per_query(
    table: RankTable,
    k: int | Tensor | None = None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """Non-relevant items in the top K over all non-relevant items of the query:
    (min(K, N_q) - h_q(K)) / (N_q - m_q), NaN when every item is relevant. Lower is better.

    The table must list every relevant item (the scores form does).

    Args:
        table: the rank table.
        k: cut-off K, or one per query as a ``(Q,)`` tensor; ``None`` is the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64.
    """
    n = table.gallery_size
    cutoff = torch.minimum(as_cutoff(table, k), n)
    hits = expected_hits_per_query(table, cutoff, ties, shared=shared)
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
    ties: str = DEFAULT_TIES,
) -> Tensor:
    """Area under the ROC curve of each query's ranking (its top K with a cut-off), relevant
    items against non-relevant ones; with ``max_fpr``, the McClish-standardised partial area up to
    that false positive rate. NaN when the top K lacks relevant or non-relevant items.

    Tied relevant and non-relevant items are joined by a straight segment of the curve (each
    tied pair counts one half), so the full area is the expected one under random order inside
    ties. A tie group across the K-th position puts a random part of its items in the top K:
    the value is the expectation over which (the relevant items among them are
    hypergeometric), an order whose top K lacks relevant or non-relevant items counting 0, as
    torchmetrics counts such a query. The table must list every relevant item (the scores form
    does).

    Args:
        table: the rank table.
        k: cut-off K, or one per query as a ``(Q,)`` tensor; ``None`` is the whole ranking.
        max_fpr: the false positive rate the partial area stops at, or None for the full area.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).

    Returns:
        ``(Q,)`` float64.
    """
    if max_fpr is not None and not (0 < max_fpr <= 1):
        raise ValueError(f"`max_fpr` must be in (0, 1], got {max_fpr!r}")
    n = table.gallery_size
    cutoff = torch.minimum(as_cutoff(table, k), n)
    require_depth(table, cutoff, "AUROC")
    groups = T.tie_groups(table, ties, merge_runs=False)
    k_group = groups.at_query(cutoff)
    whole = groups.above + groups.size <= k_group  # inside the top K
    relevant = groups.relevant.to(torch.float64)
    inside_relevant = torch.where(whole, relevant, 0.0)
    positives = query_sum(table, groups, inside_relevant)  # fixed: those of the whole groups
    # The group across the K-th position (one a query at most): u of its t positions are in the
    # top K, holding j of its r relevant items, j hypergeometric; the items above it are in.
    across = flat_nonzero((groups.above < k_group) & ~whole)
    at = groups.query.index_select(0, across)
    zeros = torch.zeros(table.num_queries, dtype=torch.int64)
    a, t, r = (zeros.index_copy(0, at, x.index_select(0, across))
               for x in (groups.above, groups.size, groups.relevant))
    u = zeros.index_copy(0, at, k_group.index_select(0, across)) - a
    fixed_items = torch.where(u > 0, a, cutoff)
    negatives_above = fixed_items.to(torch.float64) - positives  # N0
    neg_above = (groups.above - groups.relevant_before).to(torch.float64)
    neg_tied = (groups.size - groups.relevant).to(torch.float64)
    limit = 1.0 if max_fpr is None else float(max_fpr)
    lowest = (u - (t - r)).clamp_min(0)  # the support of j
    highest = torch.minimum(r, u)
    value = torch.zeros(table.num_queries, dtype=torch.float64)
    for j in range(int(highest.max()) + 1 if highest.numel() else 1):
        chance = _hypergeometric(t, r, u, j, lowest, highest)
        p_q = positives + j
        n_q = negatives_above + (u - j).clamp_min(0).to(torch.float64)
        n_group = groups.at_query(n_q).clamp_min(1)
        area = _ramp_area(neg_above / n_group, (neg_above + neg_tied) / n_group,
                          torch.full_like(neg_above, limit))
        pairs = query_sum(table, groups, inside_relevant * area)
        if j:  # the part across K: tied with each other, below every whole group
            part = _ramp_area(negatives_above / n_q.clamp_min(1), torch.ones_like(n_q),
                              torch.full_like(n_q, limit))
            pairs = pairs + j * part
        share = pairs / p_q.clamp_min(1)
        if max_fpr is not None and max_fpr != 1:
            low = 0.5 * limit**2
            share = 0.5 * (1 + (share - low) / (limit - low))
        share = torch.where((p_q > 0) & (n_q > 0), share, 0.0)
        value = value + chance * share if j else chance * share
    # NaN where every order's top K lacks one kind: no j of the support leaves both
    both_from = torch.where(positives > 0, lowest, lowest.clamp_min(1))
    both_to = torch.where(negatives_above > 0, highest, torch.minimum(highest, u - 1))
    ok = both_from <= both_to
    return torch.where(ok, value, torch.full_like(value, math.nan))


def _hypergeometric(
    t: Tensor, r: Tensor, u: Tensor, j: int, lowest: Tensor, highest: Tensor
) -> Tensor:
    """P(j of the r relevant items of a group of t lie among u of its positions drawn at
    random): C(r, j) C(t - r, u - j) / C(t, u), on its support [lowest, highest]; exactly 1 or
    0 where the support is one value (no group across K: j = 0)."""
    jj = torch.full_like(t, j)
    log_p = T.log_binomial(r, jj) + T.log_binomial(t - r, u - jj) - T.log_binomial(t, u)
    inside = (lowest <= j) & (j <= highest)
    p = torch.where(inside, torch.exp(torch.where(inside, log_p, 0.0)), 0.0)
    return torch.where(lowest == highest, (lowest == j).to(torch.float64), p)
