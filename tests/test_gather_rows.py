"""gather_rows, which every synced state and gathered table goes through, in real gloo
processes: every rank gets each tensor of every rank concatenated in rank order, in the dtype
the non-empty shares promote to, whatever the mix of dtypes, shapes and empty shares."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent / "distributed"
sys.path.insert(0, str(HERE))

import launch  # noqa: E402
from gather import tensors_of  # noqa: E402


def _expected(world: int) -> list[torch.Tensor]:
    """Each position's tensors of every rank joined in one process: the non-empty shares'
    promoted dtype and trailing shape (an empty tensor's own are ignored)."""
    shares = [tensors_of(rank) for rank in range(world)]
    out = []
    for pieces in zip(*shares, strict=True):
        filled = [p for p in pieces if p.shape[0] > 0] or list(pieces)
        dtype = filled[0].dtype
        for p in filled[1:]:
            dtype = torch.promote_types(dtype, p.dtype)
        out.append(torch.cat([p.to(dtype) for p in filled if p.shape[0] > 0] or [filled[0]]))
    return [*out, torch.zeros(0, 2, dtype=torch.int64), torch.zeros(0)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_gets_every_share_in_rank_order(world, tmp_path):
    results = launch.run_workers(HERE / "gather.py", [], world, tmp_path)
    expected = _expected(world)
    for rank, got in enumerate(results):
        assert len(got) == len(expected)
        for i, (g, want) in enumerate(zip(got, expected, strict=True)):
            context = f"rank {rank}, tensor {i}"
            assert g["dtype"] == str(want.dtype), context
            assert g["shape"] == list(want.shape), context
            assert g["values"] == want.double().tolist(), context
