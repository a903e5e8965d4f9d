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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.grouped import count_in_groups, group_codes
from retrieval_metrics.functional.relevance import Relevance, build_relevance, encode_labels
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
    if x.is_floating_point() and x.numel() and not bool(torch.isfinite(x).all()):
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
    tiny = (norm[:, 0] < TINY_NORM) & (x != 0).any(1)
    if bool(tiny.any()):
        rows = x[tiny].to(torch.float64)
        rows = rows / rows.abs().amax(1, keepdim=True)
        out[tiny] = (rows / torch.linalg.vector_norm(rows, dim=1, keepdim=True)).to(x.dtype)
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


def _as_device_tensor(x: Any, device: torch.device) -> Tensor | None:
    if x is None:
        return None
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x)
    return x.to(device)


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
        per_item("query_labels", q_labels, num_q)
        per_item("gallery_labels", g_labels, num_g)
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
) -> RankTable:
    """Blocked ranking of ``query`` against the kept gallery of ``relevance_sets``.

    ``query_order_key`` and ``gallery_order_key`` (e.g. labels; the latter aligned with the kept
    gallery) only change the order in which items are processed, so that each query block's
    relevant items sit in one or two gallery blocks; results come back in input order.
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
) -> Any:
    device = query.device
    dtype = _score_dtype(query, gallery)
    elem = torch.finfo(dtype).bits // 8
    kept = relevance_sets.gallery_index
    if kept.numel() != gallery.shape[0]:
        gallery = gallery[kept.to(device)]
    q_mat, g_mat = _prepare(query, gallery, similarity, dtype)
    num_q, num_g = q_mat.shape[0], g_mat.shape[0]
    rel_ptr = relevance_sets.relevant_ptr
    rel_index = relevance_sets.relevant_index
    if external is not None:
        # counting against given scores: they play the part of the relevant items
        rel_ptr = external[0].cpu()
        rel_index = torch.zeros(int(rel_ptr[-1]), dtype=torch.int64)
        ext_scores = external[1].to(device=device, dtype=dtype)
    ex_ptr = relevance_sets.excluded_ptr
    ex_index = relevance_sets.excluded_index
    if gallery_order_key is not None and num_g:
        # Counts do not depend on gallery order; grouping by label puts each query block's
        # relevant items in one or two gallery blocks.
        g_perm = torch.sort(gallery_order_key.cpu(), stable=True).indices
        g_mat = g_mat[g_perm.to(device)]
        new_position = torch.empty_like(g_perm)
        new_position[g_perm] = torch.arange(num_g)
        if external is None:
            rel_index = new_position[rel_index]
        ex_index = new_position[ex_index]
    num_relevant = rel_ptr.diff()
    gallery_size = num_g - ex_ptr.diff()

    max_relevant = int(num_relevant.max()) if num_q else 0
    if block_size is None:
        block_q, block_g = _block_sizes(
            num_q, num_g, q_mat.shape[1], max_relevant, elem, memory_budget
        )
    else:
        block_q, block_g = block_size
        if block_q < 1 or block_g < SEGMENT or block_g % SEGMENT:
            raise ValueError(
                f"`block_size` must be (queries >= 1, gallery items a multiple of {SEGMENT}), "
                f"got {block_size!r}"
            )
    num_blocks_g = -(-num_g // block_g) if num_g else 0

    if query_order_key is not None and num_q:
        order = torch.sort(query_order_key.cpu(), stable=True).indices
    else:
        order = torch.arange(num_q)

    # One entry per relevant pair: with thousands of relevant items per query these are the
    # largest allocations of the ranking, so each mode allocates only what it returns.
    num_pairs = int(rel_ptr[-1]) if num_q else 0
    if mode == "scores":
        out_scores = torch.zeros(num_pairs, dtype=dtype)
    else:
        out_above = torch.zeros(num_pairs, dtype=torch.int64)
        out_tied = torch.zeros_like(out_above)
        out_listed = torch.ones_like(out_above, dtype=torch.bool)

    g_buffer = torch.zeros(block_g, g_mat.shape[1], dtype=dtype, device=device)
    scores = torch.empty(max(block_q, PRODUCT_ROWS), block_g, dtype=dtype, device=device)
    cache_buffers: list[Tensor] = []  # score blocks kept between the passes, reused
    neg_inf = torch.tensor(float("-inf"), dtype=dtype, device=device)

    def gallery_block(b: int) -> Tensor:
        start, stop = b * block_g, min((b + 1) * block_g, num_g)
        if stop - start == block_g:
            return g_mat[start:stop]
        # The last block is padded to full width so that every block is one product of the same
        # shape: a pair's score then cannot depend on the block it fell in.
        g_buffer.zero_()
        g_buffer[: stop - start] = g_mat[start:stop]
        return g_buffer

    for q_start in range(0, num_q, block_q):
        q_rows = order[q_start : q_start + block_q]
        nb = q_rows.numel()
        q_blk = q_mat[q_rows.to(device)]
        if nb < PRODUCT_ROWS:
            q_blk = torch.cat([q_blk, q_blk.new_zeros(PRODUCT_ROWS - nb, q_blk.shape[1])])
        # Relevant items of this query block, as (row, gallery index) pairs in CSR order.
        r_start, r_stop = rel_ptr[q_rows], rel_ptr[q_rows + 1]
        r_counts = r_stop - r_start
        r_row = torch.repeat_interleave(torch.arange(nb), r_counts)
        r_ptr = torch.zeros(nb + 1, dtype=torch.int64)
        torch.cumsum(r_counts, 0, out=r_ptr[1:])
        r_pos = torch.arange(int(r_ptr[-1])) - r_ptr[:-1][r_row] + r_start[r_row]
        r_gal = rel_index[r_pos]
        # Excluded pairs of this block.
        e_start, e_stop = ex_ptr[q_rows], ex_ptr[q_rows + 1]
        e_counts = e_stop - e_start
        e_row = torch.repeat_interleave(torch.arange(nb), e_counts)
        e_ptr = torch.zeros(nb + 1, dtype=torch.int64)
        torch.cumsum(e_counts, 0, out=e_ptr[1:])
        e_gal = ex_index[torch.arange(int(e_ptr[-1])) - e_ptr[:-1][e_row] + e_start[e_row]]
        e_block = e_gal // block_g
        e_order = torch.argsort(e_block, stable=True)
        e_row, e_gal, e_block = e_row[e_order], e_gal[e_order], e_block[e_order]
        e_bounds = torch.searchsorted(e_block, torch.arange(num_blocks_g + 1))

        m_blk = int(r_counts.max()) if nb else 0
        rel_scores = torch.full((nb, max(m_blk, 1)), float("inf"), dtype=dtype, device=device)
        r_col = torch.arange(r_row.numel()) - r_ptr[:-1][r_row]

        def block_scores(
            b: int,
            out: Tensor,
            q_blk: Tensor = q_blk,
            nb: int = nb,
            e_bounds: Tensor = e_bounds,
            e_row: Tensor = e_row,
            e_gal: Tensor = e_gal,
        ) -> Tensor:
            s = torch.mm(q_blk, gallery_block(b).T, out=out[: q_blk.shape[0]])[:nb]
            lo, hi = int(e_bounds[b]), int(e_bounds[b + 1])
            if hi > lo:
                s[e_row[lo:hi].to(device), (e_gal[lo:hi] - b * block_g).to(device)] = neg_inf
            width = min(block_g, num_g - b * block_g)
            if width < block_g:
                s[:, width:] = neg_inf
            return s

        r_block = r_gal // block_g
        if depth is not None:
            # Where each relevant item lies, by block and segment, to mask it from the maxima.
            r_local = r_gal - r_block * block_g
            seg_order = torch.argsort(r_block, stable=True)
            seg_rows, seg_cols = r_row[seg_order], (r_local // SEGMENT)[seg_order]
            seg_bounds = torch.searchsorted(r_block[seg_order], torch.arange(num_blocks_g + 1))

            def without_relevant(
                seg_max: Tensor,
                b: int,
                seg_rows: Tensor = seg_rows,
                seg_cols: Tensor = seg_cols,
                seg_bounds: Tensor = seg_bounds,
            ) -> Tensor:
                """Segment maxima of block ``b``, -inf where a segment holds a relevant item."""
                lo, hi = int(seg_bounds[b]), int(seg_bounds[b + 1])
                if hi == lo:
                    return seg_max
                masked = seg_max.clone()
                masked[seg_rows[lo:hi].to(device), seg_cols[lo:hi].to(device)] = neg_inf
                return masked

        # Pass 1: read relevant scores from the blocks that hold them (same products as pass 2).
        # With a depth, the first blocks are read here too (as many as stay cached), so that the
        # first threshold knows THETA_EVERY blocks: filtered against one block's threshold, the
        # early blocks let several times as many candidates through as the later ones.
        blocks_with_relevant = torch.unique(r_block).tolist() if external is None else []
        if external is not None:
            rel_scores[r_row.to(device), r_col.to(device)] = ext_scores[r_pos.to(device)]
        cache_room = max(0, (memory_budget // 2) // max(1, nb * block_g * elem) - 1)
        if mode == "scores":
            cache_room = 0
        read_first = list(blocks_with_relevant)
        if depth is not None:
            extra = min(THETA_EVERY, cache_room) - len(read_first)
            read_first += [b for b in range(num_blocks_g) if b not in read_first][: max(0, extra)]
        cache: dict[int, tuple[Tensor, Tensor | None]] = {}
        seeds: list[Tensor] = []
        for b in read_first:
            if len(cache) < cache_room:
                if len(cache) == len(cache_buffers):
                    cache_buffers.append(torch.empty_like(scores))
                s = block_scores(b, cache_buffers[len(cache)])
            else:
                s = block_scores(b, scores)
            sel = r_block == b
            if bool(sel.any()):
                rel_scores[r_row[sel].to(device), r_col[sel].to(device)] = s[
                    r_row[sel].to(device), (r_gal[sel] - b * block_g).to(device)
                ]
            seg_max = None
            if depth is not None:
                seg_max = s.view(nb, block_g // SEGMENT, SEGMENT).amax(2)
                seeds.append(without_relevant(seg_max, b))
            if len(cache) < cache_room:
                cache[b] = (s, seg_max)
        if mode == "scores":
            out_scores[r_pos] = rel_scores[r_row.to(device), r_col.to(device)].cpu()
            continue

        # Items never beat anything below the lowest relevant score; -0.0 and 0.0 must tie.
        rel_scores.add_(0.0)
        rel_sorted, rel_perm = torch.sort(rel_scores, dim=1)  # ascending, +inf padding last
        has_rel = r_counts.to(device) > 0
        finite = torch.where(rel_sorted.isfinite(), rel_sorted, neg_inf)
        best = finite.max(1).values
        lowest = rel_sorted[:, 0]
        threshold = torch.where(has_rel, lowest, torch.full_like(lowest, float("inf")))
        if depth is not None:
            block_depth = (
                r_counts.clamp_min(depth) if cover_relevant else torch.full_like(r_counts, depth)
            )
            top_width = int(block_depth.max()) if nb else depth
            depth_col = (block_depth - 1).to(device)[:, None]
            # A lower bound of each row's depth-th best score, from distinct items: the relevant
            # scores themselves, and the maxima of the segments that hold no relevant item.
            known = torch.where(rel_sorted.isfinite(), rel_sorted, neg_inf)
            pad = torch.full((nb, top_width), float("-inf"), dtype=dtype, device=device)
            top_seg = torch.cat([pad, known], 1)

        width = rel_sorted.shape[1] + 1
        hist_lt = torch.zeros(nb * width, dtype=torch.int64, device=device)
        hist_le = torch.zeros(nb * width, dtype=torch.int64, device=device)
        # The blocks read in pass 1 are merged before the first block is filtered.
        pending: list[Tensor] = seeds
        theta_from_blocks = False
        for b in range(num_blocks_g):
            s, seg_max = cache[b] if b in cache else (block_scores(b, scores), None)
            if seg_max is None:
                seg_max = s.view(nb, block_g // SEGMENT, SEGMENT).amax(2)
            if depth is not None:
                if b not in read_first:
                    pending.append(without_relevant(seg_max, b))
                # The threshold may lag behind (any lower bound of the depth-th best score is
                # correct), so the segment maxima are merged every few blocks only.
                if pending and (len(pending) >= THETA_EVERY or not theta_from_blocks):
                    theta_from_blocks = True
                    top_seg = torch.cat([top_seg, *_columnwise_max(pending)], 1)
                    top_seg = top_seg.topk(top_width, dim=1).values
                    pending = []
                    theta = top_seg.gather(1, depth_col).squeeze(1)
                    threshold = torch.where(
                        has_rel, torch.minimum(best, torch.maximum(lowest, theta)), threshold
                    )
            candidates = torch.nonzero((seg_max >= threshold[:, None]).view(-1)).squeeze(1)
            if candidates.numel() == 0:
                continue
            # Copying each surviving item's row of relevant scores costs about `width` per item;
            # searching the whole block costs about log2(width) per item of the block. Weak
            # models, ties and large classes let nearly every item through: search the block.
            if candidates.numel() * SEGMENT * (width + SPARSE_OVERHEAD) > nb * block_g * (
                width.bit_length() + DENSE_OVERHEAD
            ):
                _count_block(s[:nb], rel_sorted, hist_lt, hist_le, memory_budget)
            else:
                _count_candidates(
                    s[:nb],
                    candidates,
                    threshold,
                    rel_sorted,
                    hist_lt,
                    hist_le,
                    memory_budget,
                )
        hist_le += hist_lt

        # above of the j-th smallest relevant score = items with "count below" > j.
        # As totals minus prefix sums, in place: these are (rows x relevant items) each.
        prefix_lt = hist_lt.view(nb, width).cumsum_(1)
        prefix_le = hist_le.view(nb, width).cumsum_(1)
        above_sorted = prefix_lt[:, -1:] - prefix_lt[:, :-1]
        tied_sorted = (prefix_le[:, -1:] - prefix_le[:, :-1]).sub_(above_sorted)
        del hist_lt, hist_le, prefix_lt, prefix_le
        listed_sorted = rel_sorted >= threshold[:, None]
        # Back from sorted order to the CSR order of the relevant items.
        above = torch.empty_like(above_sorted)
        tied = torch.empty_like(tied_sorted)
        listed = torch.empty_like(listed_sorted)
        above.scatter_(1, rel_perm, above_sorted)
        tied.scatter_(1, rel_perm, tied_sorted)
        listed.scatter_(1, rel_perm, listed_sorted)
        out_above[r_pos] = above[r_row.to(device), r_col.to(device)].cpu()
        out_tied[r_pos] = tied[r_row.to(device), r_col.to(device)].cpu()
        out_listed[r_pos] = listed[r_row.to(device), r_col.to(device)].cpu()

    if mode == "scores":
        return out_scores
    if mode == "count":
        return out_above, out_tied
    if depth is None:
        depth_out = gallery_size.clone()
    elif cover_relevant:
        depth_out = num_relevant.clamp_min(depth)
    else:
        depth_out = torch.full((num_q,), depth, dtype=torch.int64)
    return _table_from_items(
        rel_ptr,
        out_above,
        out_tied,
        out_listed,
        relevance_sets.query_grades,
        num_relevant,
        gallery_size,
        depth_out,
    )


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
        c_row = c_seg.div(segments, rounding_mode="floor")
        # Flat indices throughout: one-dimensional index_select is several times cheaper than
        # indexing with a (row, column) pair.
        values = s.view(-1, SEGMENT).index_select(0, c_seg)
        # Only items at or above the threshold can move a located relevant item.
        keep = values >= threshold.index_select(0, c_row)[:, None]
        hits = torch.nonzero(keep.view(-1)).squeeze(1)
        del keep
        for h0 in range(0, hits.numel(), sub):
            hit = hits[h0 : h0 + sub]
            row = c_row.index_select(0, hit.div(SEGMENT, rounding_mode="floor"))
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
    s: Tensor, rel_sorted: Tensor, hist_lt: Tensor, hist_le: Tensor, memory_budget: int
) -> None:
    """Add every item of the score block ``s`` to the histograms of :func:`_count_candidates`.

    One batched binary search of each row of scores in its own row of ``rel_sorted``: no copy
    per item, O(log m) per item whatever survives. Items below a row's threshold land in bins
    of relevant scores below the threshold, whose counts are never used, so they need no
    filtering. Rows are taken a few at a time so the scratch stays within the budget.
    """
    nb, block_g = s.shape
    m = rel_sorted.shape[1]
    width = m + 1
    elem = s.element_size()
    # Per item: two int32 positions, an int64 gather index, the relevant score found there and
    # a flag; per row: the two histograms bincount returns.
    per_row = block_g * (2 * 4 + 8 + elem + 1) + 2 * width * 8
    rows = max(1, (memory_budget // 4) // per_row)
    for r0 in range(0, nb, rows):
        r1 = min(nb, r0 + rows)
        values, seq = s[r0:r1], rel_sorted[r0:r1]
        lt = torch.searchsorted(seq, values, right=False, out_int32=True)
        at = seq.gather(1, lt.clamp_max(m - 1).to(torch.int64))
        any_tie = bool((at == values).any())
        del at
        offset = torch.arange(r1 - r0, dtype=torch.int32, device=s.device)[:, None] * width
        counts_lt = torch.bincount((lt + offset).view(-1), minlength=(r1 - r0) * width)
        hist_lt[r0 * width : r1 * width] += counts_lt
        if any_tie:
            # Ties (collapsed embeddings, binary codes): the "<=" position of every item; it
            # equals the "<" position wherever the item ties no relevant score.
            le = torch.searchsorted(seq, values, right=True, out_int32=True)
            counts_le = torch.bincount((le + offset).view(-1), minlength=(r1 - r0) * width)
            hist_le[r0 * width : r1 * width] += counts_le - counts_lt


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
) -> RankTable:
    """Sort each query's listed items by (above, -grade) and build the table.

    Items come grouped by query as ``ptr`` says, or in any order with their query in ``row``.
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
        row, above, tied = row[listed], above[listed], tied[listed]
        g = None if g is None else g[listed]
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
            row = torch.repeat_interleave(torch.arange(num_q), ptr.diff())[listed]
            above, tied = above[listed], tied[listed]
            g = None if g is None else g[listed]
            new_ptr = torch.zeros(num_q + 1, dtype=torch.int64)
            torch.cumsum(torch.bincount(row, minlength=num_q), 0, out=new_ptr[1:])
            del row
        q0 = 0
        while q0 < num_q:
            p0 = int(new_ptr[q0])
            q1 = int(torch.searchsorted(new_ptr, p0 + TABLE_CHUNK, right=True)) - 1
            q1 = min(num_q, max(q1, q0 + 1))
            p1 = int(new_ptr[q1])
            if p1 - p0 > 1:
                chunk_row = torch.repeat_interleave(
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
        row = torch.repeat_interleave(torch.arange(ptr.numel() - 1), ptr.diff())
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
    if preds.numel() and not bool(torch.isfinite(preds).all()):
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
        above=table.above[keep],
        tied=table.tied[keep],
        grade=None if table.grade is None else table.grade[keep],
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
    local_query = torch.repeat_interleave(torch.arange(num_q), rel.num_relevant)
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
