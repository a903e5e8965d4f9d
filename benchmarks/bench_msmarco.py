"""Benchmark: an MS MARCO-shaped evaluation on one machine, the corpus read from disk.

MS MARCO passage dev: 6,980 queries against 8,841,823 passages; at 768 dimensions the corpus
is 12.6 GiB in float16. This script generates a corpus of that shape (``--docs``, ``--dim``,
``--dtype``) as a ``.npy`` written in chunks (never held whole), its ids ("D0", "D1", ...) in
``corpus.ids.npy`` beside it, ``--queries`` queries (each a noisy copy of one passage, its
judged passage; MS MARCO judges about one passage per query) and their qrels, in ``--dir``
(kept between runs: the same arguments reuse the files). Paths, each in its own process:

* ``classes``: ``RetrievalMetrics(BEIR's measures + mrr@10, qrels=..., protocol="beir")``,
  ``set_gallery("corpus.npy", ids="corpus.ids.npy")`` (the corpus stays on disk), the queries in
  one ``update`` (as BEIR searches them; updates against a corpus given once are kept and
  ranked together at ``compute()``, one pass over the corpus whatever their size),
  ``compute()``.
  Time, and peak resident memory above the process's before
  ``set_gallery`` (VmHWM, reset just before).
* ``cli``: ``retrieval-metrics evaluate --query q.npz --gallery corpus.npy --qrels qrels.tsv
  --protocol beir`` (one process: its peak counts the interpreter, torch and the queries).
* ``reference``: the judged passages' ranks by a plain blocked float32 product of the upcast
  numbers (the corpus read in chunks of 262,144 rows: count the passages scoring above each
  judged one, itself left out), and MRR@10, nDCG@10 and recall@100/1000 from those ranks: the
  classes' values must equal them (to 1e-6). The products' shapes differ from the ranking's, so
  float32 rounding may order a passage within a few units in the last place of a judged one's
  score otherwise: the queries with one within 1e-6 are reported beside.
* the reference time: one queries x corpus float32 product at this machine's square-GEMM rate
  (a 4096^3 float32 matmul, measured in the classes' process before and after; the faster sets
  the product time), ``2 Q N D / rate``.

Bounds (issue's): classes and CLI within 1.3x the product, peak at most 4 GiB above the start.

``--device DEVICE`` measures the classes with the corpus in that device's memory instead (no
disk; what ``benchmarks/gpu_check.sh`` runs on a GPU, at the whole dev size, 6,980 queries):
the corpus generated there in chunks, in each of ``--device-dtypes`` (bfloat16 and float32 by
default), given with ``set_gallery``, the queries in one update, ``compute()``, timed with the
device synchronised, against one queries x corpus float32 product at the device's square-GEMM
rate; the values of each dtype beside the others'. Writes ``bench_msmarco_DEVICE.json``/``.txt``.

Run (about 15 minutes on 2 cores at the full size, most of it the three products):

    python benchmarks/bench_msmarco.py                                   # 8,841,823 x 768 fp16
    python benchmarks/bench_msmarco.py --docs 1000000 --dtype float32    # beside:
    python benchmarks/bench_msmarco.py --docs 1000000 --dtype float16
    python benchmarks/bench_msmarco.py --docs 200000 --queries 200       # a quick look
    python benchmarks/bench_msmarco.py --device cuda --queries 6980      # on a GPU, in memory

``--cold`` drops the corpus from the page cache (``posix_fadvise``, Linux) before the classes and
the CLI, so that they read it from the disk while they rank (the disk's read-ahead window is
printed beside: Linux reads a corpus ahead in pieces of 128 KiB, its default window).

Writes ``benchmarks/results/bench_msmarco[_N_DTYPE][_cold].json`` and ``.txt``.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measuring import (
    FAST_GEMM,
    cpu_model,
    load_metric_classes,
    proc_status_mib,
    reset_peak_rss,
    timed_products,
)

RESULTS = Path(__file__).resolve().parent / "results"
CUTOFFS = (1, 3, 5, 10, 100, 1000)
NAMES = [f"{m}@{k}" for m in ("ndcg", "map", "recall", "precision") for k in CUTOFFS]
NAMES += ["mrr@10"]
CHUNK = 262_144
# query = its passage + noise of this norm (the passage has norm 1): cosine about 0.18 with
# it, about five standard deviations of a random passage's (1 / sqrt(768)): its judged passage
# lands at rank 1 to a few dozen, as a middling model's would
NOISE = 5.5
#: scores this close to a judged passage's are reported as possible ties (the reference's
#: product rounds in another order than the ranking's)
NEAR = 1e-6


def generate(args) -> Path:
    """The corpus, ids, queries and qrels in ``args.dir`` (reused when already written)."""
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / "made.json"
    made = {"docs": args.docs, "dim": args.dim, "dtype": args.dtype, "queries": args.queries}
    if stamp.exists() and json.loads(stamp.read_text()) == made:
        return folder
    rng = np.random.default_rng(0)
    corpus = np.lib.format.open_memmap(folder / "corpus.npy", mode="w+", dtype=args.dtype,
                                       shape=(args.docs, args.dim))
    for start in range(0, args.docs, CHUNK):
        stop = min(args.docs, start + CHUNK)
        part = rng.standard_normal((stop - start, args.dim), dtype=np.float32)
        part /= np.linalg.norm(part, axis=1, keepdims=True)
        corpus[start:stop] = part
    corpus.flush()
    np.save(folder / "corpus.ids.npy", np.array([f"D{i}" for i in range(args.docs)]))
    judged = rng.choice(args.docs, size=args.queries, replace=False)
    base = np.asarray(corpus[np.sort(judged)], dtype=np.float32)[np.argsort(np.argsort(judged))]
    del corpus
    noise = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    noise *= NOISE / np.linalg.norm(noise, axis=1, keepdims=True)
    queries = (base + noise).astype(np.float32)
    np.savez(folder / "q.npz", embeddings=queries,
             ids=np.array([f"Q{i}" for i in range(args.queries)]))
    lines = ["query-id\tcorpus-id\tscore"] + [f"Q{i}\tD{d}\t1" for i, d in enumerate(judged)]
    (folder / "qrels.tsv").write_text("\n".join(lines) + "\n")
    stamp.write_text(json.dumps(made))
    return folder


def _qrels(folder: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels.tsv").read_text().splitlines()[1:]:
        q, d, g = line.split("\t")
        qrels.setdefault(q, {})[d] = int(g)
    return qrels


def square_gemm_rate() -> float:
    import torch

    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    a @ b
    times = []
    for _ in range(3):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * 4096**3 / sorted(times)[1]


def drop_from_page_cache(path: Path) -> None:
    """Drop ``path``'s pages from the page cache (written out first: clean pages go without
    root), so that the run after it reads the file from the disk (``--cold``)."""
    if not hasattr(os, "posix_fadvise"):
        raise SystemExit("--cold drops the corpus from the page cache with posix_fadvise, which "
                         "this system lacks")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_ahead_kib(path: Path) -> int | None:
    """The read-ahead window of the disk ``path`` lies on (Linux's ``read_ahead_kb``, of the
    whole disk where the file is on a partition); None where sysfs does not say."""
    dev = os.stat(path).st_dev
    block = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for queue in (block / "queue", block.resolve().parent / "queue"):
        try:
            return int((queue / "read_ahead_kb").read_text())
        except (OSError, ValueError):
            continue
    return None


def run_classes(folder: Path, cold: bool = False) -> dict:
    import torch

    import retrieval_metrics as rm

    # the classes' lazy imports before the clock starts: the first metric made imports
    # torchmetrics (and, where it is installed, transformers through it: about 2 s), which
    # `import retrieval_metrics.metrics` alone does not
    load_metric_classes()
    rates = [square_gemm_rate()]
    data = np.load(folder / "q.npz")
    queries, q_ids = torch.from_numpy(data["embeddings"]), data["ids"].tolist()
    qrels = _qrels(folder)
    if cold:
        drop_from_page_cache(folder / "corpus.npy")
    reset_peak_rss()
    start_rss = proc_status_mib("VmRSS")
    t0 = time.perf_counter()
    metric = rm.RetrievalMetrics(NAMES, qrels=qrels, protocol="beir")
    metric.set_gallery(folder / "corpus.npy", ids=folder / "corpus.ids.npy")
    t1 = time.perf_counter()
    # the queries in one update, as BEIR searches them (against a corpus given once, the
    # updates are ranked together at compute(): one pass over the corpus whatever their size)
    with timed_products("cpu") as in_products:
        metric.update(queries, ids=q_ids, role="query")
        values = {k: float(v) for k, v in metric.compute().items()}
    seconds = time.perf_counter() - t0
    peak = proc_status_mib("VmHWM") - start_rss
    rates.append(square_gemm_rate())
    return {"seconds": seconds, "set_gallery_s": t1 - t0, "in_products_s": in_products[0],
            "peak_above_mib": peak,
            "gemm_rates": rates, "values": values}


def run_reference(folder: Path) -> dict:
    """Each judged passage's rank by a plain blocked float32 product of the upcast numbers."""
    import torch

    corpus = np.load(folder / "corpus.npy", mmap_mode="r")
    data = np.load(folder / "q.npz")
    queries = torch.from_numpy(data["embeddings"])
    queries = queries / torch.linalg.vector_norm(queries, dim=1, keepdim=True)
    qrels = _qrels(folder)
    judged = torch.tensor([int(next(iter(qrels[q]))[1:]) for q in data["ids"].tolist()])
    t0 = time.perf_counter()
    # the judged passages' scores first, then every passage above them, chunk by chunk
    rows = torch.from_numpy(np.asarray(corpus[np.sort(judged.numpy())], dtype=np.float32))
    rows = rows[torch.argsort(torch.argsort(judged))]
    rows = rows / torch.linalg.vector_norm(rows, dim=1, keepdim=True)
    own = torch.diagonal(queries @ rows.T)[:, None]
    above = torch.zeros(len(judged), dtype=torch.int64)
    near = torch.zeros(len(judged), dtype=torch.int64)
    for start in range(0, corpus.shape[0], CHUNK):
        block = torch.from_numpy(np.asarray(corpus[start : start + CHUNK], dtype=np.float32))
        block = block / torch.linalg.vector_norm(block, dim=1, keepdim=True)
        scores = queries @ block.T
        # the judged passage itself left out: its score in this product may round apart from
        # `own` (another shape of product), which must not count it above itself
        mine = torch.nonzero((judged >= start) & (judged < start + block.shape[0])).flatten()
        scores[mine, judged[mine] - start] = -float("inf")
        above += (scores > own).sum(1)
        near += ((scores - own).abs() <= NEAR).sum(1)
    seconds = time.perf_counter() - t0
    tied = near
    rank = (above + 1).double()
    values = {
        "mrr@10": float(torch.where(rank <= 10, 1 / rank, 0).mean()),
        "ndcg@10": float(torch.where(rank <= 10, 1 / torch.log2(rank + 1), 0).mean()),
        "recall@100": float((rank <= 100).double().mean()),
        "recall@1000": float((rank <= 1000).double().mean()),
    }
    return {"seconds": seconds, "values": values, "queries_tied": int((tied > 0).sum())}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_device(args) -> dict:
    """The classes with the corpus generated in ``args.device``'s memory, per dtype."""
    import torch

    import retrieval_metrics as rm
    import retrieval_metrics.metrics  # (the classes imported before the clock starts)

    device = args.device
    a, b = torch.randn(4096, 4096, device=device), torch.randn(4096, 4096, device=device)
    from retrieval_metrics.functional.ranking.engine.fp32 import full_fp32_products

    with full_fp32_products():  # (the ranking's products are full float32 too)
        a @ b
        _sync(device)
        start = time.perf_counter()
        for _ in range(3):
            a @ b
        _sync(device)
    rate = 3 * 2 * 4096**3 / (time.perf_counter() - start)
    del a, b
    gen = torch.Generator(device=device).manual_seed(0)
    judged = torch.randperm(args.docs, generator=gen, device=device)[: args.queries]
    qrels = {i: {int(d): 1} for i, d in enumerate(judged.tolist())}
    out: dict = {"gemm_rate": rate, "dtypes": {}}
    for name in args.device_dtypes.split(","):
        dtype = getattr(torch, name)
        corpus = torch.empty(args.docs, args.dim, dtype=dtype, device=device)
        for lo in range(0, args.docs, CHUNK):
            part = torch.randn(min(CHUNK, args.docs - lo), args.dim, generator=gen, device=device)
            corpus[lo : lo + CHUNK] = part / torch.linalg.vector_norm(part, dim=1, keepdim=True)
        noise = torch.randn(args.queries, args.dim, generator=gen, device=device)
        noise *= NOISE / torch.linalg.vector_norm(noise, dim=1, keepdim=True)
        queries = corpus[judged].float() + noise
        metric = rm.RetrievalMetrics(NAMES, qrels=qrels, protocol="beir",
                                     ignore_identical_ids=False).to(device)
        _sync(device)
        start = time.perf_counter()
        metric.set_gallery(corpus, ids=torch.arange(args.docs, device=device))
        metric.update(queries, ids=torch.arange(args.queries, device=device), role="query")
        values = {k: float(v) for k, v in metric.compute().items()}
        _sync(device)
        seconds = time.perf_counter() - start
        out["dtypes"][name] = {"seconds": seconds, "values": values}
        del corpus, metric, queries
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        gen.manual_seed(0)  # the same numbers (then rounded to the next dtype)
        judged = torch.randperm(args.docs, generator=gen, device=device)[: args.queries]
    return out


