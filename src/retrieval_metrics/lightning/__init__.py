"""Choose the checkpoint on validation data and test exactly those weights:
:class:`SelectOnValidation` (``callback.py``; see its docstring), one concern a module:

* ``callback.py``: the callback and its Lightning hooks (fit, validation, test);
* ``guards.py``: the test-set refusals (test metrics beside the monitor, a monitor not logged in
  validation, a test dataloader of the monitored dataset, shared sample ids);
* ``ids.py``: the sample ids collected from the metrics and gathered over the processes;
* ``checkpoints.py``: the selection record, in each checkpoint kept and in the state;
* ``checks.py``: the checks apart from Lightning (test keys, datasets and files, id spaces).
"""

from retrieval_metrics.lightning.callback import SELECTION_KEY, SelectOnValidation

__all__ = ["SELECTION_KEY", "SelectOnValidation"]
