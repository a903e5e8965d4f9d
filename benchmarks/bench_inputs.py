"""Benchmark: the two input forms that come without embeddings, against one torch.topk and peers.

What it measures (all in one process, on this machine; medians of ``--repeats``, default 3):

* Data: ``--queries`` (100,000) queries x ``--candidates`` (100) candidates, each relevant with
  probability 0.03 (some queries have none and are skipped, as ``empty_queries="skip"`` does),
  fixed seed. Scores: a Gaussian, +1.5 for relevant candidates, replaced by its rank in the query
  as float32 (rank + 1) / (candidates + 1): positive (torchmetrics drops the relevance of
  candidates scoring <= 0) and distinct within a query (torchmetrics breaks ties by input order,
  so with ties its values would depend on the shuffle).
* baseline: one ``torch.topk(scores, 10)`` over the same (queries x candidates) float32 matrix, the
  least work any top-10 evaluation of these scores needs; every time below is a ratio to it.
  It is timed ``--repeats`` times before each workload and the median of all those runs is the
  baseline, so that a load that changes during the run weighs on both sides of each ratio.
* scores form, shuffled: ``RetrievalMetrics(NAMES).update(preds=, target=, indexes=)`` then
  ``compute()``, the (query, candidate) pairs in a random order (how a shuffled DataLoader
  delivers them); timed as a whole, and split into ``rank_scores`` and the measures alone.
* scores form, in query order: the same with the pairs grouped by query, queries ascending.
* torchmetrics: its own ``RetrievalHitRate(top_k=10)``, ``RetrievalRecall(top_k=10)``,
  ``RetrievalMAP()``, ``RetrievalMRR()``, ``RetrievalNormalizedDCG(top_k=10)`` on the shuffled
  pairs (``empty_target_action="skip"``), update + compute of all five, timed once (it takes
  tens of seconds); its values are checked against ours (continuous scores: no ties).
* ranked lists: every query's candidates as a ranked list of 100 str ids (by decreasing score,
  ids unique within a list, drawn from a corpus of 1,000,000), its relevant ids a set, plus one
  relevant id per query that the list never returns (so m_q counts it). Ours:
  ``RetrievalMetrics(NAMES).update(ranked_ids=, relevant_ids=)`` then ``compute()``; and the
  same lists under each RAG preset (``protocol="llama_index"``, ``"haystack"``, ``"ragas"``)
  with its evaluator's own measure names (:data:`PRESETS`), whole lists.
* ranx: ``Qrels.from_dict`` + ``Run.from_dict`` + ``evaluate`` with hit_rate@10, recall@10, map,
  mrr, ndcg@10 on the same lists (scores = the candidates' scores). The first call includes
  numba's compilation (ranx caches compiled code on disk, so "first" is only cold on a fresh
  install); "warm" is the median of the calls after it. Its values are checked against ours.

Run (from the repository root, with the project's venv active, on a quiet machine):

    python benchmarks/bench_inputs.py                    # full size, several minutes on 2 cores
    python benchmarks/bench_inputs.py --small            # smoke run: 5,000 queries
    python benchmarks/bench_inputs.py --skip-peers --threads 1

It prints an aligned table and writes ``benchmarks/results/bench_inputs.txt`` and ``.json``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import torch
from measuring import cpu_model

from retrieval_metrics import RetrievalMetrics
from retrieval_metrics.functional import rank_scores, retrieval_measures

SEED = 0
NAMES = ["hit_rate@10", "recall@10", "map", "mrr", "ndcg@10"]
RELEVANT_RATE = 0.03
RELEVANT_SHIFT = 1.5
CORPUS = 1_000_000
TOPK = 10
AGREEMENT_TOL = 1e-6
RESULTS = Path(__file__).resolve().parent / "results"
# ranx's metric name for each of ours
RANX_NAMES = {name: name for name in NAMES}
TORCHMETRICS_CLASSES = {
    "hit_rate@10": ("RetrievalHitRate", {"top_k": TOPK}),
    "recall@10": ("RetrievalRecall", {"top_k": TOPK}),
    "map": ("RetrievalMAP", {}),
    "mrr": ("RetrievalMRR", {}),
    "ndcg@10": ("RetrievalNormalizedDCG", {"top_k": TOPK}),
}


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def make_scores(queries: int, candidates: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(queries, candidates) float32 scores and int64 0/1 targets."""
    gen = torch.Generator().manual_seed(SEED)
    target = (torch.rand(queries, candidates, generator=gen) < RELEVANT_RATE).to(torch.int64)
    logits = torch.randn(queries, candidates, generator=gen) + RELEVANT_SHIFT * target
    ranks = torch.argsort(torch.argsort(logits, dim=1), dim=1)
    scores = (ranks + 1).to(torch.float32) / (candidates + 1)
    return scores, target


