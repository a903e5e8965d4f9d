"""How many rows a product must hold for the host's BLAS to compute each row alike
(:func:`least_product_rows`): a BLAS picks its kernels, and how it shares a product between
threads, by the product's shape, so the same row may round otherwise in a product of few rows
than in one of many. Asked of the BLAS itself, once per shape in a process, as
``one_sided.columns_alike`` asks it of columns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from retrieval_metrics.functional.ranking.engine.counters import multiplied_by_host_blas
from retrieval_metrics.functional.ranking.engine.fp32 import in_full_fp32
from retrieval_metrics.functional.ranking.engine.plan import (
    PRODUCT_COLUMNS,
    PRODUCT_ROWS,
    whole_blocks,
)

__all__ = [
    "PROBE_COLUMNS",
    "PROBE_ROWS",
    "least_product_columns",
    "least_product_rows",
    "least_square_block",
    "product_columns",
    "square_product_side",
]

#: The probe of :func:`least_product_rows` compares with a product of this many rows (a BLAS
#: computes a product of many rows alike however many), at most PROBE_COLUMNS wide
PROBE_ROWS = 1024
PROBE_COLUMNS = 4096


def least_product_rows(
    rows: int, columns: int, width: int, dtype: torch.dtype, device: torch.device
) -> int:
    """The fewest rows (a multiple of :data:`PRODUCT_ROWS`) a product of ``columns`` gallery
    columns, ``width`` wide, is given so that it computes each row as a product of many rows
    (:data:`PROBE_ROWS`) does. A query's scores then do not depend on how many rows are
    multiplied with it: the last, shorter block; the rows still ranked once others finish
    (``QueryBlock.drop_finished``); a run of 1 query or of 50 (``top_k``) beside the ranking;
    a process of one thread (a DDP worker's) beside one of many. ``rows`` (the pass's block) is
    not part of the answer: every pass with these columns gets the same.

    A multiple of 8 rows is not enough everywhere. MKL on an Intel Xeon (AVX-512) computes a
    product of 8 rows (768 wide, one thread) with other kernels than one of 16 or more, and with
    two threads it splits the inner dimension between them for products of up to about
    ``width / 8`` rows (1,024 wide: 128 rows; 4,096 wide: 512, that many included), which
    rounds otherwise: a query scored a unit in the last place apart alone and among 50 others,
    and a copy of a document could stop tying with it once the rows still ranked shrank. Which
    shapes a BLAS computes alike is its own affair, so it is asked: products of fewer and fewer
    random rows against one of :data:`PROBE_ROWS` rows, at the block's own width (a search by
    halves, once per width, columns, dtype and thread count in a process: 0.1 s at 768
    dimensions, about 1 s at 4,096 on a 2-core host; where 8 rows compute alike, as on the AMD
    EPYC this project was first built on, one product of the reference's shape). A device is
    not probed (each probe would wait on it, and its products are not cut by finished rows): 8.

    >>> least_product_rows(8, 2112, 64, torch.float32, torch.device("cuda"))
    8
    """
    if not multiplied_by_host_blas(device):
        return PRODUCT_ROWS
    return _probed_rows(min(columns, PROBE_COLUMNS), width, dtype, torch.get_num_threads())


@functools.cache
@in_full_fp32  # (what the passes compute: ranks must not depend on TF32)
def _probed_rows(columns: int, width: int, dtype: torch.dtype, threads: int) -> int:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(PROBE_ROWS, width, generator=gen).to(dtype)
    g = torch.randn(max(columns, 1), width, generator=gen).to(dtype)
    # (the engine's form: query rows times a transposed gallery block, out= a buffer)
    reference = torch.mm(x, g.T)
    buffer = torch.empty_like(reference)

    def alike(n: int) -> bool:
        return torch.equal(torch.mm(x[:n], g.T, out=buffer[:n]), reference[:n])

    return _least_alike(alike, PRODUCT_ROWS, PROBE_ROWS)


def _least_alike(alike: Callable[[int], bool], unit: int, most: int) -> int:
    """The fewest whole ``unit`` (rows or columns, up to ``most``, the reference's, which is
    alike) that ``alike`` says compute as the reference: one and two units first (most hosts),
    else a search by halves."""
    if alike(unit) and alike(2 * unit):
        return unit
    low, high = 2, most // unit  # in units; high is alike
    while low < high:
        middle = (low + high) // 2
        if alike(middle * unit):
            high = middle
        else:
            low = middle + 1
    least = low * unit
    # (the search takes a shape alike to stay alike when larger: checked beside it)
    if least + unit <= most and not alike(least + unit):
        return most
    return least


def least_product_columns(width: int, dtype: torch.dtype, device: torch.device) -> int:
    """The fewest gallery columns (whole :data:`~plan.PRODUCT_COLUMNS`) a product of rows
    ``width`` wide is given so that it computes each column as a product of many columns does
    (:data:`PROBE_ROWS` rows, twice as many columns), where whole panels are not enough; 0
    where they are (the gallery blocks keep the widths the plan gives them) and on a device
    (not probed: its blocks are wide).

    MKL splits the sum of a product of few columns between threads as it does one of few rows
    (on an Intel Xeon with two threads, up to about ``width / 8`` columns: 4,096-d, 512), so a
    gallery of a few hundred items at thousands of dimensions ranked otherwise with one thread
    than with two. The one-sided pass, ``top_k`` and the PML compat kNN pad their gallery
    blocks to at least this many columns; then :func:`least_product_rows` is asked at that
    width. Once per width, dtype and thread count in a process; where 192 columns compute
    alike (AMD hosts, or narrow rows), one product of the reference's shape.

    >>> least_product_columns(64, torch.float32, torch.device("cuda"))
    0
    """
    if not multiplied_by_host_blas(device):
        return 0
    least = _probed_columns(width, dtype, torch.get_num_threads())
    return 0 if least <= PRODUCT_COLUMNS else least


@functools.cache
@in_full_fp32
def _probed_columns(width: int, dtype: torch.dtype, threads: int) -> int:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(PROBE_ROWS, width, generator=gen).to(dtype)
    g = torch.randn(2 * PROBE_ROWS, width, generator=gen).to(dtype)
    reference = torch.mm(x, g.T)

    def alike(n: int) -> bool:
        return torch.equal(torch.mm(x, g[:n].T), reference[:, :n])

    return _least_alike(alike, PRODUCT_COLUMNS, g.shape[0] // PRODUCT_COLUMNS * PRODUCT_COLUMNS)


def least_square_block(width: int, dtype: torch.dtype, device: torch.device) -> int:
    """The narrowest square block (whole :data:`~plan.PRODUCT_COLUMNS`) whose products, rows
    ``width`` wide, the host's BLAS computes as it computes many rows and columns: at least
    :func:`least_product_columns`, and at least :func:`least_product_rows` at that width (a
    product of 192 rows by 192 columns of 1,024-d rows is split between two threads where one of
    192 rows by 2,112 columns is not). The symmetric and the two-way passes multiply blocks of
    one set by blocks of the other, as wide as they are tall. 0 where whole panels are enough
    (the blocks keep the widths the plan gives them) and on a device (not probed).

    >>> least_square_block(64, torch.float32, torch.device("cuda"))
    0
    """
    if not multiplied_by_host_blas(device):
        return 0
    side = least_product_columns(width, dtype, device) or PRODUCT_COLUMNS
    while True:
        rows = least_product_rows(side, side, width, dtype, device)
        if rows <= side:
            break
        side = whole_blocks(rows)
    return 0 if side <= PRODUCT_COLUMNS else side


def product_columns(block: int, width: int, dtype: torch.dtype, device: torch.device) -> int:
    """The columns of the product of a gallery block of ``block`` items (rows ``width`` wide),
    zero columns added after them where needed: whole :data:`~plan.PRODUCT_COLUMNS`, and at
    least :func:`least_product_columns`. The plan's blocks are that already; a block set by
    ``block_size``, or narrowed below one panel by a very small budget, is multiplied as
    such a product, then cut to its items: an item scores alike whatever block holds it.

    >>> product_columns(64, 64, torch.float32, torch.device("cpu"))
    192
    >>> product_columns(2112, 64, torch.float32, torch.device("cpu"))
    2112
    """
    return max(whole_blocks(block), least_product_columns(width, dtype, device))


def square_product_side(block: int, width: int, dtype: torch.dtype, device: torch.device) -> int:
    """The side of the square product of two blocks of ``block`` rows each (``width`` wide)
    in the symmetric and two-way passes, zero rows and columns added where needed: whole
    :data:`~plan.PRODUCT_COLUMNS`, and at least :func:`least_square_block` (see
    :func:`product_columns`).

    >>> square_product_side(128, 64, torch.float32, torch.device("cpu"))
    192
    """
    return max(whole_blocks(block), least_square_block(width, dtype, device))
