"""Row norms as a ranking reads the rows (``RowBatches.norms_as_read``), and the check for NaN
put off until then (``RowBatches.check_when_read``).

A corpus's norms (cosine's divisors, or its factors after a half-precision product) and its
scan for NaN and infinities need every row read. Computed in a pass of their own, a corpus on
disk is read twice: once for them and once for the ranking. :class:`NormsAsRead` computes each
row's norm from the block the ranking reads anyway, then divides the block by it; the ranking
finishes the norms once it has read what it reads (``RowBatches.finish_norms``).

On the host, the compiled ``_rows`` module (setup.py) does a chunk's upcast, norms, division and
zeroing in one pass over each row (:func:`unit_rows_in_one_pass`), where torch takes three
passes over the chunk and a handful of small operations: the same values, bit for bit, its norm
summed in torch's order (checked against torch for each width before use: :func:`torch_lanes`).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import to_device
from retrieval_metrics.functional.ranking.threads import pass_threads

try:  # the one-pass read (setup.py); without it, torch's passes: the same values
    from retrieval_metrics.functional.ranking import _rows
except ImportError:  # pragma: no cover - a build without the compiled modules
    _rows = None

__all__ = [
    "NormsAsRead",
    "PutOffCheck",
    "reads_in_one_pass",
    "reciprocal_norms",
    "row_norms_of",
    "torch_lanes",
    "unit_divisor",
    "unit_rows_in_one_pass",
]

#: the stored dtypes the one-pass read takes, by its code for them (read as float32)
_KINDS = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

#: the running sums torch may sum a float32 row's squares in (its vector width: AVX2's 8 floats,
#: AVX-512's 16)
LANES = (8, 16)


def row_norms_of(part: Tensor, wide: torch.dtype, out: Tensor | None = None) -> Tensor:
    """Each row's Euclidean norm, ``(rows, 1)``, summed in ``wide`` (into ``out``): one
    function for the norms of a pass of their own and of rows as a ranking reads them, of half
    rows as stored or upcast (equal, bit for bit: tests/ranking/test_row_batches.py)."""
    return torch.linalg.vector_norm(part, dim=1, keepdim=True, dtype=wide, out=out)


def _check_rows(width: int) -> Tensor:
    """Rows of ``width`` on which :func:`torch_lanes` compares sums: random rows over 40 binades
    (where a sum in another order rounds apart in most rows), a zero row, rows whose squares
    underflow or overflow float32."""
    generator = torch.Generator().manual_seed(width)
    rows = torch.randn(96, width, generator=generator)
    rows *= torch.exp2(torch.randint(-20, 20, (96, 1), generator=generator).float())
    rows[0] = 0.0
    rows[1] *= 1e-30
    rows[2] *= 1e30
    return rows


@functools.cache
def torch_lanes(width: int) -> int | None:
    """How many running sums torch sums the squares of a float32 row of ``width`` in (8 or 16,
    :data:`LANES`), as :func:`row_norms_of` computes them: the lane count for which the one-pass
    read's norms and unit rows equal torch's, bit for bit, on rows of that width
    (:func:`_check_rows`); None where none does (or ``width`` is no multiple of it: torch adds
    the rest one at a time, in an order its compiler chooses), or without the compiled module.
    Once a process, a width."""
    candidates = [lanes for lanes in LANES if width % lanes == 0]
    if _rows is None or width == 0 or not candidates:
        return None  # (no rows to check: a width no lane count divides keeps torch's passes)
    rows = _check_rows(width)
    norms = row_norms_of(rows, torch.float32)
    expected = NormsAsRead.zero_unfinished(rows / unit_divisor(norms), norms)
    for lanes in candidates:
        got, got_norms = torch.empty_like(rows), torch.empty_like(norms)
        _rows.unit_rows(rows.numpy(), 0, got.numpy(), got_norms.numpy(), lanes, False, True)
        if torch.equal(got_norms, norms) and torch.equal(got, expected):
            return lanes
    return None


def reads_in_one_pass(stored: torch.dtype, width: int, device: torch.device) -> bool:
    """Whether rows stored as ``stored``, of ``width``, read onto ``device``, are read by
    :func:`unit_rows_in_one_pass` (where they are contiguous)."""
    return (
        _rows is not None and stored in _KINDS and torch.device(device).type == "cpu"
        and torch_lanes(width) is not None
    )


def unit_rows_in_one_pass(
    piece: Tensor, target: Tensor, norm: Tensor, unit: bool, known: bool
) -> bool:
    """``piece`` (rows as held on the host: float32, float16 or bfloat16) into ``target``
    (float32, the piece itself allowed for float32) in one pass over each row: upcast, its norm
    into ``norm`` (``(rows, 1)`` float32; read from there where ``known``), divided by it where
    ``unit`` (:func:`unit_divisor`), zeroed where the norm is not finite
    (:meth:`NormsAsRead.zero_unfinished`): the values of torch's passes, bit for bit. Returns
    False, having done nothing, where the compiled module cannot (another dtype or device, rows
    not contiguous, a width whose sums torch orders otherwise: :func:`torch_lanes`)."""
    if (
        piece.dim() != 2 or piece.shape[0] == 0 or piece.device.type != "cpu"
        or not reads_in_one_pass(piece.dtype, piece.shape[1], target.device)
        or target.dtype != torch.float32 or norm.dtype != torch.float32
        or not (piece.is_contiguous() and target.is_contiguous() and norm.is_contiguous())
    ):
        return False
    kind, lanes = _KINDS[piece.dtype], torch_lanes(piece.shape[1])
    stored = piece if kind == 0 else piece.view(torch.int16)
    _rows.unit_rows(
        stored.numpy(), kind, target.numpy(), norm.numpy(), lanes, known, unit,
        threads=pass_threads(*piece.shape),
    )
    return True


def reciprocal_norms(norm: Tensor) -> Tensor:
    """Each row's factor for its cosine after a product of the rows as they are: 1 over its
    norm, 1 for a zero row (which scores 0 against everything, as its unit row, zero, does)."""
    return torch.where(norm > 0, 1.0 / norm, 1.0)


def unit_divisor(norm: Tensor) -> Tensor:
    """What each row is divided by for its unit row: its norm, 1 for a zero row (which stays
    zero)."""
    return torch.where(norm > 0, norm, 1.0)


class PutOffCheck:
    """A scan for NaN and infinities put off until the rows are first read
    (:meth:`RowBatches.check_when_read`): the name of the argument it blames, None once made
    (or never put off). One for every view of the same rows."""

    __slots__ = ("name",)

    def __init__(self) -> None:
        self.name: str | None = None


class NormsAsRead:
    """Each row's norm as a ranking reads the row (:meth:`RowBatches.norms_as_read`): the
    norms so far, which rows they cover (on the host: no wait on a device), and whether rows
    are read divided by them."""

    def __init__(
        self, rows: int, dtype: torch.dtype, device: torch.device, unit: bool, factors: bool,
    ) -> None:
        self.norms = torch.empty(rows, 1, dtype=dtype, device=device)
        self.known = np.zeros(rows, dtype=bool)
        self.unit = unit
        #: each row's reciprocal norm (reciprocal_norms), where asked for
        self.factors = torch.empty(rows, dtype=dtype, device=device) if factors else None
        #: rows read in one pass (unit_rows_in_one_pass) since the last settle: zeroed already
        #: where their norms are not finite
        self._zeroed = 0

    def read(self, piece: Tensor, target: Tensor, row: int, queued: bool) -> None:
        """``piece`` (rows from ``row`` on, as held) into ``target`` (the read dtype), their
        norms kept, divided by them where ``unit`` (one write of the rows, as with a divisor
        known before). Onto a device, the rows are copied there first. Rows read before (by an
        earlier block of queries) take the norms kept, not computed again. :meth:`settle`
        follows once a block's pieces are read."""
        norm = self.norms[row : row + piece.shape[0]]
        fresh = not self.known[row : row + piece.shape[0]].all()
        if unit_rows_in_one_pass(piece, target, norm, self.unit, known=not fresh):
            self._zeroed += piece.shape[0]
            return
        if piece.device != target.device:
            if fresh:  # (the norms from the rows on the host, see norms_as_read, then sent)
                norm.copy_(row_norms_of(piece, self.norms.dtype), non_blocking=queued)
            target.copy_(piece, non_blocking=queued)
            if self.unit:
                target.div_(unit_divisor(norm))
            return
        if fresh and piece.dtype != target.dtype:
            # Half rows upcast once, into the block, and their norms and division taken from
            # the copy (the same values: the upcast is exact): normed as stored, each chunk
            # was upcast twice, once into a scratch copy for the norm and once for the division.
            target.copy_(piece)
            row_norms_of(target, self.norms.dtype, norm)
            if self.unit:
                target.div_(unit_divisor(norm))
            return
        if fresh:
            row_norms_of(piece, self.norms.dtype, norm)
        if self.unit:
            torch.div(piece, unit_divisor(norm), out=target)
        else:
            target.copy_(piece)

    def read_joined(self, target: Tensor, row: int) -> None:
        """Rows from ``row`` on, already copied into ``target`` (the read dtype, on the norms'
        device: ``RowBatches._joined``): their norms kept (computed from the copy where any is
        new: the same values, a row's norm depending on that row alone), and the rows divided
        by them where ``unit``. :meth:`settle` follows."""
        n = target.shape[0]
        norm = self.norms[row : row + n]
        known = bool(self.known[row : row + n].all())
        if unit_rows_in_one_pass(target, target, norm, self.unit, known):
            self._zeroed += n
            return
        if not known:
            row_norms_of(target, self.norms.dtype, norm)
        if self.unit:
            target.div_(unit_divisor(norm))

    def settle(self, start: int, stop: int, rows: Tensor) -> None:
        """Rows ``start:stop`` (``rows``) read: their norms known, and a row whose norm is not
        finite (a NaN or an infinity in it, or squares beyond the dtype) zeroed, so that no
        score is NaN before the check refuses the rows or the ranking is made again
        (``similarity.stands``). On the host only where there is one (no wait on a device:
        there, one operation a block)."""
        norm = self.norms[start:stop]
        if self.factors is not None and not self.known[start:stop].all():
            self.factors[start:stop] = reciprocal_norms(norm[:, 0])
        self.known[start:stop] = True
        zeroed, self._zeroed = self._zeroed, 0
        if zeroed < stop - start:
            self.zero_unfinished(rows, norm)

    def finished(self, rows: Tensor, norm: Tensor, index: Tensor) -> Tensor:
        """``rows`` picked by ``index`` (``norm`` their norms) as the ranking takes them: divided
        by their norms where ``unit``, their factors written, rows of no finite norm zeroed
        (:meth:`settle`)."""
        if self.unit:
            rows.div_(unit_divisor(norm))
        if self.factors is not None:
            self.factors.index_copy_(
                0, to_device(index, self.factors.device), reciprocal_norms(norm[:, 0])
            )
        return self.zero_unfinished(rows, norm)

    @staticmethod
    def zero_unfinished(rows: Tensor, norm: Tensor) -> Tensor:
        bad = ~torch.isfinite(norm)
        if rows.device.type != "cpu" or bool(bad.any()):
            rows.masked_fill_(bad, 0)
        return rows
