"""``retrieval-metrics demo``: what each field's evaluation prints, computed now, no download.

Five short sections, each on data generated here or shipped with scikit-learn:

1. image-text retrieval (VSE++ / COCO): the same embeddings scored as COCO "1K" and "5K";
2. the four things papers call "recall", side by side, for 5 captions per image;
3. ties (binary codes): the three tie rules, and what a plain argsort does instead;
4. class retrieval (metric learning): two embeddings where R@1 and MAP@R disagree;
5. real data: scikit-learn's bundled handwritten digits, raw pixels and two simple transforms.

Runs in well under a minute on 2 CPU cores. Every function returns the numbers it printed, so the
tests can check them against the library.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import torch
import torch.nn.functional as F
from torch import Tensor

import retrieval_metrics as rm

__all__ = [
    "class_retrieval",
    "digits",
    "four_recalls",
    "image_text",
    "run_demo",
    "ties",
]

RULE = "-" * 96


def _table(rows: Sequence[Sequence[str]], out: TextIO, indent: str = "  ") -> None:
    """Left-align the first column, right-align the others."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        print(indent + "  ".join(cells).rstrip(), file=out)


def _f(x: Any, digits: int = 3) -> str:
    return f"{float(x):.{digits}f}"


def _header(title: str, out: TextIO) -> None:
    print(f"\n{RULE}\n{title}\n{RULE}", file=out)


# ------------------------------------------------------------------------------- 1. image-text


def _image_text_data(
    gen: torch.Generator, n_images: int = 5000, captions: int = 5, dim: int = 64
) -> tuple[Tensor, Tensor, Tensor]:
    """Images around 250 "topics" (so neighbours are confusable) and 5 noisy captions each."""
    topics = F.normalize(torch.randn(250, dim, generator=gen), dim=1)
    topic = torch.randint(0, 250, (n_images,), generator=gen)
    spread = 0.5 * torch.randn(n_images, dim, generator=gen) / dim**0.5
    images = F.normalize(topics[topic] + spread, dim=1)
    image_ids = torch.arange(n_images).repeat_interleave(captions)
    noise = 2.0 * torch.randn(n_images * captions, dim, generator=gen) / dim**0.5
    texts = F.normalize(images[image_ids] + noise, dim=1)
    return images, texts, image_ids


def image_text(gen: torch.Generator, out: TextIO) -> dict[str, dict[str, float]]:
    """COCO 1K (5 folds of 1,000 images, averaged) vs 5K (one gallery) on the same embeddings."""
    _header('1. Image-text retrieval (VSE++ / SCAN / CLIP papers, COCO): "1K" vs "5K"', out)
    images, texts, image_ids = _image_text_data(gen)
    n = images.shape[0]
    print(
        f"  {n:,} generated images x 5 captions ({texts.shape[0]:,} captions), 64-d, cosine. "
        "VSE++ prints R@K in\n  percent (a hit rate: is a right item in the top K?), medr = "
        "floor(median rank), and rsum,\n  the six R@K added up.\n",
        file=out,
    )
    results = {}
    for label, folds in (("COCO 1K (5 folds)", 5), ("COCO 5K", None)):
        m = rm.CrossModalRetrieval(k=(1, 5, 10), folds=folds, protocol="vsepp")
        m.update(images[image_ids], texts, image_ids)
        results[label] = {k: float(v) for k, v in m.compute().items()}
    head = ["", "i2t R@1", "R@5", "R@10", "medr", "t2i R@1", "R@5", "R@10", "medr", "rsum"]
    rows = [head]
    for label, v in results.items():
        row = [label]
        for d in ("i2t", "t2i"):
            row += [_f(v[f"{d}/hit_rate@{k}"], 1) for k in (1, 5, 10)]
            row.append(_f(v[f"{d}/median_rank"], 0))
        rows.append([*row, _f(v["rsum"], 1)])
    _table(rows, out)
    one, five = results["COCO 1K (5 folds)"], results["COCO 5K"]
    print(
        f"""
  Same embeddings, two numbers: t2i R@1 is {one["t2i/hit_rate@1"]:.1f}% on 1K and \
{five["t2i/hit_rate@1"]:.1f}% on 5K. 1K ranks each query
  against the 1,000 images (5,000 captions) of its fold and averages the 5 folds; 5K ranks it
  against all 5,000 images (25,000 captions): 5x as many competitors, so every R@K drops and
  medr grows. Chance t2i R@1 is 1/1,000 = 0.1% on 1K and 1/5,000 = 0.02% on 5K. A 1K number
  compares only with 1K numbers: CrossModalRetrieval(folds=5) is 1K, folds=None is 5K.""",
        file=out,
    )
    return results


