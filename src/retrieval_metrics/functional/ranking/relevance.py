"""Relevance rules and exclusions: who is correct for a query, and who is left out of its ranking.

Everything the ranking needs to know about relevance is decided here and nowhere else. The result
is a :class:`Relevance`: for every query, the gallery items that are relevant to it and the gallery
items that are excluded from its ranking (they neither help nor compete), both as compressed
sparse rows (CSR) over gallery indices, plus the gallery items that are removed for every query
(the ignore label).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.csr import (
    csr_difference,
    csr_from_ranges,
    csr_keep_columns,
    ptr_from_counts,
    row_of_entries,
)
from retrieval_metrics.functional.primitives import flat_nonzero, masked
from retrieval_metrics.functional.ranking.labels import canonical_id, label_codes
from retrieval_metrics.functional.ranking.qrels import Judgments, sorted_ids

__all__ = [
    "Relevance",
    "build_relevance",
    "csr_from_ranges",
    "identical_ids_csr",
]


@dataclass(frozen=True)
class Relevance:
    """Relevant and excluded gallery items of every query.

    Attributes:
        relevant_ptr: ``(Q + 1,)`` int64 CSR pointers into ``relevant_index``.
        relevant_index: gallery indices (into the kept gallery) of each query's relevant items,
            sorted ascending within a query. Excluded items are never relevant.
        excluded_ptr: ``(Q + 1,)`` int64 CSR pointers into ``excluded_index``.
        excluded_index: kept-gallery indices excluded from each query's ranking.
        gallery_index: ``(N',)`` int64 indices of the kept gallery items in the input gallery (all
            of them unless an ignore label removed some).
        query_grades: optional float64 grades aligned with ``relevant_index`` (graded relevance).
        unretrieved: optional ``(Q,)`` int64, relevant items of each query that are not in the
            gallery at all (judged documents the corpus lacks): relevant, never retrieved.
        unretrieved_grades: their grades, grouped by query (float64).
    """

    relevant_ptr: Tensor
    relevant_index: Tensor
    excluded_ptr: Tensor
    excluded_index: Tensor
    gallery_index: Tensor
    query_grades: Tensor | None = None
    unretrieved: Tensor | None = None
    unretrieved_grades: Tensor | None = None

    @property
    def num_queries(self) -> int:
        return self.relevant_ptr.numel() - 1

    @property
    def num_relevant(self) -> Tensor:
        return self.relevant_ptr.diff()

    @property
    def num_excluded(self) -> Tensor:
        return self.excluded_ptr.diff()


def _label_csr(query_labels: Tensor, gallery_labels: Tensor) -> tuple[Tensor, Tensor]:
    order = torch.sort(gallery_labels, stable=True).indices
    sorted_labels = gallery_labels[order]
    start = torch.searchsorted(sorted_labels, query_labels, right=False)
    stop = torch.searchsorted(sorted_labels, query_labels, right=True)
    # A stable sort keeps equal labels in index order: every row comes out sorted ascending.
    return csr_from_ranges(start, stop, order)


def _radius_csr(
    query_positions: Tensor, gallery_positions: Tensor, radius: float, block: int = 4096
) -> tuple[Tensor, Tensor]:
    rows, cols = [], []
    qp = query_positions.to(torch.float64)
    gp = gallery_positions.to(torch.float64)
    for start in range(0, qp.shape[0], block):
        # Distances in float64 so that "<= radius" is decided the same way whatever the block.
        dist = torch.cdist(
            qp[start : start + block], gp, compute_mode="donot_use_mm_for_euclid_dist"
        )
        r, c = torch.nonzero(dist <= radius, as_tuple=True)
        rows.append(r + start)
        cols.append(c)
    row = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64)
    col = torch.cat(cols) if cols else torch.zeros(0, dtype=torch.int64)
    return ptr_from_counts(torch.bincount(row, minlength=qp.shape[0])), col


def _ids_csr(
    relevant_ids: Sequence[Any], gallery_ids: Tensor | None, num_gallery: int
) -> tuple[Tensor, Tensor, Tensor | None]:
    """CSR of explicit relevant ids; a dict gives graded relevance (grade <= 0: not relevant)."""
    if gallery_ids is None:
        lookup = None
    else:
        lookup = {int(v): i for i, v in enumerate(gallery_ids.tolist())}
    # relevant ids compare with the gallery ids as every id does (``label_codes``)
    ptr = [0]
    index: list[int] = []
    grades: list[float] = []
    graded = False
    for q, ids in enumerate(relevant_ids):
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        if isinstance(ids, dict):
            graded = True
            items = [(k, float(v)) for k, v in ids.items() if float(v) > 0]
        else:
            items = [(k, 1.0) for k in dict.fromkeys(ids)]
        row = []
        for item_id, grade in items:
            if lookup is None:
                position = int(item_id)
                if not 0 <= position < num_gallery:
                    raise ValueError(
                        f"`relevant_ids[{q}]` names gallery item {item_id!r}, but the gallery has "
                        f"{num_gallery} items (indices 0..{num_gallery - 1}); pass `gallery_ids` "
                        "to name items by id"
                    )
            else:
                key = canonical_id(item_id)
                if not isinstance(key, int):  # a string id: by its hash, as the gallery's
                    key = int(label_codes([item_id], f"relevant_ids[{q}]")[0])
                if key not in lookup:
                    raise ValueError(
                        f"`relevant_ids[{q}]` names id {item_id!r}, which is not in `gallery_ids`"
                    )
                position = lookup[key]
            row.append((position, grade))
        row.sort()
        index.extend(p for p, _ in row)
        grades.extend(g for _, g in row)
        ptr.append(len(index))
    return (
        torch.tensor(ptr, dtype=torch.int64),
        torch.tensor(index, dtype=torch.int64),
        torch.tensor(grades, dtype=torch.float64) if graded else None,
    )


def identical_ids_csr(query_ids: Tensor, gallery_ids: Tensor) -> tuple[Tensor, Tensor]:
    """CSR of the gallery items whose id equals each query's id."""
    order, ids = sorted_ids(gallery_ids.cpu(), among=query_ids.cpu())
    start = torch.searchsorted(ids, query_ids.cpu(), right=False)
    stop = torch.searchsorted(ids, query_ids.cpu(), right=True)
    return csr_from_ranges(start, stop, order)


