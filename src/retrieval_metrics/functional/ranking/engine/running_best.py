"""Each row's K best items of the score blocks seen so far, ties in column order: the lists a
run names (``top_lists.top_k``), kept block after block in bounded memory.

:class:`RunningBest` keeps them; a block's items enter a row only above its K-th kept score
(:func:`_entering`, the compiled pass where the counter takes it, the CPU's:
``kernels.entering_compiled``), and the first
blocks, before every row holds K items, are merged by a stable sort (:func:`_block_best`,
:func:`_merge`). Finding the entering items reads a size on the host at every block.

On an accelerator (a counter with ``whole_blocks``), where such a read is a wait for the device
at every block, :class:`UnwaitedBest` keeps the same lists with no host read: each block's
``K + 1`` best by ``torch.topk``, merged into the kept lists by the same stable sort. ``topk``
orders tied scores as it likes, so a block whose K-th and (K+1)-th best scores tie is marked on
the device (:attr:`UnwaitedBest.unsure`, read once when the lists are done) and its rows listed
again by ``UnwaitedBest(exact=True)``, which takes the tied columns at each block's cut
smallest first (:func:`_tie_ordered_best`, no host read either). The lists are the
same whichever keeps them (:func:`running_lists`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import flat_nonzero
from retrieval_metrics.functional.ranking.engine.counters import Counter
from retrieval_metrics.functional.ranking.engine.kernels import entering_compiled

__all__ = ["RunningBest", "UnwaitedBest", "running_lists"]


class RunningBest:
    """Each row's ``width`` best items of the score blocks seen so far, tied scores in column
    order (the blocks come in column order).

    Until every row holds ``width`` items, each block's best are merged with the kept lists
    (:func:`_block_best`, :func:`_merge`). From then on, a block's items scoring above their
    row's ``kth`` (the worst kept score when the lists were last sorted) are appended after the
    row's items, in column order, to a buffer of twice ``width`` places, and the buffer is
    sorted and cut to ``width`` (:meth:`_sort`) only when a block's items would not fit: a few
    sorts a run, where a merge of every block into the sorted lists rewrote every row's
    ``width`` places each block (top 1,000 of 2,000,000 x 768 items, 1,000 queries: 3.7 s of
    a run's 7.6 s outside its products on a 2-core host). ``kth`` stays as it was at the last
    sort, below the row's true ``width``-th score once items entered: more items enter than
    stay, and the sort drops them. An item tied with ``kth`` stays out (it comes after every
    kept item in tie order), and the stable sort keeps each tie in column order: the kept
    items (earlier columns) first, then the appended ones as they came."""

    def __init__(
        self, rows: int, width: int, dtype: torch.dtype, device: torch.device, counter: Counter
    ):
        self.width, self.counter = width, counter
        self.scores = torch.empty((rows, 0), dtype=dtype, device=device)
        self.cols = torch.empty((rows, 0), dtype=torch.int64, device=device)
        # the buffer, once every row holds width items: (rows, 2 width) scores and columns,
        # each row's items in its first ``filled`` places (-inf after them)
        self.filled: Tensor | None = None
        self.kth = self.scores
        #: at least as many places as the fullest row fills (a bound kept on the host: the
        #: most items a block adds to a row, summed; no wait for the device's counts)
        self.fullest = 0

    def add(self, s: Tensor, g0: int, masks: Tensor, product: Tensor) -> None:
        """The score block ``s`` (its first column the gallery's ``g0``), ``masks`` and
        ``product`` as :func:`_entering` takes them."""
        if self.filled is not None:
            entering = _entering(s, self.kth, self.width, masks, product, self.counter)
            if entering is not None:
                self._append(*entering, g0)
                return
            # more than width items enter a row: the block's best merged as the first
            # blocks' are (a stable sort of the buffer, its items in tie order, then theirs)
            self.filled = None
        s_scores, s_cols = _block_best(s, self.width, masks)
        self.scores, self.cols = _merge(self.scores, self.cols, s_scores, s_cols + g0,
                                        self.width)
        if self.scores.shape[1] == self.width:
            self._buffer()

    def lists(self) -> tuple[Tensor, Tensor]:
        """Each row's best ``(scores, columns)``, best first, ``(rows, width')``."""
        if self.filled is not None:
            self._sort()
        return self.scores[:, : self.width], self.cols[:, : self.width]

    def _buffer(self) -> None:
        """The sorted lists (``width`` items each) as the first half of a buffer twice as
        wide."""
        rows, width = self.scores.shape
        scores = torch.full((rows, 2 * width), float("-inf"), dtype=self.scores.dtype,
                            device=self.scores.device)
        cols = torch.zeros((rows, 2 * width), dtype=torch.int64, device=self.cols.device)
        scores[:, :width], cols[:, :width] = self.scores, self.cols
        self.scores, self.cols = scores, cols
        self.kth = scores[:, width - 1 : width].clone()
        self.filled = torch.full((rows, 1), width, dtype=torch.int64, device=scores.device)
        self.fullest = width

    def _append(
        self, values: Tensor, columns: Tensor, per_row: Tensor, most: int, g0: int
    ) -> None:
        """A block's entering items (:func:`_entering`: ``per_row`` a row, -inf padded to
        ``most``) after each row's items; the buffer sorted first where they might not fit."""
        if most == 0:
            return
        if self.fullest + most > self.scores.shape[1]:
            self._sort()
        places = self.filled + torch.arange(most, device=values.device)
        self.scores.scatter_(1, places, values)
        self.cols.scatter_(1, places, columns + g0)
        assert self.filled is not None
        self.filled += per_row.to(self.filled.device)
        self.fullest += most

    def _sort(self) -> None:
        """Each row's buffer sorted best first (stable: ties in column order), its ``width``
        best kept and the rest emptied; ``kth`` their worst."""
        width = self.width
        order = torch.argsort(self.scores, dim=1, descending=True, stable=True)[:, :width]
        best, best_cols = self.scores.gather(1, order), self.cols.gather(1, order)
        self.scores[:, :width], self.cols[:, :width] = best, best_cols
        self.scores[:, width:] = float("-inf")
        self.kth = best[:, width - 1 : width]
        assert self.filled is not None
        self.filled.fill_(width)
        self.fullest = width


