"""Per-item results (above, tied, listed, grades) into a :class:`RankTable`: each query's items
sorted by (above, -grade), and the ideal grades of graded relevance."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.csr import ptr_from_counts, row_of_entries
from retrieval_metrics.functional.primitives import masked
from retrieval_metrics.functional.table import RankTable

TABLE_CHUNK = 2**20


@dataclass(frozen=True)
class ItemResults:
    """Where each relevant item landed, before the table orders each query's items.

    Items come grouped by query as ``ptr`` says, or in any order with their query in ``row``
    (``ptr`` then only gives the number of queries). ``listed``: False where the item's position
    is not known (below the depth of the ranking); None when every item is listed. ``grade``:
    per item, None for binary relevance.
    """

    ptr: Tensor
    above: Tensor
    tied: Tensor
    listed: Tensor | None = None
    grade: Tensor | None = None
    row: Tensor | None = None


def table_from_items(
    items: ItemResults,
    num_relevant: Tensor,
    gallery_size: Tensor,
    depth: Tensor,
    *,
    ideal: tuple[Tensor, Tensor] | None = None,
    by_score: bool = False,
) -> RankTable:
    """Sort each query's listed items by (above, -grade) and build the table.

    ``by_score``: the items are grouped and already by decreasing score (binary relevance),
    nothing to sort. Grouped items are handed over: when every item is listed, ``above`` and
    ``tied`` are reordered in place and become the table's, a chunk of queries at a time, so that
    besides the table the scratch stays a few tens of MiB however many relevant pairs there are.
    """
    ptr, above, tied, listed = items.ptr, items.above, items.tied, items.listed
    grades, row = items.grade, items.row
    num_q = ptr.numel() - 1
    if grades is not None and ideal is None:
        ideal = ideal_from(ptr, grades, row)
    g = None if grades is None else grades.to(torch.float64)
    if row is not None:
        # items in any order (the scores form): one sort of all of them
        if listed is not None:
            row, above, tied = masked(row, listed), masked(above, listed), masked(tied, listed)
            g = None if g is None else masked(g, listed)
        perm = _lexsort(row, above, None if g is None else -g)
        new_ptr = ptr_from_counts(torch.bincount(row, minlength=num_q))
        above, tied = above[perm], tied[perm]
        g = None if g is None else g[perm]
    else:
        if listed is None or bool(listed.all()):
            new_ptr = ptr.to(torch.int64, copy=True)
            if g is not None and g is grades:
                g = g.clone()  # reordered in place below; the caller's grades stay as they are
        else:
            row = masked(row_of_entries(ptr), listed)
            above, tied = masked(above, listed), masked(tied, listed)
            g = None if g is None else masked(g, listed)
            new_ptr = ptr_from_counts(torch.bincount(row, minlength=num_q))
            del row
        q0 = num_q if by_score else 0
        while q0 < num_q:
            p0 = int(new_ptr[q0])
            q1 = int(torch.searchsorted(new_ptr, p0 + TABLE_CHUNK, right=True)) - 1
            q1 = min(num_q, max(q1, q0 + 1))
            p1 = int(new_ptr[q1])
            if p1 - p0 > 1:
                chunk_row = row_of_entries(new_ptr[q0 : q1 + 1])
                chunk_above = above[p0:p1]
                perm = _lexsort(chunk_row, chunk_above, None if g is None else -g[p0:p1])
                above[p0:p1] = chunk_above[perm]
                tied[p0:p1] = tied[p0:p1][perm]
                if g is not None:
                    g[p0:p1] = g[p0:p1][perm]
            q0 = q1
    return RankTable(
        ptr=new_ptr,
        above=above,
        tied=tied,
        num_relevant=num_relevant.to(torch.int64),
        gallery_size=gallery_size.to(torch.int64),
        depth=depth,
        grade=g,
        ideal_ptr=None if ideal is None else ideal[0],
        ideal_grade=None if ideal is None else ideal[1],
    )


def _lexsort(row: Tensor, key: Tensor, last: Tensor | None) -> Tensor:
    """The stable permutation sorting by (row, key, last): int64 row and key, float64 last."""
    n = row.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    r, k = row.numpy(), key.numpy()
    if last is None and int(k.min()) >= 0 and int(k.max()) < 2**32 and int(r.max()) < 2**31:
        # one sort of a combined key instead of two
        return torch.from_numpy(np.argsort((r << 32) | k, kind="stable"))
    keys = (k, r) if last is None else (last.numpy(), k, r)
    return torch.from_numpy(np.lexsort(keys))


def ideal_from(ptr: Tensor, grades: Tensor, row: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Each query's grades sorted decreasing (grouped as ``ptr`` says, or by ``row``)."""
    if row is None:
        row = row_of_entries(ptr)
    g = grades.to(torch.float64)
    perm = torch.from_numpy(np.lexsort(((-g).numpy(), row.numpy())))
    return ptr.clone(), g[perm]


def split_judged(table: RankTable, whole_ranking: bool) -> RankTable:
    """A table whose listed items are every judged document of each query (their grades in
    ``grade``, <= 0 for the judged non-relevant ones; every judged grade, absent documents'
    included, in the ideal grades), split into the relevant items (grade > 0) and the judged
    non-relevant documents (``judged_*``, ``num_nonrelevant``). ``whole_ranking``: every judged
    document of the gallery is listed, so the relevant ones not listed are absent from it."""
    if table.grade is None:
        # binary judgments: every judged document is relevant
        empty = torch.zeros(0, dtype=torch.int64)
        return replace(
            table,
            judged_ptr=torch.zeros(table.num_queries + 1, dtype=torch.int64),
            judged_above=empty,
            judged_tied=empty.clone(),
            num_nonrelevant=torch.zeros(table.num_queries, dtype=torch.int64),
            judged_grade=torch.zeros(0, dtype=torch.float64),
            num_negative=torch.zeros(table.num_queries, dtype=torch.int64),
        )
    assert table.ideal_grade is not None and table.ideal_ptr is not None
    positive = table.grade > 0
    item_query = table.item_query
    owner = row_of_entries(table.ideal_ptr)
    ideal_positive = table.ideal_grade > 0
    num_q = table.num_queries

    def count(rows: Tensor) -> Tensor:
        return torch.bincount(rows, minlength=num_q)

    num_relevant = count(owner[ideal_positive])
    num_judged = count(owner)
    listed_relevant = count(item_query[positive])
    changes: dict[str, Tensor | None] = {
        "ptr": ptr_from_counts(listed_relevant),
        "above": table.above[positive],
        "tied": table.tied[positive],
        "grade": table.grade[positive],
        "ideal_ptr": ptr_from_counts(num_relevant),
        "ideal_grade": table.ideal_grade[ideal_positive],
        "num_relevant": num_relevant,
        "judged_ptr": ptr_from_counts(count(item_query[~positive])),
        "judged_above": table.above[~positive],
        "judged_tied": table.tied[~positive],
        "num_nonrelevant": num_judged - num_relevant,
        "judged_grade": table.grade[~positive],
        "num_negative": count(owner[table.ideal_grade < 0]),
    }
    if table.num_absent is not None and whole_ranking:
        changes["num_absent"] = num_relevant - listed_relevant
    return replace(table, **changes)
