"""Which pass a ranking takes and its blocks: :func:`choose_layout`, one place a test can ask.

A set ranked against itself (same source) takes the symmetric pass, half of the product, where
its query blocks' counting states may all live to the end (:func:`keeps_states`), in square
blocks as wide as the budget allows beside the products it keeps (:func:`_symmetric_block`,
:func:`kept_at_most`); any other ranking the one-sided pass (``plan.block_sizes``). Two sets
ranked against each other both ways (image-text) take one two-sided pass in blocks of their own
(:func:`two_way_blocks`). ``schedule.plan_of`` gives the layout of a ranking without ranking.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import repeat
from retrieval_metrics.functional.ranking.engine.direction import (
    Direction,
    RankingInput,
    pairs_with_relevant,
)
from retrieval_metrics.functional.ranking.engine.plan import (
    PRODUCT_COLUMNS,
    balanced,
    block_sizes,
    cache_room,
    checked_block_size,
    halved,
    narrowed,
    pass_budget,
    square_block,
)
from retrieval_metrics.functional.ranking.engine.product_shape import (
    least_product_columns,
    least_square_block,
)
from retrieval_metrics.functional.ranking.relevance import Relevance


@dataclass(frozen=True)
class Layout:
    """The pass a ranking takes and its blocks: ``symmetric`` (square blocks of ``block_g``)
    or one-sided (query blocks of ``block_q`` rows, gallery blocks of ``block_g`` items), and
    ``budget``, what the pass may use (the memory budget less the prepared matrices)."""

    symmetric: bool
    block_q: int
    block_g: int
    budget: int


def choose_layout(
    side: Direction, inputs: RankingInput, dim: int, *, symmetric: bool,
    gallery_copied: bool = True,
) -> Layout:
    """The symmetric pass for a same-source (``symmetric``) dot product of square blocks, in
    one processing order, whose query blocks' counting states fit a quarter of the budget (they
    all live to the end); else the one-sided pass. ``dim``: the width of the prepared matrices.
    The budget counts the prepared matrices first: the gallery's alone for the symmetric pass
    (one matrix serves both sides), the queries' and the gallery's for the one-sided one (the
    queries' alone where the gallery is read in blocks from its batches: not
    ``gallery_copied``). The reference path (``reference.py``) takes the same layout."""
    options = side.options
    block_size, memory_budget = options.block_size, options.budget_on(side.device)
    elem = torch.finfo(side.dtype).bits // 8
    num_q, num_g = side.order.numel(), side.num_g
    if block_size is not None:
        checked_block_size(block_size)
    # the gallery before the ignore label removed any
    num_gallery = inputs.gallery.shape[0]
    if (
        symmetric
        and num_q
        and one_product(options.similarity, block_size, inputs.relevance, num_gallery)
        and _same_key(inputs.query_key, inputs.gallery_key)
    ):
        budget = pass_budget(memory_budget, num_g * dim * elem)
        # (the queries' matrix, which the one-sided pass would prepare beside the gallery's)
        spared = num_q * dim * elem
        if block_size is not None:
            block: int | None = block_size[1]
            if not keeps_states(side.state_bytes(block_size[1], elem), side.pair_state_bytes(),
                                budget, spared):
                block = None
        else:
            block = _symmetric_block(side, elem, budget, spared)
            if block is not None:
                # (square products of a few columns may be computed otherwise: see
                # product_shape)
                block = max(block, least_square_block(dim, side.dtype, side.device))
        if block is not None:
            return Layout(True, block, block, budget)
    budget = pass_budget(memory_budget, (num_q + num_g * gallery_copied) * dim * elem)
    if block_size is not None:
        return Layout(False, *block_size, budget)
    block_q, block_g = block_sizes(
        num_q, num_g, dim, side.max_relevant, elem, budget, side.counter.block_caps()
    )
    # (a product of few columns may be computed otherwise, e.g. its sum split between threads:
    # a small gallery's block widened to the columns the host's BLAS computes alike, which its
    # products would otherwise take as zero columns: product_shape.product_columns)
    block_g = max(block_g, least_product_columns(dim, side.dtype, side.device))
    return Layout(False, block_q, block_g, budget)


def _symmetric_block(side: Direction, elem: int, budget: int, spared: int) -> int | None:
    """The square block of the symmetric pass, or None where its states do not fit the budget
    (:func:`keeps_states`, with the ``spared`` matrix): the widest whose products kept between
    reading and counting (see :func:`kept_at_most`) fit beside the states, or, where none down
    to half the widest block does, the widest whose states fit (a product then computed again
    where it cannot be kept: narrower still, the counting steps of four times as many block
    pairs cost more)."""
    num = side.num_g
    widest = square_block(num, elem, budget, side.counter.block_caps())
    narrowest = max(PRODUCT_COLUMNS, widest // 2)
    block, fallback = widest, None
    pairs = side.pair_state_bytes()
    while True:
        rows = side.state_bytes(block, elem)
        if keeps_states(rows, pairs, budget, spared):
            fallback = block if fallback is None else fallback
            room = two_sided_room(budget, rows, pairs)
            kept = kept_at_most(symmetric_needs(side, block), -(-num // block))
            if kept <= cache_room(room, block, side.dtype):
                return block
        narrower = balanced(num, narrowed(block))
        if narrower < narrowest or narrower >= block:
            return fallback
        block = narrower


def symmetric_order(num_blocks: int) -> Iterator[tuple[int, int]]:
    """The block pairs ``(i, j)``, ``i <= j``, in the order the symmetric pass computes them:
    by column j, each column from its diagonal pair up. Block j starts (reads its relevant
    scores) at its diagonal pair, reading (j, j), counted at once, and the pairs after it that
    hold its relevant items ((j, j + 1) for a class across the blocks' border), kept until column
    j + 1 counts them right after its own diagonal: with labels grouped, about two kept products
    at a time."""
    for j in range(num_blocks):
        for i in range(j, -1, -1):
            yield i, j


def symmetric_needs(side: Direction, block: int) -> list[set[tuple[int, int]]]:
    """Per query block of the symmetric pass in square blocks of ``block``, the block pairs
    that hold its relevant items (as :meth:`QueryBlock.relevant_blocks` finds them)."""
    num_blocks = -(-side.num_g // block)
    position = torch.empty_like(side.order)
    position[side.order] = torch.arange(side.order.numel())
    rows = repeat(position // block, side.rel_ptr.diff())
    columns = side.rel_index // block
    keys = torch.unique(rows * num_blocks + columns).tolist()
    needs: list[set[tuple[int, int]]] = [set() for _ in range(num_blocks)]
    for key in keys:
        i, j = divmod(key, num_blocks)
        needs[i].add((min(i, j), max(i, j)))
    return needs


def kept_at_most(needs: list[set[tuple[int, int]]], num_blocks: int) -> int:
    """The most products the symmetric pass holds at once between reading a block's relevant
    scores and counting them, for the ``needs`` of :func:`symmetric_needs` (the pair being
    counted not included: it is read into the block being counted)."""
    read: set[tuple[int, int]] = set()
    kept: set[tuple[int, int]] = set()
    started: set[int] = set()
    most = 0
    for i, j in symmetric_order(num_blocks):
        for k in (i, j):
            if k not in started:
                started.add(k)
                fresh = needs[k] - read
                read |= fresh
                kept |= fresh - {(i, j)}
        most = max(most, len(kept))
        kept.discard((i, j))
    return most


def two_way_blocks(
    sides: list[Direction],
    squares: tuple[int, int] | None,
    budget: int,
    dtype: torch.dtype,
    width: int,
) -> tuple[int, int]:
    """The blocks of the two sets of a two-way pass (the rows' and the columns'): the square
    ``squares`` where the caller set them, else each set in even blocks of its own, none wider
    than :func:`two_way_block`: 1,000 images against 5,000 captions are not padded to the
    captions' block. None narrower than the host's BLAS computes alike (rows ``width`` wide:
    ``product_shape.least_square_block``)."""
    if squares is not None:
        return squares[0], squares[0]
    block = two_way_block(sides, budget, dtype)
    num_a, num_b = (side.order.numel() for side in sides)
    least = least_square_block(width, dtype, sides[0].device)
    return max(balanced(num_a, block), least), max(balanced(num_b, block), least)


def two_way_block(sides: list[Direction], budget: int, dtype: torch.dtype) -> int:
    """The square block of the two-way pass from the pass's ``budget``: each block of one side
    needs the relevant scores of many pairs before it counts its first, so half-size blocks when
    that keeps every such product for its counting."""
    elem = torch.finfo(dtype).bits // 8
    larger = max(side.order.numel() for side in sides)
    block = square_block(larger, elem, budget, sides[0].counter.block_caps())
    half = halved(block)
    if (
        half >= 512
        and pairs_with_relevant(sides, block) > cache_room(budget, block, dtype)
        and pairs_with_relevant(sides, half) <= cache_room(budget, half, dtype)
    ):
        block = half
    return block


def keeps_states(row_bytes: int, pair_bytes: int, budget: int, spared: int = 0) -> bool:
    """Whether a two-sided pass may keep every query block's counting state to the end: the
    part that grows with rows and their padding (``row_bytes``) within a quarter of the pass's
    ``budget``, or, with the pair part, within what the pass spares against the one-sided pass
    (``spared``: the symmetric pass's second prepared matrix, which it never makes); the part
    that grows with the relevant pairs (``pair_bytes``, of the order of the outputs) within the
    whole of it.

    The spared matrix: 60,502 x 512 float32 same source (SOP's size at a common width) in the
    default budget left a pass 38.5 MiB beside its 118 MiB of unit rows, a quarter of which
    its 13 MiB of row states overfilled; the one-sided pass it took instead made the queries'
    118 MiB matrix too and all of the product, 14.4 s and 411 MiB above the start on a 2-core
    Xeon, where the symmetric pass took 7.6 s and 310 MiB, the same values.

    The pair part is not charged to the quarter: it is of the size of the rank table the
    ranking returns, and counted against the quarter it made the choice between half and all of
    the product hang on the classes' sizes (SOP-sized data, classes of 1 to 15: 19 MiB of pair
    state against a quarter of 97 MiB). Bounded by the whole budget, a ranking with millions of
    relevant pairs still takes the one-sided pass, one query block's state at a time.
    """
    if pair_bytes > budget:
        return False
    return row_bytes <= budget // 4 or row_bytes + pair_bytes <= spared


def two_sided_room(budget: int, row_bytes: int, pair_bytes: int) -> int:
    """What a two-sided pass's kept products and counting may use (the kernels take a quarter
    of it per stage): the ``budget`` less the states it keeps (their row part twice, see
    ``plan``), and never less than a quarter of it."""
    return max(budget // 4, budget - 2 * row_bytes - pair_bytes)


def one_product(
    similarity: str, block_size: tuple[int, int] | None, rel: Relevance, num_gallery: int
) -> bool:
    """Whether one score block can serve both of its sides: a dot product of the same matrices
    (euclidean scores 2 q.g - |g|^2 differ by side), square blocks, every gallery item kept."""
    return (
        similarity in ("cosine", "dot")
        and (block_size is None or block_size[0] == block_size[1])
        and rel.gallery_index.numel() == num_gallery
    )


def _same_key(first: Tensor | None, second: Tensor | None) -> bool:
    if first is None or second is None:
        return first is None and second is None
    return first is second or torch.equal(first.cpu(), second.cpu())
