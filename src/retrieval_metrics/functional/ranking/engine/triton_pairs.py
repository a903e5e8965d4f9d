"""Cosine's factor per pair on a half product's score block, in one pass (``TritonCounter``'s
devices): ``s_ij *= a_i * b_j``.

Where a block is read along its columns too (the symmetric pass, image-text both ways, a sharded
corpus: ``tensor_cores.HalfProducts``), each score takes one factor per pair, the product of its
row's and its column's reciprocal norms. torch writes those factors out as a block, then
multiplies by it: two passes over a score-sized block (a write, then two reads and a write).
This kernel reads each score once and writes it once, with the same two float32 products,
rounded the same way (``a_i * b_j``, then the score times that), so the scores are the same,
bit for bit: the property tests run it under ``TRITON_INTERPRET=1`` against torch's two
operations.
"""

from __future__ import annotations

import functools

from torch import Tensor

try:  # optional: CUDA builds of torch ship it; used only where TritonCounter counts
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - a build without triton
    triton = tl = None

__all__ = ["COLUMNS", "ROWS", "scale_by_pairs", "scale_tile"]

#: a tile of the score block: rows and columns of one program
ROWS = 32
COLUMNS = 128


def scale_tile(
    s_ptr, a_ptr, b_ptr, n_rows, n_cols, row_stride,
    ROWS: tl.constexpr, COLUMNS: tl.constexpr,
):
    """The kernel's source: one ``ROWS x COLUMNS`` tile of a row-major block whose rows are
    ``row_stride`` apart (:func:`_kernel` makes it a Triton kernel)."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * COLUMNS + tl.arange(0, COLUMNS)
    row_in, col_in = rows < n_rows, cols < n_cols
    a = tl.load(a_ptr + rows, mask=row_in, other=1.0)
    b = tl.load(b_ptr + cols, mask=col_in, other=1.0)
    at = rows.to(tl.int64)[:, None] * row_stride + cols[None, :]
    inside = row_in[:, None] & col_in[None, :]
    s = tl.load(s_ptr + at, mask=inside, other=0.0)
    tl.store(s_ptr + at, s * (a[:, None] * b[None, :]), mask=inside)


@functools.cache
def _kernel():
    """:func:`scale_tile` as a Triton kernel (interpreted on the CPU where ``TRITON_INTERPRET=1``
    was set before triton was imported: the tests without a GPU)."""
    return triton.jit(scale_tile, do_not_specialize=["n_rows"])


def scale_by_pairs(s: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``s *= a[:, None] * b[None, :]`` in place, in one pass: ``s`` a float32 block whose
    columns are adjacent (a block of a product's output, or rows of one), ``a`` and ``b``
    float32 with one entry per row and per column of it. Returns ``s``."""
    n_rows, n_cols = s.shape
    if s.stride(1) != 1 and n_cols > 1:
        raise ValueError("scale_by_pairs needs a block whose columns are adjacent")
    if a.shape != (n_rows,) or b.shape != (n_cols,):
        raise ValueError(
            f"scale_by_pairs: factors of shape ({n_rows},) and ({n_cols},) are needed, got "
            f"{tuple(a.shape)} and {tuple(b.shape)}"
        )
    if n_rows and n_cols:
        grid = (-(-n_rows // ROWS), -(-n_cols // COLUMNS))
        _kernel()[grid](
            s, a.contiguous(), b.contiguous(), n_rows, n_cols, s.stride(0),
            ROWS=ROWS, COLUMNS=COLUMNS,
        )
    return s