# ------------------------------------------------------------------------------- 2. four recalls


def four_recalls(gen: torch.Generator, out: TextIO) -> dict[str, float]:
    """Hit rate@K, IR recall@K, precision@K and R-precision for image-to-text, 5 captions each."""
    _header('2. Four things called "recall": image-to-text, 5 relevant captions per image', out)
    images, texts, image_ids = _image_text_data(gen, n_images=1000)
    ks = (1, 5, 10)
    names = [f"{b}@{k}" for k in ks for b in ("hit_rate", "recall", "precision")] + ["r_precision"]
    m = rm.RetrievalMetrics(names)
    m.update(images, torch.arange(images.shape[0]), role="query")
    m.update(texts, image_ids, role="gallery")
    v = {k: float(x) for k, x in m.compute().items()}
    print(
        f"  1,000 images queried against their 5,000 captions (one 1K fold). "
        f"R-precision = {v['r_precision']:.3f}.\n",
        file=out,
    )
    rows = [["K", "hit_rate@K", "recall@K", "precision@K", "ceiling of recall", "of precision"]]
    for k in ks:
        rows.append(
            [
                str(k),
                _f(v[f"hit_rate@{k}"]),
                _f(v[f"recall@{k}"]),
                _f(v[f"precision@{k}"]),
                _f(min(1.0, k / 5)),
                _f(min(1.0, 5 / k)),
            ]
        )
    _table(rows, out)
    print(
        """
  hit_rate@K   is any of the 5 captions in the top K? VSE++/SCAN "R@K", CLIP_benchmark's
               "recall@K" (its IR recall thresholded at > 0), metric learning's "Recall@K",
               re-id's rank-K, place recognition's recall@N.
  recall@K     the share of the 5 captions in the top K (trec_eval, BEIR, RAG): at most K/5, so
               recall@1 <= 0.2 even for a perfect model.
  precision@K  the share of the top K that are the image's captions: at most 5/K past K = 5.
  r_precision  precision at K = 5, the number of relevant captions: 1 only if all 5 come first.
  Identities: hit_rate@1 = precision@1 always; with 5 relevant, recall@5 = precision@5 = R-prec.""",
        file=out,
    )
    return v


# ------------------------------------------------------------------------------- 3. ties


def _class_data(
    gen: torch.Generator, classes: int, per_class: int, dim: int, noise: float
) -> tuple[Tensor, Tensor]:
    centres = torch.randn(classes, dim, generator=gen)
    labels = torch.arange(classes).repeat_interleave(per_class)
    return centres[labels] + noise * torch.randn(labels.numel(), dim, generator=gen), labels


def _argsort_hit_at_1(codes: Tensor, labels: Tensor) -> float:
    """What a plain evaluation loop does: argmax over scores, ties to the first item stored."""
    scores = codes @ codes.T
    scores.fill_diagonal_(float("-inf"))
    top = scores.argmax(1)
    return float((labels[top] == labels).double().mean())


def ties(gen: torch.Generator, out: TextIO) -> dict[str, dict[str, float]]:
    """16-bit binary codes: integer similarities, many ties, three rules."""
    _header("3. Ties: 16-bit binary codes (hashing, quantised embeddings)", out)
    emb, labels = _class_data(gen, classes=200, per_class=5, dim=32, noise=0.8)
    projection = torch.randn(32, 16, generator=gen)
    codes = torch.sign(emb @ projection)
    names = ["hit_rate@1", "hit_rate@5", "map@r", "mrr"]
    results = {}
    for rule in ("optimistic", "expected", "pessimistic"):
        m = rm.RetrievalMetrics(names, similarity="dot", ties=rule)
        m.update(codes, labels)
        results[rule] = {k: float(v) for k, v in m.compute().items()}
    scores = codes @ codes.T
    distinct = torch.unique(scores).numel()
    print(
        f"  1,000 items, 200 classes; dot products of +-1 codes take only {distinct} values, so "
        "a relevant item\n  often ties with others. Each rule, computed exactly:\n",
        file=out,
    )
    rows = [["ties=", *names]]
    rows += [[rule, *(_f(v[n]) for n in names)] for rule, v in results.items()]
    _table(rows, out)
    perm = torch.randperm(labels.numel(), generator=gen)
    stored = _argsort_hit_at_1(codes, labels)
    shuffled = _argsort_hit_at_1(codes[perm], labels[perm])
    results["argsort"] = {"stored": stored, "shuffled": shuffled}
    print(
        f"""
  "optimistic" puts the relevant items first in their tie group, "pessimistic" last;
  "expected" (the default) is the exact mean over every order of each group. A plain argmax
  picks whichever tied item was stored first: hit_rate@1 {stored:.3f} in the stored order,
  {shuffled:.3f} after shuffling the same items. "expected" does not depend on the order.""",
        file=out,
    )
    return results


