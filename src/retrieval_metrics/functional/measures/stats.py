"""Chance level, confidence intervals, paired comparison and the summary table.

What they mean is in the documentation's Definitions page (docs/definitions.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal

import torch
from torch import Tensor

from retrieval_metrics.functional.measures import aggregation as A
from retrieval_metrics.functional.measures import names as N
from retrieval_metrics.functional.measures.options import MeasureOptions
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = [
    "Comparison",
    "Summary",
    "bootstrap_interval",
    "mcnemar_exact",
    "paired_comparison",
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


#: what :func:`bootstrap_interval` resamples: the statistic a reported value is
BOOTSTRAP_STATISTICS = ("mean", "median", "median_vsepp")


def value_statistic(spec: N.MetricSpec, options: MeasureOptions) -> str:
    """The statistic of per-query values a measure's value is (:data:`BOOTSTRAP_STATISTICS`):
    the median rank's by its convention (``median``), every other measure's the mean."""
    if spec.base != "median_rank":
        return "mean"
    return "median_vsepp" if options.median == "vsepp" else "median"


def bootstrap_interval(
    values: Tensor,
    level: float = 0.95,
    num_bootstrap: int = 1000,
    seed: int = 0,
    statistic: str = "mean",
) -> tuple[float, float]:
    """Seeded percentile bootstrap over queries of a statistic of ``values``: ``"mean"``,
    ``"median"`` (the ordinary median: the mean of the two middle values for an even count) or
    ``"median_vsepp"`` (VSE++'s floor(median(r - 1)) + 1, which is floor(median(r))), each the
    statistic the reported value is; the same for the same values in any order."""
    if statistic not in BOOTSTRAP_STATISTICS:
        raise ValueError(f"`statistic` must be one of {BOOTSTRAP_STATISTICS}, got {statistic!r}")
    alpha = _tail(level)  # (checked before the resampling)
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
        # (torch's median is the lower middle value; the reported median is not)
        ordered = sample.sort(1).values
        middle = (ordered[:, (n - 1) // 2] + ordered[:, n // 2]) / 2
        stats.append(torch.floor(middle) if statistic == "median_vsepp" else middle)
    dist = torch.cat(stats)
    lo = torch.quantile(dist, alpha).item()
    hi = torch.quantile(dist, 1 - alpha).item()
    return (lo, hi)


def _bootstrap_curve(
    values: Tensor, level: float, num_bootstrap: int, seed: int
) -> tuple[Tensor, Tensor]:
    """Pointwise percentile bootstrap of the mean of each column of ``(Q, K)`` per-query values
    (a CMC curve), rows with NaN left out; every column uses the same resampled queries."""
    alpha = _tail(level)  # (checked before the resampling)
    v = _canonical(values[~torch.isnan(values).any(1)].to(torch.float64))
    n, width = v.shape
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
            f"{int(self.level * 100)}% interval",
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
    (every per-query value 0 or 1), otherwise a seeded percentile bootstrap over queries. A CMC
    curve gets a pointwise interval at each K (two vectors), by the same rule at each K. The
    chance level is each measure under a uniformly random ranking of the same gallery (``None``
    for ranked lists, whose gallery is unknown).
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
    per_query = {name: value for name, (value, _, _) in parts.items()}
    return _summary(queries, names, values, per_query, level, num_bootstrap, seed, options)


def _summary(
    table: RankTable,
    names: Sequence[str],
    values: dict[str, Tensor],
    per_query_of: dict[str, Tensor],
    level: float,
    num_bootstrap: int,
    seed: int,
    options: MeasureOptions,
) -> Summary:
    """The rows of a summary; ``table`` is read for its per-query fields only."""
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
        per_query = per_query_of[spec.name]
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
        if per_query.dim() > 1:
            # a curve (CMC): a pointwise interval at each K, two vectors
            if bool(((per_query == 0) | (per_query == 1) | per_query.isnan()).all()):
                lo_k, hi_k = _wilson_curve(per_query, level)
            else:
                lo_k, hi_k = _bootstrap_curve(per_query, level, num_bootstrap, seed)
            interval = (lo_k * scale, hi_k * scale)
        elif spec.base == "hit_rate" and bool(
            ((per_query == 0) | (per_query == 1) | per_query.isnan()).all()
        ):
            lo, hi = wilson_interval(float(per_query.nansum()), counted, level)
            interval = (lo * scale, hi * scale)
        else:
            stat = value_statistic(spec, options)
            lo, hi = bootstrap_interval(per_query, level, num_bootstrap, seed, stat)
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


def mcnemar_exact(first: Tensor, second: Tensor) -> float:
    """Two-sided exact McNemar p-value for paired 0/1 outcomes (discordant pairs ~ Bin(n, 1/2))."""
    a = first.to(torch.bool)
    b = second.to(torch.bool)
    only_first = int((a & ~b).sum())
    only_second = int((~a & b).sum())
    n = only_first + only_second
    if n == 0:
        return 1.0
    k = min(only_first, only_second)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass
class Comparison:
    """Paired comparison of one metric between two models on the same queries.

    ``num_bootstrap`` is the number of resamples the interval (and a bootstrap p-value) came
    from; ``None`` when unknown.
    """

    name: str
    first: float
    second: float
    difference: float
    interval: tuple[float, float]
    p_value: float
    test: str
    queries: int
    num_bootstrap: int | None = None

    def p_text(self, digits: int = 4) -> str:
        """The p-value as printed: ``"p = 0.0312"``, or ``"p < 0.0001"`` for a bootstrap p-value
        of 0 from 10,000 resamples (none was as extreme, so all it shows is p < 1/resamples)."""
        if self.test == "paired bootstrap" and self.p_value == 0 and self.num_bootstrap:
            return f"p < {_upper_bound(1, self.num_bootstrap)}"
        return f"p = {self.p_value:.{digits}g}"

    def __str__(self) -> str:
        lo, hi = self.interval
        return (f"{self.name}: {self.first:.4f} vs {self.second:.4f}, difference "
                f"{self.difference:+.4f} [{lo:+.4f}, {hi:+.4f}], {self.p_text()} "
                f"({self.test}, {self.queries} queries)")


def _upper_bound(numerator: int, denominator: int) -> str:
    """``numerator / denominator`` to 2 significant digits, rounded up: a bound printed after
    "p <" must not claim more than the resamples show (1/3000 is 0.00034, not 0.00033)."""
    exact = Decimal(numerator) / Decimal(denominator)
    step = Decimal(1).scaleb(exact.adjusted() - 1)
    return format(exact.quantize(step, rounding=ROUND_CEILING).normalize(), "f")


def paired_comparison(
    name: str,
    first: Tensor,
    second: Tensor,
    level: float = 0.95,
    num_bootstrap: int = 10_000,
    seed: int = 0,
) -> Comparison:
    """Difference of means (first - second) over queries counted by both, with a seeded paired
    bootstrap interval; p-value from the exact McNemar test for 0/1 values (hit rates), else from
    the paired bootstrap: the share of resampled mean differences, re-centred on 0, that lie at
    least as far from 0 as the observed difference."""
    if first.shape != second.shape:
        raise ValueError(
            f"the two metrics were computed on different queries ({first.shape[0]} and "
            f"{second.shape[0]}); compare models on the same queries"
        )
    alpha = _tail(level)  # (checked before the resampling)
    both = ~(torch.isnan(first) | torch.isnan(second))
    a, b = first[both].to(torch.float64), second[both].to(torch.float64)
    n = a.numel()
    if n == 0:
        nan = math.nan
        return Comparison(name, nan, nan, nan, (nan, nan), nan, "none", 0)
    diff = a - b
    # the differences in an order of their own: the same interval for the queries in any order
    ordered = _canonical(diff)
    dist = torch.cat([ordered[idx].mean(1) for idx in _resamples(n, num_bootstrap, seed)])
    interval = (torch.quantile(dist, alpha).item(), torch.quantile(dist, 1 - alpha).item())
    binary = bool((((a == 0) | (a == 1)) & ((b == 0) | (b == 1))).all())
    if binary:
        p_value, test = mcnemar_exact(a > 0.5, b > 0.5), "exact McNemar"
    else:
        centred = dist - diff.mean()
        p_value = float((centred.abs() >= abs(float(diff.mean()))).to(torch.float64).mean())
        test = "paired bootstrap"
    return Comparison(name, float(a.mean()), float(b.mean()), float(diff.mean()), interval,
                      p_value, test, n, num_bootstrap)
