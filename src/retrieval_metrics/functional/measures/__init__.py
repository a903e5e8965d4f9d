"""Measures: every metric of the library, from a rank table
(:class:`~retrieval_metrics.functional.table.RankTable`). No embeddings here.

- :mod:`.per_query`: each measure per query (``hit_rate_per_query``, ``ndcg_per_query``, ...);
- :mod:`.ties`: the three tie rules in closed form;
- :mod:`.judged`: incomplete judgments: Judged@K, bpref, the condensed lists, relevance levels;
- :mod:`.user_models`: ERR and RBP (with its residual);
- :mod:`.names`: the measure names ("hit_rate@1", "map@r", "cmc@50", ...), their parser and
  :func:`register_measure`;
- :mod:`.options`: :class:`MeasureOptions`, the options of the measures as one object;
- :mod:`.aggregation`: per-query values -> one number, and :func:`retrieval_measures`;
- :mod:`.stats`: chance level, intervals, paired comparison, the summary table.

The definitions, with formulas, are in the documentation's Definitions page (docs/definitions.md).
"""

from retrieval_metrics.functional.measures.aggregation import (
    EMPTY_QUERIES,
    MEDIAN_CONVENTIONS,
    QueryParts,
    aggregate,
    aggregate_query_parts,
    chance_measures,
    chance_table,
    counted_values,
    median_rank,
    micro_parts,
    per_query_values,
    query_fields,
    query_parts_in_chunks,
    retrieval_measures,
)
from retrieval_metrics.functional.measures.judged import (
    at_level,
    bpref_per_query,
    condensed,
    judged_per_query,
)
from retrieval_metrics.functional.measures.names import (
    AVERAGES,
    IR_MEASURES,
    MEASURES,
    RANK_METRICS,
    Measure,
    MetricSpec,
    average_for,
    cutoff_depth,
    depth_for,
    divides_by_retrieved,
    judged_needed,
    parse_metric,
    refuse_ambiguous_recall,
    register_measure,
    suggest_metric,
    unregister_measure,
)
from retrieval_metrics.functional.measures.options import MeasureOptions
from retrieval_metrics.functional.measures.per_query import (
    AP_DIVISORS,
    AP_KINDS,
    SharedTieGroups,
    average_precision_per_query,
    cmc_per_query,
    dcg_per_query,
    expected_hits_per_query,
    f1_per_query,
    first_rank_per_query,
    granular_mrr_per_query,
    hit_rate_per_query,
    map_at_r_per_query,
    minp_per_query,
    ndcg_per_query,
    precision_per_query,
    r_precision_per_query,
    recall_per_query,
    reciprocal_rank_per_query,
)
from retrieval_metrics.functional.measures.roc import auroc_per_query, fall_out_per_query
from retrieval_metrics.functional.measures.user_models import (
    err_per_query,
    rbp_per_query,
    rbp_residual_per_query,
)

__all__ = [
    "AP_DIVISORS",
    "AP_KINDS",
    "AVERAGES",
    "EMPTY_QUERIES",
    "IR_MEASURES",
    "MEASURES",
    "MEDIAN_CONVENTIONS",
    "RANK_METRICS",
    "Measure",
    "MeasureOptions",
    "MetricSpec",
    "QueryParts",
    "SharedTieGroups",
    "aggregate",
    "aggregate_query_parts",
    "at_level",
    "auroc_per_query",
    "average_for",
    "average_precision_per_query",
    "bpref_per_query",
    "chance_measures",
    "chance_table",
    "cmc_per_query",
    "condensed",
    "counted_values",
    "cutoff_depth",
    "dcg_per_query",
    "depth_for",
    "divides_by_retrieved",
    "err_per_query",
    "expected_hits_per_query",
    "f1_per_query",
    "fall_out_per_query",
    "first_rank_per_query",
    "granular_mrr_per_query",
    "hit_rate_per_query",
    "judged_needed",
    "judged_per_query",
    "map_at_r_per_query",
    "median_rank",
    "micro_parts",
    "minp_per_query",
    "ndcg_per_query",
    "parse_metric",
    "per_query_values",
    "precision_per_query",
    "query_fields",
    "query_parts_in_chunks",
    "r_precision_per_query",
    "rbp_per_query",
    "rbp_residual_per_query",
    "recall_per_query",
    "reciprocal_rank_per_query",
    "refuse_ambiguous_recall",
    "register_measure",
    "retrieval_measures",
    "suggest_metric",
    "unregister_measure",
]
