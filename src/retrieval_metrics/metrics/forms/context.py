"""What an input form sees of its metric: :class:`FormContext`, every part of it public.

A form never reads its metric: the metric hands it a context made for the call, with four
parts, the stored sides (:class:`~retrieval_metrics.metrics.store.SideStore`), the options
(:class:`~retrieval_metrics.metrics.options.MetricOptions`, the measures reported, the
judgments), the ranking's options built from them, and the exchange between processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.ranking.options import RankingOptions
from retrieval_metrics.functional.ranking.qrels import Judgments
from retrieval_metrics.metrics.chunks import ranking_budget
from retrieval_metrics.metrics.options import MetricOptions
from retrieval_metrics.metrics.protocols import RUN_DEPTH
from retrieval_metrics.metrics.store import SideStore

__all__ = ["Exchange", "FormContext"]


@dataclass(frozen=True)
class Exchange:
    """The processes a metric's states are synced over, as the call that made the context
    found them: ``group`` (torch.distributed's, None for the default), ``distributed`` (the
    states are synced), ``several`` (over more than one process) and ``synced_bytes`` (what
    this process sent in the last sync)."""

    group: Any = None
    distributed: bool = False
    several: bool = False
    synced_bytes: int = 0


@dataclass
class FormContext:
    """One call's view of a metric for its input form.

    ``owner`` names the metric in messages; ``names`` are the measures it reports;
    ``judgments`` its qrels (None without); ``gallery_sharded`` whether its gallery stays split
    over the processes; ``fixed_gallery`` the gallery given with ``set_gallery`` (None
    without); ``id_examples`` an id of each side as the user gave it (for messages);
    ``on_synced`` runs a function on every process's states; ``kept`` holds what a form
    derives once per ranking (cleared when the states change). A form reports the bytes it
    exchanged in ``bytes_exchanged``.
    """

    store: SideStore
    options: MetricOptions
    names: list[str]
    owner: str
    exchange: Exchange = field(default_factory=Exchange)
    judgments: Judgments | None = None
    gallery_sharded: bool = False
    fixed_gallery: Items | None = None
    id_examples: dict[str, Any] = field(default_factory=dict)
    on_synced: Callable[[Callable[[], Any]], Any] = lambda fn: fn()
    kept: dict[str, Any] = field(default_factory=dict)
    bytes_exchanged: int | None = None

    @property
    def measures(self) -> M.MeasureOptions:
        """The measures' options."""
        return self.options.measures

    def ranking_options(self, pairs: int | None = None) -> RankingOptions:
        """The ranking's options; ``pairs``: its relevant pairs where known before it (see
        :func:`~retrieval_metrics.metrics.chunks.ranking_budget`)."""
        options = self.options
        if self.judgments is not None:
            # Every judged document's exact rank in the whole corpus; under an evaluator's
            # protocol, within the depth of the run it scores (RUN_DEPTH), where every measure
            # has a cut-off: queries with no judged document there stop early, and the values
            # are the whole ranking's.
            run = RUN_DEPTH.get(options.protocol or "")
            cutoff = M.cutoff_depth(self.names)
            return RankingOptions(
                relevance="ids",
                similarity=options.similarity,
                memory_budget=ranking_budget(options.memory_budget),
                depth=None if run is None or cutoff is None else max(run, cutoff),
                locate_first=False,
                judgments=self.judgments,
                ignore_identical_ids=options.ignore_identical_ids is not False,
                judged_documents=M.judged_needed(self.names, self.measures),
            )
        depth, cover = M.depth_for(self.names)
        return RankingOptions(
            relevance=options.relevance,
            radius=options.radius,
            ignore_label=options.ignore_label,
            similarity=options.similarity,
            memory_budget=ranking_budget(options.memory_budget, pairs),
            depth=depth,
            cover_relevant=cover,
        )
