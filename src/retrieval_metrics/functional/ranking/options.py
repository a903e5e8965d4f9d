"""The ranking's options as one object, and where the metric classes' items are ranked.

:class:`RankingOptions` is a :class:`~retrieval_metrics.functional.ranking.settings.RankingSettings`
(every option of the ranking, checked once) with the methods the metric classes call with the
items of each side: :meth:`RankingOptions.rank`, :meth:`~RankingOptions.rank_two_ways` and
:meth:`~RankingOptions.rank_sharded`. The object goes down whole.

Items reaching these methods are taken as checked: the metric classes check every batch of
embeddings as it arrives (``check_embeddings`` at ``update``), so the ranking does not scan them
for NaN and infinities again. ``rank_embeddings`` and the other keyword functions check what
they are given.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from retrieval_metrics.functional.ranking.embeddings import (
    embedding_relevance,
    ranked_table,
    two_way_tables,
)
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.items import KEY_FIELDS, Items, Keys
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.functional.ranking.sharded import sharded_table
from retrieval_metrics.functional.table import RankTable

__all__ = ["RankingOptions"]


@dataclass(frozen=True)
class RankingOptions(RankingSettings):
    """Every option of the ranking of embeddings (see ``rank_embeddings``), and the rankings of
    the metric classes' items by them."""

    def rank(
        self, queries: Items, gallery: Items | None, exchange: Exchange | None = None
    ) -> RankTable:
        """Rank ``gallery`` for every query; self-exclusion and relevance by the items' ids.

        ``gallery=None`` is same source: the queries ranked against themselves, each never
        retrieving itself. Stated by the caller, never inferred from the two sides holding the
        same tensors: it is what lets the ranking compute each block pair of the symmetric score
        matrix once for both of its sides. ``exchange``: the processes that all hold these items
        share the ranking out (see ``rank_embeddings``). The embeddings are taken as checked
        finite (the metric classes check each batch at ``update``)."""
        if gallery is None:
            inputs = embedding_relevance(queries.emb, None, queries.keys, None, self, scan=False)
        else:
            query_keys, gallery_keys = _side_keys(queries, gallery)
            query = queries.emb.to(gallery.emb.device)
            inputs = embedding_relevance(
                query, gallery.emb, query_keys, gallery_keys, self, scan=False
            )
        return ranked_table(inputs, self, exchange)

    def rank_two_ways(self, a: Items, b: Items) -> tuple[RankTable, RankTable]:
        """``b`` ranked for every item of ``a`` and ``a`` for every item of ``b`` (relevant: the
        same label), both from one pass over the products."""
        b_emb = b.emb.to(a.emb.device)
        return two_way_tables(a.emb, b_emb, a.labels, b.labels, self, scan=False)

    def rank_sharded(self, queries: Items, shard: Items, exchange: Exchange) -> RankTable:
        """Rank every query against a gallery split over processes (this one holds ``shard``)."""
        query_keys, shard_keys = _side_keys(queries, shard)
        return sharded_table(
            queries.emb, shard.emb, query_keys, shard_keys, self, exchange, scan=False
        )


def _side_keys(queries: Items, gallery: Items) -> tuple[Keys, Keys]:
    """Both sides' keys; an empty gallery (shard) still needs empty per-item tensors where the
    queries have them."""
    query_keys, gallery_keys = queries.keys, gallery.keys
    if len(gallery) == 0:
        empty = {
            name: getattr(query_keys, name)[:0]
            for name in KEY_FIELDS
            if getattr(query_keys, name) is not None and getattr(gallery_keys, name) is None
        }
        gallery_keys = replace(gallery_keys, **empty)
    return query_keys, gallery_keys
