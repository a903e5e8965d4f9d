"""Compressed sparse rows (CSR), the library's one format for "per query, a list of items".

A CSR matrix of ``n`` rows is a pointer tensor ``ptr`` of ``n + 1`` int64 offsets and the
entries, row ``i`` being ``entries[ptr[i]:ptr[i + 1]]``: the relevance sets, the exclusions and
the rank table all take this form. These are its shared routines. Every tensor they make lies on
the device of the tensor it is made from (``counts``, ``ptr``, ``start``), as the code they
replace made it: host tensors stay on the host, and nothing moves between devices.
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import masked, repeat

__all__ = [
    "csr_difference",
    "csr_from_ranges",
    "csr_keep_columns",
    "csr_rows",
    "ptr_from_counts",
    "row_of_entries",
]


def ptr_from_counts(counts: Tensor) -> Tensor:
    """The int64 pointers ``[0, c0, c0 + c1, ...]`` of rows holding ``counts`` entries."""
    ptr = torch.zeros(counts.numel() + 1, dtype=torch.int64, device=counts.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    return ptr


def row_of_entries(ptr: Tensor) -> Tensor:
    """The row of every entry: ``i`` repeated ``ptr[i + 1] - ptr[i]`` times."""
    return repeat(torch.arange(ptr.numel() - 1, device=ptr.device), ptr.diff())


def csr_from_ranges(
    start: Tensor, stop: Tensor, order: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """CSR whose row ``i`` lists ``order[start[i]:stop[i]]`` (the plain range without ``order``)."""
    counts = (stop - start).clamp_min(0)
    ptr = ptr_from_counts(counts)
    total = int(ptr[-1])
    # one offset per row, repeated: entry k of row i is at start[i] + (k - ptr[i])
    position = torch.arange(total, device=start.device)
    position += repeat(start - ptr[:-1], counts, output_size=total)
    index = order.index_select(0, position) if order is not None else position
    return ptr, index


def csr_difference(
    a_ptr: Tensor, a_index: Tensor, b_ptr: Tensor, b_index: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Row-wise set difference A \\ B of two CSR matrices; also returns the mask over A kept.

    A's rows must be sorted ascending (every builder of the relevance sets makes them so). B is
    small (the query itself, a few same-camera items), A may hold thousands of items per query:
    each item of B is looked up in A, rather than each item of A in B.
    """
    keep = torch.ones(a_index.numel(), dtype=torch.bool, device=a_index.device)
    if b_index.numel() == 0 or a_index.numel() == 0:
        return a_ptr, a_index, keep
    b_row = row_of_entries(b_ptr)
    # A binary search of each item of B in its row of A, all of B at once: O(|B| log m), and
    # nothing the size of A besides the mask.
    lo, hi = a_ptr[b_row], a_ptr[b_row + 1]
    end = hi  # (the loop rebinds hi, never writes it)
    while True:
        active = lo < hi
        if not bool(active.any()):
            break
        mid = torch.where(active, (lo + hi) // 2, lo)
        below = active & (a_index[mid.clamp_max(a_index.numel() - 1)] < b_index)
        lo = torch.where(below, mid + 1, lo)
        hi = torch.where(active & ~below, mid, hi)
    pos = lo.clamp_max(a_index.numel() - 1)
    found = (lo < end) & (a_index[pos] == b_index)
    keep[pos[found]] = False
    removed = torch.bincount(b_row[found], minlength=a_ptr.numel() - 1)
    ptr = a_ptr.clone()
    ptr[1:] -= torch.cumsum(removed, 0)
    return ptr, masked(a_index, keep), keep


def csr_keep_columns(ptr: Tensor, index: Tensor, keep: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The entries whose column ``keep`` marks: the new pointers and entries, and the mask over
    the old entries."""
    mask = keep[index]
    counts = torch.bincount(masked(row_of_entries(ptr), mask), minlength=ptr.numel() - 1)
    return ptr_from_counts(counts), masked(index, mask), mask


def csr_rows(ptr: Tensor, rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The entries of CSR rows ``rows``: (row within ``rows``, column in it, position in CSR)."""
    start, stop = ptr[rows], ptr[rows + 1]
    local_ptr = ptr_from_counts(stop - start)
    row = row_of_entries(local_ptr)
    col = torch.arange(int(local_ptr[-1]), device=local_ptr.device)
    col -= local_ptr[:-1].index_select(0, row)
    return row, col, col + start.index_select(0, row)
