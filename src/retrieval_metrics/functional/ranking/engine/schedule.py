"""The orders of block products: which score blocks are computed, and who counts them.

:func:`blocked_table`, :func:`blocked_scores` and :func:`blocked_counts` (the rank table, the
relevant pairs' scores, the counts against given scores) share one layout step:
:class:`Direction`, block sizes (:func:`choose_layout`), the matrices in processing order, then a
pass: :func:`two_sided_pass` when one product can serve the queries of both of its sides (a set
ranked against itself), else :func:`_one_sided_pass`, each block of queries against every gallery
block in turn.
:func:`two_way_ranking` lays out both directions of two sets ranked against each other
(``rank_two_ways``) for one two-sided pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import flat_nonzero, repeat
from retrieval_metrics.functional.ranking.engine.counting import THETA_EVERY, Pass, QueryBlock
from retrieval_metrics.functional.ranking.engine.direction import (
    Direction,
    Mode,
    RankingInput,
    pairs_with_relevant,
)
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.engine.fp32 import in_full_fp32
from retrieval_metrics.functional.ranking.engine.kernels import column_segments, segment_maxima
from retrieval_metrics.functional.ranking.engine.plan import (
    PRODUCT_COLUMNS,
    SEGMENT,
    balanced,
    block_sizes,
    cache_room,
    checked_block_size,
    halved,
    narrowed,
    pass_budget,
    square_block,
)
from retrieval_metrics.functional.ranking.engine.similarity import (
    gallery_in_blocks,
    prepare,
    prepare_query,
    score_dtype,
)
from retrieval_metrics.functional.ranking.relevance import Relevance
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.functional.table import RankTable

# Query blocks are padded to a multiple of this many rows for the product: BLAS computes
# products of a few rows with other kernels (gemv for one row), and a last, shorter panel of rows
# with another kernel again (MKL's double precision on AVX2: 4 rows a panel), whose roundings
# differ; a score must not depend on the size of the block its query fell in, nor on which rows
# of its block are still ranked (QueryBlock.drop_finished).
PRODUCT_ROWS = 8


def product_row_count(n: int) -> int:
    """The rows of the product of ``n`` query rows: a whole multiple of :data:`PRODUCT_ROWS`."""
    return max(PRODUCT_ROWS, -(-n // PRODUCT_ROWS) * PRODUCT_ROWS)


def product_rows(x: Tensor) -> Tensor:
    """The query rows ``x`` as one product takes them: zero rows added up to
    :func:`product_row_count`."""
    rows = product_row_count(x.shape[0])
    if rows == x.shape[0]:
        return x
    return torch.cat([x, x.new_zeros(rows - x.shape[0], x.shape[1])])


def blocked_table(
    inputs: RankingInput, options: RankingSettings, exchange: Exchange | None = None
) -> RankTable:
    """Rank the queries of ``inputs`` against its kept gallery in blocks (see the package).

    ``exchange``: the processes of ``exchange`` all hold these same items and share the work out,
    each computing a share of the block products (see :func:`two_sided_pass`, or each its share
    of the query blocks where the symmetric pass is not taken); every process returns the whole
    table.
    """
    if exchange is not None and exchange.world == 1:
        exchange = None
    return _ranked(inputs, options, "table", exchange=exchange).table(inputs.relevance)


def blocked_scores(inputs: RankingInput, options: RankingSettings) -> Tensor:
    """Scores of every relevant pair, aligned with ``inputs.relevance.relevant_index``.

    Computed with the same blocked products as :func:`blocked_counts`, so that the two agree on
    ties when given the same ``options.block_size`` (the sharded gallery relies on it).
    """
    return _ranked(inputs, options, "scores").scores()


def blocked_counts(
    inputs: RankingInput, options: RankingSettings, thresholds: tuple[Tensor, Tensor]
) -> tuple[Tensor, Tensor]:
    """For each score ``thresholds[1][i]`` of query q (CSR pointers ``thresholds[0]``), count
    the kept, non-excluded gallery items scoring strictly above it and exactly equal to it.

    This is the counting half of the ranking, for scores that come from elsewhere (another
    process's gallery shard). Returns ``(above, tied)`` aligned with ``thresholds[1]``.
    """
    return _ranked(inputs, options, "count", external=thresholds).counts()


def plan_of(inputs: RankingInput, options: RankingSettings) -> Layout:
    """The pass and blocks the ranking of ``inputs`` (a rank table) takes, decided as
    :func:`blocked_table` decides them, without ranking: which pass (``layout.symmetric``), which
    blocks, and the budget the pass gets. Tests hold workloads to it (a same-source set of
    classes of any sizes takes the symmetric pass at an ordinary budget)."""
    return _laid_out(inputs, options, "table")[1]


@dataclass(frozen=True)
class _Matrices:
    """How the gallery's matrix is made: the kept rows in processing order (``rows``, None: all,
    as held), or its batches read a block at a time (``blocks``)."""

    rows: Tensor | None
    blocks: RowBatches | None


def _laid_out(
    inputs: RankingInput,
    options: RankingSettings,
    mode: Mode,
    external: tuple[Tensor, Tensor] | None = None,
) -> tuple[Direction, Layout, _Matrices]:
    """:class:`Direction`, the layout (:func:`choose_layout`) and how the gallery's matrix is
    made: the one layout step of every ranking."""
    query, gallery, relevance_sets = inputs.query, inputs.gallery, inputs.relevance
    dtype = score_dtype(query, gallery)
    # Same source (a set ranked against itself): the score matrix is symmetric, so each pair of
    # blocks can serve the queries of both (see two_sided_pass).
    if inputs.symmetric and gallery.shape != query.shape:
        raise ValueError("a same-source ranking ranks the queries against themselves")
    kept = relevance_sets.gallery_index
    num_gallery, num_g = gallery.shape[0], kept.numel()
    side = Direction.make(
        inputs,
        query.shape[0],
        num_g,
        options,
        device=query.device,
        dtype=dtype,
        external=external,
        mode=mode,
    )
    dim = query.shape[1] + (options.similarity == "euclidean")  # the prepared matrices' width
    # The gallery's matrix holds the kept items in processing order, gathered once; the symmetric
    # pass needs no other (its queries are that gallery).
    rows = None if num_g == num_gallery else kept
    if side.g_perm is not None:
        rows = side.g_perm if rows is None else rows.index_select(0, side.g_perm.to(rows.device))
    # a gallery held in batches, all of it kept in the order held: read a block at a time (by
    # the one-sided pass; a set ranked against itself is one matrix)
    g_blocks = None if inputs.symmetric else gallery_in_blocks(
        gallery, options.similarity, dtype, rows
    )
    layout = choose_layout(
        side, inputs, dim, symmetric=inputs.symmetric and mode == "table",
        gallery_copied=g_blocks is None,
    )
    return side, layout, _Matrices(rows, g_blocks)


def _ranked(
    inputs: RankingInput,
    options: RankingSettings,
    mode: Mode,
    *,
    external: tuple[Tensor, Tensor] | None = None,
    exchange: Exchange | None = None,
) -> Direction:
    """The layout step of the three above (:func:`_laid_out`), the matrices, then the pass;
    the direction comes back with its outputs written."""
    side, layout, matrices = _laid_out(inputs, options, mode, external)
    query, gallery = inputs.query, inputs.gallery
    dtype, elem = side.dtype, torch.finfo(side.dtype).bits // 8
    rows, g_blocks = matrices.rows, matrices.blocks
    if g_blocks is not None:
        q_mat, g_mat = prepare_query(query, options.similarity, dtype), g_blocks
    else:
        q_mat, g_mat = prepare(
            None if layout.symmetric else query, gallery, options.similarity, dtype, rows
        )
    if layout.symmetric:
        block = layout.block_g
        room = two_sided_room(layout.budget, side.state_bytes(block, elem), side.pair_state_bytes())
        p = side.at(block, room)
        two_sided_pass(p, None, g_mat, g_mat, cache_room(room, block, dtype), exchange)
    else:
        assert q_mat is not None
        # kept score blocks and the counting: a quarter of the pass's budget each
        p = side.at(layout.block_g, layout.budget // 2)
        _one_sided_pass(p, q_mat, g_mat, layout.block_q, mode, exchange)
        if exchange is not None:
            _combine_outputs(side.outputs, exchange)
    return side


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
    block_size, memory_budget = options.block_size, options.memory_budget
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
        if block_size is not None:
            block: int | None = block_size[1]
            if not keeps_states(side.state_bytes(block_size[1], elem), side.pair_state_bytes(),
                                budget):
                block = None
        else:
            block = _symmetric_block(side, elem, budget)
        if block is not None:
            return Layout(True, block, block, budget)
    budget = pass_budget(memory_budget, (num_q + num_g * gallery_copied) * dim * elem)
    if block_size is not None:
        return Layout(False, *block_size, budget)
    block_q, block_g = block_sizes(
        num_q, num_g, dim, side.max_relevant, elem, budget, side.device
    )
    return Layout(False, block_q, block_g, budget)


def _symmetric_block(side: Direction, elem: int, budget: int) -> int | None:
    """The square block of the symmetric pass, or None where its states do not fit the budget
    (:func:`keeps_states`): the widest whose products kept between reading and counting (see
    :func:`kept_at_most`) fit beside the states, or, where none down to half the widest block
    does, the widest whose states fit (a product then computed again where it cannot be kept:
    narrower still, the counting steps of four times as many block pairs cost more)."""
    num = side.num_g
    widest = square_block(num, elem, budget, side.device)
    narrowest = max(PRODUCT_COLUMNS, widest // 2)
    block, fallback = widest, None
    while True:
        rows, pairs = side.state_bytes(block, elem), side.pair_state_bytes()
        if keeps_states(rows, pairs, budget):
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


def two_way_ranking(
    ab: RankingInput, ba: RankingInput, options: RankingSettings
) -> tuple[RankTable, RankTable]:
    """The tables of ``ab`` (rows of ``a`` against ``b``) and ``ba`` (``b`` against ``a``, the
    same embeddings the other way round), both from one pass over the ``a x b`` products: each
    block of scores is counted along its rows for the first table and along its columns for the
    second (image-to-text and text-to-image from one product). ``options.block_size`` (square)
    sets the blocks.

    Euclidean scores (not one product for both directions), a gallery shortened by an ignore
    label, or counting states too large for a quarter of the budget: two one-sided passes.
    """
    a, b = ab.query, ab.gallery
    squares = options.block_size
    if squares is not None:
        checked_block_size(squares)
    device = a.device
    dtype = score_dtype(a, b)
    elem = torch.finfo(dtype).bits // 8
    if (
        a.shape[0]
        and b.shape[0]
        and one_product(options.similarity, squares, ab.relevance, b.shape[0])
        and one_product(options.similarity, squares, ba.relevance, a.shape[0])
    ):
        b = b.to(device)
        num_a, num_b = a.shape[0], b.shape[0]
        sides = [
            Direction.make(inputs, num, num_a + num_b - num, options, device=device, dtype=dtype)
            for inputs, num in ((ab, num_a), (ba, num_b))
        ]
        # the prepared matrices first, then the pass (see plan.py)
        budget = pass_budget(options.memory_budget, (num_a + num_b) * a.shape[1] * elem)
        if squares is not None:
            block_a = block_b = squares[0]
        else:
            # each set in blocks of its own, none wider than the square block: 1,000 images
            # against 5,000 captions are not padded to the captions' block
            block = _two_way_block(sides, budget, dtype, device)
            block_a, block_b = balanced(num_a, block), balanced(num_b, block)
        state = sides[0].state_bytes(block_a, elem) + sides[1].state_bytes(block_b, elem)
        if keeps_states(state, sum(s.pair_state_bytes() for s in sides), budget):
            # each set's matrix in the processing order of the side whose gallery it is
            _, a_mat = prepare(None, a, options.similarity, dtype, sides[1].g_perm)
            _, b_mat = prepare(None, b, options.similarity, dtype, sides[0].g_perm)
            room = two_sided_room(budget, state, sum(s.pair_state_bytes() for s in sides))
            # the rows' gallery is b, the columns' a
            passes = sides[0].at(block_b, room), sides[1].at(block_a, room)
            two_sided_pass(*passes, a_mat, b_mat, cache_room(room, block_a, dtype, block_b))
            return sides[0].table(ab.relevance), sides[1].table(ba.relevance)
    return blocked_table(ab, options), blocked_table(ba, options)


def _two_way_block(
    sides: list[Direction], budget: int, dtype: torch.dtype, device: torch.device
) -> int:
    """The square block of the two-way pass from the pass's ``budget``: each block of one side
    needs the relevant scores of many pairs before it counts its first, so half-size blocks when
    that keeps every such product for its counting."""
    elem = torch.finfo(dtype).bits // 8
    larger = max(side.order.numel() for side in sides)
    block = square_block(larger, elem, budget, device)
    half = halved(block)
    if (
        half >= 512
        and pairs_with_relevant(sides, block) > cache_room(budget, block, dtype)
        and pairs_with_relevant(sides, half) <= cache_room(budget, half, dtype)
    ):
        block = half
    return block


def keeps_states(row_bytes: int, pair_bytes: int, budget: int) -> bool:
    """Whether a two-sided pass may keep every query block's counting state to the end: the
    part that grows with rows and their padding (``row_bytes``) within a quarter of the pass's
    ``budget``, the part that grows with the relevant pairs (``pair_bytes``, of the order of the
    outputs) within the whole of it.

    The pair part is not charged to the quarter: it is of the size of the rank table the
    ranking returns, and counted against the quarter it made the choice between half and all of
    the product hang on the classes' sizes (SOP-sized data, classes of 1 to 15: 19 MiB of pair
    state against a quarter of 97 MiB). Bounded by the whole budget, a ranking with millions of
    relevant pairs still takes the one-sided pass, one query block's state at a time.
    """
    return row_bytes <= budget // 4 and pair_bytes <= budget


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


@in_full_fp32  # ranks must not depend on TF32 or the device
def _one_sided_pass(
    p: Pass, q_mat: Tensor, g_mat: Tensor | RowBatches, block_q: int, mode: str,
    exchange: Exchange | None = None,
) -> None:
    """Each query block against every gallery block in turn (any query and gallery).

    ``g_mat``: the gallery's prepared matrix, or its batches read a block at a time
    (:func:`~retrieval_metrics.functional.ranking.engine.similarity.gallery_in_blocks`): the
    same products either way. With ``exchange``, this process ranks every ``world``-th query
    block only (its outputs for the others stay as they start, for :func:`_combine_outputs`)."""
    device, dtype, block_g, num_g = p.device, p.dtype, p.block_g, p.num_g
    elem = torch.finfo(dtype).bits // 8
    g_buffer = torch.zeros(block_g, g_mat.shape[1], dtype=dtype, device=device)
    scores = torch.empty(product_row_count(block_q), block_g, dtype=dtype, device=device)
    cache_buffers: list[Tensor] = []  # score blocks kept between the passes, reused

    def gallery_block(b: int) -> Tensor:
        start, stop = b * block_g, min((b + 1) * block_g, num_g)
        if stop - start == block_g:
            if isinstance(g_mat, RowBatches):
                return g_mat.rows(start, stop, g_buffer)
            return g_mat[start:stop]
        # The last block is padded to full width so that every block is one product of the same
        # shape: a pair's score then cannot depend on the block it fell in.
        g_buffer.zero_()
        if isinstance(g_mat, RowBatches):
            g_mat.rows(start, stop, g_buffer, copy=True)
        else:
            g_buffer[: stop - start] = g_mat[start:stop]
        return g_buffer

    for k, q_start in enumerate(range(0, q_mat.shape[0], block_q)):
        if exchange is not None and k % exchange.world != exchange.rank:
            continue
        q_rows = p.order[q_start : q_start + block_q]
        qb = QueryBlock(p, q_rows)
        nb = qb.nb
        q_blk = product_rows(q_mat[q_rows.to(device)])
        # the rows still ranked, as one product takes them (fewer once rows finish)
        ranked = [q_blk]

        def block_scores(
            b: int, out: Tensor, ranked: list[Tensor] = ranked, qb: QueryBlock = qb
        ) -> Tensor:
            rows = ranked[0]
            s = torch.mm(rows, gallery_block(b).T, out=out[: rows.shape[0]])[: qb.nb]
            qb.mask_excluded(s, b)
            width = min(block_g, num_g - b * block_g)
            if width < block_g:
                s[:, width:] = p.neg_inf
            return s

        # Read relevant scores from the blocks that hold them (same products as the counting).
        # With a depth, the first blocks are read here too (as many as stay cached), so that the
        # first threshold knows THETA_EVERY blocks: filtered against one block's threshold, the
        # early blocks let several times as many candidates through as the later ones.
        read_first = qb.relevant_blocks()
        cache_room = max(0, (p.budget // 2) // max(1, nb * block_g * elem) - 1)
        if mode == "scores":
            cache_room = 0
        if len(read_first) > cache_room + 1:
            # Relevant items in more blocks than stay cached (a few relevant items per query
            # over a large gallery, as with judgments): reading them from their blocks would
            # compute those products twice, once here and once to count. Their gallery rows
            # are gathered into blocks of the same shape instead, one product per block_g
            # relevant items: a product of one shape scores a pair alike whichever column
            # holds it (what the padded last block relies on too).
            _read_gathered(qb, q_blk, g_mat, g_buffer, scores, read_first[cache_room:])
            read_first = read_first[:cache_room]
        if p.options.depth is not None:
            extra = min(THETA_EVERY, cache_room) - len(read_first)
            read_first += [b for b in range(p.num_blocks_g) if b not in read_first][: max(0, extra)]
        cache: dict[int, tuple[Tensor, Tensor | None]] = {}
        for b in read_first:
            if len(cache) < cache_room:
                if len(cache) == len(cache_buffers):
                    cache_buffers.append(torch.empty_like(scores))
                s = block_scores(b, cache_buffers[len(cache)])
            else:
                s = block_scores(b, scores)
            qb.read_relevant(s, b)
            seg_max = None
            if p.options.depth is not None:
                seg_max = segment_maxima(s)
                qb.seed(seg_max, b)
            if len(cache) < cache_room:
                cache[b] = (s, seg_max)
        if mode == "scores":
            p.outputs[0][qb.r_pos] = qb.relevant_values()
            continue

        qb.start_counting()
        seeded = set(read_first)
        for b in range(-1, p.num_blocks_g):
            if b >= 0:
                s, seg_max = cache[b] if b in cache else (block_scores(b, scores), None)
                if seg_max is None and qb.reads_segment_maxima(b):
                    seg_max = segment_maxima(s)
                qb.count(s, seg_max, b, seeded=b in seeded)
            kept = qb.drop_finished()
            if kept is not None:
                # finished rows are multiplied no more: the products and the kept blocks
                # shrink to the rows still ranked
                assert qb.kept is not None
                ranked[0] = product_rows(q_mat[q_rows.index_select(0, qb.kept).to(device)])
                on = kept.to(device)
                cache = {
                    key: (held.index_select(0, on), None if m is None else m.index_select(0, on))
                    for key, (held, m) in cache.items()
                }
                if qb.nb == 0:
                    break
        qb.finish()


def _read_gathered(
    qb: QueryBlock, q_blk: Tensor, g_mat: Tensor | RowBatches, g_buffer: Tensor, out: Tensor,
    blocks: list[int],
) -> None:
    """The relevant scores of query block ``qb`` that lie in gallery ``blocks``, from products
    of ``q_blk`` with their gallery rows gathered into ``g_buffer`` (the blocks' shape)."""
    block_g = g_buffer.shape[0]
    in_blocks = torch.isin(qb.r_block, torch.tensor(blocks, dtype=qb.r_block.dtype))
    pairs = flat_nonzero(in_blocks)
    if pairs.numel() == 0:
        return
    gallery_rows = qb.r_block[pairs] * block_g + qb.r_local[pairs]
    unique_rows, column = torch.unique(gallery_rows, return_inverse=True)
    device = g_buffer.device
    for c0 in range(0, unique_rows.numel(), block_g):
        chunk = unique_rows[c0 : c0 + block_g]
        g_buffer.zero_()
        # (the host index for batches: they find each row's batch on the host)
        g_buffer[: chunk.numel()] = g_mat[chunk if isinstance(g_mat, RowBatches) else
                                          chunk.to(device)]
        s = torch.mm(q_blk, g_buffer.T, out=out[: q_blk.shape[0]])[: qb.nb]
        here = (column >= c0) & (column < c0 + block_g)
        qb.read_pairs(s, pairs[here], column[here] - c0)


@in_full_fp32  # ranks must not depend on TF32 or the device
def two_sided_pass(
    p_rows: Pass,
    p_cols: Pass | None,
    a: Tensor,
    b: Tensor,
    cache_room: int,
    exchange: Exchange | None = None,
) -> None:
    """Each product of a block of ``a`` and a block of ``b`` serves the queries on both sides.

    ``S = A_i B_j^T`` gives block i of ``a`` its scores against block j of ``b`` (rows, for
    ``p_rows``) and block j of ``b`` its scores against block i of ``a`` (columns, ``S^T``, for
    ``p_cols``). With ``p_cols=None`` it is one set ranked against itself (``a`` is ``b``): only
    the pairs ``i <= j`` are computed, half of the full product. ``a`` and ``b`` are in
    processing order; block i of queries is block i of the gallery of the other side. Up to
    ``cache_room`` products are kept between reading relevant scores and counting.

    With ``exchange`` (a set ranked against itself on several processes that all hold it), each
    process computes every ``world``-th block pair only, counting it for both of its sides:
    ``1 / world`` of the half product. A block's relevant scores are read on the processes that
    own their pairs and combined before the block counts; at the end the counts are summed and
    the depth thresholds maximised: every process finishes every query block, whole.
    """
    symmetric = p_cols is None
    p_cols = p_rows if p_cols is None else p_cols
    device, dtype = p_rows.device, p_rows.dtype
    # the blocks of ``a`` are the gallery blocks of ``p_cols``, those of ``b`` of ``p_rows``
    block_a, block_b = p_cols.block_g, p_rows.block_g
    num_a, num_b = a.shape[0], b.shape[0]
    blocks_a, blocks_b = -(-num_a // block_a), -(-num_b // block_b)

    def query_blocks(p: Pass, num_blocks: int, block: int) -> list[QueryBlock]:
        return [QueryBlock(p, p.order[i * block : (i + 1) * block]) for i in range(num_blocks)]

    rows_of = query_blocks(p_rows, blocks_a, block_a)
    cols_of = rows_of if symmetric else query_blocks(p_cols, blocks_b, block_b)

    tail_a, tail_b = num_a - (blocks_a - 1) * block_a, num_b - (blocks_b - 1) * block_b
    # The last blocks are padded to full size (zeros, their scores set to -inf below).
    last_a = torch.zeros(block_a, a.shape[1], dtype=dtype, device=device)
    last_a[:tail_a] = a[(blocks_a - 1) * block_a :]
    last_b = last_a if symmetric else torch.zeros(block_b, b.shape[1], dtype=dtype, device=device)
    last_b[:tail_b] = b[(blocks_b - 1) * block_b :]

    def block_of(x: Tensor, last: Tensor, i: int, num_blocks: int, block: int) -> Tensor:
        return last if i == num_blocks - 1 else x[i * block : (i + 1) * block]

    def product(i: int, j: int, out: Tensor) -> Tensor:
        # Every product has the same shape, so a pair's score does not depend on its block.
        s = torch.mm(
            block_of(a, last_a, i, blocks_a, block_a),
            block_of(b, last_b, j, blocks_b, block_b).T,
            out=out,
        )
        if i == blocks_a - 1 and tail_a < block_a:
            s[tail_a:] = p_rows.neg_inf
        if j == blocks_b - 1 and tail_b < block_b:
            s[:, tail_b:] = p_rows.neg_inf
        return s

    # A block starts counting once it has read its relevant scores (its threshold starts at the
    # lowest), from the products of the pairs that hold them. Those products are kept for the
    # counting while the budget allows: in the order below a block's pairs are read shortly
    # before they are counted, so that few are kept at once when relevant items are grouped.
    def pair(i: int, j: int) -> tuple[int, int]:
        return (min(i, j), max(i, j)) if symmetric else (i, j)

    needs_rows = [{pair(i, j) for j in qb.relevant_blocks()} for i, qb in enumerate(rows_of)]
    needs_cols = (
        needs_rows
        if symmetric
        else [{(i, j) for i in qb.relevant_blocks()} for j, qb in enumerate(cols_of)]
    )
    cache: dict[tuple[int, int], Tensor] = {}
    read: set[tuple[int, int]] = set()
    started: set[int] = set()
    scores = torch.empty(block_a, block_b, dtype=dtype, device=device)
    # Buffers of kept products once counted, for the next ones, and of transposed blocks: the
    # same few blocks throughout, not a new one per pair (freed blocks of changing neighbours
    # fragment the heap, and resident memory grows with it).
    spare: list[Tensor] = []
    transposed: list[Tensor] = []

    def kept_block() -> Tensor:
        return spare.pop() if spare else torch.empty_like(scores)

    def transposed_block() -> Tensor:
        if not transposed:
            transposed.append(torch.empty(block_b, block_a, dtype=dtype, device=device))
        return transposed[0]

    # A product read but not kept is computed again to be counted, unless it is the pair about
    # to be counted (``now``): that one is read into ``scores`` and counted from there
    # (``held``), and the others not kept into one reading buffer.
    reading: list[Tensor] = []
    held: list[tuple[int, int] | None] = [None]

    def unkept_buffer() -> Tensor:
        if not reading:
            reading.append(torch.empty_like(scores))
        return reading[0]

    def start(
        qb: QueryBlock, needs: set[tuple[int, int]], now: tuple[int, int] | None = None
    ) -> None:
        if id(qb) in started:
            return
        for i, j in sorted(needs - read):
            current = (i, j) == now
            keep = not current and len(cache) < cache_room
            if current:
                held[0] = now
            s = product(i, j, scores if current else kept_block() if keep else unkept_buffer())
            rows_of[i].read_relevant(s, j)
            if not (symmetric and i == j):
                cols_of[j].read_relevant(s.T, i)
            read.add((i, j))
            if keep:
                cache[(i, j)] = s
        qb.start_counting()
        started.add(id(qb))

    owned = None
    if exchange is not None:
        if not symmetric:
            raise ValueError("the block pairs are shared out for a set ranked against itself only")
        world, rank = exchange.world, exchange.rank

        def owned(i: int, j: int) -> bool:
            # the pairs numbered by column (j, then i <= j), dealt out in turn: equal shares of the
            # products, and of the diagonal pairs, which count one side only
            return (j * (j + 1) // 2 + i) % world == rank

        combining: dict[int, Callable[[], Tensor]] = {}

        def read_shared(k: int) -> None:
            # Block k's relevant scores from the pairs this process owns (the other processes
            # read the rest), then their combination is started: one block ahead of the
            # counting, so that it runs while this process counts the block before.
            for i, j in sorted(needs_rows[k] - read):
                if owned(i, j):
                    keep = len(cache) < cache_room
                    s = product(i, j, kept_block() if keep else scores)
                    rows_of[i].read_relevant(s, j)
                    if i != j:
                        cols_of[j].read_relevant(s.T, i)
                    if keep:
                        cache[(i, j)] = s
                read.add((i, j))
            # where another process read a score, this one holds the padding, +inf
            combining[k] = exchange.min_async(rows_of[k].rel_scores.reshape(-1))

        def start_shared(k: int) -> None:
            if k + 1 < blocks_a:
                read_shared(k + 1)
            qb = rows_of[k]
            qb.rel_scores.copy_(combining.pop(k)().view_as(qb.rel_scores))
            qb.start_counting()
            started.add(id(qb))

        read_shared(0)

    for j in range(blocks_b):
        if owned is not None:
            start_shared(j)
        # a set against itself: block j's diagonal pair first, then up the column
        # (symmetric_order, which kept_at_most follows too)
        for i in range(j, -1, -1) if symmetric else range(blocks_a):
            if owned is not None and not owned(i, j):
                continue
            rows, cols = rows_of[i], cols_of[j]
            start(rows, needs_rows[i], (i, j))
            start(cols, needs_cols[j], (i, j))
            if (i, j) in cache:
                s = cache.pop((i, j))
            elif held[0] == (i, j):
                s = scores
            else:
                s = product(i, j, scores)
            held[0] = None
            if not (symmetric and i == j):
                # The columns first: the rows' exclusions are then written into s in place.
                if cols.has_excluded(i):
                    st = transposed_block().copy_(s.T)
                    cols.mask_excluded(st, i)
                    cols.count(st[: cols.nb], segment_maxima(st)[: cols.nb], i)
                else:
                    seg_max = s.view(block_a // SEGMENT, SEGMENT, block_b).amax(1).T.contiguous()
                    cols.count(
                        s.T[: cols.nb], seg_max[: cols.nb], i, segment_values=column_segments(s),
                        buffer=transposed_block(),
                    )
            rows.mask_excluded(s, j)
            rows.count(s[: rows.nb], segment_maxima(s)[: rows.nb], j)
            if s is not scores:
                spare.append(s)
    if exchange is not None:
        _combine_counts(rows_of, exchange)
    for qb in rows_of if symmetric else rows_of + cols_of:
        qb.finish()


# The collectives of a ranking shared over processes: one each, over every query block at once.


def _combine_counts(blocks: list[QueryBlock], exchange: Exchange) -> None:
    """The histograms summed over processes, and the highest of their depth thresholds.

    Each process's threshold is a lower bound of every row's depth-th best score, so the highest
    is one too; and each process counted every item of its pairs at or above its own threshold,
    so the sums are exact for every relevant score at or above the highest."""
    hists = [h for qb in blocks for h in (qb.hist_lt, qb.hist_le)]
    for hist, part in zip(hists, _split_like(exchange.sum(torch.cat(hists)), hists), strict=True):
        hist.copy_(part)
    thresholds = [qb.threshold for qb in blocks]
    combined = exchange.max(torch.cat(thresholds))
    for qb, part in zip(blocks, _split_like(combined, thresholds), strict=True):
        qb.threshold = part


def _combine_outputs(outputs: tuple[Tensor, ...], exchange: Exchange) -> None:
    """Above, tied, listed (and the tied items of a smaller key) of the query blocks each
    process ranked, on every process: the others' entries are as they start (0, 0, listed, 0)."""
    above, tied, listed = outputs[:3]
    for counts in (above, tied, *outputs[3:]):
        counts.copy_(exchange.sum(counts))
    listed.copy_(exchange.max((~listed).to(torch.int64)) == 0)


def _split_like(flat: Tensor, parts: list[Tensor]) -> list[Tensor]:
    sizes = [t.numel() for t in parts]
    return [
        piece.view(t.shape) for piece, t in zip(flat.split(sizes), parts, strict=True)
    ]
