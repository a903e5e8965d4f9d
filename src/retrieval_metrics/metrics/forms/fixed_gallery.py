"""A gallery given once with ``set_gallery`` (a corpus in memory or on disk): query updates are
kept as the query/gallery form keeps them, and ranked against that gallery at ``compute()``,
every query at once.

Ranking each update as it came made each update one pass over the corpus: a dataloader's batch
of 64 queries read a corpus of 500,000 rows once per 64 queries (2.8-3.0x one product, against
1.3-1.5x for one update of 1,024). Ranked at ``compute()``, the queries share the passes as they
do in the query/gallery form, whose states, deduplication, gather, chunks of queries and
judgments this form reuses: only the gallery differs, held by the metric rather than gathered
from the states.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import fingerprint
from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.ranking.labels import all_distinct, key_kind
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.tie_order import id_order_rows
from retrieval_metrics.functional.table import RankTable
from retrieval_metrics.metrics import distributed as D
from retrieval_metrics.metrics.forms.base import Batch, FormContext
from retrieval_metrics.metrics.forms.embeddings import QueryGallery, check_ids_across_sides
from retrieval_metrics.metrics.forms.qrels import (
    check_identical_ids,
    judged_against,
    qrels_notes,
)
from retrieval_metrics.metrics.inputs import as_corpus, check_device_holds, item_tensors, score_copy

__all__ = ["FixedGallery"]


class FixedGallery(QueryGallery):
    """A gallery given once with ``set_gallery``; ``update(q, q_labels, role="query")`` adds
    queries (``role`` may be left out), ranked against it at ``compute()``."""

    kind = "fixed_gallery"
    description = "a fixed gallery (set_gallery)"

    def accepts(self, batch: Batch, context: FormContext) -> bool:
        return context.fixed_gallery is not None

    def append(self, context: FormContext, batch: Batch) -> None:
        if batch.role == "gallery":
            raise ValueError("a fixed gallery was set with `set_gallery`; update queries only")
        super().append(context, replace(batch, role="query"))

    def check_width(self, context: FormContext, emb: Tensor) -> None:
        gallery = context.fixed_gallery
        assert gallery is not None
        if emb.shape[1] != gallery.emb.shape[1]:
            raise ValueError(
                f"`embeddings` must have {gallery.emb.shape[1]} columns, the width of "
                f"the gallery given to `set_gallery`, got {emb.shape[1]}"
            )

    def sides(self, context: FormContext) -> tuple[Items, Items | None]:
        """The queries given (one per id) and the gallery of ``set_gallery``."""
        gallery = context.fixed_gallery
        queries = context.store.deduped("q", "`ids` of the queries")
        if gallery is None or queries is None or len(queries) == 0:
            raise ValueError(
                "no queries were given: update(embeddings, ids=..., role='query') after "
                "set_gallery"
            )
        check_identical_ids(context, queries, gallery)
        check_ids_across_sides(context, queries, gallery)
        return queries, gallery

    def table(self, context: FormContext) -> RankTable:
        if context.qrels is None:
            # the whole gallery on every process, as set (never a shard of the
            # query/gallery form's gallery_sharded=True): the embedding forms' ranking
            return super(QueryGallery, self).table(context)
        queries, gallery = self.sides(context)
        assert gallery is not None
        return judged_against(context, queries, gallery)

    def notes(self, context: FormContext, table: RankTable) -> dict[str, int]:
        return {} if context.qrels is None else qrels_notes(context, table)

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
        if items.ids is not None and not all_distinct(items.ids):
            # each item once (repeats that agree dropped, as a gallery in updates drops them;
            # an id for two samples refused alike), in the order given, so that a gallery of
            # distinct ids is kept as it is, never copied
            items = items.select(torch.sort(D.dedupe_by_id(
                items.ids, "`ids` of the gallery items", embeddings=items.emb,
                labels=items.labels, cameras=items.cameras, positions=items.positions,
                named=_as_given(items.ids, keys["ids"]),
            )).values)
        # held as one batch: the ranking reads it a block at a time (for cosine, divided by the
        # norms as read), never a normalised copy of the corpus
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


def _as_given(codes: Tensor, given: Any) -> Callable[[Tensor], str]:
    """How a message names a few of ``codes`` (the ids' codes, in the order given): as the
    text ids given for them (a text id is held as its 64-bit code, which names nothing to the
    user); integer ids are their own codes. Their kind is read only for a message."""

    def named(bad: Tensor) -> str:
        if key_kind(given) != "str":
            return D.ids_as_integers(bad)
        first = [int(torch.nonzero(codes == code)[0, 0]) for code in bad.tolist()]
        return ", ".join(repr(str(given[i])) for i in first)

    return named
