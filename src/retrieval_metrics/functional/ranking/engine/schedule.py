"""The orders of block products: which score blocks are computed, and who counts them.

:func:`blocked_table`, :func:`blocked_scores` and :func:`blocked_counts` (the rank table, the
relevant pairs' scores, the counts against given scores) share one layout step
(:func:`_laid_out`): :class:`Direction`, the layout (``layout.choose_layout``: which pass, which
blocks), the matrices in processing order, then a pass: ``two_sided.two_sided_pass`` when one
product can serve the queries of both of its sides (a set ranked against itself), else
``one_sided.one_sided_pass``, each block of queries against every gallery block in turn.
:func:`two_way_ranking` lays out both directions of two sets ranked against each other
(``rank_two_ways``) for one two-sided pass. :func:`plan_of` says which layout a ranking takes
without ranking.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import to_device
from retrieval_metrics.functional.ranking.engine.direction import Direction, Mode, RankingInput
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.engine.layout import (
    Layout,
    choose_layout,
    keeps_states,
    one_product,
    two_sided_room,
    two_way_blocks,
)
from retrieval_metrics.functional.ranking.engine.listing import PassLists, open_listing
from retrieval_metrics.functional.ranking.engine.one_sided import one_sided_pass
from retrieval_metrics.functional.ranking.engine.plan import (
    cache_room,
    checked_block_size,
    pass_budget,
)
from retrieval_metrics.functional.ranking.engine.shared import combine_outputs
from retrieval_metrics.functional.ranking.engine.similarity import (
    gallery_in_blocks,
    prepare,
    prepare_query,
    score_dtype,
    stands,
    warn_sign_code_blocks,
)
from retrieval_metrics.functional.ranking.engine.tensor_cores import (
    HalfProducts,
    half_stands,
    listing_half,
    prepare_half,
)
from retrieval_metrics.functional.ranking.engine.two_sided import two_sided_pass
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.functional.table import RankTable


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
    whole = _whole_ranking(inputs, options)
    table = _ranked(inputs, whole, "table", exchange=exchange).table(inputs.relevance)
    if whole is options:
        return table
    # (the table records the depth asked for, as a ranking to that depth records it)
    asked = torch.full_like(table.depth, options.depth)
    return replace(
        table, depth=table.num_relevant.clamp_min(asked) if options.cover_relevant else asked
    )


def _whole_ranking(inputs: RankingInput, options: RankingSettings) -> RankingSettings:
    """``options`` without a depth where the depth reaches the gallery's size: every item lies
    within it, so the ranking is the whole ranking, without the work a depth costs (each row's
    depth best scores: a cut-off of 2,000,000 over 11 items held 572 MiB whatever the budget,
    10**12 asked for 48 TB). A rank table only: a shard's counts ("count", "scores") rank
    within a depth of the whole corpus."""
    depth = options.depth
    if depth is None or depth < inputs.relevance.gallery_index.numel():
        return options
    return replace(options, depth=None)


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
    return _laid_out(inputs, _whole_ranking(inputs, options), "table")[1]


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
        rows = (
            side.g_perm if rows is None
            else rows.index_select(0, to_device(side.g_perm, rows.device))
        )
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
    half_prepared = None
    if side.counter.multiplies_half(query.dtype, _stored_dtype(gallery)):
        # The one-sided pass reads its blocks along their rows only: cosine's rows may keep
        # their norms. Not where scores travel between the shards of a corpus ("scores",
        # "count"): a shard whose norms keep it on the float32 path scores true cosines, and
        # every shard's scores must be those, up to rounding.
        half_prepared = prepare_half(
            None if layout.symmetric else query, gallery, options.similarity, rows,
            rows_scaled=layout.symmetric or mode != "table",
        )
    half = None
    if half_prepared is not None:
        q_mat, g_mat, half = half_prepared
        half = replace(half, fused=side.counter.fuses_pair_factors)
    elif g_blocks is not None:
        q_mat, g_mat = prepare_query(query, options.similarity, dtype), g_blocks
    else:
        q_mat, g_mat = prepare(
            None if layout.symmetric else query, gallery, options.similarity, dtype, rows
        )
    # a run's lists kept as the pass counts, where they are top_k's (engine.listing)
    listed = open_listing() if mode == "table" else None
    if layout.symmetric:
        if listed is not None:
            listed.add(None)
        assert isinstance(g_mat, Tensor)
        block = layout.block_g
        room = two_sided_room(layout.budget, side.state_bytes(block, elem), side.pair_state_bytes())
        p = side.at(block, room)
        two_sided_pass(p, None, g_mat, g_mat, cache_room(room, block, dtype), exchange, half)
    else:
        assert q_mat is not None
        # kept score blocks and the counting: a quarter of the pass's budget each
        p = side.at(layout.block_g, layout.budget // 2)
        lists = None
        if listed is not None and exchange is None and rows is None and (
            side.tie_key is None and not inputs.symmetric and side.num_g
        ):
            # (half rows: where the lists can take the scores top_k lists, true cosines)
            for_lists = None if half is None else listing_half(half, q_mat, g_mat)
            if half is None or for_lists is not None:
                half = for_lists
                lists = PassLists(
                    query.shape[0], min(listed.k, side.num_g), dtype, p.device, side.counter
                )
        one_sided_pass(p, q_mat, g_mat, layout.block_q, mode, exchange, half, lists)
        if isinstance(g_mat, RowBatches) and g_mat.reads_norms and not (
            stands(g_mat) if half is None else half_stands(g_mat, half.similarity)
        ):
            # the norms computed as the rows were read ask for another path (a non-zero row
            # too short for its squares, a half row's norm out of bounds): ranked again, the
            # norms known now (every process of an exchange reads the same gallery, so all of
            # them do)
            return _ranked(inputs, options, mode, external=external, exchange=exchange)
        if g_blocks is not None and options.similarity == "cosine":
            assert isinstance(gallery, RowBatches)
            warn_sign_code_blocks(query, gallery)
        if exchange is not None:
            combine_outputs(side.outputs, exchange)
        if listed is not None:
            listed.add(lists)
    return side


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
        b = to_device(b, device)
        num_a, num_b = a.shape[0], b.shape[0]
        sides = [
            Direction.make(inputs, num, num_a + num_b - num, options, device=device, dtype=dtype)
            for inputs, num in ((ab, num_a), (ba, num_b))
        ]
        # the prepared matrices first, then the pass (see plan.py)
        budget = pass_budget(options.budget_on(device), (num_a + num_b) * a.shape[1] * elem)
        width = a.shape[1] + (options.similarity == "euclidean")
        block_a, block_b = two_way_blocks(sides, squares, budget, dtype, width)
        state = sides[0].state_bytes(block_a, elem) + sides[1].state_bytes(block_b, elem)
        if keeps_states(state, sum(s.pair_state_bytes() for s in sides), budget):
            # each set's matrix in the processing order of the side whose gallery it is
            a_mat, b_mat, half = _two_way_matrices(a, b, options.similarity, dtype, sides)
            room = two_sided_room(budget, state, sum(s.pair_state_bytes() for s in sides))
            # the rows' gallery is b, the columns' a
            passes = sides[0].at(block_b, room), sides[1].at(block_a, room)
            two_sided_pass(
                *passes, a_mat, b_mat, cache_room(room, block_a, dtype, block_b), half=half
            )
            return sides[0].table(ab.relevance), sides[1].table(ba.relevance)
    return blocked_table(ab, options), blocked_table(ba, options)


def _stored_dtype(x: Tensor | RowBatches) -> torch.dtype:
    """The dtype ``x``'s rows are held in (a half corpus in batches is read upcast)."""
    return x.stored_dtype if isinstance(x, RowBatches) else x.dtype


