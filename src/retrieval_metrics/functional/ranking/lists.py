"""Ranked lists (RAG, search engines)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.csr import ptr_from_counts
from retrieval_metrics.functional.options import OPTIONS, check_option
from retrieval_metrics.functional.ranking.labels import canonical_id, scalar_value
from retrieval_metrics.functional.ranking.qrels import checked_grade
from retrieval_metrics.functional.ranking.table_build import (
    ItemResults,
    ideal_from,
    split_judged,
    table_from_items,
)
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

try:  # the compiled loop over lists of str ids (setup.py builds it; optional)
    from retrieval_metrics.functional.ranking import _str_lists
except ImportError:  # pragma: no cover - a build without a C compiler
    _str_lists = None

DEFAULT_DUPLICATES: str = OPTIONS["duplicates"].default
# rank_lists: up to this many relevant ids found in one list are located by list.index
_INDEX_HITS = 16
# the compiled pass's status bits of a query (_str_lists.c): left to the Python loop; under
# duplicates="warn", its relevant ids list an id twice / its list returns a relevant id twice
_LEFT, _RELEVANT_TWICE, _RETURNED_TWICE = 1, 2, 4
# ... and its per-query parts, then (query, position) of each hit
_NUM_RELEVANT, _NUM_DISTINCT, _LIST_SIZE, _HIT_QUERY, _HIT_POSITION = range(5)


def rank_lists(
    ranked_ids: Sequence[Sequence[Any]],
    relevant_ids: Sequence[Any],
    *,
    duplicates: str = DEFAULT_DUPLICATES,
    distinct: bool = True,
    judged_documents: bool = False,
    query_ids: Sequence[Any] | None = None,
) -> RankTable:
    """Rank table from each query's ranked list of ids and its relevant ids.

    ``relevant_ids[q]`` is a collection of ids, or a dict id -> grade (grade <= 0 is not
    relevant). An id repeated in one list counts once, at its first position; the repeats keep
    their places as non-relevant slots. ``duplicates="error"`` raises instead, and
    ``duplicates="warn"`` warns when the repeated id is relevant (or ``relevant_ids[q]`` lists
    an id twice), the case where evaluators that credit every repeat give another number; it
    names the first such query by its id in ``query_ids`` where given, else by its position.
    Relevant ids the list never returned count in m_q and are never retrieved. The table keeps each
    list's number of distinct ids (``num_retrieved``), which precision and F1 without a cut-off
    divide by; ``distinct=False`` leaves it out (one set per list fewer), for callers that
    report neither. ``judged_documents=True`` also places the judged documents that are not
    relevant (grade <= 0 in a dict; none in a collection of ids, whose every id is relevant),
    for Judged@K, bpref and the condensed lists (the table's ``judged_*`` fields).

    >>> t = rank_lists([["d3", "d7", "d1"]], [{"d1", "d9"}])
    >>> t.above.tolist(), t.num_relevant.tolist(), t.num_retrieved.tolist()
    ([2], [2], [3])
    """
    check_option("duplicates", duplicates)
    # (the loops below index them: a sized collection that is not a sequence, dict.values()
    # say, is read once into a list)
    if not isinstance(ranked_ids, (Sequence, Tensor, np.ndarray)):
        ranked_ids = list(ranked_ids)
    if not isinstance(relevant_ids, (Sequence, Tensor, np.ndarray)):
        relevant_ids = list(relevant_ids)
    if isinstance(ranked_ids, (str, bytes)) or isinstance(relevant_ids, (str, bytes)):
        raise ValueError(
            "`ranked_ids` and `relevant_ids` must be sequences with one entry per query"
        )
    if len(ranked_ids) != len(relevant_ids):
        raise ValueError(
            f"`ranked_ids` and `relevant_ids` must have one entry per query, got {len(ranked_ids)} "
            f"and {len(relevant_ids)}"
        )
    graded = any(issubclass(kind, dict) for kind in set(map(type, relevant_ids)))
    found = _Found(graded, judged_documents)
    left: Iterable[int] = range(len(ranked_ids))
    if _str_lists is not None and duplicates != "error" and not graded:
        # lists of str ids: one C pass per list (see _str_lists.c); it leaves the rest here
        warn = duplicates == "warn"
        parts = _str_lists.match(ranked_ids, relevant_ids, distinct, warn)
        left = found.take_compiled(parts, ranked_ids, relevant_ids)
    _match_in_python(found, ranked_ids, relevant_ids, left, duplicates, distinct)
    repeated = sorted(found.repeated, key=lambda note: note[0])  # (stable: a query's in order)
    if repeated:
        q, item = repeated[0]
        # (a position names no query of a caller's batches: its id does)
        query = q if query_ids is None else repr(scalar_value(query_ids[q]))
        warnings.warn(
            f"{len(repeated)} queries repeat a relevant id (first: query {query}, id {item!r}, "
            "in `ranked_ids` or `relevant_ids`): each such id counts once, at its first position "
            '(duplicates="warn"). Evaluators that count every repeat (LlamaIndex, Haystack '
            "before 3.1) report other values there: above this one for an id retrieved twice "
            "(AP and NDCG above 1 among them), below it for an id expected twice (NDCG, "
            "LlamaIndex's granular hit rate)",
            UserWarning,
            stacklevel=2,
        )
    num_q = len(ranked_ids)
    num_rel = found.per_query(found.num_rel, _NUM_RELEVANT)
    ptr = ptr_from_counts(num_rel)
    row, above, grade = found.hits()
    item_ptr = ptr_from_counts(torch.bincount(row, minlength=num_q))
    ideal = None
    if graded:
        ideal = ideal_from(ptr, torch.tensor(found.all_grades, dtype=torch.float64))
    items = ItemResults(
        item_ptr, above=above, tied=torch.ones(len(above), dtype=torch.int64), grade=grade, row=row
    )
    table = table_from_items(
        items,
        num_rel,
        found.per_query(found.sizes, _LIST_SIZE),
        torch.full((num_q,), UNBOUNDED, dtype=torch.int64),
        ideal=ideal,
    )
    if judged_documents:
        table = split_judged(table, whole_ranking=True)
    if not distinct or num_q == 0:  # (an empty table has no optional part: see table_from_parts)
        return table
    return replace(table, num_retrieved=found.per_query(found.counts, _NUM_DISTINCT))


class _Found:
    """What the matching found, per query and per hit: from the compiled pass (every query,
    as tensors) and from the Python loop (the queries it was left, ascending, as lists)."""

    def __init__(self, graded: bool, judged: bool = False) -> None:
        self.graded = graded
        #: keep the judged documents that are not relevant (grade <= 0) as hits too
        self.judged = judged
        # the compiled pass's num_relevant, num_distinct, list_size, hit_query, hit_position
        self.compiled: tuple[Tensor, ...] | None = None
        self.queries: list[int] = []  # the Python loop's queries
        self.num_rel: list[int] = []
        self.counts: list[int] = []
        self.sizes: list[int] = []
        self.hit_query: list[int] = []
        self.hit_pos: list[int] = []
        self.hit_grade: list[float] = []
        self.all_grades: list[float] = []
        self.repeated: list[tuple[int, Any]] = []

    def take_compiled(
        self, parts: tuple[bytes, ...], ranked_ids: Sequence[Any], relevant_ids: Sequence[Any]
    ) -> list[int]:
        """Keep the compiled pass's results; the queries it left to the Python loop. Where it
        saw a repeat under duplicates="warn", the note the Python loop would have made is made
        here (its id is named only in the warning)."""
        status_bytes, *numbers = parts
        self.compiled = tuple(
            torch.from_numpy(np.frombuffer(part, dtype=np.int64).copy()) for part in numbers
        )
        status = np.frombuffer(status_bytes, dtype=np.uint8)
        for q in np.flatnonzero(status & (_RELEVANT_TWICE | _RETURNED_TWICE)).tolist():
            ranked, relevant = ranked_ids[q], relevant_ids[q]
            if status[q] & _RELEVANT_TWICE:
                self.repeated.append((q, _first_repeat(relevant)))
            if status[q] & _RETURNED_TWICE:
                gains = dict.fromkeys(relevant, 1.0)
                _check_repeats(q, ranked, set(ranked), gains, "warn", self.repeated)
        return np.flatnonzero(status & _LEFT).tolist()

    def per_query(self, values: list[int], part: int) -> Tensor:
        """A per-query count of every query: the compiled pass's (its ``part``), with the
        Python loop's ``values`` in the queries that loop ranked."""
        python = torch.tensor(values, dtype=torch.int64)
        if self.compiled is None:
            return python
        out = self.compiled[part].clone()
        out[torch.tensor(self.queries, dtype=torch.int64)] = python
        return out

    def hits(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """(query, first position, grade) of every hit, queries ascending."""
        row = torch.tensor(self.hit_query, dtype=torch.int64)
        above = torch.tensor(self.hit_pos, dtype=torch.int64)
        grade = torch.tensor(self.hit_grade, dtype=torch.float64) if self.graded else None
        if self.compiled is not None:  # (never graded: the compiled pass takes sets of ids)
            row = torch.cat([self.compiled[_HIT_QUERY], row])
            above = torch.cat([self.compiled[_HIT_POSITION], above])
            if self.hit_query:
                order = torch.argsort(row, stable=True)
                row, above = row[order], above[order]
        return row, above, grade


def _check_one_grade(q: int, gains: dict[Any, float]) -> None:
    """Refuse two spellings of one id (7 and "7") at two grades in ``relevant_ids[q]``."""
    seen: dict[Any, tuple[Any, float]] = {}
    for item, grade in gains.items():
        key = canonical_id(item)
        if key in seen and seen[key][1] != grade:
            first, before = seen[key]
            raise ValueError(
                f"`relevant_ids[{q}]` grades one id twice: {first!r} at {before:g} and {item!r} "
                f"at {grade:g} (an int id and its decimal text are one id); give it once"
            )
        seen.setdefault(key, (item, grade))


def _refuse_odd_ids(q: int, ids: Iterable[Any], name: str = "relevant_ids") -> None:
    """Refuse ids that are no ids: None, a bool, or a float (NaN never equals itself; 1.0 would
    equal 1 here and not "1" in ragas; a pandas column of int ids with a missing value turns
    into floats). Run over a query's relevant ids (a few), and over its ranked ids only where
    their types differ from the relevant ones' (a pass that is made there anyway)."""
    for item in ids:
        if item is None or isinstance(item, (bool, float, np.bool_, np.floating)):
            raise ValueError(
                f"`{name}[{q}]` holds {item!r} ({type(item).__name__}): ids must be ints or "
                "strings (a column of int ids with a missing value turns into floats)"
            )


def _match_in_python(
    found: _Found,
    ranked_ids: Sequence[Sequence[Any]],
    relevant_ids: Sequence[Any],
    queries: Iterable[int],
    duplicates: str,
    distinct: bool,
) -> None:
    """Match each query of ``queries`` (ascending), whatever its ids, into ``found``."""
    # Per query, C-level passes over the list only: its set of distinct ids where their number
    # is wanted or repeats are checked (a repeat is a set smaller than the list), else one
    # intersection with the few relevant ids; list.index finds the first positions of those it
    # holds. No per-id Python code runs over the ranked ids.
    build_set = distinct or duplicates != "first"
    graded = found.graded
    repeated = found.repeated
    for q in queries:
        ranked, relevant = ranked_ids[q], relevant_ids[q]
        found.queries.append(q)
        if type(ranked) is not list:  # (the checks below cost a tenth of a list's time)
            if isinstance(ranked, Tensor):
                ranked = ranked.tolist()
            if isinstance(ranked, (str, bytes)):
                raise ValueError(f"`ranked_ids[{q}]` must be a list of ids, got a string")
            if not isinstance(ranked, (list, tuple)):
                ranked = list(ranked)
        kind = type(relevant)
        if kind is set or kind is list:
            gains = dict.fromkeys(relevant, 1.0)
        else:
            if isinstance(relevant, Tensor):
                relevant = relevant.tolist()
            if isinstance(relevant, (str, bytes)):
                raise ValueError(
                    f"`relevant_ids[{q}]` must be a collection of ids, got a string"
                )
            if isinstance(relevant, dict):
                gains = {k: checked_grade(v, f"relevant_ids[{q}][{k!r}]")
                         for k, v in relevant.items()}
                if not found.judged:
                    gains = {k: v for k, v in gains.items() if v > 0}
            else:
                if not isinstance(relevant, (list, tuple, set, frozenset)):
                    relevant = list(relevant)
                gains = dict.fromkeys(relevant, 1.0)
        _refuse_odd_ids(q, gains)
        if duplicates == "warn" and not isinstance(relevant, dict) and len(gains) != len(relevant):
            repeated.append((q, _first_repeat(relevant)))
        if gains and _mixes_kinds(ranked, gains):
            # Ids compare as text (7 is "7"): only a query that mixes types (ints and strings)
            # is rewritten to canonical ids; one whose ids are of one type compares them as
            # they are.
            _refuse_odd_ids(q, ranked, "ranked_ids")
            ranked = [canonical_id(item) for item in ranked]
            canonical = {canonical_id(item): grade for item, grade in gains.items()}
            if len(canonical) != len(gains):
                _check_one_grade(q, gains)
            gains = canonical
        # (after the type check, whose linear pass over the ids makes the set's lookups faster)
        returned = set(ranked) if build_set else None
        if returned is not None:
            if len(returned) != len(ranked) and duplicates != "first":
                _check_repeats(q, ranked, returned, gains, duplicates, repeated)
            found.counts.append(len(returned))
        found.num_rel.append(len(gains))
        found.sizes.append(len(ranked))
        if graded:
            found.all_grades.extend(gains.values())
        if not gains or not ranked:
            continue
        hits = gains.keys() & (ranked if returned is None else returned)
        if not hits:
            continue
        if len(hits) <= _INDEX_HITS:
            positions = [ranked.index(item) for item in hits]
        else:
            # many hits: one dict of first positions (later repeats are overwritten by earlier)
            first = dict(zip(reversed(ranked), range(len(ranked) - 1, -1, -1), strict=True))
            positions = [first[item] for item in hits]
        found.hit_query.extend([q] * len(positions))
        found.hit_pos.extend(positions)
        if graded:
            found.hit_grade.extend(gains[item] for item in hits)


def _mixes_kinds(ranked: list[Any], gains: dict[Any, float]) -> bool:
    """Whether a query's ids are of more than one type (then they are compared as text)."""
    kinds = set(map(type, gains))
    if kinds == {str}:
        try:
            "".join(ranked)  # one C-level pass that fails on the first id that is not a str
        except TypeError:
            return True
        return False
    kinds.update(map(type, ranked))
    return len(kinds) > 1


def _first_repeat(ids: Sequence[Any]) -> Any:
    seen: set[Any] = set()
    for item in ids:
        if item in seen:
            return item
        seen.add(item)
    return None


def _check_repeats(
    q: int,
    ranked: list[Any],
    returned: set[Any],
    gains: dict[Any, float],
    duplicates: str,
    repeated: list[tuple[int, Any]],
) -> None:
    """A list that returns an id more than once, under ``duplicates="error"`` (raise) or
    ``"warn"`` (note the query when the repeated id is relevant)."""
    if duplicates == "error":
        raise ValueError(
            f"`ranked_ids[{q}]` returns id {_first_repeat(ranked)!r} more than once"
        )
    for item in gains.keys() & returned:
        # (a judged document that is not relevant, grade <= 0, is listed but not relevant)
        if gains[item] > 0 and ranked.count(item) > 1:
            repeated.append((q, item))
            return
