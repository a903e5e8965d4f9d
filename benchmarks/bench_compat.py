"""Benchmark: ``retrieval_metrics.compat.torchmetrics`` against torchmetrics' own classes.

What it measures (one process, this machine; medians of ``--repeats``, default 3):

* Data: bench_inputs.py's, ``--queries`` (100,000) x ``--candidates`` (100) float32 scores,
  distinct within a query and positive, each candidate relevant with probability 0.03, the
  (query, candidate) pairs shuffled as a shuffled DataLoader delivers them.
* The five classes hit rate@10, recall@10, MAP, MRR and NDCG@10 (``RetrievalHitRate(top_k=10)``,
  ``RetrievalRecall(top_k=10)``, ``RetrievalMAP()``, ``RetrievalMRR()``,
  ``RetrievalNormalizedDCG(top_k=10)``, torchmetrics' default ``empty_target_action="neg"``),
  each updated with the whole data and computed; the time is that of all five.
* baseline: one ``torch.topk(scores, 10)`` over the same (queries x candidates) matrix, timed
  ``--repeats`` times before each workload (median of all runs), as in bench_inputs.py.
* compat: the classes of ``retrieval_metrics.compat.torchmetrics`` (the import swap), timed
  ``--repeats`` times. torchmetrics: its own classes, timed once (it loops over the queries in
  Python and takes a minute or more). Values of the two are compared (no ties in these scores).

Run (from the repository root, with the project's venv active, on a quiet machine):

    python benchmarks/bench_compat.py --threads 1    # full size, as the results were made
    python benchmarks/bench_compat.py --small        # smoke run: 5,000 queries

On a machine shared with other work, keep ``--threads 1``: with more torch threads than free
cores, each small operation waits for its descheduled threads and times swing by tens of times.

It prints a table of ratios and writes ``benchmarks/results/bench_compat.txt`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_inputs import (
    cpu_model,
    flat_pairs,
    fmt,
    make_scores,
    median,
    table_lines,
    timed,
    version_of,
)

TOPK = 10
CLASSES = {
    "hit_rate@10": ("RetrievalHitRate", {"top_k": TOPK}),
    "recall@10": ("RetrievalRecall", {"top_k": TOPK}),
    "map": ("RetrievalMAP", {}),
    "mrr": ("RetrievalMRR", {}),
    "ndcg@10": ("RetrievalNormalizedDCG", {"top_k": TOPK}),
}
AGREEMENT_TOL = 1e-5
RESULTS = Path(__file__).resolve().parent / "results"


def five_classes(module: Any, preds, target, indexes) -> dict[str, float]:
    out = {}
    for name, (cls, kwargs) in CLASSES.items():
        metric = getattr(module, cls)(**kwargs)
        metric.update(preds, target, indexes=indexes)
        out[name] = float(metric.compute())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=None, help="queries (default 100,000)")
    parser.add_argument("--candidates", type=int, default=100, help="candidates per query")
    parser.add_argument("--small", action="store_true", help="smoke run: 5,000 queries")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing (median)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--out", default=str(RESULTS / "bench_compat"), help="output stem")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    queries = args.queries or (5_000 if args.small else 100_000)

    import torchmetrics.retrieval as tm

    import retrieval_metrics.compat.torchmetrics as compat

    scores, target = make_scores(queries, args.candidates)
    preds, tgt, indexes = flat_pairs(scores, target, shuffled=True)
    lines = [
        f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch "
        f"threads, load average at start {os.getloadavg()}, torch {torch.__version__}, "
        f"torchmetrics {version_of('torchmetrics')}",
        f"data: {queries} queries x {args.candidates} candidates, pairs shuffled, float32 "
        "scores (distinct, positive)",
    ]
    print("\n".join(lines), flush=True)
    baseline: list[float] = []

    def topk_runs() -> None:
        times, _ = timed(lambda: torch.topk(scores, TOPK, dim=1), args.repeats)
        baseline.extend(times)

    topk_runs()
    print("  running the compat classes ...", flush=True)
    ours_times, ours = timed(lambda: five_classes(compat, preds, tgt, indexes), args.repeats)
    topk_runs()
    print("  running torchmetrics' classes (once) ...", flush=True)
    start = time.perf_counter()
    theirs = five_classes(tm, preds, tgt, indexes)
    theirs_seconds = time.perf_counter() - start
    topk_runs()

    base = median(baseline)
    ours_seconds = median(ours_times)
    diff = max(abs(ours[k] - theirs[k]) for k in CLASSES)
    rows = [
        ["workload", "seconds", "x topk", "x compat"],
        [f"torch.topk(scores, {TOPK})", fmt(base, ".3f"), "1.00", fmt(base / ours_seconds, ".3f")],
        ["compat: 5 classes, update + compute", fmt(ours_seconds, ".3f"),
         fmt(ours_seconds / base, ".2f"), "1.00"],
        ["torchmetrics: 5 classes, update + compute", fmt(theirs_seconds, ".3f"),
         fmt(theirs_seconds / base, ".2f"), fmt(theirs_seconds / ours_seconds, ".1f")],
    ]
    lines += [
        f"baseline: torch.topk over {queries} x {args.candidates}: median {base:.4f} s of "
        f"{len(baseline)} runs (min {min(baseline):.4f}, max {max(baseline):.4f})",
        "",
        *table_lines(rows, right={1, 2, 3}),
        "",
        f"torchmetrics / compat: {theirs_seconds / ours_seconds:.1f}x; values "
        f"{'agree' if diff <= AGREEMENT_TOL else 'DIFFER'} (max abs difference {diff:.2e})",
        "",
        *table_lines(
            [["metric", "compat", "torchmetrics"]]
            + [[k, f"{ours[k]:.6f}", f"{theirs[k]:.6f}"] for k in CLASSES],
            right={1, 2},
        ),
    ]
    text = "\n".join(lines) + "\n"
    print("\n".join(lines[2:]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text(text)
    payload = {
        "queries": queries,
        "candidates": args.candidates,
        "baseline_topk_times": baseline,
        "compat_times": ours_times,
        "torchmetrics_seconds": theirs_seconds,
        "ratios": {
            "compat_over_topk": ours_seconds / base,
            "torchmetrics_over_topk": theirs_seconds / base,
            "torchmetrics_over_compat": theirs_seconds / ours_seconds,
        },
        "values": {"compat": ours, "torchmetrics": theirs},
        "max_abs_diff": diff,
        "load_average_at_start": os.getloadavg(),
    }
    out.with_suffix(".json").write_text(json.dumps(payload, indent=2))
    return 0 if diff <= AGREEMENT_TOL else 1


if __name__ == "__main__":
    raise SystemExit(main())
