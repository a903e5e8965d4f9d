"""Benchmark: the metric classes on an accelerator, the path users run, against one product.

Two workloads, each through the metric classes (updates in batches, then ``compute()``):

* SOP-sized same source: ``RetrievalMetrics`` of hit_rate@1/2/4/8, map@r, r_precision, mrr over
  ``--n`` (60,502) x ``--dim`` (128) unit embeddings in classes of about 5 items, updated 4,096
  rows at a time;
* image-text: ``CrossModalRetrieval(k=(1, 5, 10))`` over ``--images`` (5,000) images with 5
  captions each (25,000), D = 512, updated 1,000 pairs at a time.

For each: the median of ``--repeats`` (5) timed runs, each ended by ``torch.cuda.synchronize()``
on CUDA; the time of one full similarity product of the same shapes on the same device (the
floor: the ranking cannot be faster than computing every score once); their ratio; and the host
synchronisations of one run (its updates, which wait for nothing since a543f8a, and its
``compute()``), counted by CUDA itself (``torch.cuda.set_sync_debug_mode``
warns at every synchronising call; the warnings are counted). On the CPU the sync count does not
apply and is left out.

    python benchmarks/bench_device_classes.py --device cuda          # on a GPU machine
    python benchmarks/bench_device_classes.py --device cpu --small   # smoke run of the script

Writes ``benchmarks/results/device_classes_<device>.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from measuring import load_metric_classes

import retrieval_metrics as rm

load_metric_classes()  # the classes' lazy imports, before any timing

NAMES = ["hit_rate@1", "hit_rate@2", "hit_rate@4", "hit_rate@8", "map@r", "r_precision", "mrr"]
SEED = 0


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sop_like(n: int, dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Classes of 2..12 items (about 5 on average), noisy unit vectors around class centres,
    shuffled: hit rate@1 near a trained SOP model's."""
    gen = torch.Generator().manual_seed(SEED)
    sizes = torch.randint(2, 9, (n // 2,), generator=gen)
    labels = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)[:n]
    labels = labels[torch.randperm(n, generator=gen)]
    centres = torch.nn.functional.normalize(torch.randn(int(labels.max()) + 1, dim, generator=gen))
    emb = centres[labels] + 1.4 / dim**0.5 * torch.randn(n, dim, generator=gen)
    emb = torch.nn.functional.normalize(emb)
    return emb.to(device), labels.to(device)


def image_text(images: int, dim: int, device: torch.device):
    gen = torch.Generator().manual_seed(SEED + 1)
    img = torch.nn.functional.normalize(torch.randn(images, dim, generator=gen))
    owner = torch.arange(images).repeat_interleave(5)
    txt = torch.nn.functional.normalize(img[owner] + 0.9 * torch.randn(owner.numel(), dim,
                                                                       generator=gen))
    return img[owner].to(device), txt.to(device), owner.to(device)


def run_same_source(emb, labels, device) -> dict[str, torch.Tensor]:
    metric = rm.RetrievalMetrics(NAMES).to(device)
    for start in range(0, emb.shape[0], 4096):
        metric.update(emb[start : start + 4096], labels[start : start + 4096])
    return metric.compute()


def run_image_text(img, txt, owner, device) -> dict[str, torch.Tensor]:
    metric = rm.CrossModalRetrieval(k=(1, 5, 10)).to(device)
    for start in range(0, img.shape[0], 1000):
        stop = start + 1000
        metric.update(img[start:stop], txt[start:stop], owner[start:stop])
    return metric.compute()


def median_seconds(fn, device: torch.device, repeats: int) -> tuple[float, list[float], Any]:
    times, result = [], None
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        result = fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, result


def host_syncs(fn, device: torch.device) -> int | None:
    """Synchronising CUDA calls made by ``fn``, as CUDA's own sync debug mode reports them."""
    if device.type != "cuda":
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
            synchronize(device)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def product_seconds(a: torch.Tensor, b: torch.Tensor, device, repeats: int) -> float:
    """One full a @ b.T in float32 (in row blocks when the whole would not fit in a few GB)."""
    rows = max(1, min(a.shape[0], (2**31) // (4 * max(1, b.shape[0]))))
    out = torch.empty(rows, b.shape[0], device=device)

    def product() -> None:
        for start in range(0, a.shape[0], rows):
            block = a[start : start + rows]
            torch.mm(block, b.T, out=out[: block.shape[0]])

    product()  # warm-up (kernel selection)
    return median_seconds(product, device, repeats)[0]


def workload(name: str, fn, operands, device, repeats: int) -> dict[str, Any]:
    fn()  # warm-up: kernels, allocator
    seconds, times, values = median_seconds(fn, device, repeats)
    floor = product_seconds(*operands, device, repeats)
    syncs = host_syncs(fn, device)
    result = {
        "seconds": seconds,
        "times": times,
        "product_seconds": floor,
        "ratio_to_product": seconds / floor,
        "host_syncs_per_compute": syncs,
        "values": {k: float(v) for k, v in values.items()},
        "values_on": str(next(iter(values.values())).device),
    }
    print(
        f"{name}: {seconds * 1e3:.1f} ms (median of {repeats}), one product "
        f"{floor * 1e3:.1f} ms, ratio {seconds / floor:.2f}, host syncs "
        f"{'n/a' if syncs is None else syncs}, values on {result['values_on']}"
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--n", type=int, default=60502)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="n=6000, 1,000 images")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.small:
        args.n, args.images = 6000, 1000
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device")
    emb, labels = sop_like(args.n, args.dim, device)
    img, txt, owner = image_text(args.images, 512, device)
    report = {
        "machine": {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
        "same_source": {"n": args.n, "dim": args.dim, **workload(
            "same source", lambda: run_same_source(emb, labels, device), (emb, emb), device,
            args.repeats,
        )},
        "image_text": {"images": args.images, "captions": 5 * args.images, **workload(
            "image-text", lambda: run_image_text(img, txt, owner, device),
            (img[::5], txt), device, args.repeats,
        )},
    }
    out = Path(args.out or f"benchmarks/results/device_classes_{device.type}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
