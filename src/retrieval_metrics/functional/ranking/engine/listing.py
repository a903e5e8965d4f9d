"""A run's lists kept by the ranking itself: each query's K best gallery items, taken from the
score blocks the one-sided pass counts, so that a table and a run come from one pass over the
products.

``retrieval-metrics evaluate --write-run`` ranks every query against the corpus for its table,
then wrote the run with ``top_lists.top_k``: the corpus read and multiplied a second time (a
2,000,000 x 768 corpus on disk, 1,000 queries: 12 s for the table, 14 s more for the run). Inside
:func:`listing`, every ranking the schedule makes (``schedule._ranked``) keeps its queries'
lists as well (:class:`PassLists`, with ``running_best``'s code, top_k's), where its lists are
top_k's: the one-sided pass on one process (its blocks cover every query x every gallery
item), the gallery in the order given (its columns are the items' places, the tie order of
``ties="position"``), every item kept, no ids ordering ties. Half rows on a device's tensor
cores too: the one-sided pass's cosine counts scores that lack each query's factor, and its
lists take the true cosines top_k lists from each block's product before its factors
(``tensor_cores.listing_half``; not where the gallery's norms are computed as the pass reads
it, a half corpus on disk, whose norms top_k computes otherwise). On an accelerator
the lists are kept with no host wait per block (``running_best.UnwaitedBest``); where a
block's cut may fall in a tie, :meth:`RunListing.found` gives None (one read of the device).
The pass then lets no query leave the products early (``QueryBlock.drop_finished``): a finished
query's table is the same, and its list needs every block. Any other ranking inside marks the
listing incomplete, and :meth:`RunListing.found` gives None: the caller lists with top_k.

The scores are those top_k computes for the same items (the products have the ranking's
shapes in both: ``engine.plan``), and so are the lists: the pairs the ranking leaves out are
masked in the blocks (a query itself, the items of its label and camera), which is what a run
leaves out (``relevance.left_out_of_lists``, the pairs the callers give top_k otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import to_device
from retrieval_metrics.functional.ranking.engine.counters import Counter
from retrieval_metrics.functional.ranking.engine.running_best import (
    RunningBest,
    UnwaitedBest,
    running_lists,
)

__all__ = ["PassLists", "RunListing", "listing", "open_listing"]


class PassLists:
    """One ranking's lists: ``(num_q, width)`` gallery columns and scores, each query block's
    written as the pass finishes it (:meth:`start`, :meth:`store`)."""

    def __init__(
        self, num_q: int, width: int, dtype: torch.dtype, device: torch.device, counter: Counter
    ):
        self.width, self.counter = width, counter
        self.cols = torch.full((num_q, width), -1, dtype=torch.int64, device=device)
        self.scores = torch.full((num_q, width), float("-inf"), dtype=dtype, device=device)
        self._dtype, self._device = dtype, device
        #: per query block listed without waits (an accelerator's: ``UnwaitedBest``), whether a
        #: row's lists may break a tie otherwise than the tie order (a bool on the device)
        self.unsure: list[Tensor] = []

    def start(self, rows: int) -> RunningBest | UnwaitedBest:
        """The running lists of a query block of ``rows`` queries."""
        return running_lists(rows, self.width, self._dtype, self._device, self.counter)

    def store(self, q_rows: Tensor, best: RunningBest | UnwaitedBest) -> None:
        """A query block's lists: ``q_rows`` its queries' places in the ranking's input."""
        scores, cols = best.lists()
        at = to_device(q_rows, self._device)  # (sent without waiting for the device)
        self.scores.index_copy_(0, at, scores)
        self.cols.index_copy_(0, at, cols)
        if isinstance(best, UnwaitedBest):
            self.unsure.append(best.unsure.any())


class RunListing:
    """The lists of the rankings made inside :func:`listing`, in the order they were made."""

    def __init__(self, k: int):
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"`k` must be a positive int, got {k!r}")
        self.k = k
        self._parts: list[PassLists] = []
        self.complete = True

    def add(self, lists: PassLists | None) -> None:
        """A ranking's lists; None: a ranking whose lists were not kept (see the module)."""
        if lists is None:
            self.complete = False
        else:
            self._parts.append(lists)

    def exact(self) -> bool:
        """Whether every ranking's lists are in the tie order: one read of the device for all
        of them, where blocks were listed without waits (an accelerator's)."""
        unsure = self._unsure()
        return unsure is None or not bool(unsure)

    def found(self, num_queries: int) -> tuple[Tensor, Tensor] | None:
        """Every query's gallery rows (``(num_queries, k')``, best first, -1 past the items a
        query lists) and their scores (-inf there), the rankings' queries one after another;
        None where a ranking was not listed, or the rankings held other than ``num_queries``
        queries (the caller then lists them itself)."""
        lists = self._joined(num_queries)
        if lists is None or not self.exact():
            # (ties at a block's cut that topk may have broken otherwise than by column: the
            # caller lists with top_k, which lists such query blocks again)
            return None
        return lists

    def unread(self, num_queries: int) -> tuple[Tensor, Tensor] | None:
        """:meth:`found`'s lists without the read of the device that says whether they are in
        the tie order: where they may not be, every row is -2 (for a caller that keeps them
        and reads once, later, whether they hold)."""
        lists = self._joined(num_queries)
        unsure = self._unsure()
        if lists is None or unsure is None:
            return lists
        return lists[0].masked_fill(unsure, -2), lists[1]

    def _joined(self, num_queries: int) -> tuple[Tensor, Tensor] | None:
        """Every ranking's lists one after another (-1 past a query's end), or None (see
        :meth:`found`)."""
        if not self.complete or not self._parts:
            return None
        if sum(part.cols.shape[0] for part in self._parts) != num_queries:
            return None
        if len({part.width for part in self._parts}) != 1:
            return None
        cols = torch.cat([part.cols for part in self._parts])
        scores = torch.cat([part.scores for part in self._parts])
        return cols.masked_fill(torch.isneginf(scores), -1), scores

    def _unsure(self) -> Tensor | None:
        """Whether a ranking's lists may break a tie otherwise than the tie order, a bool on
        the device; None where every block was listed waiting for its entries (the CPU's)."""
        flags = [flag for part in self._parts for flag in part.unsure]
        return torch.stack(flags).any() if flags else None


#: the listing the rankings of this context keep their lists for (None: none)
_OPEN: ContextVar[RunListing | None] = ContextVar("retrieval_metrics_run_listing", default=None)


@contextmanager
def listing(k: int) -> Iterator[RunListing]:
    """Keep each query's ``k`` best items of every ranking made inside (see the module)."""
    kept = RunListing(k)
    token = _OPEN.set(kept)
    try:
        yield kept
    finally:
        _OPEN.reset(token)


def open_listing() -> RunListing | None:
    """The listing open in this context, if any."""
    return _OPEN.get()
