"""Datasets and per-rank splits for the multi-process tests, and their single-process answers.

Splits imitate a data-parallel evaluation: DistributedSampler's padding (the first items repeated
so that every rank gets the same count), interleaved indices, batch sizes that differ per rank (so
ranks make different numbers of ``update`` calls), and ranks that receive nothing.
"""

from __future__ import annotations

import math

import torch

import retrieval_metrics as rm

NAMES = [
    "hit_rate@1",
    "hit_rate@4",
    "recall@3",
    "map@r",
    "r_precision",
    "map",
    "mrr",
    "ndcg@5",
    "cmc@3",
    "median_rank",
    "mean_rank",
    "minp",
]


def _embeddings(n: int, seed: int, classes: int = 7, dim: int = 8):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    centers = torch.randn(classes, dim, generator=gen)
    emb = centers[labels] + 0.8 * torch.randn(n, dim, generator=gen)
    emb[5] = emb[3]  # exact duplicates: ties across processes
    return emb, labels


SAME = _embeddings(53, 0)
QUERY = _embeddings(23, 1)
GALLERY = _embeddings(61, 2)
CAMERAS_Q = torch.arange(23) % 3
CAMERAS_G = torch.arange(61) % 4
LISTS = [[f"d{(q * 7 + i * 3) % 40}" for i in range(10)] for q in range(19)]
RELEVANT = [{f"d{(q * 5) % 40}", f"d{(q * 11) % 40}", "d1"} for q in range(19)]


def sampler_indices(n: int, rank: int, world: int, empty_ranks: tuple[int, ...] = ()) -> list[int]:
    """DistributedSampler(shuffle=False, drop_last=False) over the ranks that get data."""
    active = [r for r in range(world) if r not in empty_ranks]
    if rank in empty_ranks:
        return []
    total = math.ceil(n / len(active)) * len(active)
    indices = list(range(n)) + list(range(total - n))  # padding repeats the first items
    return indices[active.index(rank) :: len(active)]


def batches(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]


def _build():
    return rm.RetrievalMetrics(NAMES, prefix="val/")


def _feed_same(metric, idx):
    t = torch.tensor(idx, dtype=torch.int64)
    metric.update(SAME[0][t], SAME[1][t], ids=t)


# two classes of about 26: more relevant pairs than the smallest memory budget holds, so
# compute() ranks in query chunks and the processes exchange per-query parts, not tables
MANY = _embeddings(53, 5, classes=2)
SMALLEST_BUDGET = 2**16


def _feed_many(metric, idx):
    t = torch.tensor(idx, dtype=torch.int64)
    metric.update(MANY[0][t], MANY[1][t], ids=t)


def _feed_same_no_ids(metric, idx):
    t = torch.tensor(idx, dtype=torch.int64)
    metric.update(SAME[0][t], SAME[1][t])


def _feed_query_gallery(metric, item):
    role, idx = item
    t = torch.tensor(idx, dtype=torch.int64)
    if role == "query":
        metric.update(QUERY[0][t], QUERY[1][t], role="query", ids=t, cameras=CAMERAS_Q[t])
    else:
        metric.update(
            GALLERY[0][t], GALLERY[1][t], role="gallery", ids=1000 + t, cameras=CAMERAS_G[t]
        )


def _feed_lists(metric, idx):
    metric.update(
        ranked_ids=[LISTS[i] for i in idx],
        relevant_ids=[RELEVANT[i] for i in idx],
        ids=torch.tensor(idx, dtype=torch.int64),
    )


def _scores_for(idx):
    preds, target, indexes = [], [], []
    for q in idx:
        gen = torch.Generator().manual_seed(100 + q)
        n = 6 + q % 5
        preds.append(torch.randint(0, 4, (n,), generator=gen).double())
        target.append(torch.randint(0, 2, (n,), generator=gen))
        indexes.append(torch.full((n,), q, dtype=torch.int64))
    return torch.cat(preds), torch.cat(target), torch.cat(indexes)


def _feed_scores(metric, idx):
    preds, target, indexes = _scores_for(idx)
    metric.update(preds=preds, target=target, indexes=indexes)


def _build_fixed_gallery():
    metric = rm.RetrievalMetrics(NAMES)
    metric.set_gallery(GALLERY[0], GALLERY[1], ids=1000 + torch.arange(61))
    return metric


def _feed_fixed(metric, idx):
    t = torch.tensor(idx, dtype=torch.int64)
    metric.update(QUERY[0][t], QUERY[1][t], role="query", ids=t)


PAIR_IMAGES = _embeddings(20, 3)[0]
PAIR_CAPTION_IMAGE = torch.arange(20).repeat_interleave(3)  # 3 captions per image
PAIR_CAPTIONS = PAIR_IMAGES[PAIR_CAPTION_IMAGE] + 0.9 * torch.randn(
    60, 8, generator=torch.Generator().manual_seed(4)
)


def _feed_pairs(metric, idx):
    t = torch.tensor(idx, dtype=torch.int64)
    img = PAIR_CAPTION_IMAGE[t]
    metric.update(PAIR_IMAGES[img], PAIR_CAPTIONS[t], 100 + img, text_ids=t)


