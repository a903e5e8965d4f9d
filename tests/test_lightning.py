"""Lightning: the logged values under Trainer(devices=2, strategy="ddp") equal one process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "distributed" / "lightning_ddp.py"


@pytest.mark.timeout(400)
def test_ddp_logged_values_equal_single_process(tmp_path):
    out = tmp_path / "result.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), str(tmp_path / "ckpt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=360,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for key, value in result["reference"].items():
        assert result["logged"][key] == pytest.approx(value, abs=1e-6), key
    # ModelCheckpoint chose by the logged metric
    assert result["best_model_path"].endswith(".ckpt")
    assert result["best_model_score"] >= result["logged"]["val/map_at_r"] - 1e-6


def test_example_module_single_device(tmp_path):
    example = Path(__file__).resolve().parents[1] / "examples" / "lightning_module.py"
    proc = subprocess.run(
        [sys.executable, str(example), "--epochs", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "val/map_at_r" in proc.stdout and "best checkpoint" in proc.stdout


@pytest.mark.timeout(400)
def test_ddp_rsum_without_ids_selects_the_epoch_one_process_would(tmp_path):
    out = tmp_path / "result.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "rsum_ddp.py"), str(out), str(tmp_path / "ckpt")],
        env=env,
        capture_output=True,
        text=True,
        timeout=360,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    logged, single = result["logged"], result["single"]
    assert logged.keys() == single.keys() and len(single) == 4
    for epoch, value in single.items():
        assert value == value and 0 < value <= 600  # a real rsum, not NaN
        assert logged[epoch] == pytest.approx(value, abs=1e-3), epoch
    best = max(single, key=single.get)
    assert result["selection"]["epoch"] == int(best)
    assert result["selection"]["score"] == pytest.approx(single[best], abs=1e-3)
