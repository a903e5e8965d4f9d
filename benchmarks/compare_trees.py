"""Two source trees of the library, timed on the same workloads through the metric classes.

A refactoring must not slow the path users run. This script times each workload with the
library imported from ``--base`` (e.g. a worktree of an earlier commit) and from this tree, in
fresh subprocesses that take turns (base, this, base, this, ...), and reports the median time of
each and their ratio: the same machine, the same minutes, so the ratio holds when the machine's
speed drifts. Every workload goes through the classes (``update`` in batches, then ``compute``),
and the values of both trees are compared (they must be equal).

Workloads: same source (a good model, classes of 5; SOP's size with classes of varied size, as
every real dataset has them; identical embeddings; a weak model; binary codes full of ties),
query/gallery, ranked lists of str ids, torchmetrics' scores form, and image-text both ways.

Run (from the repository root, venv active, on a quiet machine):

    git worktree add /tmp/base <commit>
    python benchmarks/compare_trees.py --base /tmp/base [--rounds 3] [--only NAME ...]

It prints a table and writes ``benchmarks/results/compare_trees.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "compare_trees.json"
MARKER = "@@RESULT "
NAMES = ["hit_rate@1", "hit_rate@10", "map@r", "map", "mrr", "ndcg@10"]
SOP_NAMES = ["hit_rate@1", "hit_rate@2", "hit_rate@4", "hit_rate@8", "map@r", "r_precision", "mrr"]

WORKLOADS = {
    "same_source_good": "20,000 x 128, classes of 5, good model",
    "sop_varied": "60,502 x 128 (SOP's test split), classes of 1 to ~16 (5 on average) drawn at "
    "random, SOP's measures",
    "identical": "10,000 identical 2-D points, 2 labels",
    "weak": "6,000 x 128, 100 classes, weak model",
    "hashing": "6,000 32-bit binary codes, 10 classes",
    "query_gallery": "5,000 queries x 30,000 gallery x 128, classes of 10",
    "ranked_lists": "20,000 questions x 100 str ids",
    "scores": "torchmetrics' form, 10,000 queries x 100 candidates",
    "crossmodal": "1,000 images x 5,000 captions x 256, both directions",
}


def _data(name: str):
    import torch

    gen = torch.Generator().manual_seed(0)

    def classes(n: int, dim: int, size: int, noise: float):
        labels = torch.arange(n) // size
        centres = torch.randn(int(labels.max()) + 1, dim, generator=gen)
        return centres[labels] + noise * torch.randn(n, dim, generator=gen), labels

    if name == "same_source_good":
        return classes(20_000, 128, 5, 0.6)
    if name == "sop_varied":
        # each item's class drawn uniformly from n / 5: sizes 1 to about 16, as a real dataset's
        # vary (every real dataset; classes of exactly 5 hid the one-sided pass's regression)
        n, dim = 60_502, 128
        labels = torch.randint(0, n // 5, (n,), generator=gen)
        centres = torch.randn(n // 5, dim, generator=gen)
        centres /= centres.norm(dim=1, keepdim=True)
        return centres[labels] + 1.4 / dim**0.5 * torch.randn(n, dim, generator=gen), labels
    if name == "identical":
        return torch.ones(10_000, 2), torch.arange(10_000) % 2
    if name == "weak":
        return classes(6_000, 128, 60, 2.5)
    if name == "hashing":
        emb, labels = classes(6_000, 32, 600, 2.0)
        return torch.sign(emb), labels
    if name == "query_gallery":
        g, gl = classes(30_000, 128, 10, 0.8)
        pick = torch.randperm(30_000, generator=gen)[:5_000]
        return (g[pick] + 0.3 * torch.randn(5_000, 128, generator=gen), gl[pick]), (g, gl)
    if name == "ranked_lists":
        ranked = [[f"d{(q * 7 + i * 13) % 50_000}" for i in range(100)] for q in range(20_000)]
        relevant = [{f"d{(q * 7 + 13 * (q % 120)) % 50_000}", f"d{q}"} for q in range(20_000)]
        return ranked, relevant
    if name == "scores":
        preds = torch.rand(10_000 * 100, generator=gen)
        target = (torch.rand(10_000 * 100, generator=gen) < 0.05).long()
        return preds, target, torch.arange(10_000).repeat_interleave(100)
    if name == "crossmodal":
        img = torch.randn(1_000, 256, generator=gen)
        cap = img.repeat_interleave(5, 0) + 0.8 * torch.randn(5_000, 256, generator=gen)
        return img.repeat_interleave(5, 0), cap, torch.arange(1_000).repeat_interleave(5)
    raise ValueError(name)


def child(name: str) -> dict[str, Any]:
    """One timed run of workload ``name`` with whichever library ``sys.path`` finds first."""
    import torch

    import retrieval_metrics as rm

    torch.set_num_threads(2)
    data = _data(name)
    # The classes import torchmetrics when the first one is made (lazily, in trees after
    # 44b1674): made once here, before the clock, so that neither tree's time holds an import.
    # (Not measuring.load_metric_classes: the base tree's library may lack CrossModalRetrieval's
    # keywords; both trees have these.)
    rm.RetrievalMetrics(["hit_rate@1"])
    rm.CrossModalRetrieval(k=(1,))
    start = time.perf_counter()
    if name == "crossmodal":
        images, captions, ids = data
        m = rm.CrossModalRetrieval(k=(1, 5, 10))
        for s in range(0, 5_000, 1_000):
            m.update(images[s : s + 1_000], captions[s : s + 1_000], ids[s : s + 1_000])
    else:
        m = rm.RetrievalMetrics(SOP_NAMES if name == "sop_varied" else NAMES)
        if name == "query_gallery":
            (q, ql), (g, gl) = data
            for s in range(0, q.shape[0], 4096):
                m.update(q[s : s + 4096], ql[s : s + 4096], role="query")
            for s in range(0, g.shape[0], 4096):
                m.update(g[s : s + 4096], gl[s : s + 4096], role="gallery")
        elif name == "ranked_lists":
            ranked, relevant = data
            for s in range(0, len(ranked), 2_000):
                m.update(ranked_ids=ranked[s : s + 2_000], relevant_ids=relevant[s : s + 2_000])
        elif name == "scores":
            preds, target, indexes = data
            for s in range(0, preds.numel(), 100_000):
                m.update(preds=preds[s : s + 100_000], target=target[s : s + 100_000],
                         indexes=indexes[s : s + 100_000])
        else:
            emb, labels = data
            for s in range(0, emb.shape[0], 4096):
                m.update(emb[s : s + 4096], labels[s : s + 4096])
    values = m.compute()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "values": {k: float(v) for k, v in values.items()}}


def run_child(tree: Path, name: str) -> dict[str, Any]:
    code = (
        f"import sys; sys.path.insert(0, {str(tree / 'src')!r}); sys.path.insert(1, {str(HERE)!r});"
        f" import json, compare_trees as c; print({MARKER!r} + json.dumps(c.child({name!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=1800, check=True
    ).stdout
    line = next(line for line in out.splitlines() if line.startswith(MARKER))
    return json.loads(line[len(MARKER):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the other source tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=list(WORKLOADS))
    args = parser.parse_args()
    this = HERE.parent
    rows = []
    for name in args.only or WORKLOADS:
        times: dict[str, list[float]] = {"base": [], "this": []}
        values: dict[str, dict[str, float]] = {}
        for _ in range(args.rounds):
            for label, tree in (("base", args.base), ("this", this)):
                result = run_child(tree, name)
                times[label].append(result["seconds"])
                values[label] = result["values"]
        base, ours = statistics.median(times["base"]), statistics.median(times["this"])
        equal = all(
            abs(values["base"][k] - values["this"][k]) <= 1e-6 * max(1.0, abs(values["base"][k]))
            or (values["base"][k] != values["base"][k] and values["this"][k] != values["this"][k])
            for k in values["base"]
        ) and set(values["base"]) == set(values["this"])
        rows.append({"workload": name, "about": WORKLOADS[name], "base_s": base, "this_s": ours,
                     "ratio": ours / base, "rounds": times, "values_equal": equal})
        print(f"{name:18s} base {base:7.3f} s  this {ours:7.3f} s  ratio {ours / base:5.2f}  "
              f"values {'equal' if equal else 'DIFFER'}", flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"base": str(args.base), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
