"""Rows of a corpus on disk (a memory-mapped ``.npy``) as a ranking reads them
(:class:`MappedRows`, one batch of ``row_batches.RowBatches``): in order a chunk at a time
through the mapping, each chunk's pages handed back once read, and picked by index from the file
itself. ``row_batches``' docstring has the figures behind the sizes below.
"""

from __future__ import annotations

import io
import itertools
import mmap
import os
import sys
import warnings
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

__all__ = ["MAPPED_AROUND", "READ_AHEAD_PIECE", "READ_BYTES", "RELEASE_BYTES", "MappedRows"]

#: bytes read at once from a file on disk, for the norms and the scan for NaN (small chunks:
#: freed memory is reused, not piled up by the allocator)
READ_BYTES = 1 << 20

#: bytes of a file read through its mapping whose pages are handed back at once (the most of
#: the file the process holds mapped, beside :data:`MAPPED_AROUND`)
RELEASE_BYTES = 8 << 20

#: bytes around a faulting address that Linux may map with it: its neighbours (fault-around,
#: 64 KiB) or the whole large folio that holds it in the page cache (up to 2 MiB on x86-64).
#: A chunk read through the mapping hands its pages back from this far before its first row
#: on: its first faults mapped pages of rows read and handed back before (left mapped, those
#: held 3.6% of a 2.9 GiB file read in chunks of 1 MiB)
MAPPED_AROUND = 1 << 21

#: bytes of the file asked for in one read-ahead advice (``MADV_WILLNEED``). Linux reads at most
#: the larger of the device's read-ahead window and its largest request of one such advice
#: (``force_page_cache_ra``), and drops the rest: the window is 128 KiB by default
#: (``read_ahead_kb``), and many NVMe drives take requests of 128 KiB (``max_sectors_kb``), so
#: one advice for a 3 MiB block read its first 128 KiB. 2M x 768 float16 from a disk set so
#: (both 128 KiB), the page cache dropped: 18.3-19.7 s in all in one advice a block, 15.3-16.0 s
#: in pieces (the products 10.8-11.7 s); from the page cache, the pieces cost 0.05-0.07 s more.
READ_AHEAD_PIECE = 128 << 10

#: ``madvise``'s advice to map a range's pages at once (Linux 5.14; its value on every Linux
#: architecture, for Pythons whose mmap module does not name it)
MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)

#: whether the system takes MADV_POPULATE_READ (False once refused: an older kernel, another
#: system)
_populates = sys.platform.startswith("linux")

#: whether a memory map takes advice here (``mmap.madvise``; Windows has none). Where it does
#: not, a file's rows read in order come from the file itself into a reused buffer
#: (:meth:`MappedRows._file_chunks`), as rows picked by index do: the process still holds a
#: chunk of the file, not every page it read through the mapping
_ADVISES = hasattr(mmap.mmap, "madvise")

#: whether ``os.preadv`` reads at an offset here (not on Windows): else a seek, then a read
_PREADV = hasattr(os, "preadv")


