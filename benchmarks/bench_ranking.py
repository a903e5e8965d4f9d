"""Benchmark: ranking a Stanford-Online-Products-sized evaluation, against the floor and peers.

What it measures (all in one run, on this machine):

* Data: same-source class retrieval shaped like the SOP test split: ``--n`` items (60,502) of
  dimension ``--dim`` (128), float32, about 5.35 items per class (class sizes 2..12, skewed small
  as in SOP), generated with a fixed seed as unit class centres plus Gaussian noise, normalised,
  items in shuffled order (``--grouped``: class by class, as SOP's Ebay_test.txt lists them).
  The noise level puts hit rate@1 near 0.77 at the default size (0.91 at 6,000), about
  what a trained SOP model reaches.
* ours: ``rank_embeddings(emb, query_labels=labels, depth=..., cover_relevant=...)`` with the
  depth that :func:`depth_for` gives for hit_rate@1/2/4/8, map@r, r_precision and mrr, then
  ``retrieval_measures``; one ranking pass, timed as a whole (ranking + measures).
* ours RetrievalMetrics: the path users run, ``RetrievalMetrics`` of the same names updated
  in batches of 4,096 rows, then ``compute()``, timed as a whole; its values are checked
  against the functional path's.
* ours (full): the same with ``depth=None`` (the whole ranking), which also serves "map" (full
  mAP).
* floor: the similarity product's FLOPs, 2 N^2 D, at the rate a 4096 x 4096 x 4096 float32
  ``torch.mm`` reaches here (best of 3, measured in this run).
* faiss: exact kNN, ``faiss.IndexFlatIP`` over the same normalised data, every item searched with
  k = the largest class size (its R relevant items plus itself).
* pml: pytorch-metric-learning's ``AccuracyCalculator(include=("precision_at_1", "r_precision",
  "mean_average_precision_at_r"), k="max_bin_count").get_accuracy(emb, labels)`` (faiss L2 kNN,
  the same order as cosine on normalised data); its values are checked against ours.
* naive: blocked ``torch.mm`` (1024 queries at a time) + ``torch.topk`` with the same k as faiss.
* memory case: 100,000 x 100,000 same source at D = 64 (a full score matrix would be 40 GB),
  data as above with the noise set for hit rate@1 ~ 0.76 at that size, hit_rate@1, map@r,
  r_precision with ``memory_budget=256 MiB``: time and peak RSS, against two targets, peak RSS
  < 2 GiB and peak RSS < embeddings + memory budget + 300 MiB.

Every method runs in its own subprocess (this script again, with the hidden ``--only METHOD``) so
that its peak RSS is its own; each child generates the same data from the seed and reports its
best time (best of 2; 1 when a run takes over a minute) and its peak RSS. Peak RSS is VmHWM of
/proc/self/status, not ``ru_maxrss``: Linux carries ``ru_maxrss`` over fork + exec, so a child's
would start at the parent's size (torch plus the floor's matrices, about 500 MiB); it is kept in
the JSON as ``ru_maxrss_mib``. The peak includes the interpreter, torch and the data ("RSS
before" in the table). The floor rate is measured in the parent. The floor, ours and faiss take
turns over ``--rounds`` rounds (3): the machine's speed drifts by tens of percent from one minute
to the next, so each ratio is taken within a round (the runs minutes apart, not a whole run
apart) and the table keeps the medians.

Run (from the repository root, with the project's venv active, on a quiet machine):

    python benchmarks/bench_ranking.py                 # full size, a few minutes on 2 cores
    python benchmarks/bench_ranking.py --small         # smoke run: n=6000, memory case at 10,000
    python benchmarks/bench_ranking.py --skip-peers --no-memory-case --threads 4

It prints an aligned table and writes ``benchmarks/results/bench_ranking.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from measuring import (
    MIB,
    cpu_model,
    current_rss_mib,
    load_metric_classes,
    peak_rss_mib,
    ru_maxrss_mib,
    timed,
)

from retrieval_metrics.functional import depth_for, rank_embeddings, retrieval_measures

SEED = 0
DEFAULT_N = 60502  # SOP test split
SMALL_N = 6000
MEMORY_N = 100_000
SMALL_MEMORY_N = 10_000
MEMORY_DIM = 64
MEMORY_BUDGET = 256 * 2**20
MIN_CLASS, MAX_CLASS = 2, 12
SIZE_DECAY = 0.84  # P(size = s) ~ 0.84^(s - 2) on 2..12: mean 5.35 items per class, as in SOP
NOISE = 1.4  # noise norm relative to the unit class centre: hit rate@1 ~ 0.77 at n = 60502
MEMORY_NOISE = 1.05  # the same for the memory case: hit rate@1 ~ 0.76 at 100,000, D = 64
NAIVE_BLOCK = 1024
MATMUL_SIZE = 4096
# The device the embeddings (and the floor's matmul) live on: --device, passed to the children
# through the environment. The library ranks on whatever device the embeddings are on.
DEVICE = torch.device(os.environ.get("RM_BENCH_DEVICE", "cpu"))


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


NAMES = ["hit_rate@1", "hit_rate@2", "hit_rate@4", "hit_rate@8", "map@r", "r_precision", "mrr"]
FULL_NAMES = [*NAMES, "map"]
MEMORY_NAMES = ["hit_rate@1", "map@r", "r_precision"]
# pml name -> our name
PML_METRICS = {
    "precision_at_1": "hit_rate@1",
    "r_precision": "r_precision",
    "mean_average_precision_at_r": "map@r",
}
AGREEMENT_TOL = 1e-4
RSS_CAP_MIB = 2048.0
RSS_OVERHEAD_MIB = 300.0
MARKER = "@@BENCH_RESULT "
RESULTS = Path(__file__).resolve().parent / "results" / "bench_ranking.json"


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def class_sizes(n: int, rng: np.random.Generator) -> np.ndarray:
    """Class sizes in MIN_CLASS..MAX_CLASS, skewed small, that add up to ``n`` (n >= 2)."""
    support = np.arange(MIN_CLASS, MAX_CLASS + 1)
    p = SIZE_DECAY ** (support - MIN_CLASS)
    draws = rng.choice(support, size=n // MIN_CLASS + 1, p=p / p.sum())
    total = np.cumsum(draws)
    last = int(np.searchsorted(total, n))  # first class that reaches n
    sizes = draws[: last + 1].copy()
    sizes[-1] -= total[last] - n
    if sizes[-1] < MIN_CLASS:  # one item left over: borrow one from a class that can spare it
        spare = np.flatnonzero(sizes[:-1] > MIN_CLASS)[-1]
        sizes[spare] -= 1
        sizes[-1] += 1
    return sizes


def make_labels(
    n: int, seed: int = SEED, grouped: bool = False, classes: str = "sop"
) -> torch.Tensor:
    """Class labels of ``n`` items, shuffled (or class by class with ``grouped``): class sizes
    skewed as SOP's (``classes="sop"``), or each item's class drawn uniformly from ``n / 5``
    (``"random"``: sizes 1 to about 16, 5 on average)."""
    rng = np.random.default_rng(seed)
    if classes == "random":
        drawn = rng.integers(0, n // 5, size=n)
        _, labels = np.unique(drawn, return_inverse=True)  # classes numbered 0.. (none empty)
        labels = np.sort(labels)
    else:
        sizes = class_sizes(n, rng)
        labels = np.repeat(np.arange(sizes.size), sizes)
    order = rng.permutation(n)
    return torch.from_numpy((labels if grouped else labels[order]).astype(np.int64))


def make_data(
    n: int, dim: int, seed: int = SEED, grouped: bool = False, noise: float = NOISE,
    classes: str = "sop",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised float32 embeddings (unit class centre + noise) and int64 labels."""
    labels = make_labels(n, seed, grouped, classes)
    gen = torch.Generator().manual_seed(seed)
    num_classes = int(labels.max()) + 1
    centres = torch.nn.functional.normalize(torch.randn(num_classes, dim, generator=gen), dim=1)
    emb = torch.randn(n, dim, generator=gen).mul_(noise / math.sqrt(dim))
    emb += centres[labels]
    return torch.nn.functional.normalize(emb, dim=1).contiguous(), labels


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------












