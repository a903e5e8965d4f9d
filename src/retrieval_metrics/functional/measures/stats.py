"""Chance level, confidence intervals, paired comparison and the summary table.

What they mean is in the documentation's Definitions page (docs/definitions.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.measures import aggregation as A
from retrieval_metrics.functional.measures import names as N
from retrieval_metrics.functional.measures.options import MeasureOptions
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = [
    "Summary",
    "bootstrap_interval",
    "level_text",
    "summarize",
    "summarize_query_parts",
    "value_statistic",
    "wilson_interval",
]


def wilson_interval(successes: float, total: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a proportion."""
    if total <= 0:
        return (math.nan, math.nan)
    _tail(level)  # (checked)
    z = _normal_quantile(0.5 + level / 2)
    p = successes / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _tail(level: float) -> float:
    """The share of the distribution beyond each end of a ``level`` interval, ``level`` checked:
    outside (0, 1) an interval came back inverted (-0.5: 0.85 to 0.55) or failed inside
    torch.quantile."""
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"`level` must be a number between 0 and 1 (e.g. 0.95), got {level!r}")
    return (1 - level) / 2


def _normal_quantile(p: float) -> float:
    return math.sqrt(2) * torch.special.erfinv(torch.tensor(2 * p - 1, dtype=torch.float64)).item()


