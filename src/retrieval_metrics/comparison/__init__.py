"""Comparing systems scored on the same queries, one concern a module:

* ``pairwise.py``: ``compare(a, b)``, is model A better than model B, metric by metric;
* ``systems.py``: ``compare_systems(*metrics, baseline=...)``, which of several systems differ
  from a baseline, with p-values corrected for the multiple comparisons;
* ``report.py``: its result, :class:`SystemComparison`, and its renderings;
* ``text.py``: the text of the numbers, p-values and cells, the systems' names.
"""

from retrieval_metrics.comparison.pairwise import compare
from retrieval_metrics.comparison.report import SystemComparison
from retrieval_metrics.comparison.systems import FAMILIES, compare_systems

__all__ = ["FAMILIES", "SystemComparison", "compare", "compare_systems"]
