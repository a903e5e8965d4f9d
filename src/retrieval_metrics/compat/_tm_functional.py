"""torchmetrics' functional retrieval measures (``retrieval_hit_rate(preds, target)``, ...) for
:mod:`retrieval_metrics.compat.torchmetrics`, which re-exports them: the checks of their
arguments as torchmetrics makes them, one query's values through the library's measures, and the
empty-query rules the classes share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.primitives import all_finite
from retrieval_metrics.functional.ranking.scores import (
    nonpositive_missed,
    positive_counts,
    rank_checked_scores,
)
from retrieval_metrics.functional.table import RankTable

__all__ = [
    "AGGREGATIONS",
    "EMPTY_TARGET_ACTIONS",
    "TOP_K_RULE",
    "Queries",
    "auroc_values",
    "average_precision_values",
    "check_adaptive_k",
    "check_functional",
    "check_max_fpr",
    "check_top_k",
    "check_types",
    "fall_out_values",
    "functional_value",
    "hit_rate_values",
    "ndcg_values",
    "no_negative",
    "no_positive",
    "precision_values",
    "r_precision_values",
    "recall_values",
    "reciprocal_rank_values",
    "retrieval_auroc",
    "retrieval_average_precision",
    "retrieval_fall_out",
    "retrieval_hit_rate",
    "retrieval_normalized_dcg",
    "retrieval_precision",
    "retrieval_r_precision",
    "retrieval_recall",
    "retrieval_reciprocal_rank",
]

EMPTY_TARGET_ACTIONS = ("error", "skip", "neg", "pos")
AGGREGATIONS = ("mean", "median", "min", "max")
TOP_K_RULE = "`top_k` has to be a positive integer or None"


# ------------------------------------------------------------------------------ checks


def check_top_k(top_k: Any, zero_is_none: bool = False) -> int | None:
    """``top_k`` as an int or None. MAP and MRR take 0 as None (torchmetrics' ``top_k or n``)."""
    if top_k is None or (zero_is_none and top_k == 0 and not isinstance(top_k, bool)):
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"{TOP_K_RULE}, got {top_k!r} ({type(top_k).__name__})")
    return top_k


def check_adaptive_k(adaptive_k: Any) -> bool:
    if not isinstance(adaptive_k, bool):
        raise ValueError(f"`adaptive_k` has to be a boolean, got {adaptive_k!r}")
    return adaptive_k


def check_max_fpr(max_fpr: Any) -> float | None:
    if max_fpr is None:
        return None
    if isinstance(max_fpr, bool) or not isinstance(max_fpr, (int, float)) or not (
        0 < max_fpr <= 1
    ):
        raise ValueError(f"`max_fpr` must be a float in (0, 1] or None, got {max_fpr!r}")
    return float(max_fpr)


def check_types(preds: Tensor, target: Tensor, graded: bool) -> tuple[Tensor, Tensor]:
    """torchmetrics' dtype checks; returns float32 scores and int64 (binary) or float targets."""
    integer = target.dtype in (torch.bool, torch.int64, torch.int32)
    if not integer and not target.is_floating_point():
        raise ValueError(
            f"`target` must be a tensor of booleans, integers or floats, got {target.dtype}"
        )
    if not preds.is_floating_point():
        raise ValueError(f"`preds` must be a tensor of floats, got {preds.dtype}")
    if not graded and bool((target.max() > 1) | (target.min() < 0)):
        raise ValueError(
            "`target` must contain `binary` values (0 and 1), got values in "
            f"[{target.min().item()}, {target.max().item()}]"
        )
    if graded and bool(target.min() < 0):
        raise ValueError(
            "`target` must be non-negative for NDCG here (grades >= 0); torchmetrics would take "
            f"negative grades, got {target.min().item()}"
        )
    if not graded and target.is_floating_point() and bool((target != target.round()).any()):
        raise ValueError(
            "`target` must hold 0 and 1 for this measure; fractional targets are graded "
            "relevance, which only NDCG takes"
        )
    preds = preds.detach().float().flatten()
    if target.is_floating_point():
        target = target.detach().float().flatten()
        if not graded:
            target = target.to(torch.int64)
    else:
        target = target.detach().to(torch.int64).flatten()
    return preds, target


