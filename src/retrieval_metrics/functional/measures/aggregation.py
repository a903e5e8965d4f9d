"""Aggregation: per-query values -> one number (``empty_queries``, ``average``, ``percent``),
median and mean ranks, chance levels, and :func:`retrieval_measures`, several named measures from
one rank table."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.measures.judged import at_level, condensed
from retrieval_metrics.functional.measures.names import (
    RANK_METRICS,
    MetricSpec,
    average_for,
    parse_metric,
)
from retrieval_metrics.functional.measures.options import (
    DEFAULT_AP,
    DEFAULT_AVERAGE,
    DEFAULT_DIVISOR,
    DEFAULT_EMPTY_QUERIES,
    DEFAULT_GAIN,
    DEFAULT_MEDIAN,
    DEFAULT_PERCENT,
    DEFAULT_TIES,
    MeasureOptions,
)
from retrieval_metrics.functional.measures.per_query import SharedTieGroups
from retrieval_metrics.functional.options import OPTIONS, check_option
from retrieval_metrics.functional.primitives import flat_nonzero, repeat
from retrieval_metrics.functional.table import RankTable, concat_tables

__all__ = [
    "QueryParts",
    "aggregate",
    "aggregate_query_parts",
    "chance_measures",
    "chance_table",
    "counted_values",
    "judged_without_relevant",
    "median_rank",
    "per_query_values",
    "query_fields",
    "query_parts_in_chunks",
    "retrieval_measures",
    "unanswerable",
    "unit_scale",
]

EMPTY_QUERIES = OPTIONS["empty_queries"].allowed
AVERAGES = OPTIONS["average"].allowed
MEDIAN_CONVENTIONS = OPTIONS["median"].allowed


def unit_scale(spec: MetricSpec, options: MeasureOptions) -> float:
    """What a measure's per-query values are multiplied by to be in the unit its value is
    reported in: 100 for a fraction under ``percent=True``, else 1 (a rank is not scaled)."""
    return 100.0 if options.percent and spec.higher_is_better else 1.0


def _empty_fill(
    values: Tensor, table: RankTable, empty_queries: str, fill: float,
    empty: Tensor | None = None,
) -> Tensor:
    """``values`` under the policy ``empty_queries`` for the queries ``empty`` (by default
    those with nothing relevant, ``table.num_relevant == 0``)."""
    check_option("empty_queries", empty_queries)
    if empty is None:
        empty = table.without_relevant
    if empty_queries == "error" and bool(empty.any()):
        which = flat_nonzero(empty)
        shown = which[:10].tolist()
        raise ValueError(
            f"{int(empty.sum())} queries have no relevant gallery item (queries {shown}"
            f"{' ...' if which.numel() > 10 else ''}); pass empty_queries='skip', 'zero' or "
            "'nan'"
        )
    if empty_queries == "zero":
        fill_value = torch.full_like(values, fill)
        return torch.where(_by_query(empty, values), fill_value, values)
    return values


def _by_query(mask: Tensor, values: Tensor) -> Tensor:
    """A per-query ``mask`` shaped to broadcast over ``values`` (a CMC row per query)."""
    return mask.view(-1, *([1] * (values.dim() - 1)))


def judged_without_relevant(table: RankTable, spec: MetricSpec) -> Tensor | None:
    """The queries that an ir_measures string scores though nothing of theirs is relevant:
    judged, with grades <= 0 only. Its provider reports every judged query (0; Judged@K its
    share of judged documents), so such a query counts whatever ``empty_queries`` says. None
    where there is none, the name is the library's own, or the table does not say which
    documents were judged (``num_nonrelevant``: the ranking placed them)."""
    if not spec.ir_measures or table.num_nonrelevant is None:
        return None
    judged = table.without_relevant & (table.num_nonrelevant > 0)
    return judged if bool(judged.any()) else None


def unanswerable(table: RankTable, spec: MetricSpec) -> Tensor:
    """``(Q,)`` bool: the queries that ``empty_queries`` rules for ``spec``: those with nothing
    relevant, less those an ir_measures string scores (:func:`judged_without_relevant`)."""
    empty = table.without_relevant
    judged = judged_without_relevant(table, spec)
    return empty if judged is None else empty & ~judged


def aggregate(
    values: Tensor,
    table: RankTable,
    *,
    empty_queries: str = DEFAULT_EMPTY_QUERIES,
    average: str = DEFAULT_AVERAGE,
    percent: bool = DEFAULT_PERCENT,
    numerator: Tensor | None = None,
    denominator: Tensor | None = None,
    fill: float = 0.0,
) -> Tensor:
    """Mean over counted queries, as a 0-d float64 tensor (a vector for CMC rows).

    ``empty_queries``: "skip" leaves unanswerable queries out, "zero" scores them ``fill``,
    "error" raises, "nan" leaves out every NaN value (the per-query values are then NaN only
    where a measure's formula divides by zero: precision scores such queries). ``average``:
    "macro" (mean over queries), "class" (mean over classes of each class's mean; the table
    needs ``query_class``), "micro" (sum of ``numerator`` over sum of ``denominator``, for
    recall-like metrics). NaN when no query counts.
    """
    check_option("average", average)
    if values.dim() not in (1, 2) or values.shape[0] != table.num_queries:
        raise ValueError(
            f"`values` must hold one value (or one row) per query of `table` "
            f"({table.num_queries}), got shape {tuple(values.shape)}"
        )
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
    kept = _kept(values, counted)
    if kept.shape[0] == 0:
        return _nan_like(values) * scale
    return kept.mean(0) * scale


def _nan_like(values: Tensor) -> Tensor:
    if values.dim() == 1:
        return torch.tensor(math.nan, dtype=torch.float64)
    return torch.full(values.shape[1:], math.nan, dtype=torch.float64)


def _kept(values: Tensor, keep: Tensor) -> Tensor:
    """``values[keep]`` (``keep``: a bool a query, along the first dimension); ``values`` itself
    (contiguous: the same numbers in the same order) where every query is kept on the host, as
    in most evaluations: a boolean mask searched for nothing costs more than the measure it
    feeds (25,000 queries). On a device the mask is taken as it is: testing it first would be
    one more wait."""
    if values.device.type == "cpu" and bool(keep.all()):
        return values.contiguous()
    return values[keep]


def median_rank(ranks: Tensor, convention: str = DEFAULT_MEDIAN) -> Tensor:
    """Median of per-query ranks, NaN entries dropped.

    ``"vsepp"``: floor(median(r - 1)) + 1, as the VSE++ evaluation code computes it (Faghri et
    al., BMVC 2018; its ``medr``); ``"plain"``: the ordinary median (mean of the two middle
    values for an even count).
    """
    if convention not in MEDIAN_CONVENTIONS:
        raise ValueError(f"`convention` must be one of {MEDIAN_CONVENTIONS}, got {convention!r}")
    if not isinstance(ranks, Tensor) or ranks.dim() != 1:
        raise ValueError("`ranks` must be a 1-D tensor of per-query ranks (NaN: unanswerable)")
    r = _kept(ranks, ~torch.isnan(ranks))
    if r.numel() and bool((r < 1).any()):
        raise ValueError(f"`ranks` are 1-based (>= 1), got {float(r.min()):g}")
    n = r.numel()
    if n == 0:
        return torch.tensor(math.nan, dtype=torch.float64)
    middle = [(n - 1) // 2, n // 2]
    if r.device.type == "cpu" and r.dtype in (torch.float32, torch.float64):
        # the two middle order statistics selected, not the whole list sorted (25,000 queries:
        # 0.3 ms against 1.7; a rank table is host data, so this is the path on a GPU too)
        pair = torch.from_numpy(np.partition(r.numpy(), middle)[middle])
    else:
        pair = r.sort().values[middle]
    mid = (pair[0] + pair[1]) / 2
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
        num_nonrelevant=table.num_nonrelevant,  # (the queries judged: see unanswerable)
    )


def per_query_values(
    table: RankTable,
    spec: MetricSpec,
    *,
    ties: str = DEFAULT_TIES,
    ap: str = DEFAULT_AP,
    divisor: str = DEFAULT_DIVISOR,
    gain: str = DEFAULT_GAIN,
    options: MeasureOptions | None = None,
    shared: SharedTieGroups | None = None,
) -> Tensor:
    """Per-query values of one named metric (CMC: a ``(Q, K)`` matrix).

    The options are given one by one (``ties``, ``ap``, ``divisor``, ``gain``) or as
    ``options``; ``shared``: the tie groups of a shared call, or None.
    """
    options = MeasureOptions.of(options, ties=ties, ap=ap, divisor=divisor, gain=gain)
    return _values_of(table, spec, options, shared)


def counted_values(
    values: Tensor, table: RankTable, spec: MetricSpec, options: MeasureOptions
) -> Tensor:
    """Per-query ``values`` of ``spec`` as the mean counts them, the one rule that the value,
    the per-query rows and the interval follow: NaN is a query left out. Under
    ``empty_queries="zero"`` a query with nothing relevant is 0 (a rank: the worst rank, gallery
    size + 1); under ``"skip"`` it is NaN, for a measure defined for every query (Judged@K) too,
    so that it counts the queries the others count. An ir_measures string scores a query judged
    with grades <= 0 only as its provider does (0; Judged@K its share), whatever
    ``empty_queries`` says (:func:`judged_without_relevant`). ``table``: the queries' fields."""
    judged = judged_without_relevant(table, spec)
    if judged is not None and spec.measure.needs_relevant:
        values = torch.where(_by_query(judged, values), 0.0, values)
    empty = unanswerable(table, spec)
    if not spec.measure.needs_relevant:
        if options.empty_queries != "skip":
            return values  # defined for every query: nothing to fill
        return torch.where(_by_query(empty, values), math.nan, values)
    if options.empty_queries != "zero":
        return values
    if spec.base in RANK_METRICS:
        return worst_rank_fill(values, table)
    return _empty_fill(values, table, "zero", 0.0, empty)


def _view_of(
    table: RankTable, spec: MetricSpec, options: MeasureOptions, shared: SharedTieGroups | None
) -> tuple[RankTable, MeasureOptions]:
    """The table ``spec`` reads and the options it reads it with: the metric's ``options``
    with what the name sets, and the table of the condensed list (``judged_only``) at the
    relevance level (``relevance_level``), made once per shared call."""
    options = spec.options_over(options)
    level, judged_only = options.relevance_level, options.judged_only
    if level is None and not judged_only:
        return table, options

    def make() -> RankTable:
        view = condensed(table) if judged_only else table
        return at_level(view, level) if level is not None else view

    if shared is None:
        return make(), options
    return shared.get(table, ("view", level, judged_only), make), options


def _values_of(
    table: RankTable, spec: MetricSpec, options: MeasureOptions, shared: SharedTieGroups | None
) -> Tensor:
    view, options = _view_of(table, spec, options, shared)
    values = spec.measure.per_query(view, spec.k, options, shared)
    if view is not table and spec.measure.needs_relevant:
        # the queries are those with something relevant (grade > 0); one with nothing at the
        # relevance level scores 0 there, as trec_eval scores it
        lost = (table.num_relevant > 0) & (view.num_relevant == 0)
        values = torch.where(lost.view(-1, *([1] * (values.dim() - 1))), 0.0, values)
    return values


def micro_parts(
    table: RankTable,
    spec: MetricSpec,
    options: MeasureOptions,
    shared: SharedTieGroups | None = None,
) -> tuple[Tensor, Tensor]:
    """Per query, the numerator and denominator of ``spec``'s micro average (``average=
    "micro"``), read on the table the name asks for (its relevance level, condensed lists)."""
    micro = spec.measure.micro
    if micro is None:
        raise ValueError(f"metric {spec.name!r} has no micro average")
    view, options = _view_of(table, spec, options, shared)
    return micro(view, spec.k, options.ties, shared)


def retrieval_measures(
    table: RankTable,
    names: Sequence[str],
    *,
    ties: str = DEFAULT_TIES,
    empty_queries: str = DEFAULT_EMPTY_QUERIES,
    average: str = DEFAULT_AVERAGE,
    percent: bool = DEFAULT_PERCENT,
    ap: str = DEFAULT_AP,
    divisor: str = DEFAULT_DIVISOR,
    gain: str = DEFAULT_GAIN,
    median: str = DEFAULT_MEDIAN,
    options: MeasureOptions | None = None,
) -> dict[str, Tensor]:
    """Several named metrics from one rank table, as 0-d float64 tensors (CMC: a vector).

    The options are given one by one, or together as ``options`` (a :class:`MeasureOptions`).
    The measures of one call share their tie groups.

    >>> from retrieval_metrics.functional.ranking import rank_lists
    >>> table = rank_lists([["d3", "d7", "d1"], ["d4", "d5"]], [{"d1"}, {"d4", "d6"}])
    >>> {k: round(float(v), 4) for k, v in retrieval_measures(table, ["recall@3", "mrr"]).items()}
    {'recall@3': 0.75, 'mrr': 0.6667}
    >>> float(retrieval_measures(table, ["recall@3"], options=MeasureOptions(percent=True))[
    ...     "recall@3"])
    75.0
    """
    options = MeasureOptions.of(
        options, ties=ties, empty_queries=empty_queries, average=average, percent=percent, ap=ap,
        divisor=divisor, gain=gain, median=median,
    )
    if isinstance(names, str):
        # (read letter by letter it gave "unknown metric 'm'")
        raise ValueError(f"`names` must be a list of metric names, got the string {names!r}")
    if len(set(names)) != len(names):
        # (counted only where some name repeats, as RetrievalMetrics does)
        repeated = sorted({n for n in names if list(names).count(n) > 1})
        raise ValueError(f"`names` holds {repeated} more than once: its values are keyed by name")
    return _measures(table, names, options)


def chance_measures(
    table: RankTable, names: Sequence[str], options: MeasureOptions | None = None, **keywords
) -> dict[str, Tensor]:
    """The chance level of each named metric on ``table``'s galleries: its
    value under a uniformly random ranking, aggregated like :func:`retrieval_measures` (whose
    options it takes, as ``options`` or one by one; the tie rule is always "expected").

    A query's chance value depends only on its gallery size and number of relevant items (and
    grades), so each distinct pair is computed once.
    """
    # the chance level is the expected value over random orders: McSherry and Najork's rule
    options = MeasureOptions.of(options, **{k: v for k, v in keywords.items() if k != "ties"})
    options = options.replace(ties="expected")
    if table.ideal_grade is not None or table.num_queries == 0:
        return _measures(chance_table(table), names, options)
    key = torch.stack([table.gallery_size, table.num_relevant], 1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    representative = torch.zeros(unique.shape[0], dtype=torch.int64).scatter_(
        0, inverse, torch.arange(table.num_queries)
    )
    # The chance table of the representatives only (one item per relevant pair of every query
    # would be as large as the rank table); the aggregation reads the per-query fields alone.
    fields = query_fields(table)
    # (which queries were judged: an ir_measures string counts those judged grade 0 only)
    chance_fields = replace(
        fields, depth=fields.gallery_size.clone(), num_nonrelevant=table.num_nonrelevant
    )
    small = chance_table(fields.select(representative))
    return _measures(chance_fields, names, options, rows=(small, inverse))


def _measures(
    table: RankTable,
    names: Sequence[str],
    options: MeasureOptions,
    rows: tuple[RankTable, Tensor] | None = None,
) -> dict[str, Tensor]:
    """retrieval_measures; with ``rows=(small, index)``, per-query values are computed on
    ``small`` and expanded to ``table``'s queries by ``index`` (queries known to be equal).
    The measures share one :class:`SharedTieGroups`, dropped when the call returns."""
    parts = _per_query_parts(table, names, options, rows, SharedTieGroups())
    return _aggregate_parts(table, parts, options)


def _per_query_parts(
    table: RankTable,
    names: Sequence[str],
    options: MeasureOptions,
    rows: tuple[RankTable, Tensor] | None,
    shared: SharedTieGroups | None,
) -> dict[str, tuple[Tensor, Tensor | None, Tensor | None]]:
    """Each named metric's per-query values, with the micro numerators and denominators where
    the metric is micro-averaged: everything the aggregation needs besides the table's
    per-query fields."""
    source = table if rows is None else rows[0]
    parts: dict[str, tuple[Tensor, Tensor | None, Tensor | None]] = {}
    for name in names:
        spec = parse_metric(name)
        values = _values_of(source, spec, options, shared)
        numerator = denominator = None
        if spec.base not in RANK_METRICS and average_for(spec, options.average) == "micro":
            numerator, denominator = micro_parts(source, spec, options, shared)
        if rows is not None:
            values = values[rows[1]]
            if numerator is not None:
                numerator, denominator = numerator[rows[1]], denominator[rows[1]]
        parts[spec.name] = (values, numerator, denominator)
    return parts


def worst_rank_fill(values: Tensor, table: RankTable) -> Tensor:
    """``values`` (per-query ranks) with each unanswerable query's rank set to the worst rank,
    ``gallery_size + 1``: after the whole gallery (``empty_queries="zero"`` for a rank)."""
    worst = table.gallery_size.to(torch.float64) + 1
    return torch.where(table.without_relevant, worst, values)


def _aggregate_parts(
    table: RankTable,
    parts: dict[str, tuple[Tensor, Tensor | None, Tensor | None]],
    options: MeasureOptions,
) -> dict[str, Tensor]:
    empty_queries = options.empty_queries
    out: dict[str, Tensor] = {}
    for name, (values, numerator, denominator) in parts.items():
        spec = parse_metric(name)
        if spec.base in RANK_METRICS:
            if empty_queries == "zero":
                values = worst_rank_fill(values, table)
            else:
                values = _empty_fill(values, table, empty_queries, 0.0)
            if spec.base == "median_rank":
                out[spec.name] = median_rank(values, options.median)
            else:
                counted = _kept(values, ~torch.isnan(values))
                out[spec.name] = counted.mean() if counted.numel() else torch.tensor(math.nan)
            continue
        # the queries counted are those of per_query() and summary() (counted_values); "error"
        # refuses the queries the rule leaves unanswerable
        values = counted_values(values, table, spec, options)
        if empty_queries == "error":
            _empty_fill(values, table, "error", 0.0, unanswerable(table, spec))
        out[spec.name] = aggregate(
            values,
            table,
            empty_queries="nan",
            average=average_for(spec, options.average),
            percent=options.percent,
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
        num_absent=table.num_absent,
    )


QueryParts = dict[str, tuple[Tensor, "Tensor | None", "Tensor | None"]]


def query_parts_in_chunks(
    tables: Iterable[RankTable],
    names: Sequence[str],
    *,
    ties: str = DEFAULT_TIES,
    average: str = DEFAULT_AVERAGE,
    ap: str = DEFAULT_AP,
    divisor: str = DEFAULT_DIVISOR,
    gain: str = DEFAULT_GAIN,
    options: MeasureOptions | None = None,
) -> tuple[QueryParts, RankTable]:
    """Each named metric's per-query values (and micro numerators and denominators) of the
    queries of several tables, one table at a time, with those queries' fields
    (:func:`query_fields`): what :func:`aggregate_query_parts` turns into values, also after
    gathering the parts of several processes. The options are given one by one or as
    ``options`` (whose aggregation options are not read here)."""
    options = MeasureOptions.of(
        options, ties=ties, average=average, ap=ap, divisor=divisor, gain=gain
    )
    skeletons: list[RankTable] = []
    chunk_parts: list[dict[str, tuple[Tensor, Tensor | None, Tensor | None]]] = []
    for table in tables:
        # one chunk's groups at a time
        chunk_parts.append(_per_query_parts(table, names, options, None, SharedTieGroups()))
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
    empty_queries: str = DEFAULT_EMPTY_QUERIES,
    average: str = DEFAULT_AVERAGE,
    percent: bool = DEFAULT_PERCENT,
    median: str = DEFAULT_MEDIAN,
    *,
    options: MeasureOptions | None = None,
) -> dict[str, Tensor]:
    """The values of :func:`query_parts_in_chunks`' parts (``queries``: their query fields),
    aggregated under the options given one by one or as ``options``."""
    options = MeasureOptions.of(
        options, empty_queries=empty_queries, average=average, percent=percent, median=median
    )
    return _aggregate_parts(queries, parts, options)
