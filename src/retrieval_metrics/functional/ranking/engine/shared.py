"""A ranking's work shared out over processes that all hold the same items.

:class:`SharedPairs` deals the block pairs of a symmetric pass out over the processes: each
computes every ``world``-th pair, counting it for both of its sides, and reads the relevant
scores of the pairs it owns; the blocks' relevant scores are combined one block ahead of the
counting, and at the end :func:`combine_counts` sums the histograms and keeps the highest depth
thresholds, so every process finishes every query block, whole. The one-sided pass shares its
query blocks instead, and :func:`combine_outputs` gathers their results. One collective each,
over every query block at once.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from retrieval_metrics.functional.ranking.engine.counting import QueryBlock
from retrieval_metrics.functional.ranking.engine.exchange import Exchange


class SharedPairs:
    """This process's share of the block pairs of a symmetric pass over ``exchange``.

    ``read_pair(i, j)`` computes pair ``(i, j)`` and reads its relevant scores into both of
    its blocks (the pass's own reading); the pairs that hold block ``k``'s relevant items are
    ``needs[k]``.
    """

    def __init__(
        self,
        exchange: Exchange,
        blocks: list[QueryBlock],
        needs: list[set[tuple[int, int]]],
        read_pair: Callable[[int, int], None],
    ) -> None:
        self.exchange, self.blocks, self.needs = exchange, blocks, needs
        self.read_pair = read_pair
        self.read: set[tuple[int, int]] = set()
        self.combining: dict[int, Callable[[], Tensor]] = {}
        self._read_ahead(0)

    def owns(self, i: int, j: int) -> bool:
        """Whether this process computes pair ``(i, j)``: the pairs numbered by column (j, then
        i <= j), dealt out in turn: equal shares of the products, and of the diagonal pairs,
        which count one side only."""
        return (j * (j + 1) // 2 + i) % self.exchange.world == self.exchange.rank

    def _read_ahead(self, k: int) -> None:
        """Block k's relevant scores from the pairs this process owns (the other processes read
        the rest), then their combination started: one block ahead of the counting, so that it
        runs while this process counts the block before."""
        for i, j in sorted(self.needs[k] - self.read):
            if self.owns(i, j):
                self.read_pair(i, j)
            self.read.add((i, j))
        # where another process read a score, this one holds the padding, +inf
        self.combining[k] = self.exchange.min_async(self.blocks[k].rel_scores.reshape(-1))

    def start(self, k: int) -> None:
        """Block ``k`` ready to count: every process's relevant scores combined (and block
        ``k + 1``'s reading started)."""
        if k + 1 < len(self.blocks):
            self._read_ahead(k + 1)
        qb = self.blocks[k]
        qb.rel_scores.copy_(self.combining.pop(k)().view_as(qb.rel_scores))
        qb.start_counting()

    def finish(self) -> None:
        combine_counts(self.blocks, self.exchange)


def combine_counts(blocks: list[QueryBlock], exchange: Exchange) -> None:
    """The histograms summed over processes, and the highest of their depth thresholds.

    Each process's threshold is a lower bound of every row's depth-th best score, so the highest
    is one too; and each process counted every item of its pairs at or above its own threshold,
    so the sums are exact for every relevant score at or above the highest."""
    hists = [h for qb in blocks for h in (qb.hist_lt, qb.hist_le)]
    for hist, part in zip(hists, _split_like(exchange.sum(torch.cat(hists)), hists), strict=True):
        hist.copy_(part)
    thresholds = [qb.thresholds.value for qb in blocks]
    combined = exchange.max(torch.cat(thresholds))
    for qb, part in zip(blocks, _split_like(combined, thresholds), strict=True):
        qb.thresholds.value = part


def combine_outputs(outputs: tuple[Tensor, ...], exchange: Exchange) -> None:
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
