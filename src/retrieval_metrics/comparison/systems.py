"""``compare_systems(*metrics, baseline=...)``: which of several systems differ from a
baseline, with p-values corrected for the multiple comparisons? In steps: the arguments
checked (:func:`_checked`), the same options and queries in every metric (``agreement.py``), a row
per measure and system (:func:`_rows`), the p-values corrected over the family
(:func:`_correct`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.comparison.agreement import same_options, same_queries
from retrieval_metrics.comparison.report import SystemComparison
from retrieval_metrics.comparison.text import alpha_of, baseline_index, system_names
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures import significance as S
from retrieval_metrics.functional.measures.aggregation import micro_parts, unit_scale
from retrieval_metrics.functional.measures.stats import bootstrap_interval, value_statistic
from retrieval_metrics.metrics.base import RetrievalMetricBase

__all__ = ["FAMILIES", "compare_systems"]

#: What ``compare_systems(family=...)`` corrects together: every comparison of the call, or
#: the comparisons of each measure apart.
FAMILIES = ("all", "measure")


def compare_systems(
    *metrics: RetrievalMetricBase,
    baseline: int | str = 0,
    names: Sequence[str] | None = None,
    test: str = "t-test",
    correction: str = "holm",
    family: str = "all",
    level: float = 0.95,
    num_resamples: int = 10_000,
    seed: int = 0,
) -> SystemComparison:
    """Compare several systems, scored on the same queries, with a baseline: measure by measure,
    a paired test over queries, its p-values corrected for multiple comparisons.

    Each metric object is one system, every one with the same measures and options, updated
    with the same queries (give them ``ids=``, or the same update order, so that query i is the
    same query in all). For each measure and system the result has:

    * ``value``: the metric's own value, as ``compute()`` returns it;
    * ``interval``: a seeded percentile bootstrap interval at ``level`` of the value: of the
      statistic it is of the per-query values (the mean; the median for ``median_rank``; the
      sum of numerators over the sum of denominators for ``average="micro"``, the mean of
      class means for ``"class"``), :func:`~retrieval_metrics.functional.measures.stats.
      bootstrap_interval` with ``num_resamples`` resamples;
    * and against the baseline: ``difference``, the mean over the queries both count of
      (system - baseline); ``p_value``, two-sided, of the paired ``test`` on those queries
      (``"t-test"``: the paired t-test, ``scipy.stats.ttest_rel``; ``"randomization"``:
      Fisher's sign-flip test with ``num_resamples`` seeded resamples, exact for 2^n <=
      ``num_resamples``); ``p_corrected``; ``significant`` (corrected p < 1 - ``level``, as
      decimals read it: 0.05 for 0.95, a p-value of exactly 0.05 not below it);
      ``wins``, ``ties``, ``losses``: queries where the system is better, equal within 1e-12,
      worse (for ranks, lower is better); ``queries``, the n of the test.

    **The family.** ``correction`` (``"holm"``, ``"bonferroni"``, ``"benjamini-hochberg"`` or
    ``"none"``) adjusts the p-values of every comparison of the call together:
    (N - 1) systems x the measures (each direction of an image-text metric a measure of its
    own), the comparisons with a p-value; ``family="measure"`` corrects the comparisons of each
    measure apart, over the N - 1 systems (as PyTerrier's ``pt.Experiment`` does). The printout
    names the test, the correction and the family's size.

    **The queries.** The per-query values are those the metric's mean counts
    (``metric.per_query()``): a query left out (NaN: skipped for having nothing relevant, or
    where a measure is undefined) by either system is left out of that comparison, pairwise, and
    ``queries`` counts those used; under ``empty_queries="zero"`` such a query counts 0 for
    every system, a tie, and stays in. Values in percent (``percent=True``) are compared in
    percent. As in :func:`compare`, a CMC curve is compared by each query's mean over its
    cut-offs (labelled ``"cmc@20 (mean over K = 1..20)"``, the value the curve's mean), an
    image-text metric per direction (``"i2t/hit_rate@1"``), and rsum is not compared. Both
    tests are tests of a mean: for a value that is another statistic of the per-query values
    (the median rank, ``average="micro"`` or ``"class"``), the value and its interval are the
    metric's, and the difference and the test are the per-query values' mean (the footnote
    says so). :func:`compare`, whose paired bootstrap can resample any statistic, compares the
    statistic itself.

    Args:
        *metrics: two or more metric objects, one per system, after ``update()``.
        baseline: the system the others are compared with: its index in ``metrics`` (0, the
            first, by default) or its name in ``names``.
        names: one name per system; default ``"system 0"``, ``"system 1"``, ...
        test: ``"t-test"`` or ``"randomization"``.
        correction: ``"holm"``, ``"bonferroni"``, ``"benjamini-hochberg"`` or ``"none"``.
        family: ``"all"`` (every comparison of the call) or ``"measure"``.
        level: of the intervals; a corrected p-value below 1 - ``level`` is significant.
        num_resamples: bootstrap resamples of the intervals and sign flips of the
            randomization test.
        seed: seed of both.

    Returns:
        A :class:`SystemComparison`: print it, or ``.to_markdown()``, ``.to_latex()``,
        ``.to_dataframe()``, ``.as_dict()``.

    Example:
        >>> import torch, retrieval_metrics as rm
        >>> gen = torch.Generator().manual_seed(0)
        >>> labels = torch.arange(200) % 20
        >>> systems = []
        >>> for noise in (1.0, 0.5, 1.0):
        ...     m = rm.RetrievalMetrics(["hit_rate@1", "map@r"])
        ...     noisy = torch.eye(20)[labels] + noise * torch.randn(200, 20, generator=gen)
        ...     m.update(noisy, labels)
        ...     systems.append(m)
        >>> result = rm.compare_systems(*systems, names=["base", "better", "same"])
        >>> result.comparisons  # 2 systems x 2 measures
        4
        >>> better, same = result["map@r", "better"], result["map@r", "same"]
        >>> better["significant"], same["significant"]
        (True, False)
    """
    labels, base, test, correction = _checked(
        metrics, baseline, names, test, correction, family, (level, num_resamples, seed)
    )
    # the query fields of each metric's ranking, by direction (a chunked ranking: its queries)
    fields = [metric.ranking_fields() for metric in metrics]
    same_queries(fields, labels)
    specs = [M.parse_metric(name) for name in metrics[0].metric_names()]
    entries = [(f"{key}{spec.name}", spec) for key in fields[0] for spec in specs]
    keys = [key for key, _ in entries]
    rows = _rows(metrics, labels, base, entries, test, level, num_resamples, seed)
    tested = [row for row in rows if not row["is_baseline"]]
    _correct(tested, keys, correction, family, level)
    return SystemComparison(
        systems=labels,
        baseline=labels[base],
        measures=keys,
        rows=rows,
        test=test,
        correction=correction,
        family=family,
        comparisons=sum(not math.isnan(row["p_value"]) for row in tested),
        level=float(level),
        num_resamples=num_resamples,
        seed=seed,
    )


def _checked(
    metrics: Sequence[RetrievalMetricBase],
    baseline: int | str,
    names: Sequence[str] | None,
    test: str,
    correction: str,
    family: str,
    resampling: tuple[float, int, int],
) -> tuple[list[str], int, str, str]:
    """The systems' names, the baseline's index, the test and the correction as checked;
    refused, by argument, where the metrics cannot be compared (fewer than two, not metric
    objects, other measures or units) or an option is out of range. ``resampling``: ``level``,
    ``num_resamples``, ``seed``."""
    level, num_resamples, seed = resampling
    if len(metrics) == 1 and isinstance(metrics[0], list | tuple):
        raise ValueError(
            "compare_systems() takes the metric objects as arguments, one per system: "
            "compare_systems(*metrics), not compare_systems(metrics)"
        )
    if len(metrics) < 2:
        raise ValueError(
            "compare_systems() needs at least two metric objects (a baseline and a system to "
            f"compare with it), got {len(metrics)}"
        )
    for i, metric in enumerate(metrics):
        if not isinstance(metric, RetrievalMetricBase):
            raise ValueError(
                f"`metrics`: argument {i} is a {type(metric).__name__}; compare_systems() takes "
                "retrieval_metrics metric objects, one per system"
            )
    labels = system_names(names, len(metrics))
    base = baseline_index(baseline, labels)
    test = S.check_test(test, "test")
    correction = S.check_correction(correction, "correction")
    if family not in FAMILIES:
        raise ValueError(f"`family` must be one of {FAMILIES}, got {family!r}")
    if isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level < 1:
        raise ValueError(f"`level` must be between 0 and 1 (e.g. 0.95), got {level!r}")
    if isinstance(num_resamples, bool) or not isinstance(num_resamples, int) or num_resamples < 1:
        raise ValueError(f"`num_resamples` must be a positive int, got {num_resamples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"`seed` must be an int, got {seed!r}")
    for metric in metrics:
        metric.refuse_nonpositive("compare_systems()")
    measure_names = metrics[0].metric_names()
    for label, metric in zip(labels[1:], metrics[1:], strict=True):
        if metric.metric_names() != measure_names:
            raise ValueError(
                f"compare_systems() needs the same measures in every metric; {labels[0]!r} "
                f"reports {measure_names}, {label!r} {metric.metric_names()}"
            )
    same_options(metrics, labels)
    return labels, base, test, correction


def _computed(metric: RetrievalMetricBase, keys: list[str]) -> dict[str, Tensor]:
    """The metric's own values (``compute()``) by measure key, its ``prefix`` taken off."""
    values = metric.compute()
    if isinstance(values, Tensor):  # one measure: a tensor, not a dict
        return {keys[0]: values}
    prefix = getattr(metric, "prefix", "")
    return {name[len(prefix):]: value for name, value in values.items()}


def _rows(
    metrics: Sequence[RetrievalMetricBase],
    labels: list[str],
    base: int,
    entries: list[tuple[str, M.MetricSpec]],
    test: str,
    level: float,
    num_resamples: int,
    seed: int,
) -> list[dict[str, Any]]:
    """One row per measure and system: the metric's value, the bootstrap interval of its
    per-query values, and against the baseline the difference, the paired test's p-value and
    the wins, ties and losses (the corrected p-values are :func:`_correct`'s)."""
    keys = [key for key, _ in entries]
    per_query = [metric.per_query() for metric in metrics]
    computed = [_computed(metric, keys) for metric in metrics]
    options = metrics[0].measure_options  # (the same in every metric: same_options)
    resampling = (level, num_resamples, seed)
    rows: list[dict[str, Any]] = []
    for key, spec in entries:
        values, label = [], key
        for own in per_query:
            v = own[key].detach().to("cpu", torch.float64)
            if v.dim() > 1:
                label = f"{key} (mean over K = 1..{v.shape[1]})"
                v = v.mean(1)
            values.append(v)  # (per_query() is in the metric's unit: percent if it reports so)
        statistic = value_statistic(spec, options)
        reference = values[base]
        for i, (name, v) in enumerate(zip(labels, values, strict=True)):
            value = computed[i][key].detach().to("cpu", torch.float64)
            row: dict[str, Any] = {
                "measure": key,
                "label": label,
                "system": name,
                "is_baseline": i == base,
                "higher_is_better": bool(spec.higher_is_better),
                "value": float(value.mean()),  # a CMC curve: its mean over K
                "interval": _interval(metrics[i], key, spec, v, statistic, resampling),
                "difference": None, "p_value": None, "p_corrected": None,
                "significant": None, "wins": None, "ties": None, "losses": None,
                "queries": int((~torch.isnan(v)).sum()),
            }  # fmt: skip
            if i != base:
                both = ~(torch.isnan(v) | torch.isnan(reference))
                wins, ties, losses = S.wins_ties_losses(v, reference, spec.higher_is_better)
                row.update(
                    difference=float((v[both] - reference[both]).mean()) if both.any()
                    else math.nan,
                    p_value=S.paired_test(v, reference, test, num_resamples, seed),
                    wins=wins, ties=ties, losses=losses, queries=int(both.sum()),
                )  # fmt: skip
            rows.append(row)
    return rows


def _interval(
    metric: RetrievalMetricBase,
    key: str,
    spec: M.MetricSpec,
    values: Tensor,
    statistic: str,
    resampling: tuple[float, int, int],
) -> tuple[float, float]:
    """The bootstrap interval of a system's value, of the statistic it is (a median rank's
    median, a micro average's ratio of sums, a class average's mean of class means; the mean
    otherwise), from its per-query ``values`` (in the metric's unit, NaN: left out).
    ``resampling``: ``level``, ``num_resamples``, ``seed``."""
    level, num_resamples, seed = resampling
    direction = key[: len(key) - len(spec.name)]  # ("i2t/" of "i2t/recall@5/micro"; "" alone)
    denominator = classes = None
    if statistic == "micro":
        numerator, denominator = _micro_parts(metric, direction, spec)
        # each counted query's numerator, in the unit of the values (percent: times 100)
        scale = unit_scale(spec, metric.measure_options)
        values = torch.where(values.isnan(), math.nan, numerator.cpu().to(torch.float64) * scale)
    elif statistic == "class":
        classes = metric.ranking_fields()[direction].query_class
    return bootstrap_interval(values, level, num_resamples, seed, statistic,
                              denominator=denominator, classes=classes)  # fmt: skip


def _micro_parts(
    metric: RetrievalMetricBase, direction: str, spec: M.MetricSpec
) -> tuple[Tensor, Tensor]:
    """Each query's numerator and denominator of a micro average, unit-free, in the order of
    ``per_query()``'s values: those the ranking in chunks kept (a metric with many relevant
    items per query, whose whole rank table is never made; ``per_query()`` made them), else
    read off the rank table of the ``direction`` (its prefix, "" for one)."""
    chunked = getattr(metric, "_chunk_parts", None)
    if chunked is not None:
        _, numerator, denominator = chunked[0][spec.name]
        if numerator is not None and denominator is not None:
            return numerator, denominator
    return micro_parts(metric.rank_tables()[direction], spec, metric.measure_options)


def _correct(
    tested: list[dict[str, Any]], keys: list[str], correction: str, family: str, level: float
) -> None:
    """Fill each tested row's ``p_corrected`` and ``significant``: the p-values corrected
    together over the family (every comparison, or each measure's)."""
    groups = [tested] if family == "all" else [
        [row for row in tested if row["measure"] == key] for key in keys
    ]  # fmt: skip
    alpha = alpha_of(level)  # (1 - 0.95 in floats is 0.050000000000000044: not "below 0.05")
    for group in groups:
        adjusted = S.correct_p_values([row["p_value"] for row in group], correction).tolist()
        for row, q in zip(group, adjusted, strict=True):
            row["p_corrected"] = q
            row["significant"] = bool(q < alpha)  # NaN: False
