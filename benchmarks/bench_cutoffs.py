"""Cut-offs and batches on the data users bring: the classes as users run them beside the few
lines a user writes instead, in the same process.

Four workloads, each a ``retrieval_metrics.RetrievalMetrics`` made fresh and updated (timed
apart: ``update s``), then ``compute()`` (``compute s``), and the user's alternative on the same
tensors right after it (``user s``; ``ratio`` is compute over it: the updates of a validation
loop run beside the model's forward passes):

* ``deep``: a weak model (random 64-d embeddings, 100 classes, 8,000 items, same source) at
  ``recall@10``, ``recall@100`` and ``recall@1000``; the user's: a blocked cosine product, the
  query itself masked, ``topk(K)``, the relevant items found over the relevant items.
* ``huge``: 6,000 x 128 embeddings, half of them one class, at ``hit_rate@1`` and
  ``recall@10``; the user's: the same blocked product and ``topk(K)``.
* ``batched``: 200 queries against 80,000 gallery items given 8 rows an update (a dataloader's
  batches), labels in random order, ``hit_rate@1`` and ``hit_rate@10``; the user's: ``torch.cat``
  of the batches, then the blocked product and ``topk(10)``.
* ``narrow``: 400,000 queries against a gallery of 10 items (one a class, 64-d, each query near
  its class's item), ``hit_rate@1`` and ``recall@5``; the user's: the blocked product and
  ``topk(5)``.

Where the data has no exact ties (all four), the user's values must equal ours; the table shows
both. Times: the fastest of ``--repeats`` rounds, ours and the user's taking turns.

    python benchmarks/bench_cutoffs.py              # about a minute on 2 cores
    python benchmarks/bench_cutoffs.py --threads 1

It writes ``benchmarks/results/bench_cutoffs.json`` and ``.txt``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from measuring import cpu_model, load_metric_classes

import retrieval_metrics as rm

RESULTS = Path(__file__).resolve().parent / "results" / "bench_cutoffs.json"
BLOCK = 1024


def blocked_topk_found(q: torch.Tensor, g: torch.Tensor, same: bool, k: int) -> torch.Tensor:
    """Per query, the gallery positions of its top ``k`` by cosine (the query itself masked
    where ``same``), as a user computes them: blocks of queries, one product each."""
    qn, gn = torch.nn.functional.normalize(q, dim=1), torch.nn.functional.normalize(g, dim=1)
    out = []
    for s in range(0, q.shape[0], BLOCK):
        scores = qn[s : s + BLOCK] @ gn.T
        if same:
            rows = torch.arange(s, min(s + BLOCK, q.shape[0]))
            scores[rows - s, rows] = -float("inf")
        out.append(scores.topk(k, dim=1).indices)
    return torch.cat(out)


def user_values(q, ql, g, gl, same: bool, names: list[str]) -> dict[str, float]:
    """hit_rate@K and recall@K from the blocked top K (queries without relevant items left out,
    as the metric leaves them out by default)."""
    k_max = max(int(n.split("@")[1]) for n in names)
    top = blocked_topk_found(q, g, same, k_max)
    hits = gl[top] == ql[:, None]
    relevant = (gl[None, :] == ql[:, None]).sum(1) - (1 if same else 0)
    keep = relevant > 0
    values = {}
    for name in names:
        base, k = name.split("@")
        found = hits[:, : int(k)].sum(1)[keep]
        score = (found > 0).double() if base == "hit_rate" else found / relevant[keep]
        values[name] = float(score.double().mean())
    return values


def same_source(x: torch.Tensor, labels: torch.Tensor) -> tuple[Callable, Callable]:
    """The metric fed the set in one update (each item queries the others), and the user's
    values of the same set."""

    def ours(names):
        m = rm.RetrievalMetrics(names)
        m.update(x, labels)
        return m

    return ours, lambda names: user_values(x, labels, x, labels, True, names)


def workload(name: str) -> tuple[list[list[str]], Callable[[list[str]], Any], Callable]:
    gen = torch.Generator().manual_seed(0)
    if name == "deep":
        x = torch.randn(8000, 64, generator=gen)
        labels = torch.randint(0, 100, (8000,), generator=gen)
        calls = [["recall@10"], ["recall@100"], ["recall@1000"]]
        return calls, *same_source(x, labels)
    if name == "huge":
        labels = torch.randint(1, 100, (6000,), generator=gen)
        labels[:3000] = 0
        labels = labels[torch.randperm(6000, generator=gen)]
        centres = torch.randn(100, 128, generator=gen)
        x = torch.randn(6000, 128, generator=gen) + 0.5 * centres[labels]
        calls = [["hit_rate@1"], ["recall@10"]]
        return calls, *same_source(x, labels)
    if name == "narrow":
        g, gl = torch.randn(10, 64, generator=gen), torch.arange(10)
        ql = torch.randint(0, 10, (400_000,), generator=gen)
        q = g[ql] + 3.0 * torch.randn(400_000, 64, generator=gen)
        calls = [["hit_rate@1", "recall@5"]]

        def ours(names):
            m = rm.RetrievalMetrics(names)
            m.update(q, ql, role="query")
            m.update(g, gl, role="gallery")
            return m

        return calls, ours, lambda names: user_values(q, ql, g, gl, False, names)
    g = torch.randn(80000, 64, generator=gen)
    gl = torch.randint(0, 16000, (80000,), generator=gen)
    # queries near their first gallery copies: hit rates between 0 and 1
    q, ql = g[:200] + 2.0 * torch.randn(200, 64, generator=gen), gl[:200].clone()
    calls = [["hit_rate@1", "hit_rate@10"]]

    def ours(names):
        m = rm.RetrievalMetrics(names)
        m.update(q, ql, role="query")
        for s in range(0, 80000, 8):
            m.update(g[s : s + 8], gl[s : s + 8], role="gallery")
        return m

    def user(names):
        return user_values(q, ql, torch.cat([g[s : s + 8] for s in range(0, 80000, 8)]), gl,
                           False, names)

    return calls, ours, user


def clocked(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load_metric_classes()
    rows, lines = [], []
    header = (f"machine: {cpu_model()}, {torch.get_num_threads()} threads, torch "
              f"{torch.__version__}, python {platform.python_version()}")
    lines.append(header)
    lines.append(
        f"{'workload':<8} {'metrics':<24} {'update s':>8} {'compute s':>9} {'user s':>7} "
        f"{'ratio':>6}  values (ours / user's)"
    )
    for name in ("deep", "huge", "batched", "narrow"):
        calls, ours, user = workload(name)
        for names in calls:
            t_update, t_ours, t_user = (float("inf"),) * 3
            for _ in range(args.repeats):  # taking turns
                t, metric = clocked(partial(ours, names))
                t_update = min(t_update, t)
                t, got = clocked(metric.compute)
                t_ours = min(t_ours, t)
                t, want = clocked(partial(user, names))
                t_user = min(t_user, t)
            values = {n: (round(float(got[n]), 6), round(want[n], 6)) for n in names}
            rows.append({"workload": name, "metrics": names, "update_s": t_update,
                         "compute_s": t_ours, "user_s": t_user, "values_ours_user": values})
            shown = ", ".join(f"{n} {a} / {b}" for n, (a, b) in values.items())
            lines.append(f"{name:<8} {','.join(names):<24} {t_update:8.3f} {t_ours:9.3f} "
                         f"{t_user:7.3f} {t_ours / t_user:6.2f}  {shown}")
            print(lines[-1], flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"machine": header, "rows": rows}, indent=1) + "\n")
    RESULTS.with_suffix(".txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
