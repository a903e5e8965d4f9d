"""Dense retrieval against judgments at BEIR's scale, through the metric classes.

The case: a corpus of 1,000,000 x 384 float32 embeddings (str ids "doc-N"), 1,000 queries, 1-5
judged documents each (graded 1-2; every other query's first judged document is its query's
nearest neighbour plus noise, the rest random: a middling model), every BEIR measure at 1, 3, 5,
10, 100 and 1000 (``protocols.EVALUATOR_REPORTS["beir"]``: NDCG, MAP, recall, P, MRR).

Paths, each in its own subprocess (this script again with ``--only``), so that each peak starts
from a small process:

* ``classes``: ``RetrievalMetrics(names, qrels=qrels, protocol="beir")``, the corpus given in
  batches of 50,000 with ``update(..., role="gallery")`` as an encoder would produce them (each
  batch a new tensor, nothing else kept), the queries likewise, then ``compute()``. Timed:
  every update and the compute. Peak: VmHWM above the resident size before the first batch.
* ``classes_st``: the same under ``protocol="sentence_transformers"``, whose ``ties="id"``
  places tied documents by corpus id (an order row per id at update, the tie count at compute).
* ``classes_strong``: the ``classes`` path with every query near its first judged document (a
  strong model). Under BEIR's protocol the ranking locates judged documents within its run's
  top 1000, and a query whose judged documents all lie deeper stops being ranked once the
  counts show it: the middling model's far half leaves the products early, a strong model's
  queries stay to the end. This path is that least favourable case.
* ``classes_whole``: the ``classes`` path without a protocol: every judged document's exact
  rank in the whole corpus (the library's default; values differ from BEIR's by its options).
* ``product``: one 1,000 x 1,000,000 product of the same embeddings (in corpus blocks of
  100,000 so as not to hold 4 GB of scores), and the square-GEMM rate of this machine (a 4096^3
  float32 matmul); the reference time is ``2 Q N D / rate``.
* ``sentence_transformers``: their ``InformationRetrievalEvaluator`` on the same embeddings
  (``corpus_embeddings`` given; queries encoded by a model that looks their rows up), cut-offs
  1..1000 as above (skipped without sentence-transformers).
* ``faiss``: ``IndexFlatIP`` over the normalised corpus, exact top-100 search of the queries
  (skipped without faiss).

Bounds checked (the issue's): classes time <= 1.2 x the GEMM-rate product time, classes peak <=
2 x corpus + 1 GiB. The rate is measured in the classes' own process, just before and after
them, and the faster of the two sets the product time (this machine's rate moves by a third
between processes and minutes); the ratio at the run's fastest rate of any path is printed too.
Ratios against the other paths of the same run.

Run on a quiet machine (about 7 minutes on 2 cores, sentence-transformers' evaluator most of
it; up to 3 GiB per process). The classes path runs ``--repeat`` times (3), each in its own
process against its own GEMM rate, and the run of the median ratio is reported:

    python benchmarks/bench_qrels.py
    python benchmarks/bench_qrels.py --docs 100000 --queries 200     # a quick look
    python benchmarks/bench_qrels.py --device cuda --dim 768 --queries 7000 --paths product classes

Writes ``benchmarks/results/bench_qrels.json`` and ``.txt``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from measuring import (  # noqa: E402
    FAST_GEMM,
    MIB,
    cpu_model,
    current_rss_mib,
    load_metric_classes,
    peak_rss_mib,
    timed_products,
)

RESULTS = HERE / "results"
BATCH = 50_000
CUTOFFS = (1, 3, 5, 10, 100, 1000)
TIME_BOUND, MEMORY_BOUND_GIB = 1.2, 1.0
PATHS = ("product", "classes", "classes_st", "classes_strong", "classes_whole",
         "sentence_transformers", "faiss")


def corpus_batches(args):
    """The corpus in batches (start, embeddings), each batch generated from its own seed."""
    import torch

    for start in range(0, args.docs, BATCH):
        n = min(BATCH, args.docs - start)
        g = torch.Generator().manual_seed(1000 + start // BATCH)
        yield start, torch.randn(n, args.dim, generator=g)


def judgments(args):
    """Per query its judged documents {doc index: grade}; the nearest-neighbour target of the
    even queries is the first."""
    import torch

    g = torch.Generator().manual_seed(7)
    counts = torch.randint(1, 6, (args.queries,), generator=g)
    docs = torch.randint(0, args.docs, (int(counts.sum()),), generator=g)
    grades = torch.randint(1, 3, (int(counts.sum()),), generator=g)
    out, at = [], 0
    for c in counts.tolist():
        out.append(dict(zip(docs[at : at + c].tolist(), grades[at : at + c].tolist(),
                            strict=True)))
        at += c
    return out


def queries_for(args, judged, batches=None, every=2):
    """Queries: every ``every``-th one (the even ones) near its first judged document (noise
    of the same norm), the others random. Needs the target rows: collected from ``batches``
    (or regenerated)."""
    import torch

    targets = {next(iter(j)): q for q, j in enumerate(judged) if q % every == 0}
    rows = {}
    for start, emb in batches if batches is not None else corpus_batches(args):
        for doc, q in targets.items():
            if start <= doc < start + emb.shape[0]:
                rows[q] = emb[doc - start]
    g = torch.Generator().manual_seed(3)
    queries = torch.randn(args.queries, args.dim, generator=g)
    for q, row in rows.items():
        queries[q] = row + queries[q]
    return queries


def names():
    return [f"{m}@{k}" for m in ("ndcg", "map", "recall", "precision") for k in CUTOFFS] + [
        f"mrr@{k}" for k in CUTOFFS
    ]


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_classes_st(args) -> dict:
    """The classes under protocol="sentence_transformers": ties placed by corpus id (the ids'
    order rows at update, their ranks and the tie count at compute), binary gain."""
    return run_classes(args, protocol="sentence_transformers")


def run_classes_strong(args) -> dict:
    """The classes with every query near its first judged document."""
    return run_classes(args, every=1)


def run_classes_whole(args) -> dict:
    """The classes without a protocol: every judged document located in the whole corpus."""
    return run_classes(args, protocol=None)


def run_classes(args, protocol: str | None = "beir", every: int = 2) -> dict:
    import torch

    import retrieval_metrics as rm
    load_metric_classes()  # the classes' lazy imports, before any timing

    judged = judgments(args)
    qrels = {f"q{q}": {f"doc-{d}": g for d, g in j.items()} for q, j in enumerate(judged)}
    queries = queries_for(args, judged, every=every)
    # the GEMM rate in this process too, just before and after the classes: the machine's rate
    # moves between runs, and the bound is checked against the fastest measured
    rates = [square_gemm_rate(args.device)]
    metric = rm.RetrievalMetrics(names(), qrels=qrels, protocol=protocol).to(args.device)
    before = current_rss_mib()
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        device_before = torch.cuda.memory_allocated()
    update_s = 0.0
    for start, emb in corpus_batches(args):
        ids = [f"doc-{i}" for i in range(start, start + emb.shape[0])]
        emb = emb.to(args.device)  # as an encoder on the device returns it
        _sync(args.device)
        t0 = time.perf_counter()
        metric.update(emb, ids=ids, role="gallery")
        _sync(args.device)
        update_s += time.perf_counter() - t0
        del emb
    t0 = time.perf_counter()
    for q0 in range(0, args.queries, 250):
        q = queries[q0 : q0 + 250].to(args.device, copy=True)
        metric.update(q, ids=[f"q{i}" for i in range(q0, q0 + q.shape[0])], role="query")
    _sync(args.device)
    update_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    with timed_products(args.device) as in_products:
        values = metric.compute()
    _sync(args.device)
    compute_s = time.perf_counter() - t0
    peak_above = peak_rss_mib() - before  # (before the second rate's matrices)
    rates.append(square_gemm_rate(args.device))
    out = {
        "gemm_rates_gflops": [r / 1e9 for r in rates],
        "seconds": update_s + compute_s,
        "update_s": update_s,
        "compute_s": compute_s,
        "peak_above_mib": peak_above,
        # (the CPU's: the time inside torch.mm, the rest is the work besides the products)
        "in_products_s": in_products[0] if args.device == "cpu" else None,
        "values": {k: round(float(v), 6) for k, v in values.items()},
        "threads": torch.get_num_threads(),
    }
    if args.device.startswith("cuda"):
        # on the device the corpus lives in device memory: its peak is the one bounded
        out["host_peak_above_mib"] = out["peak_above_mib"]
        out["peak_above_mib"] = (torch.cuda.max_memory_allocated() - device_before) / MIB
    return out


def outside_products_line(result: dict, flops: float, docs: int) -> str:
    """The work besides the products of a classes path: its seconds, per corpus item, and the
    ratio it would give against a GEMM of :data:`FAST_GEMM` GFLOP/s (the products at that
    rate, the rest as measured): the issue's "1.2x on any machine"."""
    inside = result.get("in_products_s")
    if inside is None:
        return ""
    outside = result["compute_s"] - inside
    rate = max(result["gemm_rates_gflops"])
    fast = (inside * rate / FAST_GEMM + outside + result["update_s"]) / (flops / (FAST_GEMM * 1e9))
    return (f"; outside the products {outside:.2f} s ({outside / docs * 1e6:.2f} us a corpus "
            f"item), {fast:.2f} x at {FAST_GEMM} GFLOP/s")


