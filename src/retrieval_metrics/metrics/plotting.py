"""``plot()`` of the metric classes: the :class:`Plotted` mixin."""

from __future__ import annotations

from typing import Any

__all__ = ["Plotted"]


class Plotted:
    """``plot()`` for the metric classes, in torchmetrics' convention (``(fig, ax)``): hit rate
    vs K with its chance curve for metrics that report a curve (CMC, several hit rates), else
    torchmetrics' own plot of the value. The drawing (:mod:`retrieval_metrics.plot`, and
    matplotlib) is imported when a metric is first plotted, never with the classes."""

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        from retrieval_metrics.plot import plot_metric

        return plot_metric(self, val, ax)
