"""The test harness's process launcher (tests/distributed/launch.py): a rank that fails ends
the run at once with its traceback, the ranks waiting for it killed, not left to the timeout;
the workers see the test's environment as it is at the call."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "distributed"
sys.path.insert(0, str(HERE))

import launch  # noqa: E402


def test_a_failed_rank_ends_the_run_with_its_traceback(tmp_path):
    start = time.monotonic()
    with pytest.raises(AssertionError, match="rank 1 failed") as failed:
        launch.run_workers(HERE / "failing_worker.py", [], 2, tmp_path)
    assert "rank 1 fails on purpose" in str(failed.value)
    # rank 0 hangs: killed, not awaited
    assert time.monotonic() - start < launch.TIMEOUT / 4


def test_the_workers_see_the_environment_at_the_call(tmp_path, monkeypatch):
    script = tmp_path / "env_worker.py"
    script.write_text(
        "import json, os, sys\n"
        "out = sys.argv[-1]\n"
        "json.dump({'value': os.environ.get('LAUNCH_TEST_VALUE'),\n"
        "           'threads': os.environ.get('OMP_NUM_THREADS')}, open(out, 'w'))\n"
    )
    for value in ("first", "second"):
        monkeypatch.setenv("LAUNCH_TEST_VALUE", value)
        (tmp_path / value).mkdir()
        got = launch.run_workers(script, [], 2, tmp_path / value)
        assert got == [{"value": value, "threads": "1"}] * 2
    assert json.loads((tmp_path / "second" / "out1.json").read_text())["value"] == "second"