def _feed_pairs_no_ids(metric, idx):
    """Image-text pairs without ``text_ids``: padded captions could not be told from new ones."""
    t = torch.tensor(idx, dtype=torch.int64)
    img = PAIR_CAPTION_IMAGE[t]
    metric.update(PAIR_IMAGES[img], PAIR_CAPTIONS[t], 100 + img)


SCENARIOS = {
    "same_source": (_build, _feed_same),
    "same_source_empty_rank": (_build, _feed_same),
    "no_ids": (_build, _feed_same_no_ids),
    "query_gallery": (lambda: rm.RetrievalMetrics(NAMES), _feed_query_gallery),
    "ranked_lists": (
        lambda: rm.RetrievalMetrics(["recall@3", "mrr", "ndcg@5", "map"]),
        _feed_lists,
    ),
    "scores": (lambda: rm.RetrievalMetrics(["hit_rate@2", "map", "ndcg@3", "mrr"]), _feed_scores),
    "fixed_gallery": (_build_fixed_gallery, _feed_fixed),
    "crossmodal": (lambda: rm.CrossModalRetrieval(k=(1, 5), folds=2, prefix="val/"),
                   _feed_pairs),
    "crossmodal_no_ids": (lambda: rm.RSum(k=(1, 5)), _feed_pairs_no_ids),
    "sharded_gallery": (lambda: rm.RetrievalMetrics(NAMES, gallery_sharded=True),
                        _feed_query_gallery),
    "many_relevant": (
        lambda: rm.RetrievalMetrics(NAMES, prefix="val/", memory_budget=SMALLEST_BUDGET),
        _feed_many,
    ),
}


def split_for_rank(scenario: str, rank: int, world: int) -> list:
    """This rank's batches; batch sizes differ per rank so update counts differ too."""
    size = 3 + 2 * rank
    if scenario == "same_source":
        return batches(sampler_indices(53, rank, world), size)
    if scenario == "many_relevant":
        return batches(sampler_indices(53, rank, world, empty_ranks=(world - 1,)), size)
    if scenario == "same_source_empty_rank":
        return batches(sampler_indices(53, rank, world, empty_ranks=(world - 1,)), size)
    if scenario == "no_ids":
        return batches(list(range(53))[rank::world], size)  # an exact split, no padding
    if scenario == "crossmodal_no_ids":
        return batches(list(range(60))[rank::world], size)  # an exact split, no padding
    if scenario in ("query_gallery", "sharded_gallery"):
        q = [("query", b) for b in batches(sampler_indices(23, rank, world), size)]
        # the gallery is split unevenly (rank 0 takes most of it; with 3 ranks the last gets
        # none), without repeats
        cut = [*[0, 45, 61, 61][:world], 61]
        g = [("gallery", b) for b in batches(list(range(cut[rank], cut[rank + 1])), 7)]
        return q + g
    if scenario == "ranked_lists":
        return batches(sampler_indices(19, rank, world), size)
    if scenario == "scores":
        # preds/target/indexes carry no sample ids, so padding could not be told from data:
        # this form is split exactly (documented limitation)
        return batches(list(range(19))[rank::world], size)
    if scenario == "fixed_gallery":
        return batches(sampler_indices(23, rank, world), size)
    if scenario == "crossmodal":
        return batches(sampler_indices(60, rank, world), size)
    raise KeyError(scenario)


def single_process(scenario: str):
    """The same metric fed every sample once, in one process."""
    build, feed = SCENARIOS[scenario]
    metric = build()
    if scenario.startswith("same_source") or scenario in ("no_ids", "many_relevant"):
        feed(metric, list(range(53)))
    elif scenario in ("query_gallery", "sharded_gallery"):
        feed(metric, ("query", list(range(23))))
        feed(metric, ("gallery", list(range(61))))
    elif scenario in ("ranked_lists", "scores"):
        feed(metric, list(range(19)))
    elif scenario in ("crossmodal", "crossmodal_no_ids"):
        feed(metric, list(range(60)))
    else:
        feed(metric, list(range(23)))
    result = metric.compute()
    values = result if isinstance(result, dict) else {"value": result}
    return {k: v.tolist() for k, v in values.items()}, per_query_lists(metric)


# scenarios whose summary() (values, intervals, chance levels, counts) is compared too
SUMMARY_SCENARIOS = ("same_source", "many_relevant")


def summary_lists(metric) -> list[dict]:
    """summary()'s rows as plain lists (a fixed bootstrap seed, so processes can agree)."""

    def plain(value):
        if isinstance(value, torch.Tensor):
            return value.tolist()
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value

    rows = metric.summary(num_bootstrap=200, seed=3).rows
    return [{key: plain(value) for key, value in row.items()} for row in rows]


def single_process_summary(scenario: str) -> list[dict]:
    """The summary of the same metric fed every sample once, in one process."""
    build, feed = SCENARIOS[scenario]
    metric = build()
    feed(metric, list(range(53)))
    return summary_lists(metric)


def per_query_lists(metric) -> dict:
    try:
        return {k: v.tolist() for k, v in metric.per_query().items()}
    except NotImplementedError:
        return {}
