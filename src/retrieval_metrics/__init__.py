"""retrieval-metrics: exact, fast retrieval metrics for PyTorch."""

from retrieval_metrics import functional
from retrieval_metrics.functional import (
    RankTable,
    rank_embeddings,
    rank_lists,
    rank_scores,
    retrieval_measures,
)

__version__ = "0.1.0"

__all__ = [
    "RankTable",
    "__version__",
    "functional",
    "rank_embeddings",
    "rank_lists",
    "rank_scores",
    "retrieval_measures",
]
