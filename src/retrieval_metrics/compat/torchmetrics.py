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

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.primitives import all_finite
from retrieval_metrics.functional.ranking.scores import (
    nonpositive_missed,
    positive_counts,
    rank_checked_scores,
)
from retrieval_metrics.functional.table import RankTable
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

EMPTY_TARGET_ACTIONS = ("error", "skip", "neg", "pos")
AGGREGATIONS = ("mean", "median", "min", "max")
_TOP_K = "`top_k` has to be a positive integer or None"


# ------------------------------------------------------------------------------ checks


def _check_top_k(top_k: Any, zero_is_none: bool = False) -> int | None:
    """``top_k`` as an int or None. MAP and MRR take 0 as None (torchmetrics' ``top_k or n``)."""
    if top_k is None or (zero_is_none and top_k == 0 and not isinstance(top_k, bool)):
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"{_TOP_K}, got {top_k!r} ({type(top_k).__name__})")
    return top_k


def _check_adaptive_k(adaptive_k: Any) -> bool:
    if not isinstance(adaptive_k, bool):
        raise ValueError(f"`adaptive_k` has to be a boolean, got {adaptive_k!r}")
    return adaptive_k


def _check_max_fpr(max_fpr: Any) -> float | None:
    if max_fpr is None:
        return None
    if isinstance(max_fpr, bool) or not isinstance(max_fpr, (int, float)) or not (
        0 < max_fpr <= 1
    ):
        raise ValueError(f"`max_fpr` must be a float in (0, 1] or None, got {max_fpr!r}")
    return float(max_fpr)


def _check_types(preds: Tensor, target: Tensor, graded: bool) -> tuple[Tensor, Tensor]:
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


def _check_functional(preds: Tensor, target: Tensor, graded: bool) -> tuple[Tensor, Tensor]:
    if preds.shape != target.shape:
        raise ValueError(
            "`preds` and `target` must be of the same shape, got "
            f"{tuple(preds.shape)} and {tuple(target.shape)}"
        )
    if not preds.numel() or not preds.size():
        raise ValueError("`preds` and `target` must be non-empty and non-scalar tensors")
    preds, target = _check_types(preds, target, graded)
    if not all_finite(preds):
        raise ValueError("`preds` contains NaN or infinite values")
    return preds, target


# ------------------------------------------------------------------------------ measures


class _Queries:
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


