"""Embeddings into the two matrices whose product is the score (larger is better).

Every ranking of embeddings scores a block of pairs with one matrix product of these matrices:
unit rows for cosine, the embeddings themselves for dot, one extra column for euclidean.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import flat_nonzero, in_float64, to_device
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.row_norms import unit_divisor

SIMILARITIES = ("cosine", "dot", "euclidean")
TINY_NORM = 2.0**-60


def score_dtype(*xs: Tensor) -> torch.dtype:
    # Half precision is scored in float32 (accumulating in half loses ranks); float64 stays.
    return torch.float64 if any(x.dtype == torch.float64 for x in xs) else torch.float32


def _short_rows(norm: Tensor) -> Tensor:
    """Indices of the rows whose ``(N, 1)`` norm is below :data:`TINY_NORM` or infinite: zero
    rows, rows whose squares underflow (their norm wrong or 0) and finite rows whose squares
    overflow (float32 entries beyond about 1e19: their unit rows would be 0)."""
    return flat_nonzero((norm[:, 0] < TINY_NORM) | torch.isinf(norm[:, 0]))


BINARY_COSINE = (
    'similarity="cosine" on binary codes (every entry +1 or -1): each code is divided by its norm '
    "before the product, and the rounding splits items at one Hamming distance from a query into "
    'nearby scores, which then do not tie; similarity="dot" ranks them in the same order with '
    "their ties exact"
)


def _sign_codes(x: Tensor) -> bool:
    """Whether every entry of ``x`` is +1 or -1 (binary hash codes as signs). The first test
    reads the matrix once without a copy: entries within [-1, 1] whose every row has the squared
    norm of its width can only be +1 and -1, short of a rounding; a match is confirmed exactly."""
    if x.numel() == 0 or not x.is_floating_point():
        return False
    if torch.stack(torch.aminmax(x)).tolist() != [-1.0, 1.0]:  # (one wait on a device)
        return False
    width = x.shape[1]
    squares = torch.linalg.vector_norm(x, dim=1).square()
    if not bool(((squares - width).abs() <= 1e-3 * width).all()):
        return False
    return bool((x.abs() == 1).all())


def warn_sign_code_blocks(query: Tensor, gallery: RowBatches) -> None:
    """:func:`prepare`'s warning on sign codes under cosine (:data:`BINARY_COSINE`), for a
    gallery read a block at a time, which :func:`prepare` never sees whole: said where the
    queries are sign codes and so is every gallery row. The queries decide first (real
    embeddings are not codes: one reduction), then the gallery's norms (known once a ranking
    has read it), and its values are read only where every norm is a code's."""
    if not _sign_codes(query):
        return
    width = gallery.shape[1]
    squares = gallery.row_norms().square()
    if not bool(((squares - width).abs() <= 1e-3 * width).all()):
        return
    raw = RowBatches(gallery.sources())
    step = 4096
    buffer = torch.empty(min(step, len(raw)), width, dtype=raw.dtype, device=raw.device)
    for start in range(0, len(raw), step):
        if not _sign_codes(raw.rows(start, min(start + step, len(raw)), buffer)):
            return
    warnings.warn(BINARY_COSINE, stacklevel=4)


def warn_zero_rows(count: int, side: str) -> None:
    """A zero vector has no direction: under cosine it scores 0 against everything. Said by
    name, once per ranking side, where the rows were found anyway (no scan of its own)."""
    what, its, it_is = (
        ("embeddings are zero vectors", "their", "they are") if count > 1
        else ("embedding is a zero vector", "its", "it is")
    )
    warnings.warn(
        f'similarity="cosine": {count} {side} {what} (no direction): {its} cosine with every '
        f"item is 0, so {it_is} ranked as tied with everything at score 0. Leave such rows "
        'out, check the encoder\'s output, or use similarity="dot" or "euclidean"',
        UserWarning,
        stacklevel=3,
    )