def check_functional(preds: Tensor, target: Tensor, graded: bool) -> tuple[Tensor, Tensor]:
    if preds.shape != target.shape:
        raise ValueError(
            "`preds` and `target` must be of the same shape, got "
            f"{tuple(preds.shape)} and {tuple(target.shape)}"
        )
    if not preds.numel() or not preds.size():
        raise ValueError("`preds` and `target` must be non-empty and non-scalar tensors")
    preds, target = check_types(preds, target, graded)
    if not all_finite(preds):
        raise ValueError("`preds` contains NaN or infinite values")
    return preds, target


# ------------------------------------------------------------------------------ measures


class Queries:
    """The rank tables of a flat ``preds, target, indexes``, queries in ascending ``indexes``:
    ``full`` lists every relevant item, ``miss`` drops those scored <= 0 (built on demand)."""

    def __init__(self, preds: Tensor, target: Tensor, indexes: Tensor) -> None:
        self.preds, self.indexes = preds.cpu(), indexes.cpu()
        # checked as they arrived (update) or by the function: float32 finite scores, targets
        # 0/1 or non-negative grades, int64 indexes
        self.full = rank_checked_scores(self.preds, target.cpu(), self.indexes)
        self._miss: RankTable | None = None

    @property
    def size(self) -> Tensor:
        return self.full.gallery_size

    @property
    def miss(self) -> RankTable:
        if self._miss is None:
            self._miss = nonpositive_missed(
                self.full, positive_counts(self.preds, self.indexes)
            )
        return self._miss

    def cutoff(self, top_k: int | None) -> Tensor:
        """Per query, ``top_k`` capped at the list length (the whole list for None)."""
        n = self.size
        return n.clone() if top_k is None else torch.clamp(n, max=top_k)


