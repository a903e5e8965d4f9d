"""The test-set refusals of ``SelectOnValidation``: what would be selection on the test set.

A monitor fed by test metrics or logged outside the validation loop (:meth:`_check_choice`),
a test dataloader holding the dataset of the validation dataloader that produced the monitor
(:meth:`_check_test_datasets`; a dataloader that fed only the metrics' corpus is left out,
:meth:`_note_what_the_batch_fed`), and test sample ids that validation saw
(:meth:`_refuse_shared_ids`). A mixin of the callback, ahead of ``ModelCheckpoint``; the
checks apart from Lightning are ``checks.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor

from retrieval_metrics.lightning.checks import (
    DATALOADER_SUFFIX,
    dataset_of,
    flatten_loaders,
    is_test_key,
)
from retrieval_metrics.metrics.base import RetrievalMetricBase

__all__ = ["TestSetGuards"]


class TestSetGuards:
    """The refusals of selection on test data (see the module)."""

    monitor: str | None
    check_ids: bool
    _val_keys: set[str]
    _val_ids: Tensor
    _val_datasets: list[Any]
    _corpus_loaders: set[int]
    _fed: dict[int, set[str]]
    _batches_before: list[tuple[int, int]]
    _snapshot: dict[str, Any]
    _metrics: list[RetrievalMetricBase]

    def _note_what_the_batch_fed(self, dataloader_idx: int) -> None:
        """Record whether the batch added only gallery items to the metrics (a corpus) or
        anything else (queries, or nothing this callback can see, which could feed the
        monitor)."""
        after = [m.store.batches_by_side() for m in self._metrics]
        if len(after) != len(self._batches_before):
            return
        queries = any(a[0] > b[0] for a, b in zip(after, self._batches_before, strict=True))
        gallery = any(a[1] > b[1] for a, b in zip(after, self._batches_before, strict=True))
        fed = "gallery" if gallery and not queries else "other"
        self._fed.setdefault(dataloader_idx, set()).add(fed)

    def _check_choice(self, trainer: pl.Trainer, monitor_candidates: Mapping[str, Any]) -> None:
        test_keys = sorted(k for k in monitor_candidates if is_test_key(k))
        if test_keys:
            raise ValueError(
                f"SelectOnValidation: test metrics {test_keys} were logged during fit, so they "
                f"sit beside {self.monitor!r} when the checkpoint is chosen (a test loop, or test "
                "data evaluated in training/validation hooks). Evaluate test data only with "
                "trainer.test(...) after fit"
            )
        if self.monitor in monitor_candidates and self.monitor not in self._val_keys:
            raise ValueError(
                f"SelectOnValidation: monitor={self.monitor!r} is not produced in the validation "
                "loop (it was logged in training, or validation did not run), so the choice would "
                "not be made on validation data. Log it in validation_step or "
                "on_validation_epoch_end, or monitor one of the validation keys: "
                f"{sorted(self._val_keys) or 'none were logged'}"
            )

    def _validation_keys(self, trainer: pl.Trainer) -> set[str]:
        """Every key logged in the validation loop that just ran: the keys of
        ``trainer.callback_metrics`` that are new or hold a new value since the loop began
        (Lightning makes a new tensor for each value a loop logs, so a key logged in training
        and not in validation keeps its object)."""
        snapshot = self._snapshot
        return {
            k
            for k, v in trainer.callback_metrics.items()
            if k not in snapshot or snapshot[k] is not v
        }

    def _monitored_val_datasets(self) -> list[Any]:
        """The datasets of the validation dataloaders that fed the monitor; a dataloader whose
        batches only fed the metrics' gallery (a corpus) is left out: validation and test
        queries may be ranked against one corpus."""
        match = DATALOADER_SUFFIX.search(self.monitor or "")
        if match is None:
            return [d for i, d in enumerate(self._val_datasets) if i not in self._corpus_loaders]
        index = int(match.group(1))
        return [self._val_datasets[index]] if index < len(self._val_datasets) else []

    def _check_test_datasets(self, trainer: pl.Trainer) -> None:
        monitored = self._monitored_val_datasets()
        if not monitored:
            return
        for index, loader in enumerate(flatten_loaders(trainer.test_dataloaders)):
            dataset = dataset_of(loader)
            if any(dataset is d for d in monitored):
                raise ValueError(
                    f"SelectOnValidation: test dataloader {index} holds the same dataset as the "
                    f"validation dataloader that produced monitor={self.monitor!r}, so the "
                    "checkpoint was chosen on the test data. Validate on a separate split (or "
                    "monitor the key of another validation dataloader) and test on data that "
                    "never fed the choice"
                )

    def _refuse_shared_ids(self, test_ids: Tensor) -> None:
        """Refused where test sample ids were also validation sample ids: the checkpoint was
        then chosen partly on test data."""
        if self.check_ids and self._val_ids.numel() and test_ids.numel():
            shared = int(torch.isin(test_ids, self._val_ids).sum())
            if shared:
                raise ValueError(
                    f"SelectOnValidation: {shared} of the {test_ids.numel()} test sample ids were "
                    f"also validation sample ids ({self._val_ids.numel()} seen in validation), so "
                    "the checkpoint was chosen partly on test data. Use disjoint validation and "
                    "test splits; if these ids are per-split indices rather than sample ids, pass "
                    "ids that are unique across splits (e.g. offset the test ids), or "
                    "SelectOnValidation(check_ids=False)"
                )
