"""Multi-process figures for the metric classes (a script, not a test).

Measures, on this machine, with torch.distributed/gloo on CPU and every process limited to one
thread (``torch.set_num_threads(1)``), so that on a 2-core machine the figures show how the work
is split, not how many threads run:

1. Speed-up: a 50,000-item same-source evaluation (D = 128, about 5 items per class), ``compute()``
   of ``RetrievalMetrics`` in 1 process vs 2 processes (each fed half the data through a
   DistributedSampler-like split with ids; the 2 processes share the symmetric pass's block
   pairs out). Target: at least 1.9x. The machine drifts by tens of percent from one minute to
   the next, so 1 and 2 processes take turns over ``--rounds`` rounds and the ratio is each
   round's, the median kept. Beside it, the machine's own ceiling in the same rounds: the same
   number of 2048 x 2048 x 128 products in 1 process vs split over 2 processes running at once
   (two processes on two cores share caches and memory bandwidth).
2. Communication in the sharded-gallery mode: bytes each process sends for a fixed query set and
   a fixed set of relevant items, against galleries grown with distractors. Target: independent
   of the gallery size, O(queries x (D + relevant per query)).
3. One ranking pass: ``RetrievalMetrics`` with 10 metrics vs one ``HitRateAtK`` on the same data,
   in one process. Target: at most 1.1x.

Run:  python benchmarks/bench_distributed.py [--n 50000] [--small] [--rounds 3]
Writes benchmarks/results/bench_distributed.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from measuring import load_metric_classes

import retrieval_metrics as rm

load_metric_classes()  # the classes' lazy imports, before any timing

DIM = 128
NAMES_10 = ["hit_rate@1", "hit_rate@5", "hit_rate@10", "recall@10", "precision@10", "map@r",
            "r_precision", "mrr", "ndcg@10", "median_rank"]
# metrics that only need each query's best relevant item (no ranking depth beyond it)
NAMES_FIRST = ["hit_rate@1", "hit_rate@5", "hit_rate@10", "mrr", "median_rank", "mean_rank",
               "cmc@20"]
NAMES_DDP = ["hit_rate@1", "hit_rate@4", "map@r", "r_precision", "mrr"]


def make_data(n: int, seed: int = 0, dim: int = DIM) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised class-centre + noise embeddings, class sizes 2..12 (about 5), shuffled."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(2, 9, (n,), generator=gen)
    labels = torch.repeat_interleave(torch.arange(n), sizes)[:n]
    labels = labels[torch.randperm(n, generator=gen)]
    centres = torch.randn(int(labels.max()) + 1, dim, generator=gen)
    emb = centres[labels] + 1.4 * torch.randn(n, dim, generator=gen)
    return torch.nn.functional.normalize(emb, dim=1), labels


def shard(n: int, rank: int, world: int) -> torch.Tensor:
    total = math.ceil(n / world) * world
    idx = torch.cat([torch.arange(n), torch.arange(total - n)])
    return idx[rank::world]


def _worker(rank: int, world: int, init: str, task: dict, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    try:
        result = {}
        if task["kind"] == "products":
            # the ceiling: the same products (and segment maxima) split over the processes
            a, b = torch.randn(2048, DIM), torch.randn(2048, DIM)
            scores = torch.empty(2048, 2048)
            torch.mm(a, b.T, out=scores)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(task["products"] // world):
                torch.mm(a, b.T, out=scores)
                scores.view(2048, 32, 64).amax(2)
            result["seconds"] = time.perf_counter() - start
        elif task["kind"] == "speedup":
            emb, labels = make_data(task["n"])
            metric = rm.RetrievalMetrics(NAMES_DDP)
            idx = shard(task["n"], rank, world)
            for chunk in idx.split(512):
                metric.update(emb[chunk], labels[chunk], ids=chunk)
            dist.barrier()
            start = time.perf_counter()
            values = metric.compute()
            result["seconds"] = time.perf_counter() - start
            result["values"] = {k: float(v) for k, v in values.items()}
        else:
            # A fixed set of queries and of their relevant items (5 per query class), plus
            # distractors that no query shares a label with: only the gallery size changes.
            q_emb, q_labels = make_data(task["queries"], seed=1)
            q_labels = q_labels % 500
            g_emb, g_labels = make_data(task["gallery"], seed=2)
            g_labels = torch.arange(task["gallery"]) + 10**6
            g_labels[:2500] = torch.arange(2500) % 500
            metric = rm.RetrievalMetrics(["hit_rate@1", "map"], gallery_sharded=True)
            q_idx = shard(task["queries"], rank, world)
            metric.update(q_emb[q_idx], q_labels[q_idx], role="query", ids=q_idx)
            g_idx = torch.arange(task["gallery"])[rank::world]  # shards without repeats
            metric.update(g_emb[g_idx], g_labels[g_idx], role="gallery", ids=10**9 + g_idx)
            start = time.perf_counter()
            values = metric.compute()
            result["seconds"] = time.perf_counter() - start
            result["bytes"] = metric.bytes_exchanged
            result["values"] = {k: float(v) for k, v in values.items()}
        Path(out).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def run_world(world: int, task: dict, timeout: float = 3600) -> list[dict]:
    """Start ``world`` processes on ``task``; return each rank's result."""
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        procs = []
        ctx = mp.get_context("spawn")
        for r in range(world):
            p = ctx.Process(target=_worker,
                            args=(r, world, init, task, os.path.join(tmp, f"out{r}.json")))
            p.start()
            procs.append(p)
        deadline = time.time() + timeout
        for p in procs:
            p.join(max(1.0, deadline - time.time()))
        for p in procs:
            if p.is_alive():
                p.kill()
        if any(p.exitcode != 0 for p in procs):
            raise RuntimeError(f"a worker failed: exit codes {[p.exitcode for p in procs]}")
        return [json.loads(Path(tmp, f"out{r}.json").read_text()) for r in range(world)]


