"""One direction of a ranking (queries against a gallery): what the engine is given
(:class:`RankingInput`), its relevance in processing order, its outputs and its table
(:class:`Direction`), and what every query block of it shares (:class:`Pass`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import (
    flat_nonzero,
    is_identity,
    repeat,
    to_device,
    to_host,
)
from retrieval_metrics.functional.ranking.engine.counters import Counter, choose_counter
from retrieval_metrics.functional.ranking.engine.similarity import may_read_in_blocks
from retrieval_metrics.functional.ranking.relevance import Relevance
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.functional.ranking.table_build import ItemResults, table_from_items
from retrieval_metrics.functional.table import RankTable

#: what a direction's outputs hold (see :class:`Direction`)
Mode = Literal["table", "scores", "count"]


@dataclass(frozen=True)
class RankingInput:
    """One direction of a ranking as the engine is given it: ``query`` ``(Q, D)`` against
    ``gallery`` ``(N, D)``, every gallery item (``relevance.gallery_index`` says which are kept).

    ``query_key`` and ``gallery_key`` (e.g. labels; the latter aligned with the kept gallery)
    only change the order in which items are processed, so that each query block's relevant
    items sit in one or two gallery blocks; results come back in input order. ``symmetric``:
    ``gallery`` holds the queries themselves (the caller says so), so the score matrix is
    symmetric and each block pair may serve the queries of both of its sides. ``gallery`` may
    be held in batches (:class:`RowBatches`, a corpus updated in batches): the ranking reads it
    a block at a time where it can, and joins it where it cannot.
    """

    query: Tensor
    gallery: Tensor | RowBatches
    relevance: Relevance
    query_key: Tensor | None = None
    gallery_key: Tensor | None = None
    symmetric: bool = False
    tie_key: Tensor | None = None


@dataclass
class Pass:
    """What every query block of one ranking shares: the gallery's layout and the options.

    ``budget``: the bytes this pass's kept score blocks and counting may use, its share of
    ``options.memory_budget`` (see ``plan``; the settings stay as the caller made them).

    ``rel_index`` and ``ex_index`` are gallery positions in processing order; ``rel_ptr`` and
    ``ex_ptr`` are indexed by the query's input position; queries are processed in ``order``.
    Query blocks write their results into ``outputs`` (see :meth:`QueryBlock.finish`): in the
    CSR order of the relevant items, or with ``by_score`` each query's by decreasing score.
    ``ext_scores``: given scores that play the part of the relevant items' (a sharded gallery's
    counting). ``tie_key``: the gallery's tie order in processing order (on ``device``); with
    it each query block also counts, per relevant pair, the tied items of a smaller key, into
    the fourth output.
    """

    device: torch.device
    dtype: torch.dtype
    num_g: int
    block_g: int
    rel_ptr: Tensor
    rel_index: Tensor
    ex_ptr: Tensor
    ex_index: Tensor
    order: Tensor
    outputs: tuple[Tensor, ...]
    options: RankingSettings
    budget: int
    ext_scores: Tensor | None = None
    by_score: bool = False
    tie_key: Tensor | None = None
    counter: Counter = field(default_factory=lambda: choose_counter("cpu"))
    neg_inf: Tensor = field(init=False)

    def __post_init__(self) -> None:
        # (filled where it lives: torch.tensor(value, device=...) copies from the host, a sync)
        self.neg_inf = torch.full((), float("-inf"), dtype=self.dtype, device=self.device)

    @property
    def num_blocks_g(self) -> int:
        return -(-self.num_g // self.block_g) if self.num_g else 0


@dataclass
class Direction:
    """One direction of a ranking: its relevance in processing order and its outputs.

    Queries are processed in ``order`` (input positions); the gallery in the order ``g_perm``
    (None: input order), and ``rel_index``/``ex_index`` are positions in that order. ``mode``
    says what the outputs hold: above, tied and listed of every relevant pair (``"table"``, and
    ``"count"`` for given scores), or the relevant pairs' scores (``"scores"``).
    """

    rel_ptr: Tensor
    rel_index: Tensor
    ex_ptr: Tensor
    ex_index: Tensor
    order: Tensor
    g_perm: Tensor | None
    num_g: int
    outputs: tuple[Tensor, ...]
    options: RankingSettings
    device: torch.device
    dtype: torch.dtype
    mode: Mode
    ext_scores: Tensor | None = None
    by_score: bool = False
    tie_key: Tensor | None = None
    #: how the ranking counts its blocks, chosen once for its device (``counters``)
    counter: Counter = field(default_factory=lambda: choose_counter("cpu"))

    @staticmethod
    def make(
        inputs: RankingInput,
        num_q: int,
        num_g: int,
        options: RankingSettings,
        *,
        device: torch.device,
        dtype: torch.dtype,
        external: tuple[Tensor, Tensor] | None = None,
        mode: Mode = "table",
    ) -> Direction:
        relevance_sets = inputs.relevance
        query_order_key, gallery_order_key = inputs.query_key, inputs.gallery_key
        rel_ptr = relevance_sets.relevant_ptr
        rel_index = relevance_sets.relevant_index
        ext_scores = None
        if external is not None:
            # counting against given scores: they play the part of the relevant items
            rel_ptr = external[0].cpu()
            rel_index = torch.zeros(int(rel_ptr[-1]), dtype=torch.int64)
            ext_scores = to_device(external[1].to(dtype), device)
        ex_index = relevance_sets.excluded_index
        g_perm = None
        # A set ranked against itself, every item kept: one order serves both sides (block i of
        # the queries is block i of the gallery), and it sorts the queries by their number of
        # relevant items before their key. Each query block's states are as wide as its widest
        # row, and the symmetric pass keeps every block's: grouped by count, classes of varied
        # size pad a row to about its own width instead of to the largest class near it (a
        # third of the padded states of shuffled classes of 1 to 15), and a key's items stay
        # together, as the gallery's relevant items of a block then do too.
        same_order = inputs.symmetric and external is None and num_q == num_g and num_q > 0
        if same_order:
            order = _by_count_then_key(rel_ptr.diff(), query_order_key)
            if not is_identity(order, num_g):
                g_perm = order
        elif gallery_order_key is not None and num_g and not (
            num_g == inputs.gallery.shape[0]
            and may_read_in_blocks(inputs.gallery, options.similarity, dtype)
        ):
            # Counts do not depend on gallery order; grouping by label puts each query block's
            # relevant items in one or two gallery blocks. Not a gallery held in batches and
            # read a block at a time as held: ordered, it would be copied whole (half
            # precision upcast too), beyond the memory bound.
            g_perm = torch.sort(gallery_order_key.cpu(), stable=True).indices
            if is_identity(g_perm, num_g):
                g_perm = None  # already grouped (e.g. captions listed by image): no copy
        if g_perm is not None:
            new_position = torch.empty_like(g_perm)
            new_position[g_perm] = torch.arange(num_g)
            if external is None:
                rel_index = new_position[rel_index]
            ex_index = new_position[ex_index]
        tie_key = inputs.tie_key
        if tie_key is not None:
            if external is not None or inputs.symmetric:
                raise ValueError(
                    "ties ordered by id (ties='id') need queries ranked against a gallery of "
                    "their own, on one process's gallery or gathered (not same-source items, "
                    "not a sharded gallery)"
                )
            tie_key = tie_key.cpu() if g_perm is None else tie_key.cpu()[g_perm]
            tie_key = to_device(tie_key, device)
        if same_order:
            pass
        elif query_order_key is not None and num_q:
            order = torch.sort(query_order_key.cpu(), stable=True).indices
        else:
            order = torch.arange(num_q)
        # One entry per relevant pair: with thousands of relevant items per query these are the
        # largest allocations of the ranking, so each mode allocates only what it returns.
        # On the device the ranking runs on: each query block writes its results there, and they
        # reach the host once, when the direction is read (host_outputs), not once per block.
        num_pairs = int(rel_ptr[-1]) if num_q else 0
        if mode == "scores":
            outputs: tuple[Tensor, ...] = (torch.zeros(num_pairs, dtype=dtype, device=device),)
        else:
            above = torch.zeros(num_pairs, dtype=torch.int64, device=device)
            outputs = (above, torch.zeros_like(above), torch.ones_like(above, dtype=torch.bool))
            if tie_key is not None:
                outputs += (torch.zeros_like(above),)  # tied items of a smaller key
        return Direction(
            rel_ptr=rel_ptr,
            rel_index=rel_index,
            ex_ptr=relevance_sets.excluded_ptr,
            ex_index=ex_index,
            order=order,
            g_perm=g_perm,
            num_g=num_g,
            outputs=outputs,
            options=options,
            device=device,
            dtype=dtype,
            mode=mode,
            ext_scores=ext_scores,
            # binary tables want each query's items by decreasing score: written so, they need
            # no sort afterwards (graded ones also order tied items by grade, and ties ordered
            # by key by their places: CSR order + sort)
            by_score=mode == "table" and relevance_sets.query_grades is None and tie_key is None,
            tie_key=tie_key,
            counter=choose_counter(device),
        )

    @property
    def max_relevant(self) -> int:
        return int(self.rel_ptr.diff().max()) if self.order.numel() else 0

    def state_bytes(self, block: int, elem: int) -> int:
        """Scratch of every query block's counting state at once (the symmetric pass keeps them
        all) that does not grow with the relevant pairs: per row and relevant slot, rows padded
        to their block's longest (see :meth:`pair_state_bytes` for the rest)."""
        counts = self.rel_ptr.diff()[self.order]
        n = counts.numel()
        padded = torch.zeros(-(-n // block) * block, dtype=torch.int64)
        padded[:n] = counts
        widths = padded.view(-1, block).amax(1) + 1
        # per (row, relevant slot): sorted scores and the depth candidates, the sort permutation
        # and two histogram bins
        return int(widths.sum()) * block * (2 * elem + 3 * 8)

    def pair_state_bytes(self) -> int:
        """The part of every query block's counting state that grows with the relevant pairs:
        per pair its row, column, position, block, offset, segment and the transients of the
        last step, eight int64. Of the order of the outputs (three entries per pair) and of the
        relevance sets: what the metric classes bound by ranking a chunk of queries at a time."""
        return int(self.rel_ptr[-1]) * 8 * 8 if self.order.numel() else 0

    def at(self, block_g: int, budget: int) -> Pass:
        """The pass over gallery blocks of ``block_g`` items, its counting and kept blocks
        within ``budget`` bytes."""
        return Pass(
            device=self.device,
            dtype=self.dtype,
            num_g=self.num_g,
            block_g=block_g,
            rel_ptr=self.rel_ptr,
            rel_index=self.rel_index,
            ex_ptr=self.ex_ptr,
            ex_index=self.ex_index,
            order=self.order,
            outputs=self.outputs,
            options=self.options,
            budget=budget,
            ext_scores=self.ext_scores,
            by_score=self.by_score,
            tie_key=self.tie_key,
            counter=self.counter,
        )

    def table(self, relevance_sets: Relevance) -> RankTable:
        """The rank table of a ``"table"`` direction, once its pass has run."""
        num_relevant = self.rel_ptr.diff()
        gallery_size = self.num_g - self.ex_ptr.diff()
        depth, num_q = self.options.depth, self.order.numel()
        if depth is None:
            depth_out = gallery_size.clone()
        elif self.options.cover_relevant:
            depth_out = num_relevant.clamp_min(depth)
        else:
            depth_out = torch.full((num_q,), depth, dtype=torch.int64)
        outputs = self.host_outputs()
        above, tied, listed = outputs[:3]
        if depth is not None:
            listed = self._listed_within(above, listed, depth_out)
        if self.tie_key is not None:
            # Ties ordered by key: each relevant item has a place of its own, after the items
            # above it and the tied items of a smaller key; it shares it with nobody.
            above = above + outputs[3]
            tied = torch.ones_like(tied)
        items = ItemResults(
            self.rel_ptr, above, tied, listed=listed, grade=relevance_sets.query_grades
        )
        return table_from_items(
            items, num_relevant, gallery_size, depth_out, by_score=self.by_score
        )

    def _listed_within(self, above: Tensor, listed: Tensor, depth: Tensor) -> Tensor:
        """The items a ranking with a depth lists, by one rule on every device and counter:
        those fewer than the query's depth items beat, and (``locate_first``) its best relevant
        items. The CPU's thresholds stop counting an item once depth items beat it, and leave
        listed some others that depth items beat (a threshold is a lower bound); whole-block
        counters (a GPU's) count every item exactly and list them all."""
        # Only the pairs the counting listed can stay listed: judged among them alone (a huge
        # class lists a few of its millions of pairs a row; the outputs are on the host by
        # now, wherever the ranking ran: host_outputs). The listed pairs hold each query's best
        # (above and tied of the others may be unwritten, QueryBlock._write_top).
        at = flat_nonzero(listed)
        row = torch.searchsorted(self.rel_ptr, at, right=True) - 1
        listed_above = above.index_select(0, at)
        keep = listed_above < depth.index_select(0, row)
        if self.options.locate_first and at.numel():
            unlisted = torch.iinfo(torch.int64).max
            best = torch.full_like(depth, unlisted).scatter_reduce_(
                0, row, listed_above, "amin"
            )
            keep |= listed_above == best.index_select(0, row)
        return torch.zeros_like(listed).index_fill_(0, at[keep], True)

    def host_outputs(self) -> tuple[Tensor, ...]:
        """The outputs on the host: one copy from the device for all of them, after the pass
        (the only read of the ranking's results there; a no-op on the CPU)."""
        return tuple(to_host(list(self.outputs)))

    def scores(self) -> Tensor:
        """The relevant pairs' scores of a ``"scores"`` direction, in the CSR order of its
        relevance sets."""
        return self.host_outputs()[0]

    def counts(self) -> tuple[Tensor, Tensor]:
        """Above and tied of every given score of a ``"count"`` direction."""
        above, tied = self.host_outputs()[:2]
        return above, tied


def _by_count_then_key(counts: Tensor, key: Tensor | None) -> Tensor:
    """Positions sorted by ``counts``, ties by ``key`` (then by position): stable sorts, the
    secondary key first."""
    order = torch.arange(counts.numel())
    if key is not None:
        order = torch.sort(key.cpu(), stable=True).indices
    by_count = torch.sort(counts.cpu()[order], stable=True).indices
    return order[by_count]


def pairs_with_relevant(directions: Sequence[Direction], block: int) -> int:
    """Block pairs holding relevant items of either side (its rows or, transposed, columns)."""
    keys = []
    for k, side in enumerate(directions):
        query_block = torch.empty_like(side.order)
        query_block[side.order] = torch.arange(side.order.numel()) // block
        rows = repeat(query_block, side.rel_ptr.diff())
        cols = side.rel_index // block
        keys.append(rows * 2**31 + cols if k == 0 else cols * 2**31 + rows)
    return int(torch.unique(torch.cat(keys)).numel()) if keys else 0
