"""Benchmark: queries in updates of several sizes against a corpus given once (``set_gallery``).

A corpus given with ``set_gallery`` is held as it is (not normalised, not copied). The query
updates are kept and ranked together at ``compute()``, so the corpus is read (and for cosine
divided by its norms) as often whatever the size of the updates; before, each update was
ranked as it came, one pass over the corpus an update (updates of 64: 2.8-3.0x one product,
against 1.3-1.5x in one update). This script gives the same
``--queries`` queries (random, each with one judged document) against an ``--docs`` x ``--dim``
float32 corpus in memory, in updates of each of ``--steps`` queries, through
``RetrievalMetrics(["ndcg@10", "recall@100"], qrels=...)``: ``set_gallery``, the updates,
``compute()``; timed beside one queries x corpus product at this machine's square-GEMM rate
(a 4096^3 float32 matmul, the faster of before and after), and the values of every step size
checked equal.

Run:  python benchmarks/bench_query_updates.py [--docs 500000] [--dim 768] [--queries 1024]
Writes benchmarks/results/bench_query_updates.json and .txt.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measuring import cpu_model, load_metric_classes

RESULTS = Path(__file__).resolve().parent / "results"


def square_gemm_rate() -> float:
    """FLOP/s of a 4096^3 float32 matmul on this machine now (best of three)."""
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    a @ b
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * 4096**3 / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=500_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--queries", type=int, default=1024)
    parser.add_argument("--steps", default="1024,256,64", help="query update sizes")
    parser.add_argument("--out", default=str(RESULTS / "bench_query_updates.json"))
    args = parser.parse_args()
    import retrieval_metrics as rm

    load_metric_classes()
    gen = torch.Generator().manual_seed(0)
    corpus = torch.randn(args.docs, args.dim, generator=gen)
    queries = torch.randn(args.queries, args.dim, generator=gen)
    judged = torch.randint(0, args.docs, (args.queries,), generator=gen).tolist()
    qrels = {f"q{i}": {f"d{d}": 1} for i, d in enumerate(judged)}
    doc_ids = [f"d{i}" for i in range(args.docs)]
    query_ids = [f"q{i}" for i in range(args.queries)]
    rates = [square_gemm_rate()]
    rows = []
    for step in (int(s) for s in args.steps.split(",")):
        metric = rm.RetrievalMetrics(["ndcg@10", "recall@100"], qrels=qrels)
        start = time.perf_counter()
        metric.set_gallery(corpus, ids=doc_ids)
        for at in range(0, args.queries, step):
            metric.update(queries[at : at + step], ids=query_ids[at : at + step], role="query")
        values = {k: float(v) for k, v in metric.compute().items()}
        rows.append({"step": step, "seconds": time.perf_counter() - start, "values": values})
    rates.append(square_gemm_rate())
    product = 2 * args.queries * args.docs * args.dim / max(rates)
    same = all(r["values"] == rows[0]["values"] for r in rows)
    lines = [
        f"bench_query_updates: {args.queries:,} queries against {args.docs:,} x {args.dim} "
        f"float32 in memory (set_gallery), cosine; {cpu_model()}, {platform.machine()}, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}",
        f"square GEMM {rates[0] / 1e9:.0f}, {rates[1] / 1e9:.0f} GFLOP/s (before, after): "
        f"one queries x corpus product {product:.2f} s",
    ]
    for r in rows:
        r["x_product"] = r["seconds"] / product
        lines.append(f"updates of {r['step']:>5} queries: {r['seconds']:6.2f} s = "
                     f"{r['x_product']:.2f}x one product")
    lines.append(f"the same values at every update size: {same}")
    print("\n".join(lines))
    out = Path(args.out)
    out.write_text(json.dumps({"docs": args.docs, "dim": args.dim, "queries": args.queries,
                               "gemm_rates": rates, "product_s": product, "rows": rows,
                               "same_values": same}, indent=1))
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    if not same:
        raise SystemExit("the values differ between update sizes")


if __name__ == "__main__":
    main()
