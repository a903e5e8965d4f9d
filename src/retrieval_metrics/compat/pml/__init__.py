"""pytorch-metric-learning's ``AccuracyCalculator``, computed on this library's blocked ranking.

An import swap keeps the numbers of code written for pytorch-metric-learning (PML) 2.x::

    # from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from retrieval_metrics.compat.pml import AccuracyCalculator

Same constructor, same ``get_accuracy`` arguments, same keys and values (see
:class:`AccuracyCalculator` for the few documented differences), without the queries x k
neighbour matrix PML builds: every key is read from the rank table of
:func:`~retrieval_metrics.functional.rank_embeddings`, which records where each relevant item
landed, and PML's ``k`` becomes a cut-off on that table (relevant items ranked beyond ``k`` do not
count), not a second ranking.

Modules: :mod:`~retrieval_metrics.compat.pml.calculator` (the class),
:mod:`~retrieval_metrics.compat.pml.labels` (label codes, match counts, a custom
``label_comparison_fn``'s relevance), :mod:`~retrieval_metrics.compat.pml.measures` (the
keys' values from the rank table), :mod:`~retrieval_metrics.compat.pml.knn` (kNN objects,
and the neighbour lists of a subclass's keys), :mod:`~retrieval_metrics.compat.pml.clustering`
(NMI, AMI) and :mod:`~retrieval_metrics.compat.pml.inputs`.
"""

from retrieval_metrics.compat.pml.calculator import AccuracyCalculator

__all__ = ["AccuracyCalculator"]
