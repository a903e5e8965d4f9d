"""The kNN objects PML takes (recognised, never called), and the exact neighbour lists only
the metrics a subclass adds receive (``knn_labels``, ``knn_distances``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.ranking.settings import memory_budget_on

__all__ = ["KNN_NAMES", "blocked_knn", "fill_index_as_pml_leaves_it", "similarity_of"]

KNN_NAMES = (
    "FaissKNN() (IndexFlatL2 or IndexFlatIP) or CustomKNN(LpDistance(p=2), CosineSimilarity() "
    "or DotProductSimilarity())"
)


def similarity_of(knn_func: Any) -> str:
    """The ranking a PML kNN object computes, as one of this library's similarities.

    Recognised by class name and attributes, so that pytorch-metric-learning need not be
    installed; anything else cannot be reproduced by an exact ranking and is refused.
    """
    if knn_func is None:
        return "euclidean"
    kind = type(knn_func).__name__
    if kind == "FaissKNN":
        index = getattr(getattr(knn_func, "index_init_fn", None), "__name__", None)
        if not getattr(knn_func, "reset_before", True):
            raise ValueError(
                "`knn_func` FaissKNN(reset_before=False) searches an index filled beforehand, "
                "which this AccuracyCalculator cannot see; use reset_before=True (the default)"
            )
        if index == "IndexFlatL2":
            return "euclidean"
        if index == "IndexFlatIP":
            return "dot"
    elif kind == "CustomKNN":
        distance = getattr(knn_func, "distance", None)
        if type(distance).__name__ == "BatchedDistance":
            distance = getattr(distance, "distance", None)
        name = type(distance).__name__
        normalized = bool(getattr(distance, "normalize_embeddings", False))
        power = getattr(distance, "power", 1)
        if power > 0:
            # a positive power of a distance or similarity ranks the same
            if name == "LpDistance" and getattr(distance, "p", None) == 2:
                return "cosine" if normalized else "euclidean"
            if name == "CosineSimilarity":
                return "cosine"
            if name == "DotProductSimilarity":
                return "cosine" if normalized else "dot"
    raise ValueError(
        f"`knn_func` {knn_func!r} cannot be honoured: this AccuracyCalculator ranks every "
        f"reference item exactly, by euclidean distance, cosine or dot product, as {KNN_NAMES} "
        "do. Approximate indexes and other distances are not supported; pass knn_func=None "
        "(euclidean, PML's default) or use pytorch-metric-learning's own AccuracyCalculator"
    )


def fill_index_as_pml_leaves_it(knn_func: Any, reference: Tensor) -> None:
    """``FaissKNN(reset_after=False)`` keeps the reference in its index after a search (PML's
    InferenceModel-style reuse); leave it so, although the ranking does not use it."""
    if type(knn_func).__name__ != "FaissKNN" or getattr(knn_func, "reset_after", True):
        return
    index = knn_func.index_init_fn(reference.shape[1])
    index.add(np.ascontiguousarray(reference.detach().cpu().numpy().astype(np.float32)))
    knn_func.index = index


def blocked_knn(
    query: Tensor,
    reference: Tensor,
    k: int,
    ref_includes_query: bool,
    similarity: str,
    memory_budget: int | None,
) -> tuple[Tensor, Tensor]:
    """Exact k nearest reference items of every query, self removed: (distances, indices).

    Only for metrics a subclass adds (they take PML's ``knn_labels``); a block of queries at a
    time, ties in index order as faiss returns them. Distances are faiss': squared L2, or the
    similarity for "dot" and "cosine" (largest first).
    """
    num_q, num_r = query.shape[0], reference.shape[0]
    k = max(0, min(k, num_r - int(ref_includes_query)))
    if similarity == "cosine":
        query = torch.nn.functional.normalize(query, dim=1)
        reference = torch.nn.functional.normalize(reference, dim=1)
    ref_sq = (reference * reference).sum(1)
    budget = memory_budget_on(memory_budget, query.device)
    block = max(1, min(num_q, budget // max(1, 16 * num_r)))
    distances = torch.empty(num_q, k, device=query.device)
    indices = torch.empty(num_q, k, dtype=torch.int64, device=query.device)
    for start in range(0, num_q, block):
        q = query[start : start + block]
        product = q @ reference.T
        if similarity == "euclidean":
            key = (q * q).sum(1, keepdim=True) + ref_sq[None] - 2 * product
        else:
            key = -product
        if ref_includes_query:
            rows = torch.arange(q.shape[0], device=q.device)
            key[rows, rows + start] = math.inf
        order = torch.sort(key, dim=1, stable=True).indices[:, :k]
        best = key.gather(1, order)
        distances[start : start + block] = best if similarity == "euclidean" else -best
        indices[start : start + block] = order
    return distances, indices