def _unit_rows(x: Tensor, in_place: bool = False, side: str = "query") -> Tensor:
    """Rows scaled to unit length; a zero row stays zero, so its cosine with anything is 0.

    ``torch.nn.functional.normalize`` divides by max(norm, 1e-12), which leaves rows shorter
    than 1e-12 short and so changes their cosines; dividing by the norm itself keeps cosine
    independent of scale for every non-zero row. ``in_place``: ``x`` (a copy the caller owns)
    becomes the result, the same values as a new tensor would hold. Each row's result depends on
    that row alone (not on its position), so rows may be gathered before or after.
    """
    norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    # Squares of float32 entries below ~1e-19 underflow, so the norm of such a row is wrong or
    # 0, and above ~1e19 overflow; those rows are scaled by their largest entry (in float64)
    # before normalising.
    # (Only the short rows are looked at: a test of every entry costs as much as the scaling.)
    short = _short_rows(norm)
    rows = x.index_select(0, short) if short.numel() else None  # read before x is scaled
    divisor = unit_divisor(norm)
    out = x.div_(divisor) if in_place else x / divisor
    if rows is not None:
        tiny = (rows != 0).any(1)  # zero rows stay zero
        zero = int((~tiny).sum())
        if zero:
            warn_zero_rows(zero, side)
        if zero < tiny.numel():
            # (on the host where the device has no float64: the same values on every device)
            rows = in_float64(rows[tiny])
            rows = rows / rows.abs().amax(1, keepdim=True)
            unit = rows / torch.linalg.vector_norm(rows, dim=1, keepdim=True)
            out[short[tiny]] = unit.to(x.device, x.dtype)
    return out


def may_read_in_blocks(gallery: Tensor | RowBatches, similarity: str, dtype: torch.dtype) -> bool:
    """Whether :func:`gallery_in_blocks` may read ``gallery`` a block at a time, as held, where
    every item is kept: a gallery held in batches, read in the scoring dtype, scored by dot
    product or cosine. Where it may, the ranking keeps the order the rows are held in (no
    order by label, ``Direction.make``): another order would be a copy of the gallery."""
    return (
        isinstance(gallery, RowBatches) and gallery.dtype == dtype
        and similarity in ("dot", "cosine")
    )


def gallery_in_blocks(
    gallery: Tensor | RowBatches,
    similarity: str,
    dtype: torch.dtype,
    gallery_rows: Tensor | None = None,
) -> RowBatches | None:
    """The gallery's prepared matrix read a block at a time from the batches the gallery is held
    in, where that needs no copy of them: every item kept in the order held (no
    ``gallery_rows``), already in the scoring dtype, scored by dot product (the rows as they
    are) or cosine (each row divided by its norm as it is read: the values of
    :func:`_unit_rows`). None where :func:`prepare` makes the matrix.

    Norms not known yet (the first ranking of a corpus held on the host, in memory or on disk)
    are computed as the ranking reads the rows, not by a pass of their own, and so is a scan
    for NaN put off (``RowBatches.check_when_read``: a corpus on disk, read once): the ranking
    then calls :func:`stands` once it has read the blocks it reads. (Batches in a device's
    memory keep the pass: a device's reduction may give a row another norm in another
    company, ``RowBatches.norms_as_read``.)"""
    if gallery_rows is not None or not may_read_in_blocks(gallery, similarity, dtype):
        return None
    assert isinstance(gallery, RowBatches)
    if similarity == "dot":
        if gallery.checked or not gallery.held_on_host:
            return gallery
        return gallery.norms_as_read(unit=False)
    if not gallery.knows_norms() and gallery.held_on_host:
        return gallery.norms_as_read(unit=True)
    norm = gallery.row_norms()
    # _unit_rows' division; a non-zero row too short for its squares is rescaled by it instead,
    # on a joined copy
    if _short_rows_to_rescale(gallery, norm):
        return None
    return gallery.divided(unit_divisor(norm))