class MappedRows:
    """The rows of a memory-mapped 2-D array on disk (``numpy.load(path, mmap_mode="r")``, or
    one of its slices of rows): in order a chunk at a time through the mapping, the chunks'
    pages handed back once read (:meth:`chunks`), or picked by index from the file itself
    (:meth:`gather`): the process holds at most :data:`RELEASE_BYTES` of the file's pages
    (and those a fault maps around them). Where a memory map takes no advice (Windows), the
    rows in order are read from the file itself, a chunk at a time into one buffer.

    ``tensor``: the rows as a CPU tensor over the mapping (what :meth:`chunks` reads; rows
    picked by index are read through it only where the file cannot be read by itself: a
    copy-on-write mapping).
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
        base = np.frombuffer(mapping, dtype=np.uint8)
        self._start = array.ctypes.data - base.ctypes.data
        del base
        self._row_bytes = array.itemsize * array.shape[1]  # (C order: rows one after another)
        self._dtype = array.dtype
        #: the file read by itself, and where the rows start in it (None: read through the
        #: mapping): a copy-on-write mapping (mmap_mode="c") may hold the caller's own changes,
        #: which the file lacks
        self.path: str | None = None
        self._offset = 0
        filename = getattr(array, "filename", None)
        self._copy_on_write = getattr(array, "mode", "r") == "c"
        if not self._copy_on_write and filename is not None and os.path.isfile(
            filename
        ):
            offset = int(getattr(array, "offset", 0))
            self.path = filename
            # (numpy maps the file from the allocation granularity below ``offset``)
            self._offset = offset - offset % mmap.ALLOCATIONGRANULARITY + self._start
        with warnings.catch_warnings():
            # (read-only: the ranking never writes to it)
            warnings.simplefilter("ignore", UserWarning)
            self.tensor = torch.from_numpy(array)
        self.shape = self.tensor.shape
        self._buffer: np.ndarray | None = None

    # A copy (copy.deepcopy, clone(), pickle: MetricTracker, EMA of a module holding a metric)
    # maps the same file again rather than copying its rows: the mapping itself cannot be
    # pickled, and the rows, read whole into the copy, are what a corpus on disk must not be.
    def __getstate__(self) -> dict:
        if self.path is None:
            raise TypeError(
                "a corpus on disk mapped copy-on-write (numpy.load(..., mmap_mode='c')) or "
                "without a file cannot be copied or pickled: its rows may hold changes the file "
                "lacks. Map it with mmap_mode='r', or give it as a tensor"
            )
        return {"path": self.path, "offset": self._offset, "dtype": self._dtype,
                "shape": tuple(self.shape)}

    def __setstate__(self, state: dict) -> None:
        array = np.memmap(
            state["path"], dtype=state["dtype"], mode="r", offset=state["offset"],
            shape=state["shape"],
        )
        self.__init__(array)  # type: ignore[misc]

    def _staging(self, rows: int) -> np.ndarray:
        """A reused buffer of ``rows`` rows (at most a chunk), in the stored dtype: a stretch
        :meth:`gather` reads, or a chunk :meth:`_file_chunks` yields (copied out by its caller
        before the next read)."""
        if self._buffer is None or self._buffer.shape[0] < rows:
            self._buffer = np.empty((rows, self.shape[1]), dtype=self._dtype)
        return self._buffer[:rows]

    def stored_as(self, dtype: torch.dtype, device: torch.device) -> bool:
        """Whether the rows are read as they are stored (``dtype``, on the host ``device``)."""
        return self.tensor.dtype == dtype and device == self.tensor.device

    def chunk_rows(self, chunk_bytes: int = READ_BYTES) -> int:
        """Rows read at once (about ``chunk_bytes``)."""
        return max(1, chunk_bytes // max(1, self._row_bytes))

    def _read(self, file: io.FileIO, start: int, out: np.ndarray) -> None:
        """Rows ``start:start + len(out)`` of the open ``file`` into ``out`` (C-contiguous, the
        stored dtype)."""
        view = memoryview(out.reshape(-1).view(np.uint8))
        at, pos = 0, self._offset + start * self._row_bytes
        while at < len(view):
            if _PREADV:
                got = os.preadv(file.fileno(), [view[at:]], pos + at)
            else:
                file.seek(pos + at)
                got = file.readinto(view[at:]) or 0
            if got <= 0:
                raise OSError(f"{self.path}: the file ended before row {start + len(out)}")
            at += got

    def chunks(
        self, start: int, stop: int, mapped_at_once: bool = False
    ) -> Iterator[tuple[int, Tensor]]:
        """Rows ``start:stop`` a chunk at a time: (the chunk's first row, its rows as a CPU
        tensor of the stored dtype over the mapping, whose pages are handed back once the
        caller asks for a later chunk, or in a buffer the next chunk is read into where a
        memory map takes no advice: the caller copies out what it keeps).

        ``mapped_at_once``: chunks as large as the pages held allow (:data:`RELEASE_BYTES`, not
        :data:`READ_BYTES`), each chunk's pages mapped in one call before it is yielded
        (:meth:`_populate`), for a reader that writes a chunk straight into its block on one
        thread (``row_norms.unit_rows_in_one_pass``). torch's copies fault the pages in on
        several threads at once: mapped in one call first, 1 MiB chunks were read 20% slower."""
        step = self.chunk_rows(RELEASE_BYTES if mapped_at_once else READ_BYTES)
        if not _ADVISES and self.path is not None:
            yield from self._file_chunks(start, stop, step)
            return
        held = start  # (rows from ``held`` on may still be mapped)
        self._read_ahead(stop, stop + (stop - start))
        try:
            for at in range(start, stop, step):
                end = min(stop, at + step)
                if mapped_at_once:
                    self._populate(at, end)
                yield at, self.tensor[at:end]
                # handed back a few chunks at once: each madvise call costs as much as the
                # faults of a chunk (4 calls a block of 3 MiB took 0.12 s of 2M x 768 float16)
                if (end - held) * self._row_bytes >= RELEASE_BYTES:
                    self._release(held, end)
                    held = end
        finally:
            self._release(held, stop)

    def _file_chunks(self, start: int, stop: int, step: int) -> Iterator[tuple[int, Tensor]]:
        """:meth:`chunks` where a memory map takes no advice (Windows): each chunk of ``step``
        rows read from the file itself into one reused buffer, none of its pages mapped."""
        with open(self.path, "rb", buffering=0) as file:  # type: ignore[arg-type]
            for at in range(start, stop, step):
                rows = self._staging(min(stop, at + step) - at)
                self._read(file, at, rows)
                yield at, torch.from_numpy(rows)

    def _span(self, start: int, stop: int, before: int = 0) -> tuple[int, int]:
        """The bytes of the mapping that hold rows ``start:stop``, from ``before`` bytes ahead
        of them: from the page holding that byte to the rows' end (or the mapping's)."""
        first = max(0, self._start + start * self._row_bytes - before)
        first = first // mmap.PAGESIZE * mmap.PAGESIZE
        return first, min(self._start + stop * self._row_bytes, len(self._mapping))

    def _advise(self, advice: int, start: int, stop: int, before: int = 0) -> None:
        """``madvise`` of the mapping's pages that hold rows ``start:stop``, from ``before``
        bytes ahead of them (:meth:`_span`)."""
        first, end = self._span(start, stop, before)
        if end > first and _ADVISES:
            self._mapping.madvise(advice, first, end - first)

    def _read_ahead(self, start: int, stop: int) -> None:
        """Ask the system to read rows ``start:stop`` into the page cache in the background
        (``MADV_WILLNEED``): the rows a sequential reader asks for next are read from the disk
        while it works on these (a ranking: a block's product). One advice a
        :data:`READ_AHEAD_PIECE`, the most of one that Linux reads by default."""
        if start >= self.shape[0] or not _ADVISES:
            return
        first, end = self._span(start, stop)
        for at in range(first, end, READ_AHEAD_PIECE):
            self._mapping.madvise(mmap.MADV_WILLNEED, at, min(READ_AHEAD_PIECE, end - at))

    def _populate(self, start: int, stop: int) -> None:
        """Map the pages of rows ``start:stop`` in one call (``MADV_POPULATE_READ``, Linux
        5.14), read from the disk where the page cache lacks them: their reads then take no
        page faults, one a few pages each (2M x 768 float16 ranked from the page cache, 0.2 s
        of 11.6 s). Where the system has no such advice, the reads fault the pages in."""
        global _populates
        if _populates:
            try:
                self._advise(MADV_POPULATE_READ, start, stop)
            except (OSError, ValueError):
                _populates = False

    def _release(self, start: int, stop: int) -> None:
        """Hand back the mapped pages of rows ``start:stop`` (where the file is read through the
        mapping; not a copy-on-write one: its pages hold the caller's changes)."""
        if not self._copy_on_write:
            # (from MAPPED_AROUND bytes before: reading these rows, a fault mapped its
            # neighbours too, among them the last pages of rows read and handed back before)
            self._advise(mmap.MADV_DONTNEED, start, stop, before=MAPPED_AROUND)

    def gather(self, index: Tensor) -> Tensor:
        """The rows at ``index`` (int64 on the host, any order, repeats allowed) as a new CPU
        tensor of the stored dtype: the distinct rows in order, nearby ones read at once (a run
        of rows at most a chunk long, with gaps of at most a page), each run read by itself."""
        if self.path is None:
            return self.tensor.index_select(0, index)
        rows, inverse = torch.unique(index, return_inverse=True)
        at = rows.numpy()
        out = np.empty((at.size, self.shape[1]), dtype=self._dtype)
        if at.size:
            gap = max(1, mmap.PAGESIZE // max(1, self._row_bytes))
            # runs: a new one where the next row is more than ``gap`` rows on, or where the run
            # would outgrow a chunk
            new = np.ones(at.size, dtype=bool)
            new[1:] = np.diff(at) > gap
            run = np.cumsum(new) - 1
            first = at[new][run]
            piece = (at - first) // self.chunk_rows()
            new[1:] |= piece[1:] != piece[:-1]
            bounds = np.append(np.flatnonzero(new), at.size).tolist()
            with open(self.path, "rb", buffering=0) as file:
                for s, e in itertools.pairwise(bounds):
                    lo, hi = int(at[s]), int(at[e - 1]) + 1
                    if hi - lo == e - s:  # every row of the stretch: read in place
                        self._read(file, lo, out[s:e])
                    else:
                        span = self._staging(hi - lo)
                        self._read(file, lo, span)
                        out[s:e] = span[at[s:e] - lo]
        return torch.from_numpy(out).index_select(0, inverse)
