"""Block sizes from the memory budget: how many queries and gallery items one block holds.

The gallery is cut into blocks of whole 64-item segments (:data:`SEGMENT`), and of whole
:data:`PRODUCT_COLUMNS` where the budget allows (every column of a product then rounds alike).
The one-sided pass takes its query and gallery blocks from :func:`block_sizes`, the two-sided
pass its square blocks from :func:`square_block`, and how many of those products it may keep
from :func:`cache_room`.

What ``memory_budget`` covers: every allocation of a ranking beyond its inputs and its outputs
(the relevance sets, and one above, tied and listed entry per relevant pair: O(relevant pairs),
what the rank table is made of). Shared out as follows:

* the prepared matrices (the unit rows of cosine: a copy of the embeddings) come first
  (:func:`pass_budget`); the pass gets the rest;
* the one-sided pass: its query block's state (relevant scores, histograms, per-pair indices) up
  to half of that (:func:`block_sizes`), kept score blocks a quarter, the counting's transients a
  quarter (the pass's ``Pass.budget`` is half of it: the counting kernels take a quarter of
  theirs for each of their two stages);
* the two-sided pass: every query block's state twice (they all live to the end), kept and
  transposed score blocks half of the rest (:func:`cache_room`), the counting the other half.
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.ranking.engine.kernels import SEGMENT

#: Gallery blocks (and the square blocks) are whole multiples of this many items wherever the
#: budget allows blocks that wide. A BLAS kernel computes a product in panels of a few columns
#: and rows, and a last, narrower panel of another kernel, which rounds differently: MKL's
#: double-precision kernel on AVX2 takes 12 columns a panel, so in a block of 64 columns the last
#: 4 scored an item otherwise than the first 60, and identical documents in a block's last
#: columns stopped tying with their copies elsewhere (the values then depended on where items
#: fell). 192 is a multiple of the segment (64) and of the panel widths of 4, 6, 8, 12, 16, 24,
#: 32, 48 and 96 columns: no panel is left narrower.
PRODUCT_COLUMNS = 192
#: The largest blocks of the CPU's counting (``counters.CpuCounter``): (queries, gallery items)
#: of the one-sided pass, and the square block of the symmetric pass. The CPU keeps a score
#: block in its caches (3072 gallery items, up to 1024 queries; a narrower gallery block takes
#: as many times more queries, see :func:`block_sizes`), and each block costs Python steps
#: besides: once the count shared a block's rows over torch's threads (threads.py), 16 panels
#: beat 11 on a 2-core Intel Xeon (1,000,000 x 384, 1,000 queries, BEIR's measures: 0.46 s
#: besides the products against 0.51 s for a strong model, 0.39 s against 0.43 s for a middling
#: one; 22 panels 0.44 s for the strong one, 33 panels 0.57 s; 2,000,000 x 768
#: float16 from disk 1.54 s against 1.58-2.01 s; without a protocol 0.56 s against 0.58 s).
#: The symmetric pass also counts each block down its columns, a strided read that leaves the
#: caches sooner: 1344 (7 panels) measured best on 2 cores (a 20,000 x 128 set 0.45 s against
#: 0.71 s at 2112 and 0.44 s at 960; SOP's 60,502 x 128 4.3 s against 5.1 s at 2112 and 5.5 s
#: at 960, whose four times as many block pairs cost Python steps).
CPU_BLOCK_CAPS = (1024, 16 * PRODUCT_COLUMNS, 7 * PRODUCT_COLUMNS)
#: An accelerator's (``counters.TorchDeviceCounter``): no cache to fit, but a fixed cost per
#: block (a launch of each of its kernels, Python's steps), so the memory budget alone sets the
#: blocks: 32,768 queries, 262,080 gallery items (an 8.8M corpus in 34 blocks, not 2,879 of
#: the CPU's 3,072) and square blocks of 32,640 (SOP's 60,502 items in 2 x 2).
DEVICE_BLOCK_CAPS = (2**15, 1365 * PRODUCT_COLUMNS, 170 * PRODUCT_COLUMNS)
#: Query blocks do not shrink below this many rows while a narrower gallery block would fit
#: the budget instead (rows of thousands of dimensions: see :func:`block_sizes`).
WIDE_ROWS_QUERIES = 256


def whole_blocks(n: int) -> int:
    """The width of a block that holds ``n`` items: whole :data:`PRODUCT_COLUMNS`."""
    return max(PRODUCT_COLUMNS, -(-n // PRODUCT_COLUMNS) * PRODUCT_COLUMNS)


def halved(block: int) -> int:
    """About half of ``block``, in whole :data:`PRODUCT_COLUMNS` while that is possible, then
    in whole segments (a budget too small for wider blocks)."""
    if block > PRODUCT_COLUMNS:
        return max(PRODUCT_COLUMNS, block // 2 // PRODUCT_COLUMNS * PRODUCT_COLUMNS)
    return max(SEGMENT, block // 2 // SEGMENT * SEGMENT)


def narrowed(block: int) -> int:
    """The next width below ``block``: one :data:`PRODUCT_COLUMNS` less while that is possible
    (a budget a little short of the widest blocks keeps nearly their width), then half, in whole
    segments (a budget too small for even one panel)."""
    if block > PRODUCT_COLUMNS:
        return block - PRODUCT_COLUMNS
    return max(SEGMENT, block // 2 // SEGMENT * SEGMENT)


#: The padding :func:`balanced` lets a gallery's blocks add, as a share of its items, before it
#: tries a block or two more (a padded column is multiplied as any other).
PADDED_AT_MOST = 1 / 32


def balanced(num: int, block: int) -> int:
    """The width of the blocks that cover ``num`` items in as many blocks as ``block`` needs,
    all of one width: every block, the last included, is computed at the shape of the others
    (the last is padded), so a width that divides the items evenly pads at most one panel per
    block instead of most of a last block (4,500 gallery items: two blocks of 2,304, not of
    3,072), and a block or two more where those pad less (PADDED_AT_MOST). Whole
    :data:`PRODUCT_COLUMNS` where ``block`` is, else whole segments."""
    if num <= block:
        return min(block, whole_blocks(num)) if block % PRODUCT_COLUMNS == 0 else block
    count = -(-num // block)
    unit = PRODUCT_COLUMNS if block % PRODUCT_COLUMNS == 0 else SEGMENT

    def width(blocks: int) -> int:
        return min(block, -(-num // (blocks * unit)) * unit)

    # Each block pads up to a unit less one: where that is more than PADDED_AT_MOST of the items,
    # a block or two more may pad less (5,000 items: two blocks of 2,688 pad 376 columns, 7.5%
    # more products; three of 1,728, 184).
    tries = range(count, count + 3)
    fitting = [c for c in tries if c * width(c) - num <= num * PADDED_AT_MOST]
    return width(fitting[0] if fitting else min(tries, key=lambda c: c * width(c)))


def _per_pair_bytes(elem: int) -> int:
    """Scratch per (query, relevant item) pair of a query block, all live at once at worst.

    About eight score-sized copies (relevant scores, sorted, masked, the depth candidates) and
    sixteen int64 (sort permutation, the two histograms, above and tied in sorted and in input
    order, the pair's row, column, position, gallery index and block, and their transients).
    """
    return 8 * elem + 16 * 8


def block_sizes(
    num_q: int,
    num_g: int,
    dim: int,
    max_relevant: int,
    elem: int,
    memory_budget: int,
    caps: tuple[int, int, int] = CPU_BLOCK_CAPS,
) -> tuple[int, int]:
    """Query and gallery block sizes whose scratch fits in ``memory_budget`` and the counting
    backend's ``caps`` (the CPU's caches: :data:`CPU_BLOCK_CAPS`)."""
    # On the CPU a gallery block of 3072 keeps the score block in cache for typical query
    # blocks; the query block is the largest power of two (up to the cap's area of
    # cap_q x cap_g scores) whose scratch fits.
    cap_q, cap_g, _ = caps
    block_g = min(cap_g, whole_blocks(num_g))
    # A narrow gallery leaves the score block small: more query rows fill the same area (the
    # cache's bound on the CPU), in as many times fewer blocks, each a fixed cost of Python
    # steps (400,000 queries against 10 items: 391 blocks of 1,024 took 7x the product).
    # A query's scores do not depend on its block's row count (a multiple of PRODUCT_ROWS:
    # what the last, shorter block of every ranking relies on too).
    block_q = cap_q
    while 2 * block_q * block_g <= cap_q * cap_g:
        block_q *= 2
    while block_q > 8:
        # Score block (x2 for a cached relevant block and candidate copies), relevant scores,
        # two int64 histograms and the padded gallery block.
        scratch = (
            3 * block_q * block_g * elem
            + block_q * (max_relevant + 1) * (elem + 16 + 8)
            + block_g * (dim + 1) * elem
        )
        if scratch <= memory_budget // 2:
            break
        if block_g > max(PRODUCT_COLUMNS, cap_g // 2):
            # A budget a little short of the widest blocks: a narrower gallery block first (more
            # blocks, each a few Python steps), not half the queries (the whole gallery read
            # again for each query block: 1,000 queries of 769 dimensions in 64 MiB stay one
            # block, against gallery blocks of 1,728 items, where 512 of them took blocks of
            # 2,880).
            block_g = narrowed(block_g)
            continue
        if (
            block_q <= WIDE_ROWS_QUERIES and block_g > PRODUCT_COLUMNS
            and block_g * (dim + 1) * elem > memory_budget // 4
        ):
            # Wide rows (thousands of dimensions): the gallery block itself fills the budget.
            # A narrower one, not fewer queries: a product of a few query rows reads the whole
            # gallery block for each few queries (1,000 x 20,000 x 4,096 in blocks of 8 queries
            # took 3.8x one product; of 256, about 1.3x).
            block_g = halved(block_g)
            continue
        block_q //= 2
    while block_g > SEGMENT and 3 * block_q * block_g * elem > memory_budget // 2:
        # Whole panels (then segments) only: a gallery of 700 starts at 768.
        block_g = halved(block_g)
    # Thousands of relevant items per query: the per-pair scratch, counted in full, decides.
    # (Only then: ordinary data keeps the cache's blocks.)
    while block_q > 1 and block_q * (max_relevant + 1) * _per_pair_bytes(elem) > memory_budget // 2:
        block_q //= 2
    if max_relevant > block_g // 4:
        # Each gallery block costs every row a search of its relevant scores in the block's
        # sorted scores: with thousands of relevant items per query, fewer and wider gallery
        # blocks cost less (the query blocks are then short, so the score block stays small).
        wide = whole_blocks(num_g)
        while wide > block_g and (
            3 * min(block_q, num_q) * wide * elem + wide * (dim + 1) * elem
        ) > memory_budget // 2:  # (its score blocks and the gallery block itself)
            wide = max(block_g, halved(wide))
        block_g = max(block_g, wide)
    return max(1, min(block_q, num_q)), balanced(num_g, block_g)


def checked_block_size(block_size: tuple[int, int]) -> tuple[int, int]:
    pair = isinstance(block_size, (tuple, list)) and len(block_size) == 2
    if not pair or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in block_size
    ):
        raise ValueError(
            "`block_size` must be a pair of ints (queries, gallery items), e.g. (256, 4096), "
            f"got {block_size!r}"
        )
    block_q, block_g = block_size
    if block_q < 1 or block_g < SEGMENT or block_g % SEGMENT:
        raise ValueError(
            f"`block_size` must be (queries >= 1, gallery items a multiple of {SEGMENT}), "
            f"got {block_size!r}"
        )
    return block_q, block_g


def square_block(
    num: int, elem: int, memory_budget: int, caps: tuple[int, int, int] = CPU_BLOCK_CAPS
) -> int:
    """The block of the symmetric pass: a few score blocks of ``block x block`` fit the budget
    and the counting backend's ``caps`` (the CPU's cache bound: :data:`CPU_BLOCK_CAPS`)."""
    block = min(caps[2], whole_blocks(num))
    while block > SEGMENT and 4 * block * block * elem > memory_budget // 2:
        block = narrowed(block)
    return balanced(num, block)


def pass_budget(memory_budget: int, prepared: int) -> int:
    """What a pass may use once the prepared matrices (``prepared`` bytes) are counted: the rest
    of ``memory_budget``, and never less than a quarter of it (embeddings too large for the
    budget exceed it by their copy)."""
    return max(memory_budget // 4, memory_budget - prepared)


def cache_room(room: int, block: int, dtype: torch.dtype, columns: int | None = None) -> int:
    """How many score blocks (``block x columns``, square by default) the two-sided pass keeps
    between reading and counting: half of ``room`` (the budget less the query blocks' states)
    less the block being counted and its transposed copy; the counting's transients take the
    other half."""
    elem = torch.finfo(dtype).bits // 8
    return max(0, (room // 2) // (block * (block if columns is None else columns) * elem) - 2)


# Query blocks are padded to a multiple of this many rows for the product: BLAS computes
# products of a few rows with other kernels (gemv for one row), and a last, shorter panel of rows
# with another kernel again (MKL's double precision on AVX2: 4 rows a panel), whose roundings
# differ; a score must not depend on the size of the block its query fell in, nor on which rows
# of its block are still ranked (QueryBlock.drop_finished). Where a BLAS computes products of
# more rows than that otherwise, more: ``product_shape.least_product_rows``.
PRODUCT_ROWS = 8
def product_row_count(n: int, least: int = PRODUCT_ROWS) -> int:
    """The rows of the product of ``n`` query rows: a whole multiple of :data:`PRODUCT_ROWS`,
    and at least ``least`` (``product_shape.least_product_rows``)."""
    return max(least, -(-n // PRODUCT_ROWS) * PRODUCT_ROWS)


def product_rows(x: Tensor, least: int = PRODUCT_ROWS) -> Tensor:
    """The query rows ``x`` as one product takes them: zero rows added up to
    :func:`product_row_count`."""
    rows = product_row_count(x.shape[0], least)
    if rows == x.shape[0]:
        return x
    return torch.cat([x, x.new_zeros(rows - x.shape[0], x.shape[1])])
