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
    aggregate,
    chance_measures,
    chance_table,
    median_rank,
    per_query_values,
    retrieval_measures,
)
from retrieval_metrics.functional.measures.judged import (
    at_level,
    bpref_per_query,
    condensed,
    judged_per_query,
)
from retrieval_metrics.functional.measures.names import (
    MEASURES,
    Measure,
    MetricSpec,
    depth_for,
    parse_metric,
    register_measure,
    unregister_measure,
)
from retrieval_metrics.functional.measures.options import MeasureOptions
from retrieval_metrics.functional.measures.per_query import (
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
    "MEASURES",
    "Measure",
    "MeasureOptions",
    "MetricSpec",
    "SharedTieGroups",
    "aggregate",
    "at_level",
    "auroc_per_query",
    "average_precision_per_query",
    "bpref_per_query",
    "chance_measures",
    "chance_table",
    "cmc_per_query",
    "condensed",
    "dcg_per_query",
    "depth_for",
    "err_per_query",
    "expected_hits_per_query",
    "f1_per_query",
    "fall_out_per_query",
    "first_rank_per_query",
    "granular_mrr_per_query",
    "hit_rate_per_query",
    "judged_per_query",
    "map_at_r_per_query",
    "median_rank",
    "minp_per_query",
    "ndcg_per_query",
    "parse_metric",
    "per_query_values",
    "precision_per_query",
    "r_precision_per_query",
    "rbp_per_query",
    "rbp_residual_per_query",
    "recall_per_query",
    "reciprocal_rank_per_query",
    "register_measure",
    "retrieval_measures",
    "unregister_measure",
]
