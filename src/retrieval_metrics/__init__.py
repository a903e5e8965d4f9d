"""retrieval-metrics: exact, fast retrieval metrics for PyTorch."""

from retrieval_metrics import functional
from retrieval_metrics.compare import compare
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
    "functional",
    "rank_embeddings",
    "rank_lists",
    "rank_scores",
    "retrieval_measures",
]