def flat_pairs(
    scores: torch.Tensor, target: torch.Tensor, shuffled: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """preds, target, indexes, one entry per (query, candidate) pair."""
    queries, candidates = scores.shape
    indexes = torch.arange(queries).repeat_interleave(candidates)
    preds, tgt = scores.reshape(-1), target.reshape(-1)
    if shuffled:
        perm = torch.randperm(preds.numel(), generator=torch.Generator().manual_seed(SEED + 1))
        preds, tgt, indexes = preds[perm], tgt[perm], indexes[perm]
    return preds.contiguous(), tgt.contiguous(), indexes.contiguous()


def make_lists(
    scores: torch.Tensor, target: torch.Tensor
) -> tuple[list[list[str]], list[set[str]], list[dict[str, float]]]:
    """Each query's candidates as str ids by decreasing score, its relevant ids (one of them
    never returned), and the candidates' scores by id (for ranx's Run)."""
    queries, candidates = scores.shape
    rng = np.random.default_rng(SEED)
    corpus = [f"doc{i}" for i in range(CORPUS)]
    # ids (start + j * stride) mod CORPUS, stride coprime with CORPUS: unique within a list
    start = rng.integers(0, CORPUS, queries)
    stride = rng.integers(1, 10_000, queries) * 2 + 1
    stride = np.where(stride % 5 == 0, stride + 2, stride)
    ids = (start[:, None] + np.arange(candidates + 1)[None, :] * stride[:, None]) % CORPUS
    order = torch.argsort(scores, dim=1, descending=True, stable=True).numpy()
    by_rank = np.take_along_axis(ids[:, :candidates], order, axis=1)
    rel_by_rank = np.take_along_axis(target.numpy(), order, axis=1).astype(bool)
    sorted_scores = np.take_along_axis(scores.numpy(), order, axis=1)
    ranked = [[corpus[i] for i in row] for row in by_rank.tolist()]
    missing = ids[:, candidates].tolist()  # never in the list
    relevant = [
        {corpus[i] for i in row[mask]} | {corpus[missing[q]]}
        for q, (row, mask) in enumerate(zip(by_rank, rel_by_rank, strict=True))
    ]
    run = [
        dict(zip(r, s.tolist(), strict=True)) for r, s in zip(ranked, sorted_scores, strict=True)
    ]
    return ranked, relevant, run


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], repeats: int) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def median(times: list[float]) -> float:
    return statistics.median(times)