# ------------------------------------------------------------------------------- 4. R@1 vs MAP@R

CLASS_NAMES = ["hit_rate@1", "hit_rate@2", "hit_rate@4", "hit_rate@8", "map@r", "r_precision"]
SHORT = {"hit_rate@1": "R@1", "hit_rate@2": "R@2", "hit_rate@4": "R@4", "hit_rate@8": "R@8"}


def _class_table(
    metrics: dict[str, rm.RetrievalMetrics], out: TextIO, chance: bool = True
) -> dict[str, dict[str, float]]:
    values = {label: {k: float(v) for k, v in m.compute().items()} for label, m in metrics.items()}
    rows = [["", *(SHORT.get(n, n) for n in CLASS_NAMES)]]
    rows += [[label, *(_f(v[n]) for n in CLASS_NAMES)] for label, v in values.items()]
    if chance:
        first = next(iter(metrics.values()))
        summary = first.summary(num_bootstrap=10)
        rows.append(["chance", *(_f(summary[n]["chance"]) for n in CLASS_NAMES)])
    _table(rows, out)
    return values


def _verdict(
    a: str, b: str, ma: rm.RetrievalMetrics, mb: rm.RetrievalMetrics, out: TextIO
) -> dict[str, Any]:
    """Paired comparison of R@1 and MAP@R between two embeddings of the same queries."""
    resamples = 2000
    result = rm.compare(ma, mb, num_bootstrap=resamples)
    lines = {}
    for name, short in (("hit_rate@1", "R@1"), ("map@r", "MAP@R")):
        c = result[name]
        better = a if c.difference > 0 else b
        lines[name] = {"better": better, "difference": c.difference, "p_value": c.p_value}
        p = c.p_text(digits=2)
        print(
            f"  {short:<6} prefers {better}: {a} - {b} = {c.difference:+.4f} "
            f"[{c.interval[0]:+.4f}, {c.interval[1]:+.4f}], {p} ({c.test})",
            file=out,
        )
    return lines


def class_retrieval(gen: torch.Generator, out: TextIO) -> dict[str, Any]:
    """Two embeddings of the same items: one wins R@1, the other MAP@R."""
    _header("4. Class retrieval (metric learning: CUB, Cars, SOP): R@1 vs MAP@R", out)
    classes, per_class, dim = 100, 8, 32
    labels = torch.arange(classes).repeat_interleave(per_class)
    centres = torch.randn(classes, dim, generator=gen)
    halves = 0.9 * torch.randn(classes, 2, dim, generator=gen)
    half = torch.arange(labels.numel()) % 2
    split = (
        centres[labels]
        + halves[labels, half]
        + 0.4 * torch.randn(labels.numel(), dim, generator=gen)
    )
    compact = centres[labels] + 0.8 * torch.randn(labels.numel(), dim, generator=gen)
    metrics = {}
    for label, emb in (("A: split classes", split), ("B: compact, noisier", compact)):
        m = rm.RetrievalMetrics(CLASS_NAMES)
        m.update(emb, labels)
        metrics[label] = m
    print(
        f"  {labels.numel()} items, {classes} classes of {per_class}; each item queries the "
        "other 799. Papers print R@1/2/4/8\n  (hit rates) and, since Musgrave et al. 2020, "
        "MAP@R and R-precision.\n",
        file=out,
    )
    values = _class_table(metrics, out)
    print(
        "\n  A keeps each class in two tight halves: an item's nearest neighbour is almost "
        "always from its\n  class, but the other half of the class ranks far down. B keeps "
        "each class together, more loosely.\n",
        file=out,
    )
    (a, ma), (b, mb) = metrics.items()
    verdict = _verdict(a[:1], b[:1], ma, mb, out)
    print(
        "  R@1 only asks about the first neighbour; MAP@R asks where all 7 other members of "
        "the class land.",
        file=out,
    )
    return {"values": values, "verdict": verdict}


