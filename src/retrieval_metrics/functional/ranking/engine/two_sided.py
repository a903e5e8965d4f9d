"""The two-sided pass: each product of a block of ``a`` and a block of ``b`` serves the queries on
both of its sides.

``S = A_i B_j^T`` gives block i of ``a`` its scores against block j of ``b`` (its rows) and block
j of ``b`` its scores against block i of ``a`` (its columns, ``S^T``). A set ranked against
itself (same source) computes the pairs ``i <= j`` only, half of the product; two sets ranked
against each other both ways (image-text) compute the product once for both tables.
:class:`BlockPairs` makes the products, every one at one shape; :class:`KeptProducts` holds the
products read before they are counted; :class:`TwoSidedPass` orders the pairs and counts them;
``shared.SharedPairs`` shares the pairs out over processes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.ranking.engine.counting import (
    Pass,
    QueryBlock,
    count_both_sides,
)
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.engine.fp32 import in_full_fp32
from retrieval_metrics.functional.ranking.engine.kernels import column_segments, segment_maxima
from retrieval_metrics.functional.ranking.engine.layout import symmetric_order
from retrieval_metrics.functional.ranking.engine.plan import SEGMENT
from retrieval_metrics.functional.ranking.engine.product_shape import square_product_side
from retrieval_metrics.functional.ranking.engine.shared import SharedPairs
from retrieval_metrics.functional.ranking.engine.tensor_cores import HalfProducts, block_product

Pair = tuple[int, int]


class BlockPairs:
    """The products of the blocks of ``a`` (``block_a`` rows each) and of ``b`` (``block_b``).

    The last blocks are padded to full size (zero rows, their scores set to ``neg_inf``): every
    product has the same shape, so a pair's score does not depend on its block. A block
    narrower than the host's BLAS computes alike (set by ``block_size``, or a very small
    budget) is multiplied with zero rows after it, then the product cut to the blocks
    (``product_shape.square_product_side``). ``half``: ``a`` and ``b`` are half precision,
    multiplied on the tensor cores (``tensor_cores``).
    """

    def __init__(
        self, a: Tensor, b: Tensor, block_a: int, block_b: int, neg_inf: Tensor, same: bool,
        half: HalfProducts | None = None,
    ) -> None:
        self.a, self.b, self.block_a, self.block_b, self.neg_inf = a, b, block_a, block_b, neg_inf
        self.half = half
        self.dtype = neg_inf.dtype  # the scores' (the matrices' unless half)
        self._spare: Tensor | None = None
        self.blocks_a, self.blocks_b = -(-a.shape[0] // block_a), -(-b.shape[0] // block_b)
        self.tail_a = a.shape[0] - (self.blocks_a - 1) * block_a
        self.tail_b = b.shape[0] - (self.blocks_b - 1) * block_b
        self.last_a = self._padded_last(a, block_a, self.blocks_a)
        self.last_b = self.last_a if same else self._padded_last(b, block_b, self.blocks_b)
        # (None: the blocks are multiplied as they are)
        self._wide: tuple[Tensor, Tensor, Tensor] | None = None
        if half is None:
            side_a, side_b = (
                square_product_side(block, a.shape[1], a.dtype, a.device)
                for block in (block_a, block_b)
            )
            if (side_a, side_b) != (block_a, block_b):
                def zeros(rows: int) -> Tensor:
                    return torch.zeros(rows, a.shape[1], dtype=a.dtype, device=a.device)

                # the blocks copied into zero rows, and their product
                self._wide = (zeros(side_a), zeros(side_b), a.new_empty(side_a, side_b))

    @staticmethod
    def _padded_last(x: Tensor, block: int, num_blocks: int) -> Tensor:
        last = torch.zeros(block, x.shape[1], dtype=x.dtype, device=x.device)
        tail = x[(num_blocks - 1) * block :]
        last[: tail.shape[0]] = tail
        return last

    def _block(self, x: Tensor, last: Tensor, i: int, num_blocks: int, block: int) -> Tensor:
        return last if i == num_blocks - 1 else x[i * block : (i + 1) * block]

    def empty(self) -> Tensor:
        """A buffer of one product's shape."""
        return torch.empty(self.block_a, self.block_b, dtype=self.dtype, device=self.a.device)

    def spare(self) -> Tensor:
        """One more buffer of a product's size, ``block_b x block_a``: a product's transposed
        copy while it is counted, and cosine's factor per pair while a half product is made."""
        if self._spare is None:
            self._spare = torch.empty(
                self.block_b, self.block_a, dtype=self.dtype, device=self.a.device
            )
        return self._spare

    def factors(self, i: int, j: int) -> tuple[Tensor | None, Tensor | None]:
        """Pair ``(i, j)``'s factors per row and per column (a half product's cosine), padded
        to the blocks' size."""
        half = self.half
        if half is None:
            return None, None
        return (half.block(half.a_factor, i, self.block_a),
                half.block(half.b_factor, j, self.block_b))

    def product(self, i: int, j: int, out: Tensor, factors_left: bool = False) -> Tensor:
        """Pair ``(i, j)``'s scores into ``out``; ``factors_left``: a half product's cosine
        factors per pair left to the counting that folds them (:meth:`factors`)."""
        a_factor, b_factor = (None, None) if factors_left else self.factors(i, j)
        a_block = self._block(self.a, self.last_a, i, self.blocks_a, self.block_a)
        b_block = self._block(self.b, self.last_b, j, self.blocks_b, self.block_b)
        if self._wide is not None:
            a_rows, b_rows, product = self._wide
            a_rows[: self.block_a] = a_block
            b_rows[: self.block_b] = b_block
            s = out.copy_(
                block_product(a_rows, b_rows, product)[: self.block_a, : self.block_b]
            )
        else:
            s = block_product(
                a_block, b_block, out, self.half, a_factor, b_factor,
                self.spare() if self.half is not None and self.half.needs_work else None,
                factors_left,
            )
        if i == self.blocks_a - 1 and self.tail_a < self.block_a:
            s[self.tail_a :] = self.neg_inf
        if j == self.blocks_b - 1 and self.tail_b < self.block_b:
            s[:, self.tail_b :] = self.neg_inf
        return s


