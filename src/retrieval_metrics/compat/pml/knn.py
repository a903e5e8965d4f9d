"""The kNN objects PML takes (recognised, never called), and the exact neighbour lists only
the metrics a subclass adds receive (``knn_labels``, ``knn_distances``)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import float64_home, in_float64
from retrieval_metrics.functional.ranking.engine.plan import (
    product_rows,
)
from retrieval_metrics.functional.ranking.engine.product_shape import (
    least_product_rows,
    product_columns,
)
from retrieval_metrics.functional.ranking.row_batches import padded_block
from retrieval_metrics.functional.ranking.settings import memory_budget_on

__all__ = [
    "FAR_FROM_ORIGIN",
    "KNN_NAMES",
    "KnnConvention",
    "blocked_knn",
    "fill_index_as_pml_leaves_it",
    "knn_convention",
    "near_origin",
    "similarity_of",
]

KNN_NAMES = (
    "FaissKNN() (IndexFlatL2 or IndexFlatIP) or CustomKNN(LpDistance(p=2), CosineSimilarity() "
    "or DotProductSimilarity())"
)


@dataclass(frozen=True)
class KnnConvention:
    """How a PML kNN object ranks, and what it reports as ``knn_distances``.

    ``similarity``: this library's similarity that gives the same ranking. ``distances``: what
    PML hands a subclass's keys: ``"squared_l2"`` (faiss' ``IndexFlatL2``), ``"l2"``
    (``torch.cdist`` under ``LpDistance``), ``"unit_l2"`` (the L2 distance between the unit
    vectors a normalised ``LpDistance`` compares) or ``"similarity"`` (the score itself,
    largest first). ``power``: the distance's ``power`` (PML raises its matrix to it; 1 for
    faiss).
    """

    similarity: str
    distances: str
    power: float = 1


def similarity_of(knn_func: Any) -> str:
    """The ranking a PML kNN object computes, as one of this library's similarities.

    Recognised by class name and attributes, so that pytorch-metric-learning need not be
    installed; anything else cannot be reproduced by an exact ranking and is refused.
    """
    return knn_convention(knn_func).similarity


def knn_convention(knn_func: Any) -> KnnConvention:
    """The ranking and the ``knn_distances`` of a PML kNN object (see :class:`KnnConvention`);
    a ValueError naming the object for one this ranking cannot reproduce."""
    if knn_func is None:
        return KnnConvention("euclidean", "squared_l2")
    kind = type(knn_func).__name__
    if kind == "FaissKNN":
        index = getattr(getattr(knn_func, "index_init_fn", None), "__name__", None)
        if not getattr(knn_func, "reset_before", True):
            raise ValueError(
                "`knn_func` FaissKNN(reset_before=False) searches an index filled beforehand, "
                "which this AccuracyCalculator cannot see; use reset_before=True (the default)"
            )
        if index == "IndexFlatL2":
            return KnnConvention("euclidean", "squared_l2")
        if index == "IndexFlatIP":
            return KnnConvention("dot", "similarity")
    elif kind == "CustomKNN":
        distance = getattr(knn_func, "distance", None)
        if type(distance).__name__ == "BatchedDistance":
            distance = getattr(distance, "distance", None)
        name = type(distance).__name__
        normalized = bool(getattr(distance, "normalize_embeddings", False))
        power = getattr(distance, "power", 1)
        if name in ("CosineSimilarity", "DotProductSimilarity") and power != 1:
            # PML ranks by similarity ** power: an even power lifts strongly negative
            # similarities to the top, a fractional one makes them NaN. Not a ranking by the
            # similarity, so refused rather than ranked without the power.
            raise ValueError(
                f"`knn_func` CustomKNN({name}(power={power!r})) cannot be honoured: "
                f"pytorch-metric-learning ranks by the similarity raised to power={power!r}, "
                "which reorders negative similarities (or makes them NaN), and this "
                "AccuracyCalculator ranks by the similarity itself; use power=1 (the default) "
                "or pytorch-metric-learning's own AccuracyCalculator"
            )
        if isinstance(power, numbers.Real) and power > 0:
            # a positive power of a non-negative distance ranks the same as the distance
            if name == "LpDistance" and getattr(distance, "p", None) == 2:
                if normalized:
                    return KnnConvention("cosine", "unit_l2", power)
                return KnnConvention("euclidean", "l2", power)
            if name == "CosineSimilarity":
                return KnnConvention("cosine", "similarity")
            if name == "DotProductSimilarity":
                return KnnConvention("cosine" if normalized else "dot", "similarity")
    raise ValueError(
        f"`knn_func` {knn_func!r} cannot be honoured: this AccuracyCalculator ranks every "
        f"reference item exactly, by euclidean distance, cosine or dot product, as {KNN_NAMES} "
        "do. Approximate indexes and other distances are not supported; pass knn_func=None "
        "(euclidean, PML's default) or use pytorch-metric-learning's own AccuracyCalculator"
    )


#: Euclidean rankings translate the embeddings when the norm of their mean exceeds this many
#: times their spread (the root mean square distance from the mean): see :func:`near_origin`.
FAR_FROM_ORIGIN = 4.0


def near_origin(query: Tensor, reference: Tensor) -> tuple[Tensor, Tensor]:
    """``query`` and ``reference`` less a common point, where they lie far from the origin next
    to their spread (the norm of their mean above :data:`FAR_FROM_ORIGIN` times the root mean
    square distance from it); unchanged otherwise.

    Why: the ranking scores euclidean distances by the expansion 2 q.g - |g|^2, whose float32
    rounding is that of |g|^2, so points near one far point lose the distances between them;
    PML's faiss (``IndexFlatL2`` below its ``distance_compute_blas_threshold`` of queries)
    computes |q - g|^2 directly and keeps them. Euclidean distances do not change under a
    translation. The point is the mean rounded to a multiple of a power of two at most the
    spread per dimension, and the difference is taken in float64: for float32 data it is exact
    (integers become multiples of that power of two), so exact ties stay exact ties. Data near
    the origin (binary codes, integers from 0, centred features) is left as it is.
    """
    same = query is reference
    parts = [query] if same else [query, reference]
    count = sum(part.shape[0] for part in parts)
    if count == 0 or query.shape[1] == 0:
        return query, reference
    # (summed in float64 without a float64 copy; on the host where the device has no float64)
    mean = sum(part.to(float64_home(part.device)).sum(0, dtype=torch.float64) for part in parts)
    mean = mean / count
    spread_sq = sum(((in_float64(part) - mean) ** 2).sum() for part in parts) / count
    mean_norm, spread = float(mean.norm()), math.sqrt(float(spread_sq))
    if not (math.isfinite(mean_norm) and math.isfinite(spread)):
        return query, reference  # NaN or inf embeddings: the ranking refuses them itself
    if mean_norm <= FAR_FROM_ORIGIN * spread:
        return query, reference
    centre = mean
    if spread > 0:
        # a multiple of step, a power of two: each x - centre is exact in float64, and in
        # float32 too wherever step is no finer than x's own last digit
        step = 2.0 ** math.floor(math.log2(spread / math.sqrt(query.shape[1])))
        centre = torch.round(mean / step) * step

    def shifted(x: Tensor) -> Tensor:
        return (in_float64(x) - centre).to(x.device, x.dtype)

    moved = shifted(query)
    return moved, moved if same else shifted(reference)


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
    convention: KnnConvention,
    memory_budget: int | None,
) -> tuple[Tensor, Tensor]:
    """Exact k nearest reference items of every query, self removed: (distances, indices).

    Only for metrics a subclass adds (they take PML's ``knn_labels``); a block of queries at a
    time, ties in index order as faiss returns them. The ranking is ``convention.similarity``'s;
    the distances are those PML hands over for the kNN object (:class:`KnnConvention`): squared
    L2 for faiss' ``IndexFlatL2``, L2 (to ``power``) for ``LpDistance``, the L2 distance between
    unit vectors, sqrt(max(0, 2 - 2 cos)) (to ``power``), for a normalised ``LpDistance``, and
    the similarity (largest first) for the similarities.
    """
    similarity = convention.similarity
    num_q, num_r = query.shape[0], reference.shape[0]
    k = max(0, min(k, num_r - int(ref_includes_query)))
    if similarity == "cosine":
        query = torch.nn.functional.normalize(query, dim=1)
        reference = torch.nn.functional.normalize(reference, dim=1)
    ref_sq = (reference * reference).sum(1)
    nonzero_ref = (reference != 0).any(1).to(reference.dtype)
    budget = memory_budget_on(memory_budget, query.device)
    block = max(1, min(num_q, budget // max(1, 16 * num_r)))
    distances = torch.empty(num_q, k, device=query.device)
    indices = torch.empty(num_q, k, dtype=torch.int64, device=query.device)
    # Products of the ranking's shapes (engine.plan): query rows padded to a multiple of 8 (and
    # to the least rows the host's BLAS computes alike), the reference to whole panels. A BLAS
    # rounds a score by the kernel of the panel its row and column fell in, so a query's
    # neighbours depended on how many queries came with it (a block of 1 to 3 rows) and on
    # memory_budget, and a near-copy in the last columns rounded otherwise than its original.
    width = product_columns(num_r, reference.shape[1], reference.dtype, reference.device)
    columns = padded_block(reference, 0, num_r, reference.new_empty(width, reference.shape[1]))
    least = least_product_rows(
        block, columns.shape[0], columns.shape[1], columns.dtype, columns.device
    )
    for start in range(0, num_q, block):
        q = query[start : start + block]
        product = (product_rows(q, least) @ columns.T)[: q.shape[0], :num_r]
        if similarity == "euclidean":
            key = (q * q).sum(1, keepdim=True) + ref_sq[None] - 2 * product
        else:
            key = -product
        if ref_includes_query:
            rows = torch.arange(q.shape[0], device=q.device)
            key[rows, rows + start] = math.inf
        order = torch.sort(key, dim=1, stable=True).indices[:, :k]
        best = key.gather(1, order)
        # |a|^2 + |b|^2 of the normalised vectors: 2, or less where one of them is a zero
        # vector, which normalisation leaves zero (PML's distance from it is 1, not sqrt(2))
        norms = (q != 0).any(1, keepdim=True).to(best.dtype) + nonzero_ref[order]
        distances[start : start + block] = _pml_distances(best, norms, convention)
        indices[start : start + block] = order
    return distances, indices


def _pml_distances(best: Tensor, norms: Tensor, convention: KnnConvention) -> Tensor:
    """The ranking keys of the neighbours kept (squared L2, or minus the similarity) as the
    distances PML reports for ``convention`` (the order is unchanged: each map is monotone).
    ``norms``: |a|^2 + |b|^2 of the normalised pairs (only read for ``"unit_l2"``)."""
    if convention.distances == "similarity":
        return -best
    if convention.distances == "unit_l2":
        # |a - b|^2 = |a|^2 + |b|^2 - 2 cos (2 - 2 cos for unit vectors); rounding can take
        # it just below 0
        distances = (norms + 2 * best).clamp_min(0).sqrt()
    else:
        # the expansion's rounding can take a squared distance just below 0
        distances = best.clamp_min(0)
        if convention.distances == "squared_l2":
            return distances
        distances = distances.sqrt()
    return distances if convention.power == 1 else distances**convention.power
