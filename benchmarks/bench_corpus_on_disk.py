"""Benchmark: a corpus on disk, its judged documents spread through the file. Peak memory above
a fresh process's start, and the time, of the API and the command line.

The data (written once into ``--dir``, reused while its sizes match): ``--rows`` x ``--dim``
float16 embeddings in ``corpus.npy`` (ids ``d0``, ``d1``, ... in ``corpus.ids.npy`` beside it),
``--queries`` queries, each judged to have ``--judged`` documents at random rows spread through
the whole file (the layout that faults in pages all over it), each query near its first
judged document; the qrels in ``qrels.tsv``, the queries in ``q.npz``.

The runs, each in a fresh process (this script again, with the hidden ``--child``):

* ``api``: ``RetrievalMetrics(NAMES, qrels=..., protocol="beir")``, ``set_gallery(path,
  ids=ids_path)``, one ``update`` of the queries, ``compute()``;
* ``api_run``: the same, then ``run(RUN_DEPTH, ids=...)`` (the corpus ranked again, a block at
  a time) written with ``formats.write_run``;
* ``api_run_depth``: ``api_run`` with ``run_depth=RUN_DEPTH`` on the metric: compute()'s
  ranking keeps the run's lists, and ``run()`` lists them (one pass over the corpus);
* ``cli``: ``retrieval-metrics evaluate --query q.npz --gallery corpus.npy --qrels qrels.tsv
  --protocol beir`` (``main()`` called in the child);
* ``cli_write_run``: the same with ``--write-run run.txt --run-depth RUN_DEPTH``.

Peak: the child's VmHWM (its own high-water mark: a fresh process image) minus its VmRSS once
its imports are done, before the run. ``file`` is the corpus file's size; ``ratio`` is the peak
over it. The runs of ``api_run``, ``api_run_depth`` and ``cli_write_run`` are compared, each
query's lines (PASS: equal).

Run (from the repository root, with the project's venv active):

    python benchmarks/bench_corpus_on_disk.py                  # 1.2M x 256, 500 queries
    python benchmarks/bench_corpus_on_disk.py --rows 300000 --runs api cli

It prints a table and writes ``benchmarks/results/bench_corpus_on_disk.json`` and ``.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
NAMES = ["ndcg@10", "recall@100", "mrr@10", "map@100"]
RUN_DEPTH = 100
RUNS = ("api", "api_run", "api_run_depth", "cli", "cli_write_run")
MIB = 2**20


def status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def make_data(folder: Path, rows: int, dim: int, queries: int, judged: int, seed: int = 0) -> None:
    """The corpus, its ids, the queries and their qrels in ``folder`` (kept when they match)."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / "sizes.json"
    sizes = {"rows": rows, "dim": dim, "queries": queries, "judged": judged, "seed": seed}
    if stamp.exists() and json.loads(stamp.read_text()) == sizes:
        return
    rng = np.random.default_rng(seed)
    corpus = np.lib.format.open_memmap(folder / "corpus.npy", mode="w+", dtype=np.float16,
                                       shape=(rows, dim))
    for start in range(0, rows, 100_000):
        stop = min(rows, start + 100_000)
        corpus[start:stop] = rng.standard_normal((stop - start, dim), dtype=np.float32)
    corpus.flush()
    np.save(folder / "corpus.ids.npy", np.array([f"d{i}" for i in range(rows)]))
    # each query's judged documents: random rows spread through the whole file
    docs = np.sort(rng.choice(rows, size=(queries, judged), replace=False), axis=1)
    first = np.asarray(corpus[docs[:, 0]], dtype=np.float32)
    q = first + 0.7 * rng.standard_normal((queries, dim), dtype=np.float32)
    del corpus
    np.savez(folder / "q.npz", embeddings=q.astype(np.float32),
             ids=np.array([f"q{i}" for i in range(queries)]))
    lines = ["query-id\tcorpus-id\tscore"]
    for i in range(queries):
        lines += [f"q{i}\td{d}\t{1 + j % 2}" for j, d in enumerate(docs[i].tolist())]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n")
    stamp.write_text(json.dumps(sizes))


