"""Named measures: the names ("hit_rate@1", "map@r", "cmc@50", ...) of the measure registry
(:mod:`retrieval_metrics.functional.measures.registry`: one :class:`Measure` record per measure)
and their parser (:mod:`retrieval_metrics.functional.measures.parsing`), read from one place."""

from retrieval_metrics.functional.measures.parsing import (
    MetricSpec,
    average_for,
    cutoff_depth,
    depth_for,
    divides_by_retrieved,
    judged_needed,
    judged_queries_needed,
    parse_metric,
    refuse_ambiguous_recall,
    suggest_metric,
)
from retrieval_metrics.functional.measures.registry import (
    IR_MEASURES,
    MEASURES,
    NAME_PARAMS,
    RANK_METRICS,
    Measure,
    register_measure,
    unregister_measure,
)

__all__ = [
    "IR_MEASURES",
    "MEASURES",
    "NAME_PARAMS",
    "RANK_METRICS",
    "Measure",
    "MetricSpec",
    "average_for",
    "cutoff_depth",
    "depth_for",
    "divides_by_retrieved",
    "judged_needed",
    "judged_queries_needed",
    "parse_metric",
    "refuse_ambiguous_recall",
    "register_measure",
    "suggest_metric",
    "unregister_measure",
]
