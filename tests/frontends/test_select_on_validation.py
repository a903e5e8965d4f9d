"""SelectOnValidation with a real Trainer on CPU: test metrics are those of the selected weights.

The model (tests/distributed/select_ddp.py) learns for two epochs and then un-learns, so the epoch
with the best validation value is not the last one. Each expected value is computed in plain
Python on the weights of that epoch (recorded in memory during fit, and read from the checkpoint
file), never through the callback under test.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn
from torch.utils.data import DataLoader

from distributed.select_ddp import (
    ClassData,
    EpochRecorder,
    TinyEmbedder,
    loaders,
    map_at_r,
    params_hash,
)
from retrieval_metrics.lightning import SELECTION_KEY, SelectOnValidation

SCRIPT = Path(__file__).resolve().parents[1] / "distributed" / "select_ddp.py"
MONITOR = "val/map_at_r"

pytestmark = pytest.mark.filterwarnings(
    "ignore::lightning.fabric.utilities.warnings.PossibleUserWarning",
    "ignore:.*does not have many workers.*",
    "ignore:.*LeafSpec.*",
    "ignore:Checkpoint directory .* exists and is not empty",
    "ignore:.*could not find the monitored key",
)


def make_trainer(root: Path, callbacks: list, max_epochs: int = 4, **kwargs) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        **kwargs,
    )


def fit(tmp_path: Path, model: TinyEmbedder | None = None, max_epochs: int = 4, **select_kwargs):
    """Fit TinyEmbedder with SelectOnValidation; returns (trainer, model, select, recorder)."""
    L.seed_everything(0, verbose=False)
    train, val, _, _ = loaders()
    select_kwargs.setdefault("dirpath", tmp_path / "ckpt")
    select = SelectOnValidation(monitor=MONITOR, mode="max", **select_kwargs)
    recorder = EpochRecorder(MONITOR)
    trainer = make_trainer(tmp_path, [recorder, select], max_epochs=max_epochs)
    model = TinyEmbedder() if model is None else model
    trainer.fit(model, train, val)
    return trainer, model, select, recorder


def weights_metric(state_dict: dict, data: ClassData) -> float:
    model = TinyEmbedder()
    model.load_state_dict(state_dict)
    return map_at_r(model, data)


def load_file(path: str) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def best_epoch(values: dict[int, float]) -> int:
    return max(values, key=lambda e: (values[e], -e))  # first of equal values, as ModelCheckpoint


# ---------------------------------------------------------------------- the selected weights


def test_test_runs_on_weights_of_best_validation_epoch(tmp_path):
    trainer, model, select, recorder = fit(tmp_path)
    _, _, test_loader, test_set = loaders()
    best = best_epoch(recorder.values)
    last = max(recorder.values)
    assert best != last, recorder.values  # the schedule makes the last epoch worse
    expected = weights_metric(recorder.weights[best], test_set)
    from_file = load_file(select.best_model_path)
    assert weights_metric(from_file["state_dict"], test_set) == pytest.approx(expected, abs=1e-7)
    # the module holds the last epoch's weights, which score differently
    assert map_at_r(model, test_set) != pytest.approx(expected, abs=1e-4)

    # no ckpt_path: the callback loads the selected weights into the module
    result = trainer.test(model, test_loader, verbose=False)[0]
    assert result["test/map_at_r"] == pytest.approx(expected, abs=1e-6)
    assert result["selection/epoch"] == best
    assert result["selection/step"] == from_file["global_step"]
    assert result[f"selection/{MONITOR}"] == pytest.approx(recorder.values[best], abs=1e-6)
    assert params_hash(model) == params_hash(_module(from_file["state_dict"]))

    # ckpt_path="best" runs on the same file and says the same
    best_result = trainer.test(model, test_loader, ckpt_path="best", verbose=False)[0]
    assert best_result == pytest.approx(result, abs=1e-7)

    # the record is written into the checkpoint and kept in the callback
    record = from_file[SELECTION_KEY]
    assert record["epoch"] == best and record["monitor"] == MONITOR
    assert record["score"] == pytest.approx(recorder.values[best], abs=1e-6)
    assert select.selection == record
    assert select.test_selection == record


def _module(state_dict: dict) -> TinyEmbedder:
    model = TinyEmbedder()
    model.load_state_dict(state_dict)
    return model


@pytest.mark.parametrize(
    ("save_last", "warning"),
    [
        (True, "not the checkpoint selected on validation"),
        # save_last unset: Lightning resolves ckpt_path="last" to no checkpoint (and says so),
        # and the test runs on the module as it is: the selected weights must not be loaded
        (False, 'ckpt_path="last"\\) found no last checkpoint'),
    ],
)
def test_last_is_tested_as_asked_with_a_warning(tmp_path, save_last, warning):
    trainer, model, select, recorder = fit(tmp_path, save_last=save_last)
    _, _, test_loader, test_set = loaders()
    last, best = max(recorder.values), best_epoch(recorder.values)
    assert best != last
    if save_last:
        assert select.last_model_path.endswith("last.ckpt")
        # last.ckpt holds the last epoch (not a copy of the best, as Lightning 2.6's would)
        assert load_file(select.last_model_path)["epoch"] == last
    else:
        assert not select.last_model_path
    expected = weights_metric(recorder.weights[last], test_set)
    with pytest.warns(UserWarning, match=warning):
        result = trainer.test(model, test_loader, ckpt_path="last", verbose=False)[0]
    assert result["test/map_at_r"] == pytest.approx(expected, abs=1e-6)
    assert not any(key.startswith("selection/") for key in result)
    assert select.test_selection is None
    # the selection made by fit is untouched, and the request does not outlive its call
    again = trainer.test(model, test_loader, verbose=False)[0]
    assert again["selection/epoch"] == best
    assert again["test/map_at_r"] == pytest.approx(
        weights_metric(recorder.weights[best], test_set), abs=1e-6
    )


def test_resume_from_last_keeps_the_selection(tmp_path):
    _, _, select1, rec1 = fit(tmp_path, max_epochs=3, save_last=True)
    first_best = select1.best_model_path
    L.seed_everything(1, verbose=False)
    train, val, test_loader, test_set = loaders()
    select2 = SelectOnValidation(
        monitor=MONITOR, mode="max", dirpath=tmp_path / "ckpt", save_last=True
    )
    rec2 = EpochRecorder(MONITOR)
    trainer2 = make_trainer(tmp_path, [rec2, select2], max_epochs=5)
    model2 = TinyEmbedder()
    trainer2.fit(model2, train, val, ckpt_path="last")
    assert sorted(rec2.values) == [3, 4]  # resumed after the third epoch
    values = {**rec1.values, **rec2.values}
    weights = {**rec1.weights, **rec2.weights}
    best = best_epoch(values)
    assert best < 3  # chosen in the first run, remembered by the second
    assert select2.best_model_path == first_best
    result = trainer2.test(model2, test_loader, verbose=False)[0]
    assert result["selection/epoch"] == best
    assert result[f"selection/{MONITOR}"] == pytest.approx(values[best], abs=1e-6)
    assert result["test/map_at_r"] == pytest.approx(
        weights_metric(weights[best], test_set), abs=1e-6
    )

    # a fresh Trainer that never fitted: the selected file tests with its record, others warn
    fresh = SelectOnValidation(monitor=MONITOR, mode="max", dirpath=tmp_path / "ckpt")
    trainer3 = make_trainer(tmp_path, [fresh])
    result3 = trainer3.test(TinyEmbedder(), test_loader, ckpt_path=first_best, verbose=False)[0]
    assert result3 == pytest.approx(result, abs=1e-6)
    fresh_last = SelectOnValidation(monitor=MONITOR, mode="max", dirpath=tmp_path / "ckpt")
    trainer4 = make_trainer(tmp_path, [fresh_last])
    with pytest.warns(UserWarning, match="not the checkpoint selected"):
        result4 = trainer4.test(
            TinyEmbedder(), test_loader, ckpt_path=select2.last_model_path, verbose=False
        )[0]
    assert not any(key.startswith("selection/") for key in result4)


# ---------------------------------------------------------------------- refusals


@pytest.mark.parametrize("monitor", ["test/map_at_r", "test_loss", "metrics/test/rsum", "TEST/r1"])
def test_refuses_a_test_monitor(monitor):
    with pytest.raises(ValueError, match=r"names a test metric.*validation loop"):
        SelectOnValidation(monitor=monitor)


def test_refuses_options_that_cannot_select():
    with pytest.raises(ValueError, match="val_check_interval"):
        SelectOnValidation(monitor=MONITOR, every_n_train_steps=5)
    with pytest.raises(ValueError, match="save_top_k=1"):
        SelectOnValidation(monitor=MONITOR, save_top_k=0)
    with pytest.raises(ValueError, match="validation metric"):
        SelectOnValidation(monitor=None)


def test_refuses_a_monitor_logged_in_training(tmp_path):
    L.seed_everything(0, verbose=False)
    train, val, _, _ = loaders()
    select = SelectOnValidation(monitor="train/loss", mode="min", dirpath=tmp_path / "ckpt")
    trainer = make_trainer(tmp_path, [select], max_epochs=1)
    with pytest.raises(ValueError, match=r"not produced in the validation loop.*validation_step"):
        trainer.fit(TinyEmbedder(), train, val)


class TwoValidationSets(TinyEmbedder):
    """Logs MAP@R of each validation dataloader (keys get `/dataloader_idx_N`)."""

    def __init__(self) -> None:
        super().__init__()
        self.val_maps = nn.ModuleList([self.val_map, type(self.val_map)()])

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, labels, ids = batch
        self.val_maps[dataloader_idx].update(self(x), labels, ids=ids)
        self.log(MONITOR, self.val_maps[dataloader_idx])


def test_refuses_a_validation_dataloader_that_is_also_tested(tmp_path):
    L.seed_everything(0, verbose=False)
    train, val, test_loader, _ = loaders()
    monitor = f"{MONITOR}/dataloader_idx_1"
    select = SelectOnValidation(monitor=monitor, mode="max", dirpath=tmp_path / "ckpt")
    trainer = make_trainer(tmp_path, [select], max_epochs=2)
    model = TwoValidationSets()
    trainer.fit(model, train, [val, test_loader])
    assert select.best_model_path
    with pytest.raises(ValueError, match=r"same dataset as the validation dataloader.*separate"):
        trainer.test(model, test_loader, verbose=False)


def test_a_monitor_of_the_second_validation_dataloader_selects_and_tests(tmp_path):
    """Lightning refuses a name with "dataloader_idx" logged by a callback: the test run on the
    weights selected by `val/map_at_r/dataloader_idx_1` raised after its whole loop."""
    L.seed_everything(0, verbose=False)
    train, val, test_loader, test_set = loaders()
    second = DataLoader(ClassData(10, seed=4, id_offset=30_000), batch_size=16)
    monitor = f"{MONITOR}/dataloader_idx_1"
    select = SelectOnValidation(monitor=monitor, mode="max", dirpath=tmp_path / "ckpt")
    recorder = EpochRecorder(monitor)
    trainer = make_trainer(tmp_path, [recorder, select], max_epochs=4)
    model = TwoValidationSets()
    trainer.fit(model, train, [val, second])
    best = best_epoch(recorder.values)
    for ckpt_path in (None, "best"):
        result = trainer.test(model, test_loader, ckpt_path=ckpt_path, verbose=False)[0]
        assert result["test/map_at_r"] == pytest.approx(
            weights_metric(recorder.weights[best], test_set), abs=1e-6
        )
        assert result["selection/epoch"] == best
        assert result[f"selection/{MONITOR}/val_dataloader_1"] == pytest.approx(
            recorder.values[best], abs=1e-6
        )


class ScriptedScores(L.LightningModule):
    """Logs the monitor's value given for an epoch (none for epochs left out) at the end of
    each validation; trains a little so that every step's weights differ."""

    def __init__(self, scores: dict[int, float]) -> None:
        super().__init__()
        self.lin, self.scores = nn.Linear(8, 4), scores

    def training_step(self, batch, batch_idx):
        return nn.functional.cross_entropy(self.lin(batch[0]), batch[1])

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", nn.functional.cross_entropy(self.lin(batch[0]), batch[1]))

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking and self.current_epoch in self.scores:
            self.log(MONITOR, self.scores[self.current_epoch])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _scripted_fit(tmp_path, scores, epochs, train_batches=4, **options):
    torch.manual_seed(0)
    x, y = torch.randn(16 * train_batches, 8), torch.arange(16 * train_batches) % 4
    train = DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    val = DataLoader(torch.utils.data.TensorDataset(x[:32], y[:32]), batch_size=16)
    trainer_options = {k: options.pop(k) for k in ("val_check_interval",) if k in options}
    select = SelectOnValidation(monitor=MONITOR, mode="max", dirpath=tmp_path / "ckpt", **options)
    trainer = make_trainer(tmp_path, [select], max_epochs=epochs, num_sanity_val_steps=0,
                           **trainer_options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(ScriptedScores(scores), train, val)
    said = [str(w.message) for w in caught if "SelectOnValidation" in str(w.message)]
    return select, said


def test_a_validation_that_does_not_log_the_monitor_makes_no_candidate(tmp_path):
    """The monitor logged at epochs 0 and 2 only: epochs 1 and 3 kept epoch 0's value in
    callback_metrics and became candidates with it (kept: epochs 0 and 1)."""
    select, _ = _scripted_fit(tmp_path, {0: 0.9, 2: 0.8}, epochs=4, save_top_k=2)
    records = [torch.load(p, weights_only=False)[SELECTION_KEY] for p in select.best_k_models]
    assert sorted((r["epoch"], r["score"]) for r in records) == [
        (0, pytest.approx(0.9)), (2, pytest.approx(0.8))
    ]


def test_validations_off_the_epoch_end_with_save_on_train_epoch_end_are_said(tmp_path):
    """Validations at steps 4 and 8 of 9-step epochs; save_on_train_epoch_end=True saves only
    at step 9, whose weights were never validated: nothing is selected, and fit says why."""
    select, said = _scripted_fit(
        tmp_path, {0: 0.5, 1: 0.7}, epochs=2, train_batches=9, val_check_interval=0.5,
        save_on_train_epoch_end=True,
    )
    assert select.best_model_path == ""
    assert any("step 9" in m and "measured at step 8" in m for m in said), said
    assert any("no validated weights came to be saved" in m for m in said), said


def test_a_nan_monitor_is_said_and_recorded_as_logged(tmp_path):
    nan = float("nan")
    select, said = _scripted_fit(tmp_path, {0: nan, 1: nan}, epochs=2)
    assert any("is NaN at epoch 0" in m for m in said), said
    assert select.selection["epoch"] == 0 and math.isnan(select.selection["score"])


class LogsTestMetricsWhileFitting(TinyEmbedder):
    """Evaluates the test split at every validation: its numbers could feed the choice."""

    def __init__(self, test_set: ClassData) -> None:
        super().__init__()
        self.test_set = test_set

    def on_validation_epoch_end(self):
        self.log("test/map_at_r", map_at_r(self, self.test_set))


def test_refuses_test_metrics_that_feed_the_choice(tmp_path):
    L.seed_everything(0, verbose=False)
    train, val, _, test_set = loaders()
    select = SelectOnValidation(monitor=MONITOR, mode="max", dirpath=tmp_path / "ckpt")
    trainer = make_trainer(tmp_path, [select], max_epochs=1)
    with pytest.raises(ValueError, match=r"test metrics \['test/map_at_r'\].*after fit"):
        trainer.fit(LogsTestMetricsWhileFitting(test_set), train, val)


class RunsTestDuringFit(Callback):
    """Runs the test loop inside fit, where its numbers could feed the choice."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def on_train_epoch_end(self, trainer, pl_module):
        trainer.test(pl_module, self.loader, verbose=False)


def test_refuses_a_test_loop_during_fit(tmp_path):
    L.seed_everything(0, verbose=False)
    train, val, test_loader, _ = loaders()
    select = SelectOnValidation(monitor=MONITOR, mode="max", dirpath=tmp_path / "ckpt")
    trainer = make_trainer(tmp_path, [RunsTestDuringFit(test_loader), select], max_epochs=1)
    with pytest.raises(RuntimeError, match=r"test loop ran during fit.*after trainer\.fit"):
        trainer.fit(TinyEmbedder(), train, val)


def test_refuses_validation_and_test_sets_that_share_ids(tmp_path):
    trainer, model, _, _ = fit(tmp_path, max_epochs=1)
    # other points, but ids 10000.. as in the validation set: 60 of them are shared
    shared = DataLoader(ClassData(10, seed=7, id_offset=10_000), batch_size=16)
    with pytest.raises(ValueError, match=r"60 of the 60 test sample ids.*disjoint"):
        trainer.test(model, shared, verbose=False)
    # partly shared: 20 ids in common
    partial = DataLoader(ClassData(10, seed=7, id_offset=10_040), batch_size=16)
    with pytest.raises(ValueError, match=r"20 of the 60 test sample ids"):
        trainer.test(model, partial, verbose=False)
    # disjoint ids pass
    _, _, test_loader, _ = loaders()
    assert "selection/epoch" in trainer.test(model, test_loader, verbose=False)[0]


def test_check_ids_false_skips_the_comparison(tmp_path):
    trainer, model, _, _ = fit(tmp_path, max_epochs=1, check_ids=False)
    shared = DataLoader(ClassData(10, seed=7, id_offset=10_000), batch_size=16)
    result = trainer.test(model, shared, verbose=False)[0]
    assert result["selection/epoch"] == 0


def test_warns_when_no_validation_metric_was_logged(tmp_path):
    L.seed_everything(0, verbose=False)
    train, _, test_loader, _ = loaders()
    select = SelectOnValidation(monitor=MONITOR, mode="max", dirpath=tmp_path / "ckpt")
    trainer = make_trainer(tmp_path, [select], max_epochs=1)
    model = TinyEmbedder()
    with pytest.warns(UserWarning, match="no metric was logged in the validation loop"):
        trainer.fit(model, train)
    assert select.best_model_path == ""
    with pytest.warns(UserWarning, match="has selected no checkpoint"):
        result = trainer.test(model, test_loader, verbose=False)[0]
    assert "test/map_at_r" in result
    assert not any(key.startswith("selection/") for key in result)


# ---------------------------------------------------------------------- resume, new processes


class ScriptedWithTest(ScriptedScores):
    """``ScriptedScores`` with a test loop (a cross-entropy, no library metric)."""

    def test_step(self, batch, batch_idx):
        self.log("test/loss", nn.functional.cross_entropy(self.lin(batch[0]), batch[1]))


class PathHyperparameter(ScriptedWithTest):
    """Saves a ``pathlib.Path`` hyperparameter, which torch's weights-only unpickler refuses."""

    def __init__(self, scores: dict[int, float], data_dir: Path = Path("/data/coco")) -> None:
        super().__init__(scores)
        self.save_hyperparameters()


class EpochsTrained(Callback):
    def __init__(self) -> None:
        self.epochs: list[int] = []

    def on_train_epoch_start(self, trainer, pl_module):
        self.epochs.append(trainer.current_epoch)


def _scripted_loaders():
    torch.manual_seed(0)
    x, y = torch.randn(32, 8), torch.arange(32) % 4
    train = DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)  # 2 steps an epoch
    val = DataLoader(torch.utils.data.TensorDataset(x.clone(), y.clone()), batch_size=16)
    test_x, test_y = torch.randn(32, 8), torch.arange(32) % 4
    test = DataLoader(torch.utils.data.TensorDataset(test_x, test_y), batch_size=16)
    return train, val, test


