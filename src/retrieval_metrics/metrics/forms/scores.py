"""torchmetrics' input form: ``update(preds=scores, target=relevance, indexes=query_index)``, and
its rule that a relevant item scored <= 0 is never a hit (``nonpositive="miss"``)."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures.aggregation import micro_parts
from retrieval_metrics.functional.measures.names import average_for
from retrieval_metrics.functional.ranking.scores import (
    comparable_scores,
    nonpositive_missed,
    positive_counts,
    rank_checked_scores,
    scores_pass,
    target_passes,
)
from retrieval_metrics.functional.table import RankTable
from retrieval_metrics.metrics.forms.base import MISS_BASES, Batch, FormContext, InputForm

__all__ = ["Scores"]

class Scores(InputForm):
    """Flat ``preds`` (scores), ``target`` (grade, 0 = not relevant) and ``indexes`` (the query
    of each entry); every entry of a query is one of its ranked candidates."""

    kind = "scores"
    description = "preds/target/indexes"
    arguments = ("preds", "target", "indexes")
    call = "`preds` + `target` + `indexes`"

    def recognise(self, batch: Batch) -> Batch:
        if batch.indexes is None or batch.embeddings is None or batch.given("preds", "target"):
            return batch
        # torchmetrics' call shape, metric(preds, target, indexes=indexes): `indexes` belongs
        # to the scores form only, so the positional arguments are its preds and target
        extra = batch.given("role", "ids", "cameras", "positions")
        if extra:
            raise ValueError(
                f"`indexes` is torchmetrics' form (preds, target, indexes), which takes no "
                f"{extra}; for embeddings leave `indexes` out"
            )
        return replace(batch, preds=batch.embeddings, target=batch.labels, embeddings=None,
                       labels=None)

    def append(self, context: FormContext, batch: Batch) -> None:
        if batch.preds is None or batch.target is None or batch.indexes is None:
            raise ValueError("torchmetrics' form needs `preds`, `target` and `indexes` together")
        preds, target, indexes = (
            torch.as_tensor(x) for x in (batch.preds, batch.target, batch.indexes)
        )
        if not (preds.shape == target.shape == indexes.shape):
            raise ValueError(
                "`preds`, `target` and `indexes` must have the same shape, got "
                f"{tuple(preds.shape)}, {tuple(target.shape)} and {tuple(indexes.shape)}"
            )
        if indexes.is_floating_point():
            raise ValueError(f"`indexes` must hold integers, got {indexes.dtype}")
        # Scores are stored in the dtype they are compared in (integers as float64, half
        # precision as float32: widening is exact, so ties stay ties).
        # (on a device, the checks' answers stay there until compute(): SideStore.verdict)
        compared = comparable_scores(preds)
        scans = {"preds": context.store.verdict("preds", scores_pass(preds))}
        scans["target"] = context.store.verdict("target", target_passes(target))
        context.store.append("s_preds", compared.reshape(-1))
        # the target's dtype says binary (bool, integers 0/1) or graded (float), as in rank_scores
        context.store.append("s_target", target.reshape(-1))
        context.store.append("s_indexes", indexes.reshape(-1).to(torch.int64))
        context.store.note_scans(scans)

    def _states(self, context: FormContext) -> tuple[Tensor, Tensor, Tensor]:
        preds, target, indexes = (
            context.store.read(n) for n in ("s_preds", "s_target", "s_indexes")
        )
        return preds.cpu(), target.cpu(), indexes.cpu()

    def table(self, context: FormContext) -> RankTable:
        # every batch was checked by update(): rank without checking the whole again
        preds, target, indexes = self._states(context)
        table = rank_checked_scores(preds, target, indexes)
        if context.options.nonpositive == "miss":
            # made here, on the synced states, with the table it is a view of
            context.ranking.miss_table = nonpositive_missed(
                table, positive_counts(preds, indexes)
            )
        return table

    def miss_table(self, context: FormContext, table: RankTable) -> RankTable:
        """``table`` with every relevant item scored <= 0 a miss (it still counts in m_q), made
        with the table, once per ranking (``context.ranking.miss_table``)."""
        miss = context.ranking.miss_table
        assert miss is not None, "the miss table is made with the table (nonpositive='miss')"
        return miss

    def skip_reason(self, context: FormContext) -> str:
        return "no `target` of the query is > 0"

    def values(self, context: FormContext, table: RankTable) -> dict[str, Tensor]:
        """Under ``nonpositive="miss"`` (torchmetrics' rule) MAP, MRR, precision and recall read
        the miss table, MAP over the whole list dividing by the relevant items retrieved; every
        other measure reads ``table`` as the other forms do."""
        if context.options.nonpositive != "miss":
            return super().values(context, table)
        options = context.measures
        values = {}
        for name in context.names:
            spec = M.parse_metric(name)
            if spec.base not in MISS_BASES:
                values.update(M.retrieval_measures(table, [name], options=options))
                continue
            miss = self.miss_table(context, table)
            numerator = denominator = None
            average = average_for(spec, context.options.average)
            if average == "micro" and spec.measure.micro is not None:
                numerator, denominator = micro_parts(miss, spec, options)
            values[spec.name] = M.aggregate(
                self.per_query_values(context, table, spec), miss,
                empty_queries=options.empty_queries, average=average, percent=options.percent,
                numerator=numerator, denominator=denominator,
            )
        return values

    def per_query_values(
        self, context: FormContext, table: RankTable, spec: M.MetricSpec
    ) -> Tensor:
        if context.options.nonpositive != "miss" or spec.base not in MISS_BASES:
            return super().per_query_values(context, table, spec)
        miss = self.miss_table(context, table)
        if spec.base == "map" and spec.k is None:
            # torchmetrics' AP over the whole list divides by the relevant items scored > 0
            return M.average_precision_per_query(
                miss, miss.gallery_size, context.options.ties, divisor="retrieved"
            )
        return M.per_query_values(miss, spec, options=context.measures)