def _judged_relevance(
    judgments: Judgments,
    num_queries: int,
    num_gallery: int,
    query_ids: Tensor | None,
    gallery_ids: Tensor | None,
    ignore_identical_ids: bool,
    judged_documents: bool,
) -> Relevance:
    """Relevance by judgments: the queries and the gallery named by their ids; the document whose
    id is the query's excluded (``ignore_identical_ids``), neither relevant nor ranked.
    ``judged_documents``: every judged document is listed, grade <= 0 included (the ranking
    places them all, and the table splits them off after)."""
    if query_ids is None or gallery_ids is None:
        raise ValueError("judgments (qrels) need the ids of the queries and of the gallery items")
    # the judgment of the query's own id is dropped with the document (in the corpus or not)
    judged = judgments.relevance(
        query_ids, gallery_ids, drop_identical=ignore_identical_ids, every_judged=judged_documents
    )
    if ignore_identical_ids:
        ex_ptr, ex_index = identical_ids_csr(query_ids, gallery_ids)
        ex_index = _sorted_rows(ex_ptr, ex_index)
    else:
        ex_ptr = torch.zeros(num_queries + 1, dtype=torch.int64)
        ex_index = torch.zeros(0, dtype=torch.int64)
    return Relevance(
        relevant_ptr=judged.ptr,
        relevant_index=judged.index,
        excluded_ptr=ex_ptr,
        excluded_index=ex_index,
        gallery_index=torch.arange(num_gallery),
        query_grades=judged.grades,
        unretrieved=judged.unretrieved,
        unretrieved_grades=judged.unretrieved_grades,
    )


def _sorted_rows(ptr: Tensor, index: Tensor) -> Tensor:
    if index.numel() < 2:
        return index
    row = row_of_entries(ptr)
    order = torch.argsort(row * max(int(index.max()) + 1, 1) + index)
    return index[order]