def _select(dirpath, **options) -> SelectOnValidation:
    return SelectOnValidation(monitor=MONITOR, mode="max", dirpath=dirpath, **options)


def _fit_scripted(root, select, model, epochs, **fit_kwargs):
    train, val, _ = _scripted_loaders()
    trainer = make_trainer(root, [select], max_epochs=epochs, num_sanity_val_steps=0)
    trainer.fit(model, train, val, **fit_kwargs)
    return trainer


def _selection_keys(result: dict) -> list[str]:
    return [key for key in result if key.startswith("selection/")]


@pytest.mark.parametrize("filesystem", ["local", "memory"])
@pytest.mark.parametrize(("later", "selected"), [({2: 0.6, 3: 0.4}, 0), ({2: 0.6, 3: 0.95}, 3)])
def test_a_resume_into_another_dirpath_keeps_the_selection_competing(
    tmp_path, filesystem, later, selected
):
    """Lightning's default logger writes each run to a new lightning_logs/version_N/checkpoints;
    ModelCheckpoint restores best_model_path alone then, so the first validation after the
    resume (epoch 2, 0.6) replaced the selection (epoch 0, 0.9) and was tested as it (found by
    an audit). The kept best competes with its score; a better later epoch still replaces it,
    and the earlier run's file is never removed (Lightning removes a replaced file of a remote
    filesystem, here fsspec's memory://, wherever it is)."""
    import fsspec

    scores = {0: 0.9, 1: 0.5, **later}
    base = str(tmp_path) if filesystem == "local" else f"memory://{tmp_path.name}"
    first = _select(f"{base}/run1", save_last=True)
    _fit_scripted(tmp_path, first, ScriptedWithTest(scores), epochs=2)
    kept = first.best_model_path
    assert first.selection["epoch"] == 0

    second = _select(f"{base}/run2", save_last=True)
    model = ScriptedWithTest(scores)
    fs = fsspec.core.url_to_fs(base)[0]
    try:
        with pytest.warns(UserWarning, match="dirpath has changed"):
            trainer = _fit_scripted(
                tmp_path, second, model, epochs=4, ckpt_path=first.last_model_path
            )
        assert second.selection["epoch"] == selected
        assert second.selection["score"] == pytest.approx(scores[selected])
        assert fs.exists(kept)  # the earlier run's best is where it was
        candidates = [
            name for name in (p.rsplit("/", 1)[-1] for p in fs.ls(f"{base}/run2", detail=False))
            if name != "last.ckpt"
        ]
        if selected == 0:
            assert second.best_model_path == kept
            assert candidates == []  # epochs 2 and 3 were worse: not kept
        else:
            assert candidates == [second.best_model_path.rsplit("/", 1)[-1]]
            assert list(second.best_k_models) == [second.best_model_path]
        _, _, test = _scripted_loaders()
        result = trainer.test(model, test, verbose=False)[0]
        assert result["selection/epoch"] == selected
        assert result[f"selection/{MONITOR}"] == pytest.approx(scores[selected])
    finally:
        if filesystem == "memory":
            fs.rm(f"/{tmp_path.name}", recursive=True)


