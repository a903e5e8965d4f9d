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

A batch may be a file on disk (:class:`MappedRows`, a memory-mapped ``.npy``): every read of it
(a block, the norms, the scan for NaN) goes a chunk of rows at a time, and hands the chunk's
pages back to the operating system once read, so the process holds about one block of the
corpus whatever its size (the file stays in the page cache, which the system reclaims).
"""

from __future__ import annotations

import bisect
import mmap
import warnings
from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import all_finite

__all__ = ["HALF_PRECISION", "MappedRows", "RowBatches", "read_dtype"]

#: bytes read at once from a file on disk, for the norms and the scan for NaN (small chunks:
#: freed memory is reused, not piled up by the allocator)
READ_BYTES = 1 << 22

#: stored as they are, read (and scored) as float32
HALF_PRECISION = (torch.float16, torch.bfloat16)


def read_dtype(stored: torch.dtype) -> torch.dtype:
    """The dtype rows stored as ``stored`` are read in: float32 for half precision."""
    return torch.float32 if stored in HALF_PRECISION else stored


class MappedRows:
    """The rows of a memory-mapped 2-D array on disk (``numpy.load(path, mmap_mode="r")``, or
    one of its slices of rows), whose pages are handed back once read (:meth:`release`).

    ``tensor``: the rows as a CPU tensor over the mapping (nothing is read until it is used).
    """

    def __init__(self, array: np.memmap) -> None:
        mapping = getattr(array, "_mmap", None)
        if not isinstance(mapping, mmap.mmap) or array.ndim != 2:
            raise ValueError(
                "a corpus on disk must be a 2-D memory-mapped array (numpy.load(path, "
                f'mmap_mode="r")), got {type(array).__name__} of {array.ndim} dimensions'
            )
        if not array.flags["C_CONTIGUOUS"]:
            raise ValueError("a corpus on disk must be stored by rows (C order), not Fortran")
        self._mapping = mapping
        # a copy-on-write mapping (mmap_mode="c") may hold the caller's own changes, which
        # handing its pages back would drop: its pages are kept
        self._give_back = getattr(array, "mode", "r") != "c"
        base = np.frombuffer(mapping, dtype=np.uint8)
        self._start = array.ctypes.data - base.ctypes.data
        del base
        self._row_bytes = array.strides[0]
        with warnings.catch_warnings():
            # (read-only: the ranking never writes to it)
            warnings.simplefilter("ignore", UserWarning)
            self.tensor = torch.from_numpy(array)
        self.shape = self.tensor.shape

    def release(self, start: int, stop: int) -> None:
        """Hand back the pages of rows ``start:stop`` (read again from the file when needed)."""
        if stop <= start or not self._give_back:
            return
        first = (self._start + start * self._row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        end = min(self._start + stop * self._row_bytes, len(self._mapping))
        if end > first:
            self._mapping.madvise(mmap.MADV_DONTNEED, first, end - first)


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

    def __init__(
        self, batches: Sequence[Tensor | MappedRows], divisor: Tensor | None = None
    ) -> None:
        sources = [b for b in batches if b.shape[0]] or list(batches[:1])
        if not sources:
            raise ValueError("RowBatches needs at least one batch")
        #: per batch, the file it is read from (None: held in memory)
        self.mapped = [b if isinstance(b, MappedRows) else None for b in sources]
        batches = [b.tensor if isinstance(b, MappedRows) else b for b in sources]
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

    def sources(self) -> list[Tensor | MappedRows]:
        """The batches as given (a file's as its :class:`MappedRows`)."""
        return [m if m is not None else b for b, m in zip(self.batches, self.mapped, strict=True)]

    def all_finite(self) -> bool:
        """Whether no value is NaN or infinite (a file read a chunk at a time)."""
        return all(
            all_finite(part) for i in range(len(self.batches)) for part in self._chunks(i)
        )

    def _chunks(self, i: int) -> Iterator[Tensor]:
        """Batch ``i`` in the read dtype: as it is where it is held so, else (half precision, a
        file) a chunk of rows at a time, each read into one buffer that the next overwrites (a
        file's pages handed back once read): the caller keeps what it needs of each chunk."""
        batch, mapped = self.batches[i], self.mapped[i]
        if mapped is None and batch.dtype == self.dtype:
            yield batch
            return
        rows = max(1, READ_BYTES // max(1, batch.shape[1] * batch.element_size()))
        buffer = torch.empty(
            min(rows, batch.shape[0]), batch.shape[1], dtype=self.dtype, device=self.device
        )
        for start in range(0, batch.shape[0], rows):
            stop = min(batch.shape[0], start + rows)
            out = buffer[: stop - start]
            out.copy_(batch[start:stop])
            if mapped is not None:
                mapped.release(start, stop)
            yield out

    def joined(self) -> Tensor:
        """The rows as one tensor (a copy)."""
        out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        return self.rows(0, len(self), out, copy=True)

    def row_norms(self) -> Tensor:
        """Each row's Euclidean norm, ``(N, 1)``, batch by batch (a row's norm depends on that
        row alone, whichever batch or joined matrix holds it). Computed once: a fixed gallery is
        ranked at every query update."""
        if self._norms is None:
            # (a half batch upcast first: the norms of the values read)
            norms = [
                torch.linalg.vector_norm(part, dim=1, keepdim=True)
                for i in range(len(self.batches)) for part in self._chunks(i)
            ]
            self._norms = torch.cat(norms) if len(norms) > 1 else norms[0]
        return self._norms

    def divided(self, divisor: Tensor) -> RowBatches:
        """These rows read divided by ``divisor`` (``(N, 1)``, one entry a row)."""
        return RowBatches(self.sources(), divisor)

    def rows(self, start: int, stop: int, out: Tensor, copy: bool = False) -> Tensor:
        """Rows ``start:stop``: a view of their batch where it holds them all, they are read as
        they are and ``copy`` is False, else written into ``out[: stop - start]`` (of the read
        dtype, same device; half batches are upcast as they are copied)."""
        first = bisect.bisect_right(self._starts, start) - 1
        as_stored = self.divisor is None and self.dtype == self.stored_dtype
        in_memory = self.mapped[first] is None
        if not copy and as_stored and in_memory and stop <= self._starts[first + 1]:
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
            mapped = self.mapped[i]
            if mapped is not None:
                mapped.release(at - offset, end - offset)
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
            mapped = self.mapped[i]
            if mapped is not None:
                mapped.release(int(local.min()), int(local.max()) + 1)
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
