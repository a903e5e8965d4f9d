"""The ranking's options as one object, and the engine that ranks by them.

:class:`RankingOptions` is a :class:`~retrieval_metrics.functional.ranking.settings.RankingSettings`
(every option of the ranking, checked once) plus the :class:`RankingEngine` that ranks by them:
the metric classes make one and call :meth:`RankingOptions.rank` (or :meth:`~RankingOptions.
rank_two_ways`, :meth:`~RankingOptions.rank_sharded`) with the items of each side; the object
goes down whole. The engine is pluggable at the pass: :meth:`RankingEngine.rank` builds the
relevance sets and finishes the table in one place for every engine, and an engine implements
only :meth:`RankingEngine.rank_input`, the ranking of those prepared inputs.
:class:`BlockedEngine` (``engine/``, the exact blocked ranking) is the default;
``reference.ReferenceEngine`` (every score, a full sort of each row) is another, and a GPU
kernel or an approximate index would be one more. The metric classes take one as ``engine=``.

Items reaching :meth:`RankingOptions.rank` are taken as checked: the metric classes check every
batch of embeddings as it arrives (``check_embeddings`` at ``update``), so the blocked engine does
not scan them for NaN and infinities again. ``rank_embeddings`` and the other keyword functions
check what they are given.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar, final

from retrieval_metrics.functional.ranking.embeddings import (
    embedding_relevance,
    finish_table,
    two_way_tables,
)
from retrieval_metrics.functional.ranking.engine import schedule
from retrieval_metrics.functional.ranking.engine.direction import RankingInput
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.items import KEY_FIELDS, Items, Keys
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.functional.ranking.sharded import sharded_table
from retrieval_metrics.functional.table import RankTable

__all__ = ["BLOCKED_ENGINE", "BlockedEngine", "RankingEngine", "RankingOptions", "check_engine"]


class RankingEngine:
    """What ranks the items of a :class:`RankingOptions`: subclass it and implement
    :meth:`rank_input`.

    :meth:`rank` is a fixed template, the same for every engine: the relevance sets are built
    (``embedding_relevance``: labels, ids, judgments, exclusions, the order keys), the engine
    ranks those prepared inputs (:meth:`rank_input`), and the table is finished
    (``finish_table``: the judged documents the corpus lacks added as relevant and never
    retrieved, the judged documents split out where ``judged_documents`` asks, each query's
    class). An engine so gives the blocked engine's values on every form and every qrels case
    by ranking alone.

    ``rank_input(inputs, options, exchange)`` returns the :class:`RankTable` of the queries of
    ``inputs`` (a ``RankingInput``: the embeddings, the relevance sets and order keys) against
    its kept gallery (``inputs.relevance.gallery_index``), queries in input order, as
    ``schedule.blocked_table`` (the blocked engine) and ``reference.full_sort_table`` (the
    reference engine) do. ``exchange``: the processes that all hold these items may share the
    work out (every one returns the whole table); an engine may ignore it and rank everything.
    The embeddings are checked finite already.

    Both directions of two sets (:meth:`rank_two_ways`) are two calls of :meth:`rank` unless an
    engine does better; a gallery that stays split over processes (:meth:`rank_sharded`) is
    refused unless an engine implements it. ``reads_row_batches``: whether :meth:`rank_input`
    takes a gallery held in batches (:class:`RowBatches`) as it is; else it is given one joined
    tensor.
    """

    reads_row_batches: ClassVar[bool] = False

    @final
    def rank(
        self,
        queries: Items,
        gallery: Items | None,
        options: RankingSettings,
        exchange: Exchange | None = None,
    ) -> RankTable:
        """Every query of ``queries`` against ``gallery`` (None: same source, the queries
        against themselves, each never retrieving itself), relevance and exclusions by
        ``options`` and the items' keys, as ``rank_embeddings`` defines them: relevance built,
        :meth:`rank_input`, the table finished. Not overridden."""
        if (
            not self.reads_row_batches
            and gallery is not None
            and isinstance(gallery.emb, RowBatches)
        ):
            gallery = replace(gallery, emb=gallery.emb.joined())
        if gallery is None:
            inputs = embedding_relevance(
                queries.emb, None, queries.keys, None, options, scan=False
            )
        else:
            query_keys, gallery_keys = _side_keys(queries, gallery)
            emb = gallery.emb
            if isinstance(emb, RowBatches) and emb.on_disk:
                # a corpus on disk is streamed to the queries' device (a GPU's), a chunk at a
                # time, and ranked there
                gallery = replace(gallery, emb=emb.onto(queries.emb.device))
            query = queries.emb.to(gallery.emb.device)
            inputs = embedding_relevance(
                query, gallery.emb, query_keys, gallery_keys, options, scan=False
            )
        return finish_table(self.rank_input(inputs, options, exchange), inputs, options)

    def rank_input(
        self, inputs: RankingInput, options: RankingSettings, exchange: Exchange | None
    ) -> RankTable:
        """The table of the prepared ``inputs`` (see the class): what an engine implements."""
        raise NotImplementedError(f"{type(self).__name__} must implement rank_input()")

    def rank_two_ways(
        self, a: Items, b: Items, options: RankingOptions
    ) -> tuple[RankTable, RankTable]:
        """``b`` ranked for every item of ``a`` and ``a`` for every item of ``b`` (relevant: the
        same label, the ignore label unread): each direction with :meth:`rank`."""
        labelled = replace(options, relevance="label", ignore_label=None)
        a = Items(emb=a.emb, labels=a.labels)
        b = Items(emb=b.emb.to(a.emb.device), labels=b.labels)
        return self.rank(a, b, labelled, None), self.rank(b, a, labelled, None)

    def rank_sharded(
        self, queries: Items, shard: Items, options: RankingOptions, exchange: Exchange
    ) -> RankTable:
        """Every query against a gallery split over the processes of ``exchange``."""
        raise ValueError(
            f"a gallery sharded over processes is ranked by the blocked engine only, not "
            f"{self!r}: leave `engine` out, or gather the gallery (gallery_sharded=False)"
        )


class BlockedEngine(RankingEngine):
    """The library's exact engine: the relevance sets (``embeddings``), then the blocked passes
    of ``engine/schedule``; also one pass for both directions of two sets (:meth:`rank_two_ways`)
    and a gallery sharded over processes (:meth:`rank_sharded`). It reads a gallery held in
    batches a block at a time, never joined."""

    reads_row_batches: ClassVar[bool] = True

    def __repr__(self) -> str:
        return "BlockedEngine()"

    def rank_input(
        self, inputs: RankingInput, options: RankingSettings, exchange: Exchange | None
    ) -> RankTable:
        """The blocked passes of ``engine/schedule``."""
        return schedule.blocked_table(inputs, options, exchange)

    def rank_two_ways(
        self, a: Items, b: Items, options: RankingOptions
    ) -> tuple[RankTable, RankTable]:
        """``b`` ranked for every item of ``a`` and ``a`` for every item of ``b`` (relevant: the
        same label), both from one pass over the products."""
        b_emb = b.emb.to(a.emb.device)
        return two_way_tables(a.emb, b_emb, a.labels, b.labels, options, scan=False)

    def rank_sharded(
        self, queries: Items, shard: Items, options: RankingOptions, exchange: Exchange
    ) -> RankTable:
        """Every query against a gallery split over the processes of ``exchange``."""
        query_keys, shard_keys = _side_keys(queries, shard)
        return sharded_table(
            queries.emb, shard.emb, query_keys, shard_keys, options, exchange, scan=False
        )


def check_engine(engine: object) -> RankingEngine:
    """``engine`` if it is a :class:`RankingEngine`, else a ValueError naming ``engine``."""
    if not isinstance(engine, RankingEngine):
        raise ValueError(
            "`engine` must be a RankingEngine (retrieval_metrics.functional.ranking: "
            f"subclass it and implement rank_input()), got {type(engine).__name__}"
        )
    return engine


#: the default engine of :class:`RankingOptions`
BLOCKED_ENGINE = BlockedEngine()


@dataclass(frozen=True)
class RankingOptions(RankingSettings):
    """Every option of the ranking of embeddings (see ``rank_embeddings``) and the ``engine``
    that ranks by them (the exact blocked one by default)."""

    engine: RankingEngine = BLOCKED_ENGINE

    def __post_init__(self) -> None:
        super().__post_init__()
        check_engine(self.engine)

    def rank(
        self, queries: Items, gallery: Items | None, exchange: Exchange | None = None
    ) -> RankTable:
        """Rank ``gallery`` for every query; self-exclusion and relevance by the items' ids.

        ``gallery=None`` is same source: the queries ranked against themselves, each never
        retrieving itself. Stated by the caller, never inferred from the two sides holding the
        same tensors: it is what lets the ranking compute each block pair of the symmetric score
        matrix once for both of its sides. ``exchange``: the processes that all hold these items
        share the ranking out (see ``rank_embeddings``). The embeddings are taken as checked
        finite (the metric classes check each batch at ``update``). A gallery held in batches
        (:class:`RowBatches`) goes to an engine that reads it so (the blocked one) as it is, to
        any other joined."""
        return self.engine.rank(queries, gallery, self, exchange)

    def rank_two_ways(self, a: Items, b: Items) -> tuple[RankTable, RankTable]:
        """``b`` ranked for every item of ``a`` and ``a`` for every item of ``b`` (relevant: the
        same label), both from one pass over the products (the blocked engine; another ranks each
        direction with its ``rank``: the same tables)."""
        return self.engine.rank_two_ways(a, b, self)

    def rank_sharded(self, queries: Items, shard: Items, exchange: Exchange) -> RankTable:
        """Rank every query against a gallery split over processes (this one holds ``shard``).
        The blocked engine's pass: a gallery that stays split needs its scores and counts
        exchanged between the block products."""
        return self.engine.rank_sharded(queries, shard, self, exchange)


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
