"""``compare(a, b)``: is model A better than model B on the same queries? Metric by metric, a
paired test of the two metric objects' per-query values."""

from __future__ import annotations

from retrieval_metrics.comparison.agreement import same_options, same_queries
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures.aggregation import counted_values
from retrieval_metrics.functional.measures.stats import Comparison, paired_comparison
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

    Hit rates use the exact McNemar test; every other metric a seeded paired bootstrap of the
    per-query difference. Each result has the difference (first - second), its interval at
    ``level`` and a p-value. Give both metrics ``ids=`` (or the same update order) so that query i
    is the same query in both. Image-text metrics are compared per direction ("i2t/hit_rate@1",
    ...); rsum, a sum over both directions, has no per-query value and is not compared.

    A CMC curve is compared by its mean over its cut-offs, not by its last point: for
    ``cmc@20``, each query's mean of hit rate @1, @2, ..., @20 (the area under its curve divided
    by 20). The result stays under the key ``"cmc@20"``; its ``name``, which the printout starts
    with, reads ``"cmc@20 (mean over K = 1..20)"``. Compare ``hit_rate@20`` for the value at
    K = 20. When no bootstrap resample is as extreme as the observed difference, the p-value is 0
    and prints as ``p < 1/num_bootstrap`` (``p < 0.0001`` for 10,000 resamples).

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
    out = {}
    for key in tables_a:
        table_a, table_b = tables_a[key], tables_b[key]
        for name in names_a:
            spec = M.parse_metric(name)
            values = []
            label = f"{key}{spec.name}"
            for metric, table in ((first, table_a), (second, table_b)):
                # the queries compute() and per_query() count (aggregation's one rule)
                options = metric.measure_options
                v = counted_values(M.per_query_values(table, spec, options=options), table, spec,
                                   options)
                if v.dim() > 1:
                    # a CMC curve, one column per K: compare its mean over K (the area under
                    # it), and say so, since "cmc@20: 0.61 vs 0.55" reads like a hit rate @20
                    label = f"{key}{spec.name} (mean over K = 1..{v.shape[1]})"
                    v = v.mean(1)
                values.append(metric.in_units(v, spec))
            out[f"{key}{spec.name}"] = paired_comparison(
                label, values[0], values[1], level, num_bootstrap, seed
            )
    return out
