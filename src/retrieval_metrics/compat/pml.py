"""pytorch-metric-learning's ``AccuracyCalculator``, computed on this library's blocked ranking.

An import swap keeps the numbers of code written for pytorch-metric-learning (PML) 2.x::

    # from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from retrieval_metrics.compat.pml import AccuracyCalculator

Same constructor, same ``get_accuracy`` arguments, same keys and values (see
:class:`AccuracyCalculator` for the few documented differences), without the queries x k
neighbour matrix PML builds: every key is read from the rank table of
:func:`~retrieval_metrics.functional.rank_embeddings`, which records where each relevant item
landed, and PML's ``k`` becomes a cut-off on that table (relevant items ranked beyond ``k`` do not
count), not a second ranking.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.measures import (
    average_precision_per_query,
    expected_hits_per_query,
    reciprocal_rank_per_query,
)
from retrieval_metrics.functional.primitives import flat_nonzero, repeat
from retrieval_metrics.functional.ranking import (
    DEFAULT_MEMORY_BUDGET,
    rank_embeddings,
    rank_relevance,
)
from retrieval_metrics.functional.ranking.relevance import Relevance, csr_from_ranges
from retrieval_metrics.functional.table import RankTable

__all__ = ["EQUALITY", "AccuracyCalculator"]

LOGGER = logging.getLogger(__name__)

#: The default label comparison: labels (or label rows) are equal. PML's ``torch.eq``.
EQUALITY = torch.eq

#: The kNN keys this module computes from the rank table (PML's ``requires_knn()`` plus MRR,
#: which PML leaves out of that list, so that ``include=("mean_reciprocal_rank",)`` crashes there).
RANKED_KEYS = (
    "precision_at_1",
    "mean_average_precision",
    "mean_average_precision_at_r",
    "r_precision",
    "mean_reciprocal_rank",
)
CLUSTERING_KEYS = ("NMI", "AMI")
KNN_NAMES = (
    "FaissKNN() (IndexFlatL2 or IndexFlatIP) or CustomKNN(LpDistance(p=2), CosineSimilarity() "
    "or DotProductSimilarity())"
)


# ------------------------------------------------------------------------------------- inputs


def _as_tensor(x: Any, name: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    try:
        return torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"`{name}` must be a torch.Tensor or a numpy array, got {type(x).__name__}"
        ) from err


def _embeddings(x: Any, name: str, device: torch.device) -> Tensor:
    t = _as_tensor(x, name)
    if t.dim() != 2:
        raise ValueError(f"`{name}` must be 2-D (items x dimensions), got shape {tuple(t.shape)}")
    # PML casts embeddings to float32 (.type(torch.float)); so do we, so that ranks agree.
    return t.to(device).to(torch.float32)


def _labels(x: Any, name: str, device: torch.device) -> Tensor:
    t = _as_tensor(x, name)
    if t.dim() == 0:
        raise ValueError(f"`{name}` must have one label (or label row) per item, got a scalar")
    if t.is_complex():
        raise ValueError(f"`{name}` must hold real numbers, got {t.dtype}")
    # PML compares labels after casting them to float32: integers above 2**24 can merge there,
    # and they merge here too, so that the numbers stay PML's.
    return t.to(device).to(torch.float32)


def _rows(labels: Tensor) -> Tensor:
    """Labels as (items, columns): a label is a row, compared whole (PML's multi-column labels)."""
    return labels.reshape(labels.shape[0], -1)


# ------------------------------------------------------------------------------------- labels


@dataclass(frozen=True)
class _LabelIndex:
    """Labels of queries and reference items as codes into their sorted union of distinct rows.

    Codes follow ``torch.unique``'s order, which is the order of PML's ``return_per_class``
    lists, so per-class results need no other ordering.
    """

    query: Tensor  # (Q,) int64 code of each query's label
    reference: Tensor  # (N,) int64
    rows: Tensor  # (U, columns) float32, the distinct label rows, sorted
    shape: tuple[int, ...]  # trailing shape of one label (() for 1-D labels)

    def unique_query_codes(self) -> Tensor:
        return torch.unique(self.query)

    def labels_of(self, codes: Tensor) -> Tensor:
        return self.rows[codes].reshape(codes.shape[0], *self.shape)


def _label_index(query_labels: Tensor, reference_labels: Tensor) -> _LabelIndex:
    q, r = _rows(query_labels).cpu(), _rows(reference_labels).cpu()
    if q.shape[1] != r.shape[1]:
        raise ValueError(
            "`query_labels` and `reference_labels` must have the same label shape, got "
            f"{tuple(query_labels.shape[1:])} and {tuple(reference_labels.shape[1:])}"
        )
    rows, codes = torch.unique(torch.cat([q, r]), dim=0, return_inverse=True)
    shape = tuple(query_labels.shape[1:])
    return _LabelIndex(codes[: q.shape[0]], codes[q.shape[0] :], rows, shape)


def _match_pairs(
    index: _LabelIndex, fn: Callable[[Tensor, Tensor], Tensor], cell_budget: int = 2**24
) -> tuple[Tensor, Tensor]:
    """(query-label code, reference-label code) pairs that ``fn`` says match, sorted.

    ``fn`` is called the way PML calls it on neighbours: the query labels as ``(n, 1, ...)``
    against reference labels ``(n, m, ...)``, a block of distinct query labels at a time.
    """
    uq = index.unique_query_codes()
    ur = torch.unique(index.reference)
    ref_labels = index.labels_of(ur)
    step = max(1, cell_budget // max(1, ur.numel()))
    pair_q, pair_r = [], []
    for start in range(0, uq.numel(), step):
        codes = uq[start : start + step]
        left = index.labels_of(codes)[:, None]
        right = ref_labels[None].expand(codes.numel(), *ref_labels.shape)
        match = torch.as_tensor(fn(left, right)).to(torch.bool).cpu()
        if match.shape != (codes.numel(), ur.numel()):
            raise ValueError(
                "`label_comparison_fn(x, y)` must compare element-wise: for x of shape "
                f"{tuple(left.shape)} and y of shape {tuple(right.shape)} it must return "
                f"{(codes.numel(), ur.numel())}, got {tuple(match.shape)}"
            )
        i, j = torch.nonzero(match, as_tuple=True)
        pair_q.append(codes[i])
        pair_r.append(ur[j])
    empty = torch.zeros(0, dtype=torch.int64)
    return (torch.cat(pair_q) if pair_q else empty, torch.cat(pair_r) if pair_r else empty)


@dataclass(frozen=True)
class _Counts:
    """PML's label bookkeeping: match counts, lone labels, and R of every query."""

    unique_codes: Tensor  # (Uq,) codes of the distinct query labels
    match_counts: Tensor  # (Uq,) reference items matching each
    lone: Tensor  # (Uq,) bool
    not_lone_query_mask: Tensor  # (Q,) bool
    num_relevant: Tensor  # (Q,) int64, R = matches - int(ref_includes_query)
    pairs: tuple[Tensor, Tensor] | None  # matching code pairs (custom comparison only)


def _count_matches(
    index: _LabelIndex, ref_includes_query: bool, fn: Callable[[Tensor, Tensor], Tensor]
) -> _Counts:
    uq = index.unique_query_codes()
    per_code = torch.bincount(index.reference, minlength=index.rows.shape[0])
    pairs = None
    if fn is EQUALITY:
        counts = per_code[uq]
        matches_itself = torch.ones_like(uq, dtype=torch.bool)
    else:
        pairs = _match_pairs(index, fn)
        per_label = torch.zeros(index.rows.shape[0], dtype=torch.int64)
        per_label.index_add_(0, pairs[0], per_code[pairs[1]])
        counts = per_label[uq]
        labels = index.labels_of(uq)
        matches_itself = torch.as_tensor(fn(labels, labels)).to(torch.bool).cpu().reshape(-1)
    if ref_includes_query:
        lone = counts - matches_itself.to(torch.int64) <= 0
    else:
        lone = counts == 0
    code_counts = torch.zeros(index.rows.shape[0], dtype=torch.int64)
    code_counts[uq] = counts
    code_lone = torch.zeros(index.rows.shape[0], dtype=torch.bool)
    code_lone[uq] = lone
    return _Counts(
        unique_codes=uq,
        match_counts=counts,
        lone=lone,
        not_lone_query_mask=~code_lone[index.query],
        num_relevant=code_counts[index.query] - int(ref_includes_query),
        pairs=pairs,
    )


def _custom_relevance(
    index: _LabelIndex,
    pairs: tuple[Tensor, Tensor],
    queries: Tensor,
    num_reference: int,
    ref_includes_query: bool,
) -> Relevance:
    """Relevance sets of ``queries`` from matching label-code pairs, self removed by index."""
    ref_order = torch.sort(index.reference, stable=True).indices
    sorted_codes = index.reference[ref_order]
    codes = torch.arange(index.rows.shape[0])
    code_start = torch.searchsorted(sorted_codes, codes, right=False)
    code_stop = torch.searchsorted(sorted_codes, codes, right=True)
    pair_q, pair_r = pairs  # sorted by query code
    pairs_per_code = torch.bincount(pair_q, minlength=codes.numel())
    pair_ptr = torch.zeros(codes.numel() + 1, dtype=torch.int64)
    torch.cumsum(pairs_per_code, 0, out=pair_ptr[1:])
    # one "rep" per (query, matching reference label): the reference items of that label
    q_code = index.query[queries]
    rep_ptr, rep_pair = csr_from_ranges(pair_ptr[:-1][q_code], pair_ptr[1:][q_code])
    rep_query = repeat(torch.arange(queries.numel()), rep_ptr.diff())
    ref_code = pair_r[rep_pair]
    item_ptr, item = csr_from_ranges(code_start[ref_code], code_stop[ref_code], ref_order)
    item_query = repeat(rep_query, item_ptr.diff())
    if ref_includes_query:
        keep = item != queries[item_query]
        item, item_query = item[keep], item_query[keep]
    width = max(num_reference, 1)
    key = torch.sort(item_query * width + item).values  # rows in order, items ascending
    item_query, item = key // width, key % width
    ptr = torch.zeros(queries.numel() + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(item_query, minlength=queries.numel()), 0, out=ptr[1:])
    if ref_includes_query:
        ex_ptr = torch.arange(queries.numel() + 1, dtype=torch.int64)
        ex_index = queries.clone()
    else:
        ex_ptr = torch.zeros(queries.numel() + 1, dtype=torch.int64)
        ex_index = torch.zeros(0, dtype=torch.int64)
    return Relevance(ptr, item, ex_ptr, ex_index, torch.arange(num_reference))


# ------------------------------------------------------------------------------------- kNN


def _similarity_of(knn_func: Any) -> str:
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


def _fill_index_as_pml_leaves_it(knn_func: Any, reference: Tensor) -> None:
    """``FaissKNN(reset_after=False)`` keeps the reference in its index after a search (PML's
    InferenceModel-style reuse); leave it so, although the ranking does not use it."""
    if type(knn_func).__name__ != "FaissKNN" or getattr(knn_func, "reset_after", True):
        return
    index = knn_func.index_init_fn(reference.shape[1])
    index.add(np.ascontiguousarray(reference.detach().cpu().numpy().astype(np.float32)))
    knn_func.index = index


def _blocked_knn(
    query: Tensor,
    reference: Tensor,
    k: int,
    ref_includes_query: bool,
    similarity: str,
    memory_budget: int,
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
    block = max(1, min(num_q, memory_budget // max(1, 16 * num_r)))
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


# ------------------------------------------------------------------------------------- measures


@dataclass(frozen=True)
class _Ranked:
    """The non-lone queries' rank table, PML's cut-off k, and each query's class code."""

    table: RankTable
    k: int
    classes: Tensor


def _pml_per_query(name: str, ranked: _Ranked) -> Tensor:
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


def _average(
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


def _nan_accuracy(num_labels: int, return_per_class: bool) -> float | list[float]:
    return [math.nan] * num_labels if return_per_class else math.nan


def _ranked_from_knn(
    knn_labels: Tensor,
    query_labels: Tensor,
    not_lone_query_mask: Tensor,
    ref_includes_query: bool,
    label_counts: tuple[Any, Any],
    fn: Callable[[Tensor, Tensor], Tensor],
) -> _Ranked | None:
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
    mine = _rows(query_labels.to(torch.float32).cpu())
    equal = (mine[:, None, :] == _rows(unique)[None]).all(-1)
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
    return _Ranked(table, k, classes)


# ------------------------------------------------------------------------------------- class


class AccuracyCalculator:
    """pytorch-metric-learning 2.x's ``AccuracyCalculator``, on the blocked ranking.

    Same arguments and the same keys (``precision_at_1``, ``r_precision``,
    ``mean_average_precision_at_r``, ``mean_average_precision``, ``mean_reciprocal_rank``,
    ``NMI``, ``AMI``) as ``pytorch_metric_learning.utils.accuracy_calculator.AccuracyCalculator``,
    and the same values, including its handling of ``k``: with an int ``k`` below a query's
    relevant count R, relevant items ranked beyond ``k`` do not count, so ``r_precision`` and
    ``mean_average_precision_at_r`` come out truncated as in PML (which logs that they "will be
    incorrect"; so does this class), and ``mean_average_precision`` (divided by R) and
    ``mean_reciprocal_rank`` (0 past ``k``) depend on ``k`` as there. ``k=None`` is the whole
    ranking; ``k="max_bin_count"`` is the largest match count of a query label, less one when the
    reference includes the query. Lone queries (no other item with their label) are left out,
    labels are compared after PML's cast to float32, and ``avg_of_avgs`` / ``return_per_class``
    average per query label in ``torch.unique`` order.

    What differs, on purpose:

    * **Exact distance ties.** PML keeps faiss' order among items at exactly the same distance
      (lower reference index first), so its value depends on how the data was stored. Here a tie
      counts as the expectation over its orders. The two agree whenever no tie touches a relevant
      item (float embeddings of distinct images); they differ for duplicated or quantised
      embeddings.
    * **Memory.** No queries x k neighbour matrix: the ranking is blocked under
      ``memory_budget`` bytes of scratch (a keyword this class adds), so ``k=None`` runs on
      Stanford-Online-Products-sized data (60,502 x 128) where PML needs the 60,502^2 matrix.
    * ``include=("mean_reciprocal_rank",)`` alone works (PML raises TypeError: its
      ``requires_knn()`` omits MRR); ``requires_knn()`` lists it.
    * An int ``k`` larger than the reference set ranks the whole set (PML's faiss pads with
      index -1, which reads the last reference label).
    * ``knn_func`` is honoured when it is an exact kNN this ranking reproduces: PML's
      ``FaissKNN`` with ``IndexFlatL2`` (the default) or ``IndexFlatIP``, or ``CustomKNN`` with
      ``LpDistance(p=2)``, ``CosineSimilarity`` or ``DotProductSimilarity``. Any other raises
      ValueError. The object is never called (a ``FaissKNN(reset_after=False)`` is left holding
      the reference in its index, as PML leaves it).
    * Inputs may be tensors, numpy arrays or lists; ``get_accuracy``'s ``include`` / ``exclude``
      are checked like the constructor's (PML ignores unknown names there).
    * Multi-column labels ``(Q, C)`` are compared row by row with the default comparison (PML's
      default ``torch.eq`` compares them column by column and fails on the shapes; there they need
      a ``label_comparison_fn``, which gives the same values here).

    ``NMI`` and ``AMI`` are computed as PML does: k-means on the query embeddings with as many
    clusters as distinct query labels (faiss' ``Kmeans(niter=20)`` unless ``kmeans_func`` is
    given, so faiss must be installed for the default), then scikit-learn's scores. They refuse
    a custom ``label_comparison_fn`` (NotImplementedError), as PML does.

    Subclasses work as in PML's documentation: a ``calculate_<name>(self, **kwargs)`` method adds
    the key ``<name>``; listed in ``requires_knn()`` it receives ``knn_labels`` and
    ``knn_distances`` (queries x k, computed exactly, a block of queries at a time), listed in
    ``requires_clustering()`` it receives ``cluster_labels``. The built-in keys never build
    ``knn_labels``; a built-in ``calculate_*`` method called directly with ``knn_labels`` (PML's
    internal form) computes from them.

    Example:
        >>> import torch
        >>> from retrieval_metrics.compat.pml import AccuracyCalculator
        >>> emb = torch.tensor([[0.0], [0.1], [0.3], [0.7], [1.5], [1.6], [4.0]])
        >>> labels = torch.tensor([0, 1, 0, 1, 1, 0, 2])
        >>> calc = AccuracyCalculator(exclude=("NMI", "AMI"), k="max_bin_count")
        >>> acc = calc.get_accuracy(emb, labels)
        >>> round(acc["r_precision"], 4), round(acc["mean_reciprocal_rank"], 4)
        (0.3333, 0.3333)
        >>> full = AccuracyCalculator(include=("mean_reciprocal_rank",)).get_accuracy(emb, labels)
        >>> round(full["mean_reciprocal_rank"], 4)
        0.4444
    """

    def __init__(
        self,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        avg_of_avgs: bool = False,
        return_per_class: bool = False,
        k: int | str | None = None,
        label_comparison_fn: Callable[[Tensor, Tensor], Tensor] | None = None,
        device: torch.device | str | None = None,
        knn_func: Any = None,
        kmeans_func: Callable[[Tensor, int], Any] | None = None,
        *,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
    ) -> None:
        self.function_keyword = "calculate_"
        function_names = [x for x in dir(self) if x.startswith(self.function_keyword)]
        metrics = [x.replace(self.function_keyword, "", 1) for x in function_names]
        self.original_function_dict = {
            x: getattr(self, y) for x, y in zip(metrics, function_names, strict=True)
        }
        self.check_primary_metrics(include, exclude)
        self.original_function_dict = self.get_function_dict(include, exclude)
        self.curr_function_dict = self.get_function_dict()

        if avg_of_avgs and return_per_class:
            raise ValueError("avg_of_avgs and return_per_class are mutually exclusive")
        self.avg_of_avgs = avg_of_avgs
        self.return_per_class = return_per_class

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.similarity = _similarity_of(knn_func)
        self.knn_func = knn_func
        self.kmeans_func = (
            _FaissKMeans(niter=20, gpu=self.device.type == "cuda")
            if kmeans_func is None
            else kmeans_func
        )

        if (not (isinstance(k, int) and not isinstance(k, bool) and k > 0)) and (
            k not in (None, "max_bin_count")
        ):
            raise ValueError("k must be an integer greater than 0, or None, or 'max_bin_count'")
        self.k = k
        if not isinstance(memory_budget, int) or memory_budget < 2**16:
            raise ValueError(
                f"`memory_budget` must be an int of at least 65536 bytes, got {memory_budget!r}"
            )
        self.memory_budget = memory_budget

        if label_comparison_fn:
            self.label_comparison_fn = label_comparison_fn
            if any(x in self.requires_clustering() for x in self.get_curr_metrics()):
                raise NotImplementedError("Unsupported: clustering + custom label comparison")
        else:
            self.label_comparison_fn = EQUALITY

    # --------------------------------------------------------------- PML's bookkeeping methods

    def get_function_dict(
        self, include: Sequence[str] = (), exclude: Sequence[str] = ()
    ) -> dict[str, Callable[..., Any]]:
        """The metric functions left after ``include`` (all when empty) and ``exclude``."""
        if len(include) == 0:
            include = list(self.original_function_dict.keys())
        included_metrics = [k for k in include if k not in exclude]
        return {k: v for k, v in self.original_function_dict.items() if k in included_metrics}

    def get_curr_metrics(self) -> list[str]:
        """The keys the last ``get_accuracy`` (or the constructor) selected."""
        return list(self.curr_function_dict.keys())

    def requires_clustering(self) -> list[str]:
        """Keys computed from k-means cluster labels."""
        return list(CLUSTERING_KEYS)

    def requires_knn(self) -> list[str]:
        """Keys computed from the ranking (PML's list, plus mean_reciprocal_rank)."""
        return list(RANKED_KEYS)

    def check_primary_metrics(
        self, include: Sequence[str] = (), exclude: Sequence[str] = ()
    ) -> None:
        """TypeError unless ``include`` / ``exclude`` are tuples or lists; ValueError for names
        that are not keys of this calculator."""
        primary_metrics = list(self.original_function_dict.keys())
        for met in (include, exclude):
            if not isinstance(met, (tuple, list)):
                raise TypeError(f"Arguments must be of type tuple, not {type(met)}.")
            if not set(met).issubset(set(primary_metrics)):
                raise ValueError(f"Primary metrics must be one or more of: {primary_metrics}.")

    def determine_k(
        self, bin_counts: Tensor, num_reference_embeddings: int, ref_includes_query: bool
    ) -> int:
        """PML's number of neighbours: the cut-off k of every kNN key (see the class docstring).

        Logs PML's warning when an int ``k`` is below the largest match count while
        r_precision or mean_average_precision_at_r is computed.
        """
        self_count = int(ref_includes_query)
        max_bin_count = int(torch.as_tensor(bin_counts).max().item())
        if self.k == "max_bin_count":
            return max_bin_count - self_count
        if self.k is None:
            return num_reference_embeddings - self_count
        if self.k < max_bin_count:
            intersection = set(self.get_curr_metrics()) & {
                "r_precision",
                "mean_average_precision_at_r",
            }
            if intersection:
                LOGGER.warning(
                    "You are computing %s, but the value for k (%d) is less than the max bin "
                    "count (%d) so the values for these metrics will be incorrect. To fix this, "
                    "set k='max_bin_count'. If you're looking for MAP@%d instead of MAP@R, then "
                    "you should use 'mean_average_precision' rather than "
                    "mean_average_precision_at_r",
                    intersection,
                    self.k,
                    max_bin_count,
                    self.k,
                )
        return self.k

    def description(self) -> str:
        """``"avg_of_avgs"`` when averaging per class (PML's testers put it in file names)."""
        return "avg_of_avgs" if self.avg_of_avgs else ""

    def get_cluster_labels(self, query: Tensor, query_labels: Tensor, **kwargs: Any) -> Any:
        """k-means cluster of every query, with as many clusters as distinct query labels."""
        num_clusters = len(torch.unique(query_labels.flatten()))
        return self.kmeans_func(query, num_clusters)

    # --------------------------------------------------------------- the keys

    def calculate_NMI(self, query_labels: Tensor, cluster_labels: Any, **kwargs: Any) -> float:
        """scikit-learn's normalized_mutual_info_score of query labels and k-means clusters."""
        from sklearn.metrics import normalized_mutual_info_score

        return float(normalized_mutual_info_score(*_numpy_pair(query_labels, cluster_labels)))

    def calculate_AMI(self, query_labels: Tensor, cluster_labels: Any, **kwargs: Any) -> float:
        """scikit-learn's adjusted_mutual_info_score of query labels and k-means clusters."""
        from sklearn.metrics import adjusted_mutual_info_score

        return float(adjusted_mutual_info_score(*_numpy_pair(query_labels, cluster_labels)))

    def calculate_precision_at_1(self, **kwargs: Any) -> float | list[float]:
        """Whether the nearest reference item (self excluded) is relevant."""
        return self._ranked_key("precision_at_1", **kwargs)

    def calculate_mean_average_precision_at_r(self, **kwargs: Any) -> float | list[float]:
        """MAP@R: sum of P(i) rel(i) over the first min(R, k) positions, / R."""
        return self._ranked_key("mean_average_precision_at_r", **kwargs)

    def calculate_mean_average_precision(self, **kwargs: Any) -> float | list[float]:
        """Sum of P(i) rel(i) over the first k positions, / R (full AP with k=None)."""
        return self._ranked_key("mean_average_precision", **kwargs)

    def calculate_mean_reciprocal_rank(self, **kwargs: Any) -> float | list[float]:
        """1 / position of the first relevant item, 0 when it lies beyond k."""
        return self._ranked_key("mean_reciprocal_rank", **kwargs)

    def calculate_r_precision(self, **kwargs: Any) -> float | list[float]:
        """Relevant items in the first min(R, k) positions, / min(R, k)."""
        return self._ranked_key("r_precision", **kwargs)

    def _ranked_key(
        self,
        name: str,
        *,
        label_counts: tuple[Any, Any],
        query_labels: Tensor | None = None,
        not_lone_query_mask: Tensor | None = None,
        ref_includes_query: bool = False,
        knn_labels: Tensor | None = None,
        ranked: _Ranked | None = None,
        **kwargs: Any,
    ) -> float | list[float]:
        if ranked is None and knn_labels is not None:
            if query_labels is None or not_lone_query_mask is None:
                raise ValueError(
                    "computing from `knn_labels` needs `query_labels` and `not_lone_query_mask`"
                )
            ranked = _ranked_from_knn(
                knn_labels,
                query_labels,
                not_lone_query_mask,
                ref_includes_query,
                label_counts,
                self.label_comparison_fn,
            )
        if ranked is None:
            return _nan_accuracy(len(label_counts[0]), self.return_per_class)
        values = _pml_per_query(name, ranked)
        return _average(values, ranked.classes, self.avg_of_avgs, self.return_per_class)

    # --------------------------------------------------------------- evaluation

    def get_accuracy(
        self,
        query: Any,
        query_labels: Any,
        reference: Any = None,
        reference_labels: Any = None,
        ref_includes_query: bool = False,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Every selected key for ``query`` against ``reference`` (PML's ``get_accuracy``).

        Args:
            query: ``(Q, D)`` embeddings (tensor, numpy array or list), cast to float32.
            query_labels: ``(Q,)`` labels, or ``(Q, C)`` label rows (compared whole).
            reference: ``(N, D)`` embeddings retrieved from; ``None`` means the queries
                themselves, with ``ref_includes_query=True``.
            reference_labels: ``(N,)`` labels (or rows) of ``reference``.
            ref_includes_query: the first Q reference items are the queries, and each query's
                own item is left out of its ranking.
            include: keys for this call (all when empty), among those the constructor kept.
            exclude: keys to leave out of this call.

        Returns:
            key -> float (or a list per query label with ``return_per_class``).
        """
        if reference is None:
            reference, reference_labels, ref_includes_query = query, query_labels, True
        elif reference_labels is None:
            raise ValueError("`reference_labels` must be given with `reference`")
        query = _embeddings(query, "query", self.device)
        reference = _embeddings(reference, "reference", self.device)
        query_labels = _labels(query_labels, "query_labels", self.device)
        reference_labels = _labels(reference_labels, "reference_labels", self.device)
        if len(query) != len(query_labels) or len(reference) != len(reference_labels):
            raise ValueError(
                "embeddings and labels must have the same length: got "
                f"{len(query)} queries with {len(query_labels)} labels and {len(reference)} "
                f"reference items with {len(reference_labels)} labels"
            )
        if query.shape[1] != reference.shape[1]:
            raise ValueError(
                f"`query` and `reference` must have the same dimension, got {query.shape[1]} "
                f"and {reference.shape[1]}"
            )
        if ref_includes_query and not (
            len(reference) >= len(query)
            and torch.allclose(query, reference[: len(query)])
            and torch.allclose(query_labels, reference_labels[: len(query)])
        ):
            raise ValueError(
                "When ref_includes_query is True, the first len(query) elements of reference "
                "must be equal to query.\nLikewise, the first len(query_labels) elements of "
                "reference_labels must be equal to query_labels.\n"
            )
        self.check_primary_metrics(include, exclude)
        self.curr_function_dict = self.get_function_dict(include, exclude)
        kwargs: dict[str, Any] = {
            "query": query,
            "reference": reference,
            "query_labels": query_labels,
            "reference_labels": reference_labels,
            "ref_includes_query": ref_includes_query,
            "label_comparison_fn": self.label_comparison_fn,
        }
        metrics = self.get_curr_metrics()
        if any(x in self.requires_knn() for x in metrics):
            kwargs.update(self._rank(metrics, **kwargs))
        if any(x in self.requires_clustering() for x in metrics):
            kwargs["cluster_labels"] = self.get_cluster_labels(**kwargs)
        return self._get_accuracy(self.curr_function_dict, **kwargs)

    def _get_accuracy(
        self, function_dict: dict[str, Callable[..., Any]], **kwargs: Any
    ) -> dict[str, Any]:
        return {k: v(**kwargs) for k, v in function_dict.items()}

    def _own(self, name: str) -> bool:
        """Whether key ``name`` is computed by this module's method (not a subclass's)."""
        method = getattr(type(self), self.function_keyword + name, None)
        return name in RANKED_KEYS and method is getattr(
            AccuracyCalculator, self.function_keyword + name
        )

    def _rank(
        self,
        metrics: list[str],
        *,
        query: Tensor,
        reference: Tensor,
        query_labels: Tensor,
        reference_labels: Tensor,
        ref_includes_query: bool,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The kNN inputs: PML's label bookkeeping, the rank table of the non-lone queries,
        and, only for a subclass's kNN keys, PML's ``knn_labels`` / ``knn_distances``."""
        index = _label_index(query_labels, reference_labels)
        counts = _count_matches(index, ref_includes_query, self.label_comparison_fn)
        unique_labels = index.labels_of(counts.unique_codes).to(query_labels.device)
        label_counts = (unique_labels, counts.match_counts.to(query_labels.device))
        num_k = self.determine_k(counts.match_counts, len(reference), ref_includes_query)
        mask = counts.not_lone_query_mask
        if not bool(mask.any()):
            LOGGER.warning("None of the query labels are in the reference set.")
        LOGGER.info(
            "ranking %d queries against %d reference items (%s), k=%d",
            int(mask.sum()),
            len(reference),
            self.similarity,
            num_k,
        )
        out: dict[str, Any] = {
            "label_counts": label_counts,
            "lone_query_labels": index.labels_of(counts.unique_codes[counts.lone]).to(
                query_labels.device
            ),
            "not_lone_query_mask": mask.to(query_labels.device),
        }
        _fill_index_as_pml_leaves_it(self.knn_func, reference)
        wanted = [x for x in metrics if x in self.requires_knn()]
        if bool(mask.any()) and any(self._own(x) for x in wanted):
            out["ranked"] = self._ranked(query, reference, index, counts, num_k, ref_includes_query)
        if any(not self._own(x) for x in wanted):
            distances, indices = _blocked_knn(
                query, reference, num_k, ref_includes_query, self.similarity, self.memory_budget
            )
            out["knn_labels"] = reference_labels[indices]
            out["knn_distances"] = distances
        return out

    def _ranked(
        self,
        query: Tensor,
        reference: Tensor,
        index: _LabelIndex,
        counts: _Counts,
        num_k: int,
        ref_includes_query: bool,
    ) -> _Ranked:
        queries = flat_nonzero(counts.not_lone_query_mask)
        num_r = reference.shape[0]
        # Beyond the ranked items there is nothing to count (PML's faiss would pad with -1).
        k = max(0, min(num_k, num_r - int(ref_includes_query)))
        # Only positions <= k count for any key, so the ranking may stop there.
        depth = k if 0 < k < num_r - int(ref_includes_query) else None
        ids = {}
        if ref_includes_query:
            ids = {"query_ids": queries, "gallery_ids": torch.arange(num_r)}
        if counts.pairs is None and ref_includes_query and num_r == query.shape[0]:
            # The queries are the reference: one same-source ranking (which computes each pair
            # of blocks once, for both sides), then the non-lone queries' rows.
            table = rank_embeddings(
                query,
                None,
                query_labels=index.query,
                similarity=self.similarity,
                depth=depth,
                memory_budget=self.memory_budget,
            ).select(queries)
        elif counts.pairs is None:
            table = rank_embeddings(
                query[queries.to(query.device)],
                reference,
                query_labels=index.query[queries],
                gallery_labels=index.reference,
                similarity=self.similarity,
                depth=depth,
                memory_budget=self.memory_budget,
                **ids,
            )
        else:
            relevance = _custom_relevance(index, counts.pairs, queries, num_r, ref_includes_query)
            table = rank_relevance(
                query[queries.to(query.device)],
                reference,
                relevance,
                similarity=self.similarity,
                depth=depth,
                memory_budget=self.memory_budget,
                query_order_key=index.query[queries],
                gallery_order_key=index.reference,
            )
        # R is PML's: match count less one with ref_includes_query (the same as the table's
        # count for label equality; PML's rule for a custom comparison).
        table = replace(table, num_relevant=counts.num_relevant[queries])
        return _Ranked(table, k, index.query[queries])


def _numpy_pair(labels: Any, clusters: Any) -> tuple[np.ndarray, np.ndarray]:
    def to_numpy(x: Any) -> np.ndarray:
        return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)

    return to_numpy(labels), to_numpy(clusters)


class _FaissKMeans:
    """faiss k-means as PML's default ``FaissKMeans`` runs it: the same clusters, the same NMI."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def __call__(self, x: Tensor, nmb_clusters: int) -> Tensor:
        try:
            import faiss
        except ImportError as err:
            raise ImportError(
                "NMI and AMI cluster the queries with faiss k-means, as pytorch-metric-learning "
                "does: install faiss-cpu (or faiss-gpu), pass kmeans_func=, or leave them out "
                'with exclude=("NMI", "AMI")'
            ) from err
        data = np.ascontiguousarray(x.detach().cpu().numpy().astype(np.float32))
        kmeans = faiss.Kmeans(data.shape[1], nmb_clusters, **self.kwargs)
        kmeans.train(data)
        _, idxs = kmeans.index.search(data, 1)
        return torch.as_tensor(idxs[:, 0].astype(np.int64), device=x.device)
