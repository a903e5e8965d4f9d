"""Data, per-rank splits and metric options of the compat multi-process test."""

from __future__ import annotations

from itertools import pairwise

import torch

# key -> (class name, constructor options); every class, several options each
CASES: dict[str, tuple[str, dict]] = {
    "hit_rate@3": ("RetrievalHitRate", {"top_k": 3}),
    "hit_rate/skip": ("RetrievalHitRate", {"empty_target_action": "skip"}),
    "map": ("RetrievalMAP", {}),
    "map@4/median": ("RetrievalMAP", {"top_k": 4, "aggregation": "median"}),
    "mrr/pos": ("RetrievalMRR", {"empty_target_action": "pos"}),
    "mrr@2/max": ("RetrievalMRR", {"top_k": 2, "aggregation": "max"}),
    "ndcg@5": ("RetrievalNormalizedDCG", {"top_k": 5}),
    "ndcg/min": ("RetrievalNormalizedDCG", {"aggregation": "min"}),
    "precision@3": ("RetrievalPrecision", {"top_k": 3}),
    "precision@9/adaptive": ("RetrievalPrecision", {"top_k": 9, "adaptive_k": True}),
    "precision/skip": ("RetrievalPrecision", {"empty_target_action": "skip"}),
    "r_precision": ("RetrievalRPrecision", {}),
    "recall@3/ignore": ("RetrievalRecall", {"top_k": 3, "ignore_index": -1}),
    "fall_out@3": ("RetrievalFallOut", {"top_k": 3}),
    "auroc": ("RetrievalAUROC", {}),
    "auroc@6/max_fpr": ("RetrievalAUROC", {"top_k": 6, "max_fpr": 0.5}),
}


def data(ignored: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """240 entries of 23 queries in random order: distinct scores of both signs, binary targets
    (12 of them -1 with ``ignored``, for ``ignore_index=-1``), a query with no relevant and one
    with no non-relevant entry."""
    gen = torch.Generator().manual_seed(11)
    n = 240
    indexes = torch.randint(0, 23, (n,), generator=gen)
    preds = torch.randperm(n, generator=gen).to(torch.float32) / n - 0.3
    target = (torch.rand(n, generator=gen) < 0.3).to(torch.int64)
    target[indexes == 4] = 0  # a query with no relevant entry
    target[indexes == 9] = 1  # a query with no non-relevant entry
    drop = torch.randperm(n, generator=gen)[:12]
    if ignored:
        target[drop] = -1
    return preds, target, indexes


def shares(n: int, rank: int, world: int) -> list[torch.Tensor]:
    """This rank's batches: contiguous chunks of uneven size, rank 0 with more updates."""
    bounds = [0, 37, 41, 110, 150, 151, 200, n]  # 7 batches of 37, 4, 69, 40, 1, 49, 40 entries
    chunks = [torch.arange(a, b) for a, b in pairwise(bounds)]
    if world == 2:
        mine = [0, 1, 2, 3, 4] if rank == 0 else [5, 6]
    else:
        mine = list(range(rank, len(chunks), world))
    return [chunks[i] for i in mine]
