"""The plain reference path of the ranking (every score, a full sort of each row) as a
:class:`~retrieval_metrics.functional.ranking.RankingEngine`: what the engine tests plug in where
the blocked engine would rank, counting its calls."""

from __future__ import annotations

from retrieval_metrics.functional.ranking import RankingEngine
from retrieval_metrics.functional.ranking.items import KEY_FIELDS
from retrieval_metrics.functional.ranking.reference import rank_embeddings_by_full_sort


class FullSortEngine(RankingEngine):
    """Ranks by ``rank_embeddings_by_full_sort`` with every setting of the options."""

    def __init__(self) -> None:
        self.calls = 0

    def rank(self, queries, gallery, options, exchange):
        self.calls += 1
        keys = {f"query_{name}": getattr(queries, name) for name in KEY_FIELDS}
        if gallery is not None:
            keys.update({f"gallery_{name}": getattr(gallery, name) for name in KEY_FIELDS})
        return rank_embeddings_by_full_sort(
            queries.emb,
            None if gallery is None else gallery.emb,
            similarity=options.similarity,
            memory_budget=options.memory_budget,
            block_size=options.block_size,
            relevance=options.relevance,
            radius=options.radius,
            ignore_label=options.ignore_label,
            qrels=options.qrels,
            ignore_identical_ids=options.ignore_identical_ids,
            depth=options.depth,
            cover_relevant=options.cover_relevant,
            **keys,
        )