def report_device(args, out: dict) -> None:
    product = 2 * args.queries * args.docs * args.dim / out["gemm_rate"]
    lines = [f"bench_msmarco --device {args.device}: corpus {args.docs:,} x {args.dim} in device "
             f"memory, {args.queries:,} queries, BEIR's measures + MRR@10 through the classes; "
             f"float32 GEMM {out['gemm_rate'] / 1e12:.1f} TFLOP/s: one product {product:.2f} s"]
    for name, result in out["dtypes"].items():
        shown = {k: round(v, 4) for k, v in result["values"].items()
                 if k in ("ndcg@10", "mrr@10", "recall@1000")}
        lines.append(f"{name}: {result['seconds']:.2f} s = {result['seconds'] / product:.2f} x "
                     f"the product; {shown}")
    text = "\n".join(lines)
    print(text)
    tag = args.device.replace(":", "")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"bench_msmarco_{tag}.txt").write_text(text + "\n")
    (RESULTS / f"bench_msmarco_{tag}.json").write_text(json.dumps(out, indent=1) + "\n")


def run_cli(folder: Path, cold: bool = False) -> dict:
    import resource

    if cold:
        drop_from_page_cache(folder / "corpus.npy")
    command = [sys.executable, "-m", "retrieval_metrics", "evaluate", "--query",
               str(folder / "q.npz"), "--gallery", str(folder / "corpus.npy"), "--qrels",
               str(folder / "qrels.tsv"), "--protocol", "beir", "--metrics",
               "ndcg@10,mrr@10,recall@100,recall@1000", "--bootstrap", "100",
               "--progress-delay", "-1", "--json", str(folder / "cli.json")]
    t0 = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    report = json.loads((folder / "cli.json").read_text())["runs"][0]["metrics"]
    return {"seconds": seconds, "peak_mib": peak,
            "values": {k: v["value"] for k, v in report.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=8_841_823)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--dtype", choices=["float16", "float32"], default="float16")
    parser.add_argument("--dir", default="/tmp/rm_bench_msmarco")
    parser.add_argument("--only", choices=["classes", "reference", "cli"])
    parser.add_argument("--paths", default="classes,reference,cli")
    parser.add_argument("--device", help="the corpus in this device's memory (no disk)")
    parser.add_argument("--device-dtypes", dest="device_dtypes", default="bfloat16,float32")
    parser.add_argument("--cold", action="store_true",
                        help="drop the corpus from the page cache before the classes and the "
                             "CLI (Linux): read from the disk, not memory")
    args = parser.parse_args()
    if args.device:
        report_device(args, run_device(args))
        return
    folder = Path(args.dir) / f"{args.docs}_{args.dim}_{args.dtype}_{args.queries}"
    args.dir = str(folder)
    if args.only:
        if args.only == "reference":
            print(json.dumps(run_reference(folder)))
        else:
            run = {"classes": run_classes, "cli": run_cli}[args.only]
            print(json.dumps(run(folder, cold=args.cold)))
        return
    t0 = time.perf_counter()
    generate(args)
    made_s = time.perf_counter() - t0
    out: dict = {"docs": args.docs, "dim": args.dim, "dtype": args.dtype,
                 "queries": args.queries, "generate_s": made_s,
                 "machine": f"{cpu_model()}, {platform.machine()}"}
    if args.cold:
        out["cold"] = {"read_ahead_kib": read_ahead_kib(folder / "corpus.npy")}
    for path in args.paths.split(","):
        done = subprocess.run([sys.executable, __file__, "--only", path, "--docs", str(args.docs),
                               "--dim", str(args.dim), "--dtype", args.dtype, "--queries",
                               str(args.queries), "--dir", str(Path(args.dir).parent)]
                              + ["--cold"] * args.cold, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{path} failed:\n{done.stderr[-3000:]}")
        out[path] = json.loads(done.stdout.strip().splitlines()[-1])
        print(path, {k: v for k, v in out[path].items() if k != "values"}, flush=True)
    report(out)


def report(out: dict) -> None:
    flops = 2 * out["queries"] * out["docs"] * out["dim"]
    size = out["docs"] * out["dim"] * (2 if out["dtype"] == "float16" else 4)
    lines = [f"bench_msmarco: corpus {out['docs']:,} x {out['dim']} {out['dtype']} on disk "
             f"({size / 2**30:.1f} GiB), {out['queries']:,} queries, one judged passage each; "
             f"{out['machine']}; written in {out['generate_s']:.0f} s (or reused)"]
    if "cold" in out:
        window = out["cold"]["read_ahead_kib"]
        lines.append("cold: the corpus dropped from the page cache before the classes and the "
                     "CLI (read from the disk; the disk's read-ahead window "
                     f"{'unknown' if window is None else f'{window:,} KiB'})")
    if "classes" in out:
        c = out["classes"]
        rate = max(c["gemm_rates"])
        product = flops / rate
        out["product_at_rate_s"] = product
        ratio = c["seconds"] / product
        lines.append(f"square GEMM {', '.join(f'{r / 1e9:.0f}' for r in c['gemm_rates'])} GFLOP/s "
                     f"(before, after): one {out['queries']:,} x {out['docs']:,} product "
                     f"{product:.1f} s")
        lines.append(f"classes: {c['seconds']:.1f} s (set_gallery {c['set_gallery_s']:.1f} s) = "
                     f"{ratio:.2f} x the product (bound 1.3): "
                     f"{'PASS' if ratio <= 1.3 else 'FAIL'}; peak {c['peak_above_mib']:,.0f} MiB "
                     f"above the start (bound 4,096): "
                     f"{'PASS' if c['peak_above_mib'] <= 4096 else 'FAIL'}")
        if "in_products_s" in c:
            # the products ran at their own rate; the rest of the run is the work besides them
            # (reading the corpus, its norms, the counting): what a faster GEMM leaves
            outside = c["seconds"] - c["in_products_s"]
            fast = (flops / (FAST_GEMM * 1e9) + outside) / (flops / (FAST_GEMM * 1e9))
            lines.append(f"inside torch.mm {c['in_products_s']:.1f} s "
                         f"({flops / c['in_products_s'] / 1e9:.0f} GFLOP/s); outside the products "
                         f"{outside:.2f} s ({outside / out['docs'] * 1e6:.2f} us a corpus item, "
                         f"set_gallery included), {fast:.2f} x at {FAST_GEMM} GFLOP/s")
    if "cli" in out and "classes" in out:
        c = out["cli"]
        lines.append(f"cli: {c['seconds']:.1f} s = {c['seconds'] / out['product_at_rate_s']:.2f} "
                     f"x the product; peak {c['peak_mib']:,.0f} MiB (the whole process)")
    if "reference" in out and "classes" in out:
        ref = out["reference"]
        diffs = {k: abs(out["classes"]["values"][k] - v) for k, v in ref["values"].items()}
        ok = max(diffs.values()) <= 1e-6
        lines.append(f"reference (plain blocked float32 product, {ref['seconds']:.1f} s): "
                     f"{'values equal' if ok else 'VALUES DIFFER'} "
                     f"(max difference {max(diffs.values()):.1e}; {ref['queries_tied']} queries "
                     "with another passage within 1e-6 of their judged one's score)")
        if "cli" in out:
            cli_diffs = [abs(out["cli"]["values"][k] - v) for k, v in ref["values"].items()]
            lines.append(f"cli values {'equal' if max(cli_diffs) <= 1e-4 else 'DIFFER'} "
                         "(4 decimals printed; 1e-4)")
    if "classes" in out:
        shown = {k: round(v, 6) for k, v in out["classes"]["values"].items()
                 if k in ("ndcg@10", "mrr@10", "recall@100", "recall@1000")}
        lines.append(f"values: {shown}")
    text = "\n".join(lines)
    print(text)
    default = out["docs"] == 8_841_823 and out["dtype"] == "float16"
    name = "bench_msmarco" + ("" if default else f"_{out['docs']}_{out['dtype']}")
    name += "_cold" if "cold" in out else ""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.txt").write_text(text + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
