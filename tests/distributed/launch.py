"""Start WORLD real processes on one gloo process group and collect what each wrote as JSON.

Every run has a timeout; on failure or timeout every process is killed, so no test can hang.
:func:`worker_main` is the other side: what a worker script runs in each process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def worker_main(run: Callable[..., dict[str, Any]]) -> None:
    """A worker process of :func:`run_workers`: ``python SCRIPT RANK WORLD INIT_FILE *ARGS OUT``.
    Joins the gloo group (one thread), writes ``run(rank, world, *ARGS)`` to OUT as JSON, and
    leaves the group whatever happens."""
    import torch
    import torch.distributed as dist

    rank, world, init_file, *args, out = sys.argv[1:]
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=int(rank), world_size=int(world)
    )
    try:
        Path(out).write_text(json.dumps(run(int(rank), int(world), *args)))
    finally:
        dist.destroy_process_group()