class UnwaitedBest:
    """:class:`RunningBest`'s lists on an accelerator, with no wait for the device: each block's
    ``width + 1`` best items (``torch.topk``), their first ``width`` in column order, merged into
    the kept lists by :func:`_merge` (a stable sort: the kept items, from earlier columns, first
    among equal scores).

    An item outside its block's ``width`` best by (score, column) is outside every row's
    ``width`` best, so the merge is exact wherever ``topk`` took those: wherever the block's
    ``width``-th best score is above its next one. Where they tie, ``topk`` may have taken a
    later column of the tie; the row is marked in :attr:`unsure` (a bool per row, on the device,
    never read here), and the caller lists it again. Ties at -inf (the items no query lists)
    are never listed, and mark nothing.

    ``exact=True``: each block's best taken in the tie order (:func:`_tie_ordered_best`: a
    second ``topk`` for the columns tied at the cut), about twice the work a block and never
    unsure: the relisting of the rows the plain one marked."""

    def __init__(
        self, rows: int, width: int, dtype: torch.dtype, device: torch.device,
        counter: Counter | None = None, exact: bool = False,
    ):
        self.width, self.exact = width, exact
        self.scores = torch.empty((rows, 0), dtype=dtype, device=device)
        self.cols = torch.empty((rows, 0), dtype=torch.int64, device=device)
        #: rows whose lists may hold a later column of a tie than the tie order's (see above)
        self.unsure = torch.zeros(rows, dtype=torch.bool, device=device)

    def add(
        self, s: Tensor, g0: int, masks: Tensor | None = None, product: Tensor | None = None
    ) -> None:
        """The score block ``s`` (its first column the gallery's ``g0``); ``masks`` and
        ``product`` are :class:`RunningBest`'s, not needed here."""
        rows, n = s.shape
        if n <= self.width:
            scores, cols = s, torch.arange(n, device=s.device).expand(rows, n)
        elif self.exact:
            scores, cols = _tie_ordered_best(s, self.width)
        else:
            top = torch.topk(s, self.width + 1, dim=1)  # (best first)
            last, after = top.values[:, -2], top.values[:, -1]
            self.unsure |= (last == after) & (last > float("-inf"))
            # the block's best in column order: the merge's stable sort keeps it among ties
            cols, order = torch.sort(top.indices[:, :-1], dim=1)
            scores = top.values[:, :-1].gather(1, order)
        self.scores, self.cols = _merge(self.scores, self.cols, scores, cols + g0, self.width)

    def lists(self) -> tuple[Tensor, Tensor]:
        """Each row's best ``(scores, columns)``, best first, ``(rows, width')``; exact in the
        rows :attr:`unsure` leaves out."""
        return self.scores, self.cols


