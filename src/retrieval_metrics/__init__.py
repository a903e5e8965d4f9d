"""retrieval-metrics: exact, fast retrieval metrics for PyTorch."""

from typing import TYPE_CHECKING

from retrieval_metrics._lazy import lazy_names

if TYPE_CHECKING:  # the names as static tools see them; imported when first read
    from retrieval_metrics import functional
    from retrieval_metrics.comparison import compare
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

_METRICS = "retrieval_metrics.metrics"
# each name's module, imported when the name is first read (``_lazy``): ``import
# retrieval_metrics`` and ``retrieval-metrics --help`` import neither torch nor torchmetrics
__getattr__, __dir__ = lazy_names(__name__, {
    "functional": "retrieval_metrics.functional",
    "compare": "retrieval_metrics.comparison",
    "RankTable": "retrieval_metrics.functional",
    "rank_embeddings": "retrieval_metrics.functional",
    "rank_lists": "retrieval_metrics.functional",
    "rank_scores": "retrieval_metrics.functional",
    "retrieval_measures": "retrieval_metrics.functional.measures",
    **dict.fromkeys(
        [
            "CMC", "MINP", "MRR", "CrossModalRetrieval", "HitRateAtK", "MAPAtR",
            "MeanAveragePrecision", "MeanRank", "MedianRank", "NDCGAtK", "PrecisionAtK",
            "RecallAtK", "RetrievalMetric", "RetrievalMetricBase", "RetrievalMetrics",
            "RPrecision", "RSum",
        ],
        _METRICS,
    ),
})

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
    "functional",
    "rank_embeddings",
    "rank_lists",
    "rank_scores",
    "retrieval_measures",
]
