"""A matrix held as the row batches it arrived in, read a block of rows at a time.

A corpus given to a metric in batches is ranked from those batches: joining them into one
tensor first would write a second copy of the corpus (for a million documents, 1.5 GB of fresh
memory, which on many machines costs more than the ranking's products), and the cosine's unit
rows a third. :class:`RowBatches` reads any block of rows into a buffer the ranking reuses,
divided by the rows' norms where it stands for their unit rows (:meth:`RowBatches.divided`):
the same values, bit for bit, as the rows of the joined matrix and of its unit rows.

Half-precision batches (float16, bfloat16) stay half in memory and are read as float32, a block
at a time: every value read is the float32 value of the stored number (each half-precision
number is one), so a ranking reads what it would read of the upcast corpus, at half the memory.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["HALF_PRECISION", "RowBatches", "read_dtype"]

#: stored as they are, read (and scored) as float32
HALF_PRECISION = (torch.float16, torch.bfloat16)


def read_dtype(stored: torch.dtype) -> torch.dtype:
    """The dtype rows stored as ``stored`` are read in: float32 for half precision."""
    return torch.float32 if stored in HALF_PRECISION else stored


class RowBatches:
    """The rows of ``batches`` (2-D tensors of one width, dtype and device) as one matrix.

    ``divisor``: each row is read divided by its entry (an ``(N, 1)`` tensor: :meth:`divided`);
    None reads the rows as they are. ``dtype`` is what the rows are read as (:func:`read_dtype`
    of the batches' dtype, ``stored_dtype``).

    >>> m = RowBatches([torch.tensor([[3.0, 4.0]]), torch.tensor([[0.0, 2.0], [1.0, 0.0]])])
    >>> m.shape, m.rows(0, 2, torch.empty(2, 2)).tolist()
    (torch.Size([3, 2]), [[3.0, 4.0], [0.0, 2.0]])
    >>> m.divided(m.row_norms()).index_select(0, torch.tensor([0, 2])).tolist()
    [[0.6000000238418579, 0.800000011920929], [1.0, 0.0]]
    """

    def __init__(self, batches: Sequence[Tensor], divisor: Tensor | None = None) -> None:
        batches = [b for b in batches if b.shape[0]] or list(batches[:1])
        if not batches:
            raise ValueError("RowBatches needs at least one batch")
        first = batches[0]
        for b in batches:
            if b.dim() != 2 or b.shape[1] != first.shape[1]:
                raise ValueError(
                    f"row batches must be 2-D of one width, got {tuple(b.shape)} beside "
                    f"{tuple(first.shape)}"
                )
            if b.dtype != first.dtype or b.device != first.device:
                raise ValueError("row batches must share one dtype and device")
        self.batches = batches
        sizes = torch.tensor([b.shape[0] for b in batches], dtype=torch.int64)
        #: where each batch starts, and the end: ``starts[i] <= row < starts[i + 1]``
        self.starts = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
        self._starts = self.starts.tolist()
        self.shape = torch.Size((self._starts[-1], first.shape[1]))
        self.stored_dtype, self.device = first.dtype, first.device
        self.dtype = read_dtype(first.dtype)
        self.divisor = divisor
        self._norms: Tensor | None = None

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        kind = "unit rows of " if self.divisor is not None else ""
        return f"RowBatches({kind}{len(self.batches)} batches, shape={tuple(self.shape)})"

    def dim(self) -> int:
        return 2

    def is_complex(self) -> bool:
        return self.dtype.is_complex

    def joined(self) -> Tensor:
        """The rows as one tensor (a copy)."""
        out = torch.cat(self.batches)
        if out.dtype != self.dtype:
            out = out.to(self.dtype)
        return out if self.divisor is None else out.div_(self.divisor)

    def row_norms(self) -> Tensor:
        """Each row's Euclidean norm, ``(N, 1)``, batch by batch (a row's norm depends on that
        row alone, whichever batch or joined matrix holds it). Computed once: a fixed gallery is
        ranked at every query update."""
        if self._norms is None:
            # (a half batch upcast first: the norms of the values read)
            norms = [
                torch.linalg.vector_norm(b.to(self.dtype), dim=1, keepdim=True)
                for b in self.batches
            ]
            self._norms = torch.cat(norms) if len(norms) > 1 else norms[0]
        return self._norms

    def divided(self, divisor: Tensor) -> RowBatches:
        """These rows read divided by ``divisor`` (``(N, 1)``, one entry a row)."""
        return RowBatches(self.batches, divisor)

    def rows(self, start: int, stop: int, out: Tensor, copy: bool = False) -> Tensor:
        """Rows ``start:stop``: a view of their batch where it holds them all, they are read as
        they are and ``copy`` is False, else written into ``out[: stop - start]`` (of the read
        dtype, same device; half batches are upcast as they are copied)."""
        first = bisect.bisect_right(self._starts, start) - 1
        as_stored = self.divisor is None and self.dtype == self.stored_dtype
        if not copy and as_stored and stop <= self._starts[first + 1]:
            offset = self._starts[first]
            return self.batches[first][start - offset : stop - offset]
        at, i = start, first
        while at < stop:
            offset, end = self._starts[i], min(stop, self._starts[i + 1])
            piece = self.batches[i][at - offset : end - offset]
            target = out[at - start : end - start]
            if self.divisor is None:
                target.copy_(piece)
            else:
                torch.div(piece, self.divisor[at:end], out=target)
            at, i = end, i + 1
        return out[: stop - start]

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        """The rows at ``index`` (int64, any order, repeats allowed) as a new tensor."""
        if dim != 0:
            raise ValueError("RowBatches selects rows (dim=0) only")
        index = index.to(torch.int64)
        host = index.cpu()
        out = torch.empty(host.numel(), self.shape[1], dtype=self.dtype, device=self.device)
        batch = torch.searchsorted(self.starts, host, right=True) - 1
        for i in torch.unique(batch).tolist():
            where = (batch == i).nonzero().view(-1)
            local = host.index_select(0, where) - self._starts[i]
            rows = self.batches[i].index_select(0, local.to(self.device))
            out[where.to(self.device)] = rows.to(self.dtype)
        if self.divisor is not None:
            out /= self.divisor.index_select(0, index.to(self.divisor.device))
        return out

    def __getitem__(self, index: Tensor | slice) -> Tensor:
        """Rows by an int64 index, a boolean mask or a slice, as a new tensor (what
        ``Items.select`` and the dedupe of repeated ids read)."""
        if isinstance(index, slice):
            index = torch.arange(len(self))[index]
        elif index.dtype == torch.bool:
            index = index.cpu().nonzero().view(-1)
        return self.index_select(0, index)