def child(kind: str, folder: Path, out: Path) -> None:
    """One run, in this fresh process; prints its peak above the start and its seconds."""
    import warnings

    import torch

    import retrieval_metrics as rm
    import retrieval_metrics.metrics.named
    from retrieval_metrics.cli.commands import run as _cli_run  # noqa: F401
    from retrieval_metrics.formats import read_qrels, write_run

    warnings.simplefilter("ignore")
    start = status("VmRSS")
    began = time.perf_counter()
    if kind.startswith("api"):
        qrels = read_qrels(folder / "qrels.tsv")
        with np.load(folder / "q.npz") as z:
            q, q_ids = torch.from_numpy(z["embeddings"]), z["ids"].tolist()
        depth = RUN_DEPTH if kind == "api_run_depth" else None
        metric = rm.RetrievalMetrics(NAMES, qrels=qrels, protocol="beir", run_depth=depth)
        metric.set_gallery(str(folder / "corpus.npy"), ids=str(folder / "corpus.ids.npy"))
        metric.update(q, ids=q_ids, role="query")
        values = {k: float(v) for k, v in metric.compute().items()}
        if kind in ("api_run", "api_run_depth"):
            ids = q_ids + np.load(folder / "corpus.ids.npy").tolist()
            write_run(metric.run(RUN_DEPTH, ids=ids), out, tag="q")
    else:
        from retrieval_metrics.__main__ import main

        argv = ["evaluate", "--query", str(folder / "q.npz"), "--gallery",
                str(folder / "corpus.npy"), "--qrels", str(folder / "qrels.tsv"),
                "--protocol", "beir", "--metrics", ",".join(NAMES), "--progress-delay", "-1",
                "--json", str(out.with_suffix(".json"))]
        if kind == "cli_write_run":
            argv += ["--write-run", str(out), "--run-depth", str(RUN_DEPTH)]
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        assert code == 0, code
        report = json.loads(out.with_suffix(".json").read_text())
        values = report.get("values", report)
    seconds = time.perf_counter() - began
    peak = status("VmHWM") - start
    print(json.dumps({"peak": peak, "seconds": seconds, "start": start,
                      "values": values if kind.startswith("api") else None}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_200_000)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--judged", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench_corpus_on_disk"))
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS))
    parser.add_argument("--label", default="", help="a name for this tree in the results")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.dir, Path(args.child[1]))
        return 0
    make_data(args.dir, args.rows, args.dim, args.queries, args.judged)
    file_bytes = (args.dir / "corpus.npy").stat().st_size
    rows, results = [], {}
    for kind in args.runs:
        out = args.dir / f"run.{kind}.txt"
        out.unlink(missing_ok=True)
        done = subprocess.run([sys.executable, __file__, "--dir", str(args.dir), "--child", kind,
                               str(out)], capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            results[kind] = {"error": done.stderr.strip().splitlines()[-1:]}
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["ratio"] = result["peak"] / file_bytes
        results[kind] = result
        rows.append(f"{kind:<14} {result['peak'] / MIB:>9.0f} {result['ratio']:>6.2f} "
                    f"{result['seconds']:>8.1f}")
    same = None
    runs = [args.dir / f"run.{k}.txt" for k in ("api_run", "api_run_depth", "cli_write_run")]
    if all(p.exists() for p in runs):
        # (the metric lists its queries by id code, the command line in the file's order)
        same = len({tuple(sorted(p.read_text().splitlines(), key=lambda line: line.split()[0]))
                    for p in runs}) == 1
    header = (
        f"corpus on disk: {args.rows:,} x {args.dim} float16 ({file_bytes / MIB:.1f} MiB), "
        f"{args.queries} queries, {args.judged} judged documents each spread through the file; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
        + (f"; tree: {args.label}" if args.label else "")
    )
    lines = [header, "peak: VmHWM - VmRSS after imports, in a fresh process; ratio: peak / file",
             "", f"{'run':<14} {'peak MiB':>9} {'ratio':>6} {'seconds':>8}", *rows]
    if same is not None:
        lines.append(f"api_run == api_run_depth == cli_write_run (each query's lines): "
                     f"{'PASS' if same else 'FAIL'}")
    print("\n".join(lines))
    if not args.no_save:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "bench_corpus_on_disk.txt").write_text("\n".join(lines) + "\n")
        (RESULTS / "bench_corpus_on_disk.json").write_text(json.dumps(
            {"rows": args.rows, "dim": args.dim, "queries": args.queries, "judged": args.judged,
             "file_bytes": file_bytes, "label": args.label, "runs": results,
             "runs_equal": same}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
