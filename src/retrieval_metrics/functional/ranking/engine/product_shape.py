"""How many rows a product must hold for the host's BLAS to compute each row alike
(:func:`least_product_rows`): a BLAS picks its kernels, and how it shares a product between
threads, by the product's shape, so the same row may round otherwise in a product of few rows
than in one of many. Asked of the BLAS itself, once per shape in a process, as
``one_sided.columns_alike`` asks it of columns.
"""

from __future__ import annotations

import functools

import torch

from retrieval_metrics.functional.ranking.engine.counters import multiplied_by_host_blas
from retrieval_metrics.functional.ranking.engine.plan import PRODUCT_ROWS

__all__ = ["PROBE_COLUMNS", "PROBE_ROWS", "least_product_rows"]

#: The probe of :func:`least_product_rows` compares with a product of this many rows (a BLAS
#: computes a product of many rows alike however many), at most PROBE_COLUMNS wide
PROBE_ROWS = 2048
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
def _probed_rows(columns: int, width: int, dtype: torch.dtype, threads: int) -> int:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(PROBE_ROWS, width, generator=gen, dtype=torch.float64).to(dtype)
    g = torch.randn(max(columns, 1), width, generator=gen, dtype=torch.float64).to(dtype)
    # (the engine's form: query rows times a transposed gallery block, out= a buffer)
    reference = torch.mm(x, g.T)
    buffer = torch.empty_like(reference)

    def alike(n: int) -> bool:
        return torch.equal(torch.mm(x[:n], g.T, out=buffer[:n]), reference[:n])

    if alike(PRODUCT_ROWS) and alike(2 * PRODUCT_ROWS):
        return PRODUCT_ROWS
    low, high = 2, PROBE_ROWS // PRODUCT_ROWS  # in units of PRODUCT_ROWS; high is alike
    while low < high:
        middle = (low + high) // 2
        if alike(middle * PRODUCT_ROWS):
            high = middle
        else:
            low = middle + 1
    least = low * PRODUCT_ROWS
    # (the search takes a shape alike to stay alike with more rows: checked beside it)
    if least < PROBE_ROWS and not alike(least + PRODUCT_ROWS):
        return PROBE_ROWS
    return least