# ------------------------------------------------------------------------------- 5. digits


def _load_digits() -> tuple[Tensor, Tensor] | None:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        return None
    x, y = load_digits(return_X_y=True)  # shipped inside scikit-learn: no download
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.int64)


def _pca(x: Tensor, dims: int, whiten: bool) -> Tensor:
    centred = x - x.mean(0)
    _, s, vt = torch.linalg.svd(centred.double(), full_matrices=False)
    z = centred.double() @ vt[:dims].T
    if whiten:
        z = z / s[:dims] * (x.shape[0] - 1) ** 0.5
    return z.float()


def digits(out: TextIO) -> dict[str, Any] | None:
    """scikit-learn's handwritten digits: raw pixels vs PCA, R@K vs MAP@R."""
    _header("5. Real data: scikit-learn's handwritten digits (bundled, no download)", out)
    data = _load_digits()
    if data is None:
        print(
            "  scikit-learn is not installed: pip install scikit-learn (or "
            '"retrieval-metrics[demo]") for this section.',
            file=out,
        )
        return None
    x, y = data
    print(
        f"  {x.shape[0]:,} images of 8x8 pixels, 10 classes (about 180 each); each image "
        f"queries the other {x.shape[0] - 1:,}.\n",
        file=out,
    )
    representations = {
        "raw pixels": (x, "euclidean"),
        "PCA, 10 dims": (_pca(x, 10, whiten=False), "euclidean"),
        "PCA whitened, 20 dims": (_pca(x, 20, whiten=True), "euclidean"),
    }
    metrics = {}
    for label, (emb, similarity) in representations.items():
        m = rm.RetrievalMetrics(CLASS_NAMES, similarity=similarity)
        m.update(emb, y)
        metrics[label] = m
    values = _class_table(metrics, out)
    order = {
        name: sorted(values, key=lambda r: -values[r][name]) for name in ("hit_rate@1", "map@r")
    }
    print(file=out)
    for name, short in (("hit_rate@1", "R@1"), ("map@r", "MAP@R")):
        print(f"  {short:<6} ranks them: {' > '.join(order[name])}", file=out)
    print(file=out)
    labels = list(metrics)
    verdict = _verdict("raw", "PCA-10", metrics[labels[0]], metrics[labels[1]], out)
    raw, white = values[labels[0]], values[labels[2]]
    if verdict["hit_rate@1"]["better"] == verdict["map@r"]["better"]:
        first = "R@1 and MAP@R agree on raw pixels vs PCA-10."
    else:
        first = (
            "R@1 and MAP@R disagree on raw pixels vs PCA-10: the better one depends on the metric."
        )
    d_hit = white["hit_rate@1"] - raw["hit_rate@1"]
    d_map = white["map@r"] - raw["map@r"]
    print(
        f"\n  {first}\n  Whitening moves R@1 by {d_hit:+.3f} and MAP@R by {d_map:+.3f}: R@1 "
        "asks whether one neighbour is right,\n  MAP@R whether the whole class comes first. "
        "Report both (Musgrave et al. 2020).",
        file=out,
    )
    return {"values": values, "order": order, "verdict": verdict}


# ------------------------------------------------------------------------------- all


def run_demo(out: TextIO | None = None, seed: int = 0) -> dict[str, Any]:
    """Print every section; return what each printed."""
    out = out if out is not None else sys.stdout
    start = time.perf_counter()
    print(
        "retrieval-metrics demo: every number below is computed now, by the library, on data "
        "generated here\nor shipped with scikit-learn. Values are fractions (image-text: percent, "
        "as VSE++ prints them).",
        file=out,
    )
    gen = torch.Generator().manual_seed(seed)
    results: dict[str, Any] = {}
    results["image_text"] = image_text(gen, out)
    results["four_recalls"] = four_recalls(gen, out)
    results["ties"] = ties(gen, out)
    results["class_retrieval"] = class_retrieval(gen, out)
    results["digits"] = digits(out)
    elapsed = time.perf_counter() - start
    print(
        f"\n{RULE}\nDone in {elapsed:.1f} s. Your own embeddings: retrieval-metrics evaluate "
        "--help",
        file=out,
    )
    results["seconds"] = elapsed
    return results


if __name__ == "__main__":  # pragma: no cover
    run_demo()
