"""The one-sided pass: each block of queries against every gallery block in turn.

Any queries against any gallery (and a set against itself where its states would not all fit):
a query block reads its relevant scores from the blocks that hold them (or from gathered rows,
:func:`read_gathered`, where they spread over more blocks than stay cached), then counts every
gallery block once, its finished rows leaving the products (``QueryBlock.drop_finished``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import flat_nonzero, to_device
from retrieval_metrics.functional.ranking.engine.counting import Pass, QueryBlock
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.engine.fp32 import in_full_fp32
from retrieval_metrics.functional.ranking.engine.kernels import segment_maxima
from retrieval_metrics.functional.ranking.engine.listing import PassLists
from retrieval_metrics.functional.ranking.engine.plan import (
    product_row_count,
    product_rows,
)
from retrieval_metrics.functional.ranking.engine.product_shape import (
    least_product_rows,
    product_columns,
)
from retrieval_metrics.functional.ranking.engine.tensor_cores import HalfProducts, block_product
from retrieval_metrics.functional.ranking.engine.threshold import THETA_EVERY
from retrieval_metrics.functional.ranking.row_batches import RowBatches, padded_block


@in_full_fp32  # ranks must not depend on TF32 or the device
def one_sided_pass(
    p: Pass, q_mat: Tensor, g_mat: Tensor | RowBatches, block_q: int, mode: str,
    exchange: Exchange | None = None, half: HalfProducts | None = None,
    lists: PassLists | None = None,
) -> None:
    """Each query block against every gallery block in turn (any query and gallery).

    ``g_mat``: the gallery's prepared matrix, or its batches read a block at a time
    (:func:`~retrieval_metrics.functional.ranking.engine.similarity.gallery_in_blocks`): the
    same products either way. With ``exchange``, this process ranks every ``world``-th query
    block only (its outputs for the others stay as they start, for ``shared.combine_outputs``).
    ``half``: ``q_mat`` and ``g_mat`` are half precision, multiplied on the tensor cores
    (``tensor_cores``). ``lists``: each query's best items are kept there from the blocks as
    they are counted, and no query leaves the products early (``engine.listing``)."""
    device, dtype, block_g, num_g = p.device, p.dtype, p.block_g, p.num_g
    elem = torch.finfo(dtype).bits // 8
    # The columns of every product: the gallery block's, or more where the block is narrower
    # than the host's BLAS computes alike (set by block_size, or a very small budget): then
    # multiplied with zero columns after its items (in ``wide``) and cut to them, so that an
    # item scores alike whatever block holds it (product_shape.product_columns).
    columns = block_g if half is not None else product_columns(
        block_g, q_mat.shape[1], q_mat.dtype, device
    )
    g_buffer = torch.zeros(columns, g_mat.shape[1], dtype=g_mat.dtype, device=device)
    # (every product of the pass this many rows or more: a query's scores alike whichever rows
    # are multiplied with it, in its block and once rows finish)
    least = least_product_rows(block_q, columns, q_mat.shape[1], q_mat.dtype, device)
    scores = torch.empty(product_row_count(block_q, least), block_g, dtype=dtype, device=device)
    wide = None if columns == block_g else torch.empty(
        scores.shape[0], columns, dtype=dtype, device=device
    )
    cache_buffers: list[Tensor] = []  # score blocks kept between the passes, reused
    # lists of half rows' cosines: true cosines, each block's written apart from the scores
    # the pass counts, which lack each query's factor (HalfProducts.listed)
    true_cosines = lists is not None and half is not None and half.lists_factor is not None
    listed_buffer = torch.empty_like(scores) if true_cosines else None
    # (cosine's factor per pair of a half product, written out block by block)
    work = torch.empty_like(scores) if half is not None and half.needs_work else None

    def gallery_factor(b: int) -> Tensor | None:
        return None if half is None else half.block(half.b_factor, b, block_g)

    # (the running lists' masks, reused block after block: RunningBest's; an accelerator's
    # lists, UnwaitedBest, take none)
    masks = None if lists is None or p.counter.whole_blocks else torch.empty(
        3 * min(block_q, q_mat.shape[0]) * block_g, dtype=torch.bool, device=device
    )

    # the gallery block g_buffer holds (None: none, or rows gathered since): a gallery of one
    # block (a device's blocks hold a BEIR corpus whole) is read into it once, not once per
    # query block (its unit rows divided, its half rows upcast, the last block padded again)
    held: list[int | None] = [None]

    def gallery_block(b: int) -> Tensor:
        if held[0] == b:
            return g_buffer
        block = padded_block(g_mat, b * block_g, min((b + 1) * block_g, num_g), g_buffer)
        if block is g_buffer:
            held[0] = b
        return block

    for k, q_start in enumerate(range(0, q_mat.shape[0], block_q)):
        if exchange is not None and k % exchange.world != exchange.rank:
            continue
        q_rows = p.order[q_start : q_start + block_q]
        qb = QueryBlock(p, q_rows)
        nb = qb.nb
        # (index_select, not q_mat[rows]: advanced indexing copies rows several times slower,
        # 2.4 ms a block of 8,192 x 64 where the product itself took 2.7)
        q_blk = product_rows(q_mat.index_select(0, to_device(q_rows, device)), least)
        # the rows still ranked, as one product takes them (fewer once rows finish), and
        # their factors for a half product
        ranked = [q_blk, _query_factor(half, q_rows, q_blk.shape[0])]

        def block_scores(
            b: int, out: Tensor, ranked: list = ranked, qb: QueryBlock = qb,
            factors_left: bool = False,
        ) -> Tensor:
            rows = ranked[0]
            if wide is None:
                s = block_product(
                    rows, gallery_block(b), out[: rows.shape[0]], half, ranked[1],
                    None if factors_left else gallery_factor(b), work, factors_left,
                )[: qb.nb]
            else:  # (the product cut to the block's items; half is None)
                product = block_product(rows, gallery_block(b), wide[: rows.shape[0]])
                s = out[: qb.nb].copy_(product[: qb.nb, :block_g])
            qb.mask_excluded(s, b)
            width = min(block_g, num_g - b * block_g)
            if width < block_g:
                s[:, width:] = p.neg_inf
            return s

        # Read relevant scores from the blocks that hold them (same products as the counting).
        # With a depth that segment maxima raise (not the compiled pass's heaps:
        # seeds_from_maxima), the first blocks are read here too (as many as stay cached), so
        # that the first threshold knows THETA_EVERY blocks: filtered against one block's
        # threshold, the early blocks let several times as many candidates through as the
        # later ones.
        read_first = qb.relevant_blocks()
        cache_room = max(0, (p.budget // 2) // max(1, nb * block_g * elem) - 1)
        if true_cosines:
            # (a kept block keeps its true cosines beside it, the listed buffer aside)
            cache_room = max(0, cache_room - 1) // 2
        if mode == "scores":
            cache_room = 0
        if len(read_first) > cache_room + 1:
            # Relevant items in more blocks than stay cached (a few relevant items per query
            # over a large gallery, as with judgments): reading them from their blocks would
            # compute those products twice, once here and once to count. Their gallery rows
            # are gathered into blocks of the same shape instead, one product per block_g
            # relevant items: a product of one shape scores a pair alike whichever column
            # holds it (what the padded last block relies on too).
            # None of them is kept: a few kept blocks would spare a few of many products,
            # and hold up to a quarter of the budget (64 MiB at the default) while the
            # gallery is read (a corpus on disk, its judged documents spread through it).
            held[0] = None  # (the rows gathered are written into g_buffer)
            read_gathered(
                qb, q_blk, g_mat, g_buffer, scores if wide is None else wide, read_first,
                half, ranked[1], work,
            )
            read_first, cache_room = [], 0
        seeding = qb.seeds_from_maxima()
        if seeding:
            extra = min(THETA_EVERY, cache_room) - len(read_first)
            read_first += [b for b in range(p.num_blocks_g) if b not in read_first][: max(0, extra)]
        q_factor = None
        if true_cosines:
            assert half is not None and half.lists_factor is not None
            q_factor = half.rows(half.lists_factor, q_rows, nb)

        def kept_scores(
            b: int, out: Tensor, listed_out: Tensor | None, folded: bool = False,
            q_factor: Tensor | None = q_factor,
        ) -> tuple[Tensor, Tensor | None]:
            """Block ``b``'s scores as the pass counts them, into ``out``, and the column factor
            the count still applies (``folded``: the counting backend folds it as it reads the
            block); listing true cosines, those too, into ``listed_out``, from the product
            before its factors."""
            if not true_cosines:
                return block_scores(b, out), None
            assert half is not None and q_factor is not None and listed_out is not None
            s = block_scores(b, out, factors_left=True)
            columns_factor = gallery_factor(b)
            assert columns_factor is not None
            half.listed(s, q_factor, columns_factor, listed_out[: s.shape[0]])
            if folded:
                return s, columns_factor
            return s.mul_(columns_factor), None  # (the scores block_product gives the pass)

        cache: dict[int, tuple[Tensor, Tensor | None]] = {}
        cache_listed: dict[int, Tensor] = {}  # (a kept block's true cosines, listing them)
        for b in read_first:
            if len(cache) < cache_room:
                at = len(cache) * (1 + true_cosines)
                while len(cache_buffers) <= at + true_cosines:
                    cache_buffers.append(torch.empty_like(scores))
                listed_out = cache_buffers[at + 1] if true_cosines else None
                s, _ = kept_scores(b, cache_buffers[at], listed_out)
                if listed_out is not None:
                    cache_listed[b] = listed_out[:nb]
            else:
                s = block_scores(b, scores)
            qb.read_relevant(s, b)
            seg_max = None
            if seeding:
                seg_max = segment_maxima(s)
                qb.seed(seg_max, b)
            if len(cache) < cache_room:
                cache[b] = (s, seg_max)
        if mode == "scores":
            p.outputs[0][to_device(qb.r_pos, device)] = qb.relevant_values()
            continue

        qb.start_counting()
        best = None if lists is None else lists.start(nb)
        seeded = set(read_first)
        # a half product's cosine factor per column (1/|g_j|) applied by the counting backend
        # as it reads each score, where it can (Triton's): no pass of its own over each block
        left = half is not None and half.columns_only and qb.folds_column_factor()
        for b in range(-1, p.num_blocks_g):
            if b >= 0:
                factor = None
                # (the block's items alone: the last block's padding columns never listed)
                items = min(block_g, num_g - b * block_g)
                listed = cache_listed.pop(b, None)
                if b in cache:
                    s, seg_max = _still_ranked(cache.pop(b), qb.kept, device)
                elif true_cosines:
                    folded = left and not qb.reads_segment_maxima(b)
                    (s, factor), seg_max = kept_scores(b, scores, listed_buffer, folded), None
                    assert listed_buffer is not None
                    listed = listed_buffer[:nb]
                elif left and not qb.reads_segment_maxima(b):
                    s, seg_max = block_scores(b, scores, factors_left=True), None
                    factor = gallery_factor(b)
                else:
                    s, seg_max = block_scores(b, scores), None
                if best is not None:
                    shown = s if listed is None else listed
                    best.add(shown[:, :items], b * block_g, masks, shown)
                if seg_max is None and qb.reads_segment_maxima(b):
                    seg_max = segment_maxima(s)
                qb.count(s, seg_max, b, seeded=b in seeded, column_factor=factor)
            # (a query listed needs every block: none leaves the products)
            kept = qb.drop_finished() if best is None else None
            if kept is not None:
                # finished rows are multiplied no more: the products shrink to the rows still
                # ranked (the kept blocks hold every row of the block: each is cut to those
                # rows once, as it is counted, not again at every drop)
                assert qb.kept is not None
                still = q_rows.index_select(0, qb.kept)
                ranked[0] = product_rows(
                    q_mat.index_select(0, to_device(still, device)), least
                )
                ranked[1] = _query_factor(half, still, ranked[0].shape[0])
                if qb.nb == 0:
                    break
        qb.finish()
        if best is not None:
            assert lists is not None
            lists.store(q_rows, best)


def _still_ranked(
    held: tuple[Tensor, Tensor | None], kept: Tensor | None, device: torch.device
) -> tuple[Tensor, Tensor | None]:
    """A kept score block (and its segment maxima), computed for every row of its query
    block, cut to the rows still ranked (``QueryBlock.kept``: None, all of them)."""
    if kept is None:
        return held
    on = to_device(kept, device)
    s, seg_max = held
    return s.index_select(0, on), None if seg_max is None else seg_max.index_select(0, on)


def _query_factor(half: HalfProducts | None, q_rows: Tensor, width: int) -> Tensor | None:
    """The factors of a query block's rows ``q_rows`` for a half product (padded to the
    product's ``width`` rows)."""
    return None if half is None else half.rows(half.a_factor, q_rows, width)


