"""The stateful metric classes (torchmetrics ``Metric`` subclasses).

- :mod:`.base`: :class:`RetrievalMetricBase`, what every kind shares: options, states, the
  distributed sync, rank tables, ``per_query``, ``summary``;
- :mod:`.retrieval`: :class:`RetrievalMetric`, the one-direction kind, on the input forms of
  :mod:`.forms` (one small object per form) and :mod:`.inputs` (what ``update()`` accepts);
- :mod:`.named`: the named classes (``HitRateAtK`` ... ``RetrievalMetrics``);
- :mod:`.crossmodal`: image-text, both directions (``CrossModalRetrieval``, ``RSum``);
- :mod:`.distributed`: gathering states, dropping repeated samples, sharing the ranking out;
- :mod:`.items` (one side's per-item tensors), :mod:`.chunks` (ranking a chunk of queries at a
  time when the relevant pairs outgrow the memory budget);
- :mod:`.protocols`: the named protocols' options, which the classes read.

The classes are imported when first read (as the package root's names are), so that the
protocols' policy is read without importing torchmetrics.
"""

from typing import TYPE_CHECKING

from retrieval_metrics.functional._lazy import lazy_names

if TYPE_CHECKING:
    from retrieval_metrics.metrics.base import RetrievalMetricBase
    from retrieval_metrics.metrics.crossmodal import CrossModalRetrieval, RSum
    from retrieval_metrics.metrics.named import (
        CMC,
        MINP,
        MRR,
        HitRateAtK,
        MAPAtR,
        MeanAveragePrecision,
        MeanRank,
        MedianRank,
        NDCGAtK,
        PrecisionAtK,
        RecallAtK,
        RetrievalMetrics,
        RPrecision,
    )
    from retrieval_metrics.metrics.retrieval import RetrievalMetric

__getattr__, __dir__ = lazy_names(__name__, {
    "retrieval_metrics.metrics.base": ["RetrievalMetricBase"],
    "retrieval_metrics.metrics.crossmodal": ["CrossModalRetrieval", "RSum"],
    "retrieval_metrics.metrics.named": [
        "CMC", "MINP", "MRR", "HitRateAtK", "MAPAtR", "MeanAveragePrecision", "MeanRank",
        "MedianRank", "NDCGAtK", "PrecisionAtK", "RecallAtK", "RetrievalMetrics", "RPrecision",
    ],
    "retrieval_metrics.metrics.retrieval": ["RetrievalMetric"],
})

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
    "RecallAtK",
    "RetrievalMetric",
    "RetrievalMetricBase",
    "RetrievalMetrics",
]