def square_gemm_rate(device: str) -> float:
    """FLOP/s of a 4096^3 float32 matmul on ``device`` (the median of three, after a warm-up)."""
    import torch

    a = torch.randn(4096, 4096, device=device)
    b = torch.randn(4096, 4096, device=device)
    (a @ b).sum()  # warm
    times = []
    for _ in range(3):
        _sync(device)
        t0 = time.perf_counter()
        a @ b
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * 4096**3 / sorted(times)[1]


def run_product(args) -> dict:
    import torch

    device = args.device
    rate = square_gemm_rate(device)
    judged = judgments(args)
    batches = list(corpus_batches(args))
    queries = queries_for(args, judged, batches).to(device)
    corpus = torch.cat([emb for _, emb in batches]).to(device)
    del batches
    _sync(device)
    t0 = time.perf_counter()
    for g0 in range(0, args.docs, 100_000):
        queries @ corpus[g0 : g0 + 100_000].T
    _sync(device)
    product_s = time.perf_counter() - t0
    flops = 2 * args.queries * args.docs * args.dim
    return {"gemm_rate_gflops": rate / 1e9, "product_s": product_s,
            "product_at_rate_s": flops / rate}


def run_sentence_transformers(args) -> dict:
    try:
        from sentence_transformers.sentence_transformer.evaluation import (
            InformationRetrievalEvaluator,
        )
    except ImportError:
        return {"skipped": "sentence-transformers is not installed"}
    import torch
    from sentence_transformers.util import cos_sim

    judged = judgments(args)
    batches = list(corpus_batches(args))
    queries = queries_for(args, judged, batches)
    corpus = torch.cat([emb for _, emb in batches])
    del batches

    class Lookup:
        """A model whose query 'texts' are row numbers of the precomputed query embeddings."""

        similarity_fn_name = "cosine"

        def encode_query(self, texts, **kwargs):
            return queries[[int(t) for t in texts]]

        encode = encode_query

    evaluator = InformationRetrievalEvaluator(
        queries={f"q{q}": str(q) for q in range(args.queries)},
        corpus={f"doc-{d}": "" for d in range(args.docs)},
        relevant_docs={f"q{q}": {f"doc-{d}" for d, g in j.items() if g > 0}
                       for q, j in enumerate(judged)},
        mrr_at_k=list(CUTOFFS), ndcg_at_k=list(CUTOFFS), accuracy_at_k=list(CUTOFFS),
        precision_recall_at_k=list(CUTOFFS), map_at_k=list(CUTOFFS),
        show_progress_bar=False,
        score_functions={"cosine": cos_sim},
    )
    before = current_rss_mib()
    t0 = time.perf_counter()
    evaluator.compute_all_metrics(Lookup(), corpus_embeddings=corpus)
    return {"seconds": time.perf_counter() - t0, "peak_above_mib": peak_rss_mib() - before}


