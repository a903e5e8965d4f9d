"""Every metric class x every input form it takes x ids or none, fed the way a data-parallel
validation loop feeds it: ``python matrix.py RANK WORLD INIT_FILE SPLIT OUT``.

One run computes every case of :func:`cases` on this rank's share of the data under one split and
writes ``{case: {"values": ..., "per_query": ...}}``; :func:`single_process` gives the same cases
fed every sample once in one process. Splits:

* ``even``: 2 ranks, contiguous halves, no repeats;
* ``uneven_empty``: 3 ranks, uneven contiguous shares (the last rank gets nothing) and different
  batch sizes per rank (different numbers of ``update`` calls);
* ``padded``: 3 ranks, DistributedSampler's interleaving and padding (the first samples repeated
  so that every rank gets as many), which only ids can undo: cases with ids only.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import torch

import retrieval_metrics as rm

NAMES = ["hit_rate@1", "recall@3", "map@r", "map", "mrr", "ndcg@5", "cmc@4", "median_rank", "minp"]
CLASSES = {
    "HitRateAtK": lambda **kw: rm.HitRateAtK(k=(1, 3), **kw),
    "RecallAtK": lambda **kw: rm.RecallAtK(k=3, **kw),
    "PrecisionAtK": lambda **kw: rm.PrecisionAtK(k=3, **kw),
    "RPrecision": lambda **kw: rm.RPrecision(**kw),
    "MAPAtR": lambda **kw: rm.MAPAtR(**kw),
    "MeanAveragePrecision": lambda **kw: rm.MeanAveragePrecision(**kw),
    "MRR": lambda **kw: rm.MRR(**kw),
    "NDCGAtK": lambda **kw: rm.NDCGAtK(k=5, **kw),
    "CMC": lambda **kw: rm.CMC(max_rank=4, **kw),
    "MedianRank": lambda **kw: rm.MedianRank(**kw),
    "MeanRank": lambda **kw: rm.MeanRank(**kw),
    "MINP": lambda **kw: rm.MINP(**kw),
    "RetrievalMetrics": lambda **kw: rm.RetrievalMetrics(NAMES, prefix="val/", **kw),
}
# the measures that read which documents were judged (Judged@K, bpref, condensed lists, RBP's
# residual) beside ir_measures' names and a relevance level: relevance by judgments, or ranked
# lists (whose sets of relevant ids judge every id they name relevant)
JUDGED_NAMES = ["Judged@5", "Bpref", "nDCG(judged_only=True)@5", "P(rel=2)@3", "ERR@5",
                "RBP(p=0.8)", "rbp_residual", "dcg@5", "AP(judged_only=True)"]
JUDGED_CLASSES = {
    "IRMeasures": lambda **kw: rm.RetrievalMetrics(JUDGED_NAMES, prefix="ir/", **kw),
}
JUDGED_FORMS = ("qrels", "sharded_qrels", "ranked_lists")
CROSSMODAL = {
    "CrossModalRetrieval": lambda: rm.CrossModalRetrieval(k=(1, 5), folds=2, prefix="val/"),
    "RSum": lambda: rm.RSum(k=(1, 5, 10)),
}
# forms of the one-direction classes; "scores" carries no sample ids
FORMS = ["same_source", "query_gallery", "fixed_gallery", "sharded_gallery", "qrels",
         "sharded_qrels", "ranked_lists", "relevant_ranks", "scores"]
# forms that need sample ids (judgments name queries and documents by id)
IDS_ONLY = ("qrels", "sharded_qrels")
CROSS_FORMS = ["pairs", "separate_lists"]
SPLITS = {"even": 2, "uneven_empty": 3, "padded": 3}


def _embeddings(n: int, seed: int, classes: int = 6, dim: int = 8):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    centres = torch.randn(classes, dim, generator=gen)
    emb = centres[labels] + 0.9 * torch.randn(n, dim, generator=gen)
    emb[5] = emb[3]  # exact duplicates: ties across processes
    return emb, labels


SAME = _embeddings(41, 0)
QUERY = _embeddings(17, 1)
GALLERY = _embeddings(37, 2)
NUM_QUERIES = {"same_source": 41, "pairs": 36, "separate_lists": 12}
LISTS = [[f"d{(q * 7 + i * 3) % 30}" for i in range(8)] for q in range(17)]
RELEVANT = [{f"d{(q * 5) % 30}", f"d{(q * 11) % 30}", "d1"} for q in range(17)]
RANKS = [sorted({1 + (q * 3 + j * 5) % 12 for j in range(1 + q % 3)}) for q in range(17)]
# graded judgments of the query/gallery sets by id (queries 0..16, documents 1000..1036): grade-0
# judgments, documents the corpus lacks (2000 + q), queries without judgments (q % 6 == 5)
QRELS = {
    q: {1000 + (q * 5 + j * 7) % 37: (q + j) % 4 for j in range(1 + q % 4)}
    | ({2000 + q: 2} if q % 4 == 1 else {})
    for q in range(17)
    if q % 6 != 5
}
IMAGES = _embeddings(12, 3)[0]
CAPTION_IMAGE = torch.arange(12).repeat_interleave(3)  # 3 captions per image
CAPTIONS = IMAGES[CAPTION_IMAGE] + 1.1 * torch.randn(
    36, 8, generator=torch.Generator().manual_seed(4)
)


def _scores(idx):
    preds, target, indexes = [], [], []
    for q in idx:
        gen = torch.Generator().manual_seed(100 + q)
        n = 5 + q % 4
        preds.append(torch.randint(0, 4, (n,), generator=gen).double())
        target.append(torch.randint(0, 2, (n,), generator=gen))
        indexes.append(torch.full((n,), q, dtype=torch.int64))
    return torch.cat(preds), torch.cat(target), torch.cat(indexes)


def cases() -> list[tuple[str, str, bool]]:
    """(class, form, with ids) for every combination a class takes."""
    out = [(c, f, ids) for c in CLASSES for f in FORMS for ids in (True, False)
           if not (f == "scores" and ids) and not (f in IDS_ONLY and not ids)]
    out += [(c, f, True) for c in JUDGED_CLASSES for f in JUDGED_FORMS]
    out += [(c, f, ids) for c in CROSSMODAL for f in CROSS_FORMS for ids in (True, False)]
    return out


def case_name(cls: str, form: str, ids: bool) -> str:
    return f"{cls}-{form}-{'ids' if ids else 'no_ids'}"


def build(cls: str, form: str, ids: bool):
    if cls in CROSSMODAL:
        return CROSSMODAL[cls]()
    sharded = form in ("sharded_gallery", "sharded_qrels")
    classes = {**CLASSES, **JUDGED_CLASSES}
    if form in IDS_ONLY:
        return classes[cls](gallery_sharded=sharded, qrels=QRELS)
    metric = classes[cls](gallery_sharded=sharded)
    if form == "fixed_gallery":
        metric.set_gallery(GALLERY[0], GALLERY[1], ids=1000 + torch.arange(37) if ids else None)
    return metric


def feed(metric, form: str, ids: bool, item) -> None:
    """One update of ``form`` with the samples ``item`` names."""
    role, idx = item
    t = torch.tensor(idx, dtype=torch.int64)
    sid = t if ids else None
    if form == "same_source":
        metric.update(SAME[0][t], SAME[1][t], ids=sid)
    elif form in ("query_gallery", "sharded_gallery"):
        if role == "query":
            metric.update(QUERY[0][t], QUERY[1][t], role="query", ids=sid)
        else:
            metric.update(GALLERY[0][t], GALLERY[1][t], role="gallery",
                          ids=1000 + t if ids else None)
    elif form in IDS_ONLY:
        if role == "query":
            metric.update(QUERY[0][t], role="query", ids=t)
        else:
            metric.update(GALLERY[0][t], role="gallery", ids=1000 + t)
    elif form == "fixed_gallery":
        metric.update(QUERY[0][t], QUERY[1][t], role="query", ids=sid)
    elif form == "ranked_lists":
        metric.update(ranked_ids=[LISTS[i] for i in idx], relevant_ids=[RELEVANT[i] for i in idx],
                      ids=sid)
    elif form == "relevant_ranks":
        metric.update(relevant_ranks=[RANKS[i] for i in idx],
                      num_relevant=[len(RANKS[i]) + i % 2 for i in idx], ids=sid)
    elif form == "scores":
        preds, target, indexes = _scores(idx)
        metric.update(preds=preds, target=target, indexes=indexes)
    elif form == "pairs":
        img = CAPTION_IMAGE[t]
        metric.update(IMAGES[img], CAPTIONS[t], 100 + img, text_ids=sid)
    elif form == "separate_lists":
        # `idx` names images; each brings its captions (a caption list of its own)
        caps = torch.cat([torch.nonzero(CAPTION_IMAGE == i).flatten() for i in idx]) if idx else t
        metric.update(IMAGES[t], CAPTIONS[caps], 100 + t, text_image_ids=100 + CAPTION_IMAGE[caps],
                      text_ids=caps if ids else None)
    else:
        raise KeyError(form)


def _num_items(form: str) -> tuple[int, int]:
    """(queries or samples, gallery items given with role='gallery')."""
    if form in ("query_gallery", "sharded_gallery", *IDS_ONLY):
        return 17, 37
    return NUM_QUERIES.get(form, 17), 0


def _padded(n: int, rank: int, world: int) -> list[int]:
    """DistributedSampler(shuffle=False, drop_last=False): interleaved, first samples repeated."""
    total = math.ceil(n / world) * world
    return (list(range(n)) + list(range(total - n)))[rank::world]


def _contiguous(n: int, rank: int, cuts: list[float]) -> list[int]:
    bounds = [round(c * n) for c in cuts]
    return list(range(bounds[rank], bounds[rank + 1]))


def share(split: str, form: str, rank: int, world: int) -> list[tuple[str, list[int]]]:
    """This rank's updates: (role, sample indices) in batches whose size differs per rank."""
    n_query, n_gallery = _num_items(form)
    size = 3 + 2 * rank
    if split == "padded":
        mine = _padded(n_query, rank, world)
    elif split == "even":
        mine = _contiguous(n_query, rank, [0, 0.5, 1])
    else:
        mine = _contiguous(n_query, rank, [0, 0.7, 1, 1])
    out = [("query", mine[i : i + size]) for i in range(0, len(mine), size)]
    if n_gallery:
        if split == "padded":
            # the sampler's repeats land on two processes, a sharded gallery's too: by ids
            mine = _padded(n_gallery, rank, world)
        else:
            cuts = [0, 0.7, 1] if world == 2 else [0, 0.7, 1, 1]
            mine = _contiguous(n_gallery, rank, cuts)
        out += [("gallery", mine[i : i + 7]) for i in range(0, len(mine), 7)]
    return out


def evaluate(metric) -> dict:
    result = metric.compute()
    values = result if isinstance(result, dict) else {"value": result}
    return {
        "values": {k: v.tolist() for k, v in values.items()},
        "per_query": {k: v.tolist() for k, v in metric.per_query().items()},
    }


def single_process() -> dict:
    out = {}
    for cls, form, ids in cases():
        metric = build(cls, form, ids)
        n_query, n_gallery = _num_items(form)
        feed(metric, form, ids, ("query", list(range(n_query))))
        if n_gallery:
            feed(metric, form, ids, ("gallery", list(range(n_gallery))))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[case_name(cls, form, ids)] = evaluate(metric)
    return out


def main() -> None:
    import torch.distributed as dist

    rank, world, init_file, split, out = sys.argv[1:6]
    rank, world = int(rank), int(world)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = {}
        for cls, form, ids in cases():
            if split == "padded" and not ids:
                continue  # padding can only be told from data by ids
            metric = build(cls, form, ids)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for item in share(split, form, rank, world):
                    if item[1]:
                        feed(metric, form, ids, item)
                result = evaluate(metric)
            result["warnings"] = [str(w.message) for w in caught]
            results[case_name(cls, form, ids)] = result
        Path(out).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
