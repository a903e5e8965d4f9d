"""A score block counted by one Triton kernel (``counters.TritonCounter``): the histograms of
``kernels.count_block_searched``, reading each score once and writing nothing per item.

Each program takes a tile of ``ROWS x COLUMNS`` scores of the block. Every score is placed
among its row's relevant scores by a branch-free binary search (``lt``: how many are strictly
below it, ``le``: how many are at or below it), all in registers. The tile's counts then reach
the histograms as sums, not one atomic per item:

* rows of at most :data:`PER_BIN_WIDTH` bins: per bin j, the tile's items with ``lt == j``
  (and ``le == j``) summed per row, one atomic add per row and bin;
* longer rows (classes of thousands): the items of bin 0 (below the row's lowest relevant
  score: most of them in a good ranking) summed per row, the others added one by one.

The comparisons are the very ``<`` and ``<=`` of torch's ``searchsorted`` on the same scores,
so the counts are exactly those of the reference (``kernels.count_block_searched``): the
property tests run this kernel under ``TRITON_INTERPRET=1`` on the CPU against it. The block's
scores come from the product that also gave the relevant scores (the pass reads them from the
same score block), so a relevant item ties itself exactly.
"""

from __future__ import annotations

import functools

from torch import Tensor

try:  # optional: CUDA builds of torch ship it; the counters use it only where it is here
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - a build without triton
    triton = tl = None

__all__ = [
    "COLUMNS", "PER_BIN_WIDTH", "ROWS", "available", "count_block_fused", "count_tile",
]

#: a tile of the score block: rows and columns of one program
ROWS = 16
COLUMNS = 256
#: rows of at most this many histogram bins (relevant scores + 1) are summed bin by bin: those of
#: at most 63 relevant scores, whose search takes at most 6 halving steps (the kernel's test)
PER_BIN_WIDTH = 64


def available() -> bool:
    """Whether the ``triton`` package is importable (it ships with CUDA builds of torch)."""
    return tl is not None


def count_tile(
    s_ptr, rel_ptr, hist_lt_ptr, hist_le_ptr, n_rows, n_cols, m, row_stride, col_stride,
    factor_ptr, row_factor_ptr,
    ROWS: tl.constexpr, COLUMNS: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    SCALED: tl.constexpr, ROW_SCALED: tl.constexpr,
):
    """The kernel's source: one ``ROWS x COLUMNS`` tile of the block (:func:`_kernel` makes it
    a Triton kernel). The block is read through its strides: a product read along its columns
    (the two-sided pass counts ``s.T``) is counted where it lies, not copied first. ``SCALED``:
    each score is first multiplied by its column's factor (``factor_ptr``), the one float32
    product torch's ``s.mul_(factor)`` rounds, in registers instead of a pass over the block;
    with ``ROW_SCALED`` by its row's times its column's (``row_factor_ptr``), the two products
    torch's ``s.mul_(row[:, None] * column[None, :])`` rounds (a transposed view's factors
    swap places, and a float32 product does not depend on the order of its two factors)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * COLUMNS + tl.arange(0, COLUMNS)
    row_in = rows < n_rows
    col_in = cols < n_cols
    inside = row_in[:, None] & col_in[None, :]
    rows64 = rows.to(tl.int64)
    at = rows64[:, None] * row_stride + cols[None, :].to(tl.int64) * col_stride
    s = tl.load(s_ptr + at, mask=inside, other=0.0)
    if SCALED:
        column = tl.load(factor_ptr + cols, mask=col_in, other=1.0)
        if ROW_SCALED:
            row = tl.load(row_factor_ptr + rows, mask=row_in, other=1.0)
            s = s * (row[:, None] * column[None, :])
        else:
            s = s * column[None, :]
    rel_row = rel_ptr + rows64[:, None] * m
    # lower and upper bounds by halving steps: lt = #{relevant < s}, le = #{relevant <= s}
    lt = tl.zeros((ROWS, COLUMNS), dtype=tl.int32)
    le = tl.zeros((ROWS, COLUMNS), dtype=tl.int32)
    for k in tl.static_range(SEARCH_STEPS):
        step = 1 << (SEARCH_STEPS - 1 - k)
        probe = lt + step
        value = tl.load(rel_row + (probe - 1), mask=inside & (probe <= m), other=0.0)
        lt = tl.where(inside & (probe <= m) & (value < s), probe, lt)
        probe = le + step
        value = tl.load(rel_row + (probe - 1), mask=inside & (probe <= m), other=0.0)
        le = tl.where(inside & (probe <= m) & (value <= s), probe, le)
    width = m + 1
    lt_base = hist_lt_ptr + rows64 * width
    le_base = hist_le_ptr + rows64 * width
    if SEARCH_STEPS <= 6:  # m <= 63: at most PER_BIN_WIDTH bins, summed bin by bin
        for j in range(0, width):
            n_lt = tl.sum((inside & (lt == j)).to(tl.int64), axis=1)
            n_le = tl.sum((inside & (le == j)).to(tl.int64), axis=1)
            tl.atomic_add(lt_base + j, n_lt, mask=row_in & (n_lt != 0))
            tl.atomic_add(le_base + j, n_le - n_lt, mask=row_in & (n_le != n_lt))
    else:
        below = tl.sum((inside & (lt == 0)).to(tl.int64), axis=1)
        tl.atomic_add(lt_base, below, mask=row_in & (below != 0))
        ones = tl.full((ROWS, COLUMNS), 1, dtype=tl.int64)
        tl.atomic_add(lt_base[:, None] + lt, ones, mask=inside & (lt != 0))
        tie = inside & (le != lt)
        tl.atomic_add(le_base[:, None] + le, ones, mask=tie)
        tl.atomic_add(le_base[:, None] + lt, -ones, mask=tie)


@functools.cache
def _kernel():
    """:func:`count_tile` as a Triton kernel (run by Triton's interpreter, on the CPU, where
    ``TRITON_INTERPRET=1`` was set before triton was imported: the tests without a GPU). The
    rows and the relevant scores a row are not specialised on (one compiled kernel for every
    query block of a ranking); the row length is, so that a row's loads can be vectorised."""
    return triton.jit(count_tile, do_not_specialize=["n_rows", "m"])


