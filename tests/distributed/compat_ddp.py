"""One process of the compat multi-process test: ``python compat_ddp.py RANK WORLD INIT_FILE OUT``.

Every rank feeds its own, uneven share of one ``preds, target, indexes`` data set (a different
number of updates of different sizes, a query's entries spread over both ranks) to every class of
``retrieval_metrics.compat.torchmetrics`` and writes each ``compute()`` as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compat_data import CASES, data, shares

import retrieval_metrics.compat.torchmetrics as C


def main() -> None:
    rank, world, init_file, out = sys.argv[1:5]
    rank, world = int(rank), int(world)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        results = {}
        for key, (name, options) in CASES.items():
            preds, target, indexes = data(ignored="ignore_index" in options)
            metric = getattr(C, name)(**options)
            for batch in shares(preds.numel(), rank, world):
                metric.update(preds[batch], target[batch], indexes=indexes[batch])
            results[key] = float(metric.compute())
        Path(out).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
