"""What an input form is: how ``update()`` recognises it, appends a batch, turns the synced states
into rank tables, and says why a query can have nothing relevant; and what it sees of its metric,
:class:`FormContext`, every part of it public: the stored sides
(:class:`~retrieval_metrics.metrics.store.SideStore`), the options
(:class:`~retrieval_metrics.metrics.options.MetricOptions`, the measures reported, the
qrels), the ranking's options built from them, and the processes the states are synced
over."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from torch import Tensor

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures.names import cutoff_depth, judged_queries_needed
from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.ranking.options import (
    BLOCKED_ENGINE,
    RankingEngine,
    RankingOptions,
)
from retrieval_metrics.functional.ranking.qrels import Judgments
from retrieval_metrics.functional.ranking.settings import memory_budget_on
from retrieval_metrics.functional.table import RankTable
from retrieval_metrics.metrics.chunks import ranking_budget
from retrieval_metrics.metrics.distributed import Processes
from retrieval_metrics.metrics.options import MetricOptions
from retrieval_metrics.metrics.protocols import RUN_DEPTH
from retrieval_metrics.metrics.ranking import Ranking
from retrieval_metrics.metrics.store import KIND_KEYS, SideStore

__all__ = ["MISS_BASES", "Batch", "FormContext", "InputForm"]

#: measures for which nonpositive="miss" makes a relevant item scored <= 0 a miss (torchmetrics)
MISS_BASES = ("map", "mrr", "precision", "recall")


@dataclass(frozen=True)
class Batch:
    """The arguments of one ``RetrievalMetric.update`` call."""

    embeddings: Any = None
    labels: Any = None
    role: str | None = None
    ids: Any = None
    cameras: Any = None
    positions: Any = None
    ranked_ids: Sequence[Sequence[Any]] | None = None
    relevant_ids: Sequence[Any] | None = None
    preds: Any = None
    target: Any = None
    indexes: Any = None
    relevant_ranks: Sequence[Sequence[int]] | None = None
    num_relevant: Sequence[int] | Tensor | None = None

    def given(self, *names: str) -> list[str]:
        """The ``names`` this call passed (not None)."""
        return [name for name in names if getattr(self, name) is not None]

    def passed(self) -> list[str]:
        return self.given(*(f.name for f in fields(self)))

    def keys(self) -> dict[str, Any]:
        """The per-item keys whose kind (integers or strings) the store records."""
        return {key: getattr(self, key) for key in KIND_KEYS}


@dataclass
class FormContext:
    """One call's view of a metric for its input form.

    ``owner`` names the metric in messages; ``names`` are the measures it reports;
    ``qrels`` its judgments (None without); ``gallery_sharded`` whether its gallery stays split
    over the processes; ``fixed_gallery`` the gallery given with ``set_gallery`` (None
    without); ``id_examples`` an id of each side as the user gave it (for messages);
    ``engine`` what ranks (the metric's ``engine=``);
    ``ranking`` what is made once from the synced states until they change (a
    :class:`~retrieval_metrics.metrics.ranking.Ranking`: the agreed form, the deduplicated
    sides, the relevant pairs counted before the ranking, the miss table). A form reports the
    bytes it exchanged in ``bytes_exchanged``. ``run_depth``: the metric's (the lists its
    rankings keep for ``run()``; None: none).
    """

    store: SideStore
    options: MetricOptions
    names: list[str]
    owner: str
    processes: Processes = field(default_factory=Processes)
    qrels: Judgments | None = None
    gallery_sharded: bool = False
    fixed_gallery: Items | None = None
    id_examples: dict[str, Any] = field(default_factory=dict)
    engine: RankingEngine = BLOCKED_ENGINE
    ranking: Ranking[InputForm] = field(default_factory=Ranking)
    bytes_exchanged: int | None = None
    run_depth: int | None = None

    @property
    def measures(self) -> M.MeasureOptions:
        """The measures' options."""
        return self.options.measures

    def memory_budget(self) -> int:
        """The bytes of scratch a ranking of the states may use: the metric's ``memory_budget``,
        or where that is None the default of the device the states live on."""
        return memory_budget_on(self.options.memory_budget, self.store.device)

    def ranking_options(self, pairs: int | None = None) -> RankingOptions:
        """The ranking's options; ``pairs``: its relevant pairs where known before it (see
        :func:`~retrieval_metrics.metrics.chunks.ranking_budget`)."""
        options = self.options
        shared = dict(
            relevance=options.relevance,
            similarity=options.similarity,
            ignore_identical_ids=options.ignore_identical_ids,
            engine=self.engine,
        )
        if self.qrels is not None:
            # Every judged document's exact rank in the whole corpus; under an evaluator's
            # protocol, within the depth of the run it scores (RUN_DEPTH), where every measure
            # has a cut-off: queries with no judged document there stop early, and the values
            # are the whole ranking's.
            run = RUN_DEPTH.get(options.protocol or "")
            cutoff = cutoff_depth(self.names)
            return RankingOptions(
                **shared,
                memory_budget=ranking_budget(self.memory_budget()),
                depth=None if run is None or cutoff is None else max(run, cutoff),
                locate_first=False,
                qrels=self.qrels,
                judged_documents=judged_queries_needed(self.names, self.measures),
            )
        depth, cover = M.depth_for(self.names)
        return RankingOptions(
            **shared,
            radius=options.radius,
            ignore_label=options.ignore_label,
            memory_budget=ranking_budget(self.memory_budget(), pairs),
            depth=depth,
            cover_relevant=cover,
        )


