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
checkpoint (the selection record is part of the callback's state), also one into another
``dirpath`` (Lightning's default logger writes each run to a new ``version_N``).

This module holds the callback and its hooks; its concerns apart are mixins of it:
``guards.py`` (the test-set refusals), ``ids.py`` (the sample ids collected and gathered),
``checkpoints.py`` (the selection record in the checkpoints and the state; ``SELECTION_KEY``),
and ``checks.py`` (the checks apart from Lightning).
"""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torch import Tensor

from retrieval_metrics.lightning.checkpoints import SELECTION_KEY, SelectionRecords
from retrieval_metrics.lightning.checks import (
    DATALOADER_SUFFIX,
    dataset_of,
    flatten_loaders,
    is_test_key,
    same_file,
    unique_ids,
)
from retrieval_metrics.lightning.guards import TestSetGuards
from retrieval_metrics.lightning.ids import SampleIds
from retrieval_metrics.metrics.base import RetrievalMetricBase

__all__ = ["SELECTION_KEY", "SelectOnValidation"]


class SelectOnValidation(TestSetGuards, SampleIds, SelectionRecords):
    """A ``ModelCheckpoint`` that selects on validation metrics and makes ``trainer.test`` use them.

    Keeps the best checkpoint(s) by ``monitor``, a value logged in the validation loop (any metric
    of this library, e.g. ``rm.RSum`` or ``rm.MAPAtR`` logged with ``self.log``, or any logged
    scalar). After ``fit``:

    * ``trainer.test(model, dataloaders)`` with no ``ckpt_path`` loads ``best_model_path`` into
      ``model`` on every process before testing (the model keeps those weights afterwards), and
      ``ckpt_path="best"`` tests the same file. Both log ``selection/epoch``, ``selection/step``
      and ``selection/<monitor>`` beside the test metrics (a monitor's ``/dataloader_idx_N``
      suffix, a name Lightning keeps for itself, as ``/val_dataloader_N``).
    * Any other ``ckpt_path`` (e.g. ``"last"``) is tested as asked, with a warning, and its test
      metrics carry no ``selection/...`` keys. ``ckpt_path="last"`` with no last checkpoint
      (``save_last`` unset) tests the module's current weights, as Lightning says, with the same
      warning.
    * A selected file written in this process is loaded whole (``weights_only=False``, as its
      own output). Lightning does not pass on a ``weights_only`` given to ``trainer.test``, so
      one named by a resumed state is loaded with torch's default, and a file that needs
      ``weights_only=False`` (e.g. a ``pathlib.Path`` hyperparameter) raises an error that says
      to test it with ``ckpt_path="best", weights_only=False``.

    In a process that did not run ``fit`` (a new Trainer), the callback knows only what the
    tested file recorded: the best checkpoint *when it was written*. That is the final choice
    only where one checkpoint is kept, so ``trainer.test(ckpt_path=<the kept file>)`` there is
    labelled the selection only with ``save_top_k=1``; with another ``save_top_k`` (or a file
    written by a version that did not record it) the test runs as asked with a warning and no
    ``selection/...`` keys, and so does a later ``trainer.test(model, ...)`` without
    ``ckpt_path`` in that process (on the module's current weights). Test in the process that
    ran ``fit`` to have the selection labelled.

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

    A warning is given when ``fit`` ends without any metric logged in the validation loop, or
    with the monitor logged but no validated weights saved (nothing was selected), when the
    monitor is NaN (a metric with no query to count; ModelCheckpoint ranks it below every
    number, and the record keeps the NaN), and when ``trainer.test`` runs with nothing selected.

    Only weights that were just validated are candidates: the score always describes the saved
    weights. A validation that did not log the monitor (one computed every few epochs) makes no
    candidate, and with ``save_on_train_epoch_end=True`` the weights at an epoch's end are one
    only where a validation ran at that step. ``every_n_train_steps`` and
    ``train_time_interval`` are therefore refused; validate more often with
    ``Trainer(val_check_interval=...)`` instead. With ``save_last=True``,
    ``last.ckpt`` is written at every validation, also on the epochs that ``every_n_epochs``
    leaves out (Lightning 2.6 writes it only when a top-k checkpoint is written at the same step,
    which makes it a copy of the best one and a resume from ``ckpt_path="last"`` silently repeat
    epochs).

    A resume keeps the selection and its score: later epochs must beat it. Where the resumed run
    writes to another ``dirpath`` (Lightning restores only ``best_model_path`` then), the
    earlier run's best file stays in its directory as the selection until a better epoch
    replaces it, and it is never removed from there (Lightning removes a replaced file on a
    remote filesystem wherever it is). Only that one file of the earlier run competes (with
    ``save_top_k`` > 1 the others are not restored).

    Use one ``SelectOnValidation`` per Trainer, and put it first if there are other
    ``ModelCheckpoint`` callbacks: ``ckpt_path="best"`` resolves through the first one. On
    several devices use ``strategy="ddp"``: the strategies that start their processes for each
    call (``"ddp_spawn"``, ``"ddp_notebook"``, ``"ddp_fork"``) are refused, since what the
    callback records during ``fit`` would stay in processes that end with it.

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
        self._warned_unvalidated = self._warned_nan = False
        self._snapshot: dict[str, Any] = {}
        # per-stage bookkeeping
        self._stage: str | None = None
        self._fitting = False
        self._loaded: dict[str, Any] = {}
        self._batch_ids: list[Tensor] = []
        self._latest: dict[tuple[int, str], Tensor] = {}
        self._metrics: list[RetrievalMetricBase] = []
        # the trainer call that asked for ckpt_path="last" (see _find_last_checkpoints)
        self._last_asked_by: TrainerFn | None = None
        # checkpoints.py: the files written in this process, the kept best of an earlier run in
        # another dirpath, and the state restored from a file that trainer.test/validate loaded
        self._written: set[str] = set()
        self._kept_elsewhere: set[str] = set()
        self._tested_file_state: dict[str, Any] | None = None

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
        # Lightning refuses a logged name with "dataloader_idx" in it (it adds that suffix
        # itself): a monitor of the second validation dataloader is named by its number
        monitor = DATALOADER_SUFFIX.sub(r"/val_dataloader_\1", record["monitor"])
        return {
            "selection/epoch": float(record["epoch"]),
            "selection/step": float(record["step"]),
            f"selection/{monitor}": float(record["score"]),
        }

    # ------------------------------------------------------------------ Lightning hooks

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        launcher = getattr(trainer.strategy, "launcher", None)
        if type(launcher).__name__ == "_MultiProcessingLauncher":
            # (the processes are started for each fit and test call, and only the first
            # ModelCheckpoint's best_model_path comes back from them)
            method = getattr(launcher, "_start_method", "multiprocessing")
            raise RuntimeError(
                "SelectOnValidation does not work with a strategy that starts its processes "
                f"with {method!r} (ddp_spawn, ddp_notebook, ddp_fork): they are started for "
                "each trainer.fit and trainer.test, so what the "
                "callback records during fit (the selection record, the validation sample ids "
                "that trainer.test is checked against) is lost when fit returns, and the model "
                "in this process keeps the last weights. Use strategy='ddp' (a script, or "
                "torchrun) or one device"
            )
        super().setup(trainer, pl_module, stage)
        self._stage = stage
        self._loaded = {}

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().teardown(trainer, pl_module, stage)
        self._last_asked_by = None

    def _find_last_checkpoints(self, trainer: pl.Trainer) -> set[str]:
        # Lightning asks each ModelCheckpoint for its last checkpoints only to resolve
        # ckpt_path="last", before the run starts; where none exists it resolves the path to None,
        # which on_test_start could not tell from a call without ckpt_path (and would load the
        # selected weights into a test that asked for the last ones)
        self._last_asked_by = trainer.state.fn
        return super()._find_last_checkpoints(trainer)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fitting = True
        self._val_datasets = []
        # what fit selects from here on is this process's own choice
        self._tested_file_state = None

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fitting = False

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._fitting = False
        super().on_exception(trainer, pl_module, exception)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        if self.monitor in self._val_keys and not self.best_model_path and not (
            trainer.fast_dev_run or self.save_top_k == 0
        ):
            rank_zero_warn(
                f"SelectOnValidation: {self.monitor!r} was logged in validation, but no "
                "validated weights came to be saved, so none were selected and trainer.test "
                "would run on the last weights. Weights are a candidate where they were just "
                "validated; with save_on_train_epoch_end=True only the weights at the end of a "
                "training epoch are saved, so validate at each epoch's end or leave "
                "save_on_train_epoch_end unset"
            )
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


    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            self._collect_ids()
            ids = self._gather_ids(trainer)
            if self.check_ids:
                self._val_ids = unique_ids([self._val_ids, ids])
            if not trainer.sanity_checking:
                keys = self._validation_keys(trainer)
                self._val_keys |= keys
                # these weights are a candidate only where this validation measured the
                # monitor: one logged every k-th epoch keeps its older value in
                # callback_metrics in between, which describes other weights
                self._validated_step = trainer.global_step if self.monitor in keys else None
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
        # (the request is cleared at teardown, after this call)
        if ckpt_path is None and self._last_asked_by == TrainerFn.TESTING:
            rank_zero_warn(
                'SelectOnValidation: trainer.test(ckpt_path="last") found no last checkpoint, so '
                "(as Lightning says) it runs on the module's current weights, which are not the "
                f"checkpoint selected on validation ({best or 'none selected'}); its test metrics "
                "carry no selection/... keys. Pass save_last=True to SelectOnValidation to keep "
                "last.ckpt, or call trainer.test(model, ...) without ckpt_path to test the "
                "selected weights"
            )
            return
        if self._choice_unknown():
            self._warn_choice_unknown(ckpt_path)
            return
        if ckpt_path is None:
            if not best:
                rank_zero_warn(
                    "SelectOnValidation has selected no checkpoint (fit did not run here, no "
                    f"validation value of {self.monitor!r} was seen, or no validated weights "
                    "were saved: see fit's warnings), so trainer.test() runs on "
                    "the module's current weights and logs no selection/... keys. Call "
                    "trainer.fit(...) with validation data first, or pass ckpt_path= explicitly"
                )
                return
            checkpoint = self._load_selected(trainer, best)
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

    def _load_selected(self, trainer: pl.Trainer, path: str) -> dict[str, Any]:
        """Load the selected checkpoint for a ``trainer.test`` without ``ckpt_path`` (Lightning
        does not pass on the ``weights_only`` given to ``trainer.test``). A file this callback
        wrote in this process is its own output and is loaded whole (``weights_only=False``:
        e.g. hyperparameters that torch's weights-only unpickler refuses); any other (the
        selection of a resumed run) with Lightning's and torch's default."""
        load = trainer.strategy.load_checkpoint
        if path in self._written and "weights_only" in inspect.signature(load).parameters:
            return load(path, weights_only=False)
        try:
            return load(path)
        except pickle.UnpicklingError as error:
            # (torch's message says what it refused on its "WeightsUnpickler error" line)
            refused = [line.strip() for line in str(error).splitlines() if "Unpickler" in line]
            raise pickle.UnpicklingError(
                f"SelectOnValidation: the selected checkpoint {path} (named by a callback "
                "state restored from a checkpoint, e.g. of a resumed run, not written in this "
                "process) could not be loaded with torch's weights-only unpickler, and a "
                "trainer.test without ckpt_path cannot see a weights_only passed to it. If you "
                "trust the file, test it with "
                'trainer.test(model, ..., ckpt_path="best", weights_only=False)'
                + (f". {refused[0]}" if refused else "")
            ) from error

    def _choice_unknown(self) -> bool:
        """Whether the selection this callback holds came from the file that a trainer.test or
        trainer.validate loaded (this process did not run fit) and that file cannot tell
        whether it is the final choice: it records the best checkpoint when it was written,
        which is the final one only where a single checkpoint is kept (``save_top_k=1``)."""
        state = self._tested_file_state
        return state is not None and state.get("save_top_k") != 1

    def _warn_choice_unknown(self, ckpt_path: Any) -> None:
        assert self._tested_file_state is not None
        top_k = self._tested_file_state.get("save_top_k")
        kept = (
            "it was written by an earlier version of SelectOnValidation, which did not record "
            "save_top_k"
            if top_k is None
            else f"save_top_k={top_k} keeps more than the selected file"
        )
        what = (
            f"testing {ckpt_path!s} as asked"
            if ckpt_path is not None
            else "trainer.test() runs on the module's current weights"
        )
        rank_zero_warn(
            f"SelectOnValidation: {what}, but this process did not run fit: the callback knows "
            "only what the tested checkpoint recorded, the best checkpoint when it was written, "
            f"and cannot tell whether a later epoch was selected ({kept}). Its test metrics "
            "carry no selection/... keys. Test in the process that ran fit "
            '(trainer.test(model, ...) without ckpt_path, or ckpt_path="best"), or pass the '
            "final best_model_path of that process as ckpt_path there (with save_top_k=1 the one "
            "file kept is the choice, and a new process can say so)"
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
            self._refuse_shared_ids(test_ids)
        if self.test_selection is not None:
            # the values are the same on every process: "max" over processes keeps them exact
            # (and keeps Lightning from asking for sync_dist=True)
            for name, value in self.selection_metrics(self.test_selection).items():
                pl_module.log(name, value, sync_dist=True, reduce_fx="max", batch_size=1)
