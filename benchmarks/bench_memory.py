"""Memory benchmark: does ``memory_budget`` hold? Peak memory of a ranking above what it holds.

The promise checked: the peak resident memory of a ranking, above the process's resident size
just before it starts (states, or input embeddings, already held), is at most the states once
more plus 1.25 x ``memory_budget``; the functional path's outputs (the rank table and the other
arrays of one entry per relevant pair it holds until it returns) count apart.

Every case is same-source class retrieval ranked with cosine similarity, the measures ``NAMES``
(full depth: MAP needs every relevant item exactly). Two paths:

* ``class``: ``RetrievalMetrics(NAMES, memory_budget=B)``, ``update`` in batches of ``BATCH``
  items, then ``compute()`` (measured). States: every tensor the metric holds. Outputs: none.
* ``functional``: ``rank_embeddings(emb, query_labels=labels, memory_budget=B)`` (measured),
  then ``retrieval_measures`` on its table. States: the embeddings and labels. Outputs: the
  table, and :data:`PAIR_OUTPUT_BYTES` per relevant pair.

The cases: ``100k`` (100,000 x 64 random float32 embeddings, labels ``arange % 20000``: 5 items
per class, 400,000 relevant pairs) and every workload of ``bench_stress.py`` (its data
generators, imported). Budgets: 64 MiB, 256 MiB and 1 GiB. The ``100k`` case takes the class
path only unless ``--full`` (:data:`SLOW_CASES`).

Each (case, budget, path) runs in its own subprocess (this script again, with the hidden
``--only``), so that the peak starts from a small process. Peak: VmHWM of /proc/self/status,
its high-water mark reset (``5`` written to /proc/self/clear_refs) just before the ranking starts;
where that reset is refused, a thread sampling VmRSS every millisecond. ``ratio`` is
``(peak - RSS before - states - outputs) / budget``, PASS at most :data:`LIMIT`. With
``--before SRC`` every run is made twice, the library from ``SRC`` (an older checkout's ``src``)
first, and the table adds its growth and ratio, the time ratios (after / before, CPU and wall)
and whether the values are the same to the bit.

Run (from the repository root, with the project's venv active, on a quiet machine):

    python benchmarks/bench_memory.py             # about 15 minutes on 2 cores (see --full)
    python benchmarks/bench_memory.py --full      # 100k on the functional path too: 27 minutes
    python benchmarks/bench_memory.py --cases weak best --budgets 64 --paths class
    python benchmarks/bench_memory.py --cases 100k --before /tmp/old/src

It prints a table and writes ``benchmarks/results/bench_memory.json`` and ``.txt``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from measuring import MIB, cpu_model, load_metric_classes, proc_status_mib, reset_peak_rss

NAMES = ["hit_rate@1", "recall@10", "map@r", "map", "mrr", "ndcg@10"]
BUDGETS_MIB = [64, 256, 1024]
PATHS = ["class", "functional"]
BATCH = 8192
LIMIT = 1.25
CHILD_TIMEOUT = 900.0
#: What rank_embeddings holds per relevant pair besides the table it returns (whose above and
#: tied take 16 bytes a pair) and its scratch: the relevance sets' index (8 bytes), the same
#: index in processing order (8) and a listed flag (1). Counted with the table as outputs of the
#: functional path; the metric classes hold them within their budget (they rank a chunk of
#: queries at a time where the pairs would outgrow it).
PAIR_OUTPUT_BYTES = 17
MARKER = "@@BENCH_RESULT "
RESULTS = Path(__file__).resolve().parent / "results" / "bench_memory.json"
#: Cases run on the class path only unless --full: a run of 100k takes about 4 minutes on 2 cores
#: (every block pair of a random model is counted item by item), whichever the path.
SLOW_CASES = {"100k"}
BIG = {"n": 100_000, "dim": 64, "classes": 20_000, "about": "100,000 x 64 random, classes of 5"}


def case_names() -> list[str]:
    from bench_stress import CASES

    return ["100k", *CASES, "100k_map"]


def default_cases() -> list[str]:
    return [c for c in case_names() if c != "100k_map"]


def names_of(case: str) -> list[str]:
    return NAMES


def about(name: str) -> str:
    from bench_stress import CASES

    if name.startswith("100k"):
        return BIG["about"] + (", every measure" if name == "100k_map" else ", without MAP")
    return CASES[name]["about"]


# ---------------------------------------------------------------------------------------------
# The child
# ---------------------------------------------------------------------------------------------


def make_data(name: str):
    import torch

    if name.startswith("100k"):
        gen = torch.Generator().manual_seed(0)
        emb = torch.randn(BIG["n"], BIG["dim"], generator=gen)
        return emb, torch.arange(BIG["n"]) % BIG["classes"]
    from bench_stress import CASES, make_case

    emb, labels, _ = make_case(CASES[name])
    return emb, labels


class Peak:
    """The peak resident size of a span of this process: VmHWM after a reset of the high-water
    mark, or (where the reset is refused) the largest VmRSS a thread sampled every 1 ms."""

    def __init__(self) -> None:
        self.sampled = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.method = "VmHWM reset"

    def __enter__(self) -> Peak:
        try:
            reset_peak_rss()
        except OSError:
            self.method = "VmRSS sampled every 1 ms"
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.sampled = max(self.sampled, proc_status_mib("VmRSS") or 0.0)
            time.sleep(0.001)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._thread is None:
            self.peak = proc_status_mib("VmHWM") or 0.0
        else:
            self.peak = max(self.sampled, proc_status_mib("VmRSS") or 0.0)


def tensor_bytes(values: Any) -> int:
    import torch

    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    if isinstance(values, dict):
        return sum(tensor_bytes(v) for v in values.values())
    if hasattr(values, "__dataclass_fields__"):
        return sum(tensor_bytes(getattr(values, f)) for f in values.__dataclass_fields__)
    return 0


def child_main(args: argparse.Namespace) -> None:
    import gc

    import torch

    import retrieval_metrics as rm
    load_metric_classes()  # the classes' lazy imports, before any timing
    from retrieval_metrics.functional import rank_embeddings, retrieval_measures
    from retrieval_metrics.functional.measures import depth_for

    torch.set_num_threads(args.threads)
    budget = args.budget * MIB
    names = names_of(args.only)
    emb, labels = make_data(args.only)
    pairs = int((torch.bincount(labels)[labels] - 1).sum())
    outputs = 0
    if args.path == "class":
        metric = rm.RetrievalMetrics(names, memory_budget=budget)
        for start in range(0, emb.shape[0], BATCH):
            metric.update(emb[start : start + BATCH], labels[start : start + BATCH])
        states = sum(tensor_bytes(getattr(metric, name)) for name in metric._defaults)
        del emb, labels
        gc.collect()
        baseline = proc_status_mib("VmRSS")
        start_time, start_cpu = time.perf_counter(), time.process_time()
        with Peak() as peak:
            values = metric.compute()
        seconds = time.perf_counter() - start_time
        cpu = time.process_time() - start_cpu
    else:
        depth, cover = depth_for(names)
        states = tensor_bytes([emb, labels])
        gc.collect()
        baseline = proc_status_mib("VmRSS")
        start_time, start_cpu = time.perf_counter(), time.process_time()
        with Peak() as peak:
            table = rank_embeddings(
                emb, query_labels=labels, memory_budget=budget, depth=depth,
                cover_relevant=cover,
            )
        seconds = time.perf_counter() - start_time
        cpu = time.process_time() - start_cpu
        # the table, and the ranking's other arrays of one entry per relevant pair
        outputs = tensor_bytes(table) + PAIR_OUTPUT_BYTES * pairs
        values = retrieval_measures(table, names)
    growth = peak.peak - baseline
    result = {
        "case": args.only,
        "path": args.path,
        "budget_mib": args.budget,
        "n": int(metric_n(args.only)),
        "pairs": pairs,
        "names": names,
        "baseline_mib": baseline,
        "peak_mib": peak.peak,
        "growth_mib": growth,
        "states_mib": states / MIB,
        "outputs_mib": outputs / MIB,
        "ratio": (growth - states / MIB - outputs / MIB) / args.budget,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "method": peak.method,
        "values": {k: float(v) for k, v in values.items()},
        "torch": torch.__version__,
    }
    print(MARKER + json.dumps(result), flush=True)


def metric_n(name: str) -> int:
    from bench_stress import CASES

    return BIG["n"] if name.startswith("100k") else CASES[name]["n"]


def run_child(
    case: str, budget: int, path: str, args: argparse.Namespace, src: str | None = None
) -> dict[str, Any]:
    """One run in a fresh process; ``src``: the library from this source tree instead."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--only", case]
    cmd += ["--budget", str(budget), "--path", path, "--threads", str(args.threads)]
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    label = "" if src is None else f" (library from {src})"
    print(f"  running {case} {budget} MiB {path}{label} ...", file=sys.stderr, flush=True)
    base = {"case": case, "budget_mib": budget, "path": path}
    try:
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE, text=True, check=False, timeout=args.timeout, env=env
        )
    except subprocess.TimeoutExpired:
        return {**base, "error": f"stopped after {args.timeout:.0f} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER) :])
            print(
                f"    growth {result['growth_mib']:.0f} MiB, ratio {result['ratio']:.2f}, "
                f"{result['seconds']:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            return result
    return {**base, "error": f"exit status {proc.returncode}", "stdout_tail": proc.stdout[-2000:]}


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
    wall = time.perf_counter()
    results, before = [], []
    for case in args.cases:
        for budget in args.budgets:
            for path in args.paths:
                if case in SLOW_CASES and path != "class" and not args.full:
                    continue
                if args.before:  # the two libraries take turns: the machine drifts
                    before.append(run_child(case, budget, path, args, args.before))
                results.append(run_child(case, budget, path, args))
                # what has run so far, should the rest not (a long run on a loaded machine)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                partial = {"machine": machine, "partial": True, "results": results}
                Path(args.out).write_text(json.dumps(partial, indent=2) + "\n")
    wall = time.perf_counter() - wall
    torch_version = next((r["torch"] for r in results if "torch" in r), "?")
    method = next((r["method"] for r in results if "method" in r), "?")
    say(
        f"machine: {machine['cpu']}, {machine['cpu_count']} CPUs, {args.threads} threads, "
        f"torch {torch_version}; peak: {method}; {wall:.0f} s in all"
    )
    say(
        f"measures: {NAMES}, cosine, same source; class: update in batches of {BATCH}, then "
        "compute(); functional: rank_embeddings alone"
    )
    say(
        "growth: peak RSS - RSS before (states held); ratio: (growth - states - outputs) / "
        f"budget, PASS at most {LIMIT}; outputs (functional): the table, and "
        f"{PAIR_OUTPUT_BYTES} bytes per relevant pair of the ranking's other per-pair arrays"
    )
    if args.before:
        say(f"before: the library from {args.before}; cpu and wall: after / before")
    say()
    header = ["case", "budget", "path", "before MiB", "peak MiB", "growth MiB", "states MiB"]
    header += ["outputs MiB", "ratio", "seconds", "cpu s"]
    if args.before:
        header += ["growth then", "ratio then", "cpu x", "wall x", "values"]
    header += ["result"]
    rows = [header]
    for k, r in enumerate(results):
        if "error" in r:
            rows.append([r["case"], str(r["budget_mib"]), r["path"], "FAILED: " + r["error"]])
            rows[-1] += [""] * (len(header) - len(rows[-1]))
            continue
        r["pass"] = r["ratio"] <= LIMIT
        row = [
            r["case"],
            str(r["budget_mib"]),
            r["path"],
            fmt(r["baseline_mib"], ".0f"),
            fmt(r["peak_mib"], ".0f"),
            fmt(r["growth_mib"], ".0f"),
            fmt(r["states_mib"], ".1f"),
            fmt(r["outputs_mib"], ".1f"),
            fmt(r["ratio"], ".2f"),
            fmt(r["seconds"], ".2f"),
            fmt(r["cpu_seconds"], ".2f"),
        ]
        if args.before:
            b = before[k]
            if "error" in b:
                row += ["FAILED", "", "", "", ""]
            else:
                r["before"] = b
                r["cpu_ratio"] = r["cpu_seconds"] / b["cpu_seconds"]
                r["wall_ratio"] = r["seconds"] / b["seconds"]
                r["same_values"] = r["values"] == b["values"]
                row += [
                    fmt(b["growth_mib"], ".0f"),
                    fmt(b["ratio"], ".2f"),
                    fmt(r["cpu_ratio"], ".2f"),
                    fmt(r["wall_ratio"], ".2f"),
                    "same" if r["same_values"] else "DIFFER",
                ]
        rows.append([*row, "PASS" if r["pass"] else "FAIL"])
    for line in table_lines(rows, right=set(range(3, len(header) - 2))):
        say(line)
    say()
    for case in args.cases:
        say(f"  {case}: {about(case)}")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": machine,
        "metrics": NAMES,
        "batch": BATCH,
        "limit": LIMIT,
        "pair_output_bytes": PAIR_OUTPUT_BYTES,
        "before": args.before,
        "seconds": wall,
        "results": results,
    }
    out.write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print(f"\nwrote {out} and {out.with_suffix('.txt')}")
    failed = any("error" in r or not r["pass"] for r in results)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = case_names()
    parser.add_argument(
        "--cases", nargs="+", choices=names, default=default_cases(), help="cases to run"
    )
    parser.add_argument(
        "--budgets", nargs="+", type=int, default=BUDGETS_MIB, help="budgets in MiB"
    )
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=PATHS, help="paths to run")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: 2)")
    parser.add_argument(
        "--timeout", type=float, default=CHILD_TIMEOUT, help="seconds before a run is stopped"
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help=f"run {sorted(SLOW_CASES)} on the functional path too (about 12 minutes more)",
    )
    parser.add_argument(
        "--before",
        metavar="SRC",
        help="also run each case with the library from this source tree (e.g. an older "
        "checkout's src), the two taking turns, and report the time ratios",
    )
    parser.add_argument("--out", default=str(RESULTS), help="JSON output path (.txt beside it)")
    parser.add_argument("--only", choices=names, help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.only:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