class InputForm:
    """One way of giving a metric its data (a small object per form; ``forms.FORMS`` lists them).

    Every method takes a :class:`FormContext`, the
    call's public view of the metric: its stored sides (``context.store``), options
    (``context.options``, ``context.names``), ranking options and processes (``context.processes``).

    ``kind`` names the states a form fills: forms of one kind may be mixed in one metric, forms
    of different kinds may not (the metric keeps one bit per kind, reduced across processes with
    max, so that every process refuses a mix made on different processes). ``arguments`` are the
    ``update()`` keywords that mark a call as this form's (its first one names it in messages,
    ``call`` describes the whole call), ``keywords`` the others it may pass; among the forms
    sharing ``arguments``, :meth:`accepts` decides.
    """

    kind: ClassVar[str]
    description: ClassVar[str]
    arguments: ClassVar[tuple[str, ...]]
    keywords: ClassVar[tuple[str, ...]] = ()
    call: ClassVar[str]

    def recognise(self, batch: Batch) -> Batch:
        """``batch`` as this form reads it (torchmetrics' positional call, say); the same
        batch when the form has nothing to say."""
        return batch

    def accepts(self, batch: Batch, context: FormContext) -> bool:
        """Among the forms that share ``arguments``: whether this call is this form's."""
        return True

    def append(self, context: FormContext, batch: Batch) -> None:
        """Check one batch and append it to the stored states (the metric has marked its
        states as this form's kind)."""
        raise NotImplementedError

    def table(self, context: FormContext) -> RankTable:
        """The rank table of the metric's (synced) states."""
        raise NotImplementedError

    def tables_in_chunks(self, context: FormContext) -> Iterator[RankTable] | None:
        """The rank table a chunk of queries at a time, or None where it is ranked whole."""
        return None

    def values(self, context: FormContext, table: RankTable) -> dict[str, Tensor]:
        """compute()'s values from the table: every named measure of the metric."""
        self.refuse_miss_rule(context)
        return M.retrieval_measures(table, context.names, options=context.measures)

    def per_query_values(
        self, context: FormContext, table: RankTable, spec: M.MetricSpec
    ) -> Tensor:
        """One measure's per-query values from the table."""
        self.refuse_miss_rule(context, [spec.name])
        return M.per_query_values(table, spec, options=context.measures)

    @staticmethod
    def refuse_miss_rule(context: FormContext, names: Sequence[str] | None = None) -> None:
        """torchmetrics' rule (``nonpositive="miss"``) reads scores: refused by name on the
        forms without them, for the measures it changes."""
        names = context.names if names is None else names
        if context.options.nonpositive == "miss" and any(
            M.parse_metric(name).base in MISS_BASES for name in names
        ):
            raise ValueError(
                'nonpositive="miss" (protocol="torchmetrics") needs scores: it applies to '
                "update(preds=, target=, indexes=) only"
            )

    def notes(self, context: FormContext, table: RankTable) -> dict[str, int]:
        """Counts about the data as a whole that ``summary()`` reports beside its rows."""
        return {}

    def skip_reason(self, context: FormContext) -> str:
        """Why a query of this form can have no relevant item (the warning of compute())."""
        raise NotImplementedError