@pytest.mark.parametrize(
    ("save_top_k", "tested_epoch", "recorded", "labelled"),
    [
        (-1, 0, True, False),  # the best when written, not the final choice (epoch 1)
        (-1, 1, True, False),  # the final choice, which the file alone cannot tell
        (1, 1, True, True),  # the one file kept is the choice
        (1, 1, False, False),  # written before save_top_k was recorded in the state
    ],
)
def test_a_new_process_labels_a_tested_file_the_selection_only_where_it_can_tell(
    tmp_path, save_top_k, tested_epoch, recorded, labelled
):
    """A new Trainer tested a kept file that was the best when written but not the final choice
    (save_top_k=-1) as the selection, with selection/... keys and no warning: the callback
    state it restores comes from that file (found by an audit)."""
    scores = {0: 0.7, 1: 0.9, 2: 0.5}
    select = _select(tmp_path / "ckpt", save_top_k=save_top_k)
    _fit_scripted(tmp_path, select, ScriptedWithTest(scores), epochs=3)
    assert select.selection["epoch"] == 1
    path = str(tmp_path / "ckpt" / f"epoch={tested_epoch}-step={2 * tested_epoch + 2}.ckpt")
    if not recorded:
        checkpoint = load_file(path)
        for key, state in checkpoint["callbacks"].items():
            if key.startswith("SelectOnValidation"):
                state.pop("save_top_k", None)
        torch.save(checkpoint, path)

    _, _, test = _scripted_loaders()
    fresh = _select(tmp_path / "ckpt", save_top_k=save_top_k)
    trainer = make_trainer(tmp_path, [fresh])
    model = ScriptedWithTest(scores)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = trainer.test(model, test, ckpt_path=path, verbose=False)[0]
    said = [str(w.message) for w in caught if "SelectOnValidation" in str(w.message)]
    if labelled:
        assert said == []
        assert result["selection/epoch"] == tested_epoch
        assert fresh.test_selection["epoch"] == tested_epoch
        return
    kept = "earlier version" if not recorded else f"save_top_k={save_top_k}"
    assert any(
        "this process did not run fit" in m and "cannot tell whether a later epoch" in m
        and kept in m for m in said
    ), said
    assert _selection_keys(result) == [] and fresh.test_selection is None
    # nor does a test without ckpt_path in this process load and label that file
    with pytest.warns(UserWarning, match="this process did not run fit"):
        again = trainer.test(model, test, verbose=False)[0]
    assert _selection_keys(again) == []


