"""``torchmetrics.retrieval`` with its names, arguments and values, on this library's ranking.

Swap the import and keep the code and the numbers::

    # from torchmetrics.retrieval import RetrievalMAP, RetrievalRecall
    from retrieval_metrics.compat.torchmetrics import RetrievalMAP, RetrievalRecall

    # from torchmetrics.functional.retrieval import retrieval_average_precision
    from retrieval_metrics.compat.torchmetrics import retrieval_average_precision

Classes: :class:`RetrievalHitRate`, :class:`RetrievalMAP`, :class:`RetrievalMRR`,
:class:`RetrievalNormalizedDCG`, :class:`RetrievalPrecision`, :class:`RetrievalRPrecision`,
:class:`RetrievalRecall`, :class:`RetrievalFallOut`, :class:`RetrievalAUROC` (torchmetrics 1.9's
constructors: ``empty_target_action``, ``ignore_index``, ``top_k``, ``adaptive_k``,
``aggregation``, ``max_fpr``, and ``torchmetrics.Metric``'s keyword arguments). Functions:
:func:`retrieval_hit_rate`, :func:`retrieval_average_precision`,
:func:`retrieval_reciprocal_rank`, :func:`retrieval_normalized_dcg`,
:func:`retrieval_precision`, :func:`retrieval_r_precision`, :func:`retrieval_recall`,
:func:`retrieval_fall_out`, :func:`retrieval_auroc`.

Every query is ranked at once from the flat ``preds, target, indexes`` (no loop over queries),
and the states are the library's own, gathered across processes like every other metric's.
torchmetrics' conventions are kept:

* a relevant item scored <= 0 is never a hit of MAP, MRR, precision and recall (recall still
  divides by every relevant item); hit rate, R-precision, NDCG, fall-out and AUROC count it;
* AP divides by the relevant items it found: those scored > 0, in the top ``top_k`` if given;
* NDCG: linear gain (the grade itself), tied scores averaged, any non-negative grades;
* precision: ``top_k=None`` divides each query by its own list length, ``adaptive_k=True`` caps
  ``top_k`` at it; a ``top_k`` of 0 (or None) means the whole list for MAP and MRR;
* a query whose targets sum to 0 (fall-out: with no non-relevant item) gets
  ``empty_target_action``: "neg" 0, "pos" 1, "skip" leaves it out, "error" raises; when every
  query is left out the value is 0.0;
* ``aggregation``: "mean", "median", "min", "max" or a callable ``f(values, dim=None)``;
* scores are compared as float32, the dtype torchmetrics converts them to; values are float32.

Tied scores: torchmetrics puts tied items in the order ``torch.topk`` / ``torch.argsort`` happen
to return, which no rule reproduces. Here tied items are in random order, in expectation (the
library's ``ties="expected"``): NDCG is torchmetrics' own (it averages ties the same way) and so
is AUROC over the whole list (a tied pair counts one half there too); the other values equal
torchmetrics' whenever no tie joins a relevant item with another item (at a cut-off: no tie
across the K-th position). Ties among items scored <= 0 never matter to MAP, MRR, precision and
recall, so all-zero or all-negative scores give torchmetrics' values.

Differences, each raising a ``ValueError`` where torchmetrics computes something: negative
targets for NDCG, fractional targets for the binary measures, NaN or infinite scores, and an
invalid ``top_k`` / ``max_fpr`` (torchmetrics lets some through to ``torch.topk``).

Example:
    >>> import torch
    >>> from retrieval_metrics.compat.torchmetrics import RetrievalMAP, retrieval_recall
    >>> m = RetrievalMAP()
    >>> m.update(torch.tensor([0.9, 0.8, 0.7, 0.6]), torch.tensor([1, 0, 0, 1]),
    ...          indexes=torch.tensor([0, 0, 0, 0]))
    >>> round(float(m.compute()), 4)
    0.75
    >>> float(retrieval_recall(torch.tensor([0.0, 0.0, 0.0]), torch.tensor([1, 0, 1])))
    0.0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from retrieval_metrics.compat._tm_functional import (
    AGGREGATIONS,
    EMPTY_TARGET_ACTIONS,
    Queries,
    auroc_values,
    average_precision_values,
    check_adaptive_k,
    check_max_fpr,
    check_top_k,
    check_types,
    fall_out_values,
    hit_rate_values,
    ndcg_values,
    no_negative,
    no_positive,
    precision_values,
    r_precision_values,
    recall_values,
    reciprocal_rank_values,
    retrieval_auroc,
    retrieval_average_precision,
    retrieval_fall_out,
    retrieval_hit_rate,
    retrieval_normalized_dcg,
    retrieval_precision,
    retrieval_r_precision,
    retrieval_recall,
    retrieval_reciprocal_rank,
)
from retrieval_metrics.functional.primitives import to_device
from retrieval_metrics.metrics.forms import Batch, Scores
from retrieval_metrics.metrics.plotting import Plotted
from retrieval_metrics.metrics.retrieval import RetrievalMetric

__all__ = [
    "RetrievalAUROC",
    "RetrievalFallOut",
    "RetrievalHitRate",
    "RetrievalMAP",
    "RetrievalMRR",
    "RetrievalNormalizedDCG",
    "RetrievalPrecision",
    "RetrievalRPrecision",
    "RetrievalRecall",
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

# ------------------------------------------------------------------------------ classes


def _aggregate(values: Tensor, aggregation: str | Callable) -> Tensor:
    if aggregation == "mean":
        return values.mean()
    if aggregation == "median":
        return values.median()
    if aggregation == "min":
        return values.min()
    if aggregation == "max":
        return values.max()
    return aggregation(values, dim=None)


class _TorchmetricsRetrieval(Plotted, RetrievalMetric):
    """torchmetrics' ``RetrievalMetric`` base on this library's states and ranking."""

    _measure: Callable[..., Tensor] = staticmethod(hit_rate_values)
    _graded = False
    _empty_rule: Callable[[Queries], Tensor] = staticmethod(no_positive)
    _empty_message = "`compute` method was provided with a query with no positive target."
    plot_lower_bound: float | None = 0.0
    plot_upper_bound: float | None = 1.0

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        aggregation: str | Callable = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if empty_target_action not in EMPTY_TARGET_ACTIONS:
            raise ValueError(
                f"Argument `empty_target_action` received a wrong value `{empty_target_action}`."
                f" Expected one of {EMPTY_TARGET_ACTIONS}"
            )
        if ignore_index is not None and (
            isinstance(ignore_index, bool) or not isinstance(ignore_index, int)
        ):
            raise ValueError(
                f"Argument `ignore_index` must be an integer or None, got {ignore_index!r}"
            )
        if not (aggregation in AGGREGATIONS or callable(aggregation)):
            raise ValueError(
                "Argument `aggregation` must be one of `mean`, `median`, `min`, `max` or a "
                f"callable taking a tensor of values and `dim`, got {aggregation!r}"
            )
        self.empty_target_action = empty_target_action
        self.ignore_index = ignore_index
        self.aggregation = aggregation
        self._options: dict[str, Any] = {}

    def metric_names(self) -> list[str]:
        return []

    def update(self, preds: Tensor, target: Tensor, indexes: Tensor) -> None:  # type: ignore[override]
        """Add a batch: ``preds`` (float scores), ``target`` (relevance) and ``indexes`` (the
        query of each entry, int64), all of one shape."""
        if indexes is None:
            raise ValueError("Argument `indexes` cannot be None")
        if not (indexes.shape == preds.shape == target.shape):
            raise ValueError(
                "`indexes`, `preds` and `target` must be of the same shape, got "
                f"{tuple(indexes.shape)}, {tuple(preds.shape)} and {tuple(target.shape)}"
            )
        if indexes.dtype is not torch.long:
            raise ValueError(f"`indexes` must be a tensor of long integers, got {indexes.dtype}")
        if self.ignore_index is not None:
            keep = target != self.ignore_index
            indexes, preds, target = indexes[keep], preds[keep], target[keep]
        if not indexes.numel() or not indexes.size():
            raise ValueError(
                "`indexes`, `preds` and `target` must be non-empty and non-scalar tensors"
            )
        preds, target = check_types(preds, target, self._graded)
        Scores().append(self, Batch(preds=preds, target=target, indexes=indexes.flatten()))

    @torch.jit.unused
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """torchmetrics' ``forward``: update with the batch and return the batch's value."""
        return Metric.forward(self, *args, **kwargs)

    def _per_query(self) -> tuple[Tensor, Tensor]:
        """Each query's value (NaN where undefined) and whether it is empty, from the states."""
        preds, target, indexes = (self.store.read(n) for n in ("s_preds", "s_target", "s_indexes"))
        if preds is None:
            raise ValueError("No samples to concatenate: call `update` before `compute`")
        # (an update on a device left its checks of the values there: read with the key bits)
        self.store.check_kinds()
        q = Queries(preds, target, indexes)
        values = type(self)._measure(q, **self._options)
        return torch.nan_to_num(values, nan=0.0), type(self)._empty_rule(q)

    def per_query(self) -> dict[str, Tensor]:
        """Each query's value, queries in ascending ``indexes`` order; NaN for a query whose
        targets sum to 0 (fall-out: with no non-relevant item)."""
        if self._is_synced:
            values, empty = self._per_query()
        else:
            with self.sync_context(
                dist_sync_fn=self.dist_sync_fn,
                should_sync=self._to_sync,
                should_unsync=self._should_unsync,
            ):
                values, empty = self._per_query()
        return {type(self).__name__: torch.where(empty, torch.nan, values)}

    def compute(self) -> Tensor:
        values, empty = self._per_query()
        device = self.store.read("s_preds").device
        if self.empty_target_action == "error" and bool(empty.any()):
            raise ValueError(
                f"{self._empty_message[:-1]}: query {int(torch.nonzero(empty)[0])} of "
                f"{empty.numel()} in ascending `indexes` order"
            )
        if self.empty_target_action == "skip":
            values = values[~empty]
        else:
            fill = 1.0 if self.empty_target_action == "pos" else 0.0
            values = torch.where(empty, fill, values)
        # torchmetrics aggregates its queries' values in its dtype: float32, or what
        # set_dtype gave it (its states, and so its values, become that dtype)
        # (on the host where the device has no float64: set_dtype(torch.float64) on MPS)
        values = values.to(self.dtype)
        if values.numel() == 0:
            return to_device(torch.tensor(0.0, dtype=self.dtype), device)
        return to_device(_aggregate(values, self.aggregation), device)

    def summary(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError(
            f"{type(self).__name__} mirrors torchmetrics; for summary() use the library's own "
            'classes with protocol="torchmetrics"'
        )

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """torchmetrics' ``plot`` of a value (or a sequence of values)."""
        return self._plot(val, ax)


class _WithTopK(_TorchmetricsRetrieval):
    _zero_is_none = False

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        top_k: int | None = None,
        aggregation: str | Callable = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action=empty_target_action,
            ignore_index=ignore_index,
            aggregation=aggregation,
            **kwargs,
        )
        self.top_k = check_top_k(top_k, zero_is_none=self._zero_is_none)
        self._options = {"top_k": self.top_k}


