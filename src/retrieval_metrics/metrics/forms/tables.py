"""Forms whose batches arrive as rank tables (ranked lists, precomputed ranks): only each query's
results are kept."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from retrieval_metrics.functional.measures.names import divides_by_retrieved, judged_queries_needed
from retrieval_metrics.functional.ranking import rank_lists
from retrieval_metrics.functional.ranking.labels import label_codes
from retrieval_metrics.functional.table import (
    PRESENT,
    TABLE_PARTS,
    RankTable,
    has_part,
    table_from_parts,
    table_parts,
)
from retrieval_metrics.metrics import distributed as D
from retrieval_metrics.metrics.forms.base import Batch, FormContext, InputForm
from retrieval_metrics.metrics.inputs import per_item, table_from_ranks

__all__ = ["PrecomputedRanks", "RankedLists", "TableStates", "append_table"]


def append_table(context: FormContext, table: RankTable, query_ids: Any) -> None:
    """Append one batch's rank table (with the queries' sample ids, if given) to the states."""
    if query_ids is not None:
        qid = per_item("ids", label_codes(query_ids, "ids"), table.num_queries)
        table = replace(table, query_id=qid)
    before = context.store.read(f"t_{PRESENT}")
    if before is not None and before.numel() and table.num_queries:
        if has_part(int(before[0]), "query_id") != (query_ids is not None):
            raise ValueError("`ids` must be given on every update or on none")
    for name, value in table_parts(table).items():
        context.store.append(f"t_{name}", value)


class TableStates(InputForm):
    """The table states, read back as one table (repeated queries dropped by sample id)."""

    def table(self, context: FormContext) -> RankTable:
        parts = {}
        for name in [p.name for p in TABLE_PARTS] + [PRESENT]:
            value = context.store.read(f"t_{name}")
            parts[name] = value if value is not None else torch.zeros(0, dtype=torch.int64)
        table = table_from_parts(parts)
        if table.query_id is not None and table.num_queries:
            keep = D.dedupe_by_id(
                table.query_id,
                "`ids` of the queries",
                relevant_items=table.num_relevant,
                listed_items=table.num_listed,
                gallery_size=table.gallery_size,
            )
            table = table.select(keep)
        return table


class RankedLists(TableStates):
    """``update(ranked_ids=[...], relevant_ids=[...])``: ids int or str; a dict of id -> grade
    for graded relevance."""

    kind = "table"
    description = "ranked lists / precomputed ranks"
    arguments = ("ranked_ids", "relevant_ids")
    keywords = ("ids",)
    call = "`ranked_ids` + `relevant_ids`"

    def append(self, context: FormContext, batch: Batch) -> None:
        if batch.ranked_ids is None or batch.relevant_ids is None:
            raise ValueError("ranked lists need both `ranked_ids` and `relevant_ids`")
        options = context.options
        if options.empty_lists == "error":
            for q, ranked in enumerate(batch.ranked_ids):
                if len(ranked) == 0:
                    raise ValueError(
                        f"`ranked_ids[{q}]` is empty (empty_lists='error'"
                        f"{'' if options.protocol is None else f', protocol={options.protocol!r}'}"
                        "): a retriever that returns nothing has no value there"
                    )
        table = rank_lists(
            batch.ranked_ids,
            batch.relevant_ids,
            duplicates=options.duplicates,
            # the distinct ids of each list, only where a measure divides by them
            distinct=divides_by_retrieved(context.names),
            judged_documents=judged_queries_needed(context.names, context.measures),
            query_ids=batch.ids,  # (a warning names a query by the id given with it)
        )
        context.store.note_key_kinds("q", batch.keys())
        append_table(context, table, batch.ids)

    def skip_reason(self, context: FormContext) -> str:
        return "its `relevant_ids` are empty, or its `num_relevant` is 0"


class PrecomputedRanks(RankedLists):
    """``update(relevant_ranks=[[1, 4], [2], ...])``: 1-based ranks of each query's relevant
    items; ``num_relevant=`` may add relevant items that were never retrieved."""

    arguments = ("relevant_ranks",)
    keywords = ("num_relevant", "ids")
    call = "`relevant_ranks`"

    def append(self, context: FormContext, batch: Batch) -> None:
        given = [] if batch.relevant_ranks is None else batch.relevant_ranks
        table = table_from_ranks(given, batch.num_relevant)
        context.store.note_key_kinds("q", batch.keys())
        append_table(context, table, batch.ids)
