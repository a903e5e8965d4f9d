"""The examples run end to end, the way a user runs them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(name: str, tmp_path: Path, *args: str, stderr: list[str] | None = None) -> str:
    """The example's standard output (its standard error appended to ``stderr`` where given)."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if stderr is not None:
        stderr.append(proc.stderr)
    return proc.stdout


def test_quickstart(tmp_path):
    out = run("quickstart.py", tmp_path)
    assert "hit_rate@1" in out and "map@r" in out and "chance" in out


@pytest.mark.timeout(300)
def test_image_text_selection(tmp_path):
    out = run("image_text_selection.py", tmp_path)
    assert "selected epoch" in out and "val/rsum" in out
    assert "1K protocol" in out and "5K protocol" in out and out.count("rsum") >= 3


@pytest.mark.timeout(300)
def test_bi_encoder_on_two_ddp_processes_logs_the_one_process_value(tmp_path):
    """The qrels example under Trainer(devices=2, strategy="ddp"): queries and corpus spread
    over two processes with the sampler's padding (151 queries, 401 documents); the selected
    epoch's logged val/ndcg@10 equals the same weights scored in one process, and the test ran
    on the selection."""
    out = run("bi_encoder.py", tmp_path, "--devices", "2", "--epochs", "2")
    logged = re.search(r"selected epoch \d+: val/ndcg@10 = ([0-9.]+)", out)
    alone = re.search(r"in one process: val/ndcg@10 = ([0-9.]+)", out)
    assert logged and alone, out
    assert float(logged.group(1)) == float(alone.group(1)) > 0
    assert "'test/ndcg@10'" in out and "'selection/epoch'" in out
    # the checkpoints went to a temporary folder: nothing written in the working directory
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(300)
def test_bi_encoder_in_one_process_does_not_score_the_sanity_check(tmp_path):
    """Lightning's sanity check feeds two batches of the corpus: the example scores no such
    partial corpus, so no warning says that judged documents are missing from it."""
    errors: list[str] = []
    out = run("bi_encoder.py", tmp_path, "--epochs", "1", stderr=errors)
    assert "selected epoch" in out
    assert "not in the corpus" not in errors[0], errors[0][-2000:]
