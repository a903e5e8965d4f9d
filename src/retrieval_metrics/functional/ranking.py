"""Ranking: from embeddings (or scores, or ranked lists) to a compact per-query rank table.

The :class:`RankTable` records, for every query, where its relevant items landed: for each
relevant item, how many gallery items score strictly higher (``above``) and how many score exactly
the same (``tied``, the item itself included). That is all any measure of docs/definitions.md
needs; the queries x gallery score matrix never exists in full.

How :func:`rank_embeddings` stays close to the cost of the similarity product:

* The gallery is cut into blocks of the same width and every block's scores come from one matrix
  product of the same shape, so a pair's score does not depend on which block it fell in.
* Each query's relevant scores are read from the blocks that hold its relevant items first.
  Items scoring below the query's lowest relevant score cannot move any relevant item, so each
  block is reduced to the maxima of its 64-wide segments (a fast vectorised pass) and only the
  segments whose maximum reaches the threshold are looked at item by item.
* Counting "how many items beat each relevant score" on those few segments is a batched binary
  search against the query's sorted relevant scores, accumulated into two small histograms.
* With ``depth=d`` only relevant items in the top ``d`` positions (and always the best one) need
  exact positions; the threshold then rises to the ``d``-th largest segment maximum seen so far,
  which prunes almost everything for a good model.
* A set ranked against itself has a symmetric score matrix: each pair of square blocks is one
  product whose rows serve one block's queries and whose columns serve the other's, so the pass
  computes half of the full product. :func:`rank_two_ways` does the same for two sets ranked
  against each other (image-to-text and text-to-image from one product).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.checks import all_finite
from retrieval_metrics.functional.grouped import count_in_groups, group_codes
from retrieval_metrics.functional.precision import in_full_fp32
from retrieval_metrics.functional.primitives import flat_nonzero, is_identity, masked, repeat
from retrieval_metrics.functional.relevance import (
    Relevance,
    build_relevance,
    canonical_id,
    encode_labels,
)
from retrieval_metrics.functional.table import UNBOUNDED, RankTable, concat_tables

__all__ = [
    "SIMILARITIES",
    "UNBOUNDED",
    "RankTable",
    "concat_tables",
    "nonpositive_missed",
    "positive_counts",
    "rank_embeddings",
    "rank_lists",
    "rank_relevance",
    "rank_scores",
    "rank_two_ways",
]

SIMILARITIES = ("cosine", "dot", "euclidean")
SEGMENT = 64
THETA_EVERY = 4
# Query blocks of fewer rows are padded to this many for the product: BLAS computes products of
# a few rows with other kernels (gemv for one row), whose roundings differ from those of larger
# blocks, and a score must not depend on the size of the block its query fell in.
PRODUCT_ROWS = 8
# Relative costs of the two ways of counting a block (see _blocked_ranking): per item and
# relevant score copied in the sparse way, per item and search step in the dense way.
SPARSE_OVERHEAD = 8
DENSE_OVERHEAD = 8
DEFAULT_MEMORY_BUDGET = 256 * 2**20
TINY_NORM = 2.0**-60
TABLE_CHUNK = 2**20
# rank_lists: up to this many relevant ids found in one list are located by list.index
_INDEX_HITS = 16


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------


def _check_embeddings(name: str, x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"`{name}` must be 2-D (items x dimensions), got shape {tuple(x.shape)}")
    if x.is_complex():
        raise ValueError(f"`{name}` must be real, got {x.dtype}")
    if not all_finite(x):
        raise ValueError(f"`{name}` contains NaN or infinite values")
    return x


def _score_dtype(*xs: Tensor) -> torch.dtype:
    # Half precision is scored in float32 (accumulating in half loses ranks); float64 stays.
    return torch.float64 if any(x.dtype == torch.float64 for x in xs) else torch.float32


def _unit_rows(x: Tensor) -> Tensor:
    """Rows scaled to unit length; a zero row stays zero, so its cosine with anything is 0.

    ``torch.nn.functional.normalize`` divides by max(norm, 1e-12), which leaves rows shorter
    than 1e-12 short and so changes their cosines; dividing by the norm itself keeps cosine
    independent of scale for every non-zero row.
    """
    norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    out = x / torch.where(norm > 0, norm, torch.ones_like(norm))
    # Squares of float32 entries below ~1e-19 underflow, so the norm of such a row is wrong or
    # 0; those rows are scaled up by their largest entry (in float64) before normalising.
    # (Only the short rows are looked at: a test of every entry costs as much as the scaling.)
    short = flat_nonzero(norm[:, 0] < TINY_NORM)
    if short.numel():
        rows = x.index_select(0, short)
        tiny = (rows != 0).any(1)  # zero rows stay zero
        if bool(tiny.any()):
            rows = rows[tiny].to(torch.float64)
            rows = rows / rows.abs().amax(1, keepdim=True)
            unit = rows / torch.linalg.vector_norm(rows, dim=1, keepdim=True)
            out[short[tiny]] = unit.to(x.dtype)
    return out


def _prepare(
    query: Tensor, gallery: Tensor, similarity: str, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """Turn embeddings into matrices whose product is the score (larger is better)."""
    q = query.to(dtype)
    g = gallery.to(dtype)
    if similarity == "cosine":
        q = _unit_rows(q)
        g = _unit_rows(g)
    elif similarity == "euclidean":
        # -|q - g|^2 + |q|^2 = 2 q.g - |g|^2 orders the gallery exactly as -|q - g| does, and is
        # one matrix product with one extra column.
        q = torch.cat([2 * q, -torch.ones_like(q[:, :1])], dim=1)
        g = torch.cat([g, (g * g).sum(1, keepdim=True)], dim=1)
    elif similarity != "dot":
        raise ValueError(f"`similarity` must be one of {SIMILARITIES}, got {similarity!r}")
    return q.contiguous(), g.contiguous()


def rank_embeddings(
    query: Tensor,
    gallery: Tensor | None = None,
    *,
    query_labels: Any = None,
    gallery_labels: Any = None,
    query_ids: Any = None,
    gallery_ids: Any = None,
    query_cameras: Any = None,
    gallery_cameras: Any = None,
    query_positions: Any = None,
    gallery_positions: Any = None,
    relevant_ids: Sequence[Any] | None = None,
    relevance: str = "label",
    radius: float | None = 25.0,
    ignore_label: int | None = None,
    similarity: str = "cosine",
    depth: int | None = None,
    cover_relevant: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    block_size: tuple[int, int] | None = None,
) -> RankTable:
    """Rank the gallery for every query and record where the relevant items landed.

    With ``gallery=None`` every item is a query against all the others ("same source") and never
    retrieves itself (matched by ``query_ids`` when given, else by position).

    Args:
        query, gallery: ``(Q, D)`` and ``(N, D)`` embeddings on any device; half precision is
            scored in float32, float64 in float64.
        relevance: ``"label"``, ``"radius"`` (with positions) or ``"ids"`` (with ``relevant_ids``).
        similarity: ``"cosine"`` (default), ``"dot"`` or ``"euclidean"``. The cosine of a zero
            vector with anything (a zero vector included) is 0: a zero query ties every gallery
            item, and a zero gallery item ties every item whose cosine with the query is exactly
            0. Any non-zero vector, however short, counts by its direction only.
        depth: if given, only relevant items within the top ``depth`` positions (and each query's
            best relevant item) are located exactly; the others are recorded as lying deeper. Enough
            for hit rate, precision, recall and NDCG with ``depth`` >= their cut-off.
        cover_relevant: with ``depth``, locate exactly every relevant item within the top
            max(depth, m_q) positions (R-precision, MAP@R).
        memory_budget: bytes of scratch memory the ranking may use, beyond the embeddings.
        block_size: ``(queries, gallery items)`` per block, overriding the choice made from
            ``memory_budget`` (the gallery block must be a multiple of 64). Results do not depend
            on it.

    Returns:
        A :class:`RankTable`, queries in input order.

    Example:
        >>> import torch
        >>> emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> table = rank_embeddings(emb, query_labels=torch.tensor([0, 0, 1, 1]))
        >>> table.above.tolist(), table.num_relevant.tolist()
        ([0, 0, 0, 0], [1, 1, 1, 1])
    """
    same_source = gallery is None
    query, gallery, relevance_sets, q_labels, g_labels = _embedding_relevance(
        query,
        gallery,
        query_labels=query_labels,
        gallery_labels=gallery_labels,
        query_ids=query_ids,
        gallery_ids=gallery_ids,
        query_cameras=query_cameras,
        gallery_cameras=gallery_cameras,
        query_positions=query_positions,
        gallery_positions=gallery_positions,
        relevant_ids=relevant_ids,
        relevance=relevance,
        radius=radius,
        ignore_label=ignore_label,
        similarity=similarity,
        depth=depth,
        memory_budget=memory_budget,
    )
    table = rank_relevance(
        query,
        gallery,
        relevance_sets,
        similarity=similarity,
        depth=depth,
        cover_relevant=cover_relevant,
        memory_budget=memory_budget,
        block_size=block_size,
        query_order_key=q_labels,
        gallery_order_key=None if g_labels is None else g_labels[relevance_sets.gallery_index],
        same_source=same_source,
    )
    if q_labels is not None:
        table = replace(table, query_class=q_labels)
    return table


def _embedding_relevance(
    query: Tensor,
    gallery: Tensor | None,
    *,
    query_labels: Any,
    gallery_labels: Any,
    query_ids: Any,
    gallery_ids: Any,
    query_cameras: Any,
    gallery_cameras: Any,
    query_positions: Any,
    gallery_positions: Any,
    relevant_ids: Sequence[Any] | None,
    relevance: str,
    radius: float | None,
    ignore_label: int | None,
    similarity: str,
    depth: int | None,
    memory_budget: int,
) -> tuple[Tensor, Tensor, Relevance, Tensor | None, Tensor | None]:
    """Validate the inputs of :func:`rank_embeddings` and decide relevance and exclusions.

    Returns the embeddings, the relevance sets and the int64 query and gallery labels (or None).
    """
    query = _check_embeddings("query", query)
    same_source = gallery is None
    if same_source:
        gallery = query
        gallery_labels = query_labels if gallery_labels is None else gallery_labels
        gallery_ids = query_ids if gallery_ids is None else gallery_ids
        gallery_cameras = query_cameras if gallery_cameras is None else gallery_cameras
        gallery_positions = query_positions if gallery_positions is None else gallery_positions
    else:
        gallery = _check_embeddings("gallery", gallery)
        if gallery.shape[1] != query.shape[1]:
            raise ValueError(
                f"`query` and `gallery` must have the same dimension, got {query.shape[1]} and "
                f"{gallery.shape[1]}"
            )
    num_q, num_g = query.shape[0], gallery.shape[0]
    if similarity not in SIMILARITIES:
        raise ValueError(f"`similarity` must be one of {SIMILARITIES}, got {similarity!r}")
    if depth is not None and (not isinstance(depth, int) or depth < 1):
        raise ValueError(f"`depth` must be a positive int or None, got {depth!r}")
    if not isinstance(memory_budget, int) or memory_budget < 2**16:
        raise ValueError(
            f"`memory_budget` must be an int of at least 65536 bytes, got {memory_budget!r}"
        )

    def per_item(name: str, value: Any, n: int) -> Tensor | None:
        if value is None:
            return None
        t = value if isinstance(value, Tensor) else torch.as_tensor(value)
        if t.shape[0] != n:
            raise ValueError(f"`{name}` must have {n} entries (one per item), got {t.shape[0]}")
        return t.cpu()

    q_labels = g_labels = None
    if query_labels is not None or gallery_labels is not None:
        if query_labels is None or gallery_labels is None:
            raise ValueError("labels must be given for both queries and gallery items")
        q_labels, g_labels = encode_labels(
            query_labels, gallery_labels, names=("query_labels", "gallery_labels")
        )
        # the relevance sets are built on the host: keep the host copies per_item returns
        q_labels = per_item("query_labels", q_labels, num_q)
        g_labels = per_item("gallery_labels", g_labels, num_g)
    q_ids = per_item("query_ids", query_ids, num_q)
    g_ids = per_item("gallery_ids", gallery_ids, num_g)
    if q_ids is not None:
        q_ids = encode_labels(q_ids, names=("query_ids",))[0]
    if g_ids is not None:
        g_ids = encode_labels(g_ids, names=("gallery_ids",))[0]
    relevance_sets = build_relevance(
        num_q,
        num_g,
        relevance=relevance,
        query_labels=q_labels,
        gallery_labels=g_labels,
        query_positions=per_item("query_positions", query_positions, num_q),
        gallery_positions=per_item("gallery_positions", gallery_positions, num_g),
        radius=radius,
        relevant_ids=relevant_ids,
        query_ids=q_ids,
        gallery_ids=g_ids,
        same_source=same_source,
        query_cameras=per_item("query_cameras", query_cameras, num_q),
        gallery_cameras=per_item("gallery_cameras", gallery_cameras, num_g),
        ignore_label=ignore_label,
    )
    return query, gallery, relevance_sets, q_labels, g_labels


def _per_pair_bytes(elem: int) -> int:
    """Scratch per (query, relevant item) pair of a query block, all live at once at worst.

    About eight score-sized copies (relevant scores, sorted, masked, the depth candidates) and
    sixteen int64 (sort permutation, the two histograms, above and tied in sorted and in input
    order, the pair's row, column, position, gallery index and block, and their transients).
    """
    return 8 * elem + 16 * 8


def _block_sizes(
    num_q: int, num_g: int, dim: int, max_relevant: int, elem: int, memory_budget: int
) -> tuple[int, int]:
    """Query and gallery block sizes whose scratch fits in ``memory_budget``."""
    # A gallery block of 2048 keeps the score block in cache for typical query blocks; the query
    # block is the largest power of two (up to 1024) whose scratch fits.
    block_g = max(SEGMENT, min(2048, -(-num_g // SEGMENT) * SEGMENT))
    block_q = 1024
    while block_q > 8:
        # Score block (x2 for a cached relevant block and candidate copies), relevant scores,
        # two int64 histograms and the padded gallery block.
        scratch = (
            3 * block_q * block_g * elem
            + block_q * (max_relevant + 1) * (elem + 16 + 8)
            + block_g * (dim + 1) * elem
        )
        if scratch <= memory_budget // 2:
            break
        block_q //= 2
    while block_g > SEGMENT and 3 * block_q * block_g * elem > memory_budget // 2:
        # Whole segments only: a gallery of 700 starts at 704, and 352 would split one.
        block_g = max(SEGMENT, block_g // 2 // SEGMENT * SEGMENT)
    # Thousands of relevant items per query: the per-pair scratch, counted in full, decides.
    # (Only then: the query block sets how scores round, so ordinary data keeps its blocks.)
    while block_q > 1 and block_q * (max_relevant + 1) * _per_pair_bytes(elem) > memory_budget // 2:
        block_q //= 2
    if max_relevant > block_g // 4:
        # Each gallery block costs every row a search of its relevant scores in the block's
        # sorted scores: with thousands of relevant items per query, fewer and wider gallery
        # blocks cost less (the query blocks are then short, so the score block stays small).
        wide = -(-num_g // SEGMENT) * SEGMENT
        while wide > block_g and 3 * min(block_q, num_q) * wide * elem > memory_budget // 2:
            wide = max(block_g, wide // 2 // SEGMENT * SEGMENT)
        block_g = max(block_g, wide)
    return max(1, min(block_q, num_q)), block_g


def rank_relevance(
    query: Tensor,
    gallery: Tensor,
    relevance_sets: Relevance,
    *,
    similarity: str = "cosine",
    depth: int | None = None,
    cover_relevant: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    block_size: tuple[int, int] | None = None,
    query_order_key: Tensor | None = None,
    gallery_order_key: Tensor | None = None,
    same_source: bool = False,
) -> RankTable:
    """Blocked ranking of ``query`` against the kept gallery of ``relevance_sets``.

    ``query_order_key`` and ``gallery_order_key`` (e.g. labels; the latter aligned with the kept
    gallery) only change the order in which items are processed, so that each query block's
    relevant items sit in one or two gallery blocks; results come back in input order.
    ``same_source``: ``gallery`` holds the queries themselves (the caller says so), so the score
    matrix is symmetric and each block pair may serve the queries of both of its sides.
    """
    return _blocked_ranking(
        query,
        gallery,
        relevance_sets,
        similarity=similarity,
        depth=depth,
        cover_relevant=cover_relevant,
        memory_budget=memory_budget,
        block_size=block_size,
        query_order_key=query_order_key,
        gallery_order_key=gallery_order_key,
        symmetric=same_source,
    )


def relevant_scores(
    query: Tensor,
    gallery: Tensor,
    relevance_sets: Relevance,
    *,
    similarity: str = "cosine",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    block_size: tuple[int, int],
    order_keys: tuple[Tensor | None, Tensor | None] = (None, None),
) -> Tensor:
    """Scores of every relevant pair, aligned with ``relevance_sets.relevant_index``.

    Computed with the same blocked products as :func:`count_above`, so that the two agree on
    ties when given the same ``block_size`` (the sharded-gallery mode relies on it).
    """
    return _blocked_ranking(
        query,
        gallery,
        relevance_sets,
        similarity=similarity,
        memory_budget=memory_budget,
        block_size=block_size,
        mode="scores",
        query_order_key=order_keys[0],
        gallery_order_key=order_keys[1],
    )


def count_above(
    query: Tensor,
    gallery: Tensor,
    relevance_sets: Relevance,
    thresholds_ptr: Tensor,
    thresholds: Tensor,
    *,
    similarity: str = "cosine",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    block_size: tuple[int, int],
    order_keys: tuple[Tensor | None, Tensor | None] = (None, None),
) -> tuple[Tensor, Tensor]:
    """For each score ``thresholds[i]`` of query q (CSR ``thresholds_ptr``), count the kept,
    non-excluded gallery items scoring strictly above it and exactly equal to it.

    This is the counting half of the ranking, for scores that come from elsewhere (another
    process's gallery shard). Returns ``(above, tied)`` aligned with ``thresholds``.
    """
    return _blocked_ranking(
        query,
        gallery,
        relevance_sets,
        similarity=similarity,
        memory_budget=memory_budget,
        block_size=block_size,
        mode="count",
        external=(thresholds_ptr, thresholds),
        query_order_key=order_keys[0],
        gallery_order_key=order_keys[1],
    )


def _blocked_ranking(
    query: Tensor,
    gallery: Tensor,
    relevance_sets: Relevance,
    *,
    similarity: str = "cosine",
    depth: int | None = None,
    cover_relevant: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    block_size: tuple[int, int] | None = None,
    query_order_key: Tensor | None = None,
    gallery_order_key: Tensor | None = None,
    mode: str = "table",
    external: tuple[Tensor, Tensor] | None = None,
    symmetric: bool = False,
) -> Any:
    device = query.device
    dtype = _score_dtype(query, gallery)
    elem = torch.finfo(dtype).bits // 8
    # Same source (a set ranked against itself): the score matrix is symmetric, so each pair of
    # blocks can serve the queries of both (see _two_sided_pass).
    if symmetric and gallery.shape != query.shape:
        raise ValueError("a same-source ranking ranks the queries against themselves")
    symmetric = (
        symmetric
        and mode == "table"
        and _one_product(similarity, block_size, relevance_sets, gallery.shape[0])
        and _same_key(query_order_key, gallery_order_key)
    )
    kept = relevance_sets.gallery_index
    if kept.numel() != gallery.shape[0]:
        gallery = gallery[kept.to(device)]
    q_mat, g_mat = _prepare(query, gallery, similarity, dtype)
    num_q, num_g = q_mat.shape[0], g_mat.shape[0]
    side = _Side.make(
        relevance_sets,
        num_q,
        num_g,
        query_order_key,
        gallery_order_key,
        device=device,
        dtype=dtype,
        depth=depth,
        cover_relevant=cover_relevant,
        memory_budget=memory_budget,
        external=external,
        mode=mode,
    )
    if side.g_perm is not None:
        g_mat = g_mat[side.g_perm.to(device)]
    if block_size is None:
        block_q, block_g = _block_sizes(
            num_q, num_g, q_mat.shape[1], side.max_relevant, elem, memory_budget
        )
    else:
        block_q, block_g = _checked_block_size(block_size)
    if symmetric and num_q:
        block = block_g if block_size is not None else _square_block(num_g, elem, memory_budget)
        state = side.state_bytes(block, elem)
        # every query block's state lives to the end: only when they are a fraction of the budget
        symmetric = state <= memory_budget // 4
        if symmetric:
            room = _cache_room(memory_budget - 2 * state, block, dtype)
            _two_sided_pass(side.at(block), None, g_mat, g_mat, room)
    if not symmetric:
        _one_sided_pass(side.at(block_g), q_mat, g_mat, block_q, mode)
    return side.result(relevance_sets)


def rank_two_ways(
    a: Tensor,
    b: Tensor,
    *,
    a_labels: Any,
    b_labels: Any,
    similarity: str = "cosine",
    depth: int | None = None,
    cover_relevant: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    block_size: int | None = None,
) -> tuple[RankTable, RankTable]:
    """Rank ``b`` for every row of ``a`` and ``a`` for every row of ``b`` (relevant: same label).

    The tables equal ``rank_embeddings(a, b, ...)`` and ``rank_embeddings(b, a, ...)``, but both
    come from one pass over the ``a x b`` products: each block of scores is counted along its
    rows for the first table and along its columns for the second (image-to-text and
    text-to-image retrieval from one product). ``block_size`` (a multiple of 64) sets the square
    blocks; results do not depend on it.

    Example:
        >>> import torch
        >>> images = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> captions = torch.tensor([[0.9, 0.1], [0.2, 0.8], [1.0, 0.1]])
        >>> i2t, t2i = rank_two_ways(
        ...     images, captions, a_labels=torch.tensor([0, 1]), b_labels=torch.tensor([0, 1, 0])
        ... )
        >>> i2t.above.tolist(), t2i.above.tolist()
        ([0, 1, 0], [0, 0, 0])
    """
    common = dict(
        query_ids=None,
        gallery_ids=None,
        query_cameras=None,
        gallery_cameras=None,
        query_positions=None,
        gallery_positions=None,
        relevant_ids=None,
        relevance="label",
        radius=None,
        ignore_label=None,
        similarity=similarity,
        depth=depth,
        memory_budget=memory_budget,
    )
    a, b, rel_ab, a_key, b_key = _embedding_relevance(
        a, b, query_labels=a_labels, gallery_labels=b_labels, **common
    )
    _, _, rel_ba, _, _ = _embedding_relevance(
        b, a, query_labels=b_labels, gallery_labels=a_labels, **common
    )
    squares = None if block_size is None else (block_size, block_size)
    options = dict(
        similarity=similarity,
        depth=depth,
        cover_relevant=cover_relevant,
        memory_budget=memory_budget,
        block_size=squares,
    )
    if squares is not None:
        _checked_block_size(squares)
    device = a.device
    dtype = _score_dtype(a, b)
    elem = torch.finfo(dtype).bits // 8
    sides = []
    if (
        a.shape[0]
        and b.shape[0]
        and _one_product(similarity, squares, rel_ab, b.shape[0])
        and _one_product(similarity, squares, rel_ba, a.shape[0])
    ):
        a_mat, b_mat = _prepare(a, b.to(device), similarity, dtype)
        for rel, keys, num in (
            (rel_ab, (a_key, b_key), a_mat.shape[0]),
            (rel_ba, (b_key, a_key), b_mat.shape[0]),
        ):
            sides.append(
                _Side.make(
                    rel,
                    num,
                    a_mat.shape[0] + b_mat.shape[0] - num,
                    *keys,
                    device=device,
                    dtype=dtype,
                    depth=depth,
                    cover_relevant=cover_relevant,
                    memory_budget=memory_budget,
                )
            )
        if block_size is None:
            block = _square_block(max(a_mat.shape[0], b_mat.shape[0]), elem, memory_budget)
            # Each block of one side needs the relevant scores of many pairs before it counts
            # its first: half-size blocks when that keeps every such product for its counting.
            half = block // 2 // SEGMENT * SEGMENT
            if (
                half >= 512
                and _pairs_with_relevant(sides, block) > _cache_room(memory_budget, block, dtype)
                and _pairs_with_relevant(sides, half) <= _cache_room(memory_budget, half, dtype)
            ):
                block = half
        else:
            block = block_size
        state = sum(s.state_bytes(block, elem) for s in sides)
        if state <= memory_budget // 4:
            a_mat = a_mat[sides[1].g_perm.to(device)] if sides[1].g_perm is not None else a_mat
            b_mat = b_mat[sides[0].g_perm.to(device)] if sides[0].g_perm is not None else b_mat
            room = _cache_room(memory_budget - 2 * state, block, dtype)
            _two_sided_pass(sides[0].at(block), sides[1].at(block), a_mat, b_mat, room)
            return sides[0].result(rel_ab), sides[1].result(rel_ba)
    # Euclidean scores (not one product for both directions), or states too large: two passes.
    return (
        rank_relevance(a, b, rel_ab, query_order_key=a_key, gallery_order_key=b_key, **options),
        rank_relevance(b, a, rel_ba, query_order_key=b_key, gallery_order_key=a_key, **options),
    )


def _one_product(
    similarity: str, block_size: tuple[int, int] | None, rel: Relevance, num_gallery: int
) -> bool:
    """Whether one score block can serve both of its sides: a dot product of the same matrices
    (euclidean scores 2 q.g - |g|^2 differ by side), square blocks, every gallery item kept."""
    return (
        similarity in ("cosine", "dot")
        and (block_size is None or block_size[0] == block_size[1])
        and rel.gallery_index.numel() == num_gallery
    )


def _same_key(first: Tensor | None, second: Tensor | None) -> bool:
    if first is None or second is None:
        return first is None and second is None
    return first is second or torch.equal(first.cpu(), second.cpu())


def _checked_block_size(block_size: tuple[int, int]) -> tuple[int, int]:
    block_q, block_g = block_size
    if block_q < 1 or block_g < SEGMENT or block_g % SEGMENT:
        raise ValueError(
            f"`block_size` must be (queries >= 1, gallery items a multiple of {SEGMENT}), "
            f"got {block_size!r}"
        )
    return block_q, block_g


@dataclass
class _Side:
    """One direction of a ranking: its relevance in processing order and its outputs.

    Queries are processed in ``order`` (input positions); the gallery in the order ``g_perm``
    (None: input order), and ``rel_index``/``ex_index`` are positions in that order.
    """

    rel_ptr: Tensor
    rel_index: Tensor
    ex_ptr: Tensor
    ex_index: Tensor
    order: Tensor
    g_perm: Tensor | None
    num_g: int
    outputs: tuple[Tensor, ...]
    options: dict[str, Any]
    mode: str

    @staticmethod
    def make(
        relevance_sets: Relevance,
        num_q: int,
        num_g: int,
        query_order_key: Tensor | None,
        gallery_order_key: Tensor | None,
        *,
        external: tuple[Tensor, Tensor] | None = None,
        mode: str = "table",
        **options: Any,
    ) -> _Side:
        rel_ptr = relevance_sets.relevant_ptr
        rel_index = relevance_sets.relevant_index
        ext_scores = None
        if external is not None:
            # counting against given scores: they play the part of the relevant items
            rel_ptr = external[0].cpu()
            rel_index = torch.zeros(int(rel_ptr[-1]), dtype=torch.int64)
            ext_scores = external[1].to(device=options["device"], dtype=options["dtype"])
        ex_index = relevance_sets.excluded_index
        g_perm = None
        if gallery_order_key is not None and num_g:
            # Counts do not depend on gallery order; grouping by label puts each query block's
            # relevant items in one or two gallery blocks.
            g_perm = torch.sort(gallery_order_key.cpu(), stable=True).indices
            if is_identity(g_perm, num_g):
                g_perm = None  # already grouped (e.g. captions listed by image): no copy
        if g_perm is not None:
            new_position = torch.empty_like(g_perm)
            new_position[g_perm] = torch.arange(num_g)
            if external is None:
                rel_index = new_position[rel_index]
            ex_index = new_position[ex_index]
        if query_order_key is not None and num_q:
            order = torch.sort(query_order_key.cpu(), stable=True).indices
        else:
            order = torch.arange(num_q)
        # One entry per relevant pair: with thousands of relevant items per query these are the
        # largest allocations of the ranking, so each mode allocates only what it returns.
        num_pairs = int(rel_ptr[-1]) if num_q else 0
        if mode == "scores":
            outputs: tuple[Tensor, ...] = (torch.zeros(num_pairs, dtype=options["dtype"]),)
        else:
            above = torch.zeros(num_pairs, dtype=torch.int64)
            outputs = (above, torch.zeros_like(above), torch.ones_like(above, dtype=torch.bool))
        return _Side(
            rel_ptr=rel_ptr,
            rel_index=rel_index,
            ex_ptr=relevance_sets.excluded_ptr,
            ex_index=ex_index,
            order=order,
            g_perm=g_perm,
            num_g=num_g,
            outputs=outputs,
            # binary tables want each query's items by decreasing score: written so, they need
            # no sort afterwards (graded ones also order tied items by grade: CSR order + sort)
            options=dict(
                options,
                ext_scores=ext_scores,
                by_score=mode == "table" and relevance_sets.query_grades is None,
            ),
            mode=mode,
        )

    @property
    def max_relevant(self) -> int:
        return int(self.rel_ptr.diff().max()) if self.order.numel() else 0

    def state_bytes(self, block: int, elem: int) -> int:
        """Scratch of every query block's counting state at once (the symmetric pass keeps them
        all), rows padded to the block's longest."""
        counts = self.rel_ptr.diff()[self.order]
        n = counts.numel()
        padded = torch.zeros(-(-n // block) * block, dtype=torch.int64)
        padded[:n] = counts
        widths = padded.view(-1, block).amax(1) + 1
        # per (row, relevant slot): sorted scores and the depth candidates, the sort permutation
        # and two histogram bins; per relevant pair: its row, column, position, block, offset,
        # segment and the transients of the last step
        return int(widths.sum()) * block * (2 * elem + 3 * 8) + int(counts.sum()) * 8 * 8

    def at(self, block_g: int) -> _Pass:
        return _Pass(
            num_g=self.num_g,
            block_g=block_g,
            rel_ptr=self.rel_ptr,
            rel_index=self.rel_index,
            ex_ptr=self.ex_ptr,
            ex_index=self.ex_index,
            order=self.order,
            outputs=self.outputs,
            **self.options,
        )

    def result(self, relevance_sets: Relevance) -> Any:
        if self.mode == "scores":
            return self.outputs[0]
        if self.mode == "count":
            return self.outputs[0], self.outputs[1]
        num_relevant = self.rel_ptr.diff()
        gallery_size = self.num_g - self.ex_ptr.diff()
        depth, num_q = self.options["depth"], self.order.numel()
        if depth is None:
            depth_out = gallery_size.clone()
        elif self.options["cover_relevant"]:
            depth_out = num_relevant.clamp_min(depth)
        else:
            depth_out = torch.full((num_q,), depth, dtype=torch.int64)
        return _table_from_items(
            self.rel_ptr,
            *self.outputs,
            relevance_sets.query_grades,
            num_relevant,
            gallery_size,
            depth_out,
            by_score=self.options["by_score"],
        )


def _square_block(num: int, elem: int, memory_budget: int) -> int:
    """The block of the symmetric pass: a few score blocks of ``block x block`` fit the budget."""
    block = max(SEGMENT, min(2048, -(-num // SEGMENT) * SEGMENT))
    while block > SEGMENT and 4 * block * block * elem > memory_budget // 2:
        block = max(SEGMENT, block // 2 // SEGMENT * SEGMENT)
    return block


@dataclass
class _Pass:
    """What every query block of one ranking shares: the gallery's layout and the options.

    ``rel_index`` and ``ex_index`` are gallery positions in processing order; ``rel_ptr`` and
    ``ex_ptr`` are indexed by the query's input position; queries are processed in ``order``.
    Query blocks write their results into ``outputs`` (see :meth:`_QueryBlock.finish`): in the
    CSR order of the relevant items, or with ``by_score`` each query's by decreasing score.
    """

    device: torch.device
    dtype: torch.dtype
    num_g: int
    block_g: int
    rel_ptr: Tensor
    rel_index: Tensor
    ex_ptr: Tensor
    ex_index: Tensor
    order: Tensor
    outputs: tuple[Tensor, ...]
    depth: int | None
    cover_relevant: bool
    memory_budget: int
    ext_scores: Tensor | None = None
    by_score: bool = False
    neg_inf: Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.neg_inf = torch.tensor(float("-inf"), dtype=self.dtype, device=self.device)

    @property
    def num_blocks_g(self) -> int:
        return -(-self.num_g // self.block_g) if self.num_g else 0


def _csr_rows(ptr: Tensor, rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The entries of CSR rows ``rows``: (row within ``rows``, column in it, position in CSR)."""
    start, stop = ptr[rows], ptr[rows + 1]
    counts = stop - start
    row = repeat(torch.arange(rows.numel()), counts)
    local_ptr = torch.zeros(rows.numel() + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=local_ptr[1:])
    col = torch.arange(int(local_ptr[-1])) - local_ptr[:-1].index_select(0, row)
    return row, col, col + start.index_select(0, row)


class _QueryBlock:
    """One block of queries: its relevant scores, threshold and histograms across the gallery.

    The ranking of a block goes through these steps, whatever the order of the gallery blocks:
    :meth:`read_relevant` on the blocks that hold relevant items (and :meth:`seed` the depth
    threshold with any block read early), :meth:`start_counting`, :meth:`count` every gallery
    block once, :meth:`finish`. Score blocks ``s`` are ``(rows, block_g)``, excluded pairs
    already at -inf (:meth:`mask_excluded`).
    """

    def __init__(self, p: _Pass, q_rows: Tensor) -> None:
        self.p = p
        self.nb = nb = q_rows.numel()
        device = p.device
        self.r_row, self.r_col, self.r_pos = _csr_rows(p.rel_ptr, q_rows)
        self.r_counts = p.rel_ptr[q_rows + 1] - p.rel_ptr[q_rows]
        r_gal = p.rel_index.index_select(0, self.r_pos)
        if p.num_blocks_g <= 1:
            # one gallery block (many relevant items per query widen it): nothing to group
            self.r_block = torch.zeros_like(r_gal)
            self.r_local = r_gal
        else:
            self.r_block = _floor_div(r_gal, p.block_g)
            self.r_local = r_gal - self.r_block * p.block_g
        self.block_order, self.block_bounds = _by_block(self.r_block, p.num_blocks_g)
        # Excluded pairs of this block, by gallery block.
        e_row, _, e_pos = _csr_rows(p.ex_ptr, q_rows)
        e_gal = p.ex_index[e_pos]
        e_block = e_gal // p.block_g
        e_order = torch.argsort(e_block, stable=True)
        self.e_row, self.e_gal = e_row[e_order].to(device), e_gal[e_order]
        self.e_bounds = torch.searchsorted(e_block[e_order], torch.arange(p.num_blocks_g + 1))
        m_blk = int(self.r_counts.max()) if nb else 0
        self.rel_scores = torch.full(
            (nb, max(m_blk, 1)), float("inf"), dtype=p.dtype, device=device
        )
        # flat positions in rel_scores: one-dimensional index_select and scatter_ are many times
        # cheaper than indexing with a (row, column) pair, and there is one per relevant pair
        self.r_flat = (self.r_row * self.rel_scores.shape[1] + self.r_col).to(device)
        # Every row as long as the longest (classes of equal size): then r_flat is 0, 1, 2, ...
        # and reading through it is a copy that can be skipped.
        self.dense = self.r_flat.numel() == self.rel_scores.numel()
        if p.ext_scores is not None:
            values = p.ext_scores.index_select(0, self.r_pos.to(device))
            if self.dense:
                self.rel_scores.view(-1).copy_(values)
            else:
                self.rel_scores.view(-1).scatter_(0, self.r_flat, values)
        if p.depth is not None:
            # Where each relevant item lies, by block and segment, to mask it from the maxima.
            seg_order = torch.argsort(self.r_block, stable=True)
            self.seg_rows = self.r_row[seg_order].to(device)
            self.seg_cols = (self.r_local // SEGMENT)[seg_order].to(device)
            self.seg_bounds = torch.searchsorted(
                self.r_block[seg_order], torch.arange(p.num_blocks_g + 1)
            )
        self.pending: list[Tensor] = []

    def relevant_blocks(self) -> list[int]:
        if self.p.ext_scores is not None:
            return []
        # a count per block, not a sort of every pair (torch.unique)
        counts = torch.bincount(self.r_block, minlength=self.p.num_blocks_g)
        return flat_nonzero(counts).tolist()

    def has_excluded(self, b: int) -> bool:
        return int(self.e_bounds[b + 1]) > int(self.e_bounds[b])

    def mask_excluded(self, s: Tensor, b: int) -> None:
        lo, hi = int(self.e_bounds[b]), int(self.e_bounds[b + 1])
        if hi > lo:
            local = (self.e_gal[lo:hi] - b * self.p.block_g).to(self.p.device)
            s[self.e_row[lo:hi], local] = self.p.neg_inf

    def read_relevant(self, s: Tensor, b: int) -> None:
        device = self.p.device
        if s.is_contiguous():
            pairs = _pairs_in_block(self.block_order, self.block_bounds, b)
            if pairs.numel():
                at = self.r_row.index_select(0, pairs) * s.shape[1]
                at += self.r_local.index_select(0, pairs)
                pairs = pairs.to(device)
                self.rel_scores.view(-1).scatter_(
                    0,
                    pairs if self.dense else self.r_flat.index_select(0, pairs),
                    s.reshape(-1).index_select(0, at.to(device)),
                )
            return
        sel = self.r_block == b
        if bool(sel.any()):
            rows = self.r_row[sel].to(device)
            self.rel_scores[rows, self.r_col[sel].to(device)] = s[
                rows, self.r_local[sel].to(device)
            ]

    def relevant_values(self) -> Tensor:
        return self._in_csr_order(self.rel_scores).cpu()

    def _in_csr_order(self, per_row: Tensor) -> Tensor:
        """The entries of a (rows x longest) array at the block's relevant pairs, in CSR order."""
        flat = per_row.reshape(-1)
        return flat if self.dense else flat.index_select(0, self.r_flat.to(flat.device))

    def _without_relevant(self, seg_max: Tensor, b: int) -> Tensor:
        """Segment maxima of block ``b``, -inf where a segment holds a relevant item."""
        lo, hi = int(self.seg_bounds[b]), int(self.seg_bounds[b + 1])
        if hi == lo:
            return seg_max
        masked = seg_max.clone()
        masked[self.seg_rows[lo:hi], self.seg_cols[lo:hi]] = self.p.neg_inf
        return masked

    def seed(self, seg_max: Tensor, b: int) -> None:
        """Let block ``b``, read before counting starts, raise the first depth threshold."""
        if self.p.depth is not None:
            self.pending.append(self._without_relevant(seg_max, b))

    def start_counting(self) -> None:
        p, nb = self.p, self.nb
        device, dtype = p.device, p.dtype
        neg_inf = p.neg_inf
        # Items never beat anything below the lowest relevant score; -0.0 and 0.0 must tie.
        self.rel_scores.add_(0.0)
        # +inf padding last; the permutation only to write back in CSR order
        self.rel_sorted, self.rel_perm = _sort_rows(self.rel_scores, with_perm=not p.by_score)
        del self.rel_scores
        rel_sorted = self.rel_sorted
        self.has_rel = self.r_counts.to(device) > 0
        is_finite = rel_sorted.isfinite()
        self.num_finite = is_finite.sum(1, keepdim=True)
        finite = torch.where(is_finite, rel_sorted, neg_inf)
        del is_finite
        self.best = finite.max(1).values
        self.lowest = rel_sorted[:, 0]
        self.threshold = torch.where(
            self.has_rel, self.lowest, torch.full_like(self.lowest, float("inf"))
        )
        if p.depth is not None:
            r_counts = self.r_counts
            block_depth = (
                r_counts.clamp_min(p.depth)
                if p.cover_relevant
                else torch.full_like(r_counts, p.depth)
            )
            self.top_width = int(block_depth.max()) if nb else p.depth
            self.depth_col = (block_depth - 1).to(device)[:, None]
            # A lower bound of each row's depth-th best score, from distinct items: the relevant
            # scores themselves, and the maxima of the segments that hold no relevant item.
            pad = torch.full((nb, self.top_width), float("-inf"), dtype=dtype, device=device)
            self.top_seg = torch.cat([pad, finite], 1)
        self._check_raising()
        self.theta_from_blocks = False
        self.width = rel_sorted.shape[1] + 1
        self.hist_lt = torch.zeros(nb * self.width, dtype=torch.int64, device=device)
        self.hist_le = torch.zeros(nb * self.width, dtype=torch.int64, device=device)

    def _check_raising(self) -> None:
        """Whether the threshold can still rise: it never passes a row's best relevant score, so
        rows with one relevant item (text-to-image), or already there, need no segment maxima."""
        self.raising = self.p.depth is not None and bool(
            (self.has_rel & (self.threshold < self.best)).any()
        )
        if not self.raising:
            self.pending = []

    def _raise_threshold(self) -> None:
        # The threshold may lag behind (any lower bound of the depth-th best score is correct),
        # so the segment maxima are merged every few blocks only.
        if self.pending and (len(self.pending) >= THETA_EVERY or not self.theta_from_blocks):
            self.theta_from_blocks = True
            merged = torch.cat([self.top_seg, *_columnwise_max(self.pending)], 1)
            self.top_seg = merged.topk(self.top_width, dim=1).values
            self.pending = []
            theta = self.top_seg.gather(1, self.depth_col).squeeze(1)
            self.threshold = torch.where(
                self.has_rel,
                torch.minimum(self.best, torch.maximum(self.lowest, theta)),
                self.threshold,
            )
            self._check_raising()

    def count(
        self,
        s: Tensor,
        seg_max: Tensor,
        b: int,
        seeded: bool = False,
        segment_values: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        """Add gallery block ``b`` (scores ``s``, segment maxima ``seg_max``) to the histograms.

        ``s`` may be a view that is not row-major (the transposed block of the symmetric pass);
        then ``segment_values`` reads the scores of flat segment indices for the sparse count.
        """
        if self.raising:
            if not seeded:
                self.seed(seg_max, b)
            self._raise_threshold()
        candidates = flat_nonzero((seg_max >= self.threshold[:, None]).reshape(-1))
        if candidates.numel() == 0:
            return
        nb, width = self.nb, self.width
        block_g = s.shape[1]
        # Copying each surviving item's row of relevant scores costs about `width` per item;
        # searching the whole block costs about log2(width) per item of the block. Weak
        # models, ties and large classes let nearly every item through: search the block.
        if candidates.numel() * SEGMENT * (width + SPARSE_OVERHEAD) > nb * block_g * (
            width.bit_length() + DENSE_OVERHEAD
        ):
            dense = s if s.is_contiguous() else s.contiguous()
            _count_block(
                dense, self.rel_sorted, self.hist_lt, self.hist_le, self.p.memory_budget,
                self.num_finite,
            )
        else:
            _count_candidates(
                s,
                candidates,
                self.threshold,
                self.rel_sorted,
                self.hist_lt,
                self.hist_le,
                self.p.memory_budget,
                segment_values,
            )

    def finish(self) -> None:
        """Write above, tied and listed of every relevant pair into the outputs (CSR order)."""
        nb, width = self.nb, self.width
        hist_le = self.hist_le
        hist_le += self.hist_lt
        # above of the j-th smallest relevant score = items with "count below" > j.
        # As totals minus prefix sums, in place: these are (rows x relevant items) each.
        prefix_lt = self.hist_lt.view(nb, width).cumsum_(1)
        prefix_le = hist_le.view(nb, width).cumsum_(1)
        above_sorted = prefix_lt[:, -1:] - prefix_lt[:, :-1]
        tied_sorted = (prefix_le[:, -1:] - prefix_le[:, :-1]).sub_(above_sorted)
        del self.hist_lt, self.hist_le, prefix_lt, prefix_le, hist_le
        listed_sorted = self.rel_sorted >= self.threshold[:, None]
        if self.p.by_score:
            # The j-th smallest of a row's m relevant scores goes to place m - 1 - j of its query
            # (each row's m scores sort first: the padding is +inf). The flat positions of
            # (row, j < m) are those of the CSR entries (row, column j): r_flat.
            dest = self.r_pos + (self.r_counts.index_select(0, self.r_row) - 1 - 2 * self.r_col)
            # without a depth every relevant item is listed, as the outputs start
            written = 3 if self.p.depth is not None else 2
            for out, sorted_values in zip(
                self.p.outputs[:written], (above_sorted, tied_sorted, listed_sorted), strict=False
            ):
                out.index_copy_(0, dest, self._in_csr_order(sorted_values).cpu())
            return
        # Back from sorted order to the CSR order of the relevant items.
        for out, sorted_values in zip(
            self.p.outputs, (above_sorted, tied_sorted, listed_sorted), strict=True
        ):
            unsorted = torch.empty_like(sorted_values)
            unsorted.scatter_(1, self.rel_perm, sorted_values)
            out.scatter_(0, self.r_pos, self._in_csr_order(unsorted).cpu())


def _segment_maxima(s: Tensor) -> Tensor:
    return s.view(s.shape[0], s.shape[1] // SEGMENT, SEGMENT).amax(2)


@in_full_fp32  # ranks must not depend on TF32 or the device
def _one_sided_pass(p: _Pass, q_mat: Tensor, g_mat: Tensor, block_q: int, mode: str) -> None:
    """Each query block against every gallery block in turn (any query and gallery)."""
    device, dtype, block_g, num_g = p.device, p.dtype, p.block_g, p.num_g
    elem = torch.finfo(dtype).bits // 8
    g_buffer = torch.zeros(block_g, g_mat.shape[1], dtype=dtype, device=device)
    scores = torch.empty(max(block_q, PRODUCT_ROWS), block_g, dtype=dtype, device=device)
    cache_buffers: list[Tensor] = []  # score blocks kept between the passes, reused

    def gallery_block(b: int) -> Tensor:
        start, stop = b * block_g, min((b + 1) * block_g, num_g)
        if stop - start == block_g:
            return g_mat[start:stop]
        # The last block is padded to full width so that every block is one product of the same
        # shape: a pair's score then cannot depend on the block it fell in.
        g_buffer.zero_()
        g_buffer[: stop - start] = g_mat[start:stop]
        return g_buffer

    for q_start in range(0, q_mat.shape[0], block_q):
        q_rows = p.order[q_start : q_start + block_q]
        qb = _QueryBlock(p, q_rows)
        nb = qb.nb
        q_blk = q_mat[q_rows.to(device)]
        if nb < PRODUCT_ROWS:
            q_blk = torch.cat([q_blk, q_blk.new_zeros(PRODUCT_ROWS - nb, q_blk.shape[1])])

        def block_scores(
            b: int, out: Tensor, q_blk: Tensor = q_blk, qb: _QueryBlock = qb
        ) -> Tensor:
            s = torch.mm(q_blk, gallery_block(b).T, out=out[: q_blk.shape[0]])[: qb.nb]
            qb.mask_excluded(s, b)
            width = min(block_g, num_g - b * block_g)
            if width < block_g:
                s[:, width:] = p.neg_inf
            return s

        # Read relevant scores from the blocks that hold them (same products as the counting).
        # With a depth, the first blocks are read here too (as many as stay cached), so that the
        # first threshold knows THETA_EVERY blocks: filtered against one block's threshold, the
        # early blocks let several times as many candidates through as the later ones.
        read_first = qb.relevant_blocks()
        cache_room = max(0, (p.memory_budget // 2) // max(1, nb * block_g * elem) - 1)
        if mode == "scores":
            cache_room = 0
        if p.depth is not None:
            extra = min(THETA_EVERY, cache_room) - len(read_first)
            read_first += [b for b in range(p.num_blocks_g) if b not in read_first][: max(0, extra)]
        cache: dict[int, tuple[Tensor, Tensor | None]] = {}
        for b in read_first:
            if len(cache) < cache_room:
                if len(cache) == len(cache_buffers):
                    cache_buffers.append(torch.empty_like(scores))
                s = block_scores(b, cache_buffers[len(cache)])
            else:
                s = block_scores(b, scores)
            qb.read_relevant(s, b)
            seg_max = None
            if p.depth is not None:
                seg_max = _segment_maxima(s)
                qb.seed(seg_max, b)
            if len(cache) < cache_room:
                cache[b] = (s, seg_max)
        if mode == "scores":
            p.outputs[0][qb.r_pos] = qb.relevant_values()
            continue

        qb.start_counting()
        seeded = set(read_first)
        for b in range(p.num_blocks_g):
            s, seg_max = cache[b] if b in cache else (block_scores(b, scores), None)
            if seg_max is None:
                seg_max = _segment_maxima(s)
            qb.count(s, seg_max, b, seeded=b in seeded)
        qb.finish()


@in_full_fp32  # ranks must not depend on TF32 or the device
def _two_sided_pass(
    p_rows: _Pass, p_cols: _Pass | None, a: Tensor, b: Tensor, cache_room: int
) -> None:
    """Each product of a block of ``a`` and a block of ``b`` serves the queries on both sides.

    ``S = A_i B_j^T`` gives block i of ``a`` its scores against block j of ``b`` (rows, for
    ``p_rows``) and block j of ``b`` its scores against block i of ``a`` (columns, ``S^T``, for
    ``p_cols``). With ``p_cols=None`` it is one set ranked against itself (``a`` is ``b``): only
    the pairs ``i <= j`` are computed, half of the full product. ``a`` and ``b`` are in
    processing order; block i of queries is block i of the gallery of the other side. Up to
    ``cache_room`` products are kept between reading relevant scores and counting.
    """
    symmetric = p_cols is None
    p_cols = p_rows if p_cols is None else p_cols
    device, dtype, block = p_rows.device, p_rows.dtype, p_rows.block_g
    num_a, num_b = a.shape[0], b.shape[0]
    blocks_a, blocks_b = -(-num_a // block), -(-num_b // block)

    def query_blocks(p: _Pass, num_blocks: int) -> list[_QueryBlock]:
        return [_QueryBlock(p, p.order[i * block : (i + 1) * block]) for i in range(num_blocks)]

    rows_of = query_blocks(p_rows, blocks_a)
    cols_of = rows_of if symmetric else query_blocks(p_cols, blocks_b)

    tail_a, tail_b = num_a - (blocks_a - 1) * block, num_b - (blocks_b - 1) * block
    # The last blocks are padded to full size (zeros, their scores set to -inf below).
    last_a = torch.zeros(block, a.shape[1], dtype=dtype, device=device)
    last_a[:tail_a] = a[(blocks_a - 1) * block :]
    last_b = last_a if symmetric else torch.zeros_like(last_a)
    last_b[:tail_b] = b[(blocks_b - 1) * block :]

    def block_of(x: Tensor, last: Tensor, i: int, num_blocks: int) -> Tensor:
        return last if i == num_blocks - 1 else x[i * block : (i + 1) * block]

    def product(i: int, j: int, out: Tensor) -> Tensor:
        # Every product has the same shape, so a pair's score does not depend on its block.
        s = torch.mm(block_of(a, last_a, i, blocks_a), block_of(b, last_b, j, blocks_b).T, out=out)
        if i == blocks_a - 1 and tail_a < block:
            s[tail_a:] = p_rows.neg_inf
        if j == blocks_b - 1 and tail_b < block:
            s[:, tail_b:] = p_rows.neg_inf
        return s

    # A block starts counting once it has read its relevant scores (its threshold starts at the
    # lowest), from the products of the pairs that hold them. Those products are kept for the
    # counting while the budget allows: in the order below a block's pairs are read shortly
    # before they are counted, so that few are kept at once when relevant items are grouped.
    def pair(i: int, j: int) -> tuple[int, int]:
        return (min(i, j), max(i, j)) if symmetric else (i, j)

    needs_rows = [{pair(i, j) for j in qb.relevant_blocks()} for i, qb in enumerate(rows_of)]
    needs_cols = (
        needs_rows
        if symmetric
        else [{(i, j) for i in qb.relevant_blocks()} for j, qb in enumerate(cols_of)]
    )
    cache: dict[tuple[int, int], Tensor] = {}
    read: set[tuple[int, int]] = set()
    started: set[int] = set()
    scores = torch.empty(block, block, dtype=dtype, device=device)

    def start(qb: _QueryBlock, needs: set[tuple[int, int]]) -> None:
        if id(qb) in started:
            return
        for i, j in sorted(needs - read):
            keep = len(cache) < cache_room
            s = product(i, j, torch.empty_like(scores) if keep else scores)
            rows_of[i].read_relevant(s, j)
            if not (symmetric and i == j):
                cols_of[j].read_relevant(s.T, i)
            read.add((i, j))
            if keep:
                cache[(i, j)] = s
        qb.start_counting()
        started.add(id(qb))

    for j in range(blocks_b):
        for i in range(j + 1) if symmetric else range(blocks_a):
            rows, cols = rows_of[i], cols_of[j]
            start(rows, needs_rows[i])
            start(cols, needs_cols[j])
            s = cache.pop((i, j)) if (i, j) in cache else product(i, j, scores)
            if not (symmetric and i == j):
                # The columns first: the rows' exclusions are then written into s in place.
                if cols.has_excluded(i):
                    st = s.T.contiguous()
                    cols.mask_excluded(st, i)
                    cols.count(st[: cols.nb], _segment_maxima(st)[: cols.nb], i)
                else:
                    seg_max = s.view(block // SEGMENT, SEGMENT, block).amax(1).T.contiguous()
                    cols.count(
                        s.T[: cols.nb], seg_max[: cols.nb], i, segment_values=_column_segments(s)
                    )
            rows.mask_excluded(s, j)
            rows.count(s[: rows.nb], _segment_maxima(s)[: rows.nb], j)
    for qb in rows_of if symmetric else rows_of + cols_of:
        qb.finish()


def _cache_room(room: int, block: int, dtype: torch.dtype) -> int:
    """How many square score blocks the two-sided pass keeps between reading and counting:
    half of ``room`` (the budget less the query blocks' states) less the block being counted;
    the counting's transients take the other half."""
    elem = torch.finfo(dtype).bits // 8
    return max(0, (room // 2) // (block * block * elem) - 1)


def _pairs_with_relevant(sides: Sequence[_Side], block: int) -> int:
    """Block pairs holding relevant items of either side (its rows or, transposed, columns)."""
    keys = []
    for k, side in enumerate(sides):
        query_block = torch.empty_like(side.order)
        query_block[side.order] = torch.arange(side.order.numel()) // block
        rows = repeat(query_block, side.rel_ptr.diff())
        cols = side.rel_index // block
        keys.append(rows * 2**31 + cols if k == 0 else cols * 2**31 + rows)
    return int(torch.unique(torch.cat(keys)).numel()) if keys else 0


def _column_segments(s: Tensor) -> Callable[[Tensor], Tensor]:
    """Scores of flat segment indices of ``s.T`` (row r, segment k: ``s[64k : 64k + 64, r]``)."""
    num_rows, num_cols = s.shape
    segments = num_rows // SEGMENT
    # (column, segment, item) as a strided view: indexing it with (column, segment) pairs reads
    # the strided items directly, 2x cheaper than building a flat index of every item
    by_column = s.view(segments, SEGMENT, num_cols).permute(2, 0, 1)

    def values(seg: Tensor) -> Tensor:
        column = _floor_div(seg, segments)
        return by_column[column, seg - column * segments]

    return values


def _floor_div(x: Tensor, d: int) -> Tensor:
    """``x // d`` for non-negative int64 ``x``: a shift when ``d`` is a power of two (segments
    and the usual blocks), several times cheaper than an integer division on the CPU."""
    if d & (d - 1) == 0:
        return x >> (d.bit_length() - 1)
    return x.div(d, rounding_mode="floor")


def _by_block(r_block: Tensor, num_blocks: int) -> tuple[Tensor, Tensor]:
    """The relevant pairs ordered by gallery block (stable) and each block's bounds in that
    order: one sort instead of one comparison of every pair per block."""
    if num_blocks <= 1:
        return torch.arange(r_block.numel()), torch.tensor([0, r_block.numel()])[: num_blocks + 1]
    order = torch.from_numpy(np.argsort(r_block.cpu().numpy(), kind="stable"))
    bounds = torch.zeros(num_blocks + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(r_block.cpu(), minlength=num_blocks), 0, out=bounds[1:])
    return order, bounds


def _pairs_in_block(order: Tensor, bounds: Tensor, b: int) -> Tensor:
    """Indices of the relevant pairs whose item lies in gallery block ``b``."""
    return order[int(bounds[b]) : int(bounds[b + 1])]


def _sort_rows(x: Tensor, with_perm: bool = True) -> tuple[Tensor, Tensor | None]:
    """``torch.sort(x, dim=1)``; on the CPU by numpy, several times faster on long rows."""
    if x.device.type != "cpu":
        values, perm = torch.sort(x, dim=1)
        return values, perm if with_perm else None
    if not with_perm:
        return torch.from_numpy(np.sort(x.numpy(), axis=1)), None
    perm = np.argsort(x.numpy(), axis=1)
    return torch.from_numpy(np.take_along_axis(x.numpy(), perm, 1)), torch.from_numpy(perm)


def _columnwise_max(blocks: list[Tensor]) -> list[Tensor]:
    """The element-wise maximum of equally shaped segment maxima, as a list of at most one.

    Column j is the best of the j-th segments of all the blocks: still one distinct item per
    column, so the depth-th best column remains a lower bound of the depth-th best item, and a
    top-k over it sees a fraction of the columns.
    """
    if not blocks:
        return []
    merged = blocks[0]
    for later in blocks[1:]:
        merged = torch.maximum(merged, later)
    return [merged]


def _count_candidates(
    s: Tensor,
    candidates: Tensor,
    threshold: Tensor,
    rel_sorted: Tensor,
    hist_lt: Tensor,
    hist_le: Tensor,
    memory_budget: int,
    segment_values: Callable[[Tensor], Tensor] | None = None,
) -> None:
    """Add the items of the candidate segments of the score block ``s`` to the histograms.

    ``candidates`` are flat indices of 64-item segments. Each item at or above its row's
    threshold is searched in a copy of its row of ``rel_sorted``: cheap when few items survive
    and rows are short (a good model, small classes). ``hist_lt`` gains one count at
    (row, number of relevant scores strictly below the item), ``hist_le`` the difference of the
    "<=" and "<" counts for items that tie a relevant score.
    """
    nb, segments = s.shape[0], s.shape[1] // SEGMENT
    width = rel_sorted.shape[1] + 1
    elem = s.element_size()
    # Segments are read a chunk at a time (their scores, a flag and an index per item); the
    # survivors, each copying a row of relevant scores, a sub-chunk at a time.
    chunk = max(1, (memory_budget // 4) // (SEGMENT * (elem + 1 + 8)))
    sub = max(1, (memory_budget // 4) // (width * elem + 4 * 8 + 2 * elem))
    for c0 in range(0, candidates.numel(), chunk):
        c_seg = candidates[c0 : c0 + chunk]
        c_row = _floor_div(c_seg, segments)
        # Flat indices throughout: one-dimensional index_select is several times cheaper than
        # indexing with a (row, column) pair.
        if segment_values is None:
            values = s.view(-1, SEGMENT).index_select(0, c_seg)
        else:
            values = segment_values(c_seg)
        # Only items at or above the threshold can move a located relevant item.
        keep = values >= threshold.index_select(0, c_row)[:, None]
        hits = flat_nonzero(keep.view(-1))
        del keep
        for h0 in range(0, hits.numel(), sub):
            hit = hits[h0 : h0 + sub]
            row = c_row.index_select(0, _floor_div(hit, SEGMENT))
            value = (values.view(-1).index_select(0, hit) + 0.0)[:, None]
            seq = rel_sorted.index_select(0, row)
            lt = torch.searchsorted(seq, value, right=False)[:, 0]
            flat = row * width + lt
            hist_lt += torch.bincount(flat, minlength=nb * width)
            # Exact ties with a relevant score are rare here: only those need "<=" counted apart.
            at_lt = seq.gather(1, lt.clamp_max(seq.shape[1] - 1)[:, None])[:, 0]
            equal = at_lt == value[:, 0]
            if bool(equal.any()):
                le = torch.searchsorted(seq[equal], value[equal], right=True)[:, 0]
                hist_le += torch.bincount(row[equal] * width + le, minlength=nb * width)
                hist_le -= torch.bincount(flat[equal], minlength=nb * width)


def _count_block(
    s: Tensor,
    rel_sorted: Tensor,
    hist_lt: Tensor,
    hist_le: Tensor,
    memory_budget: int,
    num_finite: Tensor | None = None,
) -> None:
    """Add every item of the score block ``s`` to the histograms of :func:`_count_candidates`.

    One batched binary search of each row of scores in its own row of ``rel_sorted``: no copy
    per item, O(log m) per item whatever survives. Items below a row's threshold land in bins
    of relevant scores below the threshold, whose counts are never used, so they need no
    filtering. Rows are taken a few at a time so the scratch stays within the budget.

    Two shortcuts for degenerate data. Where every item of the rows lies below its row's lowest
    relevant score, above its highest, or on the one score of a row whose relevant scores are
    all equal (collapsed embeddings), comparisons place every item and nothing is searched. And
    an item tying a relevant score is counted "<=" from its "<" position and the length of the
    run of equal relevant scores there, not by a second search.
    """
    nb, block_g = s.shape
    m = rel_sorted.shape[1]
    width = m + 1
    elem = s.element_size()
    # Per item: two int32 positions, an int64 gather index, the relevant score found there and
    # a few flags; per row: the two histograms bincount returns and the runs of equal scores.
    per_row = block_g * (2 * 4 + 8 + elem + 4) + 4 * width * 8
    rows = max(1, (memory_budget // 4) // per_row)
    if num_finite is None:  # (the query block counts them once for all its gallery blocks)
        num_finite = rel_sorted.isfinite().sum(1, keepdim=True)
    for r0 in range(0, nb, rows):
        r1 = min(nb, r0 + rows)
        values, seq = s[r0:r1], rel_sorted[r0:r1]
        # the relevant scores of a row are finite, its padding +inf
        finite_here = num_finite[r0:r1]
        lowest = seq[:, :1]
        highest = seq.gather(1, (finite_here - 1).clamp_min(0))
        # A row whose relevant scores are all equal has no item strictly between them, so
        # every item is below, on or above; other rows need no item in [lowest, highest].
        spread = lowest < highest
        outside = not bool(spread.any()) or not _any_between(values, lowest, highest, spread)
        if outside:
            # Every item lands in bin 0 or in bin m (the row's relevant scores), "<" for the
            # items above the highest, "<=" for those at or above it: two counts per row.
            n_above = torch.count_nonzero(values > highest, dim=1)
            n_at_least = torch.count_nonzero(values >= highest, dim=1)
            first_bin = torch.arange(r0, r1, device=s.device) * width
            last_bin = first_bin + finite_here[:, 0]
            hist_lt.index_add_(0, first_bin, block_g - n_above)
            hist_lt.index_add_(0, last_bin, n_above)
            hist_le.index_add_(0, first_bin, n_above - n_at_least)
            hist_le.index_add_(0, last_bin, n_at_least - n_above)
            continue
        if s.device.type == "cpu":
            _merge_rows(
                values,
                seq,
                hist_lt[r0 * width : r1 * width].view(r1 - r0, width),
                hist_le[r0 * width : r1 * width].view(r1 - r0, width),
            )
            continue
        lt = torch.searchsorted(seq, values, right=False, out_int32=True)
        at = lt.clamp_max(m - 1).to(torch.int64)
        tie = seq.gather(1, at) == values
        le = lt
        if bool(tie.any()):
            # An item tying the relevant score at position j is "<=" to the run of equal
            # scores from j to the run's end.
            le = torch.where(tie, _run_end(seq).gather(1, at).to(torch.int32) + 1, lt)
        del at, tie
        del outside
        offset = torch.arange(r1 - r0, dtype=torch.int32, device=s.device)[:, None] * width
        counts_lt = torch.bincount((lt + offset).view(-1), minlength=(r1 - r0) * width)
        hist_lt[r0 * width : r1 * width] += counts_lt
        if le is not lt:
            counts_le = torch.bincount((le + offset).view(-1), minlength=(r1 - r0) * width)
            hist_le[r0 * width : r1 * width] += counts_le - counts_lt


def _any_between(values: Tensor, lowest: Tensor, highest: Tensor, spread: Tensor) -> bool:
    """Whether a row with ``spread`` has an item in [``lowest``, ``highest``] of its row.

    One such row is looked at first: where a row's relevant items lie in the block, their own
    scores are there, so it nearly always answers without a pass over the whole block (several
    passes over every item, a quarter of the count on a weak model).
    """
    first = int(torch.argmax(spread.view(-1).to(torch.uint8)))
    row = values[first]
    if bool(((row >= lowest[first]) & (row <= highest[first])).any()):
        return True
    return bool(((values >= lowest) & (values <= highest) & spread).any())


def _merge_rows(values: Tensor, seq: Tensor, hist_lt: Tensor, hist_le: Tensor) -> None:
    """The histograms of :func:`_count_block` by merging sorted lists, row by row (CPU).

    Each row of scores is sorted once and each relevant score looked up in it: n log n + m log n
    per row instead of a search per item, and numpy's sort and search are several times faster
    than a batched ``torch.searchsorted``. With the relevant scores r_0 <= ... <= r_(m-1) of a
    row, the items with exactly j relevant scores strictly below them are those in
    (r_(j-1), r_j], so bin j of ``hist_lt`` is #{v <= r_j} - #{v <= r_(j-1)}; "<=" likewise with
    [r_(j-1), r_j). ``hist_le`` gains the difference of the two, as in :func:`_count_block`.
    """
    n = values.shape[1]
    sorted_values = np.sort(values.numpy(), axis=1)
    rel = seq.numpy()
    rows, m = rel.shape
    at_most = np.empty((rows, m + 2), dtype=np.int64)
    at_most[:, 0] = 0
    at_most[:, -1] = n
    for i, (row, scores) in enumerate(zip(sorted_values, rel, strict=True)):
        at_most[i, 1:-1] = row.searchsorted(scores, "right")
    # "<" from "<=": minus the items equal to the relevant score, which sit just before. One
    # such item is the rule (the relevant item itself); rows with more are searched again.
    found = at_most[:, 1:-1]
    # The items one and two places before each found position, read from the flat array (many
    # times cheaper than take_along_axis); clamped to the row's first item where there is none,
    # which the `found >` tests then ignore.
    flat = sorted_values.ravel()
    row_start = (np.arange(rows, dtype=np.int64) * n)[:, None]
    before = found - 1
    before += row_start
    np.maximum(before, row_start, out=before)
    below = at_most.copy()
    below[:, 1:-1] -= (found > 0) & (flat.take(before) == rel)
    before -= 1
    np.maximum(before, row_start, out=before)
    for i in np.flatnonzero(((found > 1) & (flat.take(before) == rel)).any(1)):
        below[i, 1:-1] = sorted_values[i].searchsorted(rel[i], "left")
    counts_lt = np.diff(at_most, axis=1)
    hist_lt += torch.from_numpy(counts_lt)
    hist_le += torch.from_numpy(np.diff(below, axis=1) - counts_lt)


def _run_end(seq: Tensor) -> Tensor:
    """For each position of each ascending row, the last position holding the same value."""
    m = seq.shape[1]
    position = torch.arange(m, device=seq.device).expand_as(seq)
    ends = torch.ones_like(seq, dtype=torch.bool)
    ends[:, :-1] = seq[:, 1:] != seq[:, :-1]
    # the first run end at or after each position: a running minimum from the right
    end_at = torch.where(ends, position, m)
    return end_at.flip(1).cummin(1).values.flip(1)


def _table_from_items(
    ptr: Tensor,
    above: Tensor,
    tied: Tensor,
    listed: Tensor,
    grades: Tensor | None,
    num_relevant: Tensor,
    gallery_size: Tensor,
    depth: Tensor,
    ideal: tuple[Tensor, Tensor] | None = None,
    row: Tensor | None = None,
    by_score: bool = False,
) -> RankTable:
    """Sort each query's listed items by (above, -grade) and build the table.

    Items come grouped by query as ``ptr`` says, or in any order with their query in ``row``;
    ``by_score``: grouped and already by decreasing score (binary relevance), nothing to sort.
    Grouped items are handed over: when every item is listed, ``above`` and ``tied`` are
    reordered in place and become the table's, a chunk of queries at a time, so that besides the
    table the scratch stays a few tens of MiB however many relevant pairs there are.
    """
    num_q = ptr.numel() - 1
    if grades is not None and ideal is None:
        ideal = _ideal_from(ptr, grades, row)
    g = None if grades is None else grades.to(torch.float64)
    if row is not None:
        # items in any order (the scores form): one sort of all of them
        row, above, tied = masked(row, listed), masked(above, listed), masked(tied, listed)
        g = None if g is None else masked(g, listed)
        perm = _lexsort(row, above, None if g is None else -g)
        new_ptr = torch.zeros(num_q + 1, dtype=torch.int64)
        torch.cumsum(torch.bincount(row, minlength=num_q), 0, out=new_ptr[1:])
        above, tied = above[perm], tied[perm]
        g = None if g is None else g[perm]
    else:
        if bool(listed.all()):
            new_ptr = ptr.to(torch.int64, copy=True)
            if g is not None and g is grades:
                g = g.clone()  # reordered in place below; the caller's grades stay as they are
        else:
            row = masked(repeat(torch.arange(num_q), ptr.diff()), listed)
            above, tied = masked(above, listed), masked(tied, listed)
            g = None if g is None else masked(g, listed)
            new_ptr = torch.zeros(num_q + 1, dtype=torch.int64)
            torch.cumsum(torch.bincount(row, minlength=num_q), 0, out=new_ptr[1:])
            del row
        q0 = num_q if by_score else 0
        while q0 < num_q:
            p0 = int(new_ptr[q0])
            q1 = int(torch.searchsorted(new_ptr, p0 + TABLE_CHUNK, right=True)) - 1
            q1 = min(num_q, max(q1, q0 + 1))
            p1 = int(new_ptr[q1])
            if p1 - p0 > 1:
                chunk_row = repeat(
                    torch.arange(q1 - q0), new_ptr[q0 : q1 + 1].diff()
                )
                chunk_above = above[p0:p1]
                perm = _lexsort(chunk_row, chunk_above, None if g is None else -g[p0:p1])
                above[p0:p1] = chunk_above[perm]
                tied[p0:p1] = tied[p0:p1][perm]
                if g is not None:
                    g[p0:p1] = g[p0:p1][perm]
            q0 = q1
    return RankTable(
        ptr=new_ptr,
        above=above,
        tied=tied,
        num_relevant=num_relevant.to(torch.int64),
        gallery_size=gallery_size.to(torch.int64),
        depth=depth,
        grade=g,
        ideal_ptr=None if ideal is None else ideal[0],
        ideal_grade=None if ideal is None else ideal[1],
    )


def _lexsort(row: Tensor, key: Tensor, last: Tensor | None) -> Tensor:
    """The stable permutation sorting by (row, key, last): int64 row and key, float64 last."""
    n = row.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    r, k = row.numpy(), key.numpy()
    if last is None and int(k.min()) >= 0 and int(k.max()) < 2**32 and int(r.max()) < 2**31:
        # one sort of a combined key instead of two
        return torch.from_numpy(np.argsort((r << 32) | k, kind="stable"))
    keys = (k, r) if last is None else (last.numpy(), k, r)
    return torch.from_numpy(np.lexsort(keys))


def _ideal_from(ptr: Tensor, grades: Tensor, row: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Each query's grades sorted decreasing (grouped as ``ptr`` says, or by ``row``)."""
    if row is None:
        row = repeat(torch.arange(ptr.numel() - 1), ptr.diff())
    g = grades.to(torch.float64)
    perm = torch.from_numpy(np.lexsort(((-g).numpy(), row.numpy())))
    return ptr.clone(), g[perm]


# --------------------------------------------------------------------------------------------
# Scores per query (torchmetrics' preds / target / indexes form)
# --------------------------------------------------------------------------------------------


def rank_scores(preds: Tensor, target: Tensor, indexes: Tensor) -> RankTable:
    """Rank table from flat ``preds`` (scores), ``target`` (relevance grade, 0 = not relevant) and
    ``indexes`` (query of each entry), torchmetrics' retrieval input form.

    Every entry of a query is a ranked candidate; ties are kept as ties. Queries appear in
    ascending ``indexes`` order. Boolean or integer ``target`` gives binary relevance when its
    values are 0/1, graded relevance otherwise; float targets are grades.

    >>> preds, target = torch.tensor([0.9, 0.5, 0.5]), torch.tensor([0, 1, 0])
    >>> t = rank_scores(preds, target, torch.tensor([0, 0, 0]))
    >>> t.above.tolist(), t.tied.tolist()
    ([1], [2])
    """
    if not (preds.shape == target.shape == indexes.shape) or preds.dim() != 1:
        raise ValueError(
            "`preds`, `target` and `indexes` must be 1-D and of the same length, got shapes "
            f"{tuple(preds.shape)}, {tuple(target.shape)} and {tuple(indexes.shape)}"
        )
    if not preds.is_floating_point():
        preds = preds.to(torch.float64)
    elif preds.dtype not in (torch.float32, torch.float64):
        preds = preds.to(torch.float32)  # half precision widens exactly: same order, same ties
    if not all_finite(preds):
        raise ValueError("`preds` contains NaN or infinite values")
    if indexes.is_floating_point():
        raise ValueError(f"`indexes` must hold integers, got {indexes.dtype}")
    if target.numel() and bool((target < 0).any()):
        raise ValueError("`target` must be non-negative (0 = not relevant, > 0 = grade)")
    return _rank_checked_scores(preds, target, indexes)


def _rank_checked_scores(preds: Tensor, target: Tensor, indexes: Tensor) -> RankTable:
    """:func:`rank_scores` on inputs it has checked (1-D, float32/float64 finite scores,
    non-negative targets, integer indexes): a metric checks each batch as it arrives."""
    scores = preds.detach().cpu().numpy()
    target = target.detach().cpu()
    if target.dtype in (torch.float16, torch.bfloat16):
        target = target.to(torch.float32)  # numpy has no bfloat16; widening is exact
    target_np = target.numpy()
    codes, num_q, grouped = group_codes(indexes.detach().cpu().to(torch.int64).numpy())
    # only the relevant entries' grades are widened to float64, not every entry's
    relevant = np.flatnonzero(target_np > 0)
    grades = target_np[relevant].astype(np.float64)
    above, tied, counts = count_in_groups(scores, codes, num_q, grouped, relevant)
    binary = not target.is_floating_point() and bool(np.all(grades == 1))
    row = torch.from_numpy(codes[relevant])
    rel_counts = torch.bincount(row, minlength=num_q)
    ptr = torch.zeros(num_q + 1, dtype=torch.int64)
    torch.cumsum(rel_counts, 0, out=ptr[1:])
    counts_t = torch.from_numpy(counts)
    return _table_from_items(
        ptr,
        torch.from_numpy(above),
        torch.from_numpy(tied),
        torch.ones(relevant.size, dtype=torch.bool),
        None if binary else torch.from_numpy(grades),
        rel_counts,
        counts_t,
        counts_t.clone(),
        row=row,
    )


def positive_counts(preds: Tensor, indexes: Tensor) -> Tensor:
    """Entries scored > 0 of each query, queries in ascending ``indexes`` order (the order of
    :func:`rank_scores`' table)."""
    codes, num_q, _ = group_codes(indexes.detach().cpu().to(torch.int64).numpy())
    positive = preds.detach().cpu().numpy() > 0
    return torch.from_numpy(np.bincount(codes[positive], minlength=num_q).astype(np.int64))


def nonpositive_missed(table: RankTable, positive: Tensor) -> RankTable:
    """``table`` with every relevant item scored <= 0 made a miss: it stays in m_q but is never
    retrieved (torchmetrics' rule for MAP, MRR, precision and recall).

    ``positive[q]`` is the number of entries of query q scored > 0 (:func:`positive_counts`).
    Every entry scored > 0 ranks above every entry scored <= 0, so a listed item scored <= 0 is
    one with ``above >= positive[q]``; tie groups never straddle 0, so no tie is split.
    """
    keep = table.above < positive.to(torch.int64)[table.item_query]
    counts = torch.zeros(table.num_queries, dtype=torch.int64).index_add_(
        0, table.item_query, keep.to(torch.int64)
    )
    ptr = torch.zeros(table.num_queries + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=ptr[1:])
    return replace(
        table,
        ptr=ptr,
        above=masked(table.above, keep),
        tied=masked(table.tied, keep),
        grade=None if table.grade is None else masked(table.grade, keep),
        depth=torch.full_like(table.depth, UNBOUNDED),
    )


# --------------------------------------------------------------------------------------------
# Ranked lists (RAG, search engines)
# --------------------------------------------------------------------------------------------


def rank_lists(
    ranked_ids: Sequence[Sequence[Any]],
    relevant_ids: Sequence[Any],
    *,
    duplicates: str = "first",
) -> RankTable:
    """Rank table from each query's ranked list of ids and its relevant ids.

    ``relevant_ids[q]`` is a collection of ids, or a dict id -> grade (grade <= 0 is not
    relevant). An id repeated in one list counts once, at its first position; the repeats keep
    their places as non-relevant slots (``duplicates="error"`` raises instead). Relevant ids the
    list never returned count in m_q and are never retrieved.

    >>> t = rank_lists([["d3", "d7", "d1"]], [{"d1", "d9"}])
    >>> t.above.tolist(), t.num_relevant.tolist()
    ([2], [2])
    """
    if duplicates not in ("first", "error"):
        raise ValueError(f'`duplicates` must be "first" or "error", got {duplicates!r}')
    if isinstance(ranked_ids, (str, bytes)) or isinstance(relevant_ids, (str, bytes)):
        raise ValueError(
            "`ranked_ids` and `relevant_ids` must be sequences with one entry per query"
        )
    if len(ranked_ids) != len(relevant_ids):
        raise ValueError(
            f"`ranked_ids` and `relevant_ids` must have one entry per query, got {len(ranked_ids)} "
            f"and {len(relevant_ids)}"
        )
    # Per query, only the few relevant ids are looked for: one C-level pass over the list
    # (set intersection) finds which of them it returns, list.index their first positions.
    # No per-id Python code runs over the ranked ids.
    hit_query: list[int] = []
    hit_pos: list[int] = []
    hit_grade: list[float] = []
    all_grades: list[float] = []
    num_rel: list[int] = []
    sizes: list[int] = []
    graded = any(isinstance(r, dict) for r in relevant_ids)
    for q, (ranked, relevant) in enumerate(zip(ranked_ids, relevant_ids, strict=True)):
        if isinstance(ranked, Tensor):
            ranked = ranked.tolist()
        if isinstance(ranked, (str, bytes)):
            raise ValueError(f"`ranked_ids[{q}]` must be a list of ids, got a string")
        if isinstance(relevant, Tensor):
            relevant = relevant.tolist()
        if isinstance(relevant, (str, bytes)):
            raise ValueError(f"`relevant_ids[{q}]` must be a collection of ids, got a string")
        if isinstance(relevant, dict):
            gains = {k: float(v) for k, v in relevant.items() if float(v) > 0}
        else:
            gains = dict.fromkeys(relevant, 1.0)
        if not isinstance(ranked, (list, tuple)):
            ranked = list(ranked)
        # Ids compare as text (7 is "7"): a query whose ids are all of one type compares them as
        # they are; only one that mixes types (ints and strings) is rewritten to canonical ids.
        kinds = set(map(type, ranked))
        kinds.update(map(type, gains))
        if len(kinds) > 1:
            ranked = [canonical_id(item) for item in ranked]
            gains = {canonical_id(item): grade for item, grade in gains.items()}
        if duplicates == "error" and len(set(ranked)) != len(ranked):
            seen: set[Any] = set()
            for item in ranked:
                if item in seen:
                    raise ValueError(f"`ranked_ids[{q}]` returns id {item!r} more than once")
                seen.add(item)
        num_rel.append(len(gains))
        sizes.append(len(ranked))
        if graded:
            all_grades.extend(gains.values())
        if not gains or not ranked:
            continue
        found = gains.keys() & ranked  # iterates the list in C, keeps the list's objects
        if not found:
            continue
        if len(found) <= _INDEX_HITS:
            positions = [ranked.index(item) for item in found]
        else:
            # many hits: one dict of first positions (later repeats are overwritten by earlier)
            first = dict(zip(reversed(ranked), range(len(ranked) - 1, -1, -1), strict=True))
            positions = [first[item] for item in found]
        hit_query.extend([q] * len(positions))
        hit_pos.extend(positions)
        hit_grade.extend(gains[item] for item in found)
    num_q = len(ranked_ids)
    num_rel_t = torch.tensor(num_rel, dtype=torch.int64)
    ptr = torch.zeros(num_q + 1, dtype=torch.int64)
    torch.cumsum(num_rel_t, 0, out=ptr[1:])
    n_items = len(hit_pos)
    row = torch.tensor(hit_query, dtype=torch.int64)
    item_ptr = torch.zeros(num_q + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(row, minlength=num_q), 0, out=item_ptr[1:])
    ideal = None
    if graded:
        ideal = _ideal_from(ptr, torch.tensor(all_grades, dtype=torch.float64))
    return _table_from_items(
        item_ptr,
        torch.tensor(hit_pos, dtype=torch.int64),
        torch.ones(n_items, dtype=torch.int64),
        torch.ones(n_items, dtype=torch.bool),
        torch.tensor(hit_grade, dtype=torch.float64) if graded else None,
        num_rel_t,
        torch.tensor(sizes, dtype=torch.int64),
        torch.full((num_q,), UNBOUNDED, dtype=torch.int64),
        ideal=ideal,
        row=row,
    )


# --------------------------------------------------------------------------------------------
# A gallery sharded over processes
# --------------------------------------------------------------------------------------------


class Exchange:
    """How the sharded ranking talks to the other shards (no-ops for a single shard).

    ``gather(tensors)`` concatenates each tensor over shards along dimension 0 (shard order);
    ``sum(tensor)`` and ``max(tensor)`` reduce elementwise over shards. ``sent`` counts the bytes
    this shard contributed, for the benchmark.
    """

    sent = 0

    def gather(self, tensors: list[Tensor]) -> list[Tensor]:
        return tensors

    def sum(self, tensor: Tensor) -> Tensor:
        return tensor

    def max(self, tensor: Tensor) -> Tensor:
        return tensor


def rank_embeddings_sharded(
    query: Tensor,
    gallery_shard: Tensor,
    exchange: Exchange,
    *,
    query_labels: Any = None,
    gallery_labels: Any = None,
    query_ids: Any = None,
    gallery_ids: Any = None,
    query_cameras: Any = None,
    gallery_cameras: Any = None,
    query_positions: Any = None,
    gallery_positions: Any = None,
    relevance: str = "label",
    radius: float | None = 25.0,
    ignore_label: int | None = None,
    similarity: str = "cosine",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> RankTable:
    """Rank every query against a gallery split over shards; every shard gets the whole table.

    Every shard holds all the queries and its own part of the gallery. Each shard scores its own
    relevant items, the relevant scores of every query are exchanged, each shard counts its items
    above and tied with each of them, and the counts are summed. What crosses between shards is
    O(queries x (D + relevant per query)), whatever the gallery size; the result equals ranking
    against the whole gallery at once. Self-exclusion works by ids only (positions are local).
    """
    if relevance not in ("label", "radius"):
        raise ValueError('the sharded gallery supports relevance="label" or "radius"')
    query, gallery_shard, rel, q_labels, g_labels = _embedding_relevance(
        query,
        gallery_shard,
        query_labels=query_labels,
        gallery_labels=gallery_labels,
        query_ids=query_ids,
        gallery_ids=gallery_ids,
        query_cameras=query_cameras,
        gallery_cameras=gallery_cameras,
        query_positions=query_positions,
        gallery_positions=gallery_positions,
        relevant_ids=None,
        relevance=relevance,
        radius=radius,
        ignore_label=ignore_label,
        similarity=similarity,
        depth=None,
        memory_budget=memory_budget,
    )
    num_q = query.shape[0]
    dtype = _score_dtype(query, gallery_shard)
    elem = torch.finfo(dtype).bits // 8
    # Every shard must use the same block shapes, so that equal scores stay equal across shards.
    sizes = exchange.max(
        torch.tensor(
            [rel.gallery_index.numel(), int(rel.num_relevant.max()) if num_q else 0],
            dtype=torch.int64,
        )
    )
    dim = query.shape[1] + (1 if similarity == "euclidean" else 0)
    block = _block_sizes(num_q, int(sizes[0]), dim, max(1, 4 * int(sizes[1])), elem, memory_budget)
    block = (max(1, min(block[0], 1024)), block[1])
    g_key = None if g_labels is None else g_labels[rel.gallery_index]
    local_scores = relevant_scores(
        query,
        gallery_shard,
        rel,
        similarity=similarity,
        memory_budget=memory_budget,
        block_size=block,
        order_keys=(q_labels, g_key),
    )
    local_query = repeat(torch.arange(num_q), rel.num_relevant)
    all_query, all_scores = exchange.gather([local_query, local_scores.to(torch.float64)])
    order = torch.argsort(all_query, stable=True)
    all_query, all_scores = all_query[order], all_scores[order].to(dtype)
    num_relevant = torch.bincount(all_query, minlength=num_q)
    ptr = torch.zeros(num_q + 1, dtype=torch.int64)
    torch.cumsum(num_relevant, 0, out=ptr[1:])
    above, tied = count_above(
        query,
        gallery_shard,
        rel,
        ptr,
        all_scores,
        similarity=similarity,
        memory_budget=memory_budget,
        block_size=block,
        order_keys=(q_labels, g_key),
    )
    above, tied = exchange.sum(above), exchange.sum(tied)
    local_size = rel.gallery_index.numel() - rel.num_excluded
    gallery_size = exchange.sum(local_size)
    table = _table_from_items(
        ptr,
        above,
        tied,
        torch.ones(above.numel(), dtype=torch.bool),
        None,
        num_relevant,
        gallery_size,
        gallery_size.clone(),
    )
    return replace(table, query_class=q_labels) if q_labels is not None else table
