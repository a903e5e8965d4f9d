"""The entry points for embeddings: inputs checked, relevance decided, then the blocked ranking.

:func:`rank_embeddings` checks its inputs and builds the relevance sets
(:func:`embedding_relevance`), then :func:`rank_relevance` hands them to the blocked ranking of
``schedule``. :func:`rank_two_ways` ranks two sets against each other from one pass;
:func:`relevant_scores` and :func:`count_above` are the two halves of the ranking that the
sharded gallery (``sharded``) runs on each shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.checks import all_finite
from retrieval_metrics.functional.ranking.engine import schedule
from retrieval_metrics.functional.ranking.engine.direction import Direction, pairs_with_relevant
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.engine.plan import (
    DEFAULT_MEMORY_BUDGET,
    SEGMENT,
    cache_room,
    checked_block_size,
    square_block,
)
from retrieval_metrics.functional.ranking.engine.similarity import (
    SIMILARITIES,
    prepare,
    score_dtype,
)
from retrieval_metrics.functional.ranking.labels import encode_labels
from retrieval_metrics.functional.ranking.relevance import Relevance, build_relevance
from retrieval_metrics.functional.table import RankTable


def check_embeddings(name: str, x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"`{name}` must be 2-D (items x dimensions), got shape {tuple(x.shape)}")
    if x.is_complex():
        raise ValueError(f"`{name}` must be real, got {x.dtype}")
    if not all_finite(x):
        raise ValueError(f"`{name}` contains NaN or infinite values")
    return x


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
    exchange: Exchange | None = None,
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
        exchange: rank on several processes that all hold these same items, each computing a
            share of the block products (for ``gallery=None``, a share of the symmetric pass's
            block pairs); every process returns the whole table, equal to one process's.
            ``retrieval_metrics.metrics.distributed.DistributedExchange`` is the one over
            ``torch.distributed``; the metric classes use it on synced states.

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
    query, gallery, relevance_sets, q_labels, g_labels = embedding_relevance(
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
        exchange=exchange,
    )
    if q_labels is not None:
        table = replace(table, query_class=q_labels)
    return table


def embedding_relevance(
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
    query = check_embeddings("query", query)
    same_source = gallery is None
    if same_source:
        gallery = query
        gallery_labels = query_labels if gallery_labels is None else gallery_labels
        gallery_ids = query_ids if gallery_ids is None else gallery_ids
        gallery_cameras = query_cameras if gallery_cameras is None else gallery_cameras
        gallery_positions = query_positions if gallery_positions is None else gallery_positions
    else:
        gallery = check_embeddings("gallery", gallery)
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
    exchange: Exchange | None = None,
) -> RankTable:
    """Blocked ranking of ``query`` against the kept gallery of ``relevance_sets``.

    ``query_order_key`` and ``gallery_order_key`` (e.g. labels; the latter aligned with the kept
    gallery) only change the order in which items are processed, so that each query block's
    relevant items sit in one or two gallery blocks; results come back in input order.
    ``same_source``: ``gallery`` holds the queries themselves (the caller says so), so the score
    matrix is symmetric and each block pair may serve the queries of both of its sides.
    ``exchange``: several processes hold these items and share the ranking out (see
    :func:`rank_embeddings`).
    """
    return schedule.blocked_ranking(
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
        exchange=exchange,
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
    return schedule.blocked_ranking(
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
    return schedule.blocked_ranking(
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
    a, b, rel_ab, a_key, b_key = embedding_relevance(
        a, b, query_labels=a_labels, gallery_labels=b_labels, **common
    )
    _, _, rel_ba, _, _ = embedding_relevance(
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
        checked_block_size(squares)
    device = a.device
    dtype = score_dtype(a, b)
    elem = torch.finfo(dtype).bits // 8
    sides = []
    if (
        a.shape[0]
        and b.shape[0]
        and schedule.one_product(similarity, squares, rel_ab, b.shape[0])
        and schedule.one_product(similarity, squares, rel_ba, a.shape[0])
    ):
        a_mat, b_mat = prepare(a, b.to(device), similarity, dtype)
        for rel, keys, num in (
            (rel_ab, (a_key, b_key), a_mat.shape[0]),
            (rel_ba, (b_key, a_key), b_mat.shape[0]),
        ):
            sides.append(
                Direction.make(
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
            block = square_block(
                max(a_mat.shape[0], b_mat.shape[0]), elem, memory_budget, device
            )
            # Each block of one side needs the relevant scores of many pairs before it counts
            # its first: half-size blocks when that keeps every such product for its counting.
            half = block // 2 // SEGMENT * SEGMENT
            if (
                half >= 512
                and pairs_with_relevant(sides, block) > cache_room(memory_budget, block, dtype)
                and pairs_with_relevant(sides, half) <= cache_room(memory_budget, half, dtype)
            ):
                block = half
        else:
            block = block_size
        state = sum(s.state_bytes(block, elem) for s in sides)
        if state <= memory_budget // 4:
            a_mat = a_mat[sides[1].g_perm.to(device)] if sides[1].g_perm is not None else a_mat
            b_mat = b_mat[sides[0].g_perm.to(device)] if sides[0].g_perm is not None else b_mat
            room = cache_room(memory_budget - 2 * state, block, dtype)
            schedule.two_sided_pass(sides[0].at(block), sides[1].at(block), a_mat, b_mat, room)
            return sides[0].result(rel_ab), sides[1].result(rel_ba)
    # Euclidean scores (not one product for both directions), or states too large: two passes.
    return (
        rank_relevance(a, b, rel_ab, query_order_key=a_key, gallery_order_key=b_key, **options),
        rank_relevance(b, a, rel_ba, query_order_key=b_key, gallery_order_key=a_key, **options),
    )
