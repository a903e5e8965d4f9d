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

A batch may be a file on disk (:class:`MappedRows`, a memory-mapped ``.npy``). Its rows in
order (a block, the norms, the scan for NaN) are read through the mapping a chunk of about a MiB
at a time (where a block's unit rows are read in one pass, ``row_norms.unit_rows_in_one_pass``:
up to 8 MiB, each chunk's pages mapped in one call first, Linux's ``MADV_POPULATE_READ``, so
that the pass takes no page faults), as many rows after them asked of the disk in the
background (``MADV_WILLNEED``, in pieces of the most Linux reads of one advice by default,
``mapped_rows.READ_AHEAD_PIECE``: a corpus larger than the page cache is read while a block's
product runs; 2M x 768 float16 with the page cache dropped, 3.8-4.0 s besides the products
before, 3.5 s after, and with the default read-ahead window of 128 KiB, 7.3-8.0 s in one advice
a block, 4.3-4.9 s in pieces), their pages
handed back (``MADV_DONTNEED``) every few MiB read and at the end: the
process holds a few MiB of the file, whatever the corpus's size, and the values go from the
page cache straight into the block (read into a buffer first, with ``preadv``, a pass over
2M x 768 float16 for its norms or its unit rows took 1.1 s, through the mapping 0.45 s).
Rows picked by index (the judged documents, spread through the file) are read from the file
itself (``preadv``), one sorted run of nearby rows at a time, into a new array: no page of
theirs is mapped at all. The file stays in the page cache, which the system reclaims. A
copy-on-write mapping (``mmap_mode="c"``) may hold the caller's changes, which the file lacks:
every read of it goes through the mapping, and its pages are kept.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import (
    all_finite,
    sent_without_waiting,
    to_device,
)
from retrieval_metrics.functional.ranking import mapped_rows
from retrieval_metrics.functional.ranking.mapped_rows import MappedRows
from retrieval_metrics.functional.ranking.row_norms import (
    NormsAsRead,
    PutOffCheck,
    reads_in_one_pass,
    row_norms_of,
)

__all__ = ["HALF_PRECISION", "MappedRows", "RowBatches", "padded_block", "read_dtype"]

#: bytes of rows read at once for the norms of rows a ranking did not read
#: (:meth:`RowBatches.finish_norms`)
FINISH_BYTES = 8 << 20

#: rows of consecutive small batches in memory joined before rows are picked from them
#: (:meth:`RowBatches.index_select`): a gallery given a few rows an update is thousands of
#: batches, and picking from each alone took a handful of operations a batch
GROUP_ROWS = 4096

#: stored as they are, read (and scored) as float32
HALF_PRECISION = (torch.float16, torch.bfloat16)


def read_dtype(stored: torch.dtype) -> torch.dtype:
    """The dtype rows stored as ``stored`` are read in: float32 for half precision."""
    return torch.float32 if stored in HALF_PRECISION else stored


