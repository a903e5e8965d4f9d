"""Forms whose batches arrive as rank tables: each update's queries ranked at once (ranked lists,
precomputed ranks, queries against a fixed gallery), only their per-query results kept."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from typing import Any

import torch

from retrieval_metrics.functional.measures.names import divides_by_retrieved, judged_queries_needed
from retrieval_metrics.functional.primitives import fingerprint
from retrieval_metrics.functional.ranking import rank_lists
from retrieval_metrics.functional.ranking.engine.listing import listing
from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.ranking.labels import all_distinct, label_codes
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.tie_order import id_order_rows
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
from retrieval_metrics.metrics.forms.embeddings import relevance_skip_reason
from retrieval_metrics.metrics.forms.qrels import (
    check_identical_ids,
    check_ids_meet,
    qrels_notes,
)
from retrieval_metrics.metrics.inputs import (
    as_corpus,
    as_embeddings,
    check_device_holds,
    item_tensors,
    per_item,
    score_copy,
    table_from_ranks,
)
from retrieval_metrics.metrics.runs import keep_batch_lists

__all__ = ["FixedGallery", "PrecomputedRanks", "RankedLists", "TableStates", "append_table"]


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
            if keep.numel() < table.num_queries:
                self.check_repeats(context)
            table = table.select(keep)
        return table

    def check_repeats(self, context: FormContext) -> None:
        """Check what else the copies of a repeated query id must agree on, beyond the table's
        fields: nothing here (the table is all these forms keep of a query)."""


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


class FixedGallery(TableStates):
    """A gallery given once with ``set_gallery``: each ``update(q, q_labels, role="query")`` is
    ranked against it at once, and only its per-query results and the query items (for
    ``run()``: their embeddings as given and ids, not the gallery's) are kept."""

    kind = "fixed_gallery"
    description = "a fixed gallery (set_gallery)"
    arguments = ("embeddings",)
    keywords = ("labels", "role", "ids", "cameras", "positions")
    call = "`embeddings` (+ labels)"

    def accepts(self, batch: Batch, context: FormContext) -> bool:
        return context.fixed_gallery is not None

    def append(self, context: FormContext, batch: Batch) -> None:
        gallery = context.fixed_gallery
        assert gallery is not None  # accepts() chose this form for it
        emb = as_embeddings("embeddings", batch.embeddings)
        check_device_holds("embeddings", emb, context.store.device)
        items = item_tensors(
            emb, context.options.relevance, batch.labels, batch.ids, batch.cameras,
            batch.positions,
        )
        if batch.role == "gallery":
            raise ValueError("a fixed gallery was set with `set_gallery`; update queries only")
        if emb.shape[1] != gallery.emb.shape[1]:
            raise ValueError(
                f"`embeddings` must have {gallery.emb.shape[1]} columns, the width of "
                f"the gallery given to `set_gallery`, got {emb.shape[1]}"
            )
        context.store.note_key_kinds("q", batch.keys())
        if context.qrels is not None:
            check_identical_ids(context, items, gallery)
        # with run_depth, each query's best items kept as its ranking counts them, for run()
        depth = context.run_depth
        with listing(depth) if depth is not None else nullcontext() as listed:
            table = context.ranking_options().rank(items, gallery)
        append_table(context, table, items.ids)
        # the queries, for run() (which ranks them against the gallery again, a block at a
        # time, unless the lists kept here hold)
        context.store.append_items(
            "q", replace(items, emb=score_copy(emb), labels=None, cameras=None, positions=None),
            "role='query'",
        )
        keep_batch_lists(context, listed, len(items), len(gallery))

    def sides(self, context: FormContext) -> tuple[Items, Items]:
        """The queries given (one per id) and the gallery of ``set_gallery``: what ``run()``
        lists."""
        gallery = context.fixed_gallery
        queries = context.store.deduped("q", "`ids` of the queries")
        if gallery is None or queries is None or len(queries) == 0:
            raise ValueError(
                "no queries were given: update(embeddings, ids=..., role='query') after "
                "set_gallery"
            )
        return queries, gallery

    @staticmethod
    def set(context: FormContext, embeddings: Any, keys: dict[str, Any]) -> Items:
        """The gallery of ``set_gallery(embeddings, **keys)``, checked, its keys' kinds noted."""
        emb = as_corpus("embeddings", embeddings)
        check_device_holds("embeddings", emb, context.store.device)
        if emb.shape[0] == 0:
            raise ValueError("the gallery is empty: `set_gallery` got 0 rows of `embeddings`")
        items = item_tensors(emb, context.options.relevance, **keys)
        if context.options.ties == "id" and keys.get("ids") is not None:
            # ties by id (see QueryGallery.tie_order)
            items = replace(items, order=id_order_rows(keys["ids"], "ids"))
        context.store.note_key_kinds(
            "g", Batch(**{k: v for k, v in keys.items() if k != "positions"}).keys()
        )
        if context.qrels is not None and items.ids is not None and not all_distinct(items.ids):
            # a corpus given once: each document once (repeats that agree dropped), in the order
            # given, so that a corpus of distinct ids is kept as it is, never copied
            items = items.select(torch.sort(D.dedupe_by_id(
                items.ids, "`ids` of the gallery items", embeddings=items.emb,
                labels=items.labels, cameras=items.cameras, positions=items.positions,
            )).values)
        # held as one batch: each query update's ranking reads it a block at a time (for cosine,
        # divided by the norms as read), never a normalised copy of the corpus per update
        held = items.emb  # (a corpus on disk stays there: read a block at a time)
        return replace(
            items, emb=held if isinstance(held, RowBatches) else RowBatches([score_copy(held)])
        )

    @staticmethod
    def fingerprint(gallery: Items) -> int:
        """A hash of a fixed gallery's size, width and keys (not its embeddings' values: a
        corpus on disk is not read for it), which processes compare after the sync."""
        parts: list[Any] = [repr(tuple(gallery.emb.shape))]
        for name in ("ids", "labels", "cameras", "positions"):
            key = getattr(gallery, name)
            parts += [f"{name}:-"] if key is None else [f"{name}:", key]
        return fingerprint(parts)

    def skip_reason(self, context: FormContext) -> str:
        return relevance_skip_reason(context)

    def check_repeats(self, context: FormContext) -> None:
        # a query id given twice: the copies' embeddings (held for run()) must agree, as in
        # every form, before the table keeps the first copy's results
        context.store.deduped("q", "`ids` of the queries")

    def table(self, context: FormContext) -> RankTable:
        table = super().table(context)
        if context.qrels is None or table.query_id is None:
            return table
        gallery = context.fixed_gallery
        # a query the qrels do not name is in no mean (as in the Qrels form; summary() counts it)
        judged = check_ids_meet(context, table.query_id, None if gallery is None else gallery.ids)
        return table if bool(judged.all()) else table.select(judged)

    def notes(self, context: FormContext, table: RankTable) -> dict[str, int]:
        if context.qrels is None:
            return {}
        given = super().table(context).query_id
        return qrels_notes(
            context, table, torch.zeros(0, dtype=torch.int64) if given is None else given
        )
