"""``python gather.py RANK WORLD INIT_FILE OUT``: gather_rows of :func:`tensors_of` this rank's
tensors (every dtype, empty shares, odd byte sizes, a dtype that differs between ranks), written
as JSON for tests/test_gather_rows.py to compare with a concatenation in one process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def tensors_of(rank: int) -> list[torch.Tensor]:
    """Rank ``rank``'s tensors: each list position is one state gathered across ranks."""
    float_dtype = torch.float64 if rank == 1 else torch.float32  # promoted to float64
    return [
        torch.tensor([True, False, True, True])[: rank + 1],  # 1, 2, 3 bytes: unaligned pieces
        torch.arange(rank + 2, dtype=torch.uint8) + 10 * rank,
        torch.arange(3 * rank, dtype=torch.int16).reshape(rank, 3) - 7,
        torch.arange(4 * (rank + 1), dtype=torch.int32).reshape(rank + 1, 2, 2) * (rank + 1),
        torch.arange(5 * rank, dtype=torch.int64) + 2**40,  # empty on rank 0
        (torch.arange(rank + 3, dtype=float_dtype) + rank) / 3,
        torch.full((rank + 1, 2), 0.5 + rank, dtype=torch.float16),
        torch.full((2, 1), -1.25 * rank, dtype=torch.bfloat16),
        # empty with another trailing shape and dtype on rank 0: takes the others'
        torch.zeros(0, 7) if rank == 0 else torch.full((2, 4), rank + 0.25, dtype=torch.float64),
        torch.zeros(0, 3),  # empty everywhere
    ]


def main() -> None:
    import torch.distributed as dist

    from retrieval_metrics.distributed import gather_rows

    rank, world, init_file, out = sys.argv[1:5]
    rank, world = int(rank), int(world)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        gathered = gather_rows(tensors_of(rank))
        nothing = gather_rows([torch.zeros(0, 2, dtype=torch.int64), torch.zeros(0)])
        result = [
            {"dtype": str(t.dtype), "shape": list(t.shape), "values": t.double().tolist()}
            for t in gathered + nothing
        ]
        Path(out).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