def test_a_test_without_ckpt_path_loads_the_file_it_wrote_whole(tmp_path):
    """A checkpoint with a pathlib.Path hyperparameter: trainer.test(model, ...) raised torch's
    UnpicklingError, also with weights_only=False (not passed on by Lightning)."""
    scores = {0: 0.9, 1: 0.5}
    select = _select(tmp_path / "ckpt")
    model = PathHyperparameter(scores)
    trainer = _fit_scripted(tmp_path, select, model, epochs=2)
    _, _, test = _scripted_loaders()
    for kwargs in ({}, {"weights_only": False}):
        result = trainer.test(model, test, verbose=False, **kwargs)[0]
        assert result["selection/epoch"] == 0


def test_a_selection_of_a_resumed_state_that_needs_weights_only_false_says_so(tmp_path):
    scores = {0: 0.9, 1: 0.5, 2: 0.4}
    first = _select(tmp_path / "ckpt", save_last=True)
    _fit_scripted(tmp_path, first, PathHyperparameter(scores), epochs=2)
    second = _select(tmp_path / "ckpt", save_last=True)
    model = PathHyperparameter(scores)
    trainer = _fit_scripted(
        tmp_path, second, model, epochs=3, ckpt_path="last", weights_only=False
    )
    assert second.best_model_path == first.best_model_path  # written by the first run
    _, _, test = _scripted_loaders()
    import pickle

    with pytest.raises(
        pickle.UnpicklingError,
        match=r"SelectOnValidation: the selected checkpoint .*epoch=0-step=2\.ckpt.*"
        r'ckpt_path="best", weights_only=False',
    ):
        trainer.test(model, test, verbose=False)
    # the remedy it names
    result = trainer.test(model, test, ckpt_path="best", weights_only=False, verbose=False)[0]
    assert result["selection/epoch"] == 0


