"""Gathering tensors across processes, robust to what torchmetrics' default gather trips on.

``gather_rows`` all-gathers one tensor per rank along dimension 0 when ranks hold different numbers
of rows, different trailing shapes only because a rank is empty, or different floating dtypes, and
returns the concatenation in rank order. Two collectives per call: one for the shapes and dtypes,
one for the padded payload.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["distributed_ready", "gather_rows", "rank_and_world"]

_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]
_MAX_DIMS = 3


def distributed_ready() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank_and_world(group: Any = None) -> tuple[int, int]:
    if not distributed_ready():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _common_dtype(codes: list[int], rows: list[int]) -> torch.dtype:
    dtypes = [_DTYPES[c] for c, r in zip(codes, rows, strict=True) if r > 0]
    if not dtypes:
        dtypes = [_DTYPES[c] for c in codes]
    result = dtypes[0]
    for d in dtypes[1:]:
        result = torch.promote_types(result, d)
    return result


def gather_rows(tensors: list[Tensor], group: Any = None) -> list[Tensor]:
    """All-gather each tensor of ``tensors`` (same list on every rank) along dimension 0.

    An empty tensor on one rank may have any trailing shape and dtype (it takes the others'), so a
    rank that saw no data never breaks the collective.
    """
    _, world = rank_and_world(group)
    if world == 1:
        return tensors
    device = tensors[0].device if tensors else torch.device("cpu")
    if dist.get_backend(group) == "nccl" and device.type != "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    meta = torch.zeros(len(tensors), 2 + _MAX_DIMS, dtype=torch.int64)
    for i, t in enumerate(tensors):
        if t.dim() > _MAX_DIMS:
            raise ValueError(f"cannot gather a {t.dim()}-D state")
        meta[i, 0] = _DTYPES.index(t.dtype)
        meta[i, 1] = t.dim()
        meta[i, 2 : 2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
    meta = meta.to(device)
    all_meta = [torch.zeros_like(meta) for _ in range(world)]
    dist.all_gather(all_meta, meta, group=group)
    all_meta = [m.cpu() for m in all_meta]
    out = []
    for i, t in enumerate(tensors):
        rows = [int(m[i, 2]) if int(m[i, 1]) > 0 else 0 for m in all_meta]
        codes = [int(m[i, 0]) for m in all_meta]
        dtype = _common_dtype(codes, rows)
        donor = next((m for m, r in zip(all_meta, rows, strict=True) if r > 0), all_meta[0])
        ndim = max(1, int(donor[i, 1]))
        trailing = [int(x) for x in donor[i, 3 : 2 + ndim]]
        for m, r in zip(all_meta, rows, strict=True):
            if r > 0 and [int(x) for x in m[i, 3 : 2 + int(m[i, 1])]] != trailing:
                raise ValueError(
                    f"ranks hold states of different trailing shapes: {trailing} and "
                    f"{[int(x) for x in m[i, 3 : 2 + int(m[i, 1])]]} (e.g. embeddings of different "
                    "dimensions)"
                )
        local = t.reshape(-1, *trailing) if t.numel() else torch.empty(0, *trailing)
        local = local.to(device=device, dtype=dtype)
        max_rows = max(rows) if rows else 0
        padded = torch.zeros(max_rows, *trailing, dtype=dtype, device=device)
        padded[: local.shape[0]] = local
        gathered = [torch.zeros_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded, group=group)
        out.append(
            torch.cat([g[:r] for g, r in zip(gathered, rows, strict=True)]).to(tensors[i].device)
        )
    return out


class DistributedExchange:
    """:class:`retrieval_metrics.functional.ranking.Exchange` over torch.distributed."""

    def __init__(self, group: Any = None) -> None:
        self.group = group
        self.sent = 0

    def gather(self, tensors: list[Tensor]) -> list[Tensor]:
        self.sent += sum(t.numel() * t.element_size() for t in tensors)
        return gather_rows(tensors, self.group)

    def _reduce(self, tensor: Tensor, op: Any) -> Tensor:
        out = tensor.clone()
        self.sent += out.numel() * out.element_size()
        dist.all_reduce(out, op=op, group=self.group)
        return out

    def sum(self, tensor: Tensor) -> Tensor:
        return self._reduce(tensor, dist.ReduceOp.SUM)

    def max(self, tensor: Tensor) -> Tensor:
        return self._reduce(tensor, dist.ReduceOp.MAX)
