"""Each row's threshold of a query block: the score below which no item needs counting.

It starts at the row's lowest relevant score (nothing below it is above a relevant item) and,
where the ranking stops at a depth, rises to a lower bound of the row's depth-th best score:
from the maxima of the gallery's segments that hold no relevant item
(:meth:`RowThresholds.raise_from_maxima`), from the counts themselves
(:meth:`RowThresholds.raise_by_counts`), or, in the compiled count, from a heap of the best
scores the row has seen (:meth:`RowThresholds.heap`). A threshold that lags behind is still
exact; it only lets more items through to be counted.
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import to_device
from retrieval_metrics.functional.ranking.engine.direction import Pass
from retrieval_metrics.functional.ranking.engine.kernels import SEGMENT, columnwise_max

#: The segment maxima of this many gallery blocks are merged into the threshold at once.
THETA_EVERY = 4


class RowThresholds:
    """The thresholds of one query block's rows (``value``), and what raises them.

    ``r_row`` and ``r_local``: each relevant pair's row and place in its gallery block, to mask
    relevant items from the segment maxima; ``block_order`` and ``block_bounds``: the pairs by
    gallery block (:func:`~retrieval_metrics.functional.ranking.engine.kernels.by_block`);
    ``depth``: the depth the thresholds rise to, None where they stay at each row's lowest
    relevant score (``QueryBlock._threshold_depth``).
    :meth:`start` once the relevant scores are read; then :meth:`seed` and
    :meth:`raise_from_maxima` with each gallery block's segment maxima, :meth:`raise_by_counts`
    with the histograms.
    """

    def __init__(
        self, p: Pass, r_row: Tensor, r_local: Tensor, block_order: Tensor, block_bounds: Tensor,
        depth: int | None,
    ) -> None:
        self.p = p
        # None: the thresholds never rise (a backend that counts every item of every block,
        # or a depth whose heaps would cost more than the counts: QueryBlock._threshold_depth);
        # nothing to prepare for it, nothing to read back
        self.depth = depth
        self.locate_first = p.options.locate_first
        self.pending: list[Tensor] = []
        self.raising = False
        # where each relevant item lies, by block and segment, to mask it from the maxima (in
        # the query block's order of its pairs by gallery block: no sort of its own); made
        # where segment maxima are first read (_segments): the compiled count above the
        # thresholds reads none
        self._pairs: tuple[Tensor, Tensor, Tensor] | None = (r_row, r_local, block_order)
        self.seg_bounds = block_bounds

    def start(self, rel_sorted: Tensor, finite: Tensor, r_counts: Tensor) -> None:
        """From each row's relevant scores: ``rel_sorted`` ascending (+inf padding last),
        ``finite`` the same with -inf padding, ``r_counts`` their numbers."""
        p, nb = self.p, rel_sorted.shape[0]
        device = p.device
        self.has_rel = to_device(r_counts, device) > 0
        self.best = finite.max(1).values
        self.lowest = rel_sorted[:, 0]
        self.value = torch.where(
            self.has_rel, self.lowest, torch.full_like(self.lowest, float("inf"))
        )
        if self.depth is not None:
            block_depth = (
                r_counts.clamp_min(self.depth)
                if p.options.cover_relevant
                else torch.full_like(r_counts, self.depth)
            )
            self.top_width = int(block_depth.max()) if nb else self.depth
            self.depth_col = to_device(block_depth - 1, device)[:, None]
            # A lower bound of each row's depth-th best score, from distinct items: the relevant
            # scores themselves, and the maxima of the segments that hold no relevant item.
            pad = torch.full((nb, self.top_width), float("-inf"), dtype=p.dtype, device=device)
            self.top_seg = torch.cat([pad, finite], 1)
        self._check_raising()
        self.from_blocks = False

    def heap(self) -> tuple[Tensor, Tensor, Tensor]:
        """What the compiled count (``kernels.count_above``) raises the thresholds with, where
        the ranking stops at a depth: per row, a min-heap of the depth best scores of distinct
        items known so far (its relevant scores: the items it counts that tie none join it),
        the heap's size, and the cap (the best relevant score with ``locate_first``)."""
        width = self.top_width
        k = self.depth_col + 1
        best_first = self.top_seg.topk(width, dim=1).values
        # ascending in each row's first k places: a sorted row is a min-heap
        places = (k - 1 - torch.arange(width, device=k.device)).clamp_min(0)
        heap = best_first.gather(1, places).contiguous()
        cap = self.best if self.locate_first else torch.full_like(self.best, float("inf"))
        return heap, k.contiguous(), cap.contiguous()

    def _check_raising(self) -> None:
        """Whether a threshold can still rise: it never passes a row's best relevant score, so
        rows with one relevant item (text-to-image), or already there, need no segment maxima.
        Without ``locate_first`` it may pass it: then the row is finished (see
        :meth:`finished`)."""
        below = self.value < self.best if self.locate_first else self.value <= self.best
        self.raising = self.depth is not None and bool((self.has_rel & below).any())
        if not self.raising:
            self.pending = []

    def _segments(self) -> None:
        """Each relevant pair's row and segment (``seg_rows``, ``seg_cols``) on the device."""
        if self._pairs is not None:
            r_row, r_local, block_order = self._pairs
            device = self.p.device
            self.seg_rows = to_device(r_row.index_select(0, block_order), device)
            self.seg_cols = to_device((r_local // SEGMENT).index_select(0, block_order), device)
            self._pairs = None

    def without_relevant(self, seg_max: Tensor, b: int) -> Tensor:
        """Segment maxima of block ``b``, -inf where a segment holds a relevant item."""
        lo, hi = int(self.seg_bounds[b]), int(self.seg_bounds[b + 1])
        if hi == lo:
            return seg_max
        self._segments()
        masked = seg_max.clone()
        masked[self.seg_rows[lo:hi], self.seg_cols[lo:hi]] = self.p.neg_inf
        return masked

    def seed(self, seg_max: Tensor, b: int) -> None:
        """Keep block ``b``'s segment maxima for the next rise (before counting starts too)."""
        if self.depth is not None:
            self.pending.append(self.without_relevant(seg_max, b))

    def raise_from_maxima(self) -> None:
        # Any lower bound of the depth-th best score is correct, so the segment maxima are
        # merged every few blocks only.
        if self.pending and (len(self.pending) >= THETA_EVERY or not self.from_blocks):
            self.from_blocks = True
            merged = torch.cat([self.top_seg, *columnwise_max(self.pending)], 1)
            self.top_seg = merged.topk(self.top_width, dim=1).values
            self.pending = []
            theta = self.top_seg.gather(1, self.depth_col).squeeze(1)
            raised = torch.maximum(self.lowest, theta)
            if self.locate_first:
                raised = torch.minimum(self.best, raised)
            # (the counts may have raised it further: raise_by_counts)
            self.value = torch.where(self.has_rel, torch.maximum(self.value, raised), self.value)
            self._check_raising()

    def raise_by_counts(self, hist_lt: Tensor, rel_sorted: Tensor) -> Tensor:
        """Raise each row's threshold to its lowest relevant score that fewer than depth
        counted items beat (+inf where depth items beat them all: the row is finished); returns
        how many of each row's relevant scores (ascending) depth items beat, ``(rows, 1)``.

        Exact however the gallery continues: the items counted above a relevant score only
        grow, and one that depth items beat lies below the depth for good. The histograms
        (``hist_lt``: rows x bins) have that count at hand (the items with more than j relevant
        scores below them beat the j-th lowest), and since it falls as the scores rise, the
        scores beaten form a prefix of each row, which the compiled count then passes over.
        """
        # (as QueryBlock.finish reads above: totals minus prefix sums)
        prefix = hist_lt.cumsum(1)
        above = prefix[:, -1:] - prefix[:, :-1]
        first = (above > self.depth_col).sum(1, keepdim=True)
        m = rel_sorted.shape[1]
        lowest_left = rel_sorted.gather(1, first.clamp_max(m - 1))[:, 0]
        lowest_left = torch.where(first[:, 0] < m, lowest_left, torch.inf)
        self.value = torch.where(
            self.has_rel, torch.maximum(self.value, lowest_left), self.value
        )
        return first

    def finished(self) -> Tensor:
        """The rows whose threshold passed their best relevant score: depth items score above
        every relevant item of theirs (and the rows without relevant items: +inf > -inf)."""
        return self.value > self.best

    def keep_rows(self, at: Tensor, new_row: Tensor) -> None:
        """Shorten to the rows ``at`` (on the device); ``new_row``: each old row's new number,
        -1 where dropped (on the host)."""
        for name in ("has_rel", "best", "lowest", "value", "depth_col", "top_seg"):
            value = getattr(self, name, None)
            if isinstance(value, Tensor):
                setattr(self, name, value.index_select(0, at))
        self.pending = [maxima.index_select(0, at) for maxima in self.pending]
        if self.depth is not None:
            self._segments()
            self.seg_rows, self.seg_bounds, self.seg_cols = renumbered(
                new_row, self.seg_rows, self.seg_bounds, self.seg_cols
            )


def renumbered(
    new_row: Tensor, rows: Tensor, bounds: Tensor, other: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Entries grouped by gallery block (``bounds``) with their query block ``rows`` (and a
    second field ``other``), less those of dropped rows (``new_row`` -1), rows renumbered."""
    mapped = new_row.index_select(0, rows.cpu())
    keep = mapped >= 0
    before = torch.zeros(keep.numel() + 1, dtype=torch.int64)
    torch.cumsum(keep, 0, out=before[1:])
    return (
        to_device(mapped[keep], rows.device),
        before.index_select(0, bounds),
        other[to_device(keep, other.device)],
    )
