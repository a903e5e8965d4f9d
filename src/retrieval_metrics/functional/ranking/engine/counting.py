"""One block of queries across the gallery: relevant scores, depth threshold and histograms.

A :class:`Pass` holds what every query block of one ranking shares; a :class:`QueryBlock` reads
its relevant scores, counts every gallery block once (the sparse way, item by item of the
segments that reach the threshold, or the dense way, the whole block: ``kernels``) and writes
above, tied and listed of its relevant pairs into the outputs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from retrieval_metrics.functional.csr import csr_rows
from retrieval_metrics.functional.primitives import flat_nonzero
from retrieval_metrics.functional.ranking.engine.direction import Pass
from retrieval_metrics.functional.ranking.engine.kernels import (
    SEGMENT,
    by_block,
    columnwise_max,
    compiled_for,
    count_block,
    count_candidates,
    floor_div,
    pairs_in_block,
    sort_rows,
)

THETA_EVERY = 4
#: Once a block of a query block was counted the dense way, the next ones are counted so
#: without their segment maxima (a weak model lets most items through everywhere), and every
#: this-many-th block looks at its maxima again: a pass over each block fewer. Which way a block
#: is counted changes the time only; both count every item that matters exactly.
DENSE_RECHECK = 16
# Relative costs of the two ways of counting a block (see QueryBlock.count): per item and
# relevant score copied in the sparse way, per item and search step in the dense way.
SPARSE_OVERHEAD = 8
DENSE_OVERHEAD = 8
#: Finished rows are dropped from a query block's products (QueryBlock.drop_finished) once
#: there are this many: a product's shortest block of rows (plan.PRODUCT_ROWS).
DROP_AT_LEAST = 8


class QueryBlock:
    """One block of queries: its relevant scores, threshold and histograms across the gallery.

    The ranking of a block goes through these steps, whatever the order of the gallery blocks:
    :meth:`read_relevant` on the blocks that hold relevant items (and :meth:`seed` the depth
    threshold with any block read early), :meth:`start_counting`, :meth:`count` every gallery
    block once, :meth:`finish`. Score blocks ``s`` are ``(rows, block_g)``, excluded pairs
    already at -inf (:meth:`mask_excluded`).
    """

    def __init__(self, p: Pass, q_rows: Tensor) -> None:
        self.p = p
        self.nb = nb = q_rows.numel()
        device = p.device
        self.r_row, self.r_col, self.r_pos = csr_rows(p.rel_ptr, q_rows)
        self.r_counts = p.rel_ptr[q_rows + 1] - p.rel_ptr[q_rows]
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
        self.e_row, self.e_gal = e_row[e_order].to(device), e_gal[e_order]
        self.e_bounds = torch.searchsorted(e_block[e_order], torch.arange(p.num_blocks_g + 1))
        m_blk = int(self.r_counts.max()) if nb else 0
        self.rel_scores = torch.full(
            (nb, max(m_blk, 1)), float("inf"), dtype=p.dtype, device=device
        )
        # flat positions in rel_scores: one-dimensional index_select and scatter_ are many times
        # cheaper than indexing with a (row, column) pair, and there is one per relevant pair
        self.r_flat = (self.r_row * self.rel_scores.shape[1] + self.r_col).to(device)
        # Every row as long as the longest (classes of equal size): then r_flat is 0, 1, 2, ...
        # and reading through it is a copy that can be skipped.
        self.dense = self.r_flat.numel() == self.rel_scores.numel()
        if p.ext_scores is not None:
            values = p.ext_scores.index_select(0, self.r_pos.to(device))
            if self.dense:
                self.rel_scores.view(-1).copy_(values)
            else:
                self.rel_scores.view(-1).scatter_(0, self.r_flat, values)
        self.before: Tensor | None = None
        if p.tie_key is not None:
            # each relevant pair's tie key where its score will be (+inf padding: never tied)
            keys = p.tie_key.index_select(0, r_gal.to(device))
            self.rel_keys = torch.zeros(self.rel_scores.shape, dtype=torch.int64, device=device)
            self.rel_keys.view(-1).scatter_(0, self.r_flat, keys)
            self.before = torch.zeros_like(self.rel_keys)
        if p.options.depth is not None:
            # Where each relevant item lies, by block and segment, to mask it from the maxima.
            seg_order = torch.argsort(self.r_block, stable=True)
            self.seg_rows = self.r_row[seg_order].to(device)
            self.seg_cols = (self.r_local // SEGMENT)[seg_order].to(device)
            self.seg_bounds = torch.searchsorted(
                self.r_block[seg_order], torch.arange(p.num_blocks_g + 1)
            )
        self.pending: list[Tensor] = []
        self.went_dense = False
        # Rows still ranked (local rows of the block; None: all of them), and what finish reads
        # of the whole block once rows are dropped (see drop_finished).
        self.kept: Tensor | None = None
        self._whole: tuple[int, Tensor, Tensor | None] | None = None
        options = p.options
        self.pruning = (
            options.depth is not None and not options.locate_first and device.type == "cpu"
        )

    def reads_segment_maxima(self, b: int) -> bool:
        """Whether counting gallery block ``b`` needs its segment maxima: to raise the depth
        threshold, and on the CPU to choose between the sparse and the dense count (see
        :data:`DENSE_RECHECK`). An accelerator counts every block whole and needs none, nor does
        a ranking that lets finished rows go (``pruning``) with the compiled count: its counts
        raise the threshold (:meth:`_raise_by_counts`), and a pass of the compiled count over
        the relevant scores still counted costs about what the maxima cost."""
        if self.p.device.type != "cpu":
            return False
        if self.pruning and self.compiled:
            return False
        return self.raising or not self.went_dense or b % DENSE_RECHECK == 0

    def relevant_blocks(self) -> list[int]:
        if self.p.ext_scores is not None:
            return []
        # a count per block, not a sort of every pair (torch.unique)
        counts = torch.bincount(self.r_block, minlength=self.p.num_blocks_g)
        return flat_nonzero(counts).tolist()

    def has_excluded(self, b: int) -> bool:
        return int(self.e_bounds[b + 1]) > int(self.e_bounds[b])

    def mask_excluded(self, s: Tensor, b: int) -> None:
        lo, hi = int(self.e_bounds[b]), int(self.e_bounds[b + 1])
        if hi > lo:
            local = (self.e_gal[lo:hi] - b * self.p.block_g).to(self.p.device)
            s[self.e_row[lo:hi], local] = self.p.neg_inf

    def read_relevant(self, s: Tensor, b: int) -> None:
        device = self.p.device
        if s.is_contiguous():
            pairs = pairs_in_block(self.block_order, self.block_bounds, b)
            if pairs.numel():
                at = self.r_row.index_select(0, pairs) * s.shape[1]
                at += self.r_local.index_select(0, pairs)
                pairs = pairs.to(device)
                self.rel_scores.view(-1).scatter_(
                    0,
                    pairs if self.dense else self.r_flat.index_select(0, pairs),
                    s.reshape(-1).index_select(0, at.to(device)),
                )
            return
        sel = self.r_block == b
        if bool(sel.any()):
            rows = self.r_row[sel].to(device)
            self.rel_scores[rows, self.r_col[sel].to(device)] = s[
                rows, self.r_local[sel].to(device)
            ]

    def read_pairs(self, s: Tensor, pairs: Tensor, columns: Tensor) -> None:
        """The relevant scores of the block's pairs ``pairs`` (indices of its relevant pairs),
        read from ``s`` at their rows and at ``columns``."""
        device = self.p.device
        values = s[self.r_row.index_select(0, pairs).to(device), columns.to(device)]
        pairs = pairs.to(device)
        self.rel_scores.view(-1).scatter_(
            0, pairs if self.dense else self.r_flat.index_select(0, pairs), values
        )

    def relevant_values(self) -> Tensor:
        return self._in_csr_order(self.rel_scores).cpu()

    def _in_csr_order(self, per_row: Tensor) -> Tensor:
        """The entries of a (rows x longest) array at the block's relevant pairs, in CSR order."""
        flat = per_row.reshape(-1)
        return flat if self.dense else flat.index_select(0, self.r_flat.to(flat.device))

    def _without_relevant(self, seg_max: Tensor, b: int) -> Tensor:
        """Segment maxima of block ``b``, -inf where a segment holds a relevant item."""
        lo, hi = int(self.seg_bounds[b]), int(self.seg_bounds[b + 1])
        if hi == lo:
            return seg_max
        masked = seg_max.clone()
        masked[self.seg_rows[lo:hi], self.seg_cols[lo:hi]] = self.p.neg_inf
        return masked

    def seed(self, seg_max: Tensor, b: int) -> None:
        """Let block ``b``, read before counting starts, raise the first depth threshold."""
        if self.p.options.depth is not None:
            self.pending.append(self._without_relevant(seg_max, b))

    def start_counting(self) -> None:
        p, nb = self.p, self.nb
        device, dtype = p.device, p.dtype
        neg_inf = p.neg_inf
        # Items never beat anything below the lowest relevant score; -0.0 and 0.0 must tie.
        self.rel_scores.add_(0.0)
        # +inf padding last; the permutation only to write back in CSR order
        self.rel_sorted, self.rel_perm = sort_rows(self.rel_scores, with_perm=not p.by_score)
        if self.before is not None:
            # the tie-key count compares with the scores where the keys are
            self.rel_unsorted = self.rel_scores
        del self.rel_scores
        rel_sorted = self.rel_sorted
        self.has_rel = self.r_counts.to(device) > 0
        is_finite = rel_sorted.isfinite()
        self.num_finite = is_finite.sum(1, keepdim=True)
        finite = torch.where(is_finite, rel_sorted, neg_inf)
        del is_finite
        self.best = finite.max(1).values
        self.lowest = rel_sorted[:, 0]
        self.threshold = torch.where(
            self.has_rel, self.lowest, torch.full_like(self.lowest, float("inf"))
        )
        if p.options.depth is not None:
            r_counts = self.r_counts
            block_depth = (
                r_counts.clamp_min(p.options.depth)
                if p.options.cover_relevant
                else torch.full_like(r_counts, p.options.depth)
            )
            self.top_width = int(block_depth.max()) if nb else p.options.depth
            self.depth_col = (block_depth - 1).to(device)[:, None]
            # A lower bound of each row's depth-th best score, from distinct items: the relevant
            # scores themselves, and the maxima of the segments that hold no relevant item.
            pad = torch.full((nb, self.top_width), float("-inf"), dtype=dtype, device=device)
            self.top_seg = torch.cat([pad, finite], 1)
        self._check_raising()
        self.theta_from_blocks = False
        self.width = rel_sorted.shape[1] + 1
        self.compiled = compiled_for(device, dtype, self.num_finite)
        # per row, its relevant scores (ascending) that depth counted items beat already: no
        # longer counted (see _raise_by_counts)
        self.first = (
            torch.zeros((nb, 1), dtype=torch.int64, device=device) if self.pruning else None
        )
        self.hist_lt = torch.zeros(nb * self.width, dtype=torch.int64, device=device)
        self.hist_le = torch.zeros(nb * self.width, dtype=torch.int64, device=device)

    def _check_raising(self) -> None:
        """Whether the threshold can still rise: it never passes a row's best relevant score, so
        rows with one relevant item (text-to-image), or already there, need no segment maxima.
        Without ``locate_first`` it may pass it: then the row is finished (see
        :meth:`drop_finished`)."""
        below = (
            self.threshold < self.best
            if self.p.options.locate_first
            else self.threshold <= self.best
        )
        self.raising = self.p.options.depth is not None and bool((self.has_rel & below).any())
        if not self.raising:
            self.pending = []

    def _raise_threshold(self) -> None:
        # The threshold may lag behind (any lower bound of the depth-th best score is correct),
        # so the segment maxima are merged every few blocks only.
        if self.pending and (len(self.pending) >= THETA_EVERY or not self.theta_from_blocks):
            self.theta_from_blocks = True
            merged = torch.cat([self.top_seg, *columnwise_max(self.pending)], 1)
            self.top_seg = merged.topk(self.top_width, dim=1).values
            self.pending = []
            theta = self.top_seg.gather(1, self.depth_col).squeeze(1)
            raised = torch.maximum(self.lowest, theta)
            if self.p.options.locate_first:
                raised = torch.minimum(self.best, raised)
            # (the counts may have raised it further: _raise_by_counts)
            self.threshold = torch.where(
                self.has_rel, torch.maximum(self.threshold, raised), self.threshold
            )
            self._check_raising()

    def _raise_by_counts(self) -> None:
        """Raise each row's threshold to its lowest relevant score that fewer than depth
        counted items beat (+inf where depth items beat them all: the row is finished).

        Exact however the gallery continues: the items counted above a relevant score only
        grow, and one that depth items beat lies below the depth for good. The histograms have
        that count at hand (the items with more than j relevant scores below them beat the j-th
        lowest), and since it falls as the scores rise, the scores beaten form a prefix of each
        row, whose length ``first`` the compiled count then passes over.
        """
        # (as finish reads above: totals minus prefix sums)
        prefix = self.hist_lt.view(self.nb, self.width).cumsum(1)
        above = prefix[:, -1:] - prefix[:, :-1]
        first = (above > self.depth_col).sum(1, keepdim=True)
        m = self.rel_sorted.shape[1]
        lowest_left = self.rel_sorted.gather(1, first.clamp_max(m - 1))[:, 0]
        lowest_left = torch.where(first[:, 0] < m, lowest_left, torch.inf)
        self.threshold = torch.where(
            self.has_rel, torch.maximum(self.threshold, lowest_left), self.threshold
        )
        self.first = first

    def drop_finished(self) -> Tensor | None:
        """Stop ranking the rows that are finished: without ``locate_first``, those whose
        threshold passed their best relevant score (depth items score above every relevant item
        of theirs: none is listed, whatever the rest of the gallery holds) and those without
        relevant items. Returns the local rows kept (the pass multiplies only those from now
        on; they index the rows as they were before this call), or None where nothing is
        dropped: fewer than a product's rows (``PRODUCT_ROWS``) of the block are finished."""
        if not self.pruning or self.nb == 0:
            return None
        finished = self.threshold > self.best  # (rows without relevant items: +inf > -inf)
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
        at = keep.to(self.p.device)
        for name in (
            "rel_sorted", "rel_perm", "has_rel", "num_finite", "best", "lowest", "threshold",
            "depth_col", "top_seg", "rel_unsorted", "rel_keys", "before", "first",
        ):
            value = getattr(self, name, None)
            if isinstance(value, Tensor):
                setattr(self, name, value.index_select(0, at))
        self.pending = [maxima.index_select(0, at) for maxima in self.pending]
        self.hist_lt = self.hist_lt.view(old_nb, self.width).index_select(0, at).view(-1)
        self.hist_le = self.hist_le.view(old_nb, self.width).index_select(0, at).view(-1)
        self.nb = keep.numel()
        # the excluded pairs and the relevant items' segments: rows renumbered, dropped rows' gone
        new_row = torch.full((old_nb,), -1, dtype=torch.int64)
        new_row[keep] = torch.arange(keep.numel())
        self.e_row, self.e_bounds, self.e_gal = _renumbered(
            new_row, self.e_row, self.e_bounds, self.e_gal
        )
        if self.p.options.depth is not None:
            self.seg_rows, self.seg_bounds, self.seg_cols = _renumbered(
                new_row, self.seg_rows, self.seg_bounds, self.seg_cols
            )

    def _whole_block(self) -> None:
        """Back to every row of the block for finish: a dropped row lists none of its
        relevant items (threshold +inf) and counted nothing."""
        if self._whole is None or self.kept is None:
            return
        nb, rel_sorted, rel_perm = self._whole
        at = self.kept.to(self.p.device)

        def spread(rows: Tensor, fill: float) -> Tensor:
            whole = torch.full((nb, *rows.shape[1:]), fill, dtype=rows.dtype, device=rows.device)
            return whole.index_copy_(0, at, rows)

        self.hist_lt = spread(self.hist_lt.view(self.nb, self.width), 0).view(-1)
        self.hist_le = spread(self.hist_le.view(self.nb, self.width), 0).view(-1)
        self.threshold = spread(self.threshold, float("inf"))
        if self.before is not None:
            self.before = spread(self.before, 0)
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
    ) -> None:
        """Add gallery block ``b`` (scores ``s``, segment maxima ``seg_max``: None where
        :meth:`reads_segment_maxima` says they are not needed) to the histograms.

        ``s`` may be a view that is not row-major (the transposed block of the symmetric pass);
        then ``segment_values`` reads the scores of flat segment indices for the sparse count,
        and the dense count copies it row-major into ``buffer`` (at least as large; a new
        tensor without one). With a tie key, also the tied items of a smaller key.
        """
        def count_items() -> None:
            self._count_items(s, seg_max, b, seeded, segment_values, buffer)

        if self.before is None:
            count_items()
        else:
            self._count_with_keys(s, b, count_items)
        if self.pruning and b % THETA_EVERY == 0:
            # (every few blocks: a threshold that lags behind is still exact)
            self._raise_by_counts()

    def _count_with_keys(self, s: Tensor, b: int, count_items: Callable[[], None]) -> None:
        """``count_items()``, then the tied items of a smaller key of block ``b``."""
        rows = None
        if s.device.type == "cpu":
            # Only the rows where this block ties a relevant score. While counting, hist_le
            # holds each item's "<=" bin minus its "<" bin (finish adds hist_lt back): nothing
            # for an item that ties no relevant score, and for one that does a -1 in a lower bin
            # than its +1, so the lowest such bin of a row loses what no item gives back. The
            # rows whose hist_le moved are exactly those. An accelerator compares every row
            # instead of waiting for this test.
            before = self.hist_le.clone()
            count_items()
            moved = self.hist_le.ne(before).view(self.nb, self.width).any(1)
            if not bool(moved.any()):
                return
            rows = flat_nonzero(moved)
        else:
            count_items()
        self._count_before(s, b, rows)

    def _count_before(self, s: Tensor, b: int, rows: Tensor | None) -> None:
        """Per relevant pair of ``rows`` (None: every row), the items of block ``b`` with its
        exact score and a smaller tie key. The relevant item itself has its own key, not a
        smaller one; an excluded item scores -inf, a relevant score is finite."""
        p = self.p
        start = b * p.block_g
        width = min(p.block_g, p.num_g - start)
        keys = p.tie_key[start : start + width]
        scores, values, rel_keys = s[:, :width], self.rel_unsorted, self.rel_keys
        if rows is not None:
            scores = scores.index_select(0, rows)
            values, rel_keys = values.index_select(0, rows), rel_keys.index_select(0, rows)
        counts = torch.empty_like(rel_keys)
        for j in range(values.shape[1]):
            tied = scores == values[:, j : j + 1]
            tied &= keys < rel_keys[:, j : j + 1]
            counts[:, j] = tied.sum(1)
        if rows is None:
            self.before += counts
        else:
            self.before.index_add_(0, rows, counts)

    def _count_items(
        self,
        s: Tensor,
        seg_max: Tensor | None,
        b: int,
        seeded: bool,
        segment_values: Callable[[Tensor], Tensor] | None,
        buffer: Tensor | None,
    ) -> None:

        def row_major() -> Tensor:
            if s.is_contiguous():
                return s
            return s.contiguous() if buffer is None else buffer[: s.shape[0]].copy_(s)

        if s.device.type != "cpu":
            # An accelerator counts the whole block in a few kernels. The pruning's choices
            # (the threshold's rise, the surviving segments, sparse or dense) each read a
            # data-dependent size on the host: one wait per block pair, where the product takes
            # microseconds. Every item counted makes every count exact, and the threshold that
            # never rose lists every relevant item: the same values as the CPU's.
            dense = row_major()
            count_block(
                dense, self.rel_sorted, self.hist_lt, self.hist_le, self.p.budget,
                self.num_finite,
            )
            return
        if seg_max is None:  # a block after a dense one (see DENSE_RECHECK), or pruning
            count_block(
                row_major(), self.rel_sorted, self.hist_lt, self.hist_le, self.p.budget,
                self.num_finite, self.first,
            )
            return
        if self.raising:
            if not seeded:
                self.seed(seg_max, b)
            self._raise_threshold()
        candidates = flat_nonzero((seg_max >= self.threshold[:, None]).reshape(-1))
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
                self.threshold,
                self.rel_sorted,
                self.hist_lt,
                self.hist_le,
                self.p.budget,
                segment_values,
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
        listed_sorted = self.rel_sorted >= self.threshold[:, None]
        if self.p.by_score:
            # The j-th smallest of a row's m relevant scores goes to place m - 1 - j of its query
            # (each row's m scores sort first: the padding is +inf). The flat positions of
            # (row, j < m) are those of the CSR entries (row, column j): r_flat.
            dest = self.r_pos + (self.r_counts.index_select(0, self.r_row) - 1 - 2 * self.r_col)
            # without a depth every relevant item is listed, as the outputs start
            written = 3 if self.p.options.depth is not None else 2
            for out, sorted_values in zip(
                self.p.outputs[:written], (above_sorted, tied_sorted, listed_sorted), strict=False
            ):
                out.index_copy_(0, dest, self._in_csr_order(sorted_values).cpu())
            return
        # Back from sorted order to the CSR order of the relevant items.
        if self.before is not None:
            # (counted where the scores were read: in CSR layout already)
            self.p.outputs[3].scatter_(0, self.r_pos, self._in_csr_order(self.before).cpu())
        for out, sorted_values in zip(
            self.p.outputs[:3], (above_sorted, tied_sorted, listed_sorted), strict=True
        ):
            unsorted = torch.empty_like(sorted_values)
            unsorted.scatter_(1, self.rel_perm, sorted_values)
            out.scatter_(0, self.r_pos, self._in_csr_order(unsorted).cpu())


def _renumbered(
    new_row: Tensor, rows: Tensor, bounds: Tensor, other: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Entries grouped by gallery block (``bounds``) with their query block ``rows`` (and a
    second field ``other``), less those of dropped rows (``new_row`` -1), rows renumbered."""
    mapped = new_row.index_select(0, rows.cpu())
    keep = mapped >= 0
    before = torch.zeros(keep.numel() + 1, dtype=torch.int64)
    torch.cumsum(keep, 0, out=before[1:])
    return (
        mapped[keep].to(rows.device),
        before.index_select(0, bounds),
        other[keep.to(other.device)],
    )