class RetrievalHitRate(_WithTopK):
    """Hit rate @``top_k``: 1 if a relevant item is in the top K (torchmetrics' class)."""

    _measure = staticmethod(hit_rate_values)


class RetrievalRecall(_WithTopK):
    """Recall @``top_k``: relevant items scored > 0 in the top K over all relevant items."""

    _measure = staticmethod(recall_values)


class RetrievalMAP(_WithTopK):
    """Mean average precision (@``top_k``); AP divides by the relevant items it found."""

    _measure = staticmethod(average_precision_values)
    _zero_is_none = True

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        top_k: int | None = None,
        aggregation: str | Callable = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action=empty_target_action,
            ignore_index=ignore_index,
            top_k=top_k,
            aggregation=aggregation,
            **kwargs,
        )
        # torchmetrics' RetrievalMAP names its cut-off `k` (a plain attribute: a property would
        # be compiled by TorchScript when the metric is scripted)
        self.k = self.top_k


class RetrievalMRR(_WithTopK):
    """Mean reciprocal rank (@``top_k``) of the first relevant item scored > 0."""

    _measure = staticmethod(reciprocal_rank_values)
    _zero_is_none = True


class RetrievalNormalizedDCG(_WithTopK):
    """NDCG @``top_k`` with linear gain and tie-averaged positions; graded targets."""

    _measure = staticmethod(ndcg_values)
    _graded = True