def _tie_ordered_best(s: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """The ``width`` best columns of each row of the score block ``s`` (``width`` below its
    columns) by score, tied scores by the smaller column, in column order, and their scores;
    no host read. ``topk`` gives the row's ``width``-th best score (the cut) and every item
    above it (an item above the cut outside ``topk``'s places would put ``width`` items above
    the cut); the places left go to the columns tied at the cut, smallest first: a second
    ``topk``, of a key that is ``n - column`` where a score ties the cut and -1 elsewhere."""
    n = s.shape[1]
    top = torch.topk(s, width, dim=1)  # (best first: its last, the cut)
    cut = top.values[:, -1:]
    above = top.values > cut
    places = width - above.sum(1, keepdim=True)  # (at least 1: the cut's own item)
    key = torch.where(
        s == cut, torch.arange(n, 0, -1, dtype=torch.int32, device=s.device), -1
    )
    tied = n - torch.topk(key, width, dim=1).values  # (the tied columns, smallest first)
    taken = torch.arange(width, device=s.device) < places
    # the columns kept, every other place given column n, which sorts after them: exactly
    # width of them (those above, then as many tied as places are left)
    cols = torch.cat([top.indices.masked_fill(~above, n), tied.masked_fill(~taken, n)], 1)
    cols = torch.sort(cols, dim=1).values[:, :width]
    return s.gather(1, cols), cols


def running_lists(
    rows: int, width: int, dtype: torch.dtype, device: torch.device, counter: Counter
) -> RunningBest | UnwaitedBest:
    """The running lists of a block of ``rows`` queries: :class:`UnwaitedBest` where the
    ranking's ``counter`` waits for nothing per block (``whole_blocks``: an accelerator's),
    else :class:`RunningBest`."""
    kind = UnwaitedBest if counter.whole_blocks else RunningBest
    return kind(rows, width, dtype, device, counter)


def _block_best(s: Tensor, width: int, masks: Tensor) -> tuple[Tensor, Tensor]:
    """The ``width`` best columns of each row of the score block ``s`` (columns in tie order:
    of equal scores the leftmost win), in column order, and their scores. ``masks``: a bool
    buffer of three blocks' entries, reused block after block (fresh masks of every block
    were left behind by the allocator: +30 MB a block)."""
    rows, n = s.shape
    if n <= width:
        return s, torch.arange(n, device=s.device).expand(rows, n)
    best = torch.topk(s, width, dim=1, sorted=False).values
    kth = best.amin(1, keepdim=True)
    above, at_kth, chosen = (masks[i * s.numel() : (i + 1) * s.numel()].view(rows, n)
                             for i in range(3))
    torch.gt(s, kth, out=above)
    torch.eq(s, kth, out=at_kth)
    torch.logical_or(above, at_kth, out=chosen)
    found = chosen.nonzero()
    if found.shape[0] != rows * width:
        # rows with more items tied at the K-th score than places left: the leftmost of them
        # (the places left counted among the K best: every score above the K-th is there; a
        # running count on those rows alone, where on every row it took 8 bytes a score)
        per_row = torch.bincount(found[:, 0], minlength=rows)
        surplus = flat_nonzero(per_row > width)
        need = width - (best.index_select(0, surplus) > kth.index_select(0, surplus)).sum(
            1, keepdim=True)
        tied = at_kth.index_select(0, surplus)
        chosen[surplus] = above.index_select(0, surplus) | (tied & (tied.cumsum(1) <= need))
        found = chosen.nonzero()
    cols = found[:, 1].view(rows, width)
    return s.gather(1, cols), cols


def _entering(
    s: Tensor, kth: Tensor, width: int, masks: Tensor, product: Tensor, counter: Counter
) -> tuple[Tensor, Tensor, Tensor, int] | None:
    """The items of the score block ``s`` that enter rows already holding ``width`` items,
    ``kth`` their worst kept scores: those scoring above it (a tied one comes after every kept
    item in tie order, and stays out). Per row in column order: ``(rows, most)`` scores
    (-inf padding) and columns, how many a row has (``(rows, 1)``) and ``most``; None where
    more than ``width`` enter a row (:func:`_block_best` then takes the block). A block lets
    about ``width`` times its share of the items seen so far in: a few, once several blocks
    were seen, which :class:`RunningBest` appends to its rows.
    ``product``: the rows of ``s`` whole (C-contiguous), for the compiled pass where
    ``counter`` takes it (the CPU's: ``kernels.entering_compiled``, a third of the time of the
    compare and ``nonzero`` here)."""
    rows, n = s.shape
    if counter.lists_compiled(product):
        compiled = entering_compiled(product, n, kth, width)
        if compiled is None:
            return None
        per_row, cols = compiled
        most = int(per_row.max()) if rows else 0
        missing = torch.arange(most) >= per_row[:, None]  # (each row's padding)
        columns = cols[:, :most].masked_fill(missing, 0)
        values = s.gather(1, columns).masked_fill(missing, float("-inf"))
    else:
        above = masks[: s.numel()].view(rows, n)
        torch.gt(s, kth, out=above)
        found = above.nonzero()  # (row, column), row-major: each row's in column order
        per_row = torch.bincount(found[:, 0], minlength=rows)
        most = int(per_row.max()) if rows else 0
        if most > width:
            return None
        starts = torch.cumsum(per_row, 0) - per_row
        place = torch.arange(found.shape[0], device=s.device) - starts.index_select(
            0, found[:, 0])
        values = torch.full((rows, most), float("-inf"), dtype=s.dtype, device=s.device)
        columns = torch.zeros((rows, most), dtype=torch.int64, device=s.device)
        values[found[:, 0], place] = s[found[:, 0], found[:, 1]]
        columns[found[:, 0], place] = found[:, 1]
    return values, columns, per_row.view(rows, 1), most


def _merge(
    scores: Tensor, cols: Tensor, new_scores: Tensor, new_cols: Tensor, width: int
) -> tuple[Tensor, Tensor]:
    """The ``width`` best of the kept (``scores``, ``cols``: tie order among equal scores) and a
    later block's (every column after the kept ones, in column order): a stable sort by score
    keeps the tie order."""
    all_scores = torch.cat([scores, new_scores], 1)
    all_cols = torch.cat([cols, new_cols], 1)
    order = torch.argsort(all_scores, dim=1, descending=True, stable=True)[:, :width]
    return all_scores.gather(1, order), all_cols.gather(1, order)
