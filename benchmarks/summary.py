"""One table for the speed workloads, from the JSON the benchmarks wrote.

Every ratio comes from the run that measured it (the baseline and the peers timed in the same
script, on the same machine and load); this script only collects them next to their goals:

* ``bench_inputs.json``: torchmetrics' form (100,000 queries x 100 candidates) and ranked lists
  of str ids, as ratios to one ``torch.topk(scores, 10)``; torchmetrics and ranx.
* ``bench_ranking.json``: a same-source Stanford-Online-Products-sized ranking (60,502 x 128),
  as ratios to the floor (2 N^2 D at the machine's square-GEMM rate) and to faiss exact kNN; the
  100,000 x 100,000 memory case with its peak RSS against embeddings + budget + 300 MiB.
* ``bench_crossmodal.json``: 5,000 images x 25,000 captions in both directions, as a ratio to
  one 5,000 x 25,000 ``torch.mm``.
* ``bench_distributed.json``: the same-source 50,000-item ``compute()`` on 2 gloo processes
  against 1, beside the machine's ceiling (the same products split over 2 processes).
* ``bench_stress.json``: degenerate data (identical embeddings, 2 classes of uniform points)
  through ``RetrievalMetrics``, as a ratio to a blocked product + full sort of every row.
* ``bench_qrels.json``: a 1,000,000 x 384 corpus scored against judgments through the classes,
  as a ratio to one query x corpus product at the machine's square-GEMM rate, with its peak;
  sentence-transformers' evaluator and faiss' exact top-100 search.

Run after the benchmarks (from the repository root):

    python benchmarks/summary.py

It prints the table and writes ``benchmarks/results/summary.txt``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def rows_inputs(report: dict[str, Any]) -> list[list[str]]:
    base = report["baseline_topk"]["seconds"]
    res = report["results"]

    def ratio(key: str) -> float | None:
        return res[key]["seconds"] / base if key in res else None

    tm, ranx = ratio("torchmetrics"), ratio("ranx")
    return [
        [
            "torchmetrics' form, 100k x 100, pairs shuffled",
            f"{fmt(ratio('scores_shuffled'))}x topk",
            "<= 10x",
            f"torchmetrics {fmt(tm, '.0f')}x",
        ],
        [
            "torchmetrics' form, pairs in query order",
            f"{fmt(ratio('scores_in_order'))}x topk",
            "<= 5x",
            "",
        ],
        [
            "measures for 100k queries (5 metrics)",
            f"{fmt(res['scores_shuffled'].get('measures_seconds'), '.3f')} s",
            "< 0.1 s",
            "",
        ],
        [
            "ranked lists of str ids, 100k x 100",
            f"{fmt(ratio('lists'))}x topk",
            "<= 10x",
            f"ranx {fmt(ranx, '.0f')}x (warm)",
        ],
    ]


def rows_ranking(report: dict[str, Any]) -> list[list[str]]:
    floor = report["floor"]["seconds"]
    methods = report["methods"]

    def seconds(key: str) -> float | None:
        return methods.get(key, {}).get("seconds")

    def to_floor(key: str) -> float | None:
        # the median of the per-round ratios where the method ran in rounds with the floor
        method = methods.get(key, {})
        if "ratio_to_floor" in method:
            return method["ratio_to_floor"]
        return method["seconds"] / floor if "seconds" in method else None

    faiss = methods.get("faiss", {})
    n, dim = report["data"]["n"], report["data"]["dim"]
    rows = [
        [
            f"same source {n:,} x {dim}, hit@1/2/4/8 + MAP@R + R-prec + MRR",
            f"{fmt(to_floor('ours'))}x floor",
            "<= 1.0x floor",
            f"faiss {fmt(to_floor('faiss'))}x floor, PML {fmt(to_floor('pml'))}x",
        ],
        [
            "  the same, ours / faiss IndexFlatIP",
            f"{fmt(faiss.get('ours_over_this'))}",
            "<= 0.6",
            "",
        ],
    ]
    if seconds("ours_class") is not None:
        cls = methods["ours_class"]
        faiss_s = seconds("faiss")
        rows.append(
            [
                "  through RetrievalMetrics (updates of 4,096 rows, then compute())",
                f"{fmt(to_floor('ours_class'))}x floor",
                "<= 1.0x floor, <= 1.1x functional",
                f"functional / classes {fmt(cls.get('ours_over_this'))}, classes / faiss "
                f"{fmt(cls['seconds'] / faiss_s) if faiss_s else '-'}",
            ]
        )
    if seconds("ours_full") is not None:
        rows.append(
            [
                "  the whole ranking (adds full mAP)",
                f"{fmt(to_floor('ours_full'))}x floor",
                "",
                "",
            ]
        )
    mem = report.get("memory_case")
    if mem:
        rows.append(
            [
                f"memory case {mem['n']:,} x {mem['n']:,}, D={mem['dim']}, "
                f"budget {mem['memory_budget'] // 2**20} MiB",
                f"{fmt(mem['seconds'] / mem['floor_seconds'])}x floor, "
                f"peak {mem['peak_rss_mib']:.0f} MiB",
                f"peak <= {mem['target_budget_mib']:.0f} MiB",
                "PASS" if mem["target_budget_pass"] else "FAIL",
            ]
        )
    return rows


def rows_crossmodal(report: dict[str, Any]) -> list[list[str]]:
    res = report["results"]
    naive = res.get("naive", {}).get("ratio_to_product")
    return [
        [
            "image-text 5k x 25k, D=512, both directions",
            f"{fmt(res['ours']['ratio_to_product'])}x one product",
            "<= 1.3x",
            f"naive {fmt(naive)}x",
        ]
    ] + (
        [
            [
                "the same from a weak model (R@1 near 0.03)",
                f"{fmt(report['weak']['ours']['ratio_to_product'])}x its product",
                "",
                "",
            ]
        ]
        if "weak" in report
        else []
    )


def rows_distributed(report: dict[str, Any]) -> list[list[str]]:
    speed = report["speedup"]
    ceiling = speed.get("ceiling")
    return [
        [
            f"same source {report['n']:,} x {report['dim']}, 2 processes vs 1 (1 thread each)",
            f"{fmt(speed['speedup'])}x faster",
            ">= 1.9x",
            f"machine ceiling {fmt(ceiling)}x" if ceiling is not None else "",
        ]
    ]


def rows_stress(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for case in report["cases"]:
        if case["case"] not in ("identical", "uniform"):
            continue
        rows.append(
            [
                f"{case['about']} (RetrievalMetrics)",
                f"{fmt(case['ours_over_naive'])}x mm + full sort",
                "<= 2x",
                "growth within budget" if case["growth_within_bound"] else "growth OVER budget",
            ]
        )
    return rows


def rows_qrels(report: dict[str, Any]) -> list[list[str]]:
    res = report["results"]
    classes = res["classes"]
    peers = []
    for name, label in (("sentence_transformers", "sentence-transformers"), ("faiss", "faiss")):
        if name in res and res[name].get("seconds"):
            peers.append(f"{label} {fmt(classes['seconds'] / res[name]['seconds'])}x")
    bound = report.get("memory_bound_mib")
    peak = classes["peak_above_mib"]
    return [
        [
            f"judgments, {report['docs']:,} x {report['dim']} corpus, {report['queries']:,} "
            "queries, BEIR's 30 measures",
            f"{fmt(report['time_ratio'])}x one product, peak {peak:,.0f} MiB",
            f"<= 1.2x, peak <= {bound:,.0f} MiB" if bound else "<= 1.2x",
            "ours / " + ", ours / ".join(peers) if peers else "",
        ]
    ]


def main() -> int:
    rows: list[list[str]] = []
    sources = []
    for name, build in (
        ("bench_inputs", rows_inputs),
        ("bench_ranking", rows_ranking),
        ("bench_crossmodal", rows_crossmodal),
        ("bench_distributed", rows_distributed),
        ("bench_stress", rows_stress),
        ("bench_qrels", rows_qrels),
    ):
        report = load(name)
        if report is None:
            rows.append([f"({name}.json missing: run benchmarks/{name}.py)", "", "", ""])
            continue
        rows.extend(build(report))
        machine = report.get("machine") or {"cpu": report.get("device") or "cpu"}
        if isinstance(machine, dict):
            # bench_stress records torch per case, bench_distributed at the top
            torch_version = machine.get("torch") or report.get("torch")
            if torch_version is None and report.get("cases"):
                torch_version = report["cases"][0].get("torch")
            machine = f"{machine.get('cpu', '?')}, torch {torch_version or '?'}"
        sources.append(f"{name}: {machine}")
    header = ["workload", "ours", "goal", "peers (same run)"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines += ["", *sources]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    (RESULTS / "summary.txt").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