def _resamples(n: int, num_bootstrap: int, seed: int) -> Iterator[Tensor]:
    """The seeded bootstrap resamples of ``n`` queries: ``num_bootstrap`` rows of ``n`` indices
    drawn with replacement, yielded in chunks of at most 2^22 indices (a ``(b, n)`` tensor each),
    from one generator seeded with ``seed``: the same draws, in the same order, for every caller
    (Efron's bootstrap; the percentile interval is read off the resampled statistics)."""
    if isinstance(num_bootstrap, bool) or not isinstance(num_bootstrap, int) or num_bootstrap < 1:
        raise ValueError(f"`num_bootstrap` must be a positive int, got {num_bootstrap!r}")
    gen = torch.Generator().manual_seed(seed)
    chunk = max(1, 2**22 // n)
    for start in range(0, num_bootstrap, chunk):
        b = min(chunk, num_bootstrap - start)
        yield torch.randint(0, n, (b, n), generator=gen)


def _canonical(values: Tensor) -> Tensor:
    """``values`` (per-query, one row per query) in an order that depends on the values alone:
    sorted, rows lexicographically. The seeded resamples draw positions, so resampling the
    queries in their given order would tie the interval to that order (the API's order of
    updates, the command line's by query id); sorted first, the same values give the same
    interval in any order."""
    if values.dim() == 1:
        return torch.sort(values).values
    for column in reversed(range(values.shape[1])):
        values = values[torch.sort(values[:, column], stable=True).indices]
    return values


#: what :func:`bootstrap_interval` resamples: the statistic a reported value is of its
#: per-query parts (:func:`value_statistic`)
BOOTSTRAP_STATISTICS = ("mean", "median", "median_vsepp", "micro", "class")

#: Two resampled statistics within this share of the statistics' size are equal: what tells
#: a resample as extreme as the observed difference (rounding apart, the same sums in another
#: order differ in their last bits) and a bootstrap with no spread.
_SAME = 1e-12


def value_statistic(spec: N.MetricSpec, options: MeasureOptions) -> str:
    """The statistic of per-query parts a measure's value is (:data:`BOOTSTRAP_STATISTICS`):
    the median rank's by its convention (``median``), a micro average's the sum of the
    per-query numerators over the sum of the denominators (``micro``), a class average's the
    mean over classes of each class's mean (``class``), every other measure's the mean. As
    the aggregation reads ``average``: a rank's value is its mean (or median) whatever it says,
    a measure without a micro form stays a mean."""
    if spec.base == "median_rank":
        return "median_vsepp" if options.median == "vsepp" else "median"
    if spec.base in N.RANK_METRICS:
        return "mean"
    average = N.average_for(spec, options.average)
    return average if average in ("micro", "class") else "mean"


def level_text(level: float) -> str:
    """A level as the header of its intervals shows it: ``"95%"``, ``"97.5%"``, ``"57%"`` (not
    ``int(100 * level)``, which read 0.975 as 97% and 0.57 as 56%)."""
    return f"{level * 100:.6g}%"


def _check_statistic(
    statistic: str, values: Tensor, denominator: Tensor | None, classes: Tensor | None
) -> None:
    """Refuse a statistic that is not one of :data:`BOOTSTRAP_STATISTICS`, or whose per-query
    parts are missing or not one per query."""
    if statistic not in BOOTSTRAP_STATISTICS:
        raise ValueError(f"`statistic` must be one of {BOOTSTRAP_STATISTICS}, got {statistic!r}")
    needed = {"micro": ("denominator", denominator), "class": ("classes", classes)}
    if statistic in needed:
        what, given = needed[statistic]
        if given is None or given.shape[:1] != values.shape[:1]:
            raise ValueError(
                f'statistic="{statistic}" needs `{what}`, one per query ({values.shape[0]}), '
                f"got {None if given is None else tuple(given.shape)}"
            )


def _class_index(classes: Tensor) -> tuple[Tensor, int]:
    """Each query's class as 0, 1, ... (float64, exact: fewer than 2^53 classes), and how many:
    the classes' own codes (64-bit label codes) would round in float64."""
    unique, index = torch.unique(classes.cpu(), return_inverse=True)
    return index.to(torch.float64), int(unique.numel())


def _parts(
    values: Tensor, statistic: str, denominator: Tensor | None, classes: Tensor | None
) -> tuple[Tensor, int]:
    """The per-query parts a statistic reads, one row per counted query (``values`` not NaN):
    ``[numerator, denominator]`` (micro), ``[value..., class]`` (class; several values for a
    curve), else the values; and the number of classes (0 but for ``class``)."""
    v = values.detach().cpu().to(torch.float64)
    v = v if v.dim() > 1 else v[:, None]
    keep = ~torch.isnan(v).any(1)
    columns, num_classes = [v], 0
    if statistic == "micro":
        assert denominator is not None
        columns.append(denominator.detach().cpu().to(torch.float64)[:, None])
    elif statistic == "class":
        assert classes is not None
        index, num_classes = _class_index(classes[keep.to(classes.device)])
        return torch.cat([v[keep], index[:, None]], 1), num_classes
    return torch.cat(columns, 1)[keep], num_classes


def _statistic_rows(sample: Tensor, statistic: str, num_classes: int = 0) -> Tensor:
    """The statistic of each row of resampled queries, ``sample`` a ``(b, n, c)`` draw of
    :func:`_parts`' rows: ``(b, w)``, w the values per query (1; K for a curve). A micro
    average of queries with no denominator is NaN, as the value is."""
    if statistic == "mean":
        return sample.mean(1)
    if statistic in ("median", "median_vsepp"):
        return _medians(sample[..., 0], statistic == "median_vsepp")[:, None]
    if statistic == "micro":
        return (sample[..., 0].sum(1) / sample[..., 1].sum(1))[:, None]
    # class: each row's classes summed apart (row r's class c at r * C + c), the mean over the
    # classes the row drew of their means; rows in groups of at most 2^22 sums
    values, index = sample[..., :-1], sample[..., -1].to(torch.int64)
    b, n, w = values.shape
    out = []
    step = max(1, 2**22 // max(1, num_classes * w))
    for start in range(0, b, step):
        rows = min(step, b - start)
        key = (torch.arange(rows)[:, None] * num_classes + index[start:start + rows]).flatten()
        sums = torch.zeros(rows * num_classes, w, dtype=torch.float64).index_add_(
            0, key, values[start:start + rows].reshape(-1, w)
        )
        counts = torch.zeros(rows * num_classes, dtype=torch.float64).index_add_(
            0, key, torch.ones(rows * n, dtype=torch.float64)
        )
        out.append(_mean_of_drawn(sums.view(rows, num_classes, w),
                                  counts.view(rows, num_classes, 1)))  # fmt: skip
    return torch.cat(out)


def _mean_of_drawn(sums: Tensor, counts: Tensor) -> Tensor:
    """The mean over classes (dimension 1) of each class's mean ``sums / counts``, over the
    classes drawn (``counts`` > 0; every resample draws at least one)."""
    drawn = counts > 0
    means = torch.where(drawn, sums / counts.clamp_min(1), 0.0)
    return means.sum(1) / drawn.sum(1)


def _medians(values: Tensor, vsepp: bool) -> Tensor:
    """The median of each row of ``(b, n)`` values: the mean of the two middle values
    (torch's median is the lower one; the reported median is not), floored for VSE++'s
    convention (floor(median(r - 1)) + 1 = floor(median(r))). The two middle values selected,
    not the rows sorted (as ``aggregation.median_rank`` does: several times faster)."""
    n = values.shape[1]
    middle = [(n - 1) // 2, n // 2]
    pair = torch.from_numpy(np.partition(values.cpu().numpy(), middle, axis=1)[:, middle])
    mid = (pair[:, 0] + pair[:, 1]) / 2
    return torch.floor(mid) if vsepp else mid


def _draw_counts(idx: Tensor, n: int) -> Tensor:
    """How often each resample (a row of ``idx``) drew each of the ``n`` queries."""
    b = idx.shape[0]
    ones = torch.ones(b, n, dtype=torch.float64)
    return torch.zeros(b, n, dtype=torch.float64).scatter_add_(1, idx, ones)


def _weighted(
    counts: Tensor,
    rows: Tensor,
    statistic: str,
    num_classes: int = 0,
    drawn: Tensor | None = None,
) -> Tensor:
    """A micro or class average of each resample, from how often it drew each query
    (``counts``, ``(b, n)``) and the queries' parts (``rows``, :func:`_parts`' layout):
    ``(b, w)``. Sums weighted by the counts, not the drawn rows gathered: one pass over the
    counts instead of a copy of every drawn part. ``drawn``: how many queries of each class
    each resample drew, where known (the classes of both sides of a paired comparison)."""
    if statistic == "micro":
        sums = counts @ rows[:, :2]
        return (sums[:, 0] / sums[:, 1])[:, None]
    index = rows[:, -1].to(torch.int64)
    b = counts.shape[0]
    if drawn is None:
        drawn = torch.zeros(b, num_classes, dtype=torch.float64).index_add_(1, index, counts)
    out = []
    for column in range(rows.shape[1] - 1):
        sums = torch.zeros(b, num_classes, dtype=torch.float64).index_add_(
            1, index, counts * rows[:, column]
        )
        out.append(_mean_of_drawn(sums[..., None], drawn[..., None])[:, 0])
    return torch.stack(out, 1)


def _resampled(
    rows: Tensor, statistic: str, num_classes: int, num_bootstrap: int, seed: int
) -> Tensor:
    """The micro or class average of each of the seeded resamples of ``rows`` (:func:`_parts`'
    rows, in their canonical order), ``(num_bootstrap, w)``."""
    n = rows.shape[0]
    return torch.cat([
        _weighted(_draw_counts(idx, n), rows, statistic, num_classes)
        for idx in _resamples(n, num_bootstrap, seed)
    ])  # fmt: skip


def _point_value(
    values: Tensor, statistic: str, denominator: Tensor | None, classes: Tensor | None
) -> float:
    """The statistic of per-query parts (one value per query), as the aggregation computes a
    measure's value of them: in their order, ``compute()``'s number where they are the
    queries it counts."""
    if values.numel() == 0:
        return math.nan
    if statistic == "mean":
        return float(values.mean())
    if statistic in ("median", "median_vsepp"):
        return float(_medians(values[None], statistic == "median_vsepp")[0])
    if statistic == "micro":
        assert denominator is not None
        den = denominator.sum()
        return float(values.sum() / den) if den > 0 else math.nan
    assert classes is not None
    _, index = torch.unique(classes, return_inverse=True)
    sums = torch.zeros(int(index.max()) + 1, dtype=torch.float64).index_add_(0, index, values)
    return float((sums / torch.bincount(index).to(torch.float64)).mean())


def bootstrap_interval(
    values: Tensor,
    level: float = 0.95,
    num_bootstrap: int = 1000,
    seed: int = 0,
    statistic: str = "mean",
    *,
    denominator: Tensor | None = None,
    classes: Tensor | None = None,
) -> tuple[float, float]:
    """Seeded percentile bootstrap over queries of the statistic a reported value is of its
    per-query ``values`` (NaN: a query not counted, left out): ``"mean"``; ``"median"`` (the
    ordinary median: the mean of the two middle values for an even count); ``"median_vsepp"``
    (VSE++'s floor(median(r - 1)) + 1, which is floor(median(r))); ``"micro"``, the sum of
    ``values`` (each query's numerator) over the sum of ``denominator`` (a micro average:
    recall's hits over relevant items); ``"class"``, the mean over the classes (``classes``:
    each query's) of each class's mean, over the classes a resample draws. Each resample draws
    queries, all of a query's parts together, and recomputes the statistic, so the interval is
    that of the value reported. The same for the same values in any order."""
    _check_statistic(statistic, values, denominator, classes)
    alpha = _tail(level)  # (checked before the resampling)
    if statistic in ("micro", "class"):
        rows, num_classes = _parts(values, statistic, denominator, classes)
        rows = _canonical(rows)
        if rows.shape[0] == 0:
            return (math.nan, math.nan)
        dist = _resampled(rows, statistic, num_classes, num_bootstrap, seed)[:, 0]
        # (a micro resample of queries that have no denominator is NaN, as the value would be)
        lo = torch.nanquantile(dist, alpha).item()
        hi = torch.nanquantile(dist, 1 - alpha).item()
        return (lo, hi)
    v = _canonical(values[~torch.isnan(values)].to(torch.float64))
    n = v.numel()
    if n == 0:
        return (math.nan, math.nan)
    stats = []
    for idx in _resamples(n, num_bootstrap, seed):
        sample = v[idx]
        if statistic == "mean":
            stats.append(sample.mean(1))
            continue
        stats.append(_medians(sample, statistic == "median_vsepp"))
    dist = torch.cat(stats)
    lo = torch.quantile(dist, alpha).item()
    hi = torch.quantile(dist, 1 - alpha).item()
    return (lo, hi)


def _bootstrap_curve(
    values: Tensor,
    level: float,
    num_bootstrap: int,
    seed: int,
    classes: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Pointwise percentile bootstrap of the mean of each column of ``(Q, K)`` per-query values
    (a CMC curve), rows with NaN left out; every column uses the same resampled queries. With
    ``classes`` (``average="class"``), of each column's mean over classes of the class means."""
    alpha = _tail(level)  # (checked before the resampling)
    width = values.shape[1]
    if classes is not None:
        rows, num_classes = _parts(values, "class", None, classes)
        rows = _canonical(rows)
        if rows.shape[0] == 0:
            nan = torch.full((width,), math.nan, dtype=torch.float64)
            return (nan, nan.clone())
        dist = _resampled(rows, "class", num_classes, num_bootstrap, seed)
        return (torch.quantile(dist, alpha, dim=0), torch.quantile(dist, 1 - alpha, dim=0))
    v = _canonical(values[~torch.isnan(values).any(1)].to(torch.float64))
    n = v.shape[0]
    if n == 0:
        nan = torch.full((width,), math.nan, dtype=torch.float64)
        return (nan, nan.clone())
    means = []
    for idx in _resamples(n, num_bootstrap, seed):
        b = idx.shape[0]
        # how often each query was drawn, times its row: the resampled means of every column
        counts = torch.zeros(b, n, dtype=torch.float64).scatter_add_(
            1, idx, torch.ones(b, n, dtype=torch.float64)
        )
        means.append(counts @ v / n)
    dist = torch.cat(means)
    return (torch.quantile(dist, alpha, dim=0), torch.quantile(dist, 1 - alpha, dim=0))


def _wilson_curve(values: Tensor, level: float) -> tuple[Tensor, Tensor]:
    """Wilson's interval at each K of 0/1 per-query rows (a CMC curve without ties)."""
    v = values[~torch.isnan(values).any(1)]
    bounds = [wilson_interval(float(column.sum()), v.shape[0], level) for column in v.T]
    lo = torch.tensor([b[0] for b in bounds], dtype=torch.float64)
    hi = torch.tensor([b[1] for b in bounds], dtype=torch.float64)
    return (lo, hi)


@dataclass
class Summary:
    """What a metric reports beyond its value: one row per measure, and ``notes``: counts about
    the data as a whole, by what they count (e.g. judged documents the corpus lacks)."""

    rows: list[dict] = field(default_factory=list)
    level: float = 0.95
    notes: dict[str, int] = field(default_factory=dict)

    def __getitem__(self, name: str) -> dict:
        for row in self.rows:
            if row["name"] == name:
                return row
        raise KeyError(name)

    def as_dict(self) -> dict[str, dict]:
        return {row["name"]: dict(row) for row in self.rows}

    def __str__(self) -> str:
        head = [
            "metric",
            "value",
            f"{level_text(self.level)} interval",
            "chance",
            "queries",
            "skipped",
            "gallery",
        ]
        lines = []
        for r in self.rows:
            lo, hi = r["interval"]
            chance = r["chance"]
            lines.append(
                [
                    r["name"],
                    _fmt(r["value"]),
                    _fmt_interval(lo, hi),
                    "-" if chance is None else _fmt(chance),
                    str(r["queries"]),
                    str(r["skipped"]),
                    r["gallery"],
                ]
            )
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]
        out = [
            "  ".join(
                h.ljust(w) if i == 0 else h.rjust(w)
                for i, (h, w) in enumerate(zip(head, widths, strict=True))
            )
        ]
        for line in lines:
            out.append(
                "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(line, widths, strict=True))
                )
            )
        out += [f"{what}: {count}" for what, count in self.notes.items()]
        return "\n".join(out)

    __repr__ = __str__


def _fmt(x: float | Tensor) -> str:
    if isinstance(x, Tensor):
        if x.dim() > 0:
            return (
                "["
                + ", ".join(f"{float(v):.4f}" for v in x[:3])
                + (", ...]" if x.numel() > 3 else "]")
            )
        x = float(x)
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.4f}"


def _fmt_interval(lo: float | Tensor, hi: float | Tensor) -> str:
    if isinstance(lo, Tensor) and lo.dim() > 0 and isinstance(hi, Tensor):
        # a curve's pointwise intervals, at the first K as the value column shows them
        pairs = zip(lo[:3], hi[:3], strict=True)
        shown = [f"[{_fmt(float(a))}, {_fmt(float(b))}]" for a, b in pairs]
        return ", ".join(shown) + (", ..." if lo.numel() > 3 else "")
    return f"[{_fmt(lo)}, {_fmt(hi)}]"


def _gallery_text(table: RankTable) -> str:
    sizes = table.gallery_size[table.gallery_size != UNBOUNDED]
    if sizes.numel() == 0:
        return "-"
    lo, hi = int(sizes.min()), int(sizes.max())
    return str(lo) if lo == hi else f"{lo}-{hi}"


def summarize(
    table: RankTable,
    names: Sequence[str],
    *,
    level: float = 0.95,
    num_bootstrap: int = 1000,
    seed: int = 0,
    options: MeasureOptions | None = None,
    **keywords,
) -> Summary:
    """Value, queries counted and skipped, gallery size, chance level and an interval per name.

    The measure options are those of
    :func:`~retrieval_metrics.functional.measures.retrieval_measures`, one by one
    (``keywords``) or as ``options``. Intervals: Wilson's for hit rates without ties to average
    (every per-query value 0 or 1, averaged over queries), otherwise a seeded percentile
    bootstrap over queries of the statistic the value is (:func:`value_statistic`: a micro
    average's ratio of sums and a class average's mean of class means recomputed on each
    resample, not the mean of the per-query values). A CMC curve gets a pointwise interval at
    each K (two vectors), by the same rule at each K. The chance level is each measure under a
    uniformly random ranking of the same gallery (``None`` for ranked lists, whose gallery is
    unknown).
    """
    options = MeasureOptions.of(options, **keywords)
    # the whole table, not only its query fields: graded chance levels read its ideal grades
    return _summarize([table], names, level, num_bootstrap, seed, options, fields=table)


def _summarize(
    tables: Iterable[RankTable],
    names: Sequence[str],
    level: float,
    num_bootstrap: int,
    seed: int,
    options: MeasureOptions,
    fields: RankTable | None = None,
) -> Summary:
    """The per-query values of each metric computed once: aggregated into its value and
    resampled for its interval."""
    parts, queries = A.query_parts_in_chunks(tables, names, options=options)
    queries = queries if fields is None else fields
    return summarize_query_parts(
        queries, parts, names, level=level, num_bootstrap=num_bootstrap, seed=seed,
        options=options,
    )


def summarize_query_parts(
    queries: RankTable,
    parts: A.QueryParts,
    names: Sequence[str],
    *,
    level: float = 0.95,
    num_bootstrap: int = 1000,
    seed: int = 0,
    options: MeasureOptions | None = None,
    **keywords,
) -> Summary:
    """:func:`summarize` from per-query parts already computed
    (:func:`~retrieval_metrics.functional.measures.query_parts_in_chunks`, possibly gathered
    from several processes) and their queries' fields: what a metric that has ranked once
    summarizes from, without ranking again. The options (``options``, or one by one) must be
    those the parts were made with."""
    options = MeasureOptions.of(options, **keywords)
    values = A.aggregate_query_parts(queries, parts, options=options)
    return _summary(queries, names, values, parts, level, num_bootstrap, seed, options)


def _summary(
    table: RankTable,
    names: Sequence[str],
    values: dict[str, Tensor],
    parts: A.QueryParts,
    level: float,
    num_bootstrap: int,
    seed: int,
    options: MeasureOptions,
) -> Summary:
    """The rows of a summary; ``table`` is read for its per-query fields only, ``parts`` are
    each measure's per-query values (and a micro average's numerators and denominators)."""
    # Ranked lists (depth unbounded) come from an unknown collection, and a judged document the
    # corpus lacks is not in it: no chance level.
    has_gallery = table.num_queries > 0 and not bool(table.beyond_gallery.any())
    # a random ranking of the gallery says nothing of which documents were judged: the
    # measures that read them (Judged@K, bpref, condensed lists) have no chance level here
    ranked_alike = [name for name in names if not N.judged_needed([name], options)]
    chance = A.chance_measures(table, ranked_alike, options) if has_gallery else None
    empty_policy = options.empty_queries
    summary = Summary(level=level)
    for name in names:
        spec = N.parse_metric(name)
        per_query, numerator, denominator = parts[spec.name]
        # the interval and the count on exactly the queries the value averages: under "zero"
        # the unanswerable ones too, at 0 (or the worst rank), curves (CMC) included
        # (A.counted_values, the one rule per_query() follows too)
        if empty_policy == "zero" and spec.base in N.RANK_METRICS and per_query.dim() > 1:
            empty = table.num_relevant == 0
            per_query = torch.where(empty[:, None], 0.0, per_query)  # a CMC curve: misses
        else:
            per_query = A.counted_values(per_query, table, spec, options)
        counted = int((~torch.isnan(per_query if per_query.dim() == 1 else per_query[:, 0])).sum())
        scale = A.unit_scale(spec, options)
        # the interval of the value reported: of its own statistic (a micro or class average
        # resampled as one, not as the mean of the per-query values)
        stat = value_statistic(spec, options)
        binary = bool(((per_query == 0) | (per_query == 1) | per_query.isnan()).all())
        if per_query.dim() > 1:
            # a curve (CMC): a pointwise interval at each K, two vectors
            if stat == "class":
                lo_k, hi_k = _bootstrap_curve(
                    per_query, level, num_bootstrap, seed, classes=table.query_class
                )
            elif binary:
                lo_k, hi_k = _wilson_curve(per_query, level)
            else:
                lo_k, hi_k = _bootstrap_curve(per_query, level, num_bootstrap, seed)
            interval = (lo_k * scale, hi_k * scale)
        elif spec.base == "hit_rate" and stat == "mean" and binary:
            # (Wilson's is of a share of queries: a class average is none)
            lo, hi = wilson_interval(float(per_query.nansum()), counted, level)
            interval = (lo * scale, hi * scale)
        else:
            if stat == "micro":
                # each counted query's numerator (NaN: a query the value leaves out)
                assert numerator is not None
                per_query = torch.where(per_query.isnan(), math.nan, numerator)
            lo, hi = bootstrap_interval(
                per_query, level, num_bootstrap, seed, stat,
                denominator=denominator, classes=table.query_class,
            )
            interval = (lo * scale, hi * scale)
        summary.rows.append(
            {
                "name": spec.name,
                "value": values[spec.name],
                "interval": interval,
                "chance": None if chance is None else chance.get(spec.name),
                "queries": counted,
                "skipped": (
                    0 if empty_policy == "zero"
                    # "nan": a measure scores the queries where its formula is defined
                    else table.num_queries - counted if empty_policy == "nan"
                    else int(A.unanswerable(table, spec).sum())
                ),
                "gallery": _gallery_text(table),
            }
        )
    return summary