def hit_rate_values(q: Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.hit_rate_per_query(q.full, q.cutoff(top_k))


def recall_values(q: Queries, top_k: int | None, **_: Any) -> Tensor:
    hits = M.expected_hits_per_query(q.miss, q.cutoff(top_k))
    return hits / q.full.num_relevant.clamp_min(1)


def precision_values(q: Queries, top_k: int | None, adaptive_k: bool = False, **_: Any) -> Tensor:
    n = q.size
    if top_k is None:
        divisor = n
    elif adaptive_k:
        divisor = torch.clamp(n, max=top_k)
    else:
        divisor = torch.full_like(n, top_k)
    hits = M.expected_hits_per_query(q.miss, torch.minimum(divisor, n))
    return hits / divisor


def r_precision_values(q: Queries, **_: Any) -> Tensor:
    return M.r_precision_per_query(q.full)


def average_precision_values(q: Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.average_precision_per_query(q.miss, q.cutoff(top_k), divisor="retrieved")


def reciprocal_rank_values(q: Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.reciprocal_rank_per_query(q.miss, top_k)


def ndcg_values(q: Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.ndcg_per_query(q.full, top_k, gain="linear")


def fall_out_values(q: Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.fall_out_per_query(q.full, top_k)


def auroc_values(q: Queries, top_k: int | None, max_fpr: float | None = None, **_: Any) -> Tensor:
    return M.auroc_per_query(q.full, top_k, max_fpr)


def no_negative(q: Queries) -> Tensor:
    return q.full.num_relevant == q.size


def no_positive(q: Queries) -> Tensor:
    return q.full.num_relevant == 0


def functional_value(
    measure: Callable[..., Tensor],
    preds: Tensor,
    target: Tensor,
    graded: bool = False,
    empty: Callable[[Queries], Tensor] = no_positive,
    **options: Any,
) -> Tensor:
    """One query's value (every entry of ``preds`` belongs to it); 0.0 when it has no relevant
    item (fall-out: no non-relevant one), as torchmetrics' functions return."""
    device = preds.device
    preds, target = check_functional(preds, target, graded)
    q = Queries(preds, target, torch.zeros(preds.numel(), dtype=torch.int64))
    value = torch.nan_to_num(measure(q, **options), nan=0.0)
    value = torch.where(empty(q), 0.0, value)
    return value[0].to(device=device, dtype=torch.float32)


def retrieval_hit_rate(preds: Tensor, target: Tensor, top_k: int | None = None) -> Tensor:
    """1.0 if a relevant item is in the top ``top_k`` (the whole list for None), else 0.0.

    >>> float(retrieval_hit_rate(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 0]), 2))
    0.0
    """
    return functional_value(hit_rate_values, preds, target, top_k=check_top_k(top_k))


def retrieval_recall(preds: Tensor, target: Tensor, top_k: int | None = None) -> Tensor:
    """Relevant items scored > 0 in the top ``top_k`` over all relevant items.

    >>> float(retrieval_recall(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1]), 2))
    0.5
    """
    return functional_value(recall_values, preds, target, top_k=check_top_k(top_k))


def retrieval_precision(
    preds: Tensor, target: Tensor, top_k: int | None = None, adaptive_k: bool = False
) -> Tensor:
    """Relevant items scored > 0 in the top ``top_k`` over ``top_k`` (the list length for None,
    or with ``adaptive_k`` when ``top_k`` exceeds it).

    >>> float(retrieval_precision(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1]), 2))
    0.5
    """
    adaptive_k = check_adaptive_k(adaptive_k)
    return functional_value(
        precision_values, preds, target, top_k=check_top_k(top_k), adaptive_k=adaptive_k
    )


def retrieval_r_precision(preds: Tensor, target: Tensor) -> Tensor:
    """Relevant items in the top m over m, m the number of relevant items.

    >>> float(retrieval_r_precision(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1])))
    0.5
    """
    return functional_value(r_precision_values, preds, target)


def retrieval_average_precision(
    preds: Tensor, target: Tensor, top_k: int | None = None
) -> Tensor:
    """Average precision of the relevant items scored > 0 found in the top ``top_k``, over how
    many were found (0.0 if none).

    >>> float(retrieval_average_precision(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1])))
    0.8333333134651184
    """
    return functional_value(
        average_precision_values, preds, target, top_k=check_top_k(top_k, zero_is_none=True)
    )


def retrieval_reciprocal_rank(
    preds: Tensor, target: Tensor, top_k: int | None = None
) -> Tensor:
    """1 / rank of the first relevant item scored > 0, 0.0 if it is not in the top ``top_k``.

    >>> float(retrieval_reciprocal_rank(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 0])))
    0.3333333432674408
    """
    return functional_value(
        reciprocal_rank_values, preds, target, top_k=check_top_k(top_k, zero_is_none=True)
    )


def retrieval_normalized_dcg(preds: Tensor, target: Tensor, top_k: int | None = None) -> Tensor:
    """NDCG@``top_k`` with linear gain; tied scores share their positions' discounts.

    >>> float(retrieval_normalized_dcg(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0, 1, 2])))
    1.0
    """
    return functional_value(ndcg_values, preds, target, graded=True, top_k=check_top_k(top_k))


def retrieval_fall_out(preds: Tensor, target: Tensor, top_k: int | None = None) -> Tensor:
    """Non-relevant items in the top ``top_k`` over all non-relevant items (lower is better).

    >>> float(retrieval_fall_out(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1]), 2))
    1.0
    """
    return functional_value(
        fall_out_values, preds, target, empty=no_negative, top_k=check_top_k(top_k)
    )


def retrieval_auroc(
    preds: Tensor, target: Tensor, top_k: int | None = None, max_fpr: float | None = None
) -> Tensor:
    """Area under the ROC curve of the top ``top_k`` items (0.0 when they are all relevant or
    all not); with ``max_fpr``, McClish's standardised partial area.

    >>> float(retrieval_auroc(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1])))
    0.5
    """
    top_k = check_top_k(top_k, zero_is_none=True)
    return functional_value(
        auroc_values, preds, target, top_k=top_k, max_fpr=check_max_fpr(max_fpr)
    )
