"""Benchmark: a TREC run file scored against qrels, as users score one, beside pytrec_eval.

The run: QUERIES queries x DEPTH documents (2,000 x 1,000 by default: 2,000,000 lines, 70 MB),
three judged documents a query; MAP, nDCG@10 and recall@1000 under trec_eval's rules.

* ``cli``: ``retrieval-metrics evaluate --run run.txt --qrels qrels.txt`` in a fresh process,
  as a user runs it (``import`` of torch and torchmetrics included; ``imports`` is that cost
  alone, measured in a process that only imports the metric classes);
* ``read``: ``formats.read_ranked_lists`` in this process (the run and the qrels read,
  checked and ordered as trec_eval orders them);
* ``api``: ``read`` then ``RetrievalMetrics(..., protocol="trec_eval")``: one update, compute();
* ``pytrec_eval``: what a user writes instead: a plain Python reader of both files (split each
  line, no checks) and ``pytrec_eval.RelevanceEvaluator``;
* ``write``: ``formats.write_run`` of the lists read back (the TREC lines of every query).

The values are compared with pytrec_eval's means (the CLI's JSON within 1e-12, compute()'s
float32 within 1e-6). Results in
``benchmarks/results/bench_trec_files.{txt,json}``.

    python benchmarks/bench_trec_files.py [--queries 2000] [--depth 1000]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
NAMES = ["map", "ndcg@10", "recall@1000"]
THEIRS = {"map": "map", "ndcg@10": "ndcg_cut_10", "recall@1000": "recall_1000"}


def make_files(folder: Path, queries: int, depth: int) -> tuple[Path, Path]:
    rng = random.Random(0)
    run, qrels = folder / "run.txt", folder / "qrels.txt"
    with open(run, "w") as lines, open(qrels, "w") as judgments:
        for q in range(queries):
            docs = rng.sample(range(500_000), depth)
            lines.write("".join(f"q{q} Q0 d{d} {r + 1} {depth - r - rng.random():.6f} sys\n"
                                for r, d in enumerate(docs)))
            # (one judged document the run lists, two it may not)
            judged = [*rng.sample(range(500_000), 2), rng.choice(docs)]
            judgments.write("".join(f"q{q} 0 d{d} {1 + (d % 2)}\n" for d in set(judged)))
    return run, qrels


def plain_reader(path: Path, run: bool) -> dict:
    out: dict = {}
    with open(path) as lines:
        for line in lines:
            fields = line.split()
            if run:
                out.setdefault(fields[0], {})[fields[2]] = float(fields[4])
            else:
                out.setdefault(fields[0], {})[fields[2]] = int(fields[3])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--depth", type=int, default=1000)
    args = parser.parse_args()
    import pytrec_eval
    from measuring import load_metric_classes

    import retrieval_metrics as rm
    from retrieval_metrics.formats import read_ranked_lists, write_run

    load_metric_classes()  # (the classes' lazy imports, before any timing: ``imports`` below)

    out: dict = {"queries": args.queries, "depth": args.depth, "machine": platform.processor()
                 or platform.machine()}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        run_path, qrels_path = make_files(folder, args.queries, args.depth)
        out["run_mib"] = run_path.stat().st_size / 2**20

        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "import retrieval_metrics as rm; rm.RetrievalMetrics"],
            check=True,
        )
        out["imports_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "retrieval_metrics", "evaluate", "--run",
                        str(run_path), "--qrels", str(qrels_path), "--metrics", ",".join(NAMES),
                        "--bootstrap", "100", "--progress-delay", "-1", "--json",
                        str(folder / "cli.json")], check=True, capture_output=True)
        out["cli_s"] = time.perf_counter() - t0
        report = json.loads((folder / "cli.json").read_text())["runs"][0]["metrics"]
        cli_values = {k: report[k]["value"] for k in NAMES}

        t0 = time.perf_counter()
        lists = read_ranked_lists(run_path, qrels_path)
        out["read_s"] = time.perf_counter() - t0
        metric = rm.RetrievalMetrics(NAMES, protocol="trec_eval")
        metric.update(ranked_ids=lists.ranked_ids, relevant_ids=lists.relevant_ids,
                      ids=lists.qids)
        values = {k: float(v) for k, v in metric.compute().items()}
        out["api_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        run, qrels = plain_reader(run_path, True), plain_reader(qrels_path, False)
        per_query = pytrec_eval.RelevanceEvaluator(
            qrels, {"map", "ndcg_cut.10", "recall.1000"}).evaluate(run)
        out["pytrec_eval_s"] = time.perf_counter() - t0
        theirs = {k: sum(q[v] for q in per_query.values()) / len(per_query)
                  for k, v in THEIRS.items()}

        t0 = time.perf_counter()
        write_run({q: {d: run[q][d] for d in docs} for q, docs in
                   zip(lists.qids, lists.ranked_ids, strict=True)}, folder / "back.txt")
        out["write_s"] = time.perf_counter() - t0

    out["values"], out["pytrec_eval_values"], out["cli_values"] = values, theirs, cli_values
    # (compute() gives float32 tensors; the CLI's JSON the float64 values)
    same = all(abs(values[k] - theirs[k]) <= 1e-6 and abs(cli_values[k] - theirs[k]) <= 1e-12
               for k in NAMES)
    lines = [
        f"bench_trec_files: {args.queries:,} queries x {args.depth:,} documents "
        f"({args.queries * args.depth:,} lines, {out['run_mib']:.0f} MiB), 3 judged a query, "
        f"{', '.join(NAMES)}; {out['machine']}, {platform.python_version()}",
        f"cli (fresh process): {out['cli_s']:.2f} s, of which importing the metric classes "
        f"{out['imports_s']:.2f} s",
        f"read_ranked_lists: {out['read_s']:.2f} s; api (read + update + compute): "
        f"{out['api_s']:.2f} s",
        f"pytrec_eval with a plain reader: {out['pytrec_eval_s']:.2f} s; api / pytrec_eval = "
        f"{out['api_s'] / out['pytrec_eval_s']:.2f}",
        f"write_run of the lists read: {out['write_s']:.2f} s",
        f"values equal to pytrec_eval's (the CLI's JSON within 1e-12, compute()'s float32 "
        f"within 1e-6): {same}",
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_trec_files.txt").write_text(text + "\n")
    (RESULTS / "bench_trec_files.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
