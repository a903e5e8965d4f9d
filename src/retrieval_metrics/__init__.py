"""retrieval-metrics: exact, fast retrieval metrics for PyTorch."""

from typing import TYPE_CHECKING

from retrieval_metrics.functional._lazy import lazy_names

if TYPE_CHECKING:  # the names as static tools see them; imported when first read
    from retrieval_metrics import functional
    from retrieval_metrics.comparison import compare, compare_systems
    from retrieval_metrics.functional import RankTable, rank_embeddings, rank_lists, rank_scores
    from retrieval_metrics.functional.measures import retrieval_measures
    from retrieval_metrics.metrics import (
        CMC,
        MINP,
        MRR,
        CrossModalRetrieval,
        HitRateAtK,
        MAPAtR,
        MeanAveragePrecision,
        MeanRank,
        MedianRank,
        NDCGAtK,
        PrecisionAtK,
        RecallAtK,
        RetrievalMetric,
        RetrievalMetricBase,
        RetrievalMetrics,
        RPrecision,
        RSum,
    )

__version__ = "0.1.0"

__all__ = [
    "CMC",
    "MINP",
    "MRR",
    "CrossModalRetrieval",
    "HitRateAtK",
    "MAPAtR",
    "MeanAveragePrecision",
    "MeanRank",
    "MedianRank",
    "NDCGAtK",
    "PrecisionAtK",
    "RPrecision",
    "RSum",
    "RankTable",
    "RecallAtK",
    "RetrievalMetric",
    "RetrievalMetricBase",
    "RetrievalMetrics",
    "__version__",
    "compare",
    "compare_systems",
    "functional",
    "rank_embeddings",
    "rank_lists",
    "rank_scores",
    "retrieval_measures",
]

# each name under its module, imported when the name is first read (``functional._lazy``):
# ``import retrieval_metrics`` and ``retrieval-metrics --help`` import neither torch nor
# torchmetrics; every other public name is a metric class
_ELSEWHERE = {
    "retrieval_metrics.functional": ["functional", "RankTable", "rank_embeddings", "rank_lists",
                                     "rank_scores"],
    "retrieval_metrics.functional.measures": ["retrieval_measures"],
    "retrieval_metrics.comparison": ["compare", "compare_systems"],
}
_METRIC_CLASSES = sorted(
    set(__all__) - {"__version__"} - {n for names in _ELSEWHERE.values() for n in names}
)
__getattr__, __dir__ = lazy_names(
    __name__, {**_ELSEWHERE, "retrieval_metrics.metrics": _METRIC_CLASSES}
)