def _two_way_matrices(
    a: Tensor, b: Tensor, similarity: str, dtype: torch.dtype, sides: list[Direction]
) -> tuple[Tensor, Tensor, HalfProducts | None]:
    """Both sets' matrices for :func:`two_way_ranking`, each in the processing order of the
    side whose gallery it is: half rows on the tensor cores where the counter multiplies them
    (one factor per row from each set: the cosine's norms), else ``prepare``'s."""
    if sides[0].counter.multiplies_half(a.dtype, b.dtype):
        a_half = prepare_half(None, a, similarity, sides[1].g_perm)
        b_half = prepare_half(None, b, similarity, sides[0].g_perm)
        if a_half is not None and b_half is not None:
            a_mat, b_mat = a_half[1], b_half[1]
            assert isinstance(a_mat, Tensor) and isinstance(b_mat, Tensor)
            # the rows of every product are a's, the columns b's
            return a_mat, b_mat, HalfProducts(
                similarity, a_half[2].a_factor, b_half[2].b_factor,
                fused=sides[0].counter.fuses_pair_factors,
            )
    _, a_mat = prepare(None, a, similarity, dtype, sides[1].g_perm)
    _, b_mat = prepare(None, b, similarity, dtype, sides[0].g_perm)
    return a_mat, b_mat, None