def read_gathered(
    qb: QueryBlock, q_blk: Tensor, g_mat: Tensor | RowBatches, g_buffer: Tensor, out: Tensor,
    blocks: list[int], half: HalfProducts | None = None, q_factor: Tensor | None = None,
    work: Tensor | None = None,
) -> None:
    """The relevant scores of query block ``qb`` that lie in gallery ``blocks``, from products
    of ``q_blk`` with their gallery rows gathered into ``g_buffer`` (the shape of the blocks'
    products, ``out`` as wide); with ``half``, on the tensor cores, ``q_factor`` the query
    rows' factors.

    A relevant score must be the very one its block gives when it is counted, or the item does
    not tie with itself. Where a product of this shape scores a pair alike in every column
    (:func:`columns_alike`: float32 on this project's CPU), the rows are packed side by side.
    Elsewhere (double precision there rounds the last ``width mod 12`` columns of a product
    otherwise; a device's BLAS is not probed) each row is gathered into its own block's column, rows
    sharing one taking turns, a product a turn."""
    block_g = qb.p.block_g
    in_blocks = torch.isin(qb.r_block, torch.tensor(blocks, dtype=qb.r_block.dtype))
    pairs = flat_nonzero(in_blocks)
    if pairs.numel() == 0:
        return
    gallery_rows = qb.r_block[pairs] * block_g + qb.r_local[pairs]
    unique_rows, which = torch.unique(gallery_rows, return_inverse=True)
    if half is None and qb.p.counter.probes_columns and columns_alike(q_blk, g_buffer):
        at = torch.arange(unique_rows.numel())
        column, turn = at.remainder(block_g), at.div(block_g, rounding_mode="floor")
    else:
        column = unique_rows.remainder(block_g)  # each row's column in its own block
        turn = _turns(column)
    device = g_buffer.device
    for t in range(int(turn.max()) + 1):
        taking = flat_nonzero(turn == t)
        rows, columns = unique_rows.index_select(0, taking), column.index_select(0, taking)
        g_buffer.zero_()  # (the columns no row takes this turn: any finite row serves)
        # (the host index for batches: they find each row's batch on the host)
        picked = (g_mat[rows] if isinstance(g_mat, RowBatches)
                  else g_mat.index_select(0, to_device(rows, device)))
        g_buffer.index_copy_(0, to_device(columns, device), picked.to(g_buffer.dtype))
        g_factor = None
        if half is not None and half.b_factor is not None:
            g_factor = half.b_factor.new_ones(g_buffer.shape[0]).index_copy_(
                0, to_device(columns, device),
                half.rows(half.b_factor, rows, rows.numel()),
            )
        s = block_product(
            q_blk, g_buffer, out[: q_blk.shape[0]], half, q_factor, g_factor, work
        )[: qb.nb]
        here = flat_nonzero(turn.index_select(0, which) == t)
        qb.read_pairs(s, pairs.index_select(0, here), column.index_select(0, which[here]))


