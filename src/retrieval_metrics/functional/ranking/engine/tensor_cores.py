"""Half-precision embeddings multiplied as they are stored, on an accelerator's tensor cores.

Where the counting backend says so (``Counter.multiplies_half``: an accelerator whose torch has
``torch.mm(..., out_dtype=torch.float32)``), float16 and bfloat16 matrices are multiplied in
their own dtype with float32 accumulation and a float32 result. The product of two half numbers
is exact in float32, so a score is a float32 sum of the exact products, as the upcast float32
product's is (the order of the additions may differ, so a score may differ from it in the last
bit; the same numbers still give the same score, so exact ties stay ties). Nothing is upcast
block by block: the operands keep half the bytes, and the tensor cores run several times the
float32 rate.

Cosine and euclidean scores cannot be made part of the half matrices, as they are for float32
(unit rows, an extra column of squared norms): rounded to half precision, a unit row loses the
last bits of every entry and a squared norm most of its own, which would change the ranks. Each
score block takes them after its product instead, in float32 (:class:`HalfProducts`):

* cosine: ``s_ij * (1/|a_i| * 1/|b_j|)``, one factor per pair, the product of the two rows'
  reciprocal norms, where a block is read along its columns too (the symmetric pass, both
  directions of image-text): the score of a pair then does not depend on which side of a block
  it lies on, and where scores travel between the shards of a corpus (each shard's must be
  true cosines, whichever path it took). Where the counting backend is Triton's, one kernel
  applies them as it reads each score once (``triton_pairs``); elsewhere torch writes the
  factors out as a block, then multiplies by it: the same numbers. Where blocks are read
  along their rows only and the scores stay in the ranking (the one-sided pass of an unsharded
  corpus), ``s_ij * 1/|b_j|``: a query's scores all lack the same positive factor 1/|a_i|,
  which orders and ties its items as the cosine does, in one pass over the block instead of
  two. Where the counting backend folds them (Triton's, ``Counter.folds_column_factor``), a
  block computed to be counted takes neither pass: the fused count multiplies each score by its
  column's factor, or by its pair's, as it reads it, the same float32 products, so such a block
  is read once and never rewritten (blocks read for their relevant scores are scaled here);
* euclidean: ``2 s_ij - |b_j|^2``, the float32 path's ``2 q.g - |g|^2``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import flat_nonzero, to_device
from retrieval_metrics.functional.ranking.engine import triton_pairs
from retrieval_metrics.functional.ranking.engine.similarity import warn_zero_rows
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.row_norms import reciprocal_norms

#: Rows whose norm lies outside these bounds keep the float32 path: their products would
#: underflow or overflow float32 before the norms divide them (bfloat16 spans float32's range).
NORM_BOUNDS = (2.0**-30, 2.0**60)


@dataclass(frozen=True)
class HalfProducts:
    """The score blocks of one ranking's half-precision matrices ``a`` (the rows of a block,
    the queries) and ``b`` (its columns): what each block takes after its product.

    ``a_factor`` / ``b_factor``: per row of ``a`` / ``b`` in their matrices' order, float32 on
    the device: the reciprocal norms (cosine), or for ``b`` the squared norms (euclidean);
    None where the similarity takes none (dot, and euclidean's ``a``) or the pass reads each
    block along its rows only (cosine's ``a``). ``fused``: cosine's factor per pair is applied
    in one pass over a block (``triton_pairs``: the counting backend says,
    ``Counter.fuses_pair_factors``), the same numbers as torch's block of factors.
    ``lists_factor``: where a pass that reads its blocks along their rows only (cosine's
    ``a_factor`` None) keeps a run's lists (``engine.listing``), ``a``'s reciprocal norms, for
    the true cosines a run lists (:meth:`listed`).
    """

    similarity: str
    a_factor: Tensor | None
    b_factor: Tensor | None
    fused: bool = False
    lists_factor: Tensor | None = None

    @property
    def needs_work(self) -> bool:
        """Whether :meth:`product` needs a ``work`` buffer: cosine's factors per pair written
        out as a block (not where they are fused, nor where only the columns' are taken)."""
        return self.pair_factors and not self.fused

    @property
    def pair_factors(self) -> bool:
        """Whether a block takes cosine's factor per pair (``1/|a_i| * 1/|b_j|``: a block read
        along its columns too), which a counting backend may apply as it reads each score."""
        return self.similarity == "cosine" and self.a_factor is not None

    @property
    def columns_only(self) -> bool:
        """Whether a block takes a factor per column alone (cosine read along its rows only:
        ``s_ij * 1/|b_j|``), which a counting backend may apply as it reads each score
        (``Counter.folds_column_factor``) instead of a pass over the block here."""
        return self.similarity == "cosine" and self.a_factor is None

    def block(self, factor: Tensor | None, index: int, size: int) -> Tensor | None:
        """``factor`` of block ``index`` of its matrix in blocks of ``size`` rows (the last
        padded to ``size``: :meth:`rows`)."""
        return self.rows(factor, slice(index * size, (index + 1) * size), size)

    def rows(self, factor: Tensor | None, index: Tensor | slice, width: int) -> Tensor | None:
        """``factor`` at the rows ``index`` of its matrix, padded to ``width`` (the rows a
        product pads with zero rows: any finite factor gives them a finite score)."""
        if factor is None:
            return None
        picked = factor[index] if isinstance(index, slice) else factor.index_select(
            0, to_device(index, factor.device)
        )
        if picked.shape[0] == width:
            return picked
        return torch.cat([picked, picked.new_ones(width - picked.shape[0])])

    def product(
        self, a: Tensor, b: Tensor, out: Tensor, a_factor: Tensor | None,
        b_factor: Tensor | None, work: Tensor | None, factors_left: bool = False,
    ) -> Tensor:
        """Scores of rows ``a`` against rows ``b`` (half) into ``out`` (float32), their
        factors given for those rows (:meth:`rows`); ``work``: a float32 buffer of at least
        ``out``'s size, apart from it, for cosine's factor per pair (where ``a_factor`` is
        given). ``factors_left``: the product alone, cosine's factors (per column, or per
        pair) left to the counting backend that folds them."""
        s = torch.mm(a, b.T, out_dtype=out.dtype, out=out)
        if factors_left:
            assert self.similarity == "cosine", "only cosine's factors are left to the counting"
            return s
        if self.similarity == "cosine" and a_factor is None:
            assert b_factor is not None
            s.mul_(b_factor)
        elif self.similarity == "cosine" and self.fused:
            assert b_factor is not None
            triton_pairs.scale_by_pairs(s, a_factor, b_factor)
        elif self.similarity == "cosine":
            assert b_factor is not None and work is not None and work is not out, (
                "a block of cosine's factors per pair needs a work buffer (needs_work)"
            )
            pair = work.view(-1)[: s.numel()].view(s.shape)
            torch.mul(a_factor[:, None], b_factor[None, :], out=pair)
            s.mul_(pair)
        elif self.similarity == "euclidean":
            assert b_factor is not None
            torch.add(b_factor.neg()[None, :], s, alpha=2, out=s)
        return s

    def listed(self, raw: Tensor, a_factor: Tensor, b_factor: Tensor, out: Tensor) -> Tensor:
        """The true cosines of a block's product ``raw`` (its factors left out:
        ``product(..., factors_left=True)``) into ``out`` (``raw``'s shape), ``raw`` left as it
        is: ``raw * (a_i * b_j)``, the two float32 products :meth:`product` rounds for a factor
        per pair, so a run's lists hold the scores ``top_lists.top_k`` gives the same pairs."""
        torch.mul(a_factor[:, None], b_factor[None, :], out=out)
        return out.mul_(raw)


def listing_half(
    half: HalfProducts, query: Tensor, gallery: Tensor | RowBatches
) -> HalfProducts | None:
    """``half`` for a one-sided pass over the half matrices ``query`` and ``gallery`` that keeps
    a run's lists as it counts (``engine.listing``), whose scores must be ``top_k``'s, or None
    where they cannot be (the lists are then made by ``top_k``): dot and euclidean score a pair
    as ``top_k`` does; cosine's pass leaves out each query's factor, which the lists take
    (:attr:`HalfProducts.lists_factor`), the queries' reciprocal norms as :func:`half_products`
    gives them to ``top_k``. Not where the gallery's norms are computed as the pass reads it
    (``RowBatches.norms_as_read``): ``top_k`` computes them otherwise."""
    if not half.columns_only:
        return half
    if isinstance(gallery, RowBatches) and gallery.reads_norms:
        return None
    return replace(half, lists_factor=reciprocal_norms(_norms(query)))


def block_product(
    a: Tensor, b: Tensor, out: Tensor, half: HalfProducts | None = None,
    a_factor: Tensor | None = None, b_factor: Tensor | None = None,
    work: Tensor | None = None, factors_left: bool = False,
) -> Tensor:
    """The score block ``a @ b.T`` into ``out``: one product of the prepared matrices, or with
    ``half`` the tensor cores' product and its factors (:meth:`HalfProducts.product`;
    ``factors_left``: without cosine's factors, which the counting applies). Every pass
    computes its blocks here."""
    if half is None:
        return torch.mm(a, b.T, out=out)
    return half.product(a, b, out, a_factor, b_factor, work, factors_left)


def _norms(x: Tensor | RowBatches) -> Tensor:
    """Each row's float32 norm, ``(N,)`` (a half row upcast as it is read)."""
    if isinstance(x, RowBatches):
        return x.row_norms().view(-1)
    return torch.linalg.vector_norm(x, dim=1, dtype=torch.float32)


def _squares(x: Tensor | RowBatches) -> Tensor:
    """Each row's float32 sum of squares, ``(N,)``: summed as such, not a norm squared (the
    float32 path's extra column; a rounded square root squared would split ties of integer
    embeddings at equal distances)."""
    if isinstance(x, RowBatches):
        return x.row_squares()
    # (a chunk of rows upcast at a time: no float32 copy of a whole corpus)
    return torch.cat([part.to(torch.float32).square().sum(1) for part in x.split(_ROWS)])


#: rows upcast at once for their sums of squares
_ROWS = 1 << 16


def _checked(xs: list[Tensor | RowBatches], norms: list[Tensor], sides: list[str],
             warn_zero: bool) -> bool:
    """Whether every non-zero row's norm lies inside :data:`NORM_BOUNDS`; with ``warn_zero``
    (cosine), each side's zero rows are said by name as the float32 path says them
    (``similarity.warn_zero_rows``). One wait on a device for the counts; the rows whose norm
    is 0, where there are any, are then read themselves: a row whose squares underflow has a
    norm of 0 and non-zero entries (the rest of the matrix is not read again)."""
    low, high = NORM_BOUNDS
    read = torch.stack([
        torch.stack([(norm == 0).sum(), ((norm != 0) & ((norm < low) | (norm > high))).sum()])
        for norm in norms
    ]).tolist()
    if any(outside for _, outside in read):
        return False
    for x, norm, (zero, _) in zip(xs, norms, read, strict=True):
        if zero and bool((x[flat_nonzero(norm == 0)] != 0).any()):
            return False
    if warn_zero:
        for (zero, _), side in zip(read, sides, strict=True):
            if zero:
                warn_zero_rows(zero, side)
    return True


def half_products(
    similarity: str, a: Tensor | RowBatches | None, b: Tensor | RowBatches,
    rows_scaled: bool = True,
) -> HalfProducts | None:
    """What the half-precision matrices ``a`` (None: ``b`` against itself) and ``b`` take
    after each product, or None where a row's norm is out of :data:`NORM_BOUNDS` (cosine and
    euclidean): the ranking then keeps the float32 path. ``rows_scaled=False``: the blocks are
    read along their rows only, and cosine's rows keep their norms (:class:`HalfProducts`)."""
    if similarity == "dot":
        return HalfProducts(similarity, None, None)
    b_norm = _norms(b)
    a_norm = None if a is None else _norms(a)
    xs, norms = ([b], [b_norm]) if a is None else ([a, b], [a_norm, b_norm])
    sides = ["query and gallery"] if a is None else ["query", "gallery"]
    if not _checked(xs, norms, sides, warn_zero=similarity == "cosine"):
        return None
    if similarity == "euclidean":
        return HalfProducts(similarity, None, _squares(b))
    b_factor = reciprocal_norms(b_norm)
    a_factor = b_factor if a_norm is None else reciprocal_norms(a_norm)
    return HalfProducts(similarity, a_factor if rows_scaled else None, b_factor)


def prepare_half(
    query: Tensor | None,
    gallery: Tensor | RowBatches,
    similarity: str,
    gallery_rows: Tensor | None = None,
    rows_scaled: bool = True,
) -> tuple[Tensor | None, Tensor | RowBatches, HalfProducts] | None:
    """``similarity.prepare``'s matrices for the tensor cores: the half rows themselves (the
    gallery's ``gallery_rows`` gathered in that order; a gallery in batches, all of it, read a
    block at a time as stored) and what each block takes after its product (``rows_scaled``:
    see :func:`half_products`). None where a norm is out of bounds: the caller prepares the
    float32 matrices."""
    if _norms_as_read(query, gallery, similarity, gallery_rows, rows_scaled):
        assert query is not None and isinstance(gallery, RowBatches)
        if similarity == "cosine" and not _checked(
            [query], [_norms(query)], ["query"], warn_zero=True
        ):
            return None
        g_read = gallery.stored().norms_as_read(unit=False, factors=similarity == "cosine")
        half = HalfProducts(similarity, None, g_read.factors_as_read)
        return query.contiguous(), g_read, half
    if isinstance(gallery, RowBatches):
        g: Tensor | RowBatches = gallery.stored()
        if gallery_rows is not None:
            g = g[gallery_rows]  # (a copy of the kept rows, still half)
    elif gallery_rows is not None:
        g = gallery.index_select(0, to_device(gallery_rows, gallery.device))
    else:
        g = gallery
    same = query is gallery and gallery_rows is None
    q = None if query is None else (g if same else query)
    half = half_products(similarity, None if q is None or same else q, g, rows_scaled)
    if half is None:
        return None
    if isinstance(g, Tensor):
        g = g.contiguous()
    return (None if q is None else (g if same else q.contiguous())), g, half


def _norms_as_read(
    query: Tensor | None, gallery: Tensor | RowBatches, similarity: str,
    gallery_rows: Tensor | None, rows_scaled: bool,
) -> bool:
    """Whether the gallery's norms (cosine's factors ``1/|g_j|``) and its scan for NaN come
    from the blocks the one-sided pass reads (``RowBatches.norms_as_read``) instead of a pass
    of their own before it: every row of a gallery whose scan is put off (a corpus on disk, read
    once), the blocks read along their rows only (cosine's factor per column), or with dot.
    :func:`half_stands` then finishes them once the pass has read what it reads. Not a gallery
    in device memory: its half rows are multiplied where they lie, no block copied (a block
    read with its norms is), its norms cost a pass over that memory, and a device's reduction
    may give a row another norm in another company (``RowBatches.norms_as_read``)."""
    if not isinstance(gallery, RowBatches) or gallery_rows is not None or query is None:
        return False
    if gallery.checked or gallery.knows_norms() or not gallery.held_on_host:
        return False
    return similarity == "dot" or (similarity == "cosine" and not rows_scaled)


def half_stands(g: RowBatches, similarity: str) -> bool:
    """Whether a one-sided pass over half rows whose norms were computed as it read them
    (:func:`prepare_half` with :func:`_norms_as_read`) stands, once it has read what it reads:
    the norms finished and kept (a ValueError where a value is NaN or infinite), then, as
    :func:`half_products` checks them before a pass where they are known, every finite and, for
    cosine, inside :data:`NORM_BOUNDS` (zero rows said by name). False: the caller ranks again,
    the norms known by then (the float32 path for rows out of bounds)."""
    norm, finite, _ = g.finish_norms()
    if not finite:
        return False  # (finite values whose squares overflow: read as zeros, see norms_as_read)
    return similarity != "cosine" or _checked([g], [norm.view(-1)], ["gallery"], warn_zero=True)
