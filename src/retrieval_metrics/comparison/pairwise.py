"""``compare(a, b)``: is model A better than model B on the same queries? Metric by metric, a
paired test of the two metric objects' per-query values."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from retrieval_metrics.comparison.agreement import same_options, same_queries
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures.aggregation import (
    counted_values,
    micro_parts,
    unit_scale,
)
from retrieval_metrics.functional.measures.paired import Comparison, paired_comparison
from retrieval_metrics.functional.measures.stats import value_statistic
from retrieval_metrics.functional.table import RankTable
from retrieval_metrics.metrics.base import RetrievalMetricBase

__all__ = ["compare"]


def compare(
    first: RetrievalMetricBase,
    second: RetrievalMetricBase,
    level: float = 0.95,
    num_bootstrap: int = 10_000,
    seed: int = 0,
) -> dict[str, Comparison]:
    """Paired comparison, metric by metric, of two metric objects scored on the same queries.

    Each result has the two values, their difference (first - second), its interval at
    ``level`` and a p-value. The values are the measures' own, ``compute()``'s (on the queries
    both metrics count, which are the same queries wherever both count every query): the median
    rank's median, a micro average's sum of numerators over the sum of denominators, a class
    average's mean of class means, the mean otherwise. The difference, its interval and the
    test are of that same statistic: a seeded paired bootstrap resamples the queries, each
    with both systems' parts, and recomputes it on each side
    (:func:`~retrieval_metrics.functional.measures.paired.paired_comparison`).

    The p-value: the exact McNemar test where every per-query value is 0 or 1 (hit rates),
    judged on the values as fractions, so a metric in percent gets the same test; otherwise
    the paired bootstrap, whose p-value does not depend on the order of the queries. When no
    bootstrap resample is as extreme as the observed difference, the p-value is 0 and prints
    as ``p < 1/num_bootstrap`` (``p < 0.0001`` for 10,000 resamples). Where every resample gives
    the same difference (the same difference on every query), or the queries are so few that
    their 2^n swaps fit in the resamples (13 or fewer at 10,000), the bootstrap has nothing to
    test against and the p-value is the exact paired randomization (sign-flip) test's, as
    :func:`compare_systems` with ``test="randomization"`` computes it for a mean. With fewer
    than 2 queries nothing is tested: p is NaN (``test`` ``"none"``, printed ``p = n/a``).

    Give both metrics ``ids=`` (or the same update order) so that query i is the same query in
    both. Image-text metrics are compared per direction ("i2t/hit_rate@1", ...); rsum, a sum
    over both directions, has no per-query value and is not compared.

    A CMC curve is compared by its mean over its cut-offs, not by its last point: for
    ``cmc@20``, each query's mean of hit rate @1, @2, ..., @20 (the area under its curve divided
    by 20). The result stays under the key ``"cmc@20"``; its ``name``, which the printout starts
    with, reads ``"cmc@20 (mean over K = 1..20)"``. Compare ``hit_rate@20`` for the value at
    K = 20.

    :func:`compare_systems` differs in one respect: its tests (the t-test, the sign-flip test)
    are tests of a mean, so its difference and p-value are those of the per-query values'
    mean, also for the median rank and micro or class averages.

    Example:
        >>> import torch, retrieval_metrics as rm
        >>> labels = torch.arange(40) % 8
        >>> good, bad = rm.HitRateAtK(k=1), rm.HitRateAtK(k=1)
        >>> good.update(torch.eye(8)[labels] + 0.01 * torch.randn(40, 8), labels)
        >>> bad.update(torch.randn(40, 8), labels)
        >>> rm.compare(good, bad)["hit_rate@1"].difference > 0
        True
    """
    if not isinstance(first, RetrievalMetricBase) or not isinstance(second, RetrievalMetricBase):
        raise ValueError("`compare` takes two retrieval_metrics metric objects")
    for metric in (first, second):
        metric.refuse_nonpositive("compare()")
    names_a, names_b = first.metric_names(), second.metric_names()
    if names_a != names_b:
        raise ValueError(
            "compare() needs the same measures in both metrics; the first reports "
            f"{names_a}, the second {names_b}"
        )
    labels = ["the first", "the second"]
    same_options((first, second), labels)
    tables_a, tables_b = first.rank_tables(), second.rank_tables()
    same_queries([tables_a, tables_b], labels)
    # (the same options in both: same_options)
    options = first.measure_options
    out = {}
    for key in tables_a:
        table_a, table_b = tables_a[key], tables_b[key]
        for name in names_a:
            spec = M.parse_metric(name)
            label = f"{key}{spec.name}"
            statistic = value_statistic(spec, options)
            values = []
            for table in (table_a, table_b):
                # the queries compute() and per_query() count (aggregation's one rule), as
                # fractions: the test is chosen on them, whatever unit the value is shown in
                v = counted_values(M.per_query_values(table, spec, options=options), table, spec,
                                   options)
                if v.dim() > 1:
                    # a CMC curve, one column per K: compare its mean over K (the area under
                    # it), and say so, since "cmc@20: 0.61 vs 0.55" reads like a hit rate @20
                    label = f"{key}{spec.name} (mean over K = 1..{v.shape[1]})"
                    v = v.mean(1)
                values.append(v)
            denominators, classes = None, None
            if statistic == "micro":
                # each query's numerator (NaN where the value leaves the query out) and
                # denominator: the micro average is their sums' ratio, not a mean of values
                parts = [micro_parts(t, spec, options) for t in (table_a, table_b)]
                values = [torch.where(v.isnan(), math.nan, num)
                          for v, (num, _) in zip(values, parts, strict=True)]  # fmt: skip
                denominators = (parts[0][1], parts[1][1])
            elif statistic == "class":
                classes = _shared_classes(table_a, table_b, label)
            out[f"{key}{spec.name}"] = paired_comparison(
                label, values[0], values[1], level, num_bootstrap, seed, statistic,
                denominators=denominators, classes=classes, scale=unit_scale(spec, options),
            )
    return out


def _shared_classes(first: RankTable, second: RankTable, label: str) -> Tensor:
    """The queries' classes, the same in both tables, for a class average (each class's mean,
    then their mean): refused where they differ, since the classes of one system would then
    average the other's values."""
    classes = first.query_class
    if classes is None or second.query_class is None:
        raise ValueError(f'{label}: average="class" needs the queries\' labels in both metrics')
    if classes.shape != second.query_class.shape or not bool(
        (classes.cpu() == second.query_class.cpu()).all()
    ):
        raise ValueError(
            f'{label}: the two metrics give the same queries other labels, and average="class" '
            "averages over the classes of the queries: update both with the same labels"
        )
    return classes
