"""Pure functions, no state: ``ranking`` (inputs -> :class:`RankTable`) and ``measures``
(:class:`RankTable` -> numbers), side by side on ``table.py``; ``options`` declares every option."""

from typing import TYPE_CHECKING

from retrieval_metrics._lazy import lazy_names

if TYPE_CHECKING:  # the names as static tools see them; imported when first read
    from retrieval_metrics.functional.measures import (
        Measure,
        MeasureOptions,
        aggregate,
        auroc_per_query,
        average_precision_per_query,
        chance_table,
        cmc_per_query,
        depth_for,
        f1_per_query,
        fall_out_per_query,
        first_rank_per_query,
        granular_mrr_per_query,
        hit_rate_per_query,
        map_at_r_per_query,
        median_rank,
        minp_per_query,
        ndcg_per_query,
        parse_metric,
        precision_per_query,
        r_precision_per_query,
        recall_per_query,
        reciprocal_rank_per_query,
        register_measure,
        retrieval_measures,
    )
    from retrieval_metrics.functional.ranking import (
        RankTable,
        rank_embeddings,
        rank_lists,
        rank_relevance,
        rank_scores,
        rank_two_ways,
    )
    from retrieval_metrics.functional.ranking.labels import encode_labels
    from retrieval_metrics.functional.ranking.relevance import Relevance, build_relevance

# each name's module, imported when the name is first read (``_lazy``): importing the package
# imports nothing heavy
_NAMES = {
    "Measure": "retrieval_metrics.functional.measures",
    "MeasureOptions": "retrieval_metrics.functional.measures",
    "aggregate": "retrieval_metrics.functional.measures",
    "auroc_per_query": "retrieval_metrics.functional.measures",
    "average_precision_per_query": "retrieval_metrics.functional.measures",
    "chance_table": "retrieval_metrics.functional.measures",
    "cmc_per_query": "retrieval_metrics.functional.measures",
    "depth_for": "retrieval_metrics.functional.measures",
    'f1_per_query': 'retrieval_metrics.functional.measures',
    "fall_out_per_query": "retrieval_metrics.functional.measures",
    "first_rank_per_query": "retrieval_metrics.functional.measures",
    "granular_mrr_per_query": "retrieval_metrics.functional.measures",
    "hit_rate_per_query": "retrieval_metrics.functional.measures",
    "map_at_r_per_query": "retrieval_metrics.functional.measures",
    "median_rank": "retrieval_metrics.functional.measures",
    "minp_per_query": "retrieval_metrics.functional.measures",
    "ndcg_per_query": "retrieval_metrics.functional.measures",
    "parse_metric": "retrieval_metrics.functional.measures",
    "precision_per_query": "retrieval_metrics.functional.measures",
    "r_precision_per_query": "retrieval_metrics.functional.measures",
    "recall_per_query": "retrieval_metrics.functional.measures",
    "reciprocal_rank_per_query": "retrieval_metrics.functional.measures",
    "register_measure": "retrieval_metrics.functional.measures",
    "retrieval_measures": "retrieval_metrics.functional.measures",
    "RankTable": "retrieval_metrics.functional.ranking",
    "rank_embeddings": "retrieval_metrics.functional.ranking",
    "rank_lists": "retrieval_metrics.functional.ranking",
    "rank_relevance": "retrieval_metrics.functional.ranking",
    "rank_scores": "retrieval_metrics.functional.ranking",
    "rank_two_ways": "retrieval_metrics.functional.ranking",
    "encode_labels": "retrieval_metrics.functional.ranking.labels",
    "Relevance": "retrieval_metrics.functional.ranking.relevance",
    "build_relevance": "retrieval_metrics.functional.ranking.relevance",
}
__getattr__, __dir__ = lazy_names(__name__, _NAMES)

__all__ = [
    "Measure",
    "MeasureOptions",
    "RankTable",
    "Relevance",
    "aggregate",
    "auroc_per_query",
    "average_precision_per_query",
    "build_relevance",
    "chance_table",
    "cmc_per_query",
    "depth_for",
    "encode_labels",
    "f1_per_query",
    "fall_out_per_query",
    "first_rank_per_query",
    "granular_mrr_per_query",
    "hit_rate_per_query",
    "map_at_r_per_query",
    "median_rank",
    "minp_per_query",
    "ndcg_per_query",
    "parse_metric",
    "precision_per_query",
    "r_precision_per_query",
    "rank_embeddings",
    "rank_lists",
    "rank_relevance",
    "rank_scores",
    "rank_two_ways",
    "recall_per_query",
    "reciprocal_rank_per_query",
    "register_measure",
    "retrieval_measures",
]