def _hit_rate(q: _Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.hit_rate_per_query(q.full, q.cutoff(top_k))


def _recall(q: _Queries, top_k: int | None, **_: Any) -> Tensor:
    hits = M.expected_hits_per_query(q.miss, q.cutoff(top_k))
    return hits / q.full.num_relevant.clamp_min(1)


def _precision(q: _Queries, top_k: int | None, adaptive_k: bool = False, **_: Any) -> Tensor:
    n = q.size
    if top_k is None:
        divisor = n
    elif adaptive_k:
        divisor = torch.clamp(n, max=top_k)
    else:
        divisor = torch.full_like(n, top_k)
    hits = M.expected_hits_per_query(q.miss, torch.minimum(divisor, n))
    return hits / divisor


def _r_precision(q: _Queries, **_: Any) -> Tensor:
    return M.r_precision_per_query(q.full)


def _average_precision(q: _Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.average_precision_per_query(q.miss, q.cutoff(top_k), divisor="retrieved")


def _reciprocal_rank(q: _Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.reciprocal_rank_per_query(q.miss, top_k)


def _ndcg(q: _Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.ndcg_per_query(q.full, top_k, gain="linear")


def _fall_out(q: _Queries, top_k: int | None, **_: Any) -> Tensor:
    return M.fall_out_per_query(q.full, top_k)


def _auroc(q: _Queries, top_k: int | None, max_fpr: float | None = None, **_: Any) -> Tensor:
    return M.auroc_per_query(q.full, top_k, max_fpr)


def _no_negative(q: _Queries) -> Tensor:
    return q.full.num_relevant == q.size


def _no_positive(q: _Queries) -> Tensor:
    return q.full.num_relevant == 0


def _functional(
    measure: Callable[..., Tensor],
    preds: Tensor,
    target: Tensor,
    graded: bool = False,
    empty: Callable[[_Queries], Tensor] = _no_positive,
    **options: Any,
) -> Tensor:
    """One query's value (every entry of ``preds`` belongs to it); 0.0 when it has no relevant
    item (fall-out: no non-relevant one), as torchmetrics' functions return."""
    device = preds.device
    preds, target = _check_functional(preds, target, graded)
    q = _Queries(preds, target, torch.zeros(preds.numel(), dtype=torch.int64))
    value = torch.nan_to_num(measure(q, **options), nan=0.0)
    value = torch.where(empty(q), 0.0, value)
    return value[0].to(device=device, dtype=torch.float32)


def retrieval_hit_rate(preds: Tensor, target: Tensor, top_k: int | None = None) -> Tensor:
    """1.0 if a relevant item is in the top ``top_k`` (the whole list for None), else 0.0.

    >>> float(retrieval_hit_rate(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 0]), 2))
    0.0
    """
    return _functional(_hit_rate, preds, target, top_k=_check_top_k(top_k))


def retrieval_recall(preds: Tensor, target: Tensor, top_k: int | None = None) -> Tensor:
    """Relevant items scored > 0 in the top ``top_k`` over all relevant items.

    >>> float(retrieval_recall(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1]), 2))
    0.5
    """
    return _functional(_recall, preds, target, top_k=_check_top_k(top_k))


def retrieval_precision(
    preds: Tensor, target: Tensor, top_k: int | None = None, adaptive_k: bool = False
) -> Tensor:
    """Relevant items scored > 0 in the top ``top_k`` over ``top_k`` (the list length for None,
    or with ``adaptive_k`` when ``top_k`` exceeds it).

    >>> float(retrieval_precision(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1]), 2))
    0.5
    """
    adaptive_k = _check_adaptive_k(adaptive_k)
    return _functional(
        _precision, preds, target, top_k=_check_top_k(top_k), adaptive_k=adaptive_k
    )


def retrieval_r_precision(preds: Tensor, target: Tensor) -> Tensor:
    """Relevant items in the top m over m, m the number of relevant items.

    >>> float(retrieval_r_precision(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1])))
    0.5
    """
    return _functional(_r_precision, preds, target)


def retrieval_average_precision(
    preds: Tensor, target: Tensor, top_k: int | None = None
) -> Tensor:
    """Average precision of the relevant items scored > 0 found in the top ``top_k``, over how
    many were found (0.0 if none).

    >>> float(retrieval_average_precision(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1])))
    0.8333333134651184
    """
    return _functional(
        _average_precision, preds, target, top_k=_check_top_k(top_k, zero_is_none=True)
    )


def retrieval_reciprocal_rank(
    preds: Tensor, target: Tensor, top_k: int | None = None
) -> Tensor:
    """1 / rank of the first relevant item scored > 0, 0.0 if it is not in the top ``top_k``.

    >>> float(retrieval_reciprocal_rank(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 0])))
    0.3333333432674408
    """
    return _functional(
        _reciprocal_rank, preds, target, top_k=_check_top_k(top_k, zero_is_none=True)
    )


def retrieval_normalized_dcg(preds: Tensor, target: Tensor, top_k: int | None = None) -> Tensor:
    """NDCG@``top_k`` with linear gain; tied scores share their positions' discounts.

    >>> float(retrieval_normalized_dcg(torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0, 1, 2])))
    1.0
    """
    return _functional(_ndcg, preds, target, graded=True, top_k=_check_top_k(top_k))


def retrieval_fall_out(preds: Tensor, target: Tensor, top_k: int | None = None) -> Tensor:
    """Non-relevant items in the top ``top_k`` over all non-relevant items (lower is better).

    >>> float(retrieval_fall_out(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1]), 2))
    1.0
    """
    return _functional(_fall_out, preds, target, empty=_no_negative, top_k=_check_top_k(top_k))


def retrieval_auroc(
    preds: Tensor, target: Tensor, top_k: int | None = None, max_fpr: float | None = None
) -> Tensor:
    """Area under the ROC curve of the top ``top_k`` items (0.0 when they are all relevant or
    all not); with ``max_fpr``, McClish's standardised partial area.

    >>> float(retrieval_auroc(torch.tensor([0.2, 0.3, 0.5]), torch.tensor([1, 0, 1])))
    0.5
    """
    top_k = _check_top_k(top_k, zero_is_none=True)
    return _functional(_auroc, preds, target, top_k=top_k, max_fpr=_check_max_fpr(max_fpr))


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

    _measure: Callable[..., Tensor] = staticmethod(_hit_rate)
    _graded = False
    _empty_rule: Callable[[_Queries], Tensor] = staticmethod(_no_positive)
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
        preds, target = _check_types(preds, target, self._graded)
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
        q = _Queries(preds, target, indexes)
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
        values = values.to(self.dtype)
        if values.numel() == 0:
            return torch.tensor(0.0, device=device, dtype=self.dtype)
        return _aggregate(values, self.aggregation).to(device)

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
        self.top_k = _check_top_k(top_k, zero_is_none=self._zero_is_none)
        self._options = {"top_k": self.top_k}


class RetrievalHitRate(_WithTopK):
    """Hit rate @``top_k``: 1 if a relevant item is in the top K (torchmetrics' class)."""

    _measure = staticmethod(_hit_rate)


class RetrievalRecall(_WithTopK):
    """Recall @``top_k``: relevant items scored > 0 in the top K over all relevant items."""

    _measure = staticmethod(_recall)


class RetrievalMAP(_WithTopK):
    """Mean average precision (@``top_k``); AP divides by the relevant items it found."""

    _measure = staticmethod(_average_precision)
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

    _measure = staticmethod(_reciprocal_rank)
    _zero_is_none = True


class RetrievalNormalizedDCG(_WithTopK):
    """NDCG @``top_k`` with linear gain and tie-averaged positions; graded targets."""

    _measure = staticmethod(_ndcg)
    _graded = True


class RetrievalRPrecision(_TorchmetricsRetrieval):
    """R-precision: relevant items in the top m over m."""

    _measure = staticmethod(_r_precision)


class RetrievalFallOut(_WithTopK):
    """Fall-out @``top_k``: non-relevant items in the top K over all non-relevant items.

    A query with no non-relevant item gets ``empty_target_action`` ("pos" by default).
    """

    higher_is_better = False
    _measure = staticmethod(_fall_out)
    _empty_rule = staticmethod(_no_negative)
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

    _measure = staticmethod(_precision)

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
        self.adaptive_k = _check_adaptive_k(adaptive_k)
        self._options = {"top_k": self.top_k, "adaptive_k": self.adaptive_k}


class RetrievalAUROC(_WithTopK):
    """AUROC of each query's top ``top_k`` items; ``max_fpr`` for the standardised partial area."""

    _measure = staticmethod(_auroc)

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
        self.max_fpr = _check_max_fpr(max_fpr)
        self._options = {"top_k": self.top_k, "max_fpr": self.max_fpr}
