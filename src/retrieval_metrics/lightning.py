"""Choose the checkpoint on validation data and test exactly those weights: ``SelectOnValidation``.

:class:`SelectOnValidation` is a Lightning ``ModelCheckpoint`` (so ``best_model_path``,
``trainer.test(ckpt_path="best")`` and every ``ModelCheckpoint`` option work as usual) that

* keeps the best checkpoint by a metric logged in the **validation loop** (``monitor``, ``mode``);
* makes ``trainer.test(model, ...)`` after ``fit`` run on the selected weights, also when no
  ``ckpt_path`` is given (plain Lightning would test whatever the last epoch left), and logs
  ``selection/epoch``, ``selection/step`` and ``selection/<monitor>`` beside the test metrics; the
  same record is written into each checkpoint it keeps (``checkpoint["selection"]``);
* refuses what would be selection on the test set: a monitor that is not a validation metric, test
  metrics present while fitting, a validation dataloader that is also a test dataloader, and
  validation and test sets that share sample ids (compared on the ``ids=`` that the library's
  metrics received).

It works under DDP (rank 0 writes, every rank loads the same file) and across a resume from a
checkpoint (the selection record is part of the callback's state).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torch import Tensor

from retrieval_metrics.metrics.base import RetrievalMetricBase
from retrieval_metrics.metrics.distributed import gather_rows
from retrieval_metrics.selection_checks import (
    DATALOADER_SUFFIX,
    dataset_of,
    flatten_loaders,
    is_test_key,
    namespaced_ids,
    same_file,
    unique_ids,
)

__all__ = ["SELECTION_KEY", "SelectOnValidation"]

SELECTION_KEY = "selection"
"""Key of the selection record in every checkpoint that ``SelectOnValidation`` keeps."""

class SelectOnValidation(ModelCheckpoint):
    """A ``ModelCheckpoint`` that selects on validation metrics and makes ``trainer.test`` use them.

    Keeps the best checkpoint(s) by ``monitor``, a value logged in the validation loop (any metric
    of this library, e.g. ``rm.RSum`` or ``rm.MAPAtR`` logged with ``self.log``, or any logged
    scalar). After ``fit``:

    * ``trainer.test(model, dataloaders)`` with no ``ckpt_path`` loads ``best_model_path`` into
      ``model`` on every process before testing (the model keeps those weights afterwards), and
      ``ckpt_path="best"`` tests the same file. Both log ``selection/epoch``, ``selection/step``
      and ``selection/<monitor>`` beside the test metrics.
    * Any other ``ckpt_path`` (e.g. ``"last"``) is tested as asked, with a warning, and its test
      metrics carry no ``selection/...`` keys.

    Refused, with an error that says what to do instead:

    * a ``monitor`` named like a test metric (``"test/..."``, ``"test_..."``), or one that is not
      logged in the validation loop (e.g. a training loss);
    * test metrics present while fitting (a test loop, or test metrics logged during ``fit``,
      could feed the choice);
    * a ``trainer.test`` whose dataloader holds the dataset of the validation dataloader that
      produced the monitor (e.g. ``monitor="val/map_at_r/dataloader_idx_1"`` with that dataloader
      also passed to ``trainer.test``); a validation dataloader whose batches only fed the
      metrics' gallery (``role="gallery"``: a corpus) may be tested again, beside other queries;
    * validation and test data that share sample ids: the ids that every metric of this library in
      the LightningModule received in the validation loops of ``fit`` (``metric.sample_ids()``:
      query ids given with ``ids=``; image ids and ``text_ids`` of image-text metrics) are compared
      with those received in ``trainer.test`` (all processes together), and the number of
      overlapping ids is reported. Ids must be global sample ids, unique across splits. Gallery
      ids are not compared (validation and test queries may share one corpus).

    A warning is given when ``fit`` ends without any metric logged in the validation loop (nothing
    was selected) and when ``trainer.test`` runs with nothing selected.

    Only weights that were just validated are candidates: the score always describes the saved
    weights. ``every_n_train_steps`` and ``train_time_interval`` are therefore refused; validate
    more often with ``Trainer(val_check_interval=...)`` instead. With ``save_last=True``,
    ``last.ckpt`` is written at every validation (Lightning 2.6 writes it only when a top-k
    checkpoint is written at the same step, which makes it a copy of the best one and a resume
    from ``ckpt_path="last"`` silently repeat epochs).

    Use one ``SelectOnValidation`` per Trainer, and put it first if there are other
    ``ModelCheckpoint`` callbacks: ``ckpt_path="best"`` resolves through the first one.

    Args:
        monitor: the validation metric to select on, as logged (``"val/rsum"`` by default).
        mode: ``"max"`` (default) or ``"min"``.
        check_ids: compare validation and test sample ids (default True).
        kwargs: any other ``ModelCheckpoint`` option (``dirpath``, ``filename``, ``save_top_k``,
            ``save_last``, ``every_n_epochs``, ``save_weights_only``, ``verbose``, ...).

    Attributes:
        selection: the record of ``best_model_path``: ``{"monitor", "mode", "score", "epoch",
            "step", "path"}`` (None before anything was selected).
        test_selection: the record the last ``trainer.test`` ran on (None when it ran on an
            explicit other checkpoint or with nothing selected).

    Example:
        In a script, with a LightningModule that logs ``self.log("val/map_at_r", self.val_map)``
        in ``validation_step`` and ``self.log("test/map_at_r", self.test_map)`` in ``test_step``
        (see ``examples/lightning_module.py``)::

            select = SelectOnValidation(monitor="val/map_at_r", mode="max")
            trainer = L.Trainer(max_epochs=10, callbacks=[select])
            trainer.fit(model, train_loader, val_loader)
            trainer.test(model, test_loader)   # runs on select.best_model_path
            # [{"test/map_at_r": ..., "selection/epoch": 3.0, "selection/step": ...,
            #   "selection/val/map_at_r": ...}]

        The callback itself:

        >>> from retrieval_metrics.lightning import SelectOnValidation
        >>> select = SelectOnValidation(monitor="val/map_at_r", mode="max", save_last=True)
        >>> select.monitor, select.mode, select.selection
        ('val/map_at_r', 'max', None)
        >>> SelectOnValidation(monitor="test/map_at_r")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: monitor='test/map_at_r' names a test metric: ...
    """

    def __init__(
        self,
        monitor: str = "val/rsum",
        mode: str = "max",
        *,
        check_ids: bool = True,
        **kwargs: Any,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(
                f"`monitor` must name a validation metric, got {monitor!r}; pass the key you log "
                'in the validation loop, e.g. monitor="val/rsum" (use a plain ModelCheckpoint to '
                "keep checkpoints without selecting)"
            )
        if is_test_key(monitor):
            raise ValueError(
                f"monitor={monitor!r} names a test metric: choosing a checkpoint on test data "
                "makes the test number optimistic. Monitor a metric logged in the validation loop "
                '(e.g. "val/...") and report the test metrics of the selected checkpoint '
                "with trainer.test()"
            )
        for option in ("every_n_train_steps", "train_time_interval"):
            if kwargs.get(option):
                raise ValueError(
                    f"SelectOnValidation does not take `{option}`: a checkpoint saved between "
                    "validation runs would carry the score of older weights. Validate more often "
                    "with Trainer(val_check_interval=...) and every validation run is a candidate"
                )
        if not isinstance(check_ids, bool):
            raise ValueError(f"`check_ids` must be a bool, got {check_ids!r}")
        super().__init__(monitor=monitor, mode=mode, **kwargs)
        if self.save_top_k == 0:
            raise ValueError(
                "save_top_k=0 keeps no checkpoint, so nothing can be selected; use save_top_k=1 "
                "(the default), a larger k, or -1 to keep all"
            )
        self.check_ids = check_ids
        self.test_selection: dict[str, Any] | None = None
        # selection records of the checkpoints in `best_k_models` (and `best_model_path`)
        self._records: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, Any] | None = None
        self._saving: dict[str, Any] | None = None
        # what the validation loops of `fit` produced
        self._val_keys: set[str] = set()
        self._val_ids = torch.zeros(0, dtype=torch.int64)
        self._val_datasets: list[Any] = []
        # validation dataloaders whose batches fed only the metrics' gallery (a corpus that
        # validation and test queries may share), by index; see _note_what_the_batch_fed
        self._corpus_loaders: set[int] = set()
        self._fed: dict[int, set[str]] = {}
        self._batches_before: list[tuple[int, int]] = []
        self._validated_step: int | None = None
        self._snapshot: dict[str, Any] = {}
        # per-stage bookkeeping
        self._stage: str | None = None
        self._fitting = False
        self._loaded: dict[str, Any] = {}
        self._batch_ids: list[Tensor] = []
        self._latest: dict[tuple[int, str], Tensor] = {}
        self._metrics: list[RetrievalMetricBase] = []

    # ------------------------------------------------------------------ public

    @property
    def selection(self) -> dict[str, Any] | None:
        """The selection record of ``best_model_path`` (None before anything was selected)."""
        return self._record_for(self.best_model_path)

    def selection_metrics(self, record: Mapping[str, Any] | None = None) -> dict[str, float]:
        """``{"selection/epoch", "selection/step", "selection/<monitor>"}`` of a record (default:
        the current selection), as logged during ``trainer.test``."""
        record = self.selection if record is None else record
        if record is None:
            return {}
        return {
            "selection/epoch": float(record["epoch"]),
            "selection/step": float(record["step"]),
            f"selection/{record['monitor']}": float(record["score"]),
        }

    # ------------------------------------------------------------------ Lightning hooks

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._stage = stage
        self._loaded = {}

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fitting = True
        self._val_datasets = []

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fitting = False

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._fitting = False
        super().on_exception(trainer, pl_module, exception)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if not self._val_keys:
            rank_zero_warn(
                f"SelectOnValidation: no metric was logged in the validation loop during fit, so "
                f"no checkpoint was selected by {self.monitor!r}. Pass validation data to "
                "trainer.fit(..., val_dataloaders=...) and log the monitor in validation_step or "
                "on_validation_epoch_end (check limit_val_batches / check_val_every_n_epoch)"
            )

    # validation: ids, keys and datasets of the loop that feeds the choice

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._snapshot = dict(trainer.callback_metrics)

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start_id_collection(pl_module)
        self._fed = {}

    def on_validation_batch_start(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._batches_before = [m.store.batches_by_side() for m in self._metrics]

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._note_what_the_batch_fed(dataloader_idx)
        self._collect_ids()

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

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            self._collect_ids()
            ids = self._gather_ids(trainer)
            if self.check_ids:
                self._val_ids = unique_ids([self._val_ids, ids])
            if not trainer.sanity_checking:
                self._val_keys |= self._validation_keys(trainer)
                self._validated_step = trainer.global_step
                self._val_datasets = [
                    dataset_of(dl) for dl in flatten_loaders(trainer.val_dataloaders)
                ]
                self._corpus_loaders = {i for i, fed in self._fed.items() if fed == {"gallery"}}
        self._batch_ids, self._latest = [], {}
        super().on_validation_end(trainer, pl_module)

    # test: load the selected weights, check the data, log the selection

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._fitting:
            raise RuntimeError(
                "SelectOnValidation: a test loop ran during fit, so test metrics could feed the "
                "checkpoint choice. Run trainer.test(...) after trainer.fit(...) returns"
            )
        self.test_selection = None
        self._check_test_datasets(trainer)
        best = trainer.strategy.broadcast(self.best_model_path)
        ckpt_path = trainer.ckpt_path
        if ckpt_path is None:
            if not best:
                rank_zero_warn(
                    "SelectOnValidation has selected no checkpoint (fit did not run here, or no "
                    f"validation value of {self.monitor!r} was seen), so trainer.test() runs on "
                    "the module's current weights and logs no selection/... keys. Call "
                    "trainer.fit(...) with validation data first, or pass ckpt_path= explicitly"
                )
                return
            checkpoint = trainer.strategy.load_checkpoint(best)
            pl_module.on_load_checkpoint(checkpoint)
            trainer.strategy.load_model_state_dict(
                checkpoint, strict=getattr(pl_module, "strict_loading", True)
            )
            trainer.strategy.barrier("SelectOnValidation.load_selected")
            self.test_selection = self._record_for(best, checkpoint)
            rank_zero_info(
                f"SelectOnValidation: testing the weights selected on validation: {best}"
            )
            return
        loaded_record = self._loaded.get(SELECTION_KEY)
        current = self._record_for(best)
        is_copy = (
            loaded_record is not None
            and current is not None
            and all(loaded_record.get(k) == current.get(k) for k in ("path", "epoch", "step"))
        )
        if best and (same_file(ckpt_path, best) or is_copy):
            self.test_selection = self._record_for(best, self._loaded)
            return
        rank_zero_warn(
            f"SelectOnValidation: testing {ckpt_path!s} as asked, which is not the checkpoint "
            f"selected on validation ({best or 'none selected'}); its test metrics carry no "
            "selection/... keys. Call trainer.test(model, ...) without ckpt_path, or with "
            'ckpt_path="best", to test the selected weights'
        )

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start_id_collection(pl_module)

    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._collect_ids()

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._collect_ids()
        test_ids = self._gather_ids(trainer)
        self._batch_ids, self._latest = [], {}
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
        if self.test_selection is not None:
            # the values are the same on every process: "max" over processes keeps them exact
            # (and keeps Lightning from asking for sync_dist=True)
            for name, value in self.selection_metrics(self.test_selection).items():
                pl_module.log(name, value, sync_dist=True, reduce_fx="max", batch_size=1)

    # checkpoints: record the selection, keep it in the state

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
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self._stage not in (None, "fit") and self.best_model_path:
            # trainer.test/validate(ckpt_path=...) restores callbacks from that file; the
            # selection made by fit in this process stays what it is
            return
        dirpath_before = self.dirpath
        super().load_state_dict(state_dict)
        records = state_dict.get("selections", {})
        if dirpath_before != state_dict.get("dirpath", dirpath_before):
            records = {p: r for p, r in records.items() if p == self.best_model_path}
        self._records = {p: dict(r) for p, r in records.items()}
        self._val_keys = set(state_dict.get("validation_keys", ()))
        ids = state_dict.get("validation_ids")
        if isinstance(ids, Tensor):
            self._val_ids = ids.to("cpu", torch.int64)

    # ModelCheckpoint internals: guard the choice and remember what was chosen

    def _save_topk_checkpoint(
        self, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]
    ) -> None:
        self._check_choice(trainer, monitor_candidates)
        # only weights that were just validated are candidates: otherwise the score in
        # `monitor_candidates` belongs to older weights
        if self.monitor not in monitor_candidates or self._validated_step == trainer.global_step:
            super()._save_topk_checkpoint(trainer, monitor_candidates)
        if self.save_last is True and self._last_global_step_saved != trainer.global_step:
            # Lightning >= 2.6 writes last.ckpt only when a top-k checkpoint was written at the
            # same step, which makes it a copy of the best one; resuming needs the real last
            # weights, so mark this step as saved and ModelCheckpoint writes last.ckpt now
            self._last_global_step_saved = trainer.global_step

    def _update_best_and_save(
        self, current: Tensor, trainer: pl.Trainer, monitor_candidates: dict[str, Tensor]
    ) -> None:
        score = float(current)
        if score != score:  # NaN is stored as the worst value, as ModelCheckpoint does
            score = float("inf") if self.mode == "min" else float("-inf")
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

    # ------------------------------------------------------------------ helpers

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
