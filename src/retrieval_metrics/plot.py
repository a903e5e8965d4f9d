"""Plots: the hit rate vs K (CMC) curve beside its chance curve, and ``metric.plot()``.

``metric.plot(val=None, ax=None)`` follows torchmetrics' convention (returns ``(fig, ax)``, draws
into ``ax`` when one is given, plots ``compute()`` when no value is given, a list of values as a
series over steps). A metric that reports a curve (``CMC``, ``HitRateAtK`` with several ``k``, a
``RetrievalMetrics`` with ``cmc@K`` or several ``hit_rate@K``) is drawn as hit rate against K,
with the curve a uniformly random ranking of the same gallery would give beside it (image-text:
one curve per direction). Everything else is drawn by torchmetrics' own plot.

The command line's ``--plot`` draws one curve per run on one axis (:func:`plot_curves`): hit rate
vs K, or for queries and a corpus judged by qrels recall vs K (:func:`measure_curve`).
matplotlib is an extra: ``pip install "retrieval-metrics[plot]"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures.options import (
    DEFAULT_EMPTY_QUERIES,
    DEFAULT_PERCENT,
    DEFAULT_TIES,
)
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = [
    "Curve",
    "hit_rate_curve",
    "measure_curve",
    "plot_curves",
    "plot_metric",
    "save_curves",
]

_MISSING = "plots need matplotlib: pip install matplotlib (or retrieval-metrics[plot])"
_FIGSIZE = (7.6, 4.4)  # inches: wider than matplotlib's 6.4 for the legend beside the axes


#: The y-axis label of each measure a curve may hold.
_AXIS_LABELS = {"hit_rate": "hit rate @K (CMC)", "recall": "recall @K"}


@dataclass
class Curve:
    """A measure at each cut-off K (hit rate unless ``measure`` says otherwise), with the chance
    level at the same K (``None`` if unknown)."""

    k: list[int]
    values: list[float]
    chance: list[float] | None = None
    label: str = ""
    percent: bool = False
    measure: str = "hit_rate"

    def as_dict(self) -> dict[str, Any]:
        return {"k": self.k, self.measure: self.values, "chance": self.chance}


def _known_gallery(table: RankTable) -> bool:
    """Whether a uniformly random ranking of the table's galleries is defined, by summary()'s
    rule: every gallery known, and no relevant item outside it (a ranked list of an unknown
    collection; a judged document the corpus lacks)."""
    return (
        table.num_queries > 0
        and bool((table.gallery_size != UNBOUNDED).all())
        and not bool(table.beyond_gallery.any())
    )


def _log_ks(max_k: int, points: int = 40) -> list[int]:
    """About ``points`` cut-offs from 1 to ``max_k``, evenly spaced on a log axis (every K at
    the low end, where they are dense)."""
    ks = {*range(1, min(max_k, 10) + 1), max_k}
    for i in range(points):
        ks.add(round(max_k ** (i / (points - 1))))
    return sorted(ks)


def hit_rate_curve(
    table: RankTable,
    max_k: int | None = None,
    *,
    ks: Sequence[int] | None = None,
    ties: str = DEFAULT_TIES,
    empty_queries: str = DEFAULT_EMPTY_QUERIES,
    percent: bool = DEFAULT_PERCENT,
    label: str = "",
) -> Curve:
    """Hit rate @K (the CMC curve) of a rank table for K = 1..``max_k``, or at the cut-offs ``ks``.

    ``max_k`` defaults to the largest gallery, capped at 100. The chance curve is the same measure
    on :func:`~retrieval_metrics.functional.chance_table` (a uniformly random ranking).
    """
    if ks is None:
        if max_k is None:
            sizes = table.gallery_size[table.gallery_size != UNBOUNDED]
            max_k = min(100, int(sizes.max())) if sizes.numel() else 100
        ks = list(range(1, max(1, int(max_k)) + 1))
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"cut-offs must be positive ints, got {ks}")
    name = f"cmc@{ks[-1]}"
    options = M.MeasureOptions(ties=ties, empty_queries=empty_queries, percent=percent)
    index = torch.tensor([k - 1 for k in ks])
    curve = M.retrieval_measures(table, [name], options=options)[name]
    chance = None
    if _known_gallery(table):
        # a uniformly random ranking's expectation: the expected rule by definition
        chance_curve = M.retrieval_measures(
            M.chance_table(table), [name], options=options.replace(ties="expected")
        )[name]
        chance = [float(v) for v in chance_curve[index]]
    return Curve(
        k=ks,
        values=[float(v) for v in curve[index]],
        chance=chance,
        label=label,
        percent=percent,
    )


def measure_curve(
    table: RankTable,
    measure: str = "recall",
    max_k: int | None = None,
    *,
    ks: Sequence[int] | None = None,
    options: M.MeasureOptions | None = None,
    label: str = "",
) -> Curve:
    """A measure with a cut-off (``"recall"``, ``"hit_rate"``, ``"precision"``, ...) at K = 1 ..
    ``max_k`` (about 40 Ks spaced on a log axis), or at the cut-offs ``ks``.

    The values are ``retrieval_measures(table, [f"{measure}@{k}", ...], options=options)``: a
    metric's own ``measure_options`` give the values its ``compute()`` reports at those K.
    ``max_k`` defaults to the largest gallery, capped at 100. The chance level is the measure under
    a uniformly random ranking of the same galleries (as ``summary()`` gives it), ``None`` when
    that is not defined: ranked lists of an unknown collection, or a judged document the corpus
    lacks (the random ranking could not retrieve it either, but the level would be another
    number than summary()'s).
    """
    options = options if options is not None else M.MeasureOptions()
    if ks is None:
        if max_k is None:
            sizes = table.gallery_size[table.gallery_size != UNBOUNDED]
            max_k = min(100, int(sizes.max())) if sizes.numel() else 100
        ks = _log_ks(max(1, int(max_k)))
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"cut-offs must be positive ints, got {ks}")
    names = [f"{measure}@{k}" for k in ks]
    for name in names:
        if M.parse_metric(name).k is None:  # pragma: no cover - a measure without a cut-off
            raise ValueError(f"{measure!r} has no cut-off to plot against K")
    values = M.retrieval_measures(table, names, options=options)
    chance = None
    if _known_gallery(table):
        levels = M.chance_measures(table, names, options)
        chance = [float(levels[n]) for n in names]
    return Curve(
        k=ks,
        values=[float(values[n]) for n in names],
        chance=chance,
        label=label,
        percent=bool(options.percent),
        measure=measure,
    )


def _mean_curve(curves: Sequence[Curve]) -> Curve:
    """The mean of curves at the same Ks (one curve: itself); its chance where every curve has
    one."""
    if len(curves) == 1:
        return curves[0]

    def mean(rows: Sequence[list[float]]) -> list[float]:
        return [sum(column) / len(rows) for column in zip(*rows, strict=True)]

    chances = [c.chance for c in curves]
    return replace(
        curves[0],
        values=mean([c.values for c in curves]),
        chance=None if any(c is None for c in chances) else mean(chances),  # type: ignore[arg-type]
    )


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ModuleNotFoundError(_MISSING) from err
    return plt


def plot_curves(
    curves: Sequence[Curve], ax: Any = None, title: str | None = None
) -> tuple[Any, Any]:
    """Draw each curve's measure (hit rate, recall) vs K, its chance curve dashed in the same
    colour, on one axis.

    K is on a log axis, ticked at the Ks (at 1, 2, 5, 10, ... for a long CMC curve). The legend
    sits outside the axes, to their right, so that it hides no curve; a figure made here has
    constrained layout to keep it in the image. Drawing into your own ``ax``, give its figure
    ``layout="constrained"`` or save with ``bbox_inches="tight"``.

    Returns ``(fig, ax)`` (``fig`` is ``None`` when ``ax`` was given, as in torchmetrics).
    """
    if not curves:
        raise ValueError("`curves` is empty: nothing to plot")
    if ax is None:
        # constrained layout keeps the legend, drawn beside the axes, inside the saved image
        fig, ax = _pyplot().subplots(figsize=_FIGSIZE, layout="constrained")
    else:
        fig = None
    percent = any(c.percent for c in curves)
    chances = {(tuple(c.k), tuple(c.chance)) for c in curves if c.chance is not None}
    shared = len(curves) > 1 and len(chances) == 1 and all(c.chance is not None for c in curves)
    for i, c in enumerate(curves):
        label = c.label or _AXIS_LABELS.get(c.measure, f"{c.measure} @K")
        marker = "o" if len(c.k) <= 12 else None
        (line,) = ax.plot(c.k, c.values, marker=marker, label=label, color=f"C{i}")
        if shared and c.chance is not None:
            if i == 0:  # one gallery for every run: one chance curve
                ax.plot(c.k, c.chance, linestyle="--", color="0.4", label="chance")
        elif c.chance is not None:
            ax.plot(
                c.k,
                c.chance,
                linestyle="--",
                color=line.get_color(),
                alpha=0.8,
                label=f"{label}: chance",
            )
    # K on a log axis whatever its range (hit rate grows about with log K, and every curve
    # metric then looks the same), with integer ticks: the Ks themselves when there are few.
    ax.set_xscale("log")
    ticks = _k_ticks(sorted({k for c in curves for k in c.k}))
    ax.set_xticks(ticks, labels=[str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("K")
    measures = {c.measure for c in curves}
    (first,) = measures if len(measures) == 1 else ("",)
    axis = _AXIS_LABELS.get(first, f"{first} @K") if first else "value @K"
    ax.set_ylabel(axis + (" %" if percent else ""))
    top = 100.0 if percent else 1.0
    ax.set_ylim(-0.02 * top, 1.02 * top)
    ax.grid(True, alpha=0.4)
    # Beside the axes, not in them: inside, every corner can hide a curve (chance rises to the
    # lower right on a small gallery, a good model's curve fills the upper left).
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize="small")
    if title:
        ax.set_title(title)
    return fig, ax


def plot_values(
    rows: Sequence[Mapping[str, Any]], ax: Any = None, title: str | None = None
) -> tuple[Any, Any]:
    """Single values (a metric that reports no curve) as labelled horizontal bars, each with its
    value written beside it and, where ``rows`` carry them (``summary().rows``), its interval as
    an error bar and its chance level as a black tick: a reader sees which number is which.

    ``rows``: mappings with ``name`` and ``value``, optionally ``interval`` and ``chance``.
    Returns ``(fig, ax)`` (``fig`` is ``None`` when ``ax`` was given, as in torchmetrics).
    """
    if not rows:
        raise ValueError("nothing to plot")
    if ax is None:
        fig, ax = _pyplot().subplots(
            figsize=(_FIGSIZE[0], 1.2 + 0.45 * len(rows)), layout="constrained"
        )
    else:
        fig = None
    values = [float(row["value"]) for row in rows]
    positions = list(range(len(rows)))
    intervals = [row.get("interval") for row in rows]
    errors = None
    if all(i is not None for i in intervals):
        errors = [
            [max(0.0, v - float(i[0])) for v, i in zip(values, intervals, strict=True)],
            [max(0.0, float(i[1]) - v) for v, i in zip(values, intervals, strict=True)],
        ]
    ax.barh(positions, values, xerr=errors, color="C0", alpha=0.8, capsize=3,
            label=None if errors is None else "value, interval")
    chance = [(p, float(row["chance"])) for p, row in zip(positions, rows, strict=True)
              if row.get("chance") is not None]
    if chance:
        ax.plot([c for _, c in chance], [p for p, _ in chance], linestyle="none", marker="|",
                markersize=18, markeredgewidth=2, color="k", label="chance")
    for p, v in zip(positions, values, strict=True):
        ax.annotate(f"{v:.4g}", (v, p), xytext=(4, 6), textcoords="offset points",
                    fontsize="small", va="bottom")
    ax.set_yticks(positions, labels=[str(row["name"]) for row in rows])
    ax.invert_yaxis()  # the first name on top, as the metric lists them
    ax.set_xlabel("value")
    ax.grid(True, axis="x", alpha=0.4)
    if errors is not None or chance:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                  fontsize="small")
    if title:
        ax.set_title(title)
    return fig, ax


def _single_values(val: Any, prefix: str) -> list[dict[str, Any]] | None:
    """``[{name, value}]`` for a 0-d tensor or a dict of them, else None."""
    if isinstance(val, Tensor) and val.dim() == 0:
        return [{"name": "value", "value": float(val)}]
    if isinstance(val, Mapping) and val and all(
        isinstance(v, Tensor) and v.dim() == 0 for v in val.values()
    ):
        return [{"name": _strip(str(k), prefix), "value": float(v)} for k, v in val.items()]
    return None


def _k_ticks(ks: list[int]) -> list[int]:
    """Up to 8 Ks as they are; more (a CMC curve), 1, 2, 5, 10, 20, ... and the largest K."""
    if len(ks) <= 8:
        return ks
    largest = ks[-1]
    ticks = [t for t in _log_ticks(largest) if ks[0] <= t <= largest]
    return ticks if ticks and ticks[-1] == largest else [*ticks, largest]


def _log_ticks(largest: int) -> list[int]:
    ticks, base = [], 1
    while base <= largest:
        ticks += [base, 2 * base, 5 * base]
        base *= 10
    return ticks


def save_curves(curves: Sequence[Curve], path: Any, title: str | None = None) -> None:
    """Write :func:`plot_curves` to an image file (PNG, SVG, PDF: by the file's extension)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ModuleNotFoundError(_MISSING) from err
    # no pyplot: works without a display, leaves no figure open
    fig = Figure(figsize=_FIGSIZE, layout="constrained")
    ax = fig.add_subplot()
    plot_curves(curves, ax=ax, title=title)
    fig.savefig(path, dpi=120)


def _strip(key: str, prefix: str) -> str:
    return key[len(prefix) :] if prefix and key.startswith(prefix) else key


def _curve_of_value(value: Any, prefix: str) -> tuple[list[int], list[float]] | None:
    """(ks, hit rates) when ``value`` is a CMC vector or a dict of hit_rate@K values, else None."""
    if isinstance(value, Tensor) and value.dim() == 1 and value.numel() > 1:
        return list(range(1, value.numel() + 1)), [float(v) for v in value]
    if isinstance(value, Mapping) and value:
        points = []
        for key, v in value.items():
            try:
                spec = M.parse_metric(_strip(str(key), prefix))
            except ValueError:
                return None
            if spec.base == "cmc" and isinstance(v, Tensor) and len(value) == 1:
                return _curve_of_value(v, prefix)
            if spec.base != "hit_rate" or not isinstance(v, Tensor) or v.numel() != 1:
                return None
            points.append((int(spec.k), float(v)))
        if len(points) < 2:
            return None
        points.sort()
        return [k for k, _ in points], [v for _, v in points]
    return None


def plot_metric(metric: Any, val: Any = None, ax: Any = None) -> tuple[Any, Any]:
    """``metric.plot(val, ax)``: the curve (with chance) for curve metrics, else torchmetrics'."""
    prefix = getattr(metric, "prefix", "")
    percent = bool(getattr(metric, "percent", False))
    name = type(metric).__name__
    if val is None and _reports_curve(metric):
        specs = [M.parse_metric(n) for n in metric.metric_names()]
        # every K the metric reports a hit rate at: its CMC curve's and its hit_rate@K's
        ks = sorted(
            {k for s in specs if s.base == "cmc" for k in range(1, int(s.k) + 1)}
            | {int(s.k) for s in specs if s.base == "hit_rate"}
        )
        # compute()'s values at each K: the metric's own measure options (its average, its
        # ties...), and the mean over its folds where it has folds, as compute() takes it
        folds = metric.fold_tables() if hasattr(metric, "fold_tables") else [metric.rank_tables()]
        curves = [
            _mean_curve([
                measure_curve(
                    tables[key], "hit_rate", ks=ks, options=metric.measure_options,
                    label=f"{name} {key.rstrip('/')}" if key else name,
                )
                for tables in folds
            ])
            for key in folds[0]
        ]
        return plot_curves(curves, ax=ax)
    if val is not None:
        single = _curve_of_value(val, prefix)
        if single is not None:
            ks, values = single
            return plot_curves([Curve(ks, values, None, name, percent)], ax=ax)
        if isinstance(val, Sequence) and not isinstance(val, (str, Tensor)) and val:
            series = [_curve_of_value(v, prefix) for v in val]
            if all(s is not None for s in series):
                return plot_curves(
                    [
                        Curve(ks, values, None, f"{name} step {i}", percent)
                        for i, (ks, values) in enumerate(series)  # type: ignore[misc]
                    ],
                    ax=ax,
                )
    _pyplot()  # a clear message when matplotlib is missing
    if val is None and hasattr(metric, "summary"):
        # values with nothing to draw them against: labelled bars, intervals and chance levels
        rows = [
            row for row in metric.summary().rows
            if isinstance(row["value"], Tensor) and row["value"].dim() == 0
        ]
        if rows:
            return plot_values(rows, ax=ax, title=name)
    values = _single_values(val, prefix)
    if values is not None:
        return plot_values(values, ax=ax, title=name)
    # torchmetrics' own drawing of a value (what its Metric.plot draws), through its public helper
    from torchmetrics.utilities.plot import plot_single_or_multi_val

    return plot_single_or_multi_val(
        val if val is not None else metric.compute(),
        ax=ax,
        higher_is_better=metric.higher_is_better,
        name=name,
        lower_bound=metric.plot_lower_bound,
        upper_bound=metric.plot_upper_bound,
        legend_name=getattr(metric, "plot_legend_name", None),
    )


def _reports_curve(metric: Any) -> bool:
    """True for metrics whose rank tables give a hit-rate curve (one per direction)."""
    if not hasattr(metric, "rank_tables"):
        return False
    specs = [M.parse_metric(n) for n in metric.metric_names()]
    return any(s.base == "cmc" for s in specs) or sum(s.base == "hit_rate" for s in specs) >= 2
