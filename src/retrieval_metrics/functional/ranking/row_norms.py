"""Row norms as a ranking reads the rows (``RowBatches.norms_as_read``), and the check for NaN
put off until then (``RowBatches.check_when_read``).

A corpus's norms (cosine's divisors, or its factors after a half-precision product) and its
scan for NaN and infinities need every row read. Computed in a pass of their own, a corpus on
disk is read twice: once for them and once for the ranking. :class:`NormsAsRead` computes each
row's norm from the block the ranking reads anyway, then divides the block by it; the ranking
finishes the norms once it has read what it reads (``RowBatches.finish_norms``).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import to_device

__all__ = ["NormsAsRead", "PutOffCheck", "reciprocal_norms", "row_norms_of", "unit_divisor"]


def row_norms_of(part: Tensor, wide: torch.dtype, out: Tensor | None = None) -> Tensor:
    """Each row's Euclidean norm, ``(rows, 1)``, summed in ``wide`` (into ``out``): one
    function for the norms of a pass of their own and of rows as a ranking reads them, of half
    rows as stored or upcast (equal, bit for bit: tests/ranking/test_row_batches.py)."""
    return torch.linalg.vector_norm(part, dim=1, keepdim=True, dtype=wide, out=out)


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

    def read(self, piece: Tensor, target: Tensor, row: int, queued: bool) -> None:
        """``piece`` (rows from ``row`` on, as held) into ``target`` (the read dtype), their
        norms kept, divided by them where ``unit`` (one write of the rows, as with a divisor
        known before). Onto a device, the rows are copied there first. Rows read before (by an
        earlier block of queries) take the norms kept, not computed again. :meth:`settle`
        follows once a block's pieces are read."""
        norm = self.norms[row : row + piece.shape[0]]
        fresh = not self.known[row : row + piece.shape[0]].all()
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
        if not self.known[row : row + n].all():
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
