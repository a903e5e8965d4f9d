"""Stress benchmark: the ranking on the data every user meets, not only on a good model.

Each case is same-source class retrieval ranked with cosine similarity by one
``retrieval_metrics.RetrievalMetrics(["hit_rate@1", "map@r", "r_precision", "map", "mrr"],
memory_budget=64 MiB)`` (``update`` then ``compute``), the whole call timed:

* ``separated``: 10,000 well-separated 2-D points, labels 0/1 (5,000 relevant items per query).
* ``identical``: 10,000 identical 2-D points, labels 0/1 (one tie group of the whole gallery).
* ``collapsed``: a collapsed model: 10,000 identical 2-D points in classes of 5 (every query's
  few relevant items in one tie group of the whole gallery: MRR's expectation over it was
  summed term by term for every query, 140 s at 20,000 items before each distinct group was
  summed once).
* ``weak``: a weak model, 6,000 x 128, 100 classes (hit rate@1 about 0.5, MAP@R about 0.09).
* ``uniform``: 2 classes of 1,050 uniform 5-D points in [0, 1)^5 (no class structure at all).
* ``cub_weak``: CUB-sized, 5,924 items, 100 classes, weak model.
* ``hashing``: CIFAR-10-style hashing retrieval scaled down: 10 classes of 600, 32-bit binary
  codes (signs of a noisy class centre), so 33 possible scores and ties everywhere.
* ``best``: the best case, a good model on small classes: 10,000 x 128, classes of 5.

Against two baselines, each measured in the same process right after it:

* naive: the simple exact method, a blocked ``torch.mm`` (``NAIVE_BLOCK`` queries at a time) and
  a full ``torch.sort`` of every row, then hit rate@1, MAP@R, R-precision, AP and reciprocal rank
  from the sorted labels (ties in sort order). Where the data has no ties its values must agree
  with ours; they are reported with the difference.
* easy: the same call on well-separated data of the same size (same labels, same dimension:
  unit class centres plus a little noise), to show what the data alone costs.

Every case runs in its own subprocess (this script again, with the hidden ``--only CASE``); the
parent imports neither torch nor the library. The child makes a metric of each kind first
(``measuring.load_metric_classes``: what the first one imports, torchmetrics and, where it is
installed, transformers, about 200 MiB) and then resets its high-water mark. Peak memory is
read right after our call, before either baseline runs: VmHWM from /proc/self/status (the one
bench_ranking.py reports; ``ru_maxrss`` from ``resource.getrusage``, which cannot be reset, is
kept in the JSON). It includes the interpreter, torch, the imports and the data ("RSS
before"). The memory promise is checked on the call's growth: peak - RSS before < embeddings +
budget + 300 MiB. (The peak itself is no measure of the call: the process holds 430 MiB before
it here, most of it torch, torchmetrics and the transformers that torchmetrics imports where it
is installed.)

Run (from the repository root, with the project's venv active, on a quiet machine):

    python benchmarks/bench_stress.py                  # every case, about 10 minutes on 2 cores
    python benchmarks/bench_stress.py --cases weak identical --threads 4

It prints an aligned table and writes ``benchmarks/results/bench_stress.json`` and ``.txt``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from measuring import (
    MIB,
    cpu_model,
    load_metric_classes,
    proc_status_mib,
    reset_peak_rss,
    ru_maxrss_mib,
    timed,
)

SEED = 0
MEMORY_BUDGET = 64 * MIB
RSS_OVERHEAD_MIB = 300.0
NAMES = ["hit_rate@1", "map@r", "r_precision", "map", "mrr"]
NAIVE_BLOCK = 512
CHILD_TIMEOUT = 1800.0
ROUND_SECONDS = 8.0  # timing rounds after the first: as many as fit in this (1 to 5)
EASY_NOISE = 0.05  # noise norm relative to the unit class centre: every class apart
WEAK_NOISE = 2.5  # the same for the weak model: hit rate@1 about 0.5 at 100 classes
GOOD_NOISE = 0.6  # hit rate@1 1.0: the best case
HASH_NOISE = 2.0  # binary codes of a mediocre hashing model: hit rate@1 well below 1
MARKER = "@@BENCH_RESULT "
RESULTS = Path(__file__).resolve().parent / "results" / "bench_stress.json"

# name -> (items, dimension, classes or class size, kind, description)
CASES: dict[str, dict[str, Any]] = {
    "separated": {
        "n": 10_000,
        "dim": 2,
        "classes": 2,
        "kind": "easy",
        "about": "10,000 well-separated 2-D points, labels 0/1",
    },
    "identical": {
        "n": 10_000,
        "dim": 2,
        "classes": 2,
        "kind": "identical",
        "about": "10,000 identical 2-D points, labels 0/1",
    },
    "collapsed": {
        "n": 10_000,
        "dim": 2,
        "classes": 2_000,
        "kind": "identical",
        "about": "a collapsed model: 10,000 identical 2-D points, classes of 5",
    },
    "weak": {
        "n": 6_000,
        "dim": 128,
        "classes": 100,
        "kind": "weak",
        "about": "weak model, 6,000 x 128, 100 classes",
    },
    "uniform": {
        "n": 2_100,
        "dim": 5,
        "classes": 2,
        "kind": "uniform",
        "about": "2 classes of 1,050 uniform 5-D points",
    },
    "cub_weak": {
        "n": 5_924,
        "dim": 128,
        "classes": 100,
        "kind": "weak",
        "about": "CUB-sized, 5,924 items, 100 classes, weak model",
    },
    "hashing": {
        "n": 6_000,
        "dim": 32,
        "classes": 10,
        "kind": "hashing",
        "about": "hashing: 10 classes of 600, 32-bit binary codes",
    },
    "best": {
        "n": 10_000,
        "dim": 128,
        "classes": 2_000,
        "kind": "good",
        "about": "best case: good model, 10,000 x 128, classes of 5",
    },
}


# ---------------------------------------------------------------------------------------------
# The child: data, our call, the two baselines
# ---------------------------------------------------------------------------------------------


def make_labels(n: int, classes: int, seed: int = SEED):
    """Balanced labels 0..classes-1 in shuffled order."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n, dtype=torch.int64) % classes
    return labels[torch.randperm(n, generator=gen)]


