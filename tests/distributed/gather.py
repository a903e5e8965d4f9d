"""What each rank of worker.py gives gather_rows: :func:`tensors_of` (every dtype, empty shares,
odd byte sizes, a dtype that differs between ranks); tests/metrics/test_distributed.py compares
every rank's result with a concatenation in one process."""

from __future__ import annotations

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


def gathered(rank: int) -> list[dict]:
    """gather_rows of this rank's :func:`tensors_of`, and of tensors empty everywhere, as JSON."""
    from retrieval_metrics.metrics.distributed import gather_rows

    tensors = gather_rows(tensors_of(rank))
    tensors += gather_rows([torch.zeros(0, 2, dtype=torch.int64), torch.zeros(0)])
    return [
        {"dtype": str(t.dtype), "shape": list(t.shape), "values": t.double().tolist()}
        for t in tensors
    ]
