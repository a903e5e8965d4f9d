"""What an input form is: how ``update()`` recognises it, appends a batch, turns the synced states
into rank tables, and says why a query can have nothing relevant."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.table import RankTable

if TYPE_CHECKING:
    from retrieval_metrics.metrics.retrieval import RetrievalMetric

__all__ = ["MISS_BASES", "Batch", "InputForm"]

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


class InputForm:
    """One way of giving a metric its data (a small object per form; ``forms.FORMS`` lists them).

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

    def accepts(self, batch: Batch, metric: RetrievalMetric) -> bool:
        """Among the forms that share ``arguments``: whether this call is this form's."""
        return True

    def append(self, metric: RetrievalMetric, batch: Batch) -> None:
        """Check one batch and append it to the metric's states."""
        raise NotImplementedError

    def table(self, metric: RetrievalMetric) -> RankTable:
        """The rank table of the metric's (synced) states."""
        raise NotImplementedError

    def tables_in_chunks(self, metric: RetrievalMetric) -> Iterator[RankTable] | None:
        """The rank table a chunk of queries at a time, or None where it is ranked whole."""
        return None

    def values(self, metric: RetrievalMetric, table: RankTable) -> dict[str, Tensor]:
        """compute()'s values from the table: every named measure of the metric."""
        self.refuse_miss_rule(metric)
        return M.retrieval_measures(table, metric.metric_names(), options=metric.measure_options)

    def per_query_values(
        self, metric: RetrievalMetric, table: RankTable, spec: M.MetricSpec
    ) -> Tensor:
        """One measure's per-query values from the table."""
        self.refuse_miss_rule(metric, [spec.name])
        return M.per_query_values(table, spec, options=metric.measure_options)

    @staticmethod
    def refuse_miss_rule(metric: RetrievalMetric, names: Sequence[str] | None = None) -> None:
        """torchmetrics' rule (``nonpositive="miss"``) reads scores: refused by name on the
        forms without them, for the measures it changes."""
        names = metric.metric_names() if names is None else names
        if metric.nonpositive == "miss" and any(
            M.parse_metric(name).base in MISS_BASES for name in names
        ):
            raise ValueError(
                'nonpositive="miss" (protocol="torchmetrics") needs scores: it applies to '
                "update(preds=, target=, indexes=) only"
            )

    def notes(self, metric: RetrievalMetric, table: RankTable) -> dict[str, int]:
        """Counts about the data as a whole that ``summary()`` reports beside its rows."""
        return {}

    def skip_reason(self, metric: RetrievalMetric) -> str:
        """Why a query of this form can have no relevant item (the warning of compute())."""
        raise NotImplementedError
