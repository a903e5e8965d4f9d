"""Per-query measures: every measure of the library for each query of a :class:`RankTable`,
one module a family: :mod:`.counts` (hit rate, recall, precision, F1, R-precision),
:mod:`.average_precision` (AP, AP@K, MAP@R), :mod:`.ranks` (reciprocal rank, first rank, CMC,
mINP, granular MRR), :mod:`.gains` (NDCG, DCG) and :mod:`.common` (what they share).

Each ``*_per_query`` function returns a ``(Q,)`` float64 tensor with NaN for unanswerable queries
(m_q = 0); :mod:`retrieval_metrics.functional.measures.aggregation` turns them into one
value. The definitions, with formulas, are in the
documentation's Definitions page (docs/definitions.md); every tie rule is exact
(:mod:`retrieval_metrics.functional.measures.ties`).
"""

from retrieval_metrics.functional.measures.per_query.average_precision import (
    average_precision_per_query,
    map_at_r_per_query,
)
from retrieval_metrics.functional.measures.per_query.common import (
    SharedTieGroups,
)
from retrieval_metrics.functional.measures.per_query.counts import (
    expected_hits_per_query,
    f1_per_query,
    hit_rate_per_query,
    precision_per_query,
    r_precision_per_query,
    recall_per_query,
)
from retrieval_metrics.functional.measures.per_query.gains import (
    dcg_per_query,
    ndcg_per_query,
)
from retrieval_metrics.functional.measures.per_query.ranks import (
    cmc_per_query,
    first_rank_per_query,
    granular_mrr_per_query,
    minp_per_query,
    reciprocal_rank_per_query,
)

__all__ = [
    "SharedTieGroups",
    "average_precision_per_query",
    "cmc_per_query",
    "dcg_per_query",
    "expected_hits_per_query",
    "f1_per_query",
    "first_rank_per_query",
    "granular_mrr_per_query",
    "hit_rate_per_query",
    "map_at_r_per_query",
    "minp_per_query",
    "ndcg_per_query",
    "precision_per_query",
    "r_precision_per_query",
    "recall_per_query",
    "reciprocal_rank_per_query",
]