class KeptProducts:
    """Products read (for their relevant scores) before they are counted.

    Up to ``room`` are kept for their counting; the pair about to be counted is read into the
    buffer it is counted from (``counted``); any other read beyond the room into one reading
    buffer, to be computed again when counted. Buffers are reused: the same few blocks
    throughout, not a new one per pair (freed blocks of changing neighbours fragment the heap,
    and resident memory grows with it).
    """

    def __init__(self, pairs: BlockPairs, room: int) -> None:
        self.pairs, self.room = pairs, room
        self.counted = pairs.empty()
        self.kept: dict[Pair, Tensor] = {}
        self.spare: list[Tensor] = []
        self.reading: Tensor | None = None
        self.held: Pair | None = None

    def read(self, i: int, j: int, now: Pair | None = None) -> Tensor:
        """Pair ``(i, j)``'s product, to read its relevant scores; ``now``: the pair about to
        be counted."""
        if (i, j) == now:
            self.held = now
            return self.pairs.product(i, j, self.counted)
        if len(self.kept) < self.room:
            s = self.pairs.product(i, j, self.spare.pop() if self.spare else self.pairs.empty())
            self.kept[(i, j)] = s
            return s
        if self.reading is None:
            self.reading = self.pairs.empty()
        return self.pairs.product(i, j, self.reading)

    def to_count(self, i: int, j: int, factors_left: bool = False) -> tuple[Tensor, bool]:
        """Pair ``(i, j)``'s product, to count it: kept, held, or computed now; and whether its
        factors were left to the counting (``factors_left``: a product computed now leaves
        them, one read for its relevant scores has them)."""
        held, self.held = self.held, None
        if (i, j) in self.kept:
            return self.kept.pop((i, j)), False
        if held == (i, j):
            return self.counted, False
        return self.pairs.product(i, j, self.counted, factors_left), factors_left

    def counted_out(self, s: Tensor) -> None:
        """``s`` counted: a kept product's buffer serves the next one kept."""
        if s is not self.counted:
            self.spare.append(s)

    def transposed_buffer(self) -> Tensor:
        return self.pairs.spare()


