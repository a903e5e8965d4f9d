"""Aggregation: per-query values -> one number (``empty_queries``, ``average``, ``percent``),
median and mean ranks, chance levels, and :func:`retrieval_measures`, several named measures from
one rank table."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import ties as T
from retrieval_metrics.functional.measures.names import (
    RANK_METRICS,
    MetricSpec,
    average_for,
    parse_metric,
)
from retrieval_metrics.functional.measures.per_query import sharing_tie_groups
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.functional.primitives import flat_nonzero, repeat
from retrieval_metrics.functional.table import RankTable, concat_tables

__all__ = [
    "QueryParts",
    "aggregate",
    "aggregate_query_parts",
    "chance_measures",
    "chance_table",
    "median_rank",
    "per_query_values",
    "query_fields",
    "query_parts_in_chunks",
    "retrieval_measures",
]

EMPTY_QUERIES = OPTIONS["empty_queries"].allowed
AVERAGES = OPTIONS["average"].allowed
MEDIAN_CONVENTIONS = OPTIONS["median"].allowed


def _empty_fill(values: Tensor, table: RankTable, empty_queries: str, fill: float) -> Tensor:
    if empty_queries not in EMPTY_QUERIES:
        raise ValueError(f"`empty_queries` must be one of {EMPTY_QUERIES}, got {empty_queries!r}")
    empty = table.num_relevant == 0
    if empty_queries == "error" and bool(empty.any()):
        which = flat_nonzero(empty)
        shown = which[:10].tolist()
        raise ValueError(
            f"{int(empty.sum())} queries have no relevant gallery item (queries {shown}"
            f"{' ...' if which.numel() > 10 else ''}); pass empty_queries='skip' or 'zero'"
        )
    if empty_queries == "zero":
        fill_value = torch.full_like(values, fill)
        return torch.where(empty.view(-1, *([1] * (values.dim() - 1))), fill_value, values)
    return values


def aggregate(
    values: Tensor,
    table: RankTable,
    *,
    empty_queries: str = "skip",
    average: str = "macro",
    percent: bool = False,
    numerator: Tensor | None = None,
    denominator: Tensor | None = None,
    fill: float = 0.0,
) -> Tensor:
    """Mean over counted queries, as a 0-d float64 tensor (a vector for CMC rows).

    ``empty_queries``: "skip" leaves unanswerable queries out, "zero" scores them ``fill``,
    "error" raises. ``average``: "macro" (mean over queries), "class" (mean over classes of each
    class's mean; the table needs ``query_class``), "micro" (sum of ``numerator`` over sum of
    ``denominator``, for recall-like metrics). NaN when no query counts.
    """
    if average not in AVERAGES:
        raise ValueError(f"`average` must be one of {AVERAGES}, got {average!r}")
    values = _empty_fill(values, table, empty_queries, fill)
    counted = ~torch.isnan(values) if values.dim() == 1 else ~torch.isnan(values[:, 0])
    scale = 100.0 if percent else 1.0
    if average == "micro":
        if numerator is None or denominator is None:
            raise ValueError('`average="micro"` applies to recall, precision and R-precision only')
        num = numerator[counted].sum()
        den = denominator[counted].sum()
        return (num / den if den > 0 else torch.tensor(math.nan, dtype=torch.float64)) * scale
    if average == "class":
        if table.query_class is None:
            raise ValueError('`average="class"` needs query labels')
        classes, cls_of = torch.unique(table.query_class[counted], return_inverse=True)
        if classes.numel() == 0:
            return _nan_like(values) * scale
        v = values[counted]
        sums = torch.zeros((classes.numel(), *v.shape[1:]), dtype=torch.float64).index_add_(
            0, cls_of, v
        )
        counts = torch.bincount(cls_of, minlength=classes.numel()).to(torch.float64)
        return (sums / counts.view(-1, *([1] * (v.dim() - 1)))).mean(0) * scale
    if not bool(counted.any()):
        return _nan_like(values) * scale
    return values[counted].mean(0) * scale


def _nan_like(values: Tensor) -> Tensor:
    if values.dim() == 1:
        return torch.tensor(math.nan, dtype=torch.float64)
    return torch.full(values.shape[1:], math.nan, dtype=torch.float64)


def median_rank(ranks: Tensor, convention: str = "vsepp") -> Tensor:
    """Median of per-query ranks, NaN entries dropped.

    ``"vsepp"``: floor(median(r - 1)) + 1, as the VSE++ evaluation code computes it; ``"plain"``:
    the ordinary median (mean of the two middle values for an even count).
    """
    if convention not in MEDIAN_CONVENTIONS:
        raise ValueError(f"`convention` must be one of {MEDIAN_CONVENTIONS}, got {convention!r}")
    r = ranks[~torch.isnan(ranks)].sort().values
    n = r.numel()
    if n == 0:
        return torch.tensor(math.nan, dtype=torch.float64)
    mid = (r[(n - 1) // 2] + r[n // 2]) / 2
    if convention == "vsepp":
        return torch.floor(mid - 1) + 1
    return mid


def chance_table(table: RankTable) -> RankTable:
    """The table a uniformly random ranking gives in expectation: one tie group of the whole
    gallery per query. Any measure of it under ``ties="expected"`` is that measure's chance level
    (docs/definitions.md, Chance level); for a single relevant item, hit rate @K is K/N.
    """
    q = table.num_queries
    m = table.num_relevant
    counts = (m > 0).to(torch.int64) * m
    ptr = torch.zeros(q + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=ptr[1:])
    n = int(ptr[-1])
    owner = repeat(torch.arange(q), counts)
    grade = None
    if table.ideal_grade is not None and table.ideal_ptr is not None:
        grade = table.ideal_grade.clone()
    return RankTable(
        ptr=ptr,
        above=torch.zeros(n, dtype=torch.int64),
        tied=table.gallery_size[owner].clone(),
        num_relevant=m.clone(),
        gallery_size=table.gallery_size.clone(),
        depth=table.gallery_size.clone(),
        grade=grade,
        ideal_ptr=table.ideal_ptr,
        ideal_grade=table.ideal_grade,
        query_class=table.query_class,
    )


def per_query_values(
    table: RankTable,
    spec: MetricSpec,
    *,
    ties: str = "expected",
    ap: str = "step",
    divisor: str = "relevant",
    gain: str = "exponential",
) -> Tensor:
    """Per-query values of one named metric (CMC: a ``(Q, K)`` matrix)."""
    options = {"ties": ties, "ap": ap, "divisor": divisor, "gain": gain}
    return spec.measure.per_query(table, spec.k, options)


def retrieval_measures(
    table: RankTable,
    names: Sequence[str],
    *,
    ties: str = "expected",
    empty_queries: str = "skip",
    average: str = "macro",
    percent: bool = False,
    ap: str = "step",
    divisor: str = "relevant",
    gain: str = "exponential",
    median: str = "vsepp",
) -> dict[str, Tensor]:
    """Several named metrics from one rank table, as 0-d float64 tensors (CMC: a vector).

    >>> from retrieval_metrics.functional.ranking import rank_lists
    >>> table = rank_lists([["d3", "d7", "d1"], ["d4", "d5"]], [{"d1"}, {"d4", "d6"}])
    >>> {k: round(float(v), 4) for k, v in retrieval_measures(table, ["recall@3", "mrr"]).items()}
    {'recall@3': 0.75, 'mrr': 0.6667}
    """
    return _measures(table, names, ties=ties, empty_queries=empty_queries, average=average,
                     percent=percent, ap=ap, divisor=divisor, gain=gain, median=median)


def chance_measures(table: RankTable, names: Sequence[str], **options) -> dict[str, Tensor]:
    """The chance level of each named metric on ``table``'s galleries: its
    value under a uniformly random ranking, aggregated like :func:`retrieval_measures`.

    A query's chance value depends only on its gallery size and number of relevant items (and
    grades), so each distinct pair is computed once.
    """
    options = {**options, "ties": "expected"}
    if table.ideal_grade is not None or table.num_queries == 0:
        return _measures(chance_table(table), names, **options)
    key = torch.stack([table.gallery_size, table.num_relevant], 1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    representative = torch.zeros(unique.shape[0], dtype=torch.int64).scatter_(
        0, inverse, torch.arange(table.num_queries)
    )
    # The chance table of the representatives only (one item per relevant pair of every query
    # would be as large as the rank table); the aggregation reads the per-query fields alone.
    fields = query_fields(table)
    chance_fields = replace(fields, depth=fields.gallery_size.clone())
    small = chance_table(fields.select(representative))
    return _measures(chance_fields, names, rows=(small, inverse), **options)


def _measures(
    table: RankTable,
    names: Sequence[str],
    *,
    ties: str = "expected",
    empty_queries: str = "skip",
    average: str = "macro",
    percent: bool = False,
    ap: str = "step",
    divisor: str = "relevant",
    gain: str = "exponential",
    median: str = "vsepp",
    rows: tuple[RankTable, Tensor] | None = None,
) -> dict[str, Tensor]:
    """retrieval_measures; with ``rows=(small, index)``, per-query values are computed on
    ``small`` and expanded to ``table``'s queries by ``index`` (queries known to be equal)."""
    if ties not in T.TIES:
        raise ValueError(f"`ties` must be one of {T.TIES}, got {ties!r}")
    with sharing_tie_groups():
        return _measures_cached(table, names, ties, empty_queries, average, percent, ap,
                                divisor, gain, median, rows)


