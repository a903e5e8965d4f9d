"""PML's label bookkeeping: labels as codes, match counts, lone queries, and the relevance
sets a custom ``label_comparison_fn`` defines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from retrieval_metrics.compat.pml.inputs import label_rows
from retrieval_metrics.functional.primitives import repeat
from retrieval_metrics.functional.ranking.relevance import Relevance, csr_from_ranges

__all__ = [
    "EQUALITY",
    "LabelCounts",
    "LabelIndex",
    "count_matches",
    "custom_relevance",
    "label_index",
]

#: The default label comparison: labels (or label rows) are equal. PML's ``torch.eq``.
EQUALITY = torch.eq


@dataclass(frozen=True)
class LabelIndex:
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


def label_index(query_labels: Tensor, reference_labels: Tensor) -> LabelIndex:
    q, r = label_rows(query_labels).cpu(), label_rows(reference_labels).cpu()
    if q.shape[1] != r.shape[1]:
        raise ValueError(
            "`query_labels` and `reference_labels` must have the same label shape, got "
            f"{tuple(query_labels.shape[1:])} and {tuple(reference_labels.shape[1:])}"
        )
    rows, codes = torch.unique(torch.cat([q, r]), dim=0, return_inverse=True)
    shape = tuple(query_labels.shape[1:])
    return LabelIndex(codes[: q.shape[0]], codes[q.shape[0] :], rows, shape)


def _match_pairs(
    index: LabelIndex, fn: Callable[[Tensor, Tensor], Tensor], cell_budget: int = 2**24
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
class LabelCounts:
    """PML's label bookkeeping: match counts, lone labels, and R of every query."""

    unique_codes: Tensor  # (Uq,) codes of the distinct query labels
    match_counts: Tensor  # (Uq,) reference items matching each
    lone: Tensor  # (Uq,) bool
    not_lone_query_mask: Tensor  # (Q,) bool
    num_relevant: Tensor  # (Q,) int64, R = matches - int(ref_includes_query)
    pairs: tuple[Tensor, Tensor] | None  # matching code pairs (custom comparison only)


def count_matches(
    index: LabelIndex, ref_includes_query: bool, fn: Callable[[Tensor, Tensor], Tensor]
) -> LabelCounts:
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
    return LabelCounts(
        unique_codes=uq,
        match_counts=counts,
        lone=lone,
        not_lone_query_mask=~code_lone[index.query],
        num_relevant=code_counts[index.query] - int(ref_includes_query),
        pairs=pairs,
    )


def custom_relevance(
    index: LabelIndex,
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