def version_of(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def as_floats(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items()}


def ours_scores(preds, target, indexes, repeats: int) -> dict[str, Any]:
    def once() -> dict[str, torch.Tensor]:
        metric = RetrievalMetrics(NAMES)
        metric.update(preds=preds, target=target, indexes=indexes)
        return metric.compute()

    times, values = timed(once, repeats)
    rank_times, table = timed(lambda: rank_scores(preds, target, indexes), repeats)
    measure_times, _ = timed(lambda: retrieval_measures(table, NAMES), repeats)
    return {
        "times": times,
        "seconds": median(times),
        "rank_scores_seconds": median(rank_times),
        "measures_seconds": median(measure_times),
        "values": as_floats(values),
    }


#: the RAG presets on the same lists, each with its evaluator's measure names
PRESETS = {
    "llama_index": ["hit_rate", "mrr", "precision", "recall", "ap", "ndcg"],
    "haystack": ["recall_single_hit", "recall_multi_hit", "mrr", "map", "ndcg"],
    "ragas": ["id_based_context_recall", "id_based_context_precision"],
}


def ours_lists(
    ranked, relevant, repeats: int, names: list[str] = NAMES, protocol: str | None = None
) -> dict[str, Any]:
    def once() -> dict[str, torch.Tensor]:
        metric = RetrievalMetrics(names, protocol=protocol)
        metric.update(ranked_ids=ranked, relevant_ids=relevant)
        return metric.compute()

    times, values = timed(once, repeats)
    return {"times": times, "seconds": median(times), "values": as_floats(values)}


def torchmetrics_scores(preds, target, indexes) -> dict[str, Any]:
    import torchmetrics.retrieval as tm

    def once() -> dict[str, float]:
        out = {}
        for name, (cls, kwargs) in TORCHMETRICS_CLASSES.items():
            metric = getattr(tm, cls)(empty_target_action="skip", **kwargs)
            metric.update(preds, target, indexes=indexes)
            out[name] = float(metric.compute())
        return out

    times, values = timed(once, 1)
    return {"times": times, "seconds": median(times), "values": values}


def ranx_lists(relevant, run, repeats: int) -> dict[str, Any]:
    from ranx import Qrels, Run, evaluate

    qrels_dict = {str(q): dict.fromkeys(rel, 1) for q, rel in enumerate(relevant)}
    run_dict = {str(q): scores for q, scores in enumerate(run)}

    def once() -> dict[str, float]:
        with redirect_stdout(io.StringIO()):
            qrels, ranx_run = Qrels.from_dict(qrels_dict), Run.from_dict(run_dict)
            values = evaluate(qrels, ranx_run, list(RANX_NAMES.values()))
        return {ours: float(values[theirs]) for ours, theirs in RANX_NAMES.items()}

    times, values = timed(once, max(2, repeats))
    return {
        "times": times,
        "first_seconds": times[0],
        "seconds": median(times[1:]),
        "values": values,
    }


def agreement(ours: dict[str, float], theirs: dict[str, float]) -> dict[str, Any]:
    diffs = {k: abs(ours[k] - theirs[k]) for k in theirs}
    return {"max_abs_diff": max(diffs.values()), "ok": max(diffs.values()) <= AGREEMENT_TOL}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=None, help="queries (default 100,000)")
    parser.add_argument("--candidates", type=int, default=100, help="candidates per query")
    parser.add_argument("--small", action="store_true", help="smoke run: 5,000 queries")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing (median)")
    parser.add_argument("--skip-peers", action="store_true", help="skip torchmetrics and ranx")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--out", default=str(RESULTS / "bench_inputs"), help="output stem")
    args = parser.parse_args(argv)
    queries = args.queries or (5_000 if args.small else 100_000)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    machine = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "torchmetrics": version_of("torchmetrics"),
        "ranx": version_of("ranx"),
    }
    say(
        f"machine: {machine['cpu']}, {machine['cpu_count']} CPUs, {machine['threads']} torch "
        f"threads, load average at start {machine['load_average']}, torch {machine['torch']}, "
        f"numpy {machine['numpy']}, torchmetrics {machine['torchmetrics']}, ranx {machine['ranx']}"
    )
    scores, target = make_scores(queries, args.candidates)
    num_relevant = target.sum(1)
    data = {
        "queries": queries,
        "candidates": args.candidates,
        "pairs": queries * args.candidates,
        "relevant_rate": RELEVANT_RATE,
        "queries_without_relevant": int((num_relevant == 0).sum()),
        "mean_relevant": float(num_relevant.float().mean()),
        "seed": SEED,
    }
    say(
        f"data: {queries} queries x {args.candidates} candidates, float32 scores, "
        f"{data['mean_relevant']:.2f} relevant per query on average "
        f"({data['queries_without_relevant']} queries with none), seed {SEED}"
    )

    topk_times: list[float] = []

    def topk_now() -> None:
        topk_times.extend(timed(lambda: torch.topk(scores, TOPK, dim=1), args.repeats)[0])

    topk_now()
    first_baseline = median(topk_times)
    say(f"baseline at start: torch.topk(scores, {TOPK}): {first_baseline:.4f}s")

    results: dict[str, Any] = {}
    shuffled = flat_pairs(scores, target, shuffled=True)
    in_order = flat_pairs(scores, target, shuffled=False)
    say("  running ours, scores form (shuffled) ...")
    topk_now()
    results["scores_shuffled"] = ours_scores(*shuffled, args.repeats)
    say("  running ours, scores form (query order) ...")
    topk_now()
    results["scores_in_order"] = ours_scores(*in_order, args.repeats)
    if not args.skip_peers:
        say("  running torchmetrics (shuffled, once) ...")
        topk_now()
        results["torchmetrics"] = torchmetrics_scores(*shuffled)
    say("  building the ranked lists ...")
    ranked, relevant, run = make_lists(scores, target)
    say("  running ours, ranked lists ...")
    topk_now()
    results["lists"] = ours_lists(ranked, relevant, args.repeats)
    for protocol, names in PRESETS.items():
        say(f"  running ours, ranked lists, protocol={protocol!r} ...")
        topk_now()
        results[f"lists_{protocol}"] = ours_lists(
            ranked, relevant, args.repeats, names, protocol
        )
    if not args.skip_peers:
        say("  running ranx ...")
        topk_now()
        results["ranx"] = ranx_lists(relevant, run, args.repeats)

    labels = {
        "scores_shuffled": "ours, scores form, pairs shuffled",
        "scores_in_order": "ours, scores form, pairs in query order",
        "torchmetrics": "torchmetrics Retrieval* (5 classes), shuffled",
        "lists": "ours, ranked lists of str ids",
        **{f"lists_{p}": f"  the same, protocol={p!r}" for p in PRESETS},
        "ranx": "ranx (warm; first call below)",
    }
    baseline = median(topk_times)
    say(
        f"baseline: torch.topk(scores, {TOPK}) over {queries} x {args.candidates}: median "
        f"{baseline:.4f} s of {len(topk_times)} runs (min {min(topk_times):.4f}, max "
        f"{max(topk_times):.4f})"
    )
    say()
    rows = [["workload", "seconds", "x topk", "check"]]
    rows.append([f"torch.topk(scores, {TOPK})", fmt(baseline, ".3f"), "1.00", ""])
    checks = {
        "torchmetrics": ("scores_shuffled", "torchmetrics"),
        "ranx": ("lists", "ranx"),
    }
    for key, label in labels.items():
        if key not in results:
            continue
        r = results[key]
        r["ratio_to_topk"] = r["seconds"] / baseline
        check = ""
        if key in checks:
            r["agreement"] = agreement(results[checks[key][0]]["values"], r["values"])
            check = "values OK" if r["agreement"]["ok"] else "MISMATCH"
        rows.append([label, fmt(r["seconds"], ".3f"), fmt(r["ratio_to_topk"], ".2f"), check])
    for line in table_lines(rows, right={1, 2}):
        say(line)
    for key in ("scores_shuffled", "scores_in_order"):
        r = results[key]
        say(
            f"  {labels[key]}: rank_scores alone {r['rank_scores_seconds']:.3f} s, measures "
            f"alone {r['measures_seconds']:.3f} s (median of {args.repeats})"
        )
    if "ranx" in results:
        r = results["ranx"]
        say(
            f"  ranx first call {r['first_seconds']:.3f} s "
            f"({r['first_seconds'] / baseline:.2f} x topk; includes numba compilation unless "
            "cached on disk)"
        )
    say()
    rows = [["metric", "scores form", "torchmetrics", "ranked lists", "ranx"]]
    for name in NAMES:
        rows.append(
            [
                name,
                fmt(results["scores_shuffled"]["values"][name], ".6f"),
                fmt(results.get("torchmetrics", {}).get("values", {}).get(name), ".6f"),
                fmt(results["lists"]["values"][name], ".6f"),
                fmt(results.get("ranx", {}).get("values", {}).get(name), ".6f"),
            ]
        )
    for line in table_lines(rows, right={1, 2, 3, 4}):
        say(line)
    same = results["scores_shuffled"]["values"] == results["scores_in_order"]["values"]
    say(f"  scores form: shuffled and in query order give the same values: {same}")

    report = {
        "machine": machine,
        "data": data,
        "repeats": args.repeats,
        "baseline_topk": {"times": topk_times, "seconds": baseline},
        "results": results,
        "shuffled_equals_in_order": same,
    }
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    stem.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print(f"\nwrote {stem.name}.json and {stem.name}.txt in {stem.parent.name}/")
    failed = [k for k, r in results.items() if not r.get("agreement", {"ok": True})["ok"]]
    return 1 if failed or not same else 0


if __name__ == "__main__":
    sys.exit(main())
