"""Discounted cumulated gain: NDCG and DCG, with exponential, linear or binary gain.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.measures.options import (
    DEFAULT_GAIN,
    DEFAULT_TIES,
)
from retrieval_metrics.functional.measures.per_query.common import (
    SharedTieGroups,
    as_cutoff,
    check_cutoff,
    query_sum,
    require_depth,
    tie_groups_of,
    unanswerable_nan,
)
from retrieval_metrics.functional.options import check_option
from retrieval_metrics.functional.primitives import repeat
from retrieval_metrics.functional.table import RankTable

__all__ = [
    "dcg_per_query",
    "ndcg_per_query",
]


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
    return unanswerable_nan(table, value)

def _discounted_gains(
    table: RankTable, k: int | None, ties: str, gain: str, shared: SharedTieGroups | None
) -> tuple[Tensor, Tensor]:
    """``(DCG@K, ideal DCG@K)`` per query, under the tie rule (McSherry and Najork's average
    for "expected")."""
    check_option("gain", gain)
    if k is not None:
        check_cutoff(k)  # (one K for all: the ideal DCG is cut there)
    if gain == "binary" and table.grade is not None:
        # every relevant item gains 1: the table read as binary relevance
        table, gain = replace(table, grade=None, ideal_ptr=None, ideal_grade=None), "linear"
    cutoff = as_cutoff(table, k)
    require_depth(table, cutoff, "NDCG")
    groups = tie_groups_of(table, ties, gain=gain, shared=shared)
    end = groups.above + groups.size
    limit = groups.at_query(cutoff)
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
    dcg = query_sum(table, groups, dcg_part)
    if table.ideal_grade is not None and table.ideal_ptr is not None:
        grades = table.ideal_grade
        ideal_gain = T.exponential_gain(grades) if gain == "exponential" else grades.clone()
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
    return unanswerable_nan(table, _discounted_gains(table, k, ties, gain, shared)[0])
