"""What one ranking of a metric's synced states makes once, as one typed object.

A metric holds one :class:`Ranking` from a change of its states to the next (``update()``,
``reset()``, ``set_gallery()`` start a new one) and hands it to its input form as
``FormContext.ranking``: the form every process agreed on, each side deduplicated by id, the
relevant pairs counted before the ranking and the table under torchmetrics' miss rule. What
was three string-keyed memos and a callback is these fields. The deduplicated sides are held
only while a ranking runs (:meth:`~retrieval_metrics.metrics.store.SideStore.one_ranking`):
a corpus is not kept twice once its table is made.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Generic, TypeVar

from torch import Tensor

from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.table import RankTable

__all__ = ["Ranking", "Side"]

#: the input form's type (``forms.base.InputForm``; a parameter, so that this module imports
#: no form)
F = TypeVar("F")


@dataclass(frozen=True)
class Side:
    """A side as deduplicated once: its items, or None where it has none."""

    items: Items | None


@dataclass(eq=False)
class Ranking(Generic[F]):
    """What the metric derives once from its synced states, until they change.

    Attributes:
        form: the input form that reads the states, every process's bits read and agreed once
            (None until the first ranking or ``run()``).
        queries, gallery: the sides ``"q"`` and ``"g"`` deduplicated by sample id, held while a
            ranking runs (None outside one, and before the side is read).
        label_pairs: per query, its relevant pairs before exclusions where they are counted
            before the ranking (label relevance), for the chunking decision and the budget.
        ids_checked: True once the query ids shared with gallery items were found to name
            the same samples (``forms.embeddings.check_ids_across_sides``), whichever of the
            chunking decision and the ranking read the sides first.
        miss_table: the table with every relevant item scored <= 0 a miss (the scores form under
            ``nonpositive="miss"``), made with the table on the synced states.
        run_lists: each query's ``run_depth`` best items as the ranking kept them while it
            counted: gallery rows of the deduplicated gallery (-1 past a query's end; -2
            throughout where a device's lists may break a tie otherwise than the tie order)
            and scores (-inf there), one row per deduplicated query.
    """

    form: F | None = None
    queries: Side | None = None
    gallery: Side | None = None
    label_pairs: Tensor | None = None
    ids_checked: bool | None = None
    miss_table: RankTable | None = None
    run_lists: tuple[Tensor, Tensor] | None = None

    def empty(self) -> bool:
        """Whether nothing is derived yet (every field as a new ranking starts)."""
        return all(getattr(self, f.name) is None for f in fields(self))

    def side(self, name: str) -> Side | None:
        """Side ``name`` (``"q"`` or ``"g"``) as deduplicated in this ranking, None before."""
        return self.queries if name == "q" else self.gallery

    def hold(self, name: str, side: Side) -> None:
        """Hold side ``name`` (``"q"`` or ``"g"``) for the rest of this ranking."""
        if name == "q":
            self.queries = side
        else:
            self.gallery = side

    def let_go(self) -> None:
        """The ranking ended: its deduplicated sides are freed."""
        self.queries = self.gallery = None
