"""Whether Triton's kernels run on a device, and give torch's numbers there: asked once per
device in a process, before ``counters.choose_counter`` lets ``TritonCounter`` count on it.

Importing ``triton`` proves little about launching a kernel: Triton compiles each kernel on
first use, and builds a small launcher for it with the host's C compiler, so a container
without one, a GPU older than the Triton release supports, or a driver it cannot load fails at
the first launch, inside ``compute()``. And a kernel that compiles may still count otherwise
than the reference on a device or a Triton release this project never ran on. So the first
ranking on a CUDA device runs both kernels on a small block made to be hard (ties between
scores and relevant scores, ``-inf`` items, rows with ``+inf`` padding, tiles cut by the
block's edges) and compares them with torch's kernels, bit for bit, in one read of the
device. Where either raises or differs, :func:`kernels_agree` says so with the reason, and
the caller counts with torch's kernels instead: the same values, a few more kernels a block.
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.ranking.engine import kernels, triton_count, triton_pairs

__all__ = ["kernels_agree"]

#: the check's block: more rows and columns than one tile of either kernel, so that tiles
#: are cut by the block's edges in both directions
ROWS, COLUMNS, RELEVANT = 37, 300, 5


def _block(device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The check's score block, relevant scores and factors, on ``device``: scores and
    relevant scores on a grid of quarters (ties everywhere), a few ``-inf`` items, rows with 0
    to :data:`RELEVANT` finite relevant scores (the rest ``+inf``), and factors of any float32
    value (their products round)."""
    gen = torch.Generator().manual_seed(0)
    s = torch.randint(-8, 9, (ROWS, COLUMNS), generator=gen).to(torch.float32) / 4
    s[torch.rand(ROWS, COLUMNS, generator=gen) < 0.02] = float("-inf")
    rel = torch.randint(-8, 9, (ROWS, RELEVANT), generator=gen).to(torch.float32) / 4
    rel = rel.sort(dim=1).values
    finite = torch.arange(ROWS) % (RELEVANT + 1)
    rel[torch.arange(RELEVANT)[None, :] >= finite[:, None]] = float("inf")
    a = torch.rand(ROWS, generator=gen) + 0.5
    b = torch.rand(COLUMNS, generator=gen) + 0.5
    return s.to(device), rel.to(device), a.to(device), b.to(device)


def kernels_agree(device: torch.device) -> str | None:
    """None where Triton's fused count and its factor per pair give torch's numbers on
    ``device``; else why not (the error a kernel raised, or which numbers differ)."""
    s, rel, a, b = _block(device)
    width = ROWS * (RELEVANT + 1)
    hists = [torch.zeros(width, dtype=torch.int64, device=device) for _ in range(4)]
    kernels.count_block_searched(s, rel, hists[0], hists[1], 1 << 20)
    scaled = s.nan_to_num(neginf=0.0).mul_(a[:, None] * b[None, :])
    try:
        triton_count.count_block_fused(s, rel, hists[2], hists[3])
        fused = triton_pairs.scale_by_pairs(s.nan_to_num(neginf=0.0), a, b)
    except Exception as error:  # (compiling and launching: any failure means torch counts)
        first_line = (str(error).strip().splitlines() or [""])[0]
        return f"{type(error).__name__}: {first_line[:200]}"
    differ = torch.stack([
        torch.ne(hists[0], hists[2]).any(), torch.ne(hists[1], hists[3]).any(),
        torch.ne(scaled, fused).any(),
    ]).tolist()  # (the check's one read of the device)
    if any(differ):
        what = [name for name, bad in zip(("the '<' counts", "the '<=' counts",
                                           "the factors per pair"), differ, strict=True) if bad]
        return f"its kernels gave other numbers than torch's ({', '.join(what)})"
    return None
