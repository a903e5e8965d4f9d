"""Start-up: how long ``import retrieval_metrics`` and ``retrieval-metrics --help`` take.

Each case runs in a fresh interpreter (the import caches of one run would hide the next's), the
library taken from ``src/`` of this tree or of ``--base`` (an earlier checkout) through
``PYTHONPATH``; the trees take turns, ``--runs`` times each (5), and the table keeps each case's
median, with ``import torch`` alone as the floor a metric class cannot go under (the classes are
torch modules).

Cases: ``import retrieval_metrics``; the first metric class read (``rm.HitRateAtK``: torch and
torchmetrics); ``python -m retrieval_metrics --help`` (the command's help: what
``retrieval-metrics --help`` runs).

Run (from the repository root, venv active):

    git worktree add /tmp/base <commit>
    python benchmarks/bench_startup.py --base /tmp/base

It prints a table and writes ``benchmarks/results/bench_startup.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "bench_startup.json"
CASES = {
    "import torch (floor)": ["-c", "import torch"],
    "import retrieval_metrics": ["-c", "import retrieval_metrics"],
    "rm.HitRateAtK (first class)": ["-c", "import retrieval_metrics as rm; rm.HitRateAtK"],
    "retrieval-metrics --help": ["-m", "retrieval_metrics", "--help"],
}


def timed(tree: Path, args: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, help="an earlier checkout to compare with")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    trees = {"this": HERE.parent} | ({"base": args.base} if args.base else {})
    times: dict[str, dict[str, list[float]]] = {case: {t: [] for t in trees} for case in CASES}
    for _ in range(args.runs):
        for case, command in CASES.items():
            for label, tree in trees.items():
                times[case][label].append(timed(tree, command))
    rows = []
    print(f"{'case':30s}" + "".join(f"{label:>12s}" for label in trees) + "  (median s)")
    for case in CASES:
        medians = {label: statistics.median(times[case][label]) for label in trees}
        rows.append({"case": case, "median_s": medians, "runs": times[case]})
        print(f"{case:30s}" + "".join(f"{medians[label]:12.3f}" for label in trees))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(
        {"trees": {k: str(v) for k, v in trees.items()}, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
