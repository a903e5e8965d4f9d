"""One block of queries across the gallery: relevant scores and histograms.

A :class:`Pass` holds what every query block of one ranking shares; a :class:`QueryBlock` reads
its relevant scores, counts every gallery block once and writes above, tied and listed of its
relevant pairs into the outputs. On the CPU where the compiled count is built, a block is one
pass over the items at or above each row's threshold (``kernels.count_above``; a block of the
two-sided pass once for both of its sides, :func:`count_both_sides`); otherwise the sparse way,
item by item of the segments whose maxima reach each row's threshold, or the dense way, the
whole block (``kernels``). Beside it: the rows' thresholds (``threshold``) and the tied items a
tie key puts first (``tie_keys``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from retrieval_metrics.functional.csr import csr_rows
from retrieval_metrics.functional.primitives import flat_nonzero, to_device
from retrieval_metrics.functional.ranking.engine.direction import Pass
from retrieval_metrics.functional.ranking.engine.kernels import (
    COMPILED_MAX_RELEVANT,
    SEGMENT,
    above_arrays,
    by_block,
    compiled_for,
    count_above,
    count_above_both,
    count_block,
    count_candidates,
    floor_div,
    pairs_in_block,
)
from retrieval_metrics.functional.ranking.engine.threshold import (
    THETA_EVERY,
    RowThresholds,
    renumbered,
)
from retrieval_metrics.functional.ranking.engine.tie_keys import TieKeyCounts

__all__ = ["DENSE_RECHECK", "Pass", "QueryBlock", "count_both_sides"]

#: Once a block of a query block was counted the dense way, the next ones are counted so
#: without their segment maxima (a weak model lets most items through everywhere), and every
#: this-many-th block looks at its maxima again: a pass over each block fewer. Which way a block
#: is counted changes the time only; both count every item that matters exactly.
DENSE_RECHECK = 16
# Relative costs of the two ways of counting a block (see QueryBlock.count): per item and
# relevant score copied in the sparse way, per item and search step in the dense way.
SPARSE_OVERHEAD = 8
DENSE_OVERHEAD = 8
#: A row's relevant scores below its depth-th best are left out of the counting
#: (QueryBlock._top_relevant) where that leaves at most 1/this of the block's width.
TOP_RELEVANT_GAIN = 2
#: The cost of a push into a row's heap of its best scores (QueryBlock._threshold_depth), in
#: units of a counted item's cost (_count.c's SPARSE_COST): 75 ns against 0.3 ns on an AMD
#: EPYC, where depths 100 to 1,000 over a weak model's 4,000 items cost 2x to 9x the whole
#: count and depth 10 over 16,000 items in classes of 160 a third of it.
HEAP_PUSH_COST = 250
#: Finished rows are dropped from a query block's products (QueryBlock.drop_finished) once
#: there are this many: a product's shortest block of rows (plan.PRODUCT_ROWS).
DROP_AT_LEAST = 8


class QueryBlock:
    """One block of queries: its relevant scores, thresholds and histograms across the gallery.

    The ranking of a block goes through these steps, whatever the order of the gallery blocks:
    :meth:`read_relevant` on the blocks that hold relevant items (and :meth:`seed` the depth
    thresholds with any block read early), :meth:`start_counting`, :meth:`count` every gallery
    block once, :meth:`finish`. Score blocks ``s`` are ``(rows, block_g)``, excluded pairs
    already at -inf (:meth:`mask_excluded`).
    """

    def __init__(self, p: Pass, q_rows: Tensor) -> None:
        self.p = p
        self.nb = nb = q_rows.numel()
        device = p.device
        self.r_row, self.r_col, self.r_pos = csr_rows(p.rel_ptr, q_rows)
        self.row_start = p.rel_ptr[q_rows]
        self.r_counts = p.rel_ptr[q_rows + 1] - self.row_start
        r_gal = p.rel_index.index_select(0, self.r_pos)
        if p.num_blocks_g <= 1:
            # one gallery block (many relevant items per query widen it): nothing to group
            self.r_block = torch.zeros_like(r_gal)
            self.r_local = r_gal
        else:
            self.r_block = floor_div(r_gal, p.block_g)
            self.r_local = r_gal - self.r_block * p.block_g
        self.block_order, self.block_bounds = by_block(self.r_block, p.num_blocks_g)
        # Excluded pairs of this block, by gallery block.
        e_row, _, e_pos = csr_rows(p.ex_ptr, q_rows)
        e_gal = p.ex_index[e_pos]
        e_block = e_gal // p.block_g
        e_order = torch.argsort(e_block, stable=True)
        self.e_row, self.e_gal = to_device(e_row[e_order], device), e_gal[e_order]
        self.e_bounds = torch.searchsorted(e_block[e_order], torch.arange(p.num_blocks_g + 1))
        m_blk = int(self.r_counts.max()) if nb else 0
        self.rel_scores = torch.full(
            (nb, max(m_blk, 1)), float("inf"), dtype=p.dtype, device=device
        )
        # flat positions in rel_scores: one-dimensional index_select and scatter_ are many times
        # cheaper than indexing with a (row, column) pair, and there is one per relevant pair
        self.r_flat = to_device(self.r_row * self.rel_scores.shape[1] + self.r_col, device)
        # Every row as long as the longest (classes of equal size): then r_flat is 0, 1, 2, ...
        # and reading through it is a copy that can be skipped.
        self.dense = self.r_flat.numel() == self.rel_scores.numel()
        if p.ext_scores is not None:
            values = p.ext_scores.index_select(0, to_device(self.r_pos, device))
            if self.dense:
                self.rel_scores.view(-1).copy_(values)
            else:
                self.rel_scores.view(-1).scatter_(0, self.r_flat, values)
        self.ties = (
            None if p.tie_key is None
            else TieKeyCounts(p, tuple(self.rel_scores.shape), self.r_flat, r_gal)
        )
        #: whether the rows count only their best relevant scores (see _keeps_top)
        self.keeps_top = self._keeps_top()
        #: the depth the rows' thresholds rise to (see _threshold_depth)
        self.threshold_depth = self._threshold_depth()
        self.thresholds = RowThresholds(
            p, self.r_row, self.r_local, self.block_order, self.block_bounds,
            self.threshold_depth,
        )
        self.went_dense = False
        # each row's number of relevant scores counted, where not all (see _top_relevant)
        self.num_top: Tensor | None = None
        # counted by count_above (see start_counting)
        self.above_only = False
        self.heap: tuple[Tensor, Tensor, Tensor] | None = None
        # Rows still ranked (local rows of the block; None: all of them), and what finish reads
        # of the whole block once rows are dropped (see drop_finished).
        self.kept: Tensor | None = None
        self._whole: tuple[int, Tensor, Tensor | None] | None = None
        options = p.options
        self.pruning = (
            options.depth is not None and not options.locate_first
            and not p.counter.whole_blocks
        )

    def seeds_from_maxima(self) -> bool:
        """Whether the blocks read before counting starts seed the depth thresholds with their
        segment maxima (:meth:`seed`): not where the compiled pass will count above the
        thresholds (``above_only``), whose heaps start from the relevant scores and never read
        the seeds. Known before the relevant scores are read: a row holds at most its relevant
        items' count of finite relevant scores, so where the counts allow the compiled pass,
        :meth:`start_counting` takes it."""
        p = self.p
        if self.threshold_depth is None:
            return False
        # (rows that count their depth best relevant scores only, _top_relevant, are mostly
        # that short: where ties at the cut make them longer, no seeds is as exact)
        counts = self.r_counts.clamp_max(p.options.depth) if self.keeps_top else self.r_counts
        return self.pruning or not compiled_for(p.dtype, counts)

    def folds_column_factor(self) -> bool:
        """Whether :meth:`count` may be given a block's scores before their factors (a half
        product's cosine: ``s_ij * 1/|g_j|`` one-sided, ``s_ij * (1/|a_i| * 1/|b_j|)`` where a
        block is read both ways), the counting backend applying them as it reads each score: a
        backend that folds them, counting every block whole, and nothing else reading the
        block's scores (a tie key compares them itself)."""
        counter = self.p.counter
        return counter.whole_blocks and counter.folds_column_factor and self.ties is None

    def reads_segment_maxima(self, b: int) -> bool:
        """Whether counting gallery block ``b`` needs its segment maxima: to raise the depth
        threshold, and on the CPU to choose between the sparse and the dense count (see
        :data:`DENSE_RECHECK`). An accelerator counts every block whole and needs none, nor
        does the compiled pass over the items above the thresholds (``above_only``), whose
        heaps raise them, nor a ranking that lets finished rows go (``pruning``) with the
        compiled count: its counts raise the threshold (``RowThresholds.raise_by_counts``), and
        a pass of the compiled count over the relevant scores still counted costs about what
        the maxima cost."""
        if self.p.counter.whole_blocks or self.above_only:
            return False
        if self.pruning and self.compiled:
            return False
        return self.thresholds.raising or not self.went_dense or b % DENSE_RECHECK == 0

    def relevant_blocks(self) -> list[int]:
        if self.p.ext_scores is not None:
            return []
        if self.p.num_blocks_g <= 1:  # (a huge class's millions of pairs: no count of them)
            return [0] if self.r_block.numel() else []
        # a count per block, not a sort of every pair (torch.unique)
        counts = torch.bincount(self.r_block, minlength=self.p.num_blocks_g)
        return flat_nonzero(counts).tolist()

    def has_excluded(self, b: int) -> bool:
        return int(self.e_bounds[b + 1]) > int(self.e_bounds[b])

    def mask_excluded(self, s: Tensor, b: int) -> None:
        lo, hi = int(self.e_bounds[b]), int(self.e_bounds[b + 1])
        if hi > lo:
            local = to_device(self.e_gal[lo:hi] - b * self.p.block_g, self.p.device)
            s[self.e_row[lo:hi], local] = self.p.neg_inf

    def read_relevant(self, s: Tensor, b: int) -> None:
        device = self.p.device
        if s.is_contiguous() and self.p.num_blocks_g <= 1:
            # one gallery block holds every pair, in CSR order: read at their places, no
            # selection of them first (a huge class's millions of pairs, copied three times)
            at = self.r_row * s.shape[1]
            at += self.r_local
            values = s.reshape(-1).index_select(0, to_device(at, device))
            if self.dense:
                self.rel_scores.view(-1).copy_(values)
            else:
                self.rel_scores.view(-1).scatter_(0, self.r_flat, values)
            return
        if s.is_contiguous():
            pairs = pairs_in_block(self.block_order, self.block_bounds, b)
            if pairs.numel():
                at = self.r_row.index_select(0, pairs) * s.shape[1]
                at += self.r_local.index_select(0, pairs)
                pairs = to_device(pairs, device)
                self.rel_scores.view(-1).scatter_(
                    0,
                    pairs if self.dense else self.r_flat.index_select(0, pairs),
                    s.reshape(-1).index_select(0, to_device(at, device)),
                )
            return
        sel = self.r_block == b
        if bool(sel.any()):
            rows = to_device(self.r_row[sel], device)
            self.rel_scores[rows, to_device(self.r_col[sel], device)] = s[
                rows, to_device(self.r_local[sel], device)
            ]

    def read_pairs(self, s: Tensor, pairs: Tensor, columns: Tensor) -> None:
        """The relevant scores of the block's pairs ``pairs`` (indices of its relevant pairs),
        read from ``s`` at their rows and at ``columns``."""
        device = self.p.device
        values = s[
            to_device(self.r_row.index_select(0, pairs), device), to_device(columns, device)
        ]
        pairs = to_device(pairs, device)
        self.rel_scores.view(-1).scatter_(
            0, pairs if self.dense else self.r_flat.index_select(0, pairs), values
        )

    def relevant_values(self) -> Tensor:
        """The block's relevant scores in CSR order, on the ranking's device."""
        return self._in_csr_order(self.rel_scores)

    def _in_csr_order(self, per_row: Tensor) -> Tensor:
        """The entries of a (rows x longest) array at the block's relevant pairs, in CSR order."""
        flat = per_row.reshape(-1)
        return flat if self.dense else flat.index_select(0, to_device(self.r_flat, flat.device))

    def seed(self, seg_max: Tensor, b: int) -> None:
        """Let block ``b``, read before counting starts, raise the first depth thresholds."""
        self.thresholds.seed(seg_max, b)

    def start_counting(self) -> None:
        p, nb = self.p, self.nb
        device = p.device
        # Items never beat anything below the lowest relevant score; -0.0 and 0.0 must tie.
        self.rel_scores.add_(0.0)
        top = self._top_relevant()
        if top is None:
            # +inf padding last; the permutation only to write back in CSR order
            self.rel_sorted, self.rel_perm = p.counter.sort_rows(
                self.rel_scores, with_perm=not p.by_score
            )
        else:
            self.rel_sorted, self.rel_perm, self.num_top = top
        if self.ties is not None:
            # the tie-key count compares with the scores where the keys are
            self.ties.start(self.rel_scores)
        del self.rel_scores
        rel_sorted = self.rel_sorted
        is_finite = rel_sorted.isfinite()
        self.num_finite = is_finite.sum(1, keepdim=True)
        finite = torch.where(is_finite, rel_sorted, p.neg_inf)
        del is_finite
        self.thresholds.start(rel_sorted, finite, self.r_counts)
        self.width = rel_sorted.shape[1] + 1
        self.compiled = not p.counter.whole_blocks and compiled_for(p.dtype, self.num_finite)
        # The compiled pass over the items above each row's threshold, which it raises itself
        # (from a heap of each row's best scores): no segment maxima, no candidates. Not where
        # finished rows leave the ranking (``pruning``), whose thresholds rise from the counts.
        self.above_only = self.compiled and not self.pruning
        if self.above_only and self.threshold_depth is not None:
            self.heap = self.thresholds.heap()
        # per row, its relevant scores (ascending) that depth counted items beat already: no
        # longer counted (see RowThresholds.raise_by_counts)
        self.first = (
            torch.zeros((nb, 1), dtype=torch.int64, device=device) if self.pruning else None
        )
        self.hist_lt = torch.zeros(nb * self.width, dtype=torch.int64, device=device)
        self.hist_le = torch.zeros(nb * self.width, dtype=torch.int64, device=device)

    def _threshold_depth(self) -> int | None:
        """The depth the rows' thresholds rise to; None: they stay at each row's lowest
        relevant score, and every item above it is counted (the ranking's depth still lists
        its items: ``Direction.table``, as where every block is counted whole).

        Rising to a depth d keeps a heap of each row's d best scores, which a weak model
        (nearly every item a new best early on, about d (1 + ln(n / d)) pushes in a row of n
        items) feeds at HEAP_PUSH_COST a push, where counting an item costs about 1 + f / 4
        (f relevant scores; see _count.c): at depth 1,000 over 4,000 items in classes of 40,
        14x the whole count. A block whose pushes would cost more than counting every item of
        its rows counts them all: the same counts. Not where rows leave the ranking once
        finished (``pruning``: their products are saved), nor where a backend counts whole
        blocks (no thresholds at all)."""
        p = self.p
        options = p.options
        depth = options.depth
        if depth is None or p.counter.whole_blocks:
            return None
        if not options.locate_first or self.nb == 0:
            return depth
        if not compiled_for(p.dtype, self.r_counts[:0]):
            return depth  # (without the compiled count, the whole count is torch's: slower)
        most = int(self.r_counts.max())
        width = max(depth, most) if options.cover_relevant else depth
        # (a huge class counts its depth best relevant scores only: _top_relevant)
        counted = depth if self.keeps_top else most
        if counted > COMPILED_MAX_RELEVANT:
            # rows this long rise to a depth by segment maxima, not by the compiled heaps, and
            # are counted whole by the compiled sort of each row: about as fast
            return None
        n = max(p.num_g, 1)
        pushes = width * (1 + math.log(max(n / width, 1.0)))
        return depth if pushes * HEAP_PUSH_COST < n * (1 + counted / 4) else None

    def _keeps_top(self) -> bool:
        """Whether the rows count only their best relevant scores (:meth:`_top_relevant`): a
        ranking stopped at a depth that need not cover every relevant item, counted block by
        block on the CPU, without ties ordered by key or given scores, whose widest row holds
        at least TOP_RELEVANT_GAIN times the depth (ties at the cut may still keep them all)."""
        p = self.p
        depth = p.options.depth
        return (
            depth is not None and not p.options.cover_relevant and self.ties is None
            and p.ext_scores is None and not p.counter.whole_blocks and self.nb > 0
            and int(self.r_counts.max()) >= TOP_RELEVANT_GAIN * depth
        )

    def _top_relevant(self) -> tuple[Tensor, Tensor, Tensor] | None:
        """Each row's relevant scores that a ranking stopped at a depth can list: those at or
        above the row's depth-th best relevant score, ascending (+inf padding last), with their
        columns (the padding's: the rows' width) and their number per row. A relevant item
        below that score has depth relevant items above it: it lies below the depth, and below
        the row's best relevant item, whatever the rest of the gallery holds, so leaving it
        out of the counting changes no value (:meth:`finish` writes it not listed). With a huge
        class (thousands of relevant items a row, ``hit_rate@1``) this spares sorting every
        relevant score and counting the items above each. None: every score is counted (no
        depth, or one that covers every relevant item; ties ordered by key; given scores;
        rows little longer than the depth, or ties at the cut that keep most of them); and
        where a backend counts every block whole (an accelerator's), to which the kept width
        would be one more read on the host a block."""
        if not self.keeps_top:
            return None
        depth = self.p.options.depth
        assert depth is not None
        rel = self.rel_scores
        width = rel.shape[1]
        padding = rel == float("inf")
        # -inf scores above the padding (still kept where the cut falls among them: keeping
        # more than needed is exact too); the values kept are read from rel itself
        key = rel.clamp_min(torch.finfo(rel.dtype).min).masked_fill_(padding, float("-inf"))
        cut = key.topk(depth, dim=1).values[:, -1:]
        num_top = ((key >= cut) & ~padding).sum(1)
        kept_width = int(num_top.max()) if num_top.numel() else 0
        if TOP_RELEVANT_GAIN * kept_width > width:
            return None
        best_first = key.topk(max(kept_width, 1), dim=1).indices
        # ascending: place j of a row that keeps c scores holds its (c - 1 - j)-th best
        places = torch.arange(best_first.shape[1])
        valid = places < num_top[:, None]
        columns = best_first.gather(1, (num_top[:, None] - 1 - places).clamp_min(0))
        columns = columns.masked_fill_(~valid, width)
        values = rel.gather(1, columns.clamp_max(width - 1)).masked_fill_(~valid, float("inf"))
        return values, columns, num_top

    def drop_finished(self) -> Tensor | None:
        """Stop ranking the rows that are finished: without ``locate_first``, those whose
        threshold passed their best relevant score (depth items score above every relevant item
        of theirs: none is listed, whatever the rest of the gallery holds) and those without
        relevant items. Returns the local rows kept (the pass multiplies only those from now
        on; they index the rows as they were before this call), or None where nothing is
        dropped: fewer than a product's rows (``PRODUCT_ROWS``) of the block are finished."""
        if not self.pruning or self.nb == 0:
            return None
        finished = self.thresholds.finished()
        done = int(finished.sum())
        if done == 0 or done < min(self.nb, DROP_AT_LEAST):
            return None
        keep = flat_nonzero(~finished)
        self._keep_rows(keep)
        return keep

    def _keep_rows(self, keep: Tensor) -> None:
        """Shorten every per-row state of the counting to the rows ``keep``."""
        if self._whole is None:
            # finish writes every row of the block: what it reads of the dropped ones
            self._whole = (self.nb, self.rel_sorted, self.rel_perm)
            self.kept = keep
        else:
            assert self.kept is not None
            self.kept = self.kept.index_select(0, keep)
        old_nb = self.nb
        at = to_device(keep, self.p.device)
        for name in ("rel_sorted", "rel_perm", "num_finite", "first"):
            value = getattr(self, name, None)
            if isinstance(value, Tensor):
                setattr(self, name, value.index_select(0, at))
        if self.ties is not None:
            self.ties.keep_rows(at)
        self.hist_lt = self.hist_lt.view(old_nb, self.width).index_select(0, at).view(-1)
        self.hist_le = self.hist_le.view(old_nb, self.width).index_select(0, at).view(-1)
        self.nb = keep.numel()
        # the excluded pairs and the relevant items' segments: rows renumbered, dropped rows' gone
        new_row = torch.full((old_nb,), -1, dtype=torch.int64)
        new_row[keep] = torch.arange(keep.numel())
        self.e_row, self.e_bounds, self.e_gal = renumbered(
            new_row, self.e_row, self.e_bounds, self.e_gal
        )
        self.thresholds.keep_rows(at, new_row)

    def _whole_block(self) -> None:
        """Back to every row of the block for finish: a dropped row lists none of its
        relevant items (threshold +inf) and counted nothing."""
        if self._whole is None or self.kept is None:
            return
        nb, rel_sorted, rel_perm = self._whole
        at = to_device(self.kept, self.p.device)

        def spread(rows: Tensor, fill: float) -> Tensor:
            whole = torch.full((nb, *rows.shape[1:]), fill, dtype=rows.dtype, device=rows.device)
            return whole.index_copy_(0, at, rows)

        self.hist_lt = spread(self.hist_lt.view(self.nb, self.width), 0).view(-1)
        self.hist_le = spread(self.hist_le.view(self.nb, self.width), 0).view(-1)
        self.thresholds.value = spread(self.thresholds.value, float("inf"))
        if self.ties is not None:
            self.ties.spread(spread)
        self.rel_sorted, self.rel_perm, self.nb = rel_sorted, rel_perm, nb
        self._whole = self.kept = None

    def count(
        self,
        s: Tensor,
        seg_max: Tensor | None,
        b: int,
        seeded: bool = False,
        segment_values: Callable[[Tensor], Tensor] | None = None,
        buffer: Tensor | None = None,
        column_factor: Tensor | None = None,
        row_factor: Tensor | None = None,
    ) -> None:
        """Add gallery block ``b`` (scores ``s``, segment maxima ``seg_max``: None where
        :meth:`reads_segment_maxima` says they are not needed) to the histograms.

        ``s`` may be a view that is not row-major (the transposed block of the symmetric pass);
        then ``segment_values`` reads the scores of flat segment indices for the sparse count,
        and the dense count copies it row-major into ``buffer`` (at least as large; a new
        tensor without one). With a tie key, also the tied items of a smaller key.
        ``column_factor``: the block's scores are ``s`` times it, column by column (with
        ``row_factor``, times ``row_factor[:, None] * column_factor[None, :]``), applied by the
        counting backend as it reads them (:meth:`folds_column_factor`).
        """
        if column_factor is not None and not self.folds_column_factor():
            raise ValueError("this block's counting cannot take a factor per column")

        def count_items() -> None:
            self._count_items(
                s, seg_max, b, seeded, segment_values, buffer, column_factor, row_factor
            )

        if self.ties is None:
            count_items()
        else:
            self.ties.count(s, b, count_items, self.hist_le, self.width)
        if self.pruning and b % THETA_EVERY == 0:
            # (every few blocks: a threshold that lags behind is still exact)
            self.first = self.thresholds.raise_by_counts(
                self.hist_lt.view(self.nb, self.width), self.rel_sorted
            )

    def _count_items(
        self,
        s: Tensor,
        seg_max: Tensor | None,
        b: int,
        seeded: bool,
        segment_values: Callable[[Tensor], Tensor] | None,
        buffer: Tensor | None,
        column_factor: Tensor | None = None,
        row_factor: Tensor | None = None,
    ) -> None:

        def row_major() -> Tensor:
            if s.is_contiguous():
                return s
            return s.contiguous() if buffer is None else buffer[: s.shape[0]].copy_(s)

        if self.p.counter.whole_blocks:
            # An accelerator counts the whole block in a few kernels (or one). The pruning's
            # choices (the threshold's rise, the surviving segments, sparse or dense) each read
            # a data-dependent size on the host: one wait per block pair, where the product
            # takes microseconds. Every item counted makes every count exact, and the threshold
            # that never rose lists every relevant item: the same values as the CPU's.
            counter = self.p.counter
            counter.count_whole(
                s if counter.reads_strided else row_major(), self.rel_sorted, self.hist_lt,
                self.hist_le, self.p.budget, self.num_finite, column_factor, row_factor,
            )
            return
        if self.above_only:
            count_above(s, self.above_arrays())
            return
        if seg_max is None:  # a block after a dense one (see DENSE_RECHECK), or pruning
            count_block(
                row_major(), self.rel_sorted, self.hist_lt, self.hist_le, self.p.budget,
                self.num_finite, self.first,
            )
            return
        thresholds = self.thresholds
        if thresholds.raising:
            if not seeded:
                thresholds.seed(seg_max, b)
            thresholds.raise_from_maxima()
        candidates = flat_nonzero((seg_max >= thresholds.value[:, None]).reshape(-1))
        self.went_dense = False
        if candidates.numel() == 0:
            return
        nb, width = self.nb, self.width
        block_g = s.shape[1]
        # Copying each surviving item's row of relevant scores costs about `width` per item;
        # searching the whole block costs about log2(width) per item of the block. Weak
        # models, ties and large classes let nearly every item through: search the block.
        if candidates.numel() * SEGMENT * (width + SPARSE_OVERHEAD) > nb * block_g * (
            width.bit_length() + DENSE_OVERHEAD
        ):
            self.went_dense = True
            dense = row_major()
            count_block(
                dense, self.rel_sorted, self.hist_lt, self.hist_le, self.p.budget,
                self.num_finite, self.first,
            )
        else:
            count_candidates(
                s,
                candidates,
                thresholds.value,
                self.rel_sorted,
                self.hist_lt,
                self.hist_le,
                self.p.budget,
                segment_values,
            )

    def above_arrays(self) -> tuple:
        """The block's state as the compiled pass over the items above the thresholds takes it
        (``above_only``): thresholds, relevant scores, histograms and heaps, written in place."""
        return above_arrays(
            self.thresholds.value, self.rel_sorted, self.num_finite, self.hist_lt, self.hist_le,
            self.heap,
        )

    def finish(self) -> None:
        """Write above, tied and listed of every relevant pair into the outputs (CSR order)."""
        self._whole_block()
        nb, width = self.nb, self.width
        hist_le = self.hist_le
        hist_le += self.hist_lt
        # above of the j-th smallest relevant score = items with "count below" > j.
        # As totals minus prefix sums, in place: these are (rows x relevant items) each.
        prefix_lt = self.hist_lt.view(nb, width).cumsum_(1)
        prefix_le = hist_le.view(nb, width).cumsum_(1)
        above_sorted = prefix_lt[:, -1:] - prefix_lt[:, :-1]
        tied_sorted = (prefix_le[:, -1:] - prefix_le[:, :-1]).sub_(above_sorted)
        del self.hist_lt, self.hist_le, prefix_lt, prefix_le, hist_le
        listed_sorted = self.rel_sorted >= self.thresholds.value[:, None]
        if self.num_top is not None:
            self._write_top((above_sorted, tied_sorted, listed_sorted))
            return
        if self.p.by_score:
            # The j-th smallest of a row's m relevant scores goes to place m - 1 - j of its query
            # (each row's m scores sort first: the padding is +inf). The flat positions of
            # (row, j < m) are those of the CSR entries (row, column j): r_flat.
            dest = self.r_pos + (self.r_counts.index_select(0, self.r_row) - 1 - 2 * self.r_col)
            dest = to_device(dest, self.p.device)
            # without a depth every relevant item is listed, as the outputs start
            written = 3 if self.p.options.depth is not None else 2
            for out, sorted_values in zip(
                self.p.outputs[:written], (above_sorted, tied_sorted, listed_sorted), strict=False
            ):
                out.index_copy_(0, dest, self._in_csr_order(sorted_values))
            return
        r_pos = to_device(self.r_pos, self.p.device)
        # Back from sorted order to the CSR order of the relevant items.
        if self.ties is not None:
            # (counted where the scores were read: in CSR layout already)
            self.p.outputs[3].scatter_(0, r_pos, self._in_csr_order(self.ties.before))
        for out, sorted_values in zip(
            self.p.outputs[:3], (above_sorted, tied_sorted, listed_sorted), strict=True
        ):
            unsorted = torch.empty_like(sorted_values)
            unsorted.scatter_(1, self.rel_perm, sorted_values)
            out.scatter_(0, r_pos, self._in_csr_order(unsorted))

    def _write_top(self, sorted_values: tuple[Tensor, Tensor, Tensor]) -> None:
        """:meth:`finish` where each row counted its top relevant scores only
        (:meth:`_top_relevant`): every relevant pair of the block written not listed (what
        their above and tied hold is read nowhere: ``Direction.table`` reads the listed
        items'), then the counted ones at their places (with ``by_score``, place c - 1 - j of
        its query for the j-th smallest of c; else its CSR column)."""
        outputs = self.p.outputs
        outputs[2].index_fill_(0, self.r_pos, False)
        num_top = self.num_top
        rows, places = (torch.arange(self.rel_sorted.shape[1]) < num_top[:, None]).nonzero(
            as_tuple=True
        )
        if self.p.by_score:
            columns = num_top.index_select(0, rows) - 1 - places
        else:
            columns = self.rel_perm[rows, places]
        dest = self.row_start.index_select(0, rows) + columns
        for out, values in zip(outputs[:3], sorted_values, strict=True):
            out.index_copy_(0, dest, values[rows, places])


def count_both_sides(rows: QueryBlock, cols: QueryBlock, s: Tensor, i: int, j: int) -> bool:
    """Count the product ``s`` of the pair (``i``, ``j``) of a two-sided pass for the query
    block of its rows (``rows``, against gallery block ``j``) and of its columns (``cols``,
    against gallery block ``i``) in one pass over ``s`` (``kernels.count_above_both``), where
    both count only the items above their thresholds with nothing else to do: no tie key, no
    excluded pair in the block. Returns whether it counted them (else each side counts alone)."""
    if not (
        rows.above_only and cols.above_only and rows.ties is None and cols.ties is None
        and s.is_contiguous() and not rows.has_excluded(j) and not cols.has_excluded(i)
    ):
        return False
    count_above_both(s, cols.above_arrays(), rows.above_arrays())
    return True
