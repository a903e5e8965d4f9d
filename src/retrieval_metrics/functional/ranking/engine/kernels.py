"""The tensor routines of the counting: segment maxima, row sorts, grouping by gallery block,
and counting one score block into a query block's histograms.

Where numpy is faster on the CPU the routine says so and takes it there (:func:`sort_rows`,
:func:`count_block` through :func:`_merge_rows`), torch elsewhere; on the CPU, rows with few
relevant scores are counted by the compiled ``_count`` module where it is built (setup.py):
:func:`count_above` in place of the segment maxima and the sparse or dense count.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.csr import ptr_from_counts
from retrieval_metrics.functional.primitives import flat_nonzero
from retrieval_metrics.functional.ranking.threads import pass_threads

try:  # count_block's compiled loop for the CPU (setup.py builds it; optional)
    from retrieval_metrics.functional.ranking.engine import _count
except ImportError:  # pragma: no cover - a build without a C compiler
    _count = None

#: The compiled count compares each item with each relevant score of its row (two compares a
#: score, a few relevant scores a pass, in vector registers): up to this many relevant scores a
#: row it beats a sort of the row. ``count_rows`` sorts the longer rows itself (a radix sort);
#: ``count_above`` takes rows of at most this many only.
COMPILED_MAX_RELEVANT = 128

#: Width of the gallery segments whose maxima :func:`segment_maxima` takes: the gallery is cut
#: into blocks of whole segments.
SEGMENT = 64

#: On the CPU the arrays of one stage of the counting (a chunk of segments, of survivors, of
#: rows) take at most this many bytes, whatever the budget: a stage of a million items gains
#: nothing from being larger, and the heap, handed back transients of ever-changing sizes, grows
#: with them (with a quarter of the budget per stage, resident memory rose by 0.3 to 0.4 times the
#: budget over a long same-source pass). An accelerator takes a quarter of the budget per
#: stage (``counters``).
CPU_STAGE_BYTES = 2**23


def cpu_stage_bytes(memory_budget: int) -> int:
    """The bytes of one stage of the CPU's counting, from the counting's budget."""
    return min(memory_budget // 4, CPU_STAGE_BYTES)


def segment_maxima(s: Tensor) -> Tensor:
    return s.view(s.shape[0], s.shape[1] // SEGMENT, SEGMENT).amax(2)


def column_segments(s: Tensor) -> Callable[[Tensor], Tensor]:
    """Scores of flat segment indices of ``s.T`` (row r, segment k: ``s[64k : 64k + 64, r]``)."""
    num_rows, num_cols = s.shape
    segments = num_rows // SEGMENT
    # (column, segment, item) as a strided view: indexing it with (column, segment) pairs reads
    # the strided items directly, 2x cheaper than building a flat index of every item
    by_column = s.view(segments, SEGMENT, num_cols).permute(2, 0, 1)

    def values(seg: Tensor) -> Tensor:
        column = floor_div(seg, segments)
        return by_column[column, seg - column * segments]

    return values


def floor_div(x: Tensor, d: int) -> Tensor:
    """``x // d`` for non-negative int64 ``x``: a shift when ``d`` is a power of two (segments
    and the usual blocks), several times cheaper than an integer division on the CPU."""
    if d & (d - 1) == 0:
        return x >> (d.bit_length() - 1)
    return x.div(d, rounding_mode="floor")


def by_block(r_block: Tensor, num_blocks: int) -> tuple[Tensor, Tensor]:
    """The relevant pairs ordered by gallery block (stable) and each block's bounds in that
    order: one sort instead of one comparison of every pair per block."""
    if num_blocks <= 1:
        return torch.arange(r_block.numel()), torch.tensor([0, r_block.numel()])[: num_blocks + 1]
    keys = r_block.cpu().numpy()
    if num_blocks <= np.iinfo(np.int16).max:
        # numpy sorts 16-bit integers by radix (linear time; int64 by merging, n log n): the
        # relevant pairs of a huge class are millions a query block
        keys = keys.astype(np.int16)
    order = torch.from_numpy(np.argsort(keys, kind="stable"))
    return order, ptr_from_counts(torch.bincount(r_block.cpu(), minlength=num_blocks))


def pairs_in_block(order: Tensor, bounds: Tensor, b: int) -> Tensor:
    """Indices of the relevant pairs whose item lies in gallery block ``b``."""
    return order[int(bounds[b]) : int(bounds[b + 1])]


def sort_rows(x: Tensor, with_perm: bool = True) -> tuple[Tensor, Tensor | None]:
    """``torch.sort(x, dim=1)`` of a host tensor by numpy, several times faster on long rows
    (the CPU's counting; an accelerator's sorts with torch, ``counters``)."""
    if not with_perm:
        return torch.from_numpy(np.sort(x.numpy(), axis=1)), None
    perm = np.argsort(x.numpy(), axis=1)
    return torch.from_numpy(np.take_along_axis(x.numpy(), perm, 1)), torch.from_numpy(perm)


def columnwise_max(blocks: list[Tensor]) -> list[Tensor]:
    """The element-wise maximum of equally shaped segment maxima, as a list of at most one.

    Column j is the best of the j-th segments of all the blocks: still one distinct item per
    column, so the depth-th best column remains a lower bound of the depth-th best item, and a
    top-k over it sees a fraction of the columns.
    """
    if not blocks:
        return []
    merged = blocks[0]
    for later in blocks[1:]:
        merged = torch.maximum(merged, later)
    return [merged]


def count_candidates(
    s: Tensor,
    candidates: Tensor,
    threshold: Tensor,
    rel_sorted: Tensor,
    hist_lt: Tensor,
    hist_le: Tensor,
    memory_budget: int,
    segment_values: Callable[[Tensor], Tensor] | None = None,
) -> None:
    """Add the items of the candidate segments of the score block ``s`` to the histograms.

    ``candidates`` are flat indices of 64-item segments. Each item at or above its row's
    threshold is searched in a copy of its row of ``rel_sorted``: cheap when few items survive
    and rows are short (a good model, small classes). ``hist_lt`` gains one count at
    (row, number of relevant scores strictly below the item), ``hist_le`` the difference of the
    "<=" and "<" counts for items that tie a relevant score.
    """
    nb, segments = s.shape[0], s.shape[1] // SEGMENT
    width = rel_sorted.shape[1] + 1
    elem = s.element_size()
    # Segments are read a chunk at a time (their scores, a flag and an index per item); the
    # survivors, each copying a row of relevant scores, a sub-chunk at a time.
    stage = cpu_stage_bytes(memory_budget)
    chunk = max(1, stage // (SEGMENT * (elem + 1 + 8)))
    sub = max(1, stage // (width * elem + 4 * 8 + 2 * elem))
    for c0 in range(0, candidates.numel(), chunk):
        c_seg = candidates[c0 : c0 + chunk]
        c_row = floor_div(c_seg, segments)
        # Flat indices throughout: one-dimensional index_select is several times cheaper than
        # indexing with a (row, column) pair.
        if segment_values is None:
            values = s.view(-1, SEGMENT).index_select(0, c_seg)
        else:
            values = segment_values(c_seg)
        # Only items at or above the threshold can move a located relevant item.
        keep = values >= threshold.index_select(0, c_row)[:, None]
        hits = flat_nonzero(keep.view(-1))
        del keep
        for h0 in range(0, hits.numel(), sub):
            hit = hits[h0 : h0 + sub]
            row = c_row.index_select(0, floor_div(hit, SEGMENT))
            value = (values.view(-1).index_select(0, hit) + 0.0)[:, None]
            seq = rel_sorted.index_select(0, row)
            lt = torch.searchsorted(seq, value, right=False)[:, 0]
            flat = row * width + lt
            hist_lt += torch.bincount(flat, minlength=nb * width)
            # Exact ties with a relevant score are rare here: only those need "<=" counted apart.
            at_lt = seq.gather(1, lt.clamp_max(seq.shape[1] - 1)[:, None])[:, 0]
            equal = at_lt == value[:, 0]
            if bool(equal.any()):
                le = torch.searchsorted(seq[equal], value[equal], right=True)[:, 0]
                hist_le += torch.bincount(row[equal] * width + le, minlength=nb * width)
                hist_le -= torch.bincount(flat[equal], minlength=nb * width)


def count_block(
    s: Tensor,
    rel_sorted: Tensor,
    hist_lt: Tensor,
    hist_le: Tensor,
    memory_budget: int,
    num_finite: Tensor | None = None,
    first: Tensor | None = None,
) -> None:
    """Add every item of the score block ``s`` (on the CPU) to the histograms of
    :func:`count_candidates`.

    ``first`` (``(rows, 1)`` int64, or None): per row, the relevant scores before ``first``
    need no counts (they lie below the depth for good): the compiled count passes them over,
    and only the row's bins after ``first`` (what the items above them sum) are exact. The other
    ways count them all.

    Where the compiled module is built, every row is counted there (:func:`compiled_counts`).
    Elsewhere each row of scores is sorted and merged with its row of ``rel_sorted``
    (:func:`_merge_rows`): items below a row's threshold land in bins of relevant scores below
    the threshold, whose counts are never used, so they need no filtering. Rows are taken a
    few at a time so the scratch stays within the budget. An accelerator counts with
    :func:`count_block_searched` (the counting backends, ``counters``).

    A shortcut for degenerate data: where every item of the rows lies below its row's lowest
    relevant score, above its highest, or on the one score of a row whose relevant scores are
    all equal (collapsed embeddings), comparisons place every item and nothing is sorted.
    """
    nb, block_g = s.shape
    m = rel_sorted.shape[1]
    width = m + 1
    if num_finite is None:  # (the query block counts them once for all its gallery blocks)
        num_finite = rel_sorted.isfinite().sum(1, keepdim=True)
    if compiled_counts(s):
        _count.count_rows(
            s.contiguous().numpy(),
            rel_sorted.contiguous().numpy(),
            num_finite.contiguous().numpy(),
            hist_lt.view(nb, width).numpy(),
            hist_le.view(nb, width).numpy(),
            None if first is None else first.contiguous().numpy(),
            threads=pass_threads(*s.shape),
        )
        return
    elem = s.element_size()
    per_row = block_g * (2 * 4 + 8 + elem + 4) + 4 * width * 8
    rows = max(1, cpu_stage_bytes(memory_budget) // per_row)
    for r0 in range(0, nb, rows):
        r1 = min(nb, r0 + rows)
        values, seq = s[r0:r1], rel_sorted[r0:r1]
        # the relevant scores of a row are finite, its padding +inf
        finite_here = num_finite[r0:r1]
        lowest = seq[:, :1]
        highest = seq.gather(1, (finite_here - 1).clamp_min(0))
        # A row whose relevant scores are all equal has no item strictly between them, so
        # every item is below, on or above; other rows need no item in [lowest, highest].
        spread = lowest < highest
        if not bool(spread.any()) or not _any_between(values, lowest, highest, spread):
            # Every item lands in bin 0 or in bin m (the row's relevant scores), "<" for the
            # items above the highest, "<=" for those at or above it: two counts per row.
            n_above = torch.count_nonzero(values > highest, dim=1)
            n_at_least = torch.count_nonzero(values >= highest, dim=1)
            first_bin = torch.arange(r0, r1) * width
            last_bin = first_bin + finite_here[:, 0]
            hist_lt.index_add_(0, first_bin, block_g - n_above)
            hist_lt.index_add_(0, last_bin, n_above)
            hist_le.index_add_(0, first_bin, n_above - n_at_least)
            hist_le.index_add_(0, last_bin, n_at_least - n_above)
            continue
        _merge_rows(
            values,
            seq,
            hist_lt[r0 * width : r1 * width].view(r1 - r0, width),
            hist_le[r0 * width : r1 * width].view(r1 - r0, width),
        )


def count_block_searched(
    s: Tensor, rel_sorted: Tensor, hist_lt: Tensor, hist_le: Tensor, stage: int
) -> None:
    """:func:`count_block`'s histograms from torch's kernels alone, on any device (an
    accelerator's counting, ``counters.TorchDeviceCounter``): one batched binary search of each
    row of scores in its own row of ``rel_sorted``, then scatter-adds; a fixed sequence of
    kernels per chunk of rows (``stage`` bytes of scratch a chunk) and no read on the host.

    An item tying the relevant score at position j is counted "<=" from its "<" position and
    the length of the run of equal relevant scores there, not by a second search.
    """
    nb, block_g = s.shape
    m = rel_sorted.shape[1]
    width = m + 1
    elem = s.element_size()
    # Per item: two int32 positions, an int64 gather index, the relevant score found there and
    # a few flags; per row: the runs of equal scores.
    per_row = block_g * (2 * 4 + 8 + elem + 4 + 8) + 4 * width * 8
    rows = max(1, stage // per_row)
    run_end = _run_end(rel_sorted)
    for r0 in range(0, nb, rows):
        r1 = min(nb, r0 + rows)
        values, seq = s[r0:r1], rel_sorted[r0:r1]
        lt = torch.searchsorted(seq, values, right=False, out_int32=True)
        at = lt.clamp_max(m - 1).to(torch.int64)
        tie = seq.gather(1, at) == values
        # (computed for every item: asking whether any item ties would wait on the host)
        le = torch.where(tie, run_end[r0:r1].gather(1, at).to(torch.int32) + 1, lt)
        del at, tie
        offset = torch.arange(r1 - r0, dtype=torch.int32, device=s.device)[:, None] * width
        # scatter-added ones, not bincount: bincount sizes its output from the data's maximum,
        # read on the host
        ones = torch.ones(lt.numel(), dtype=torch.int64, device=s.device)
        hist_lt[r0 * width : r1 * width].index_add_(0, (lt + offset).view(-1), ones)
        hist_le[r0 * width : r1 * width].index_add_(0, (le + offset).view(-1), ones)
        hist_le[r0 * width : r1 * width].index_add_(0, (lt + offset).view(-1), -ones)


def above_arrays(
    threshold: Tensor,
    rel_sorted: Tensor,
    num_finite: Tensor,
    hist_lt: Tensor,
    hist_le: Tensor,
    heap: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[np.ndarray, ...]:
    """One side of :func:`count_above` as the compiled count takes it (views, no copies of the
    state it writes: the thresholds, histograms and heaps are updated in place)."""
    nb = threshold.shape[0]
    width = rel_sorted.shape[1] + 1
    return (
        threshold.numpy(),
        rel_sorted.contiguous().numpy(),
        num_finite.contiguous().numpy(),
        hist_lt.view(nb, width).numpy(),
        hist_le.view(nb, width).numpy(),
        *([] if heap is None else [part.numpy() for part in heap]),
    )


def count_above(s: Tensor, side: tuple[np.ndarray, ...]) -> None:
    """Add the items of the score block ``s`` at or above their row's threshold to the
    histograms of :func:`count_block`, in one compiled pass (CPU, :func:`compiled_for`);
    ``side``: the rows' state, from :func:`above_arrays`.

    In place of the segment maxima and the candidates of :func:`count_candidates`: each row is
    compared with its threshold a vector at a time, and the few items that pass are searched in
    the row's relevant scores (a row where many pass is counted whole, as :func:`count_block`
    does). With a heap (``(heap, k, cap)`` in :func:`above_arrays`, where the ranking stops at a
    depth): per row, a min-heap of its ``k`` best scores of distinct items so far
    (``RowThresholds.heap``); each item that passes and ties no relevant score joins it, and the
    threshold rises, in place, to the lesser of ``cap`` and the heap's least (a lower bound of
    the row's depth-th best score).
    """
    nb = s.shape[0]
    if not s.is_contiguous() and s.stride(1) >= nb and s.stride(0) == 1:
        # The columns of a row-major block (the symmetric pass's transposed block): read in
        # place, a row of items at a time, where a copy of the transpose costs more than the
        # count.
        items, ld = s.shape[1], s.stride(1)
        _count_columns(s.as_strided((items, ld), (ld, 1)), side)
        return
    _count.count_above(s.contiguous().numpy(), *side, threads=pass_threads(*s.shape))


def count_above_both(
    s: Tensor, cols: tuple[np.ndarray, ...], rows: tuple[np.ndarray, ...]
) -> None:
    """:func:`count_above` of the row-major block ``s`` for the queries of its first columns
    (``cols``) and of its first rows (``rows``) in one pass over ``s``: each row of ``s`` is read
    once for both sides (the two counts read it twice, and the block no longer sits in the
    caches the second time)."""
    _count_columns(s, cols, rows)


def _count_columns(
    block: Tensor, cols: tuple[np.ndarray, ...], rows: tuple[np.ndarray, ...] | None = None
) -> None:
    """The compiled count of the queries that are the first columns of the row-major ``block``
    (and of those that are its first ``rows``, in the same pass). A weak model lets so many
    items through that the columns give up the pass item by item: the rest of their items is
    counted whole, in place, a vector of columns at a time (a copy of their transpose, to count
    them by rows, cost more than the count)."""
    if rows is None:
        _count.count_above_columns(block.numpy(), *cols)
    else:
        _count.count_above_both(block.numpy(), cols, rows)


def _any_between(values: Tensor, lowest: Tensor, highest: Tensor, spread: Tensor) -> bool:
    """Whether a row with ``spread`` has an item in [``lowest``, ``highest``] of its row.

    One such row is looked at first: where a row's relevant items lie in the block, their own
    scores are there, so it nearly always answers without a pass over the whole block (several
    passes over every item, a quarter of the count on a weak model).
    """
    first = int(torch.argmax(spread.view(-1).to(torch.uint8)))
    row = values[first]
    if bool(((row >= lowest[first]) & (row <= highest[first])).any()):
        return True
    return bool(((values >= lowest) & (values <= highest) & spread).any())


def entering_compiled(
    rows: Tensor, n: int, kth: Tensor, width: int
) -> tuple[Tensor, Tensor] | None:
    """The items among the first ``n`` columns of each row of ``rows`` (a C-contiguous CPU
    block, float32 or float64) scoring above the row's ``kth`` (``(rows, 1)``), in column
    order, by the compiled module in one pass (a compare a vector at a time; a top-k list's
    later blocks let few items in): each row's count ``(rows,)`` and their columns
    ``(rows, width)`` (a row's first ``count`` entries), or None where a row has more than
    ``width``. The same items as ``torch.gt`` and ``nonzero``, which take two passes and a
    mask of the block."""
    per_row = torch.empty(rows.shape[0], dtype=torch.int64)
    cols = torch.empty(rows.shape[0], width, dtype=torch.int64)
    found = _count.entering(
        rows.numpy(), kth.contiguous().numpy(), n, width, per_row.numpy(), cols.numpy(),
        threads=pass_threads(rows.shape[0], n),
    )
    return None if found < 0 else (per_row, cols)


def compiles_entering(s: Tensor) -> bool:
    """Whether :func:`entering_compiled` takes the block ``s`` (on the CPU: the caller's to
    know): the compiled module built, in float32 or float64."""
    return _count is not None and s.dtype in (torch.float32, torch.float64)


def compiled_counts(s: Tensor) -> bool:
    """Whether :func:`count_block` counts the block ``s`` with the compiled loops: on the CPU,
    in float32 or float64, rows shorter than its 32-bit counters. A row of at most
    :data:`COMPILED_MAX_RELEVANT` relevant scores is compared with each; a longer one (classes
    of thousands) is sorted there (a radix sort) and walked along its relevant scores, the
    merge of :func:`_merge_rows` without numpy's comparison sort."""
    return _count is not None and s.dtype in (torch.float32, torch.float64) and s.shape[1] < 2**31


def compiled_for(dtype: torch.dtype, num_finite: Tensor) -> bool:
    """Whether the CPU's score blocks of ``dtype`` whose rows hold ``num_finite`` relevant
    scores are counted by the compiled loop (rows shorter than 2**31 items)."""
    return (
        _count is not None
        and dtype in (torch.float32, torch.float64)
        and (num_finite.numel() == 0 or int(num_finite.max()) <= COMPILED_MAX_RELEVANT)
    )


def _merge_rows(values: Tensor, seq: Tensor, hist_lt: Tensor, hist_le: Tensor) -> None:
    """The histograms of :func:`count_block` by merging sorted lists, row by row (CPU).

    Each row of scores is sorted once and each relevant score looked up in it: n log n + m log n
    per row instead of a search per item, and numpy's sort and search are several times faster
    than a batched ``torch.searchsorted``. With the relevant scores r_0 <= ... <= r_(m-1) of a
    row, the items with exactly j relevant scores strictly below them are those in
    (r_(j-1), r_j], so bin j of ``hist_lt`` is #{v <= r_j} - #{v <= r_(j-1)}; "<=" likewise with
    [r_(j-1), r_j). ``hist_le`` gains the difference of the two, as in :func:`count_block`.
    """
    n = values.shape[1]
    sorted_values = np.sort(values.numpy(), axis=1)
    rel = seq.numpy()
    rows, m = rel.shape
    at_most = np.empty((rows, m + 2), dtype=np.int64)
    at_most[:, 0] = 0
    at_most[:, -1] = n
    for i, (row, scores) in enumerate(zip(sorted_values, rel, strict=True)):
        at_most[i, 1:-1] = row.searchsorted(scores, "right")
    # "<" from "<=": minus the items equal to the relevant score, which sit just before. One
    # such item is the rule (the relevant item itself); rows with more are searched again.
    found = at_most[:, 1:-1]
    # The items one and two places before each found position, read from the flat array (many
    # times cheaper than take_along_axis); clamped to the row's first item where there is none,
    # which the `found >` tests then ignore.
    flat = sorted_values.ravel()
    row_start = (np.arange(rows, dtype=np.int64) * n)[:, None]
    before = found - 1
    before += row_start
    np.maximum(before, row_start, out=before)
    below = at_most.copy()
    below[:, 1:-1] -= (found > 0) & (flat.take(before) == rel)
    before -= 1
    np.maximum(before, row_start, out=before)
    for i in np.flatnonzero(((found > 1) & (flat.take(before) == rel)).any(1)):
        below[i, 1:-1] = sorted_values[i].searchsorted(rel[i], "left")
    counts_lt = np.diff(at_most, axis=1)
    hist_lt += torch.from_numpy(counts_lt)
    hist_le += torch.from_numpy(np.diff(below, axis=1) - counts_lt)


def _run_end(seq: Tensor) -> Tensor:
    """For each position of each ascending row, the last position holding the same value."""
    m = seq.shape[1]
    position = torch.arange(m, device=seq.device).expand_as(seq)
    ends = torch.ones_like(seq, dtype=torch.bool)
    ends[:, :-1] = seq[:, 1:] != seq[:, :-1]
    # the first run end at or after each position: a running minimum from the right
    end_at = torch.where(ends, position, m)
    return end_at.flip(1).cummin(1).values.flip(1)