def matmul_rate(size: int = MATMUL_SIZE, repeats: int = 3) -> dict[str, float]:
    """FLOP/s of a square float32 torch.mm, best of ``repeats`` (after one warm-up)."""
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(size, size, generator=gen).to(DEVICE)
    b = torch.randn(size, size, generator=gen).to(DEVICE)
    out = torch.empty(size, size, device=DEVICE)
    torch.mm(a, b, out=out)
    sync()

    def product() -> None:
        torch.mm(a, b, out=out)
        sync()

    times, _ = timed(product, repeats)
    best = min(times)
    return {"size": size, "seconds": best, "flops_per_second": 2 * size**3 / best}


def set_threads(threads: int) -> None:
    torch.set_num_threads(threads)




def version_of(module: str) -> str | None:
    try:
        mod = __import__(module)
    except ImportError:
        return None
    return str(getattr(mod, "__version__", "unknown"))


# ---------------------------------------------------------------------------------------------
# Methods (each runs in its own subprocess)
# ---------------------------------------------------------------------------------------------


def run_ours(
    emb: torch.Tensor,
    labels: torch.Tensor,
    names: list[str],
    depth: int | None,
    cover_relevant: bool,
    repeats: int = 2,
    memory_budget: int = MEMORY_BUDGET,
) -> dict[str, Any]:
    splits: list[tuple[float, float]] = []

    def once() -> dict[str, torch.Tensor]:
        start = time.perf_counter()
        table = rank_embeddings(
            emb.to(DEVICE),
            query_labels=labels,
            depth=depth,
            cover_relevant=cover_relevant,
            memory_budget=memory_budget,
        )
        sync()
        ranked = time.perf_counter()
        values = retrieval_measures(table, names)
        splits.append((ranked - start, time.perf_counter() - ranked))
        return values

    times, values = timed(once, repeats)
    best = int(np.argmin(times))
    return {
        "times": times,
        "rank_seconds": splits[best][0],
        "measures_seconds": splits[best][1],
        "depth": depth,
        "cover_relevant": cover_relevant,
        "memory_budget": memory_budget,
        "values": {k: float(v) for k, v in values.items()},
    }


