"""Start WORLD real processes on one gloo process group and collect what each wrote as JSON.

Every run has a timeout; on failure or timeout every process is killed, so no test can hang.
:func:`worker_main` is the other side: what a worker script runs in each process.

The processes are forked from a server that has imported torch and the library's classes once
(``multiprocessing``'s forkserver): a fresh interpreter spends about 5 s of CPU importing them,
more than most workers' own work, and the suite starts some fifty. Each process is still a new
process with its own state, gloo group and environment (the test's, at the time of the call).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import runpy
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

TIMEOUT = 240
# imported once by the server the workers fork from: nothing that starts threads or reads the
# environment at import (the counting backend and Triton's interpreter are chosen at call time)
PRELOAD = ["numpy", "torch", "torch.distributed", "retrieval_metrics",
           "retrieval_metrics.metrics.named"]
_CONTEXT: list[multiprocessing.context.BaseContext] = []


def _context() -> multiprocessing.context.BaseContext:
    """The forkserver context, its server started once per test process with one OpenMP
    thread in its environment (read when torch loads, before any fork)."""
    if not _CONTEXT:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        saved = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            from multiprocessing import forkserver

            forkserver.ensure_running()
        finally:
            if saved is None:
                del os.environ["OMP_NUM_THREADS"]
            else:
                os.environ["OMP_NUM_THREADS"] = saved
        _CONTEXT.append(context)
    return _CONTEXT[0]


def _run_script(script: str, argv: list[str], environ: dict[str, str], log: str) -> None:
    """In a forked worker: ``python SCRIPT *ARGV`` with the caller's environment, its output
    (and any traceback) written to LOG."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.clear()
    os.environ.update(environ, OMP_NUM_THREADS="1")
    sys.argv = [script, *argv]
    sys.path.insert(0, str(Path(script).parent))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)


def run_workers(script: Path, args: list[str], world: int, tmp_path: Path) -> list[dict]:
    """``python SCRIPT RANK WORLD INIT_FILE *ARGS OUT`` for every rank; their JSON outputs."""
    context = _context()
    init_file = tmp_path / "init"
    outs = [tmp_path / f"out{r}.json" for r in range(world)]
    logs = [tmp_path / f"log{r}.txt" for r in range(world)]
    environ = dict(os.environ)
    procs = [
        context.Process(
            target=_run_script,
            args=(str(script), [str(r), str(world), str(init_file), *args, str(outs[r])],
                  environ, str(logs[r])),
        )
        for r in range(world)
    ]
    try:
        for p in procs:
            p.start()
        # until all have ended, one has failed (the others would wait for it in a collective)
        # or the time is up
        deadline = time.monotonic() + TIMEOUT
        running = list(procs)
        while running and time.monotonic() < deadline:
            wait([p.sentinel for p in running], deadline - time.monotonic())
            running = [p for p in procs if p.exitcode is None]
            if any(p.exitcode not in (None, 0) for p in procs):
                break
    finally:
        for p in procs:
            if p.exitcode is None:
                p.kill()
                p.join()
    failed = [f"rank {r} failed ({p.exitcode}):\n{_text(logs[r])}"
              for r, p in enumerate(procs) if p.exitcode != 0]
    assert not failed, "\n".join(failed)
    return [json.loads(o.read_text()) for o in outs]


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


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
