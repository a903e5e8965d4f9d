"""The rank table: where each query's relevant items landed, and how it is stored.

A :class:`RankTable` is what every ranking produces (embeddings, scores, ranked lists, precomputed
ranks) and what every measure reads. It also travels: metric states hold it between ``update`` and
``compute``, processes exchange it, folds and batches are concatenated. All of that goes through
one flat form, a dict of 1-D tensors declared once in :data:`TABLE_PARTS`:

* :func:`table_parts` turns a table into that form (optional fields filled, a presence bit set);
* :func:`table_from_parts` turns concatenated parts (of any number of tables, processes or
  batches) back into one table, checking that an optional field is present for all or none.

Adding a field to the table is one edit to :data:`TABLE_PARTS` (and the dataclass field).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cached_property

import torch
from torch import Tensor

from retrieval_metrics.functional.csr import ptr_from_counts, row_of_entries
from retrieval_metrics.functional.primitives import flat_nonzero, to_host

__all__ = [
    "PRESENT",
    "TABLE_PARTS",
    "UNBOUNDED",
    "RankTable",
    "TablePart",
    "concat_tables",
    "has_part",
    "table_from_parts",
    "table_parts",
]

UNBOUNDED = torch.iinfo(torch.int64).max


@dataclass(frozen=True)
class RankTable:
    """Where each query's relevant items landed.

    Relevant items are stored in CSR form, queries in input order, items of a query by decreasing
    score (increasing ``above``); among tied relevant items, by decreasing grade.

    Attributes:
        ptr: ``(Q + 1,)`` int64 CSR pointers into the item arrays.
        above: int64, per listed relevant item, the number of ranked (non-excluded) items with a
            strictly higher score.
        tied: int64, per listed relevant item, the number of ranked items with exactly its score,
            itself included.
        num_relevant: ``(Q,)`` int64 m_q, relevant items of the query, listed or not.
        gallery_size: ``(Q,)`` int64 number of items ranked for the query (exclusions removed).
        depth: ``(Q,)`` int64. Relevant items that are not listed lie below position ``depth``;
            ``UNBOUNDED`` means they were never retrieved at all (ranked lists).
        grade: float64 grade per listed relevant item, or ``None`` for binary relevance.
        ideal_ptr, ideal_grade: for graded relevance, every relevant grade of the query (listed or
            not), sorted decreasing, for the ideal DCG.
        query_class: optional ``(Q,)`` int64 class of each query, for ``average="class"``.
        query_id: optional ``(Q,)`` int64 sample id of each query (dedupe across processes).
        num_retrieved: optional ``(Q,)`` int64, the distinct items a ranked list returned (a
            list may repeat an id), for the measures without a cut-off that divide by what was
            retrieved (precision, F1); ``None`` where every ranked item is distinct
            (``gallery_size``).
        num_absent: optional ``(Q,)`` int64, the relevant items of judgments (qrels) that the
            gallery lacks: counted in ``num_relevant``, never retrieved, whatever the depth.
        judged_ptr, judged_above, judged_tied: optional, the judged documents that are not
            relevant (qrels grade <= 0) located in the ranking, in CSR form like the relevant
            items (``above`` and ``tied`` as theirs): what Judged@K, bpref and the condensed
            lists read (:mod:`retrieval_metrics.functional.measures.judged`). ``None`` where
            relevance is not by judgments, or no measure asked for them.
        num_nonrelevant: optional ``(Q,)`` int64, the judged documents of the query that are
            not relevant, in the gallery or not; present with ``judged_ptr``.
        judged_grade: optional float64, the grade (<= 0; below the level at a relevance level)
            of each located judged non-relevant document, as ``judged_above``.
        num_negative: optional ``(Q,)`` int64, those of ``num_nonrelevant`` judged with a
            negative grade, in the gallery or not: trec_eval reads them as unjudged (bpref and
            the condensed lists: :func:`~retrieval_metrics.functional.measures.judged.
            as_trec_eval_judges`), ir_measures' Judged@K as judged.
    """

    ptr: Tensor
    above: Tensor
    tied: Tensor
    num_relevant: Tensor
    gallery_size: Tensor
    depth: Tensor
    grade: Tensor | None = None
    ideal_ptr: Tensor | None = None
    ideal_grade: Tensor | None = None
    query_class: Tensor | None = None
    query_id: Tensor | None = None
    num_retrieved: Tensor | None = None
    num_absent: Tensor | None = None
    judged_ptr: Tensor | None = None
    judged_above: Tensor | None = None
    judged_tied: Tensor | None = None
    num_nonrelevant: Tensor | None = None
    judged_grade: Tensor | None = None
    num_negative: Tensor | None = None

    @property
    def num_queries(self) -> int:
        return self.ptr.numel() - 1

    @property
    def item_query(self) -> Tensor:
        """Query index of every listed item."""
        return row_of_entries(self.ptr)

    @property
    def num_listed(self) -> Tensor:
        return self.ptr.diff()

    @cached_property
    def without_relevant(self) -> Tensor:
        """``(Q,)`` bool: the queries with nothing relevant (``num_relevant == 0``). Found once
        a table: every measure of a call fills or drops them (on 25,000 queries the test costs
        more than some measures), and a table's fields are never changed in place."""
        return self.num_relevant == 0

    def truncated_above(self, cutoff: Tensor | int) -> Tensor:
        """``(Q,)`` bool: the query's ranking stopped above position ``cutoff`` (its depth)
        with relevant items of its gallery unlisted, so no measure at that cut-off can be read
        from it (those the gallery lacks, ``num_absent``, are known to lie nowhere)."""
        return self._depth_of_unlisted < cutoff

    def first_unlisted_above(self, cutoff: Tensor | int) -> Tensor | None:
        """``(Q,)`` bool: the queries whose best relevant item the ranking did not reach (it
        stopped at its depth, ``locate_first=False``, before any of them) where ``cutoff``
        reaches below that depth: whether that item lies within the top ``cutoff`` is unknown,
        so no measure of it (hit rate, reciprocal rank, first rank, CMC) can be read. None
        where there is none; a table with no such query (a whole ranking, ranked lists, one
        that located each query's best) says so once, with no work per measure."""
        depth = self._depth_of_unlisted_first
        if depth is None:
            return None
        beyond = depth < cutoff
        return beyond if bool(beyond.any()) else None

    @property
    def _in_gallery(self) -> Tensor:
        """``(Q,)`` the relevant items in the query's gallery: those listed, or below its depth."""
        return self.num_relevant if self.num_absent is None else self.num_relevant - self.num_absent

    @cached_property
    def _depth_of_unlisted(self) -> Tensor:
        """Per query, the depth its ranking stopped at with relevant items of its gallery
        unlisted (``UNBOUNDED`` where none is): found once a table, each measure's depth check
        one comparison."""
        unlisted = (self.num_listed < self._in_gallery) & (self.depth != UNBOUNDED)
        return torch.where(unlisted, self.depth, UNBOUNDED)

    @cached_property
    def _depth_of_unlisted_first(self) -> Tensor | None:
        """:attr:`_depth_of_unlisted` where the query lists nothing: the depth its ranking
        stopped at without reaching any of its relevant items (``UNBOUNDED`` where one is
        listed, or none is in its gallery); None where no query is such."""
        depth = torch.where(self.num_listed == 0, self._depth_of_unlisted, UNBOUNDED)
        return depth if bool((depth != UNBOUNDED).any()) else None

    @property
    def beyond_gallery(self) -> Tensor:
        """``(Q,)`` bool: relevant items lie outside the query's ranked gallery, where no
        ranking of it reaches them: a ranked list of an unknown collection (depth
        ``UNBOUNDED``), or judged documents the gallery lacks (``num_absent``)."""
        outside = self.depth == UNBOUNDED
        if self.num_absent is not None:
            outside = outside | (self.num_absent > 0)
        return outside

    @property
    def retrieved(self) -> Tensor:
        """``(Q,)`` int64, the distinct items each query's ranking returned: ``num_retrieved``
        where a ranked list may repeat ids, else ``gallery_size``."""
        return self.gallery_size if self.num_retrieved is None else self.num_retrieved

    def select(self, queries: Tensor) -> RankTable:
        """The table restricted to ``queries`` (int64 indices or a boolean mask), in that order."""
        if queries.dtype == torch.bool:
            queries = flat_nonzero(queries)
        queries = queries.cpu()
        parts = table_parts(self)
        counts = {
            "item": parts["num_listed"], "ideal": parts["num_ideal"], "judged": parts["num_judged"]
        }
        picked = {}
        for level, count in counts.items():
            start = ptr_from_counts(count)[:-1]
            picked_ptr = ptr_from_counts(count[queries])
            row = row_of_entries(picked_ptr)
            picked[level] = (
                torch.arange(int(picked_ptr[-1])) - picked_ptr[:-1][row] + start[queries][row]
            )
        out = {}
        for part in TABLE_PARTS:
            value = parts[part.name]
            out[part.name] = value[queries] if part.level == "query" else value[picked[part.level]]
        out[PRESENT] = parts[PRESENT][queries]
        return table_from_parts(out)

    def to(self, device: torch.device | str) -> RankTable:
        # (the fields, not __dict__: that also holds what the table has cached, such as
        # `without_relevant`)
        moved = {
            f.name: (value.to(device) if isinstance(value, Tensor) else value)
            for f in fields(self)
            for value in (getattr(self, f.name),)
        }
        return RankTable(**moved)


