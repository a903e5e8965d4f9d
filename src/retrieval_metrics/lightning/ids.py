"""The sample ids ``SelectOnValidation`` compares across validation and test: collected from
the library's metrics in the LightningModule as each batch ends (before an epoch's end resets
them), and gathered over the processes. A mixin of the callback."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import Tensor

from retrieval_metrics.lightning.checks import namespaced_ids, unique_ids
from retrieval_metrics.metrics.base import RetrievalMetricBase
from retrieval_metrics.metrics.distributed import gather_rows

__all__ = ["SampleIds"]


class SampleIds:
    """Collects and gathers the sample ids of a loop (see the module)."""

    check_ids: bool
    _batch_ids: list[Tensor]
    _latest: dict[tuple[int, str], Tensor]
    _metrics: list[RetrievalMetricBase]

    def _start_id_collection(self, pl_module: pl.LightningModule) -> None:
        self._batch_ids = []
        self._latest = {}
        self._metrics = [m for m in pl_module.modules() if isinstance(m, RetrievalMetricBase)]

    def _collect_ids(self) -> None:
        """Take the sample ids the metrics hold now (before Lightning, or the module, computes and
        resets them at the end of the epoch)."""
        if not self.check_ids:
            return
        for metric in self._metrics:
            for kind, ids in metric.sample_ids().items():
                key = (id(metric), kind)
                before = self._latest.get(key)
                if before is not None and ids.numel() < before.numel():
                    self._batch_ids.append(before)  # the metric was reset since: keep what it had
                self._latest[key] = namespaced_ids(kind, ids)
        if len(self._batch_ids) > 64:
            self._batch_ids = [unique_ids(self._batch_ids)]

    def _gather_ids(self, trainer: pl.Trainer) -> Tensor:
        """The ids every process collected in this loop (the same tensor on every process)."""
        local = (
            unique_ids([*self._batch_ids, *self._latest.values()])
            if self.check_ids
            else torch.zeros(0, dtype=torch.int64)
        )
        if not self.check_ids or trainer.world_size <= 1:
            return local
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return local
        return unique_ids(gather_rows([local])[:1])
