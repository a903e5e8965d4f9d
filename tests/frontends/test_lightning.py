"""Lightning: the logged values under Trainer(devices=2, strategy="ddp") equal one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "distributed"


def run_ddp_script(name: str, tmp_path: Path) -> dict:
    """``python tests/distributed/NAME OUT ROOT`` (Lightning starts the second process); the JSON
    that rank 0 wrote."""
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(HERE / name), str(out), str(tmp_path / "ckpt")],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=360,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.timeout(400)
def test_ddp_logged_values_equal_single_process(tmp_path):
    result = run_ddp_script("lightning_ddp.py", tmp_path)
    for key, value in result["reference"].items():
        assert result["logged"][key] == pytest.approx(value, abs=1e-6), key
    # ModelCheckpoint chose by the logged metric
    assert result["best_model_path"].endswith(".ckpt")
    assert result["best_model_score"] >= result["logged"]["val/map_at_r"] - 1e-6


def test_example_module_single_device(tmp_path):
    example = Path(__file__).resolve().parents[2] / "examples" / "lightning_module.py"
    proc = subprocess.run(
        [sys.executable, str(example), "--epochs", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "val/map_at_r" in proc.stdout and "best checkpoint" in proc.stdout
    # the checkpoints went to a temporary folder: nothing written in the working directory
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(400)
def test_ddp_rsum_without_ids_selects_the_epoch_one_process_would(tmp_path):
    result = run_ddp_script("rsum_ddp.py", tmp_path)
    logged, single = result["logged"], result["single"]
    assert logged.keys() == single.keys() and len(single) == 4
    for epoch, value in single.items():
        assert value == value and 0 < value <= 600  # a real rsum, not NaN
        assert logged[epoch] == pytest.approx(value, abs=1e-3), epoch
    # no text_ids on two processes: warned once (the metric object lives through every epoch)
    assert len(result["no_ids_warnings"]) == 1, result["no_ids_warnings"]
    assert "RSum" in result["no_ids_warnings"][0]
    assert "`text_ids=`" in result["no_ids_warnings"][0]
    best = max(single, key=single.get)
    assert result["selection"]["epoch"] == int(best)
    assert result["selection"]["score"] == pytest.approx(single[best], abs=1e-3)


def _validate(pl, module, root: Path) -> None:
    """trainer.validate of ``module`` on 16 random 4-d samples of 4 labels, on the CPU."""
    import torch

    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.arange(16) % 4)
    trainer = pl.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=root,
    )
    trainer.validate(module, torch.utils.data.DataLoader(data, batch_size=8))


def test_a_metric_of_several_values_logged_with_self_log_points_to_log_dict(tmp_path):
    # Lightning alone says the compute() return "must be a tensor", naming no way out
    pl = pytest.importorskip("lightning.pytorch")
    import torch

    import retrieval_metrics as rm

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 4)
            self.metric = rm.HitRateAtK(k=(1, 5))

        def validation_step(self, batch, index):
            x, y = batch
            self.metric.update(self.layer(x), y)
            self.log("val/hit", self.metric)

    with pytest.raises(ValueError, match=r"\(hit_rate@1, hit_rate@5\), and self.log\('val/hit', "
                       r"metric\) logs one tensor.*self.log_dict\(metric.compute\(\)"):
        _validate(pl, Module(), tmp_path)
    # compute() called directly still returns the dict
    # (each item's nearest other item is the other of its label: hit rate @1 and @2 are 1)
    metric = rm.HitRateAtK(k=(1, 2))
    metric.update(torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]]),
                  torch.tensor([0, 0, 1, 1]))
    assert {k: float(v) for k, v in metric.compute().items()} == {
        "hit_rate@1": 1.0, "hit_rate@2": 1.0}


def test_log_dict_of_a_metric_object_says_how_to_log_it(tmp_path):
    # Lightning reads log_dict's argument as a mapping: an AttributeError ('items') before
    pl = pytest.importorskip("lightning.pytorch")
    import torch

    import retrieval_metrics as rm

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 4)
            self.metrics = rm.RetrievalMetrics(["map@r", "recall@2"], prefix="val/")

        def validation_step(self, batch, index):
            x, y = batch
            self.metrics.update(self.layer(x), y)
            self.log_dict(self.metrics)

    with pytest.raises(TypeError, match=r"RetrievalMetrics is a metric, not a dict.*"
                       r"self.log_dict\(metric.compute\(\), sync_dist=True, reduce_fx=.max.\)"):
        _validate(pl, Module(), tmp_path)