# ------------------------------------------------------------------------------- flat storage


@dataclass(frozen=True)
class TablePart:
    """One 1-D tensor of the flat form: one entry per query, per listed item, per ideal grade or
    per located judged non-relevant document.

    ``optional`` parts may be missing from a table (``None`` field); they are stored filled with
    ``fill`` and their presence travels in the per-query :data:`PRESENT` bitmask.
    """

    name: str
    level: str
    dtype: torch.dtype
    optional: bool = False
    fill: float = 0


TABLE_PARTS: tuple[TablePart, ...] = (
    TablePart("num_listed", "query", torch.int64),
    TablePart("num_relevant", "query", torch.int64),
    TablePart("gallery_size", "query", torch.int64),
    TablePart("depth", "query", torch.int64),
    TablePart("query_class", "query", torch.int64, optional=True),
    TablePart("query_id", "query", torch.int64, optional=True),
    TablePart("num_ideal", "query", torch.int64, optional=True),
    TablePart("above", "item", torch.int64),
    TablePart("tied", "item", torch.int64),
    TablePart("grade", "item", torch.float64, optional=True, fill=float("nan")),
    TablePart("ideal_grade", "ideal", torch.float64, optional=True, fill=float("nan")),
    TablePart("num_retrieved", "query", torch.int64, optional=True),
    TablePart("num_absent", "query", torch.int64, optional=True),
    TablePart("num_judged", "query", torch.int64, optional=True),
    TablePart("judged_above", "judged", torch.int64, optional=True),
    TablePart("judged_tied", "judged", torch.int64, optional=True),
    TablePart("num_nonrelevant", "query", torch.int64, optional=True),
    TablePart("judged_grade", "judged", torch.float64, optional=True, fill=float("nan")),
    TablePart("num_negative", "query", torch.int64, optional=True),
)
#: name of the per-query int64 bitmask saying which optional parts the query's table had
PRESENT = "present"
_OPTIONAL = [p.name for p in TABLE_PARTS if p.optional]
# optional parts whose presence is one dataclass field's (None or not)
_FIELD_OF = {"num_ideal": "ideal_ptr", "num_judged": "judged_ptr"}
# the parts that are present together or not at all: graded relevance, judged documents
_TOGETHER = {
    "ideal_ptr": ("grade", "num_ideal", "ideal_grade"),
    "judged_ptr": ("num_judged", "judged_above", "judged_tied", "num_nonrelevant"),
}


