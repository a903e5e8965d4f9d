"""Ranked lists (RAG, search engines)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.csr import ptr_from_counts
from retrieval_metrics.functional.ranking.labels import canonical_id
from retrieval_metrics.functional.ranking.table_build import (
    ItemResults,
    ideal_from,
    table_from_items,
)
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

# rank_lists: up to this many relevant ids found in one list are located by list.index
_INDEX_HITS = 16


def rank_lists(
    ranked_ids: Sequence[Sequence[Any]],
    relevant_ids: Sequence[Any],
    *,
    duplicates: str = "first",
) -> RankTable:
    """Rank table from each query's ranked list of ids and its relevant ids.

    ``relevant_ids[q]`` is a collection of ids, or a dict id -> grade (grade <= 0 is not
    relevant). An id repeated in one list counts once, at its first position; the repeats keep
    their places as non-relevant slots (``duplicates="error"`` raises instead). Relevant ids the
    list never returned count in m_q and are never retrieved.

    >>> t = rank_lists([["d3", "d7", "d1"]], [{"d1", "d9"}])
    >>> t.above.tolist(), t.num_relevant.tolist()
    ([2], [2])
    """
    if duplicates not in ("first", "error"):
        raise ValueError(f'`duplicates` must be "first" or "error", got {duplicates!r}')
    if isinstance(ranked_ids, (str, bytes)) or isinstance(relevant_ids, (str, bytes)):
        raise ValueError(
            "`ranked_ids` and `relevant_ids` must be sequences with one entry per query"
        )
    if len(ranked_ids) != len(relevant_ids):
        raise ValueError(
            f"`ranked_ids` and `relevant_ids` must have one entry per query, got {len(ranked_ids)} "
            f"and {len(relevant_ids)}"
        )
    # Per query, only the few relevant ids are looked for: one C-level pass over the list
    # (set intersection) finds which of them it returns, list.index their first positions.
    # No per-id Python code runs over the ranked ids.
    hit_query: list[int] = []
    hit_pos: list[int] = []
    hit_grade: list[float] = []
    all_grades: list[float] = []
    num_rel: list[int] = []
    sizes: list[int] = []
    graded = any(isinstance(r, dict) for r in relevant_ids)
    for q, (ranked, relevant) in enumerate(zip(ranked_ids, relevant_ids, strict=True)):
        if isinstance(ranked, Tensor):
            ranked = ranked.tolist()
        if isinstance(ranked, (str, bytes)):
            raise ValueError(f"`ranked_ids[{q}]` must be a list of ids, got a string")
        if isinstance(relevant, Tensor):
            relevant = relevant.tolist()
        if isinstance(relevant, (str, bytes)):
            raise ValueError(f"`relevant_ids[{q}]` must be a collection of ids, got a string")
        if isinstance(relevant, dict):
            gains = {k: float(v) for k, v in relevant.items() if float(v) > 0}
        else:
            gains = dict.fromkeys(relevant, 1.0)
        if not isinstance(ranked, (list, tuple)):
            ranked = list(ranked)
        # Ids compare as text (7 is "7"): a query whose ids are all of one type compares them as
        # they are; only one that mixes types (ints and strings) is rewritten to canonical ids.
        kinds = set(map(type, ranked))
        kinds.update(map(type, gains))
        if len(kinds) > 1:
            ranked = [canonical_id(item) for item in ranked]
            gains = {canonical_id(item): grade for item, grade in gains.items()}
        if duplicates == "error" and len(set(ranked)) != len(ranked):
            seen: set[Any] = set()
            for item in ranked:
                if item in seen:
                    raise ValueError(f"`ranked_ids[{q}]` returns id {item!r} more than once")
                seen.add(item)
        num_rel.append(len(gains))
        sizes.append(len(ranked))
        if graded:
            all_grades.extend(gains.values())
        if not gains or not ranked:
            continue
        found = gains.keys() & ranked  # iterates the list in C, keeps the list's objects
        if not found:
            continue
        if len(found) <= _INDEX_HITS:
            positions = [ranked.index(item) for item in found]
        else:
            # many hits: one dict of first positions (later repeats are overwritten by earlier)
            first = dict(zip(reversed(ranked), range(len(ranked) - 1, -1, -1), strict=True))
            positions = [first[item] for item in found]
        hit_query.extend([q] * len(positions))
        hit_pos.extend(positions)
        hit_grade.extend(gains[item] for item in found)
    num_q = len(ranked_ids)
    num_rel_t = torch.tensor(num_rel, dtype=torch.int64)
    ptr = ptr_from_counts(num_rel_t)
    n_items = len(hit_pos)
    row = torch.tensor(hit_query, dtype=torch.int64)
    item_ptr = ptr_from_counts(torch.bincount(row, minlength=num_q))
    ideal = None
    if graded:
        ideal = ideal_from(ptr, torch.tensor(all_grades, dtype=torch.float64))
    items = ItemResults(
        item_ptr,
        above=torch.tensor(hit_pos, dtype=torch.int64),
        tied=torch.ones(n_items, dtype=torch.int64),
        grade=torch.tensor(hit_grade, dtype=torch.float64) if graded else None,
        row=row,
    )
    return table_from_items(
        items,
        num_rel_t,
        torch.tensor(sizes, dtype=torch.int64),
        torch.full((num_q,), UNBOUNDED, dtype=torch.int64),
        ideal=ideal,
    )
