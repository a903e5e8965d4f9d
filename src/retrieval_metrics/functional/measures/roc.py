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
    ties. The table must list every relevant item (the scores form does). A tie group across
    the K-th position counts as inside the top K.

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
    # A group across the K-th position counts whole: runs of relevant groups stay apart.
    groups = T.tie_groups(table, ties, merge_runs=False)
    inside = groups.above < groups.at_query(cutoff)
    p_group = torch.where(inside, groups.relevant, 0).to(torch.float64)
    positives = query_sum(table, groups, p_group)
    negatives = cutoff.to(torch.float64) - positives
    neg_above = (groups.above - groups.relevant_before).to(torch.float64)
    neg_tied = (groups.size - groups.relevant).to(torch.float64)
    n_q = groups.at_query(negatives).clamp_min(1)
    f0, f1 = neg_above / n_q, (neg_above + neg_tied) / n_q
    limit = 1.0 if max_fpr is None else float(max_fpr)
    area = _ramp_area(f0, f1, torch.full_like(f0, limit))
    value = query_sum(table, groups, p_group * area) / positives.clamp_min(1)
    if max_fpr is not None and max_fpr != 1:
        low = 0.5 * limit**2
        value = 0.5 * (1 + (value - low) / (limit - low))
    ok = (positives > 0) & (negatives > 0)
    return torch.where(ok, value, torch.full_like(value, math.nan))
