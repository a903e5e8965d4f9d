"""Pure functions, no state: ``ranking`` (inputs -> :class:`RankTable`) and ``measures``
(:class:`RankTable` -> numbers), side by side on ``table.py``; ``options`` declares every option."""

from typing import TYPE_CHECKING

from retrieval_metrics.functional._lazy import lazy_names

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
        rank_scores,
        rank_two_ways,
        top_k,
    )

# each name under its module, imported when the name is first read (``_lazy``): importing the
# package imports nothing heavy
__getattr__, __dir__ = lazy_names(__name__, {
    "retrieval_metrics.functional.measures": [
        "Measure", "MeasureOptions", "aggregate", "auroc_per_query", "average_precision_per_query",
        "chance_table", "cmc_per_query", "depth_for", "f1_per_query", "fall_out_per_query",
        "first_rank_per_query",
        "granular_mrr_per_query", "hit_rate_per_query", "map_at_r_per_query", "median_rank",
        "minp_per_query", "ndcg_per_query", "parse_metric", "precision_per_query",
        "r_precision_per_query", "recall_per_query", "reciprocal_rank_per_query",
        "register_measure", "retrieval_measures",
    ],
    "retrieval_metrics.functional.ranking": [
        "RankTable", "rank_embeddings", "rank_lists", "rank_scores", "rank_two_ways", "top_k",
    ],
})

__all__ = [
    "Measure",
    "MeasureOptions",
    "RankTable",
    "aggregate",
    "auroc_per_query",
    "average_precision_per_query",
    "chance_table",
    "cmc_per_query",
    "depth_for",
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
    "rank_scores",
    "rank_two_ways",
    "recall_per_query",
    "reciprocal_rank_per_query",
    "register_measure",
    "retrieval_measures",
    "top_k",
]