def run_faiss(args) -> dict:
    try:
        import faiss
    except ImportError:
        return {"skipped": "faiss is not installed"}
    import torch

    judged = judgments(args)
    batches = list(corpus_batches(args))
    queries = queries_for(args, judged, batches)
    index = faiss.IndexFlatIP(args.dim)
    for _, emb in batches:
        index.add(torch.nn.functional.normalize(emb, dim=1).numpy())
    del batches
    q = torch.nn.functional.normalize(queries, dim=1).numpy()
    t0 = time.perf_counter()
    index.search(q, 100)
    return {"seconds": time.perf_counter() - t0, "threads": faiss.omp_get_max_threads()}


def child(args) -> None:
    result = globals()[f"run_{args.only}"](args)
    print("RESULT " + json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=PATHS)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda: the classes "
                        "and the product on the device (the peers stay on the CPU)")
    parser.add_argument("--out", type=Path, help="results stem (default "
                        "benchmarks/results/bench_qrels, _DEVICE added off the CPU)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the classes path "
                        "(each its own process and GEMM rates; the median ratio is reported)")
    parser.add_argument("--only", choices=PATHS, help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    if args.only:
        child(args)
        return
    results = {}
    for path in args.paths:
        cmd = [sys.executable, __file__, "--only", path, "--docs", str(args.docs), "--dim",
               str(args.dim), "--queries", str(args.queries), "--device", args.device]
        runs = []
        for _ in range(args.repeat if path == "classes" else 1):
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not lines:
                raise SystemExit(f"{path} failed:\n{proc.stderr[-3000:]}")
            runs.append(json.loads(lines[-1][len("RESULT "):]))
            print(path, {k: v for k, v in runs[-1].items() if k != "values"}, flush=True)
        if len(runs) > 1:
            # the run of the median ratio to its own process's GEMM rate stands for the path
            flops = 2 * args.queries * args.docs * args.dim
            ratios = [r["seconds"] * max(r["gemm_rates_gflops"]) * 1e9 / flops for r in runs]
            results[f"{path}_ratios"] = ratios
            runs = [runs[sorted(range(len(runs)), key=ratios.__getitem__)[len(runs) // 2]]]
        results[path] = runs[0]
    corpus_mib = args.docs * args.dim * 4 / MIB
    lines = [
        f"bench_qrels: corpus {args.docs:,} x {args.dim} float32 ({corpus_mib:,.0f} MiB), "
        f"{args.queries:,} queries, 1-5 judged each, {len(names())} BEIR measures "
        f"(protocol='beir'); {cpu_model()}; device {args.device}",
    ]
    summary = {"docs": args.docs, "dim": args.dim, "queries": args.queries, "device": args.device,
               "corpus_mib": corpus_mib, "results": results,
               "machine": {"cpu": cpu_model(), "torch": importlib.metadata.version("torch")}}
    if "classes" in results and "product" in results:
        cls, prod = results["classes"], results["product"]
        # the reference: the faster of the square-GEMM rates measured in the classes' own
        # process just before and after them (this machine's rate moves between processes and
        # minutes); beside it, the ratio at the fastest rate of any path of the run
        flops = 2 * args.queries * args.docs * args.dim
        own = cls.get("gemm_rates_gflops") or [prod["gemm_rate_gflops"]]
        rate = max(own) * 1e9
        at_rate = flops / rate
        time_ratio = cls["seconds"] / at_rate
        fastest = max([prod["gemm_rate_gflops"], *own]) * 1e9
        summary["reference_s"] = at_rate
        summary["time_ratio_at_fastest_rate"] = cls["seconds"] / (flops / fastest)
        memory_bound = 2 * corpus_mib + MEMORY_BOUND_GIB * 1024
        summary["time_ratio"] = time_ratio
        summary["memory_bound_mib"] = memory_bound
        lines += [
            f"square GEMM {', '.join(f'{r:.0f}' for r in own)} GFLOP/s in the classes' process "
            f"(before, after), {prod['gemm_rate_gflops']:.0f} in the product's: one product at "
            f"{rate / 1e9:.0f} GFLOP/s {at_rate:.2f} s (the product path's, in blocks of "
            f"100,000: {prod['product_s']:.2f} s)",
            f"classes: {cls['seconds']:.2f} s (updates {cls['update_s']:.2f} s, compute "
            f"{cls['compute_s']:.2f} s) = {time_ratio:.2f} x the product at the GEMM rate "
            f"(bound {TIME_BOUND}): {'PASS' if time_ratio <= TIME_BOUND else 'FAIL'}; "
            f"{summary['time_ratio_at_fastest_rate']:.2f} x at the run's fastest rate "
            f"({fastest / 1e9:.0f} GFLOP/s)" + outside_products_line(cls, flops, args.docs)
            + (f"; the {len(results['classes_ratios'])} runs' ratios: "
               f"{', '.join(f'{r:.2f}' for r in results['classes_ratios'])} (median shown)"
               if "classes_ratios" in results else ""),
            f"classes peak above start {cls['peak_above_mib']:,.0f} MiB (bound 2 x corpus + 1 GiB "
            f"= {memory_bound:,.0f} MiB): "
            f"{'PASS' if cls['peak_above_mib'] <= memory_bound else 'FAIL'}",
        ]
        for path, what in (
            ("classes_strong", "every query near a judged document (a strong model)"),
            ("classes_whole", "without a protocol (every judged document's rank in the "
                              "whole corpus)"),
        ):
            if "seconds" in results.get(path, {}):
                other = results[path]
                ratio = other["seconds"] * max(other["gemm_rates_gflops"]) * 1e9 / flops
                summary[f"{path}_time_ratio"] = ratio
                lines.append(
                    f"{path}, {what}: {other['seconds']:.2f} s (compute "
                    f"{other['compute_s']:.2f} s) = {ratio:.2f} x the product at its own "
                    f"process's GEMM rate, peak above start {other['peak_above_mib']:,.0f} MiB"
                    + outside_products_line(other, flops, args.docs)
                )
        if "seconds" in results.get("classes_st", {}):
            st = results["classes_st"]
            lines.append(
                f"classes under protocol='sentence_transformers' (ties by corpus id): "
                f"{st['seconds']:.2f} s (updates {st['update_s']:.2f} s, compute "
                f"{st['compute_s']:.2f} s) = {st['seconds'] / cls['seconds']:.2f} x the beir "
                f"preset's, peak above start {st['peak_above_mib']:,.0f} MiB"
            )
        for peer in ("sentence_transformers", "faiss"):
            other = results.get(peer, {})
            if "seconds" in other:
                lines.append(f"{peer}: {other['seconds']:.2f} s; classes / {peer} = "
                             f"{cls['seconds'] / other['seconds']:.2f}")
            elif other:
                lines.append(f"{peer}: {other['skipped']}")
        lines.append("values: " + json.dumps(cls["values"]))
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        stem = args.out or RESULTS / (
            "bench_qrels" + ("" if args.device == "cpu" else f"_{args.device.split(':')[0]}")
        )
        stem.parent.mkdir(parents=True, exist_ok=True)
        stem.with_suffix(".json").write_text(json.dumps(summary, indent=1))
        stem.with_suffix(".txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