def one_pass(n: int) -> dict:
    torch.set_num_threads(1)
    emb, labels = make_data(n)
    timings = {}
    for name, factory in [("hit_rate@1", lambda: rm.HitRateAtK(k=1)),
                          ("10 metrics", lambda: rm.RetrievalMetrics(NAMES_10)),
                          ("first-rank metrics", lambda: rm.RetrievalMetrics(NAMES_FIRST))]:
        best = math.inf
        for _ in range(2):
            metric = factory()
            metric.update(emb, labels)
            start = time.perf_counter()
            metric.compute()
            best = min(best, time.perf_counter() - start)
        timings[name] = best
    # the alternative to one ranking pass: one metric object per value
    start = time.perf_counter()
    for name in NAMES_10:
        metric = rm.RetrievalMetrics([name])
        metric.update(emb, labels)
        metric.compute()
    timings["10 separate objects"] = time.perf_counter() - start
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--small", action="store_true", help="quick smoke run (n = 6,000)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds in which 1 and 2 processes take turns (default 3)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                              "bench_distributed.json"))
    args = parser.parse_args()
    n = 6_000 if args.small else args.n
    report: dict = {"torch": torch.__version__, "n": n, "dim": DIM, "threads_per_process": 1}

    rounds = []
    for _ in range(args.rounds):
        single = run_world(1, {"kind": "speedup", "n": n})[0]
        double = run_world(2, {"kind": "speedup", "n": n})
        ceiling = [
            max(r["seconds"] for r in run_world(w, {"kind": "products", "products": 200}))
            for w in (1, 2)
        ]
        slowest = max(d["seconds"] for d in double)
        rounds.append({
            "one_process_s": single["seconds"], "two_processes_s": slowest,
            "speedup": single["seconds"] / slowest,
            "same_values": all(d["values"] == single["values"] for d in double),
            "values": single["values"], "ceiling": ceiling[0] / ceiling[1],
        })
    middle = sorted(rounds, key=lambda r: r["speedup"])[len(rounds) // 2]
    report["speedup"] = dict(
        middle,
        same_values=all(r["same_values"] for r in rounds),
        speedups=[r["speedup"] for r in rounds],
        ceiling=statistics.median(r["ceiling"] for r in rounds),
        ceilings=[r["ceiling"] for r in rounds],
    )

    queries = 2_000 if args.small else 5_000
    report["sharded"] = []
    for gallery in ([5_000, 20_000] if args.small else [20_000, 80_000]):
        res = run_world(2, {"kind": "sharded", "queries": queries, "gallery": gallery})
        report["sharded"].append({"queries": queries, "gallery": gallery,
                                  "bytes_per_process": [r["bytes"] for r in res],
                                  "seconds": max(r["seconds"] for r in res)})

    report["one_pass"] = one_pass(n)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))

    s = report["speedup"]
    print(f"retrieval-metrics, torch {torch.__version__}, 1 thread per process, n = {n}, D = {DIM}")
    print(f"1 process  compute(): {s['one_process_s']:8.2f} s")
    print(f"2 processes compute(): {s['two_processes_s']:8.2f} s   speed-up {s['speedup']:.2f}x "
          f"(target >= 1.9x; median of rounds {[round(x, 2) for x in s['speedups']]}), "
          f"same values on every rank: {s['same_values']}")
    print(f"  the machine's ceiling, the same products in 1 vs 2 processes at once: "
          f"{s['ceiling']:.2f}x (rounds {[round(x, 2) for x in s['ceilings']]})")
    print("sharded gallery, bytes sent per process (queries fixed):")
    for row in report["sharded"]:
        print(f"  {row['queries']} queries x gallery {row['gallery']:>6}: "
              f"{[f'{b / 2**20:.2f} MiB' for b in row['bytes_per_process']]}, "
              f"{row['seconds']:.2f} s")
    op = report["one_pass"]
    print(f"one pass: RetrievalMetrics(10 metrics) {op['10 metrics']:.2f} s vs HitRateAtK "
          f"{op['hit_rate@1']:.2f} s: {op['10 metrics'] / op['hit_rate@1']:.2f}x (target <= 1.1x)")
    print(f"  {len(NAMES_FIRST)} metrics of the best relevant item only: "
          f"{op['first-rank metrics'] / op['hit_rate@1']:.2f}x; the 10 as separate objects: "
          f"{op['10 separate objects'] / op['hit_rate@1']:.2f}x")
    print(f"written {out}")


if __name__ == "__main__":
    sys.exit(main())
