"""The examples run end to end, the way a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(name: str, tmp_path: Path) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_quickstart(tmp_path):
    out = run("quickstart.py", tmp_path)
    assert "hit_rate@1" in out and "map@r" in out and "chance" in out


@pytest.mark.timeout(300)
def test_image_text_selection(tmp_path):
    out = run("image_text_selection.py", tmp_path)
    assert "selected epoch" in out and "val/rsum" in out
    assert "1K protocol" in out and "5K protocol" in out and out.count("rsum") >= 3
