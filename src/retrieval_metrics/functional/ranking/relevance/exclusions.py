"""Who is left out of a query's ranking (neither relevant nor competing): the query itself (the
gallery item of its id, or of its position in a same-source set), the items of its label and
camera (re-identification), and, for every query, the gallery items of the ignore label."""

from __future__ import annotations

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
from retrieval_metrics.functional.ranking.items import Keys
from retrieval_metrics.functional.ranking.qrels import sorted_ids
from retrieval_metrics.functional.ranking.relevance.rules import RelevantRows, label_csr
from retrieval_metrics.functional.ranking.relevance.sets import Relevance
from retrieval_metrics.functional.ranking.settings import RankingSettings

__all__ = [
    "check_exclusions", "excluded_pairs", "identical_ids_csr", "leaves_out_identical_ids",
    "left_out_of_lists", "sorted_rows", "with_exclusions",
]


def check_exclusions(
    queries: Keys, gallery: Keys, settings: RankingSettings, same_source: bool
) -> None:
    """Refuse exclusions that cannot be decided, before any relevance is built."""
    if settings.ignore_label is not None and gallery.labels is None:
        raise ValueError("`ignore_label` needs gallery labels")
    if same_source and (queries.ids is None) != (gallery.ids is None):
        raise ValueError("same-source ids must be given for both queries and gallery, or neither")


def with_exclusions(
    relevant: RelevantRows,
    queries: Keys,
    gallery: Keys,
    sizes: tuple[int, int],
    settings: RankingSettings,
    same_source: bool,
) -> Relevance:
    """The relevance sets of ``relevant`` (CSR rows and grades) once the excluded items are
    taken out of them, and the ignore label's gallery items out of every ranking."""
    num_queries, num_gallery = sizes
    rel_ptr, rel_index, grades = relevant
    rows, cols = excluded_pairs(queries, gallery, sizes, settings, same_source)
    gallery_keep = None
    if settings.ignore_label is not None:
        assert gallery.labels is not None  # check_exclusions
        gallery_keep = gallery.labels != settings.ignore_label
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
        relevant_ptr=rel_ptr,
        relevant_index=rel_index,
        excluded_ptr=ex_ptr,
        excluded_index=ex_index,
        gallery_index=gallery_index,
        query_grades=grades,
    )


def excluded_pairs(
    queries: Keys, gallery: Keys, sizes: tuple[int, int], settings: RankingSettings,
    same_source: bool,
) -> tuple[Tensor, Tensor]:
    """(query, gallery item) pairs excluded, each once, sorted by query then item: the query
    itself (the gallery item of its id, or its place in a same-source set without ids) and the
    items of its label and camera. The items of the ignore label, left out of every query's
    ranking, are :func:`with_exclusions`' own. What a ranking leaves out, and so what a run
    of it never lists (``metrics.runs``)."""
    num_queries, num_gallery = sizes
    ex_rows: list[Tensor] = []
    ex_cols: list[Tensor] = []
    if queries.ids is not None and gallery.ids is not None:
        if leaves_out_identical_ids(settings):
            ptr, index = identical_ids_csr(queries.ids, gallery.ids)
            ex_rows.append(row_of_entries(ptr))
            ex_cols.append(index)
    elif same_source:
        ex_rows.append(torch.arange(num_queries))
        ex_cols.append(torch.arange(num_queries))
    if queries.cameras is not None or gallery.cameras is not None:
        if queries.cameras is None or gallery.cameras is None:
            raise ValueError("`cameras` must be given for both queries and gallery items")
        if queries.labels is None or gallery.labels is None:
            raise ValueError("camera exclusion needs identity labels for queries and gallery items")
        same_ptr, same_index = label_csr(queries.labels, gallery.labels)
        same_row = row_of_entries(same_ptr)
        same_cam = queries.cameras[same_row] == gallery.cameras[same_index]
        ex_rows.append(same_row[same_cam])
        ex_cols.append(same_index[same_cam])
    if not ex_rows:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    rows, cols = torch.cat(ex_rows), torch.cat(ex_cols)
    key = torch.unique(rows * max(num_gallery, 1) + cols)
    return key // max(num_gallery, 1), key % max(num_gallery, 1)


def leaves_out_identical_ids(settings: RankingSettings) -> bool:
    """Whether a ranking leaves a gallery item of a query's id out of that query's ranking
    (both sides given ids): always, but with judgments and ``ignore_identical_ids=False``.
    (ignore_identical_ids is judgments' option: elsewhere an id on both sides is one sample,
    never ranked against itself, whatever a protocol's default for it.)"""
    return settings.ignore_identical_ids is not False or settings.relevance != "qrels"


def left_out_of_lists(
    queries: Keys, gallery: Keys, sizes: tuple[int, int], settings: RankingSettings,
    same_source: bool,
) -> tuple[tuple[Tensor, Tensor], Tensor | None]:
    """What a ranking of ``queries`` against ``gallery`` leaves out, as a list of its best items
    (a run: ``top_lists.top_k``) must leave it out: the pairs of :func:`excluded_pairs`, their
    gallery items as places among the items kept; and the items kept where the ignore label's
    are left out of every ranking (``settings.ignore_label``; None: all of them). ``sizes``:
    the queries and gallery items; keys on the host."""
    rows, cols = excluded_pairs(queries, gallery, sizes, settings, same_source)
    if settings.ignore_label is None or gallery.labels is None:
        return (rows, cols), None
    keep = gallery.labels != settings.ignore_label
    place = torch.cumsum(keep, 0) - 1
    at = keep.index_select(0, cols)
    return (rows[at], place.index_select(0, cols[at])), flat_nonzero(keep)


def identical_ids_csr(
    query_ids: Tensor, gallery_ids: Tensor, lookup: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor]:
    """CSR of the gallery items whose id equals each query's id. ``lookup``:
    :func:`~retrieval_metrics.functional.ranking.qrels.sorted_ids` of ``gallery_ids`` among
    ids that hold the queries' (by default, among those)."""
    order, ids = lookup or sorted_ids(gallery_ids.cpu(), among=query_ids.cpu())
    start = torch.searchsorted(ids, query_ids.cpu(), right=False)
    stop = torch.searchsorted(ids, query_ids.cpu(), right=True)
    return csr_from_ranges(start, stop, order)



def sorted_rows(ptr: Tensor, index: Tensor) -> Tensor:
    if index.numel() < 2:
        return index
    row = row_of_entries(ptr)
    order = torch.argsort(row * max(int(index.max()) + 1, 1) + index)
    return index[order]
