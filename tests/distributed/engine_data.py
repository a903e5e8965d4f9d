"""The data of the engine tests on several processes (tests/metrics/test_engine.py)."""

from __future__ import annotations

import torch

NAMES = ["hit_rate@1", "hit_rate@5", "map@r", "r_precision", "mrr", "ndcg@10"]
#: queries q0..q39 judged against documents d40..d119
QRELS = {f"q{i}": {f"d{j}": 1 + (i + j) % 3 for j in range(40 + i % 7, 120, 9)} for i in range(40)}


def data(n: int = 120, dim: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Few distinct rows (exact ties everywhere) and nine labels."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n // 4, dim, generator=g)
    emb = base[torch.randint(0, n // 4, (n,), generator=g)]
    labels = torch.randint(0, 9, (n,), generator=g)
    return emb, labels