@pytest.mark.parametrize("save_on_train_epoch_end", [None, True])
def test_last_ckpt_is_written_at_every_validation_with_every_n_epochs(
    tmp_path, save_on_train_epoch_end
):
    """every_n_epochs=2: last.ckpt was written only at the epochs it names (epoch 1), so after
    three epochs a resume from "last" trained epoch 2 again (found by an audit)."""
    scores = {0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4}
    options = {"save_last": True, "every_n_epochs": 2,
               "save_on_train_epoch_end": save_on_train_epoch_end}
    select = _select(tmp_path / "ckpt", **options)
    _fit_scripted(tmp_path, select, ScriptedWithTest(scores), epochs=3)
    last = load_file(select.last_model_path)
    assert (last["epoch"], last["global_step"]) == (2, 6)
    assert select.selection["epoch"] == 1  # top-k still only on the epochs every_n_epochs names

    resumed = _select(tmp_path / "ckpt", **options)
    trained = EpochsTrained()
    train, val, _ = _scripted_loaders()
    trainer = make_trainer(tmp_path, [trained, resumed], max_epochs=4, num_sanity_val_steps=0)
    trainer.fit(ScriptedWithTest(scores), train, val, ckpt_path="last")
    assert trained.epochs == [3]
    assert resumed.selection["epoch"] == 3


