"""``compare(a, b)``: is model A better than model B on the same queries?
``compare_systems(*metrics, baseline=...)``: which of several systems differ from a baseline,
with p-values corrected for the multiple comparisons?"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.comparison_text import (
    CORRECTION_TEXT,
    TEST_TEXT,
    baseline_index,
    latex,
    markdown_cell,
    number,
    p_text,
    percent_text,
    signed,
    system_names,
)
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures import significance as S
from retrieval_metrics.functional.measures.aggregation import counted_values
from retrieval_metrics.functional.measures.stats import (
    Comparison,
    bootstrap_interval,
    paired_comparison,
)
from retrieval_metrics.metrics.base import RetrievalMetricBase

__all__ = ["FAMILIES", "SystemComparison", "compare", "compare_systems"]


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
    tables_a, tables_b = first.rank_tables(), second.rank_tables()
    if tables_a.keys() != tables_b.keys():
        raise ValueError(
            f"the two metrics rank in different directions: {list(tables_a)} and {list(tables_b)}"
        )
    out = {}
    for key in tables_a:
        table_a, table_b = tables_a[key], tables_b[key]
        if table_a.num_queries != table_b.num_queries or not bool(
            (table_a.num_relevant == table_b.num_relevant).all()
        ):
            raise ValueError(
                "the two metrics were not scored on the same queries (different numbers of "
                f"queries or of relevant items per query{' in ' + key.rstrip('/') if key else ''})"
            )
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
                values.append(v)
            out[f"{key}{spec.name}"] = paired_comparison(
                label, values[0], values[1], level, num_bootstrap, seed
            )
    return out


# ---------------------------------------------------------------------------- several systems

#: What ``compare_systems(family=...)`` corrects together: every comparison of the call, or
#: the comparisons of each measure apart.
FAMILIES = ("all", "measure")


@dataclass
class SystemComparison:
    """Several systems against a baseline, measure by measure (:func:`compare_systems`).

    ``rows`` holds one dict per measure and system, measures in the metrics' order and systems
    in the order given: ``measure`` (its key, ``"map@r"``, ``"i2t/hit_rate@1"``), ``label``
    (the measure as printed), ``system``, ``is_baseline``, ``higher_is_better``, ``value``,
    ``interval``, ``queries``, and for every system but the baseline ``difference``,
    ``p_value``, ``p_corrected``, ``significant``, ``wins``, ``ties``, ``losses`` (``None`` in the
    baseline's rows). ``comparisons`` is the size of the family the correction saw (the
    comparisons with a p-value; with ``family="measure"``, all of them over the measures).

    Read a row with ``result[measure, system]``, a measure's rows with ``result[measure]``;
    print it (an aligned table), or write it with :meth:`to_markdown`, :meth:`to_latex`,
    :meth:`to_dataframe` or :meth:`as_dict`.
    """

    systems: list[str]
    baseline: str
    measures: list[str]
    rows: list[dict[str, Any]]
    test: str
    correction: str
    family: str
    comparisons: int
    level: float
    num_resamples: int
    seed: int

    # ------------------------------------------------------------------ reading

    def __getitem__(self, key: str | tuple[str, str]) -> Any:
        if isinstance(key, tuple):
            measure, system = key
            for row in self.rows:
                if row["measure"] == measure and row["system"] == system:
                    return dict(row)
            raise KeyError(
                f"no row for measure {measure!r} and system {system!r}; measures "
                f"{self.measures}, systems {self.systems}"
            )
        if key not in self.measures:
            raise KeyError(f"no measure {key!r}; the measures are {self.measures}")
        return {row["system"]: dict(row) for row in self.rows if row["measure"] == key}

    @property
    def alpha(self) -> float:
        """The level a corrected p-value is called significant below: 1 - ``level``."""
        return 1.0 - self.level

    def description(self) -> str:
        """One sentence: the test, the baseline, the correction and its family."""
        test = TEST_TEXT[self.test]
        if self.test == "randomization":
            test += (
                f" ({self.num_resamples} random sign flips, seed {self.seed}; every sign flip "
                f"when 2^n <= {self.num_resamples})"
            )
        others, measures = len(self.systems) - 1, len(self.measures)
        if self.correction == "none":
            fix = "p-values not corrected for multiple comparisons"
        elif self.family == "all":
            fix = (
                f"p-values corrected by {CORRECTION_TEXT[self.correction]} over the "
                f"{self.comparisons} comparisons ({others} "
                f"{'system' if others == 1 else 'systems'} x {measures} "
                f"{'measure' if measures == 1 else 'measures'})"
            )
        else:
            fix = (
                f"p-values corrected by {CORRECTION_TEXT[self.correction]} within each "
                f"measure, over its {others} {'comparison' if others == 1 else 'comparisons'}"
            )
        return f"Two-sided {test} of each system against the baseline {self.baseline!r}; {fix}."

    # ------------------------------------------------------------------ tables

    def _cells(self, row: dict[str, Any]) -> list[str]:
        lo, hi = row["interval"]
        cells = [row["system"], number(row["value"]), f"[{number(lo)}, {number(hi)}]"]
        if row["is_baseline"]:
            cells += ["baseline", ""] + ([""] if self.correction != "none" else []) + [""]
        else:
            star = "*" if row["significant"] else ""
            cells += [signed(row["difference"]), p_text(row["p_value"])]
            if self.correction != "none":
                cells.append(p_text(row["p_corrected"]) + star)
            else:
                cells[-1] += star
            cells.append(f"{row['wins']}/{row['ties']}/{row['losses']}")
        cells.append(str(row["queries"]))
        return cells

    def _head(self) -> list[str]:
        head = ["measure", "system", "value", f"{percent_text(self.level)} interval", "difference",
                "p"]  # fmt: skip
        if self.correction != "none":
            head.append(f"p ({CORRECTION_TEXT[self.correction]})")
        return [*head, "wins/ties/losses", "queries"]

    def _footnote(self) -> str:
        which = "p" if self.correction == "none" else "corrected p"
        return (
            f"* {which} < {self.alpha:.6g} (1 - level); difference: system - baseline, "
            "mean over the queries both count; wins/ties/losses: queries where the system is "
            "better than, equal to (within 1e-12), worse than the baseline"
        )

    def _table(self) -> list[list[str]]:
        lines, previous = [], None
        for row in self.rows:
            label = row["label"] if row["measure"] != previous else ""
            previous = row["measure"]
            lines.append([label, *self._cells(row)])
        return lines

    def __str__(self) -> str:
        head, lines = self._head(), self._table()
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]

        def joined(cells: list[str]) -> str:
            return "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        return "\n".join(
            [self.description(), joined(head), *(joined(line) for line in lines),
             self._footnote()]
        )  # fmt: skip

    __repr__ = __str__

    def to_markdown(self) -> str:
        """The table as Markdown (GitHub's pipe table), after the sentence that names the test
        and the correction, and before the footnote.

        Example:
            >>> import torch, retrieval_metrics as rm
            >>> labels = torch.arange(40) % 8
            >>> a, b = rm.MAPAtR(), rm.MAPAtR()
            >>> a.update(torch.eye(8)[labels], labels)
            >>> b.update(torch.eye(8)[labels], labels)
            >>> print(rm.compare_systems(a, b, names=["a", "b"]).to_markdown().splitlines()[2])
            | measure | system | value | 95% interval | difference | p | p (Holm) | ...
        """
        head, lines = self._head(), self._table()
        rows = [
            "| " + " | ".join(markdown_cell(c) for c in cells) + " |" for cells in [head, *lines]
        ]
        rule = "|" + "|".join("---" if i < 2 else "--:" for i in range(len(head))) + "|"
        return "\n".join(
            [self.description(), "", rows[0], rule, *rows[1:], "", self._footnote(), ""]
        )

    def to_latex(self) -> str:
        """The table as a LaTeX ``tabular`` (booktabs rules: ``\\usepackage{booktabs}``), the
        sentence naming the test and the correction and the footnote as comments above it.

        Example:
            >>> import torch, retrieval_metrics as rm
            >>> labels = torch.arange(40) % 8
            >>> a, b = rm.MAPAtR(), rm.MAPAtR()
            >>> a.update(torch.eye(8)[labels], labels)
            >>> b.update(torch.eye(8)[labels], labels)
            >>> print(rm.compare_systems(a, b).to_latex().splitlines()[2])
            \\begin{tabular}{llrlrrrrr}
        """
        head, lines = self._head(), self._table()
        spec = "ll" + "".join("l" if "interval" in h else "r" for h in head[2:])
        out = [f"% {self.description()}", f"% {self._footnote()}", f"\\begin{{tabular}}{{{spec}}}",
               "\\toprule", " & ".join(latex(h) for h in head) + " \\\\", "\\midrule"]  # fmt: skip
        for i, cells in enumerate(lines):
            if i and cells[0]:
                out.append("\\midrule")
            out.append(" & ".join(latex(c) for c in cells) + " \\\\")
        out += ["\\bottomrule", "\\end{tabular}", ""]
        return "\n".join(out)

    def as_dict(self) -> dict[str, Any]:
        """Every number as plain Python values (lists, floats, ints, bools, None): the settings,
        and ``"measures"``: measure -> ``{"label", "higher_is_better", "systems"}``, system ->
        its row (``None`` for the baseline's difference, p-values, wins, ties and losses; NaN
        for a p-value that could not be computed)."""
        measures: dict[str, Any] = {}
        for row in self.rows:
            entry = measures.setdefault(
                row["measure"],
                {"label": row["label"], "higher_is_better": row["higher_is_better"],
                 "systems": {}},
            )  # fmt: skip
            entry["systems"][row["system"]] = {
                "baseline": row["is_baseline"],
                "value": row["value"],
                "interval": list(row["interval"]),
                "difference": row["difference"],
                "p_value": row["p_value"],
                "p_corrected": row["p_corrected"],
                "significant": row["significant"],
                "wins": row["wins"],
                "ties": row["ties"],
                "losses": row["losses"],
                "queries": row["queries"],
            }
        return {
            "test": self.test,
            "correction": self.correction,
            "family": self.family,
            "comparisons": self.comparisons,
            "level": self.level,
            "alpha": self.alpha,
            "num_resamples": self.num_resamples,
            "seed": self.seed,
            "baseline": self.baseline,
            "systems": list(self.systems),
            "description": self.description(),
            "measures": measures,
        }

    def to_dataframe(self) -> Any:
        """One pandas row per measure and system: ``measure``, ``system``, ``baseline``,
        ``value``, ``interval_low``, ``interval_high``, ``difference``, ``p_value``,
        ``p_corrected``, ``significant``, ``wins``, ``ties``, ``losses``, ``queries`` (pandas is
        imported here, and only here: ``pip install pandas``)."""
        try:
            import pandas as pd
        except ImportError as err:
            raise ImportError(
                "SystemComparison.to_dataframe() needs pandas, which is not installed: "
                'pip install "retrieval-metrics[pandas]" (or pandas; or use as_dict(), '
                "to_markdown() or to_latex())"
            ) from err
        records = []
        for row in self.rows:
            lo, hi = row["interval"]
            records.append(
                {
                    "measure": row["measure"], "system": row["system"],
                    "baseline": row["is_baseline"], "value": row["value"],
                    "interval_low": lo, "interval_high": hi, "difference": row["difference"],
                    "p_value": row["p_value"], "p_corrected": row["p_corrected"],
                    "significant": row["significant"], "wins": row["wins"],
                    "ties": row["ties"], "losses": row["losses"], "queries": row["queries"],
                }
            )  # fmt: skip
        return pd.DataFrame.from_records(records)


def _computed(metric: RetrievalMetricBase, keys: list[str]) -> dict[str, Tensor]:
    """The metric's own values (``compute()``) by measure key, its ``prefix`` taken off."""
    values = metric.compute()
    if isinstance(values, Tensor):  # one measure: a tensor, not a dict
        return {keys[0]: values}
    prefix = getattr(metric, "prefix", "")
    return {name[len(prefix):]: value for name, value in values.items()}


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
    * ``interval``: a seeded percentile bootstrap interval at ``level`` of the mean over
      queries (the median for ``median_rank``), :func:`~retrieval_metrics.functional.measures.
      stats.bootstrap_interval` with ``num_resamples`` resamples;
    * and against the baseline: ``difference``, the mean over the queries both count of
      (system - baseline); ``p_value``, two-sided, of the paired ``test`` on those queries
      (``"t-test"``: the paired t-test, ``scipy.stats.ttest_rel``; ``"randomization"``:
      Fisher's sign-flip test with ``num_resamples`` seeded resamples, exact for 2^n <=
      ``num_resamples``); ``p_corrected``; ``significant`` (corrected p < 1 - ``level``);
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
    image-text metric per direction (``"i2t/hit_rate@1"``), and rsum is not compared. For a
    measure averaged otherwise than over queries (``average="micro"`` or ``"class"``), the value
    is the metric's and the test and difference are on the per-query values.

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
    percent = [bool(getattr(metric, "percent", False)) for metric in metrics]
    if len(set(percent)) > 1:
        raise ValueError(
            "compare_systems() needs every metric in the same unit: `percent` is "
            f"{dict(zip(labels, percent, strict=True))}"
        )
    # the query fields of each metric's ranking, by direction (a chunked ranking: its queries)
    fields = [metric.ranking_fields() for metric in metrics]
    for label, own in zip(labels[1:], fields[1:], strict=True):
        if list(own) != list(fields[0]):
            raise ValueError(
                f"the metrics rank in different directions: {labels[0]!r} in "
                f"{[k.rstrip('/') or 'one' for k in fields[0]]}, {label!r} in "
                f"{[k.rstrip('/') or 'one' for k in own]}"
            )
        for key, table in own.items():
            first = fields[0][key]
            if table.num_queries != first.num_queries or not bool(
                (table.num_relevant.cpu() == first.num_relevant.cpu()).all()
            ):
                where = f" in {key.rstrip('/')}" if key else ""
                raise ValueError(
                    f"{labels[0]!r} and {label!r} were not scored on the same queries "
                    f"({first.num_queries} and {table.num_queries} queries{where}, or different "
                    "numbers of relevant items per query); update every metric with the same "
                    "queries, with ids= or in the same order"
                )
    specs = [M.parse_metric(name) for name in measure_names]
    entries = [(f"{key}{spec.name}", spec) for key in fields[0] for spec in specs]
    keys = [key for key, _ in entries]
    per_query = [metric.per_query() for metric in metrics]
    computed = [_computed(metric, keys) for metric in metrics]
    rows: list[dict[str, Any]] = []
    for key, spec in entries:
        values, label = [], key
        for metric, own in zip(metrics, per_query, strict=True):
            v = own[key].detach().to("cpu", torch.float64)
            if v.dim() > 1:
                label = f"{key} (mean over K = 1..{v.shape[1]})"
                v = v.mean(1)
            values.append(v * (100.0 if metric.percent and spec.higher_is_better else 1.0))
        statistic = "median" if spec.base == "median_rank" else "mean"
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
                "interval": bootstrap_interval(v, level, num_resamples, seed, statistic),
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
    tested = [row for row in rows if not row["is_baseline"]]
    groups = [tested] if family == "all" else [
        [row for row in tested if row["measure"] == key] for key in keys
    ]  # fmt: skip
    for group in groups:
        adjusted = S.correct_p_values([row["p_value"] for row in group], correction).tolist()
        for row, q in zip(group, adjusted, strict=True):
            row["p_corrected"] = q
            row["significant"] = bool(q < 1.0 - level)  # NaN: False
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
