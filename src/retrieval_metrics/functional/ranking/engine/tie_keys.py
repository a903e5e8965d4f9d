"""The items tied with a relevant pair that a tie key puts before it (``ties="id"``, or the
order of a run): per relevant pair of a query block, the items with its exact score and a
smaller key, counted beside the histograms of that block."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import flat_nonzero, to_device
from retrieval_metrics.functional.ranking.engine.direction import Pass


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
        counts = torch.empty_like(rel_keys)
        for j in range(values.shape[1]):
            tied = scores == values[:, j : j + 1]
            tied &= keys < rel_keys[:, j : j + 1]
            counts[:, j] = tied.sum(1)
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
