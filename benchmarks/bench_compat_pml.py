"""Benchmark: the compat AccuracyCalculator against pytorch-metric-learning's, SOP-sized.

What it measures (all in one run, on this machine):

* Data: bench_ranking.py's synthetic Stanford-Online-Products-sized split: ``--n`` items (60,502)
  of dimension ``--dim`` (128), about 11,300 classes of 2..12 items, unit class centres plus
  noise (hit rate@1 ~ 0.77, a decent model), normalised, shuffled, fixed seed.
* pml: ``pytorch_metric_learning.utils.accuracy_calculator.AccuracyCalculator(exclude=("NMI",
  "AMI"), k="max_bin_count").get_accuracy(emb, labels)`` (faiss IndexFlatL2 kNN, k = 11). The
  baseline of every ratio.
* compat: ``retrieval_metrics.compat.pml.AccuracyCalculator`` with the same arguments.
* compat k=None: the same with ``k=None`` (the whole ranking: full mAP and MRR). PML's k=None
  would hold the n x n neighbour matrix (distances float32 + indices int64, 44 GB at n =
  60,502), so it is not run; the table gives that size.
* NMI and AMI are left out of both: they run the same faiss k-means in both libraries.

Each method runs in its own subprocess (this script with the hidden ``--only METHOD``) so that its
peak RSS (VmHWM) is its own; a child times ``--repeats`` runs (default 3) and reports the median
wall time and the median CPU time of the process (all its threads; steadier than wall time on a
shared machine, whose load average goes into the JSON).
The values of the five keys are compared between compat and pml (exact distance ties are not
expected in float data of this kind, so they agree to float rounding).

Run (from the repository root, with the project's venv active, on a quiet machine):

    python benchmarks/bench_compat_pml.py             # full size, a few minutes on 2 cores
    python benchmarks/bench_compat_pml.py --small     # smoke run: n = 6000

It prints a table and writes ``benchmarks/results/bench_compat_pml.json`` and ``.txt``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ranking import (  # the SOP-shaped data generator and the RSS readers
    DEFAULT_N,
    SMALL_N,
    cpu_model,
    current_rss_mib,
    make_data,
    peak_rss_mib,
    set_threads,
    version_of,
)

KEYS = (
    "precision_at_1",
    "r_precision",
    "mean_average_precision_at_r",
    "mean_average_precision",
    "mean_reciprocal_rank",
)
METHODS = {
    "pml": "pml AccuracyCalculator (k='max_bin_count')",
    "compat": "compat AccuracyCalculator (k='max_bin_count')",
    "compat_full": "compat AccuracyCalculator (k=None)",
}
MARKER = "@@BENCH_RESULT "
RESULTS = Path(__file__).resolve().parent / "results"
AGREEMENT_TOL = 1e-5


def child_main(args: argparse.Namespace) -> None:
    set_threads(args.threads)
    logging.disable(logging.WARNING)  # both libraries log every kNN run
    import faiss

    faiss.omp_set_num_threads(args.threads)
    emb, labels = make_data(args.n, args.dim)
    rss_before = current_rss_mib()
    if args.only == "pml":
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    else:
        from retrieval_metrics.compat.pml import AccuracyCalculator
    k = None if args.only == "compat_full" else "max_bin_count"
    calc = AccuracyCalculator(exclude=("NMI", "AMI"), k=k, device=torch.device("cpu"))
    times, cpu_times, values = [], [], {}
    for _ in range(args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        values = calc.get_accuracy(emb, labels)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    result = {
        "times": times,
        "seconds": statistics.median(times),
        "cpu_times": cpu_times,
        "cpu_seconds": statistics.median(cpu_times),
        "values": values,
        "rss_before_mib": rss_before,
        "peak_rss_mib": peak_rss_mib(),
    }
    print(MARKER + json.dumps(result), flush=True)


def run_child(method: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--only", method, "--n", str(args.n)]
    cmd += ["--dim", str(args.dim), "--threads", str(args.threads)]
    cmd += ["--repeats", str(args.repeats)]
    print(f"  running {METHODS[method]} (n={args.n}) ...", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    return {"error": f"exit status {proc.returncode}", "stdout_tail": proc.stdout[-2000:]}


def parent_main(args: argparse.Namespace) -> int:
    results = {method: run_child(method, args) for method in METHODS}
    failed = [m for m, r in results.items() if "error" in r]
    if failed:
        print(json.dumps({m: results[m] for m in failed}, indent=1), file=sys.stderr)
        return 1
    base = results["pml"]
    lines = [
        f"machine: {cpu_model()}, {args.threads} threads, torch {torch.__version__}, "
        f"pml {version_of('pytorch_metric_learning')}, faiss {version_of('faiss')}, "
        f"python {platform.python_version()}",
        f"data: n={args.n}, D={args.dim} (bench_ranking.make_data, seed 0); "
        f"median of {args.repeats} runs per method, each method in its own process",
        "",
        f"{'method':<48} {'seconds':>8} {'pml / this':>11} {'CPU s':>8} {'pml / this':>11} "
        f"{'peak RSS MiB':>13} {'RSS before':>11} {'RSS vs pml':>11}",
    ]
    for method, label in METHODS.items():
        r = results[method]
        lines.append(
            f"{label:<48} {r['seconds']:>8.2f} {base['seconds'] / r['seconds']:>11.2f} "
            f"{r['cpu_seconds']:>8.2f} {base['cpu_seconds'] / r['cpu_seconds']:>11.2f} "
            f"{r['peak_rss_mib']:>13.0f} {r['rss_before_mib']:>11.0f} "
            f"{r['peak_rss_mib'] / base['peak_rss_mib']:>11.3f}"
        )
    full_matrix_gib = args.n * args.n * (4 + 8) / 2**30
    lines.append(
        f"{'pml AccuracyCalculator (k=None)':<48} not run: its n x n neighbour matrix alone is "
        f"{full_matrix_gib:.1f} GiB"
    )
    lines += ["", f"{'key':<30} {'pml':>10} {'compat':>10} {'|diff|':>9} {'compat k=None':>14}"]
    agreement = {}
    for key in KEYS:
        theirs, ours = base["values"][key], results["compat"]["values"][key]
        diff = abs(theirs - ours)
        agreement[key] = {"pml": theirs, "compat": ours, "abs_diff": diff}
        full = results["compat_full"]["values"][key]
        lines.append(f"{key:<30} {theirs:>10.6f} {ours:>10.6f} {diff:>9.1e} {full:>14.6f}")
    ok = all(a["abs_diff"] <= AGREEMENT_TOL for a in agreement.values())
    lines.append(f"compat = pml to {AGREEMENT_TOL:g} on every key: {'PASS' if ok else 'FAIL'}")
    text = "\n".join(lines)
    print(text)
    if not args.small:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "bench_compat_pml.txt").write_text(text + "\n")
        payload = {"n": args.n, "dim": args.dim, "repeats": args.repeats, "results": results}
        payload["agreement"] = agreement
        payload["time_ratio_pml_over_compat"] = base["seconds"] / results["compat"]["seconds"]
        payload["cpu_ratio_pml_over_compat"] = (
            base["cpu_seconds"] / results["compat"]["cpu_seconds"]
        )
        payload["load_average"] = os.getloadavg()
        payload["rss_ratio_compat_over_pml"] = (
            results["compat"]["peak_rss_mib"] / base["peak_rss_mib"]
        )
        (RESULTS / "bench_compat_pml.json").write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {RESULTS / 'bench_compat_pml.json'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small", action="store_true", help=f"n={SMALL_N}, results not saved")
    parser.add_argument("--only", choices=tuple(METHODS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.n is None:
        args.n = SMALL_N if args.small else DEFAULT_N
    if args.only:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
