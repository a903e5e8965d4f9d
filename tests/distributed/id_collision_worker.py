"""A worker of tests/metrics/test_distributed.py: ``python id_collision_worker.py RANK WORLD INIT
OUT``. A gallery sharded over the processes (``gallery_sharded=True``) where only the last
rank's shard holds a gallery id that is also a query's, with another label: every rank must
refuse at compute() (none left waiting in a collective), the last naming the id."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def run(rank: int, world: int) -> dict:
    import torch

    import retrieval_metrics as rm

    gen = torch.Generator().manual_seed(0)
    queries, gallery = torch.randn(8, 4, generator=gen), torch.randn(12, 4, generator=gen)
    q_labels, g_labels = torch.arange(8) % 3, torch.arange(12) % 3
    g_ids = torch.arange(12) + 100
    g_ids[11] = 5  # the last shard's last item: query 5's id (query 5 has label 2) ...
    g_labels[11] = 0  # ... given another label: another sample under one id
    metric = rm.MRR(gallery_sharded=True)
    mine = torch.arange(8)[rank::world]
    metric.update(queries[mine], q_labels[mine], ids=mine, role="query")
    shard = torch.arange(12).chunk(world)[rank]
    metric.update(gallery[shard], g_labels[shard], ids=g_ids[shard], role="gallery")
    try:
        metric.compute()
    except ValueError as err:
        return {"refused": str(err)}
    return {"refused": None}


if __name__ == "__main__":
    from launch import worker_main

    worker_main(run)