def class_data(labels, dim: int, noise: float, seed: int):
    """Unit class centres (orthogonal when there are at most ``dim`` classes) plus noise."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    classes = int(labels.max()) + 1
    if classes <= dim:
        centres = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))[0]
        centres = centres[:classes].to(torch.float32)
    else:
        centres = torch.nn.functional.normalize(torch.randn(classes, dim, generator=gen), dim=1)
    emb = torch.randn(labels.numel(), dim, generator=gen).mul_(noise / math.sqrt(dim))
    return (emb + centres[labels]).contiguous()


def make_case(case: dict[str, Any]):
    """(embeddings, labels, easy embeddings) of a case; easy shares its labels and size."""
    import torch

    n, dim, kind = case["n"], case["dim"], case["kind"]
    labels = make_labels(n, case["classes"])
    easy = class_data(labels, dim, EASY_NOISE, SEED + 1)
    if kind == "easy":
        emb = easy
    elif kind == "identical":
        emb = torch.full((n, dim), 1.0)
    elif kind == "weak":
        emb = class_data(labels, dim, WEAK_NOISE, SEED + 2)
    elif kind == "uniform":
        emb = torch.rand(n, dim, generator=torch.Generator().manual_seed(SEED + 3))
    elif kind == "good":
        emb = class_data(labels, dim, GOOD_NOISE, SEED + 4)
    elif kind == "hashing":
        emb = torch.sign(class_data(labels, dim, HASH_NOISE, SEED + 5))
        emb[emb == 0] = 1.0
    else:
        raise ValueError(kind)
    return emb, labels, easy


def ours(emb, labels) -> dict[str, float]:
    from retrieval_metrics import RetrievalMetrics

    metric = RetrievalMetrics(NAMES, memory_budget=MEMORY_BUDGET)
    metric.update(emb, labels)
    return {k: float(v) for k, v in metric.compute().items()}


def naive(emb, labels) -> dict[str, float]:
    """Blocked product, a full sort of every row, the metrics from the sorted labels."""
    import torch

    x = torch.nn.functional.normalize(emb, dim=1)
    n = x.shape[0]
    rank = torch.arange(1, n, dtype=torch.float32)
    sums = dict.fromkeys(NAMES, 0.0)
    counted = 0
    for start in range(0, n, NAIVE_BLOCK):
        q = x[start : start + NAIVE_BLOCK]
        b = q.shape[0]
        scores = q @ x.T
        scores[torch.arange(b), torch.arange(start, start + b)] = float("-inf")  # self last
        order = torch.sort(scores, dim=1, descending=True).indices[:, : n - 1]
        rel = labels[order] == labels[start : start + b, None]
        m = rel.sum(1)
        keep = m > 0
        rel, m = rel[keep], m[keep].to(torch.float32)
        hits = rel.cumsum(1, dtype=torch.float32)
        precision_at_rel = torch.where(rel, hits / rank, 0.0)
        within_r = rank[None, :] <= m[:, None]
        sums["hit_rate@1"] += float(rel[:, 0].sum())
        sums["map@r"] += float(((precision_at_rel * within_r).sum(1) / m).sum())
        sums["r_precision"] += float((hits.gather(1, m.long()[:, None] - 1)[:, 0] / m).sum())
        sums["map"] += float((precision_at_rel.sum(1) / m).sum())
        sums["mrr"] += float((1.0 / (rel.to(torch.int8).argmax(1) + 1)).sum())
        counted += int(keep.sum())
    return {k: v / max(counted, 1) for k, v in sums.items()}


def child_main(args: argparse.Namespace) -> None:
    import torch

    # What the first metric made imports (torchmetrics, and transformers through it where it is
    # installed: about 200 MiB) before anything is timed or measured, and the high-water mark
    # reset after it: the peak is then the call's own
    load_metric_classes()

    torch.set_num_threads(args.threads)
    case = CASES[args.only]
    emb, labels, easy = make_case(case)
    reset_peak_rss()
    rss_before = proc_status_mib("VmRSS")
    maxrss_before = ru_maxrss_mib()
    ours_times, ours_values = timed(lambda: ours(emb, labels), 1)
    # Read before the baselines run: these are our call's own peaks.
    peak_vmhwm = proc_status_mib("VmHWM")
    peak_maxrss = ru_maxrss_mib()
    naive_times, naive_values = timed(lambda: naive(emb, labels), 1)
    is_easy = case["kind"] == "easy"  # its own easy data: the same call on the same data
    easy_times = ours_times if is_easy else timed(lambda: ours(easy, labels), 1)[0]
    # More rounds where a round is short, the three calls taking turns: this machine's speed
    # drifts by tens of percent within a minute, and each ratio is taken between minima.
    one_round = ours_times[0] + naive_times[0] + (0.0 if is_easy else easy_times[0])
    for _ in range(max(1, min(5, int(ROUND_SECONDS / max(one_round, 1e-3))))):
        ours_times += timed(lambda: ours(emb, labels), 1)[0]
        naive_times += timed(lambda: naive(emb, labels), 1)[0]
        if not is_easy:
            easy_times += timed(lambda: ours(easy, labels), 1)[0]
    counts = torch.bincount(labels)
    result = {
        "case": args.only,
        **case,
        "relevant_per_query": float((counts[labels] - 1).float().mean()),
        "distinct_rows": int(torch.unique(emb, dim=0).shape[0]),
        "ours_times": ours_times,
        "naive_times": naive_times,
        "easy_times": easy_times,
        "ours_seconds": min(ours_times),
        "naive_seconds": min(naive_times),
        "easy_seconds": min(easy_times),
        "ours_values": ours_values,
        "naive_values": naive_values,
        "rss_before_mib": rss_before,
        "ru_maxrss_before_mib": maxrss_before,
        "peak_rss_mib": peak_vmhwm,
        "ru_maxrss_mib": peak_maxrss,
        "embedding_mib": emb.numel() * emb.element_size() / MIB,
        "torch": torch.__version__,
    }
    print(MARKER + json.dumps(result), flush=True)


def run_child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--only", name]
    cmd += ["--threads", str(args.threads)]
    print(f"  running {name}: {CASES[name]['about']} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE, text=True, check=False, timeout=args.timeout
        )
    except subprocess.TimeoutExpired:
        return {"case": name, **CASES[name], "error": f"stopped after {args.timeout:.0f} s"}
    wall = time.perf_counter() - start
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER) :])
            result["process_seconds"] = wall
            return result
    return {
        "case": name,
        **CASES[name],
        "error": f"exit status {proc.returncode}",
        "stdout_tail": proc.stdout[-2000:],
    }


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def table_lines(rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for j, row in enumerate(rows):
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def parent_main(args: argparse.Namespace) -> int:
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    machine = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": args.threads,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    results = [run_child(name, args) for name in args.cases]
    torch_version = next((r["torch"] for r in results if "torch" in r), "?")
    say(
        f"machine: {machine['cpu']}, {machine['cpu_count']} CPUs, {args.threads} threads, "
        f"torch {torch_version}"
    )
    say(
        f"call: RetrievalMetrics({NAMES}, memory_budget={MEMORY_BUDGET // MIB} MiB), cosine, "
        "same source; naive: blocked mm + full sort of every row; easy: the same call on "
        "well-separated data of the same size and labels; times: the fastest of 2 to 6 runs, "
        "the three calls taking turns"
    )
    say()
    header = ["case", "N", "D", "m/query", "ours s", "naive s", "easy s", "ours/naive"]
    header += ["ours/easy", "peak MiB", "before MiB", "growth MiB", "bound MiB", "growth<bound"]
    rows = [header]
    for r in results:
        if "error" in r:
            rows.append([r["case"], str(r["n"]), str(r["dim"]), "", "FAILED: " + r["error"]])
            rows[-1] += [""] * (len(header) - len(rows[-1]))
            continue
        bound = r["embedding_mib"] + MEMORY_BUDGET / MIB + RSS_OVERHEAD_MIB
        growth = r["peak_rss_mib"] - r["rss_before_mib"]
        r["bound_mib"] = bound
        r["growth_mib"] = growth
        r["growth_within_bound"] = growth < bound
        r["ours_over_naive"] = r["ours_seconds"] / r["naive_seconds"]
        r["ours_over_easy"] = r["ours_seconds"] / r["easy_seconds"]
        rows.append(
            [
                r["case"],
                str(r["n"]),
                str(r["dim"]),
                fmt(r["relevant_per_query"], ".0f"),
                fmt(r["ours_seconds"], ".3f"),
                fmt(r["naive_seconds"], ".3f"),
                fmt(r["easy_seconds"], ".3f"),
                fmt(r["ours_over_naive"], ".2f"),
                fmt(r["ours_over_easy"], ".2f"),
                fmt(r["peak_rss_mib"], ".0f"),
                fmt(r["rss_before_mib"], ".0f"),
                fmt(growth, ".0f"),
                fmt(bound, ".0f"),
                "yes" if r["growth_within_bound"] else "NO",
            ]
        )
    for line in table_lines(rows, right=set(range(1, 13))):
        say(line)
    say()
    for r in results:
        if "error" not in r:
            say(f"  {r['case']}: {r['about']}; {r['distinct_rows']} distinct rows")
    say()
    say("values (ours: expected ties; naive: ties in sort order, so it differs where ties are)")
    rows = [["case", "metric", "ours", "naive", "|diff|"]]
    for r in results:
        if "error" in r:
            continue
        for name in NAMES:
            a, b = r["ours_values"][name], r["naive_values"][name]
            rows.append([r["case"], name, fmt(a, ".6f"), fmt(b, ".6f"), fmt(abs(a - b), ".1e")])
    for line in table_lines(rows, right={2, 3, 4}):
        say(line)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": machine,
        "memory_budget": MEMORY_BUDGET,
        "metrics": NAMES,
        "naive_block": NAIVE_BLOCK,
        "cases": results,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print(f"\nwrote {out} and {out.with_suffix('.txt')}")
    return 1 if any("error" in r for r in results) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cases", nargs="+", choices=list(CASES), default=list(CASES), help="cases to run"
    )
    parser.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="torch threads (default: all)"
    )
    parser.add_argument(
        "--timeout", type=float, default=CHILD_TIMEOUT, help="seconds before a case is stopped"
    )
    parser.add_argument("--out", default=str(RESULTS), help="JSON output path (.txt beside it)")
    parser.add_argument("--only", choices=list(CASES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.only:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