# ---------------------------------------------------------------------- DDP


@pytest.mark.timeout(400)
def test_ddp_tests_the_selected_weights_on_every_rank(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert result["world_size"] == 2
    values = {int(e): v for e, v in result["val_by_epoch"].items()}
    best = best_epoch(values)
    assert best != max(values)
    assert result["selection"]["epoch"] == best
    assert result["test"]["selection/epoch"] == best
    assert result["test"][f"selection/{MONITOR}"] == pytest.approx(values[best], abs=1e-6)

    # the single-process metric of the best checkpoint's weights, on the whole test set
    _, _, _, test_set = loaders()
    state = load_file(result["best_model_path"])["state_dict"]
    assert result["test"]["test/map_at_r"] == pytest.approx(
        weights_metric(state, test_set), abs=1e-6
    )
    # every rank loaded the same file, and tested exactly those weights
    assert ranks[0]["best_model_path"] == ranks[1]["best_model_path"]
    assert ranks[0]["hash"] == ranks[1]["hash"] == params_hash(_module(state))
    assert ranks[0]["test"] == ranks[1]["test"]
    # ckpt_path="best" tests the same file and reports the same
    for rank in ranks:
        assert rank["test_best"] == pytest.approx(result["test"], abs=1e-7)


@pytest.mark.timeout(300)
def test_strategies_that_spawn_processes_per_call_are_refused(tmp_path):
    """Under ddp_spawn the selection record and the validation ids live in the processes fit
    starts, and are gone when it returns: the test guard was silently skipped and the model in
    the main process kept the last weights (found by an audit). Refused, naming strategy='ddp'."""
    select = SelectOnValidation(monitor=MONITOR, mode="max", dirpath=tmp_path / "ckpt")
    trainer = make_trainer(tmp_path, [select], max_epochs=1, strategy="ddp_spawn")
    train, val, _, _ = loaders()
    with pytest.raises(Exception, match=r"starts its processes with 'spawn'.*strategy='ddp'"):
        trainer.fit(TinyEmbedder(), train, val)
