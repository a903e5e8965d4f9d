"""PML's values of its kNN keys, read from a rank table, and its averaging over queries or
query labels."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.compat.pml.inputs import label_rows
from retrieval_metrics.functional.measures import (
    average_precision_per_query,
    expected_hits_per_query,
    reciprocal_rank_per_query,
)
from retrieval_metrics.functional.table import RankTable

__all__ = ["RankedQueries", "nan_accuracy", "pml_average", "pml_per_query", "ranked_from_knn"]


@dataclass(frozen=True)
class RankedQueries:
    """The non-lone queries' rank table, PML's cut-off k, and each query's class code."""

    table: RankTable
    k: int
    classes: Tensor


def pml_per_query(name: str, ranked: RankedQueries) -> Tensor:
    """PML's per-query value of ``name``, relevant items beyond position k not counting.

    With R the query's relevant count and m = min(R, k): precision_at_1 = rel(1); r_precision =
    hits in the top m / m; mean_average_precision_at_r = sum of P(i) rel(i) over i <= m, / R;
    mean_average_precision = the same sum over i <= k, / R; mean_reciprocal_rank = 1 / first
    relevant position if it is <= k, else 0. Ties count as expected over their orders.
    """
    table = ranked.table
    r = table.num_relevant
    k = torch.full_like(r, ranked.k)
    within_r = torch.minimum(r, k)
    if name == "precision_at_1":
        return expected_hits_per_query(table, torch.ones_like(r))
    if name == "r_precision":
        # PML divides by the relevant positions its k-neighbour list has room for
        return expected_hits_per_query(table, within_r) / within_r.to(torch.float64)
    if name == "mean_average_precision_at_r":
        return average_precision_per_query(table, k=within_r)
    if name == "mean_average_precision":
        return average_precision_per_query(table, k=k)
    if name == "mean_reciprocal_rank":
        return reciprocal_rank_per_query(table, k=k)
    raise KeyError(name)


def pml_average(
    values: Tensor, classes: Tensor, avg_of_avgs: bool, return_per_class: bool
) -> float | list[float]:
    """PML's maybe_get_avg_of_avgs: the mean, the mean of class means, or the class means."""
    values = values.to(torch.float64)
    if not (avg_of_avgs or return_per_class):
        return values.mean().item()
    _, inverse = torch.unique(classes, return_inverse=True)
    n = int(inverse.max()) + 1 if inverse.numel() else 0
    sums = torch.zeros(n, dtype=torch.float64).index_add_(0, inverse, values)
    per_class = sums / torch.bincount(inverse, minlength=n).to(torch.float64)
    if return_per_class:
        return per_class.tolist()
    return per_class.mean().item()


def nan_accuracy(num_labels: int, return_per_class: bool) -> float | list[float]:
    return [math.nan] * num_labels if return_per_class else math.nan


def ranked_from_knn(
    knn_labels: Tensor,
    query_labels: Tensor,
    not_lone_query_mask: Tensor,
    ref_includes_query: bool,
    label_counts: tuple[Any, Any],
    fn: Callable[[Tensor, Tensor], Tensor],
) -> RankedQueries | None:
    """A rank table from PML's neighbour labels (``knn_labels``, queries x k), for callers that
    hand them over as PML's own calculate_* methods receive them."""
    mask = torch.as_tensor(not_lone_query_mask, device=knn_labels.device).to(torch.bool)
    if not bool(mask.any()):
        return None
    knn_labels, query_labels = knn_labels[mask], query_labels.to(knn_labels.device)[mask]
    num_q, k = knn_labels.shape[:2]
    same = torch.as_tensor(fn(query_labels[:, None], knn_labels)).to(torch.bool).cpu()
    row, col = torch.nonzero(same.reshape(num_q, k), as_tuple=True)
    ptr = torch.zeros(num_q + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(row, minlength=num_q), 0, out=ptr[1:])
    unique = torch.as_tensor(label_counts[0]).to(torch.float32).cpu()
    counts = torch.as_tensor(label_counts[1]).to(torch.int64).cpu()
    mine = label_rows(query_labels.to(torch.float32).cpu())
    equal = (mine[:, None, :] == label_rows(unique)[None]).all(-1)
    found = equal.any(1)
    r = torch.where(found, counts[equal.to(torch.int64).argmax(1)], 0) - int(ref_includes_query)
    table = RankTable(
        ptr=ptr,
        above=col.to(torch.int64),
        tied=torch.ones_like(col, dtype=torch.int64),
        num_relevant=r,
        gallery_size=torch.full((num_q,), k, dtype=torch.int64),
        depth=torch.full((num_q,), k, dtype=torch.int64),
    )
    classes = torch.unique(mine, dim=0, return_inverse=True)[1]
    return RankedQueries(table, k, classes)