#: columns_alike's answers, by (dtype, rows, width, columns) of a product on the host
_ALIKE: dict[tuple[torch.dtype, int, int, int], bool] = {}


def columns_alike(q_blk: Tensor, g_buffer: Tensor) -> bool:
    """Whether the host's BLAS scores a pair alike in every column of a product of the shape of
    ``q_blk`` x ``g_buffer``: a product of random rows with one row repeated in every column
    gives each row one score (a column taking another kernel, or another order of its sums,
    rounds some of them otherwise). Found once a shape, for the CPU's counter
    (``Counter.probes_columns``)."""
    key = (q_blk.dtype, q_blk.shape[0], q_blk.shape[1], g_buffer.shape[0])
    if key not in _ALIKE:
        gen = torch.Generator().manual_seed(0)
        rows = torch.randn(q_blk.shape, generator=gen, dtype=torch.float64).to(q_blk.dtype)
        one = torch.randn(1, g_buffer.shape[1], generator=gen, dtype=torch.float64)
        repeated = one.to(g_buffer.dtype).expand_as(g_buffer).contiguous()
        s = block_product(rows, repeated, torch.empty(rows.shape[0], g_buffer.shape[0],
                                                      dtype=q_blk.dtype), None, None, None, None)
        _ALIKE[key] = bool((s == s[:, :1]).all())
    return _ALIKE[key]


def _turns(home: Tensor) -> Tensor:
    """Per entry, how many earlier entries share its value of ``home``: the turn it takes."""
    order = torch.argsort(home, stable=True)
    sorted_home = home.index_select(0, order)
    starts = torch.ones_like(sorted_home, dtype=torch.bool)
    starts[1:] = sorted_home[1:] != sorted_home[:-1]
    position = torch.arange(home.numel())
    first = torch.cummax(torch.where(starts, position, 0), 0).values
    return torch.empty_like(home).index_copy_(0, order, position - first)
