"""Timing and memory readers the benchmark scripts share (standard library only).

Standard library only, so that a parent process that must stay small (bench_stress.py) can
import it without torch.
"""

from __future__ import annotations

import contextlib
import platform
import resource
import time
from collections.abc import Callable
from typing import Any

MIB = 2**20
SLOW_SECONDS = 60.0  # a run slower than this is timed once

#: a faster machine's square-GEMM rate (GFLOP/s; a 2-core VM the issue measured): the ratio
#: a benchmark's classes path would have there, its products at that rate, the rest as measured
FAST_GEMM = 322


def ru_maxrss_mib() -> float:
    """``getrusage().ru_maxrss``. Beware: Linux carries it over fork + exec, so a child starts
    with its parent's resident size at the fork; :func:`peak_rss_mib` is the child's own peak."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB  # Linux: KiB


def proc_status_mib(field: str) -> float | None:
    """A size field of /proc/self/status (VmRSS, VmHWM) in MiB, or None without /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024 / MIB  # kB
    except OSError:
        pass
    return None


def reset_peak_rss() -> None:
    """Reset this process's high-water mark of resident memory (VmHWM) to what it holds now,
    so that a peak read later is the work's own (Linux; OSError where /proc cannot do it)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mib() -> float:
    """Peak resident set size of this process image (VmHWM; ru_maxrss where there is no /proc)."""
    peak = proc_status_mib("VmHWM")
    return ru_maxrss_mib() if peak is None else peak


def current_rss_mib() -> float:
    rss = proc_status_mib("VmRSS")
    return float("nan") if rss is None else rss


def timed(fn: Callable[[], Any], repeats: int = 2) -> tuple[list[float], Any]:
    """Run ``fn`` up to ``repeats`` times (once if it is slow); all times and the last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
        if times[-1] > SLOW_SECONDS:
            break
    return times, result


def load_metric_classes() -> None:
    """Make a metric class of each kind once, so that what the classes import when the first is
    made (torchmetrics, lazily since the package's faces load on demand) is not in a timing."""
    import retrieval_metrics as rm

    rm.RetrievalMetrics(["hit_rate@1"])
    rm.CrossModalRetrieval(k=(1,))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@contextlib.contextmanager
def timed_products(device: str):
    """The seconds spent inside ``torch.mm`` while active (``[seconds]``), on the CPU (where a
    product's time is its call's); on a device, nothing is timed."""
    import torch

    spent = [0.0]
    original = torch.mm
    if device != "cpu":
        yield spent
        return

    def mm(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t0

    torch.mm = mm
    try:
        yield spent
    finally:
        torch.mm = original