def _short_rows_to_rescale(gallery: RowBatches, norm: Tensor) -> bool:
    """Whether a row of ``gallery`` is too short for its squares and not zero (its unit row is
    then rescaled, :func:`_unit_rows`); zero rows are said by name."""
    short = _short_rows(norm)
    if short.numel():
        nonzero = (gallery[short] != 0).any(1)
        if bool(nonzero.any()):
            return True
        warn_zero_rows(short.numel(), "gallery")
    return False


def stands(g_blocks: RowBatches | None) -> bool:
    """Whether a ranking that read :func:`gallery_in_blocks`' matrix ``g_blocks`` stands, once it
    has read what it reads: where the norms were computed as the rows were read, they are
    finished and kept (:meth:`RowBatches.finish_norms`: a ValueError where a value is NaN or
    infinite). False where the ranking is to be made again, the norms known then: a row whose
    squares overflow (read as zeros as the norms were computed), or with cosine a non-zero row
    too short for its squares (its unit row is rescaled on a copy, :func:`prepare`'s)."""
    if g_blocks is None or not g_blocks.reads_norms:
        return True
    norm, finite, short = g_blocks.finish_norms(short_below=TINY_NORM)  # (one wait)
    if not finite:
        # finite values whose squares overflow: their rows were read as zeros (see
        # RowBatches.norms_as_read), and are read as they are the next time
        return False
    return not (short and g_blocks.divides and _short_rows_to_rescale(g_blocks, norm))


def prepare_query(query: Tensor, similarity: str, dtype: torch.dtype) -> Tensor:
    """The queries' matrix of :func:`prepare` alone (beside a gallery read in blocks)."""
    q, _ = prepare(query, query[:0], similarity, dtype)
    assert q is not None
    return q


def prepare(
    query: Tensor | None,
    gallery: Tensor | RowBatches,
    similarity: str,
    dtype: torch.dtype,
    gallery_rows: Tensor | None = None,
) -> tuple[Tensor | None, Tensor]:
    """Turn embeddings into matrices whose product is the score (larger is better).

    ``gallery_rows``: the gallery's matrix holds these rows of ``gallery``, in this order (the
    processing order, with only the kept items), gathered before they are prepared: one copy of
    the gallery, not one in input order and another in processing order. ``query=None``: the
    gallery's matrix alone (a set ranked against itself in processing order needs no other);
    ``gallery is query`` (and no ``gallery_rows``): one prepared matrix serves both. A gallery
    held in :class:`RowBatches` is gathered into one matrix here (:func:`gallery_in_blocks`
    says where it need not be).
    """
    if similarity not in SIMILARITIES:
        raise ValueError(f"`similarity` must be one of {SIMILARITIES}, got {similarity!r}")
    g, owned = gallery, gallery_rows is not None  # the gathered gallery is a copy of ours
    if isinstance(gallery, RowBatches):
        g, owned = gallery.joined() if gallery_rows is None else gallery[gallery_rows], True
    elif gallery_rows is not None:
        g = gallery.index_select(0, to_device(gallery_rows, gallery.device))
    if g.dtype != dtype:
        g, owned = g.to(dtype), True
    same = gallery is query and gallery_rows is None
    q = None if query is None else (g if same else query.to(dtype))
    if similarity == "cosine":
        if _sign_codes(g) and (q is None or q is g or _sign_codes(q)):
            warnings.warn(BINARY_COSINE, stacklevel=2)
        # (no queries apart, or the same rows: the set is ranked against itself or both ways)
        both = q is None or same
        g = _unit_rows(g, in_place=owned, side="query and gallery" if both else "gallery")
        q = g if same else (None if q is None else _unit_rows(q))
    elif similarity == "euclidean":
        # -|q - g|^2 + |q|^2 = 2 q.g - |g|^2 orders the gallery exactly as -|q - g| does, and is
        # one matrix product with one extra column.
        if q is not None:
            q = torch.cat([2 * q, -torch.ones_like(q[:, :1])], dim=1)
        g = torch.cat([g, (g * g).sum(1, keepdim=True)], dim=1)
    return None if q is None else q.contiguous(), g.contiguous()