class RowBatches:
    """The rows of ``batches`` (2-D tensors of one width, dtype and device) as one matrix.

    ``divisor``: each row is read divided by its entry (an ``(N, 1)`` tensor: :meth:`divided`);
    None reads the rows as they are. ``dtype`` is what the rows are read as (:func:`read_dtype`
    of the batches' dtype, ``stored_dtype``; with ``as_stored``, the stored dtype itself: the
    half-precision rows the tensor cores multiply, :meth:`stored`).

    >>> m = RowBatches([torch.tensor([[3.0, 4.0]]), torch.tensor([[0.0, 2.0], [1.0, 0.0]])])
    >>> m.shape, m.rows(0, 2, torch.empty(2, 2)).tolist()
    (torch.Size([3, 2]), [[3.0, 4.0], [0.0, 2.0]])
    >>> m.divided(m.row_norms()).index_select(0, torch.tensor([0, 2])).tolist()
    [[0.6000000238418579, 0.800000011920929], [1.0, 0.0]]
    """

    def __init__(
        self, batches: Sequence[Tensor | MappedRows], divisor: Tensor | None = None,
        device: torch.device | None = None, as_stored: bool = False,
        norms: dict[str, Tensor] | None = None, check: PutOffCheck | None = None,
        as_read: NormsAsRead | None = None,
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
        if device is not None:
            if not all(m is not None for m in self.mapped):
                raise ValueError("only rows read from files are read onto another device")
            self.device = torch.device(device)  # each chunk read from the file copied there
        self.as_stored = as_stored
        self._group_runs: list[tuple[int, int]] | None = None
        #: every batch held in memory (none a file): a block across batches is then read by
        #: one concatenation (:meth:`_joined`)
        self._in_memory = all(m is None for m in self.mapped)
        self.dtype = first.dtype if as_stored else read_dtype(first.dtype)
        self.divisor = divisor
        #: the row norms once read (``norms``: another view's of the same rows, on this
        #: device: shared, not read again)
        self._norms: dict[str, Tensor] = {} if norms is None else norms
        #: the scan for NaN put off to the first read (:meth:`check_when_read`), shared by
        #: every view of these rows
        self._check = PutOffCheck() if check is None else check
        #: each row's norm computed as the row is first read (:meth:`norms_as_read`)
        self._as_read = as_read
        self._onto: dict[torch.device, RowBatches] = {}
        self._stored: RowBatches | None = None

    def __getstate__(self) -> dict:
        # the rows read from files travel as their MappedRows (the file named again), not as
        # the tensors over the mapping, which would carry the whole file
        state = dict(self.__dict__)
        state["batches"] = [
            None if m is not None else b for b, m in zip(self.batches, self.mapped, strict=True)
        ]
        return state

    def __setstate__(self, state: dict) -> None:
        state["batches"] = [
            m.tensor if m is not None else b
            for b, m in zip(state["batches"], state["mapped"], strict=True)
        ]
        self.__dict__.update(state)

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
        """Whether no value is NaN or infinite (a file read a chunk at a time).

        A corpus on disk is read once for its row norms instead (kept for the cosine that
        follows): a row with a NaN or an infinity has a NaN or infinite norm. Only where a
        norm is not finite (or a row's squares overflow float32) are the values scanned."""
        if self.on_disk and bool(torch.isfinite(self._computed_norms()).all()):
            return True
        return self._scanned_finite()

    def _scanned_finite(self) -> bool:
        return all(
            all_finite(part) for i in range(len(self.batches)) for part in self._chunks(i)
        )

    def check_when_read(self, name: str) -> RowBatches:
        """These rows, their scan for NaN and infinities put off until their values are first
        read, then made under ``name`` (a ValueError naming it). A corpus on disk: the first
        ranking reads the file a block at a time anyway, and computes each row's norm as it
        reads it (:meth:`norms_as_read`); those norms are the scan (:meth:`all_finite`), so
        the file is read once, not once to check it and again to rank it. Any other first read
        of the values (a joined copy, rows by index, the norms) makes the check before it."""
        self._check.name = name
        return self

    @property
    def checked(self) -> bool:
        """Whether no check of the values is put off (:meth:`check_when_read`)."""
        return self._check.name is None

    def _checked_by(self, norms: Tensor, finite: bool | None = None) -> None:
        """The check put off (:meth:`check_when_read`), made by the rows' ``norms`` (``finite``:
        whether they all are, where already read): a row with a NaN or an infinity has a NaN or
        infinite norm; where a norm is not finite, the values are scanned (a row whose squares
        overflow has finite values)."""
        name = self._check.name
        if name is None:
            return
        if finite is None:
            finite = bool(torch.isfinite(norms).all())
        if not finite and not self._scanned_finite():
            raise ValueError(f"`{name}` contains NaN or infinite values")
        self._check.name = None

    def _check_before_reading(self) -> None:
        """The check put off, made before values are read by anything but the read that
        computes each row's norm as it goes (:meth:`norms_as_read`)."""
        if self._check.name is not None and self._as_read is None:
            self._checked_by(self._computed_norms())

    def _chunks(self, i: int) -> Iterator[Tensor]:
        """Batch ``i`` in the read dtype: as it is where it is held so, else (half precision, a
        file) a chunk of rows at a time, each converted into one buffer that the next
        overwrites, or a file's chunk as it is stored (its pages handed back once the next is
        asked for): the caller keeps what it needs of each chunk."""
        batch, mapped = self.batches[i], self.mapped[i]
        if mapped is None and batch.dtype == self.dtype:
            yield batch
            return
        rows = max(1, mapped_rows.READ_BYTES // max(1, batch.shape[1] * batch.element_size()))
        if mapped is not None and mapped.stored_as(self.dtype, self.device):
            # (the file's chunks as stored: nothing to convert)
            yield from (part for _, part in mapped.chunks(0, batch.shape[0]))
            return
        buffer = torch.empty(
            min(rows, batch.shape[0]), batch.shape[1], dtype=self.dtype, device=self.device
        )
        pieces = (
            ((start, batch[start : start + rows]) for start in range(0, batch.shape[0], rows))
            if mapped is None else mapped.chunks(0, batch.shape[0])
        )
        for _, piece in pieces:
            out = buffer[: piece.shape[0]]
            out.copy_(piece)
            yield out

    def joined(self) -> Tensor:
        """The rows as one tensor (a copy)."""
        out = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        return self.rows(0, len(self), out, copy=True)

    def _per_row(self, reduce: Callable[[Tensor, torch.dtype], Tensor]) -> Tensor:
        """``reduce(chunk, wide)`` of every chunk of rows, joined: a per-row reduction in
        ``wide`` (float32 for half rows, also where they are read as stored)."""
        wide = read_dtype(self.stored_dtype)
        parts = [
            reduce(part, wide) for i in range(len(self.batches)) for part in self._chunks(i)
        ]
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def row_norms(self) -> Tensor:
        """Each row's Euclidean norm, ``(N, 1)``, batch by batch (a row's norm depends on that
        row alone, whichever batch or joined matrix holds it). Computed once: a fixed gallery is
        ranked by every compute() after an update, and by run() and top_k."""
        norms = self._computed_norms()
        self._checked_by(norms)
        return norms

    def knows_norms(self) -> bool:
        """Whether the row norms were computed already (by :meth:`row_norms` or by a read of
        every row, :meth:`finish_norms`)."""
        return "norms" in self._norms

    def _computed_norms(self) -> Tensor:
        if "norms" not in self._norms:
            self._norms["norms"] = self._per_row(row_norms_of)
        return self._norms["norms"]

    def row_squares(self) -> Tensor:
        """Each row's sum of squares, ``(N,)``, in float32 for half rows (as :meth:`row_norms`
        reads them): euclidean's ``|g|^2`` where half rows are multiplied as stored."""
        self._check_before_reading()
        return self._per_row(lambda part, wide: part.to(wide).square().sum(1))

    def divided(self, divisor: Tensor) -> RowBatches:
        """These rows read divided by ``divisor`` (``(N, 1)``, one entry a row)."""
        return RowBatches(
            self.sources(), divisor, self.device if self.on_disk else None, check=self._check
        )

    def norms_as_read(self, unit: bool, factors: bool = False) -> RowBatches:
        """These rows, read a block at a time (:meth:`rows`), each row's norm computed as the
        row is first read, not by a pass over the rows of its own; with ``unit``, each row read
        divided by its norm (a zero row left as it is): the values of
        ``divided(row_norms())``, bit for bit (each row's norm depends on that row alone),
        except that a row whose norm is not finite is read as zeros (:class:`NormsAsRead`).
        For a corpus on disk, one read of the file instead of two. Once the ranking has read
        what it reads, :meth:`finish_norms` completes and keeps the norms and makes a check
        put off (:meth:`check_when_read`). Rows held on the host only (:attr:`held_on_host`: in
        memory there, or a file, even where read onto a device): every norm is computed there,
        from the rows as held, where a row's norm does not depend on the rows reduced with it
        (a chunk, a block, rows picked by index; a device's reduction may order a row's sum by
        how many rows it reduces, and a relevant score and its block's would then differ in
        the last bit). Rows read as stored (:meth:`stored`, half rows for the tensor cores)
        stay so (no ``unit``); with ``factors``, each row's reciprocal norm is written too as
        the row is read (:attr:`factors_as_read`: cosine's factor of a half product,
        ``engine.tensor_cores``)."""
        if unit and self.as_stored:
            raise ValueError("rows read as stored are not divided by their norms")
        if not self.held_on_host:
            raise ValueError("norms are computed as read from rows held on the host only")
        device = self.device if self.on_disk else None
        reading = NormsAsRead(len(self), read_dtype(self.stored_dtype), self.device, unit,
                               factors)
        return RowBatches(
            self.sources(), None, device, self.as_stored, norms=self._norms, check=self._check,
            as_read=reading,
        )

    @property
    def factors_as_read(self) -> Tensor | None:
        """Each row's reciprocal norm (:func:`reciprocal_norms`), ``(N,)``, written as the row
        is read (:meth:`norms_as_read` with ``factors``; None without)."""
        return None if self._as_read is None else self._as_read.factors

    @property
    def held_on_host(self) -> bool:
        """Whether every batch is held on the host (in memory there, or a file), wherever the
        rows are read to."""
        return all(b.device.type == "cpu" for b in self.batches)

    @property
    def reads_norms(self) -> bool:
        """Whether each row's norm is computed as it is read (:meth:`norms_as_read`)."""
        return self._as_read is not None

    @property
    def divides(self) -> bool:
        """Whether the rows are read divided (by a divisor, or by their norms as read)."""
        return self.divisor is not None or (self._as_read is not None and self._as_read.unit)

    def finish_norms(self, short_below: float = 0.0) -> tuple[Tensor, bool, bool]:
        """Every row's norm, ``(N, 1)``, after a ranking read rows of :meth:`norms_as_read`
        (those it did not read, a pass whose every query finished early, are read now for
        theirs), whether all are finite, and whether any is below ``short_below``: both read
        from a device at once. Kept (:meth:`row_norms` returns them, on this device); a check
        put off is made by them (a ValueError naming the argument where a value is NaN or
        infinite)."""
        reading = self._as_read
        assert reading is not None, "finish_norms follows a read of norms_as_read's rows"
        missing = np.flatnonzero(~reading.known)
        if missing.size:
            # runs of rows not read, each read a buffer at a time
            edges = np.flatnonzero(np.diff(missing) > 1)
            starts = np.concatenate([missing[:1], missing[edges + 1]]).tolist()
            stops = np.concatenate([missing[edges] + 1, missing[-1:] + 1]).tolist()
            width = self.shape[1] * torch.finfo(self.dtype).bits // 8
            rows = max(1, min(missing.size, FINISH_BYTES // max(1, width)))
            buffer = torch.empty(rows, self.shape[1], dtype=self.dtype, device=self.device)
            for start, stop in zip(starts, stops, strict=True):
                for at in range(start, stop, rows):
                    self.rows(at, min(stop, at + rows), buffer, copy=True)
        norms = reading.norms
        self._norms["norms"] = norms
        finite, short = torch.stack(
            [torch.isfinite(norms).all(), (norms < short_below).any()]
        ).tolist()
        self._checked_by(norms, bool(finite))
        return norms, bool(finite), bool(short)

    def stored(self) -> RowBatches:
        """These rows read in the dtype they are stored in (half precision not upcast), on the
        same device: what the tensor cores multiply (``engine.tensor_cores``)."""
        if self.as_stored and self.divisor is None:
            return self
        if self._stored is None:
            # (float32 norms of the same values: one dict, whichever view reads them first)
            self._stored = RowBatches(
                self.sources(), None, self.device if self.on_disk else None, as_stored=True,
                norms=self._norms, check=self._check,
            )
        return self._stored

    @property
    def on_disk(self) -> bool:
        """Whether every row is read from a file (a corpus on disk)."""
        return all(m is not None for m in self.mapped)

    def onto(self, device: torch.device) -> RowBatches:
        """A corpus on disk read onto ``device`` (a GPU's): each chunk read from the file into
        the host's buffer, copied there, never held whole on either (itself where already)."""
        device = torch.device(device)
        if device == self.device:
            return self
        if device not in self._onto:  # (one view a device: its row norms computed once)
            divisor = None if self.divisor is None else to_device(self.divisor, device)
            # the norms read already (with the check for NaN), not read from the file again
            norms = {key: to_device(norm, device) for key, norm in self._norms.items()}
            self._onto[device] = RowBatches(
                self.sources(), divisor, device, self.as_stored, norms, self._check
            )
        return self._onto[device]

    def view(self, start: int, stop: int) -> Tensor | None:
        """Rows ``start:stop`` as a view of their batch, where one batch in memory holds them
        all and they are read as they are stored; else None (they are read by copying)."""
        first = bisect.bisect_right(self._starts, start) - 1
        as_stored = (
            self.divisor is None and self._as_read is None and self.dtype == self.stored_dtype
        )
        if as_stored and self.mapped[first] is None and stop <= self._starts[first + 1]:
            offset = self._starts[first]
            return self.batches[first][start - offset : stop - offset]
        return None

    def rows(self, start: int, stop: int, out: Tensor, copy: bool = False) -> Tensor:
        """Rows ``start:stop``: a view of their batch where it holds them all, they are read as
        they are and ``copy`` is False (:meth:`view`), else written into ``out[: stop - start]``
        (of the read dtype, same device; half batches are upcast as they are copied)."""
        view = None if copy else self.view(start, stop)
        if view is not None:
            return view
        self._check_before_reading()
        first = bisect.bisect_right(self._starts, start) - 1
        last = bisect.bisect_left(self._starts, stop) - 1
        if last > first and self._in_memory and self.batches[0].device == out.device:
            return self._joined(start, stop, first, last, out)
        # (read in one pass, a file's chunks are as large as its pages held allow, mapped at
        # once: the pass writes into the block itself, where torch's passes would make
        # temporaries of them)
        at_once = self._as_read is not None and reads_in_one_pass(
            self.stored_dtype, self.shape[1], out.device
        )
        at, i = start, first
        while at < stop:
            offset, end = self._starts[i], min(stop, self._starts[i + 1])
            mapped = self.mapped[i]
            pieces = (
                [(at - offset, self.batches[i][at - offset : end - offset])] if mapped is None
                else mapped.chunks(at - offset, end - offset, at_once)  # (a chunk at a time)
            )
            for local, piece in pieces:
                row = local + offset  # (of the whole matrix)
                target = out[row - start : row - start + piece.shape[0]]
                # (read onto a device: sent without waiting where it may be, then divided
                # there, the same values; the chunk is staged before the copy returns, so its
                # pages may go)
                queued = sent_without_waiting(piece, target.device)
                if self._as_read is not None:
                    self._as_read.read(piece, target, row, queued)
                elif self.divisor is None:
                    target.copy_(piece, non_blocking=queued)
                elif piece.device == target.device:
                    torch.div(piece, self.divisor[row : row + piece.shape[0]], out=target)
                else:
                    target.copy_(piece, non_blocking=queued)
                    target.div_(self.divisor[row : row + piece.shape[0]])
            at, i = end, i + 1
        if self._as_read is not None:
            self._as_read.settle(start, stop, out[: stop - start])
        return out[: stop - start]

    def _groups(self) -> list[tuple[int, int]]:
        """The batches as runs ``(first, last)`` that :meth:`index_select` picks rows from
        together: consecutive batches in memory joined up to :data:`GROUP_ROWS` rows (a batch
        that holds more, or a file, alone)."""
        if self._group_runs is None:
            runs, i, n = [], 0, len(self.batches)
            while i < n:
                last = i
                while (
                    self.mapped[i] is None and last + 1 < n and self.mapped[last + 1] is None
                    and self._starts[last + 2] - self._starts[i] <= GROUP_ROWS
                ):
                    last += 1
                runs.append((i, last))
                i = last + 1
            self._group_runs = runs
        return self._group_runs

    def _joined(self, start: int, stop: int, first: int, last: int, out: Tensor) -> Tensor:
        """Rows ``start:stop`` across batches ``first..last``, all in memory on ``out``'s
        device (the batches share one: ``__init__``): copied into ``out`` by one concatenation
        (half rows upcast as copied, exactly), then normed and divided as a whole. A gallery
        given a few rows an update is thousands of batches: read one by one, each cost a
        handful of small operations (a norm, a division, a copy) per block, several times the
        block's product. The values are the
        same: a row's norm depends on that row alone, and a division or an upcast is made
        element by element."""
        n = stop - start
        pieces = self.batches[first : last + 1]  # (those inside whole: no view of each)
        pieces[0] = pieces[0][start - self._starts[first] :]
        pieces[-1] = pieces[-1][: stop - self._starts[last]]
        target = torch.cat(pieces, out=out[:n])
        if self._as_read is not None:
            self._as_read.read_joined(target, start)
            self._as_read.settle(start, stop, target)
        elif self.divisor is not None:
            target.div_(self.divisor[start:stop])
        return target

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        """The rows at ``index`` (int64, any order, repeats allowed) as a new tensor."""
        if dim != 0:
            raise ValueError("RowBatches selects rows (dim=0) only")
        index = index.to(torch.int64)
        self._check_before_reading()
        reading = self._as_read
        if reading is not None:
            # the rows picked on the host, their norms computed there from them (each row's
            # depends on that row alone there: see norms_as_read), then sent
            on_host = RowBatches(self.sources(), as_stored=self.as_stored).index_select(0, index)
            norm = to_device(row_norms_of(on_host, reading.norms.dtype), self.device)
            return reading.finished(to_device(on_host, self.device), norm, index)
        host = index.cpu().contiguous()  # (a view: searchsorted would copy it, and warn)
        out = torch.empty(host.numel(), self.shape[1], dtype=self.dtype, device=self.device)
        groups = self._groups()
        edges = torch.tensor([self._starts[first] for first, _ in groups] + [len(self)])
        group = torch.searchsorted(edges, host, right=True) - 1
        # the positions grouped by group of batches in one sort, not a scan of them all per
        # batch (a gallery given 8 rows an update is thousands of batches)
        by_group = torch.sort(group, stable=True).indices
        stop = 0
        for g, count in enumerate(torch.bincount(group, minlength=len(groups)).tolist()):
            start, stop = stop, stop + count
            if count == 0:
                continue
            where = by_group[start:stop]
            first, last = groups[g]
            local = host.index_select(0, where) - self._starts[first]
            mapped = self.mapped[first]
            if mapped is not None:  # (the rows alone, from the file)
                rows = to_device(mapped.gather(local), self.device)
            else:
                held = self.batches[first] if first == last else torch.cat(
                    self.batches[first : last + 1]
                )
                rows = held.index_select(0, to_device(local, self.device))
            out[to_device(where, self.device)] = rows.to(self.dtype)
        if self.divisor is not None:
            out /= self.divisor.index_select(0, to_device(index, self.divisor.device))
        return out

    def __getitem__(self, index: Tensor | slice) -> Tensor:
        """Rows by an int64 index, a boolean mask or a slice, as a new tensor (what
        ``Items.select`` and the dedupe of repeated ids read)."""
        if isinstance(index, slice):
            index = torch.arange(len(self))[index]
        elif index.dtype == torch.bool:
            index = index.cpu().nonzero().view(-1)
        return self.index_select(0, index)


def padded_block(rows: Tensor | RowBatches, start: int, stop: int, out: Tensor) -> Tensor:
    """Rows ``start:stop`` of ``rows`` as a product of ``out``'s shape takes them: a view where
    they fill ``out`` and are held as they are read, else written into ``out`` (unit rows,
    half rows upcast, a file, a block across batches) with zero rows after them. Every block
    is then one product of the same shape, the last one padded: a pair's score cannot depend
    on the block it fell in. Returns ``out`` itself where it wrote there. (Only the padding
    is zeroed: the rows read overwrite the rest.)"""
    n = stop - start
    if n == out.shape[0]:
        view = rows.view(start, stop) if isinstance(rows, RowBatches) else rows[start:stop]
        if view is not None:
            return view
    out[n:].zero_()
    if isinstance(rows, RowBatches):
        rows.rows(start, stop, out, copy=True)
    else:
        out[:n] = rows[start:stop]
    return out
