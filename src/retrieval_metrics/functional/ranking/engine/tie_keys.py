"""The items tied with a relevant pair that a tie key puts before it (``ties="id"``, or the
order of a run): per relevant pair of a query block, the items with its exact score and a
smaller key, counted beside the histograms of that block."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import flat_nonzero, to_device
from retrieval_metrics.functional.ranking.engine.direction import Pass

#: relevant scores per row up to which each is compared with the block's items (four
#: operations over the block each); rows of more are counted by one sort of the block
#: (:func:`_counts_by_sorting`), so that a block's work does not grow with a class's size
COMPARED_RELEVANT = 6


def _counts_by_sorting(scores: Tensor, keys: Tensor, values: Tensor, rel_keys: Tensor) -> Tensor:
    """Per relevant pair ``(values[r, j], rel_keys[r, j])``, the items ``i`` of row ``r`` of
    ``scores`` with ``scores[r, i] == values[r, j]`` and ``keys[i] < rel_keys[r, j]``.

    Each row's items are sorted by (score, key): the columns in key order, then a stable sort
    by score. A pair's count is then where it would go in that order less where its score's run
    starts, found by searches: a fixed number of operations whatever the pairs per row. The
    sorted rows are about four times the block's scores, so they are made a part of the rows at
    a time, within the scratch the plan gives the block's scores."""
    num_rows, width = scores.shape
    counts = torch.zeros_like(rel_keys)
    if not num_rows or not width:
        return counts
    in_key_order = torch.argsort(keys, stable=True)
    sorted_keys = keys.index_select(0, in_key_order)
    # each column's key as the number of smaller keys (equal keys alike), in key order
    key_rank = torch.searchsorted(sorted_keys, sorted_keys)
    # (a pair's key as the same number, among the block's keys)
    pair_key_rank = torch.searchsorted(sorted_keys, rel_keys.contiguous())
    per_row = 2 * scores.element_size() + 3 * 8
    step = max(1, 2 * num_rows * scores.element_size() // per_row)
    for lo in range(0, num_rows, step):
        hi = min(num_rows, lo + step)
        part = scores[lo:hi].index_select(1, in_key_order)
        ordered, where = torch.sort(part, dim=1, stable=True)
        del part
        new_run = torch.ones_like(ordered, dtype=torch.bool)
        torch.ne(ordered[:, 1:], ordered[:, :-1], out=new_run[:, 1:])
        # (run, key rank) as one increasing number: the run's index times the width, plus rank
        order_key = new_run.cumsum(1).sub_(1).mul_(width)
        order_key += key_rank.index_select(0, where.view(-1)).view_as(where)
        del new_run, where
        wanted = values[lo:hi].contiguous()
        start = torch.searchsorted(ordered, wanted)  # items scoring below the pair
        at = start.clamp(max=width - 1)
        tied = ordered.gather(1, at) == wanted  # (its score's run exists in the row)
        pair_key = order_key.gather(1, at).div_(width, rounding_mode="floor").mul_(width)
        pair_key += pair_key_rank[lo:hi]
        before = torch.searchsorted(order_key, pair_key).sub_(start)
        counts[lo:hi] = torch.where(tied, before, 0)
    return counts


class TieKeyCounts:
    """``before``: per relevant pair of a query block (laid out as its relevant scores, rows x
    longest row), the items of a smaller tie key with its exact score.

    ``r_flat``: each relevant pair's flat place in that layout; ``r_gal``: its gallery item.
    """

    def __init__(self, p: Pass, shape: tuple[int, int], r_flat: Tensor, r_gal: Tensor) -> None:
        assert p.tie_key is not None
        self.p = p
        device = p.device
        # each relevant pair's tie key where its score will be (+inf padding: never tied)
        keys = p.tie_key.index_select(0, to_device(r_gal, device))
        self.rel_keys = torch.zeros(shape, dtype=torch.int64, device=device)
        self.rel_keys.view(-1).scatter_(0, r_flat, keys)
        self.before = torch.zeros_like(self.rel_keys)

    def start(self, rel_scores: Tensor) -> None:
        """The relevant scores where the keys are (not sorted): what the counts compare with."""
        self.rel_scores = rel_scores

    def count(
        self, s: Tensor, b: int, count_items: Callable[[], None], hist_le: Tensor, width: int
    ) -> None:
        """``count_items()`` (the block's histograms), then the tied items of a smaller key of
        gallery block ``b`` (scores ``s``); ``hist_le``: the block's "<=" histogram of
        ``width`` bins a row, which ``count_items`` adds to."""
        rows = None
        if not self.p.counter.whole_blocks:
            # Only the rows where this block ties a relevant score. While counting, hist_le
            # holds each item's "<=" bin minus its "<" bin (finish adds hist_lt back): nothing
            # for an item that ties no relevant score, and for one that does a -1 in a lower bin
            # than its +1, so the lowest such bin of a row loses what no item gives back. The
            # rows whose hist_le moved are exactly those. An accelerator compares every row
            # instead of waiting for this test.
            before = hist_le.clone()
            count_items()
            moved = hist_le.ne(before).view(-1, width).any(1)
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
        assert p.tie_key is not None
        start = b * p.block_g
        width = min(p.block_g, p.num_g - start)
        keys = p.tie_key[start : start + width]
        scores, values, rel_keys = s[:, :width], self.rel_scores, self.rel_keys
        if rows is not None:
            scores = scores.index_select(0, rows)
            values, rel_keys = values.index_select(0, rows), rel_keys.index_select(0, rows)
        if values.shape[1] <= COMPARED_RELEVANT:
            counts = torch.empty_like(rel_keys)
            for j in range(values.shape[1]):
                tied = scores == values[:, j : j + 1]
                tied &= keys < rel_keys[:, j : j + 1]
                counts[:, j] = tied.sum(1)
        else:
            counts = _counts_by_sorting(scores, keys, values, rel_keys)
        if rows is None:
            self.before += counts
        else:
            self.before.index_add_(0, rows, counts)

    def keep_rows(self, at: Tensor) -> None:
        """Shorten to the rows ``at`` (see QueryBlock.drop_finished)."""
        self.rel_scores = self.rel_scores.index_select(0, at)
        self.rel_keys = self.rel_keys.index_select(0, at)
        self.before = self.before.index_select(0, at)

    def spread(self, spread: Callable[[Tensor, float], Tensor]) -> None:
        """Back to every row of the block (a dropped row counted nothing)."""
        self.before = spread(self.before, 0)