class TwoSidedPass:
    """One two-sided pass (see :func:`two_sided_pass`)."""

    def __init__(
        self,
        p_rows: Pass,
        p_cols: Pass | None,
        a: Tensor,
        b: Tensor,
        cache_room: int,
        exchange: Exchange | None,
        half: HalfProducts | None = None,
    ) -> None:
        self.symmetric = p_cols is None
        p_cols = p_rows if p_cols is None else p_cols
        # the blocks of ``a`` are the gallery blocks of ``p_cols``, those of ``b`` of ``p_rows``
        block_a, block_b = p_cols.block_g, p_rows.block_g
        self.pairs = BlockPairs(a, b, block_a, block_b, p_rows.neg_inf, self.symmetric, half)
        self.rows_of = _query_blocks(p_rows, self.pairs.blocks_a, block_a)
        self.cols_of = (
            self.rows_of if self.symmetric else _query_blocks(p_cols, self.pairs.blocks_b, block_b)
        )
        # A block starts counting once it has read its relevant scores (its threshold starts at
        # the lowest), from the products of the pairs that hold them; in the order of run() a
        # block's pairs are read shortly before they are counted, so that few are kept at once
        # when relevant items are grouped.
        self.needs_rows = [
            {self._pair(i, j) for j in qb.relevant_blocks()} for i, qb in enumerate(self.rows_of)
        ]
        self.needs_cols = (
            self.needs_rows
            if self.symmetric
            else [{(i, j) for i in qb.relevant_blocks()} for j, qb in enumerate(self.cols_of)]
        )
        self.products = KeptProducts(self.pairs, cache_room)
        self.read: set[Pair] = set()
        self.started: set[int] = set()
        self.shared: SharedPairs | None = None
        if exchange is not None:
            if not self.symmetric:
                raise ValueError(
                    "the block pairs are shared out for a set ranked against itself only"
                )
            self.shared = SharedPairs(exchange, self.rows_of, self.needs_rows, self.read_pair)

    def _pair(self, i: int, j: int) -> Pair:
        return (min(i, j), max(i, j)) if self.symmetric else (i, j)

    def read_pair(self, i: int, j: int, now: Pair | None = None) -> None:
        """Compute pair ``(i, j)`` and read the relevant scores it holds, for both sides."""
        s = self.products.read(i, j, now)
        self.rows_of[i].read_relevant(s, j)
        if not (self.symmetric and i == j):
            self.cols_of[j].read_relevant(s.T, i)
        self.read.add((i, j))

    def _start(self, qb: QueryBlock, needs: set[Pair], now: Pair) -> None:
        if id(qb) in self.started:
            return
        for i, j in sorted(needs - self.read):
            self.read_pair(i, j, now)
        qb.start_counting()
        self.started.add(id(qb))

    def _order(self) -> list[Pair]:
        """The pairs in the order they are counted: by column j; a set against itself from
        the diagonal pair up (``layout.symmetric_order``, which ``kept_at_most`` follows), two
        sets every pair of the column."""
        blocks_a, blocks_b = self.pairs.blocks_a, self.pairs.blocks_b
        if self.symmetric:
            return list(symmetric_order(blocks_b))
        return [(i, j) for j in range(blocks_b) for i in range(blocks_a)]

    def _folds(self, i: int, j: int) -> bool:
        """Whether pair ``(i, j)``, computed to be counted, may leave a half product's cosine
        factors per pair to the counting of both its blocks (``QueryBlock.folds_column_factor``:
        Triton's, which then reads each score once and never rewrites it)."""
        half = self.pairs.half
        if half is None or not half.pair_factors:
            return False
        rows, cols = self.rows_of[i], self.cols_of[j]
        return (
            rows.folds_column_factor() and not rows.reads_segment_maxima(j)
            and cols.folds_column_factor() and not cols.reads_segment_maxima(i)
        )

    def _count(self, i: int, j: int, s: Tensor, factors_left: bool = False) -> None:
        """Count product ``s`` of pair ``(i, j)`` for its columns' block and its rows' block
        (``factors_left``: ``s`` lacks its factors per pair, which the counting applies)."""
        rows, cols = self.rows_of[i], self.cols_of[j]
        block_a, block_b = self.pairs.block_a, self.pairs.block_b
        a_factor = b_factor = None
        if factors_left:
            a_factor, b_factor = self.pairs.factors(i, j)
            assert a_factor is not None and b_factor is not None
        both_sides = not (self.symmetric and i == j)
        if both_sides and not factors_left and count_both_sides(rows, cols, s, i, j):
            return
        if both_sides:
            # The columns first: the rows' exclusions are then written into s in place. (The
            # columns' factors per pair are the rows' swapped: a_i * b_j either way.)
            col_factors: dict = {} if a_factor is None else {
                "column_factor": a_factor, "row_factor": b_factor[: cols.nb]
            }
            maxima = cols.reads_segment_maxima(i)
            if cols.has_excluded(i):
                st = self.products.transposed_buffer().copy_(s.T)
                cols.mask_excluded(st, i)
                cols.count(
                    st[: cols.nb], segment_maxima(st)[: cols.nb] if maxima else None, i,
                    **col_factors,
                )
            else:
                seg_max = None
                if maxima:
                    seg_max = s.view(block_a // SEGMENT, SEGMENT, block_b).amax(1).T
                    seg_max = seg_max.contiguous()[: cols.nb]
                cols.count(
                    s.T[: cols.nb], seg_max, i, segment_values=column_segments(s),
                    buffer=self.products.transposed_buffer(), **col_factors,
                )
        rows.mask_excluded(s, j)
        seg_max = segment_maxima(s)[: rows.nb] if rows.reads_segment_maxima(j) else None
        row_factors: dict = {} if a_factor is None else {
            "column_factor": b_factor, "row_factor": a_factor[: rows.nb]
        }
        rows.count(s[: rows.nb], seg_max, j, **row_factors)

    def run(self) -> None:
        shared = self.shared
        column = -1
        for i, j in self._order():
            if shared is not None and j != column:
                shared.start(j)
                self.started.add(id(self.rows_of[j]))
            column = j
            if shared is not None and not shared.owns(i, j):
                continue
            self._start(self.rows_of[i], self.needs_rows[i], (i, j))
            self._start(self.cols_of[j], self.needs_cols[j], (i, j))
            s, factors_left = self.products.to_count(i, j, self._folds(i, j))
            self._count(i, j, s, factors_left)
            self.products.counted_out(s)
        if shared is not None:
            shared.finish()
        for qb in self.rows_of if self.symmetric else self.rows_of + self.cols_of:
            qb.finish()


def _query_blocks(p: Pass, num_blocks: int, block: int) -> list[QueryBlock]:
    return [QueryBlock(p, p.order[i * block : (i + 1) * block]) for i in range(num_blocks)]


@in_full_fp32  # ranks must not depend on TF32 or the device
def two_sided_pass(
    p_rows: Pass,
    p_cols: Pass | None,
    a: Tensor,
    b: Tensor,
    cache_room: int,
    exchange: Exchange | None = None,
    half: HalfProducts | None = None,
) -> None:
    """Each product of a block of ``a`` and a block of ``b`` serves the queries on both sides.

    ``S = A_i B_j^T`` gives block i of ``a`` its scores against block j of ``b`` (rows, for
    ``p_rows``) and block j of ``b`` its scores against block i of ``a`` (columns, ``S^T``, for
    ``p_cols``). With ``p_cols=None`` it is one set ranked against itself (``a`` is ``b``): only
    the pairs ``i <= j`` are computed, half of the full product. ``a`` and ``b`` are in
    processing order; block i of queries is block i of the gallery of the other side (``a`` in
    blocks of ``p_cols.block_g``, ``b`` of ``p_rows.block_g``). Up to ``cache_room`` products
    are kept between reading relevant scores and counting.

    With ``exchange`` (a set ranked against itself on several processes that all hold it), each
    process computes every ``world``-th block pair only (``shared.SharedPairs``), counting it for
    both of its sides: ``1 / world`` of the half product; every process finishes every query
    block, whole.
    """
    TwoSidedPass(p_rows, p_cols, a, b, cache_room, exchange, half).run()
