"""Benchmark: the metric classes on one GPU beside what a user writes instead, same process.

Four workloads, each through the classes as users run them (updates in batches, then
``compute()``; ``set_gallery`` for the corpus in device memory), with each counting backend
(``RETRIEVAL_METRICS_COUNTER``: the fused Triton kernel where Triton runs, and torch's kernels):

* ``sop``: same source, 60,502 x 512 in classes of 2 to 12 (SOP's size), hit rate@1/10, MAP@R,
  R-precision; float32 and bfloat16 states. Beside it: a blocked product + ``topk`` of the
  largest class (the three lines users write), in float32 and in bfloat16, and one product;
* ``msmarco``: MS MARCO dev's shape, 8,841,823 x 768 bfloat16 in device memory, 6,980
  bfloat16 queries, BEIR's measures + MRR@10; beside it a blocked bfloat16 product + running
  top-1000 (BEIR's exact search), and one product; and our run of the same top-1000 lists
  (``top_k``, what ``metric.run(1000)`` and ``--write-run`` list), its host syncs and peak
  memory, ``metric.run(1000)`` as a user calls it (the pairs made Python objects), and the
  values and that run from one pass (``run_depth=1000``: update, compute(), run(1000));
* ``image_text``: 5,000 images x 25,000 captions, D = 512, both directions; one product;
* ``qrels``: a 1,000,000 x 768 corpus in batches, 7,000 queries, BEIR's measures; one product.

Each time is the median of ``--repeats`` runs ended by ``torch.cuda.synchronize()``; beside it
the host synchronisations of one ``compute()`` (CUDA's sync debug mode, its warnings counted)
and the peak device memory above the start. The backends' values are compared with each other
(they must be equal). ``--small`` runs every workload at a size a CPU finishes in seconds (to
check the script; Triton is left out on the CPU).

    python benchmarks/bench_gpu.py --device cuda           # benchmarks/gpu_check.sh runs this
    python benchmarks/bench_gpu.py --device cpu --small    # smoke run

The report ends with the targets (:data:`TARGETS`): each workload's ratio to what the user
runs instead, and the host syncs where bounded, PASS or FAIL (at the full sizes; ``--small``
prints them too, to check the script, saying they do not apply).

Writes ``benchmarks/results/gpu_<device>.json`` and ``.txt`` (``--out`` to change the stem);
with ``--profile``, one ``compute()`` a workload is also profiled: the share of it the device
was busy and the kernels launched in the report, the operators taking most device and host time
in ``<stem>_profile.txt`` (what a missed target needs next, without another GPU run).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measuring import load_metric_classes

import retrieval_metrics as rm
from retrieval_metrics.functional.ranking.engine.counters import COUNTER_ENV
from retrieval_metrics.functional.ranking.engine.fp32 import full_fp32_products
from retrieval_metrics.functional.ranking.top_lists import top_k

load_metric_classes()
RESULTS = Path(__file__).resolve().parent / "results"
BEIR = [f"{m}@{k}" for m in ("ndcg", "map", "recall", "precision") for k in (1, 3, 5, 10, 100,
                                                                                 1000)]
SOP_NAMES = ["hit_rate@1", "hit_rate@10", "map@r", "r_precision"]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: Seconds one timing may take in all (``--budget``): a run slower than planned is repeated
#: only while another run still fits, so that a check on a GPU lent for minutes ends with
#: every workload's figures rather than a few workloads' medians.
BUDGET = [60.0]
PROFILE = [False]  # --profile


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> tuple[float, object]:
    """Median seconds of up to ``repeats`` runs of ``fn`` (synchronised; at least one, then
    another only while it fits in :data:`BUDGET` at the slowest run's time), and its last
    result."""
    times: list[float] = []
    result = None
    while len(times) < repeats and (not times or sum(times) + max(times) <= BUDGET[0]):
        sync(device)
        start = time.perf_counter()
        result = fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def syncs_and_peak(fn: Callable[[], object], device: torch.device) -> tuple[int | None, float]:
    """Host syncs of ``fn`` (CUDA's sync debug mode) and its peak device memory, in GiB."""
    if device.type != "cuda":
        fn()
        return None, 0.0
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    sync(device)
    peak = (torch.cuda.max_memory_allocated(device) - start) / 2**30
    return sum("synchroniz" in str(w.message) for w in caught), peak


#: A run longer than this many seconds is not profiled (``--profile``): the profiler's own cost
#: would take a lent GPU's minutes from the workloads still to come.
PROFILE_LIMIT = 20.0


def profiled(fn: Callable[[], object], device: torch.device, label: str) -> tuple[dict, str]:
    """One run of ``fn`` under ``torch.profiler``: its seconds, the device's busy seconds (the
    kernels' time, summed), the kernel launches, and two tables (the operators taking most
    device time, and most host time). A device busy a small share of the run says the host
    bounds it (Python, small operations, waits); a busy one, which kernels to look at. A
    profiler that fails is recorded, not raised: the figures come first."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    try:
        with profile(activities=activities) as prof:
            # (timed inside: starting the profiler takes a second or more the first time)
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            seconds = time.perf_counter() - start
        events = prof.key_averages()
        busy = sum(e.self_device_time_total for e in events) / 1e6
        launches = sum(e.count for e in events if "LaunchKernel" in e.key)
        tables = "\n".join(
            f"-- {label}: by {key}\n{events.table(sort_by=key, row_limit=12)}"
            for key in (["self_device_time_total"] if device.type == "cuda" else [])
            + ["self_cpu_time_total"]
        )
    except Exception as error:  # (any profiler failure: recorded, not raised)
        return {"error": f"{type(error).__name__}: {error}"}, f"-- {label}: {error}"
    summary = {"seconds": seconds, "device_busy_s": busy, "kernel_launches": launches}
    return summary, tables


def backends(device: torch.device) -> list[str]:
    """The counting backends to time: on CUDA the fused kernel (where Triton is) and torch's;
    elsewhere the device's own (``"default"``, the variable unset)."""
    from retrieval_metrics.functional.ranking.engine import triton_count

    if device.type != "cuda":
        return ["default"]
    return ["triton", "torch"] if triton_count.available() else ["torch"]


@contextlib.contextmanager
def products_taken():
    """How many of the ranking's products ran as what ("float32 x float32", or "bfloat16 x
    bfloat16 -> float32" on the tensor cores), counted while active."""
    taken: collections.Counter[str] = collections.Counter()
    original = torch.mm

    def mm(a, b, *args, **kwargs):
        out = kwargs.get("out_dtype")
        name = str(a.dtype).replace("torch.", "")
        taken[f"{name}{' -> ' + str(out).replace('torch.', '') if out else ''}"] += 1
        return original(a, b, *args, **kwargs)

    torch.mm = mm
    try:
        yield taken
    finally:
        torch.mm = original


PROFILES: list[str] = []  # the profiles' tables, written beside the figures (``--profile``)


def ours(make: Callable[[], rm.RetrievalMetrics], feed, device, repeats,
         label: str = "") -> dict:
    """The classes with each backend: median seconds (update + compute), host syncs and peak
    device memory of one compute(), and the values; with ``--profile``, the first backend's
    compute() profiled once (:func:`profiled`)."""
    out = {}
    for number, backend in enumerate(backends(device)):
        os.environ.pop(COUNTER_ENV, None)
        if backend != "default":
            os.environ[COUNTER_ENV] = backend

        def run():
            metric = make()
            feed(metric)
            return {k: float(v) for k, v in metric.compute().items()}

        seconds, values = timed(run, device, repeats)
        metric = make()
        with products_taken() as taken:  # (the updates too: their work, were there any)
            feed(metric)
            syncs, peak = syncs_and_peak(metric.compute, device)
        out[backend] = {"seconds": seconds, "host_syncs": syncs, "peak_gib": peak,
                        "products": dict(taken), "values": values}
        if PROFILE[0] and number == 0:
            if seconds > PROFILE_LIMIT:
                out[backend]["profile"] = {"skipped": f"a run took {seconds:.1f} s"}
            else:
                metric = make()
                feed(metric)
                summary, tables = profiled(metric.compute, device, f"{label} {backend} compute()")
                out[backend]["profile"] = summary
                PROFILES.append(tables)
    os.environ.pop(COUNTER_ENV, None)
    first = next(iter(out.values()))["values"]
    out["backends_equal"] = all(o["values"] == first for o in out.values()
                                if isinstance(o, dict))
    return out


def one_product(a: torch.Tensor, b: torch.Tensor, device, repeats, block: int = 2**16) -> float:
    """One a x b product (float32 out), in blocks of ``b``'s rows (no a x b matrix held)."""
    def run():
        for lo in range(0, b.shape[0], block):
            torch.mm(a, b[lo : lo + block].T)
    with full_fp32_products():
        return timed(run, device, repeats)[0]


def blocked_topk(q: torch.Tensor, g: torch.Tensor, k: int, same: bool, device, repeats,
                 rows: int = 8192) -> float:
    """The user's three lines: a blocked product and topk (self removed in same source)."""
    def run():
        for lo in range(0, q.shape[0], rows):
            s = q[lo : lo + rows] @ g.T
            if same:
                idx = torch.arange(lo, min(lo + rows, q.shape[0]), device=device)
                s[idx - lo, idx] = float("-inf")
            s.topk(k, dim=1)
    with full_fp32_products():
        return timed(run, device, repeats)[0]


def running_topk(q: torch.Tensor, g: torch.Tensor, k: int, device, repeats,
                 chunk: int = 2**20) -> float:
    """BEIR's exact search: the corpus in chunks, a running top-k per query."""
    def run():
        best = None
        for lo in range(0, g.shape[0], chunk):
            s = (q @ g[lo : lo + chunk].T).float()
            top = s.topk(min(k, s.shape[1]), dim=1).values
            best = top if best is None else torch.cat([best, top], 1).topk(k, dim=1).values
    with full_fp32_products():
        return timed(run, device, repeats)[0]


def sop(args, device) -> dict:
    n, dim = (3000, 64) if args.small else (60_502, 512)
    gen = torch.Generator().manual_seed(0)
    sizes = torch.randint(2, 13, (n,), generator=gen)
    labels = torch.repeat_interleave(torch.arange(n), sizes)[:n]
    labels = labels[torch.randperm(n, generator=gen)]
    centres = torch.nn.functional.normalize(torch.randn(int(labels.max()) + 1, dim, generator=gen))
    emb = torch.nn.functional.normalize(centres[labels] + 0.06 * torch.randn(n, dim,
                                                                             generator=gen))
    emb, labels = emb.to(device), labels.to(device)
    out = {"shape": [n, dim]}
    for dtype in (torch.float32, torch.bfloat16):
        x = emb.to(dtype)

        def feed(metric, x=x):
            for lo in range(0, n, 4096):
                metric.update(x[lo : lo + 4096], labels[lo : lo + 4096])

        name = str(dtype).split(".")[-1]
        out[name] = ours(lambda: rm.RetrievalMetrics(SOP_NAMES).to(device), feed, device,
                         args.repeats, f"sop {name}")
        out[name]["product_topk"] = blocked_topk(x, x, int(sizes.max()), True, device,
                                                 args.repeats)
        out[name]["one_product"] = one_product(x, x, device, args.repeats)
    return out


def msmarco(args, device) -> dict:
    docs, dim, queries = (50_000, 64, 200) if args.small else (8_841_823, 768, 6_980)
    gen = torch.Generator(device=device).manual_seed(0)
    corpus = torch.empty(docs, dim, dtype=torch.bfloat16, device=device)
    for lo in range(0, docs, 2**18):
        part = torch.randn(min(2**18, docs - lo), dim, generator=gen, device=device)
        corpus[lo : lo + 2**18] = torch.nn.functional.normalize(part)
    judged = torch.randperm(docs, generator=gen, device=device)[:queries]
    q = (corpus[judged].float() + 5.5 / dim**0.5 * torch.randn(queries, dim, generator=gen,
                                                                device=device))
    qrels = {i: {int(d): 1} for i, d in enumerate(judged.tolist())}
    ids, qids = torch.arange(docs, device=device), torch.arange(queries, device=device)

    def make(run_depth: int | None = None):
        metric = rm.RetrievalMetrics([*BEIR, "mrr@10"], qrels=qrels, protocol="beir",
                                     ignore_identical_ids=False, run_depth=run_depth).to(device)
        metric.set_gallery(corpus, ids=ids)
        return metric

    out = {"shape": [docs, dim, queries]}
    # (the queries in the corpus's dtype, as a bfloat16 encoder gives them: the products on the
    # tensor cores, as the user's product + topk below takes them)
    qb = q.to(torch.bfloat16)
    out["bfloat16"] = ours(make, lambda m: m.update(qb, ids=qids, role="query"), device,
                           max(1, args.repeats // 3), "msmarco bfloat16")
    out["bfloat16"]["product_topk"] = running_topk(qb, corpus, 1000, device, 1)
    out["bfloat16"]["one_product"] = one_product(qb, corpus, device, 1, block=2**20)

    def listed():  # (what metric.run(1000) and --write-run list: each query's 1,000 best)
        return top_k(qb, corpus, 1000)

    seconds, _ = timed(listed, device, 1)
    syncs, peak = syncs_and_peak(listed, device)
    out["bfloat16"]["run_top_k"] = {"seconds": seconds, "host_syncs": syncs, "peak_gib": peak}
    # as a user lists it: the metric fed, then run(1000), each query's (id, score) pairs back
    # in Python (what write_run writes)
    metric = make()
    metric.update(qb, ids=qids, role="query")
    seconds, run = timed(lambda: metric.run(1000), device, 1)
    out["bfloat16"]["metric_run"] = {"seconds": seconds,
                                     "pairs": sum(len(pairs) for pairs in run.values())}

    def values_and_run():  # (run_depth: the lists kept by the queries' ranking, no 2nd pass)
        metric = make(run_depth=1000)
        metric.update(qb, ids=qids, role="query")
        metric.compute()
        return metric.run(1000)

    seconds, run = timed(values_and_run, device, 1)
    out["bfloat16"]["values_and_run_depth"] = {
        "seconds": seconds, "pairs": sum(len(pairs) for pairs in run.values()),
    }
    return out


def image_text(args, device) -> dict:
    images, dim = (300, 64) if args.small else (5_000, 512)
    gen = torch.Generator().manual_seed(1)
    img = torch.nn.functional.normalize(torch.randn(images, dim, generator=gen)).to(device)
    owner = torch.arange(images).repeat_interleave(5).to(device)
    cap = torch.nn.functional.normalize(img[owner] + 0.08 * torch.randn(
        5 * images, dim, generator=gen).to(device))

    def feed(metric):
        for lo in range(0, owner.numel(), 1000):
            metric.update(img[owner[lo : lo + 1000]], cap[lo : lo + 1000], owner[lo : lo + 1000])

    out = {"shape": [images, 5 * images, dim]}
    out["float32"] = ours(lambda: rm.CrossModalRetrieval().to(device), feed, device,
                          args.repeats, "image_text float32")
    out["float32"]["one_product"] = one_product(img, cap, device, args.repeats)
    return out


def qrels_case(args, device) -> dict:
    docs, dim, queries = (40_000, 64, 300) if args.small else (1_000_000, 768, 7_000)
    gen = torch.Generator(device=device).manual_seed(2)
    corpus = torch.nn.functional.normalize(torch.randn(docs, dim, generator=gen, device=device))
    judged = torch.randperm(docs, generator=gen, device=device)[: 3 * queries].view(queries, 3)
    q = torch.nn.functional.normalize(corpus[judged[:, 0]] + 0.2 * torch.randn(
        queries, dim, generator=gen, device=device))
    qrels = {i: {int(d): 1 for d in row} for i, row in enumerate(judged.tolist())}

    def feed(metric):
        metric.update(q, ids=torch.arange(queries, device=device), role="query")
        for lo in range(0, docs, 100_000):
            metric.update(corpus[lo : lo + 100_000],
                          ids=torch.arange(lo, min(lo + 100_000, docs), device=device),
                          role="gallery")

    out = {"shape": [docs, dim, queries]}
    out["float32"] = ours(lambda: rm.RetrievalMetrics(
        BEIR, qrels=qrels, ignore_identical_ids=False).to(device), feed,
                          device, args.repeats, "qrels float32")
    out["float32"]["one_product"] = one_product(q, corpus, device, args.repeats)
    return out


WORKLOADS = {"sop": sop, "msmarco": msmarco, "image_text": image_text, "qrels": qrels_case}

#: The targets on a GPU (at the workloads' full sizes), against what a user runs instead in the
#: same process: (workload, dtype, the baseline's key in its row and its name, the bound on
#: ours / baseline, the bound on host syncs of one compute() or None). The default backend's
#: figures (what users get) are checked.
TARGETS = (
    ("sop", "float32", "product_topk", "the float32 product + topk", 1.0, None),
    ("sop", "bfloat16", "product_topk", "the bfloat16 product + topk", 1.0, None),
    ("msmarco", "bfloat16", "product_topk", "the bfloat16 product + running top-1000", 1.0,
     None),
    ("image_text", "float32", "one_product", "one product", 3.0, 20),
    ("qrels", "float32", "one_product", "one product", 1.5, 20),
)


def verdicts(results: dict) -> list[str]:
    """Each target of :data:`TARGETS` whose workload ran: the ratio, its bound and PASS or
    FAIL; the host syncs likewise where bounded (not counted off CUDA); and whether the
    counting backends gave the same values."""
    lines = []
    for name, dtype, key, baseline, bound, syncs_bound in TARGETS:
        row = results["workloads"].get(name, {}).get(dtype)
        if not isinstance(row, dict) or key not in row or "default" not in row:
            continue
        ours_s, alt = row["default"]["seconds"], row[key]
        ratio = ours_s / alt
        line = (f"{name} {dtype}: ours {ours_s:.3f} s = {ratio:.2f}x {baseline} (target <= "
                f"{bound:g}x): {'PASS' if ratio <= bound else 'FAIL'}")
        if syncs_bound is not None:
            syncs = row["default"]["host_syncs"]
            line += (f"; host syncs {syncs} (target <= {syncs_bound}): "
                     + ("not counted here" if syncs is None
                        else "PASS" if syncs <= syncs_bound else "FAIL"))
        line += f"; backends equal: {'PASS' if row['backends_equal'] else 'FAIL'}"
        lines.append(line)
    return lines


def report(results: dict) -> str:
    lines = []
    for name, workload in results["workloads"].items():
        for dtype, row in workload.items():
            if not isinstance(row, dict):
                continue
            alt = row.get("product_topk")
            for backend in backends(torch.device(results["device"])):
                o = row[backend]
                ratio = f", {o['seconds'] / alt:.2f}x product+topk" if alt else ""
                lines.append(
                    f"{name:10s} {dtype:8s} {backend:6s} ours {o['seconds']:8.3f} s"
                    f" ({o['seconds'] / row['one_product']:.2f}x one product{ratio}),"
                    f" host syncs {o['host_syncs']}, peak {o['peak_gib']:.2f} GiB, products"
                    f" {', '.join(f'{n} {k}' for k, n in o.get('products', {}).items())}"
                )
                prof = o.get("profile")
                if prof:
                    lines.append(f"{'':10s} {dtype:8s} {backend:6s} profile: " + (
                        f"compute {prof['seconds']:.3f} s, device busy {prof['device_busy_s']:.3f}"
                        f" s ({prof['device_busy_s'] / prof['seconds']:.0%}),"
                        f" {prof['kernel_launches']} kernel launches"
                        if "seconds" in prof else str(prof)))
            listed = row.get("run_top_k")
            if listed:
                lines.append(
                    f"{name:10s} {dtype:8s} run    top_k(1000) {listed['seconds']:8.3f} s"
                    f" ({listed['seconds'] / alt:.2f}x product+topk), host syncs"
                    f" {listed['host_syncs']}, peak {listed['peak_gib']:.2f} GiB"
                )
            as_run = row.get("metric_run")
            if as_run:
                lines.append(
                    f"{name:10s} {dtype:8s} run    metric.run(1000) {as_run['seconds']:8.3f} s"
                    f" ({as_run['pairs']:,} (id, score) pairs)"
                )
            both = row.get("values_and_run_depth")
            if both:
                lines.append(
                    f"{name:10s} {dtype:8s} run    run_depth=1000: update, compute(), run(1000)"
                    f" {both['seconds']:8.3f} s ({both['pairs']:,} pairs, one pass)"
                )
            extra = f"product+topk {alt:.3f} s, " if alt else ""
            lines.append(f"{'':10s} {dtype:8s} {extra}one product {row['one_product']:.3f} s,"
                         f" backends equal: {row['backends_equal']}")
    checked = verdicts(results)
    if checked:
        sizes = ("" if results.get("full_size", True)
                 else " (smoke sizes: the targets hold at the full sizes only)")
        lines += ["", f"targets, against the user's alternative in this process{sizes}:",
                  *(f"  {line}" for line in checked)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--out", default=None)
    parser.add_argument("--budget", type=float, default=BUDGET[0],
                        help="seconds one timing may take in all (repeats stop before)")
    parser.add_argument("--profile", action="store_true",
                        help="profile one compute() a workload (first backend): the device's "
                        "busy share and the top operators, in <out>_profile.txt")
    args = parser.parse_args()
    BUDGET[0] = args.budget
    PROFILE[0] = args.profile
    device = torch.device(args.device)
    results: dict = {"device": str(device), "torch": torch.__version__, "workloads": {},
                     "full_size": not args.small}
    if device.type == "cuda":
        results["gpu"] = torch.cuda.get_device_name(device)
    stem = args.out or str(RESULTS / f"gpu_{device.type}{'_smoke' if args.small else ''}")
    for name in args.workloads.split(","):
        start = time.perf_counter()
        results["workloads"][name] = WORKLOADS[name](args, device)
        print(f"[{name}: {time.perf_counter() - start:.1f} s]", flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        # written after each workload: a run stopped by its time limit keeps what it measured
        text = report(results)
        Path(stem + ".json").write_text(json.dumps(results, indent=1))
        Path(stem + ".txt").write_text(text + "\n")
        if PROFILES:
            Path(stem + "_profile.txt").write_text("\n\n".join(PROFILES) + "\n")
    print(text)


if __name__ == "__main__":
    main()
