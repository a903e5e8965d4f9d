"""Start WORLD real processes on one gloo process group and collect what each wrote as JSON.

Every run has a timeout; on failure or timeout every process is killed, so no test can hang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TIMEOUT = 240


def run_workers(script: Path, args: list[str], world: int, tmp_path: Path) -> list[dict]:
    """``python SCRIPT RANK WORLD INIT_FILE *ARGS OUT`` for every rank; their JSON outputs."""
    init_file = tmp_path / "init"
    outs = [tmp_path / f"out{r}.json" for r in range(world)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(world), str(init_file), *args, str(outs[r])],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    logs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT)
            logs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} failed:\n{logs[r] if r < len(logs) else ''}"
    return [json.loads(o.read_text()) for o in outs]