def has_part(present: Tensor | int, name: str) -> Tensor | bool:
    """Whether the :data:`PRESENT` bitmask ``present`` (one query's int, or a tensor of them:
    elementwise) says the query's table had the optional part ``name``."""
    bit = 1 << _OPTIONAL.index(name)
    if isinstance(present, Tensor):
        return (present & bit) != 0
    return bool(present & bit)


def _field_value(table: RankTable, part: TablePart) -> Tensor | None:
    if part.name == "num_listed":
        return table.ptr.diff()
    if part.name in ("num_ideal", "num_judged"):
        ptr = getattr(table, _FIELD_OF[part.name])
        return None if ptr is None else ptr.diff()
    return getattr(table, part.name)


def table_parts(table: RankTable) -> dict[str, Tensor]:
    """The flat form of ``table``: one 1-D CPU tensor per part of :data:`TABLE_PARTS`, plus the
    per-query presence bitmask :data:`PRESENT`."""
    num_q = table.num_queries
    sizes = {
        "query": num_q,
        "item": int(table.ptr[-1]) if num_q else 0,
        "ideal": int(table.ideal_ptr[-1]) if table.ideal_ptr is not None and num_q else 0,
        "judged": int(table.judged_ptr[-1]) if table.judged_ptr is not None and num_q else 0,
    }
    present = 0
    values: list[Tensor] = []
    for part in TABLE_PARTS:
        value = _field_value(table, part)
        if value is None:
            if not part.optional:
                raise ValueError(f"a rank table needs `{part.name}`")
            value = torch.full((sizes[part.level],), part.fill, dtype=part.dtype)
        elif part.optional:
            present |= 1 << _OPTIONAL.index(part.name)
        values.append(value)
    # (a table on a device read in one copy, not one a part)
    out = {
        part.name: value.reshape(-1).to(part.dtype)
        for part, value in zip(TABLE_PARTS, to_host(values), strict=True)
    }
    out[PRESENT] = torch.full((num_q,), present, dtype=torch.int64)
    return out


