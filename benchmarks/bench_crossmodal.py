"""Benchmark: image-text retrieval in both directions against one similarity product.

What it measures (in one process, on one device; medians of ``--repeats``, default 3):

* Data: ``--images`` (5,000) images and 5 captions each (25,000), dimension ``--dim`` (512),
  float32, normalised; each caption is its image's embedding plus Gaussian noise (fixed seed),
  generated on the CPU and moved to ``--device``.
* baseline: one ``--images`` x captions float32 ``torch.mm`` on the device (images x
  captions^T), the product every image-text evaluation needs at least once.
* ours: ``CrossModalRetrieval(k=(1, 5, 10))`` on the device: ``update(images, captions,
  image_ids, text_image_ids=...)`` then ``compute()`` (i2t and t2i hit rates @1/5/10, median and
  mean ranks, rsum), timed as a whole, as a ratio to the product.
* naive: the full product then, per direction, the rank of the relevant item(s) by counting the
  scores above them (the usual evaluation code, with the whole score matrix in memory); its
  R@1/5/10 are checked against ours.
* weak: ours and the product again on captions of ``WEAK_NOISE`` (an early epoch's model: R@1
  near 0.03 both ways at 5,000 images, relevant items hundreds of places down), where most of
  each block's scores pass the thresholds and the counting, not the product, is the risk.

Run (from the repository root, with the project's venv active):

    python benchmarks/bench_crossmodal.py                 # CPU, full size
    python benchmarks/bench_crossmodal.py --device cuda   # on a GPU
    python benchmarks/bench_crossmodal.py --images 500    # smoke run

It prints a table and writes ``benchmarks/results/bench_crossmodal[_DEVICE].txt`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from retrieval_metrics import CrossModalRetrieval

SEED = 0
CAPTIONS_PER_IMAGE = 5
NOISE = 6.0  # caption noise norm relative to the unit image embedding: R@1 near 0.5 at 5,000
WEAK_NOISE = 14.0  # R@1 0.04 (i2t) and 0.02 (t2i) at 5,000 images, D=512
KS = (1, 5, 10)
AGREEMENT_TOL = 1e-6  # ours reports float32 values
RESULTS = Path(__file__).resolve().parent / "results"


def make_data(
    images: int, dim: int, noise_norm: float = NOISE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(SEED)
    img = torch.nn.functional.normalize(torch.randn(images, dim, generator=gen), dim=1)
    caption_image = torch.arange(images).repeat_interleave(CAPTIONS_PER_IMAGE)
    noise = torch.randn(caption_image.numel(), dim, generator=gen) * (noise_norm / dim**0.5)
    txt = torch.nn.functional.normalize(img[caption_image] + noise, dim=1)
    return img, txt, caption_image


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], repeats: int, device: torch.device) -> tuple[list[float], Any]:
    fn()  # warm-up: kernels, allocator, lazy initialisation
    sync(device)
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return times, result


def naive(img: torch.Tensor, txt: torch.Tensor, caption_image: torch.Tensor) -> dict[str, float]:
    """Full score matrix; ranks by counting strictly higher scores (optimistic ties)."""
    scores = img @ txt.T
    owner = caption_image.to(scores.device)
    n_img = img.shape[0]
    # i2t: best relevant caption of each image
    relevant = owner[None, :] == torch.arange(n_img, device=scores.device)[:, None]
    best = scores.masked_fill(~relevant, float("-inf")).amax(1)
    i2t_rank = (scores > best[:, None]).sum(1) + 1
    # t2i: each caption's own image
    cols = scores.T
    own = cols.gather(1, owner[:, None])
    t2i_rank = (cols > own).sum(1) + 1
    out = {}
    for k in KS:
        out[f"i2t/hit_rate@{k}"] = float((i2t_rank <= k).double().mean())
        out[f"t2i/hit_rate@{k}"] = float((t2i_rank <= k).double().mean())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=5000, help="images (5 captions each)")
    parser.add_argument("--dim", type=int, default=512, help="embedding dimension")
    parser.add_argument("--device", default="cpu", help="device (cpu, cuda, ...)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (median)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default=None, help="output stem (default results/...)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    stem = Path(args.out) if args.out else RESULTS / (
        "bench_crossmodal" if device.type == "cpu" else f"bench_crossmodal_{device.type}"
    )
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    say(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads, device {device}{f' ({gpu})' if gpu else ''}"
    )
    img, txt, caption_image = make_data(args.images, args.dim)
    img, txt, caption_image = img.to(device), txt.to(device), caption_image.to(device)
    n_txt = txt.shape[0]
    say(f"data: {args.images} images x {n_txt} captions, D={args.dim}, float32, seed {SEED}")
    image_ids = torch.arange(args.images, device=device)

    mm_times, _ = timed(lambda: img @ txt.T, args.repeats, device)
    product = statistics.median(mm_times)

    def ours() -> dict[str, torch.Tensor]:
        metric = CrossModalRetrieval(k=KS).to(device)
        metric.update(img, txt, image_ids, text_image_ids=caption_image)
        return metric.compute()

    ours_times, values = timed(ours, args.repeats, device)
    naive_times, naive_values = timed(lambda: naive(img, txt, caption_image), 1, device)
    values = {k: float(v) for k, v in values.items()}
    diffs = {k: abs(values[k] - v) for k, v in naive_values.items()}
    ok = max(diffs.values()) <= AGREEMENT_TOL
    results = {
        "product": {"times": mm_times, "seconds": product},
        "ours": {"times": ours_times, "seconds": statistics.median(ours_times)},
        "naive": {"times": naive_times, "seconds": statistics.median(naive_times)},
    }
    say()
    say(f"{'method':40s} {'seconds':>9s} {'x product':>10s}")
    say(f"{'-' * 40} {'-' * 9} {'-' * 10}")
    labels = {
        "product": f"one {args.images} x {n_txt} torch.mm",
        "ours": "ours CrossModalRetrieval (both ways)",
        "naive": "naive full matrix + counting",
    }
    for key, r in results.items():
        r["ratio_to_product"] = r["seconds"] / product
        say(f"{labels[key]:40s} {r['seconds']:9.4f} {r['ratio_to_product']:10.2f}")
    say()
    say("  " + ", ".join(f"{k} {v:.2f}" for k, v in values.items()))
    say(f"  R@K against the naive full-matrix count: {'OK' if ok else 'MISMATCH'}")

    # the same sizes from a weak model: most scores pass the thresholds (``ours`` reads these
    # names when it runs)
    img, txt, caption_image = (
        t.to(device) for t in make_data(args.images, args.dim, WEAK_NOISE)
    )
    weak_mm, _ = timed(lambda: img @ txt.T, args.repeats, device)
    weak_times, weak_values = timed(ours, args.repeats, device)
    weak_values = {k: float(v) for k, v in weak_values.items()}
    weak_naive = naive(img, txt, caption_image)
    weak_ok = max(abs(weak_values[k] - v) for k, v in weak_naive.items()) <= AGREEMENT_TOL
    weak = {
        "noise": WEAK_NOISE,
        "product": {"times": weak_mm, "seconds": statistics.median(weak_mm)},
        "ours": {"times": weak_times, "seconds": statistics.median(weak_times)},
        "values": weak_values,
        "agreement_ok": weak_ok,
    }
    weak["ours"]["ratio_to_product"] = weak["ours"]["seconds"] / weak["product"]["seconds"]
    say()
    say(
        f"weak model (caption noise {WEAK_NOISE}): ours {weak['ours']['seconds']:.4f} s = "
        f"{weak['ours']['ratio_to_product']:.2f} x its product "
        f"({weak['product']['seconds']:.4f} s)"
    )
    say("  " + ", ".join(f"{k} {v:.2f}" for k, v in weak_values.items()))
    say(f"  R@K against the naive full-matrix count: {'OK' if weak_ok else 'MISMATCH'}")
    ok = ok and weak_ok
    report = {
        "device": str(device),
        "gpu": gpu,
        "torch": torch.__version__,
        "data": {"images": args.images, "captions": n_txt, "dim": args.dim, "seed": SEED},
        "repeats": args.repeats,
        "results": results,
        "values": values,
        "naive_values": naive_values,
        "agreement_ok": ok,
        "weak": weak,
    }
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    stem.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    print(f"\nwrote {stem.name}.json and {stem.name}.txt in {stem.parent.name}/")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