def _measures_cached(table, names, ties, empty_queries, average, percent, ap, divisor, gain,
                     median, rows) -> dict[str, Tensor]:
    parts = _per_query_parts(table, names, ties, average, ap, divisor, gain, rows)
    return _aggregate_parts(table, parts, empty_queries, average, percent, median)


def _per_query_parts(table, names, ties, average, ap, divisor, gain, rows
                     ) -> dict[str, tuple[Tensor, Tensor | None, Tensor | None]]:
    """Each named metric's per-query values, with the micro numerators and denominators where
    the metric is micro-averaged: everything the aggregation needs besides the table's
    per-query fields."""
    def each_query(fn):
        return fn(table) if rows is None else fn(rows[0])[rows[1]]

    parts: dict[str, tuple[Tensor, Tensor | None, Tensor | None]] = {}
    for name in names:
        spec = parse_metric(name)
        values = each_query(
            lambda t, spec=spec: per_query_values(t, spec, ties=ties, ap=ap, divisor=divisor,
                                                  gain=gain)
        )
        numerator = denominator = None
        if spec.base not in RANK_METRICS and average_for(spec, average) == "micro":
            micro = spec.measure.micro
            assert micro is not None  # average_for and parse_metric leave micro where defined
            if rows is None:
                numerator, denominator = micro(table, spec.k, ties)
            else:
                numerator, denominator = (v[rows[1]] for v in micro(rows[0], spec.k, ties))
        parts[spec.name] = (values, numerator, denominator)
    return parts