def method_ours(emb: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    depth, cover = depth_for(NAMES)
    return run_ours(emb, labels, NAMES, depth, cover)


def method_ours_full(emb: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    return run_ours(emb, labels, FULL_NAMES, None, False)


def method_memory(emb: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    depth, cover = depth_for(MEMORY_NAMES)
    return run_ours(emb, labels, MEMORY_NAMES, depth, cover, repeats=1)


CLASS_BATCH = 4096  # rows per update() in the metric-class path, a validation loop's batches


def method_ours_class(emb: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    """The path users run: ``RetrievalMetrics(NAMES)`` updated in batches of 4,096 rows, then
    ``compute()`` (accumulation, the ranking and the measures timed together)."""
    import retrieval_metrics as rm
    load_metric_classes()  # the classes' lazy imports, before any timing

    def once() -> dict[str, torch.Tensor]:
        metric = rm.RetrievalMetrics(NAMES, memory_budget=MEMORY_BUDGET).to(DEVICE)
        for start in range(0, emb.shape[0], CLASS_BATCH):
            stop = start + CLASS_BATCH
            metric.update(emb[start:stop].to(DEVICE), labels[start:stop].to(DEVICE))
        values = metric.compute()
        sync()
        return values

    times, values = timed(once)
    return {"times": times, "values": {k: float(v) for k, v in values.items()}}


def knn_k(labels: torch.Tensor) -> int:
    """Largest class size: the most relevant items a query has (size - 1), plus itself."""
    return int(torch.bincount(labels).max())


def method_faiss(emb: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    import faiss

    x = np.ascontiguousarray(emb.numpy(), dtype=np.float32)
    k = knn_k(labels)

    def once() -> tuple[np.ndarray, np.ndarray]:
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x)
        return index.search(x, k)

    times, (_, ids) = timed(once)
    return {"times": times, "k": k, "self_first": float((ids[:, 0] == np.arange(len(x))).mean())}


def method_pml(emb: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    calc = AccuracyCalculator(
        include=tuple(PML_METRICS), k="max_bin_count", device=torch.device("cpu")
    )
    times, acc = timed(lambda: calc.get_accuracy(emb, labels))
    return {"times": times, "values": {k: float(v) for k, v in acc.items()}}


def method_naive(emb: torch.Tensor, labels: torch.Tensor) -> dict[str, Any]:
    n, k = emb.shape[0], knn_k(labels)
    top_values = torch.empty(n, k)
    top_ids = torch.empty(n, k, dtype=torch.int64)
    scores = torch.empty(NAIVE_BLOCK, n)

    def once() -> None:
        for start in range(0, n, NAIVE_BLOCK):
            q = emb[start : start + NAIVE_BLOCK]
            s = torch.mm(q, emb.T, out=scores[: q.shape[0]])
            torch.topk(
                s, k, dim=1, out=(top_values[start:][: q.shape[0]], top_ids[start:][: q.shape[0]])
            )

    times, _ = timed(once)
    return {"times": times, "k": k}


METHODS: dict[str, Callable[[torch.Tensor, torch.Tensor], dict[str, Any]]] = {
    "ours": method_ours,
    "ours_class": method_ours_class,
    "ours_full": method_ours_full,
    "faiss": method_faiss,
    "pml": method_pml,
    "naive": method_naive,
    "memory": method_memory,
}
LABELS = {
    "ours": "ours (depth)",
    "ours_class": "ours RetrievalMetrics",
    "ours_full": "ours (full)",
    "faiss": "faiss IndexFlatIP",
    "pml": "pml AccuracyCalculator",
    "naive": "naive mm+topk",
    "memory": "ours memory case",
}


def child_main(args: argparse.Namespace) -> None:
    set_threads(args.threads)
    if args.only in ("faiss", "pml"):
        import faiss

        faiss.omp_set_num_threads(args.threads)
    noise = MEMORY_NOISE if args.only == "memory" else NOISE
    emb, labels = make_data(
        args.n, args.dim, grouped=args.grouped, noise=noise,
        classes="sop" if args.only == "memory" else args.classes,
    )
    rss_before = current_rss_mib()  # torch, the data; not yet faiss or pml
    result = METHODS[args.only](emb, labels)
    result["seconds"] = min(result["times"])
    result["rss_before_mib"] = rss_before
    result["peak_rss_mib"] = peak_rss_mib()
    result["ru_maxrss_mib"] = ru_maxrss_mib()  # includes what the parent held at the fork
    result["embedding_mib"] = emb.numel() * emb.element_size() / MIB
    print(MARKER + json.dumps(result), flush=True)


def _median_by(items: list[Any], key: Callable[[Any], float]) -> Any:
    """The item whose key is the median (the lower middle one of an even count)."""
    return sorted(items, key=key)[(len(items) - 1) // 2]


def _round_result(rounds: list[dict[str, Any]], method: str, flops: float) -> dict[str, Any]:
    """``method``'s run of median time, with the medians of its per-round ratios: to that
    round's floor, and ours over it (ours and it measured minutes apart, not a whole run)."""
    runs = [r[method] for r in rounds]
    failed = next((run for run in runs if "error" in run), None)
    if failed is not None:
        return failed
    result = dict(_median_by(runs, lambda run: run["seconds"]))
    result["round_seconds"] = [run["seconds"] for run in runs]
    to_floor = [
        run["seconds"] / (flops / r["matmul"]["flops_per_second"])
        for run, r in zip(runs, rounds, strict=True)
    ]
    result["ratio_to_floor"] = statistics.median(to_floor)
    if all("error" not in r["ours"] for r in rounds):
        result["ours_over_this"] = statistics.median(
            r["ours"]["seconds"] / run["seconds"] for run, r in zip(runs, rounds, strict=True)
        )
    return result


def run_child(method: str, n: int, dim: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--only", method]
    cmd += ["--n", str(n), "--dim", str(dim), "--threads", str(args.threads)]
    cmd += ["--grouped"] if args.grouped else []
    cmd += ["--classes", args.classes]
    print(f"  running {LABELS[method]} (n={n}, D={dim}) ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - start
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER) :])
            result["process_seconds"] = wall
            return result
    return {"error": f"exit status {proc.returncode}", "stdout_tail": proc.stdout[-2000:]}


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def print_table(rows: list[list[str]], right: set[int]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, row in enumerate(rows):
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))


def parent_main(args: argparse.Namespace) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # progress (stderr) and table (stdout) in order
    set_threads(args.threads)
    n, dim = args.n, args.dim
    memory_n = SMALL_MEMORY_N if args.small else MEMORY_N
    labels = make_labels(n, grouped=args.grouped, classes=args.classes)
    counts = torch.bincount(labels)
    machine = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": args.threads,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "faiss": version_of("faiss"),
        "pytorch_metric_learning": version_of("pytorch_metric_learning"),
    }
    data = {
        "n": n,
        "dim": dim,
        "seed": SEED,
        "grouped": args.grouped,
        "class_sizes": args.classes,
        "noise": NOISE,
        "classes": int(counts.numel()),
        "mean_class_size": float(counts.float().mean()),
        "max_class_size": int(counts.max()),
    }
    print(
        f"machine: {machine['cpu']}, {machine['cpu_count']} CPUs, {args.threads} threads, "
        f"torch {machine['torch']}, faiss {machine['faiss']}, "
        f"pml {machine['pytorch_metric_learning']}"
    )
    print(
        f"data: n={n}, D={dim}, {data['classes']} classes (mean size "
        f"{data['mean_class_size']:.2f}, max {data['max_class_size']}), noise {NOISE}, "
        f"seed {SEED}, {'grouped by class' if args.grouped else 'shuffled'}, "
        f"{'SOP-skewed' if args.classes == 'sop' else 'random'} class sizes"
    )

    flops = 2.0 * n * n * dim
    # The floor, ours and faiss take turns, round after round: the machine's speed drifts by tens
    # of percent between minutes, so each ratio is taken within a round and the median kept.
    # the metric classes (what users run) beside the functional path, in the same rounds
    in_rounds = ["ours", "ours_class"] if args.skip_peers else ["ours", "ours_class", "faiss"]
    rounds = []
    for _ in range(args.rounds):
        round_rate = matmul_rate()
        rounds.append({"matmul": round_rate, **{m: run_child(m, n, dim, args) for m in in_rounds}})
    rate = _median_by(rounds, lambda r: r["matmul"]["flops_per_second"])["matmul"]
    floor_seconds = flops / rate["flops_per_second"]
    print(
        f"floor: {MATMUL_SIZE}^3 float32 torch.mm at {rate['flops_per_second'] / 1e9:.1f} GFLOP/s"
        f" (median of {len(rounds)} rounds) -> 2 N^2 D = {flops / 1e9:.1f} GFLOP in "
        f"{floor_seconds:.3f} s"
    )

    methods = ["ours", "ours_class", "ours_full"]
    if not args.skip_peers:
        methods += ["faiss", "pml", "naive"]
    results = {m: run_child(m, n, dim, args) for m in methods if m not in in_rounds}
    for m in in_rounds:
        results[m] = _round_result(rounds, m, flops)
    memory = run_child("memory", memory_n, MEMORY_DIM, args) if args.memory_case else None

    ours = results["ours"].get("seconds")
    print()
    header = ["method", "seconds", "x floor", "ours / this", "peak RSS MiB", "RSS before MiB"]
    rows = [
        header,
        [
            "floor (2 N^2 D at mm rate)",
            fmt(floor_seconds, ".3f"),
            "1.00",
            fmt(results["ours"].get("ratio_to_floor"), ".2f"),
            "-",
            "-",
        ],
    ]
    for m in methods:
        r = results[m]
        if "error" in r:
            rows.append([LABELS[m], "FAILED: " + r["error"], "", "", "", ""])
            continue
        sec = r["seconds"]
        if m not in in_rounds:
            r["ratio_to_floor"] = sec / floor_seconds
            r["ours_over_this"] = ours / sec if ours else None
        rows.append(
            [
                LABELS[m],
                fmt(sec, ".3f"),
                fmt(r["ratio_to_floor"], ".2f"),
                fmt(r["ours_over_this"], ".2f"),
                fmt(r["peak_rss_mib"], ".0f"),
                fmt(r["rss_before_mib"], ".0f"),
            ]
        )
    print_table(rows, right={1, 2, 3, 4, 5})
    if len(rounds) > 1:
        print(
            f"  {len(rounds)} rounds (floor, {', '.join(LABELS[m] for m in in_rounds)} in turn): "
            "their seconds are medians, their ratios the medians of each round's ratios"
        )
        for m in in_rounds:
            if "round_seconds" in results[m]:
                times = ", ".join(f"{t:.3f}" for t in results[m]["round_seconds"])
                print(f"  {LABELS[m]} by round: {times} s")
    for m in ("ours", "ours_full"):
        r = results[m]
        if "error" not in r:
            print(
                f"  {LABELS[m]}: ranking {r['rank_seconds']:.3f} s + measures "
                f"{r['measures_seconds']:.3f} s (depth={r['depth']}, "
                f"cover_relevant={r['cover_relevant']})"
            )

    # Metric values and the check against pytorch-metric-learning.
    print()
    agreement: dict[str, Any] = {}
    ours_values = results["ours"].get("values", {})
    full_values = results["ours_full"].get("values", {})
    pml_values = results.get("pml", {}).get("values", {})
    rows = [["metric", "ours (depth)", "ours (full)", "pml", "|diff|", "check"]]
    for name in FULL_NAMES:
        ref_name = next((p for p, o in PML_METRICS.items() if o == name), None)
        ref = pml_values.get(ref_name) if ref_name else None
        value = ours_values.get(name)
        diff = abs(value - ref) if value is not None and ref is not None else None
        check = "-" if diff is None else ("OK" if diff <= AGREEMENT_TOL else "MISMATCH")
        if diff is not None:
            agreement[name] = {
                "ours": value,
                "pml": ref,
                "pml_name": ref_name,
                "abs_diff": diff,
                "ok": diff <= AGREEMENT_TOL,
            }
        rows.append(
            [
                name,
                fmt(value, ".6f"),
                fmt(full_values.get(name), ".6f"),
                fmt(ref, ".6f"),
                fmt(diff, ".1e"),
                check,
            ]
        )
    print_table(rows, right={1, 2, 3, 4})
    class_values = results["ours_class"].get("values", {})
    if class_values and ours_values:
        class_diff = max(abs(class_values[k] - ours_values[k]) for k in ours_values)
        agreement["ours_class_vs_functional_max_abs_diff"] = class_diff
        print(
            f"  {LABELS['ours_class']} values against ours (depth): max |diff| {class_diff:.1e} "
            f"({'OK' if class_diff <= AGREEMENT_TOL else 'MISMATCH'})"
        )

    memory_report = None
    if memory is not None:
        print()
        if "error" in memory:
            print(f"memory case ({memory_n} x {memory_n}): FAILED {memory['error']}")
            memory_report = {"n": memory_n, "dim": MEMORY_DIM, **memory}
        else:
            peak = memory["peak_rss_mib"]
            budget_target = memory["embedding_mib"] + MEMORY_BUDGET / MIB + RSS_OVERHEAD_MIB
            full_matrix_gb = memory_n * memory_n * 4 / 1e9
            memory_report = {
                "n": memory_n,
                "dim": MEMORY_DIM,
                "noise": MEMORY_NOISE,
                "full_score_matrix_gb": full_matrix_gb,
                "floor_seconds": 2.0 * memory_n**2 * MEMORY_DIM / rate["flops_per_second"],
                "target_cap_mib": RSS_CAP_MIB,
                "target_cap_pass": peak < RSS_CAP_MIB,
                "target_budget_mib": budget_target,
                "target_budget_pass": peak < budget_target,
                **memory,
            }
            print(
                f"memory case: {memory_n} x {memory_n} same source, D={MEMORY_DIM} (full score "
                f"matrix {full_matrix_gb:.1f} GB), noise {MEMORY_NOISE}, "
                f"memory_budget={MEMORY_BUDGET // MIB} MiB"
            )
            print(
                f"  {memory['seconds']:.2f} s (ranking {memory['rank_seconds']:.2f} s, "
                f"{memory['seconds'] / memory_report['floor_seconds']:.2f} x floor), "
                f"peak RSS {peak:.0f} MiB (before the ranking {memory['rss_before_mib']:.0f} MiB)"
            )
            print(
                f"  peak RSS < {RSS_CAP_MIB:.0f} MiB: "
                f"{'PASS' if memory_report['target_cap_pass'] else 'FAIL'}"
            )
            print(
                f"  peak RSS < embeddings {memory['embedding_mib']:.0f} + budget "
                f"{MEMORY_BUDGET // MIB} + {RSS_OVERHEAD_MIB:.0f} = {budget_target:.0f} MiB: "
                f"{'PASS' if memory_report['target_budget_pass'] else 'FAIL'}"
            )
            print("  " + ", ".join(f"{k} {v:.4f}" for k, v in memory["values"].items()))

    report = {
        "machine": machine,
        "data": data,
        "small": args.small,
        "floor": {"matmul": rate, "flops": flops, "seconds": floor_seconds},
        "rounds": [
            {"flops_per_second": r["matmul"]["flops_per_second"]}
            | {m: r[m].get("seconds") for m in in_rounds}
            for r in rounds
        ],
        "methods": results,
        "agreement_with_pml": agreement,
        "memory_case": memory_report,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out}")
    failed = [m for m, r in results.items() if "error" in r]
    return 1 if failed or (memory is not None and "error" in memory) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help=f"items (default {DEFAULT_N})")
    parser.add_argument("--dim", type=int, default=128, help="embedding dimension (default 128)")
    parser.add_argument(
        "--memory-case",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"run the {MEMORY_N} x {MEMORY_N}, D={MEMORY_DIM} memory case (default: on)",
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help=f"smoke run: n={SMALL_N}, memory case at {SMALL_MEMORY_N}",
    )
    parser.add_argument("--skip-peers", action="store_true", help="skip faiss, pml and naive")
    parser.add_argument(
        "--grouped", action="store_true", help="items class by class instead of shuffled"
    )
    parser.add_argument(
        "--classes", choices=["sop", "random"], default="sop",
        help="class sizes: skewed as SOP's, 2 to 12 (default), or each item's class drawn "
        "uniformly from n / 5 (sizes 1 to about 16)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch/faiss threads (default: torch's)"
    )
    parser.add_argument("--out", default=str(RESULTS), help="JSON output path")
    parser.add_argument(
        "--device", default=None, help="device for our ranking and the floor (e.g. cuda)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds in which the floor, ours and faiss take turns (medians kept; default 3)",
    )
    parser.add_argument("--only", choices=sorted(METHODS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device is not None:
        # children read it at import; this process re-reads it for the floor
        global DEVICE
        os.environ["RM_BENCH_DEVICE"] = args.device
        DEVICE = torch.device(args.device)
    if args.n is None:
        args.n = SMALL_N if args.small else DEFAULT_N
    if args.threads is None:
        args.threads = torch.get_num_threads()
    if args.only:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