def count_block_fused(
    s: Tensor, rel_sorted: Tensor, hist_lt: Tensor, hist_le: Tensor,
    column_factor: Tensor | None = None, row_factor: Tensor | None = None,
) -> None:
    """Add every item of score block ``s`` (``rows x items``, any strides: a transposed view
    is read in place) to the int64 histograms ``hist_lt`` and ``hist_le`` (``rows * (m + 1)``,
    row-major) against each row's relevant scores ``rel_sorted`` (``rows x m``, ascending, +inf
    padding), as ``kernels.count_block_searched`` does; one kernel launch, no host read.
    ``column_factor`` (float32, one entry a column): the items counted are ``s * column_factor``
    as ``s.mul_(column_factor)`` would leave them, and ``s`` is left as it is; with
    ``row_factor`` (one entry a row) too, ``s * (row_factor[:, None] * column_factor[None, :])``
    (cosine's factor per pair)."""
    n_rows, n_cols = s.shape
    m = rel_sorted.shape[1]
    if n_rows == 0 or n_cols == 0:
        return
    rel = rel_sorted.contiguous()
    if rel.dtype != s.dtype:
        raise TypeError(f"scores and relevant scores differ in dtype: {s.dtype}, {rel.dtype}")
    for factor, n, what in ((column_factor, n_cols, "column"), (row_factor, n_rows, "row")):
        if factor is not None and (factor.shape != (n,) or factor.dtype != s.dtype):
            raise ValueError(
                f"count_block_fused: a {what} factor of shape ({n},) and dtype {s.dtype} is "
                f"needed, got {tuple(factor.shape)} {factor.dtype}"
            )
    if row_factor is not None and column_factor is None:
        raise ValueError("count_block_fused: a row factor goes with a column factor")
    steps = max(1, int(m).bit_length())  # 2**steps > m: the search reaches every count 0..m
    grid = (-(-n_rows // ROWS), -(-n_cols // COLUMNS))
    _kernel()[grid](
        s, rel, hist_lt, hist_le, n_rows, n_cols, m, s.stride(0), s.stride(1),
        s if column_factor is None else column_factor.contiguous(),
        s if row_factor is None else row_factor.contiguous(),
        ROWS=ROWS, COLUMNS=COLUMNS, SEARCH_STEPS=steps, SCALED=column_factor is not None,
        ROW_SCALED=row_factor is not None,
    )
