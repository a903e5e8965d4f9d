"""The helpers every family of per-query measures shares: the tie groups of a shared call
(:class:`SharedTieGroups`), cut-offs, the depth check and the NaN of an unanswerable query.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.primitives import flat_nonzero
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = [
    "SharedTieGroups",
    "as_cutoff",
    "check_cutoff",
    "query_sum",
    "require_depth",
    "require_first",
    "spread_over_queries",
    "tie_groups_of",
    "unanswerable_nan",
    "whole_precision_sum",
]


class SharedTieGroups:
    """What the measures of one shared call (one ``retrieval_measures`` call, one chunk of
    ``query_parts_in_chunks``) compute once and share: each table's tie groups under each rule,
    the groups' precision sums over the whole ranking (AP, MAP@R and AP@K each cut them), and
    each query's first relevant rank (median and mean rank both read it; read only).

    Made per call and handed down as ``shared=`` to the per-query functions, it is dropped with
    the call: no two calls, and no two threads, ever read one. Without it (``shared=None``)
    nothing is kept. An entry holds its table, so that the table's id, part of the key, cannot
    be taken by another table while the entry lives.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], tuple[RankTable, Any]] = {}

    def get(self, table: RankTable, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        """The value kept for ``(table, *key)``, made by ``make()`` the first time."""
        full = (id(table), *key)
        entry = self._entries.get(full)
        if entry is None:
            entry = self._entries[full] = (table, make())
        return entry[1]

def tie_groups_of(
    table: RankTable, ties: str, gain: str | None = None, shared: SharedTieGroups | None = None
) -> T.TieGroups:
    if gain in ("linear", "binary") or (
        gain == "exponential" and (table.grade is None or bool((table.grade == 1).all()))
    ):
        # Grades of 1 (binary relevance included) give 2^1 - 1 = 1 = the linear gain: the same
        # groups as the measures without a gain, so they are built once.
        gain = None
    if shared is None:
        return T.tie_groups(table, ties, gain=gain)
    return shared.get(table, ("groups", ties, gain), lambda: T.tie_groups(table, ties, gain=gain))

def whole_precision_sum(
    table: RankTable, groups: T.TieGroups, ties: str, shared: SharedTieGroups | None
) -> Tensor | None:
    """The groups' precision sums without a cut-off, computed once per shared call (None
    outside one: a single measure gains nothing from computing them)."""
    if shared is None:
        return None

    def whole() -> Tensor:
        return T.expected_precision_sum(groups, torch.full_like(groups.above, UNBOUNDED))

    return shared.get(table, ("precision sums", ties), whole)

def check_cutoff(k: int, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`{name}` must be a positive int, got {k!r}")
    return k

def query_sum(table: RankTable, groups: T.TieGroups, values: Tensor) -> Tensor:
    """Per query, the sum of ``values`` (one a group) over its groups."""
    if groups.first_index.numel() == groups.query.numel():
        # one group a query at most: the sums are the values themselves, spread
        return spread_over_queries(table, groups.query, values.to(torch.float64), 0.0)
    out = torch.zeros(table.num_queries, dtype=torch.float64)
    return out.index_add_(0, groups.query, values.to(torch.float64))

def spread_over_queries(table: RankTable, query: Tensor, values: Tensor, fill: float) -> Tensor:
    """``(Q,)``: ``values`` at the distinct queries ``query`` (increasing, as groups are),
    ``fill`` at the others. Where every query has a value, ``query`` is every query in order and
    the answer is ``values`` itself: known from the sizes alone, and the case of most tables
    (a search and a copy of 25,000 entries each saved, a measure). The answer may thus be the
    caller's tensor: written into by no one (query_sum's callers pass values of their own)."""
    if query.numel() == table.num_queries:
        return values
    out = torch.full((table.num_queries,), fill, dtype=values.dtype)
    return out.index_copy_(0, query, values)

def require_depth(table: RankTable, cutoff: Tensor, what: str) -> None:
    """Refuse a measure whose cut-off reaches below the depth the table was ranked to."""
    bad = table.truncated_above(cutoff)
    if bool(bad.any()):
        q = int(flat_nonzero(bad)[0])
        k = int(cutoff[q])
        reach = "every position" if k == UNBOUNDED else f"positions down to {k}"
        raise ValueError(
            f"{what} needs {reach} but the ranking was truncated at "
            f"depth {int(table.depth[q])} (query {q}); rank with a larger `depth` or depth=None"
        )

def require_first(table: RankTable, cutoff: Tensor, what: str) -> None:
    """Refuse a measure of each query's best relevant item whose cut-off (``(Q,)``, as
    :func:`as_cutoff` gives) reaches below the depth where the ranking stopped without
    reaching any relevant item of the query (:meth:`RankTable.first_unlisted_above`)."""
    bad = table.first_unlisted_above(cutoff)
    if bad is not None:
        q = int(flat_nonzero(bad)[0])
        k = int(cutoff[q])
        reach = "the whole ranking" if k == UNBOUNDED else f"the top {k}"
        raise ValueError(
            f"{what} needs each query's best relevant item within {reach}, but the ranking "
            f"stopped at depth {int(table.depth[q])} before any relevant item of query {q}: "
            "rank with locate_first=True (the default), a larger `depth`, or depth=None"
        )

def unanswerable_nan(table: RankTable, values: Tensor) -> Tensor:
    return torch.where(table.without_relevant, math.nan, values)

def as_cutoff(table: RankTable, k: int | Tensor | None) -> Tensor:
    """``(Q,)`` int64: the cut-off of each query. ``k``: one positive int for all, None (the
    whole ranking), or a tensor of one whole cut-off a query (0: nothing of the ranking, as an
    empty list; what the compat modules and R-precision pass)."""
    if k is None:
        return torch.full((table.num_queries,), UNBOUNDED, dtype=torch.int64)
    if isinstance(k, Tensor):
        return _cutoff_tensor(k, table.num_queries)
    return torch.full((table.num_queries,), check_cutoff(k), dtype=torch.int64)

def _cutoff_tensor(k: Tensor, num_queries: int) -> Tensor:
    """``k`` as int64 cut-offs, one a query, refused unless whole and non-negative (a
    fractional K would be truncated, a negative one read as 0, a wrong shape fail far away)."""
    expected = f"one whole, non-negative cut-off a query, shape ({num_queries},)"
    if k.shape != (num_queries,) or k.dtype == torch.bool or k.is_complex():
        raise ValueError(f"`k` as a tensor must hold {expected}; got {k.dtype} of shape "
                         f"{tuple(k.shape)}")
    if k.is_floating_point():
        bad = ~torch.isfinite(k) | (k != torch.round(k))
        if bool(bad.any()):
            raise ValueError(f"`k` as a tensor must hold {expected}; got {float(k[bad][0])}")
    cutoff = k.to(torch.int64)
    if bool((cutoff < 0).any()):
        raise ValueError(f"`k` as a tensor must hold {expected}; got {int(cutoff.min())}")
    return cutoff