def worst_rank_fill(values: Tensor, table: RankTable) -> Tensor:
    """``values`` (per-query ranks) with each unanswerable query's rank set to the worst rank,
    ``gallery_size + 1``: after the whole gallery (``empty_queries="zero"`` for a rank)."""
    worst = table.gallery_size.to(torch.float64) + 1
    return torch.where(table.num_relevant == 0, worst, values)


def _aggregate_parts(table, parts, empty_queries, average, percent, median) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for name, (values, numerator, denominator) in parts.items():
        spec = parse_metric(name)
        if spec.base in RANK_METRICS:
            if empty_queries == "zero":
                values = worst_rank_fill(values, table)
            else:
                values = _empty_fill(values, table, empty_queries, 0.0)
            if spec.base == "median_rank":
                out[spec.name] = median_rank(values, median)
            else:
                counted = values[~torch.isnan(values)]
                out[spec.name] = counted.mean() if counted.numel() else torch.tensor(math.nan)
            continue
        out[spec.name] = aggregate(
            values,
            table,
            empty_queries=empty_queries,
            average=average_for(spec, average),
            percent=percent,
            numerator=numerator,
            denominator=denominator,
        )
    return out


def query_fields(table: RankTable) -> RankTable:
    """``table`` without its items: the per-query fields that aggregation reads."""
    return RankTable(
        ptr=torch.zeros(table.num_queries + 1, dtype=torch.int64),
        above=torch.zeros(0, dtype=torch.int64),
        tied=torch.zeros(0, dtype=torch.int64),
        num_relevant=table.num_relevant,
        gallery_size=table.gallery_size,
        depth=table.depth,
        query_class=table.query_class,
        query_id=table.query_id,
    )


QueryParts = dict[str, tuple[Tensor, "Tensor | None", "Tensor | None"]]


def query_parts_in_chunks(
    tables: Iterable[RankTable],
    names: Sequence[str],
    *,
    ties: str = "expected",
    average: str = "macro",
    ap: str = "step",
    divisor: str = "relevant",
    gain: str = "exponential",
) -> tuple[QueryParts, RankTable]:
    """Each named metric's per-query values (and micro numerators and denominators) of the
    queries of several tables, one table at a time, with those queries' fields
    (:func:`query_fields`): what :func:`aggregate_query_parts` turns into values, also after
    gathering the parts of several processes."""
    if ties not in T.TIES:
        raise ValueError(f"`ties` must be one of {T.TIES}, got {ties!r}")
    skeletons: list[RankTable] = []
    chunk_parts: list[dict[str, tuple[Tensor, Tensor | None, Tensor | None]]] = []
    for table in tables:
        with sharing_tie_groups():  # one chunk's groups at a time
            chunk_parts.append(
                _per_query_parts(table, names, ties, average, ap, divisor, gain, None)
            )
        skeletons.append(query_fields(table))
    if not skeletons:
        raise ValueError("no rank table was given")
    queries = concat_tables(skeletons)

    def joined(parts: list[Tensor | None]) -> Tensor | None:
        return None if parts[0] is None else torch.cat(parts)  # type: ignore[arg-type]

    parts = {
        name: tuple(joined([p[name][i] for p in chunk_parts]) for i in range(3))
        for name in chunk_parts[0]
    }
    return parts, queries  # type: ignore[return-value]


def aggregate_query_parts(
    queries: RankTable,
    parts: QueryParts,
    empty_queries: str = "skip",
    average: str = "macro",
    percent: bool = False,
    median: str = "vsepp",
) -> dict[str, Tensor]:
    """The values of :func:`query_parts_in_chunks`' parts (``queries``: their query fields)."""
    return _aggregate_parts(queries, parts, empty_queries, average, percent, median)