class RetrievalRPrecision(_TorchmetricsRetrieval):
    """R-precision: relevant items in the top m over m."""

    _measure = staticmethod(r_precision_values)


class RetrievalFallOut(_WithTopK):
    """Fall-out @``top_k``: non-relevant items in the top K over all non-relevant items.

    A query with no non-relevant item gets ``empty_target_action`` ("pos" by default).
    """

    higher_is_better = False
    _measure = staticmethod(fall_out_values)
    _empty_rule = staticmethod(no_negative)
    _empty_message = "`compute` method was provided with a query with no negative target."

    def __init__(
        self,
        empty_target_action: str = "pos",
        ignore_index: int | None = None,
        top_k: int | None = None,
        aggregation: str | Callable = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action=empty_target_action,
            ignore_index=ignore_index,
            top_k=top_k,
            aggregation=aggregation,
            **kwargs,
        )


class RetrievalPrecision(_WithTopK):
    """Precision @``top_k`` (the list length for None; ``adaptive_k`` caps K at it)."""

    _measure = staticmethod(precision_values)

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        top_k: int | None = None,
        adaptive_k: bool = False,
        aggregation: str | Callable = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action=empty_target_action,
            ignore_index=ignore_index,
            top_k=top_k,
            aggregation=aggregation,
            **kwargs,
        )
        self.adaptive_k = check_adaptive_k(adaptive_k)
        self._options = {"top_k": self.top_k, "adaptive_k": self.adaptive_k}


class RetrievalAUROC(_WithTopK):
    """AUROC of each query's top ``top_k`` items; ``max_fpr`` for the standardised partial area."""

    _measure = staticmethod(auroc_values)

    def __init__(
        self,
        empty_target_action: str = "neg",
        ignore_index: int | None = None,
        top_k: int | None = None,
        max_fpr: float | None = None,
        aggregation: str | Callable = "mean",
        **kwargs: Any,
    ) -> None:
        super().__init__(
            empty_target_action=empty_target_action,
            ignore_index=ignore_index,
            top_k=top_k,
            aggregation=aggregation,
            **kwargs,
        )
        self.max_fpr = check_max_fpr(max_fpr)
        self._options = {"top_k": self.top_k, "max_fpr": self.max_fpr}
