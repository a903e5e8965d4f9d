"""Measures of the relevant items counted in the top K: hit rate, recall, precision, F1 and
R-precision (each from the expected hits, :func:`expected_hits_per_query`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.measures.options import (
    DEFAULT_TIES,
)
from retrieval_metrics.functional.measures.per_query.common import (
    SharedTieGroups,
    as_cutoff,
    check_cutoff,
    query_sum,
    require_depth,
    require_first,
    spread_over_queries,
    tie_groups_of,
    unanswerable_nan,
)
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = [
    "expected_hits_per_query",
    "f1_per_query",
    "hit_rate_per_query",
    "precision_per_query",
    "r_precision_per_query",
    "recall_per_query",
]


def expected_hits_per_query(
    table: RankTable,
    k: int | Tensor | None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """E[h_q(K)]: relevant items in the top K (NaN-free; 0 for unanswerable queries).

    Args:
        table: the rank table.
        k: cut-off K, or one per query as a ``(Q,)`` tensor; None is the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64.
    """
    cutoff = as_cutoff(table, k)
    require_depth(table, cutoff, "a cut-off measure")
    groups = tie_groups_of(table, ties, shared=shared)
    return query_sum(table, groups, T.expected_hits(groups, groups.at_query(cutoff)))

def hit_rate_per_query(
    table: RankTable,
    k: int | Tensor | None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """1[r_q <= K]; under "expected" ties, the probability of a hit in the top K.

    Args:
        table: the rank table.
        k: cut-off K, or one per query as a ``(Q,)`` tensor; None is the whole
            ranking (every id of a ranked list).
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    cutoff = as_cutoff(table, k)
    require_first(table, cutoff, "hit rate")
    q, a, t, r = tie_groups_of(table, ties, shared=shared).first_groups
    # (one K for all: no per-query cut-offs to take at the groups' queries)
    at = k if isinstance(k, int) else cutoff.index_select(0, q)
    p = 1.0 - T.miss_probability(t, r, T.positions_in_cutoff(a, t, at))
    # (the first groups' queries are distinct)
    return unanswerable_nan(table, spread_over_queries(table, q, p, 0.0))

def recall_per_query(
    table: RankTable,
    k: int | Tensor | None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """h_q(K) / m_q.

    Args:
        table: the rank table.
        k: cut-off K, or one per query as a ``(Q,)`` tensor; None is the whole
            ranking (every id of a ranked list).
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    hits = expected_hits_per_query(table, k, ties, shared=shared)
    return unanswerable_nan(table, hits / table.num_relevant.clamp_min(1))

def precision_per_query(
    table: RankTable,
    k: int | None = None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
    where_defined: bool = False,
) -> Tensor:
    """h_q(K) / K (the divisor stays K when the gallery is smaller); without a cut-off, the
    relevant items retrieved over the distinct items retrieved (trec_eval's ``set_P``; the
    whole list's precision of LlamaIndex and ragas).

    Args:
        table: the rank table.
        k: cut-off K, or None for the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.
        where_defined: the values of ``empty_queries="nan"``: a query with no relevant item
            scores 0 (precision does not divide by m_q), and one that retrieved nothing is NaN
            (0 / 0). Otherwise the first is NaN and the second 0.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    if k is None:
        hits = expected_hits_per_query(table, None, ties, shared=shared)
        retrieved = _retrieved(table, "precision without a cut-off")
        empty = math.nan if where_defined else 0.0
        values = torch.where(retrieved > 0, hits / retrieved.clamp_min(1), empty)
    else:
        k = check_cutoff(k)
        values = expected_hits_per_query(table, k, ties, shared=shared) / k
    return values if where_defined else unanswerable_nan(table, values)

def f1_per_query(
    table: RankTable,
    k: int | None = None,
    ties: str = DEFAULT_TIES,
    *,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """F1@K = 2 P R / (P + R) with P = h_q(K) / K and R = h_q(K) / m_q (ranx's ``f1``), which
    is 2 h_q(K) / (K + m_q); 0 without a hit. Without a cut-off, P is the precision of the whole
    list (:func:`precision_per_query`), as trec_eval's ``set_F``. Linear in h_q(K), so its
    expectation under "expected" ties is exact.

    Args:
        table: the rank table.
        k: cut-off K, or None for the whole ranking.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    if k is None:
        hits = expected_hits_per_query(table, None, ties, shared=shared)
        size = _retrieved(table, "f1 without a cut-off").to(torch.float64)
    else:
        k = check_cutoff(k)
        hits = expected_hits_per_query(table, k, ties, shared=shared)
        size = torch.full_like(hits, float(k))
    total = size + table.num_relevant.to(torch.float64)
    return unanswerable_nan(table, torch.where(hits > 0, 2.0 * hits / total.clamp_min(1), 0.0))

def _retrieved(table: RankTable, what: str) -> Tensor:
    """The distinct items each query retrieved, refused where no list length is known."""
    retrieved = table.retrieved
    if bool((retrieved == UNBOUNDED).any()):
        raise ValueError(
            f"{what} divides by the items retrieved, which precomputed ranks do not give; use a "
            "cut-off (precision@K) or ranked lists"
        )
    return retrieved.to(torch.float64)

def r_precision_per_query(
    table: RankTable, ties: str = DEFAULT_TIES, *, shared: SharedTieGroups | None = None
) -> Tensor:
    """h_q(m_q) / m_q: precision at R = m_q, TREC's R-precision (trec_eval's ``Rprec``).

    Args:
        table: the rank table.
        ties: the tie rule: "expected", "optimistic", "pessimistic" or "id" (a table ranked
            with ties by id).
        shared: the tie groups of a shared call (:class:`SharedTieGroups`), or None.

    Returns:
        ``(Q,)`` float64, NaN for unanswerable queries.
    """
    m = table.num_relevant.clamp_min(1)
    return unanswerable_nan(table, expected_hits_per_query(table, m, ties, shared=shared) / m)
