"""The selection record of ``SelectOnValidation``: made as ``ModelCheckpoint`` keeps a
checkpoint (its internals ``_save_topk_checkpoint``, ``_update_best_and_save``,
``_save_checkpoint`` overridden: only weights just validated are candidates), written into
each checkpoint kept (``checkpoint["selection"]``), and part of the callback's state across a
resume (also into another ``dirpath``, where ``ModelCheckpoint`` restores ``best_model_path``
alone: its score is restored from the record so that later epochs compete with it). The state
also says where it came from: from ``fit`` (or a resume) in this process, or from the file a
``trainer.test``/``validate`` call loaded (``_tested_file_state``), which knows only the best
checkpoint when it was written. ``last.ckpt`` is written at every validation, also on the epochs
that ``every_n_epochs`` leaves out. A mixin of the callback, ahead of ``ModelCheckpoint`` in its
bases."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from torch import Tensor

__all__ = ["SELECTION_KEY", "SelectionRecords"]

SELECTION_KEY = "selection"
"""Key of the selection record in every checkpoint that ``SelectOnValidation`` keeps."""


class SelectionRecords(ModelCheckpoint):
    """The selection records of the checkpoints kept (see the module)."""

    _records: dict[str, dict[str, Any]]
    _pending: dict[str, Any] | None
    _saving: dict[str, Any] | None
    _val_keys: set[str]
    _val_ids: Tensor
    _validated_step: int | None
    _warned_unvalidated: bool
    _warned_nan: bool
    _stage: str | None
    _loaded: dict[str, Any]
    # the paths this callback wrote in this process (loaded by on_test_start as its own output)
    _written: set[str]
    # the kept best restored from a state whose dirpath was another (never removed from there)
    _kept_elsewhere: set[str]
    # {"save_top_k": ...} of the callback state restored from the file that trainer.test or
    # trainer.validate loaded (None where the state is fit's, or a resume's, in this process)
    _tested_file_state: dict[str, Any] | None

    # the guards' refusal of the candidates: TestSetGuards._check_choice, ahead in the MRO
    _check_choice: Callable[[pl.Trainer, Mapping[str, Any]], None]

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        super().on_save_checkpoint(trainer, pl_module, checkpoint)
        if self._saving is not None:
            checkpoint[SELECTION_KEY] = dict(self._saving)

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        super().on_load_checkpoint(trainer, pl_module, checkpoint)
        self._loaded = {
            SELECTION_KEY: checkpoint.get(SELECTION_KEY),
            "epoch": checkpoint.get("epoch"),
            "global_step": checkpoint.get("global_step"),
        }

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["selections"] = {path: dict(record) for path, record in self._records.items()}
        state["validation_keys"] = sorted(self._val_keys)
        state["validation_ids"] = self._val_ids.clone()
        # a process that did not run fit reads this to tell whether the best checkpoint when
        # the file was written is the final choice (only where one checkpoint is kept)
        state["save_top_k"] = self.save_top_k
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self._stage not in (None, "fit") and self.best_model_path:
            # trainer.test/validate(ckpt_path=...) restores callbacks from that file; the
            # selection made by fit in this process stays what it is
            return
        dirpath_before = self.dirpath
        super().load_state_dict(state_dict)
        records = state_dict.get("selections", {})
        moved = dirpath_before != state_dict.get("dirpath", dirpath_before)
        if moved:
            records = {p: r for p, r in records.items() if p == self.best_model_path}
        self._records = {p: dict(r) for p, r in records.items()}
        self._kept_elsewhere = set()
        if moved:
            self._compete_with_the_kept_best()
        self._val_keys = set(state_dict.get("validation_keys", ()))
        ids = state_dict.get("validation_ids")
        if isinstance(ids, Tensor):
            self._val_ids = ids.to("cpu", torch.int64)
        self._tested_file_state = (
            None
            if self._stage in (None, "fit")
            else {"save_top_k": state_dict.get("save_top_k")}
        )

    def _compete_with_the_kept_best(self) -> None:
        """After a resume into another ``dirpath`` (e.g. the default logger's next
        ``version_N/checkpoints``) ``ModelCheckpoint`` restores ``best_model_path`` alone, so the
        first validation after the resume would replace it whatever its value: restore its
        score from the selection record, as ``ModelCheckpoint`` ranks it, so that later epochs
        compete with it. The file stays where it is: it is never removed from the other
        directory (see :meth:`_should_remove_checkpoint`)."""
        record = self._records.get(self.best_model_path)
        if not self.best_model_path or record is None or record.get("monitor") != self.monitor:
            return
        value = float(record["score"])
        if value != value:  # (ModelCheckpoint ranks a NaN as the worst value)
            value = float("inf" if self.mode == "min" else "-inf")
        # (float64 holds a float32 or float64 score exactly)
        score = torch.tensor(value, dtype=torch.float64)
        self.best_model_score = score
        self.best_k_models = {self.best_model_path: score}
        if self.save_top_k == 1:  # k entries: the kth best is the one (as ModelCheckpoint sets it)
            self.kth_best_model_path, self.kth_value = self.best_model_path, score
        self._kept_elsewhere = {self.best_model_path}

    def _should_remove_checkpoint(self, trainer: pl.Trainer, previous: str, current: str) -> bool:
        # Lightning removes a local file only under the current dirpath, but any file on a remote
        # filesystem: the kept best of an earlier run, in its own directory, is never removed
        if previous in self._kept_elsewhere:
            return False
        return super()._should_remove_checkpoint(trainer, previous, current)

    # last.ckpt at every validation, also on the epochs that `every_n_epochs` leaves out

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._keeps_last() and self._should_save_on_train_epoch_end(trainer):
            self._save_last_where_nothing_was_saved(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if self._keeps_last() and not self._should_save_on_train_epoch_end(trainer):
            self._save_last_where_nothing_was_saved(trainer)

    def _keeps_last(self) -> bool:
        # (only then is there anything to write: the trainer is not read otherwise)
        return self.save_last is True and self._every_n_epochs >= 1

    def _save_last_where_nothing_was_saved(self, trainer: pl.Trainer) -> None:
        # ModelCheckpoint calls _save_topk_checkpoint (which makes last.ckpt be written, below)
        # only on the epochs that every_n_epochs names; on the others nothing was saved at this
        # step, and a resume from last.ckpt would repeat the epochs since the last one named
        if not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    # ModelCheckpoint internals: guard the choice and remember what was chosen

    def _save_topk_checkpoint(
        self, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]
    ) -> None:
        self._check_choice(trainer, monitor_candidates)
        # only weights that were just validated are candidates: otherwise the score in
        # `monitor_candidates` belongs to older weights
        if self.monitor not in monitor_candidates or self._validated_step == trainer.global_step:
            super()._save_topk_checkpoint(trainer, monitor_candidates)
        elif self._validated_step is not None and not self._warned_unvalidated:
            self._warned_unvalidated = True
            rank_zero_warn(
                f"SelectOnValidation: the weights at step {trainer.global_step} (the end of "
                f"epoch {trainer.current_epoch}) are not a candidate: {self.monitor!r} was "
                f"measured at step {self._validated_step}, on the weights before the last "
                "training steps. With save_on_train_epoch_end=True only the weights at the end "
                "of a training epoch are saved: validate at each epoch's end (a "
                "val_check_interval that divides the epoch) or leave save_on_train_epoch_end "
                "unset, so that every validation's weights are candidates"
            )
        if self.save_last is True and self._last_global_step_saved != trainer.global_step:
            # Lightning >= 2.6 writes last.ckpt only when a top-k checkpoint was written at the
            # same step, which makes it a copy of the best one; resuming needs the real last
            # weights, so mark this step as saved and ModelCheckpoint writes last.ckpt now
            self._last_global_step_saved = trainer.global_step

    def _update_best_and_save(
        self, current: Tensor, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]
    ) -> None:
        # (the record keeps the value as logged; ModelCheckpoint ranks a NaN as the worst)
        score = float(current)
        if score != score and not self._warned_nan:
            self._warned_nan = True
            rank_zero_warn(
                f"SelectOnValidation: {self.monitor!r} is NaN at epoch "
                f"{trainer.current_epoch}, step {trainer.global_step} (a retrieval metric "
                "with no query to count: did any query have a relevant item?); ModelCheckpoint "
                "ranks a NaN below every number. Later NaN values are not reported"
            )
        self._pending = {
            "monitor": self.monitor,
            "mode": self.mode,
            "score": score,
            "epoch": int(trainer.current_epoch),
            "step": int(trainer.global_step),
        }
        try:
            super()._update_best_and_save(current, trainer, monitor_candidates)
        finally:
            self._pending = None
        keep = set(self.best_k_models) | {self.best_model_path}
        self._records = {p: r for p, r in self._records.items() if p in keep}

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        if self._pending is not None:
            self._saving = dict(self._pending, path=filepath)
            self._records[filepath] = self._saving
        try:
            super()._save_checkpoint(trainer, filepath)
        finally:
            self._saving = None
        self._written.add(filepath)

    def _record_for(
        self, path: str, checkpoint: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        if not path:
            return None
        record = self._records.get(path)
        if record is None and checkpoint:
            record = checkpoint.get(SELECTION_KEY)
            if record is None and checkpoint.get("epoch") is not None:
                score = self.best_k_models.get(path, self.best_model_score)
                record = {
                    "monitor": self.monitor,
                    "mode": self.mode,
                    "score": float(score) if score is not None else float("nan"),
                    "epoch": int(checkpoint["epoch"]),
                    "step": int(checkpoint.get("global_step") or 0),
                    "path": path,
                }
        return dict(record) if record is not None else None