def build_relevance(
    num_queries: int,
    num_gallery: int,
    *,
    relevance: str = "label",
    query_labels: Tensor | None = None,
    gallery_labels: Tensor | None = None,
    query_positions: Tensor | None = None,
    gallery_positions: Tensor | None = None,
    radius: float | None = None,
    relevant_ids: Sequence[Any] | None = None,
    query_ids: Tensor | None = None,
    gallery_ids: Tensor | None = None,
    same_source: bool = False,
    query_cameras: Tensor | None = None,
    gallery_cameras: Tensor | None = None,
    ignore_label: int | None = None,
    ignore_identical_ids: bool = True,
    judged_documents: bool = False,
) -> Relevance:
    """Decide every query's relevant and excluded gallery items (docs/definitions.md, Terms).

    Args:
        relevance: ``"label"`` (equal labels), ``"radius"`` (position within ``radius``, inclusive)
            or ``"ids"`` (``relevant_ids[q]``: gallery ids, or a dict id -> grade; or judgments,
            a mapping query id -> document ids or -> {document id: grade} read by the queries'
            ids, whose documents missing from the gallery are relevant and never retrieved).
        query_ids, gallery_ids: sample ids; a gallery item whose id equals the query's id is the
            query itself and is excluded (unless ``ignore_identical_ids=False``). With
            ``same_source`` and no ids, the item at the query's own position is excluded.
        query_cameras, gallery_cameras: re-identification: items with the query's label *and*
            camera are excluded.
        ignore_label: gallery items with this label are removed for every query; a query with this
            label has no relevant item.
        judged_documents: with judgments, list every judged document (grade <= 0 included).

    Labels must already be int64 tensors (see :func:`encode_labels`).
    """
    device = torch.device("cpu")
    gallery_keep = None
    if ignore_label is not None:
        if gallery_labels is None:
            raise ValueError("`ignore_label` needs gallery labels")
        gallery_keep = gallery_labels != ignore_label
    if same_source and (query_ids is None) != (gallery_ids is None):
        raise ValueError("same-source ids must be given for both queries and gallery, or neither")

    if relevance == "label":
        if query_labels is None or gallery_labels is None:
            raise ValueError('relevance="label" needs `labels` for queries and gallery items')
        rel_ptr, rel_index = _label_csr(query_labels, gallery_labels)
        grades = None
    elif relevance == "radius":
        if query_positions is None or gallery_positions is None:
            raise ValueError('relevance="radius" needs `positions` for queries and gallery items')
        if radius is None or not radius >= 0:
            raise ValueError(f"`radius` must be a non-negative number of metres, got {radius!r}")
        rel_ptr, rel_index = _radius_csr(query_positions, gallery_positions, float(radius))
        grades = None
    elif relevance == "ids":
        if relevant_ids is None:
            raise ValueError(
                'relevance="ids" needs `relevant_ids`, one collection of ids per query'
            )
        if isinstance(relevant_ids, (Mapping, Judgments)):
            return _judged_relevance(
                Judgments.of(relevant_ids), num_queries, num_gallery, query_ids, gallery_ids,
                ignore_identical_ids, judged_documents,
            )
        if len(relevant_ids) != num_queries:
            raise ValueError(
                f"`relevant_ids` must have one entry per query ({num_queries}), "
                f"got {len(relevant_ids)}"
            )
        rel_ptr, rel_index, grades = _ids_csr(relevant_ids, gallery_ids, num_gallery)
    else:
        raise ValueError(f'`relevance` must be "label", "radius" or "ids", got {relevance!r}')

    # Exclusions, as (query, gallery) pairs.
    ex_rows: list[Tensor] = []
    ex_cols: list[Tensor] = []
    if query_ids is not None and gallery_ids is not None:
        if ignore_identical_ids:
            ptr, index = identical_ids_csr(query_ids, gallery_ids)
            ex_rows.append(row_of_entries(ptr))
            ex_cols.append(index)
    elif same_source:
        ex_rows.append(torch.arange(num_queries))
        ex_cols.append(torch.arange(num_queries))
    if query_cameras is not None or gallery_cameras is not None:
        if query_cameras is None or gallery_cameras is None:
            raise ValueError("`cameras` must be given for both queries and gallery items")
        if query_labels is None or gallery_labels is None:
            raise ValueError("camera exclusion needs identity labels for queries and gallery items")
        same_ptr, same_index = _label_csr(query_labels, gallery_labels)
        same_row = row_of_entries(same_ptr)
        same_cam = query_cameras[same_row] == gallery_cameras[same_index]
        ex_rows.append(same_row[same_cam])
        ex_cols.append(same_index[same_cam])
    if ex_rows:
        rows, cols = torch.cat(ex_rows), torch.cat(ex_cols)
        key = torch.unique(rows * max(num_gallery, 1) + cols)
        rows, cols = key // max(num_gallery, 1), key % max(num_gallery, 1)
    else:
        rows = cols = torch.zeros(0, dtype=torch.int64)

    if gallery_keep is not None:
        keep_pairs = gallery_keep[cols]
        rows, cols = rows[keep_pairs], cols[keep_pairs]
    ex_ptr = ptr_from_counts(torch.bincount(rows, minlength=num_queries))
    ex_index = cols

    rel_ptr, rel_index, kept = csr_difference(rel_ptr, rel_index, ex_ptr, ex_index)
    if grades is not None:
        grades = masked(grades, kept)
    if gallery_keep is not None:
        rel_ptr, rel_index, kept = csr_keep_columns(rel_ptr, rel_index, gallery_keep)
        if grades is not None:
            grades = masked(grades, kept)
        new_position = torch.cumsum(gallery_keep.to(torch.int64), 0) - 1
        rel_index = new_position[rel_index]
        ex_index = new_position[ex_index]
        gallery_index = flat_nonzero(gallery_keep)
    else:
        gallery_index = torch.arange(num_gallery)
    return Relevance(
        relevant_ptr=rel_ptr.to(device),
        relevant_index=rel_index.to(device),
        excluded_ptr=ex_ptr.to(device),
        excluded_index=ex_index.to(device),
        gallery_index=gallery_index.to(device),
        query_grades=grades,
    )