def table_from_parts(parts: Mapping[str, Tensor]) -> RankTable:
    """One table from the flat form (the parts of several tables concatenated part by part).

    An optional part is kept when every query had it and dropped when none had; a mix (graded with
    binary lists, queries with and without ids) is an error.
    """
    # (from a device in one copy, not one a part)
    read = to_host([parts[p.name] for p in TABLE_PARTS] + [parts[PRESENT]])
    values = {
        p.name: value.reshape(-1).to(p.dtype)
        for p, value in zip(TABLE_PARTS, read[:-1], strict=True)
    }
    present = read[-1].reshape(-1).to(torch.int64)
    have: dict[str, bool] = {}
    for bit, name in enumerate(_OPTIONAL):
        flags = (present >> bit) & 1
        have[name] = bool(flags.all()) and flags.numel() > 0
        if not have[name] and bool(flags.any()):
            raise ValueError(
                f"cannot combine rank tables with and without `{_FIELD_OF.get(name, name)}` "
                "(e.g. graded and binary relevance, or queries given with and without ids)"
            )
    kwargs: dict[str, Tensor | None] = {"ptr": ptr_from_counts(values["num_listed"])}
    together = {field: all(have[name] for name in names) for field, names in _TOGETHER.items()}
    for field, count in (("ideal_ptr", "num_ideal"), ("judged_ptr", "num_judged")):
        kwargs[field] = ptr_from_counts(values[count]) if together[field] else None
    for f in fields(RankTable):
        if f.name in kwargs:
            continue
        optional = f.name in have
        kwargs[f.name] = None if optional and not have[f.name] else values[f.name]
    for field, names in _TOGETHER.items():
        if not together[field]:
            for name in names:
                if name in kwargs:
                    kwargs[name] = None
    return RankTable(**kwargs)


def concat_tables(tables: Sequence[RankTable]) -> RankTable:
    """Stack the queries of several tables (same kind of relevance) into one table."""
    if len(tables) == 1:
        return tables[0]
    flat = [table_parts(t) for t in tables]
    return table_from_parts({name: torch.cat([f[name] for f in flat]) for name in flat[0]})
