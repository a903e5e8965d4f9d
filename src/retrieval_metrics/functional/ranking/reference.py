"""The engine's plain reference: the same block products, then a full sort of every score row.

The engine (``schedule``, ``counting``, ``kernels``) never looks at most scores: it prunes
segments below a threshold, counts the survivors item by item or whole blocks by a batched
search, and merges histograms. :func:`rank_by_full_sort` does none of that. It computes every
score, removes each query's exclusions from its row, sorts the row and counts by definition.
``tests/ranking/test_reference_path.py`` checks that every fast path equals it, bit for bit.

Bit for bit needs the same scores, not only the same formula: a float32 product rounds by the
shape it is computed in, so the scores come from products of the engine's shapes and operands,
laid out by the engine's own ``layout.choose_layout``: the one-sided pass multiplies a query
block (rows in processing order, zero rows added up to a multiple of ``PRODUCT_ROWS``) by a
gallery block ``block_g`` columns wide (the last one zero-padded); the symmetric pass computes
``S = A_i A_j^T`` of square zero-padded blocks for ``i <= j`` only, and block ``j``'s queries
read ``S^T``. The layout code (``Direction``, ``plan``, ``prepare``) and the table building are the
engine's own; only the counting is plain. It holds the whole score matrix: meant for tests, not
for use. :class:`ReferenceEngine` plugs it in where the blocked engine would rank.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.ranking.embeddings import embedding_relevance, finish_table
from retrieval_metrics.functional.ranking.engine.direction import Direction, RankingInput
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.engine.fp32 import in_full_fp32
from retrieval_metrics.functional.ranking.engine.layout import Layout, choose_layout
from retrieval_metrics.functional.ranking.engine.plan import product_rows
from retrieval_metrics.functional.ranking.engine.product_shape import (
    least_product_rows,
    product_columns,
    square_product_side,
)
from retrieval_metrics.functional.ranking.engine.similarity import prepare, score_dtype
from retrieval_metrics.functional.ranking.items import KEY_FIELDS, Keys
from retrieval_metrics.functional.ranking.options import RankingEngine
from retrieval_metrics.functional.ranking.relevance import Relevance
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.functional.ranking.table_build import ItemResults, table_from_items
from retrieval_metrics.functional.table import RankTable

__all__ = [
    "ReferenceEngine",
    "full_sort_table",
    "rank_by_full_sort",
    "rank_embeddings_by_full_sort",
]


def _padded(x: Tensor, rows: int) -> Tensor:
    """``x`` with zero rows added up to ``rows`` (the engine's padding of short blocks)."""
    if x.shape[0] >= rows:
        return x
    return torch.cat([x, x.new_zeros(rows - x.shape[0], x.shape[1])])


@in_full_fp32  # as the engine's passes: no TF32 or reduced-precision products
def _blocked_scores(q_mat: Tensor, g_mat: Tensor, order: Tensor, layout: Layout) -> Tensor:
    """Every score, queries and gallery in processing order, from the engine's products."""
    num_q, num_g, bq, bg = q_mat.shape[0], g_mat.shape[0], layout.block_q, layout.block_g
    out = torch.empty(num_q, num_g, dtype=q_mat.dtype)
    device, width, dtype = q_mat.device, q_mat.shape[1], q_mat.dtype
    if layout.symmetric:
        a = g_mat  # the symmetric pass multiplies the gallery matrix by itself
        # (every block padded to the product's side: square_product_side)
        side = square_product_side(bg, width, dtype, device)
        blocks = [_padded(a[i : i + bg], side) for i in range(0, num_g, bg)]
        for j, bj in enumerate(blocks):
            for i in range(j + 1):
                s = torch.mm(blocks[i], bj.T)[:bg, :bg].cpu()
                rows, cols = slice(i * bg, (i + 1) * bg), slice(j * bg, (j + 1) * bg)
                h, w = out[rows, cols].shape
                out[rows, cols] = s[:h, :w]
                if i < j:  # block j's queries read the columns of the same product
                    out[cols, rows] = s.T[:w, :h]
        return out
    # every gallery block as the product's columns (product_columns), zero rows after it
    columns = product_columns(bg, width, dtype, device)
    least = least_product_rows(bq, columns, width, dtype, device)
    for start in range(0, num_q, bq):
        rows = order[start : start + bq]
        q_blk = product_rows(q_mat[rows.to(device)], least)
        for g0 in range(0, num_g, bg):
            g_blk = _padded(g_mat[g0 : g0 + bg], columns)
            s = torch.mm(q_blk, g_blk.T).cpu()
            out[start : start + rows.numel(), g0 : g0 + bg] = s[
                : rows.numel(), : min(bg, num_g - g0)
            ]
    return out


def rank_by_full_sort(
    query: Tensor,
    gallery: Tensor,
    relevance_sets: Relevance,
    *,
    similarity: str = "cosine",
    memory_budget: int | None = None,
    block_size: tuple[int, int] | None = None,
    query_order_key: Tensor | None = None,
    gallery_order_key: Tensor | None = None,
    symmetric: bool = False,
) -> RankTable:
    """The table of ``schedule.blocked_table`` with the same arguments and ``depth=None``,
    by a full sort of every score row (see the module docstring).

    Example:
        >>> from retrieval_metrics.functional.ranking.items import Keys
        >>> from retrieval_metrics.functional.ranking.relevance import build_relevance
        >>> from retrieval_metrics.functional.ranking.settings import RankingSettings
        >>> emb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
        >>> labels = torch.tensor([0, 0, 1, 1])
        >>> rel = build_relevance(Keys(labels=labels), Keys(labels=labels), (4, 4),
        ...                       RankingSettings(), same_source=True)
        >>> table = rank_by_full_sort(emb, emb, rel, query_order_key=labels,
        ...                           gallery_order_key=labels, symmetric=True)
        >>> table.above.tolist(), table.tied.tolist(), table.gallery_size.tolist()
        ([0, 0, 0, 0], [1, 1, 1, 1], [3, 3, 3, 3])
    """
    options = RankingSettings(
        similarity=similarity, memory_budget=memory_budget, block_size=block_size
    )
    inputs = RankingInput(
        query, gallery, relevance_sets, query_order_key, gallery_order_key, symmetric
    )
    return full_sort_table(inputs, options)


def full_sort_table(inputs: RankingInput, options: RankingSettings) -> RankTable:
    """:func:`rank_by_full_sort` of the engine's input and settings (``options.depth`` unread:
    every relevant item is located)."""
    query, gallery, relevance_sets = inputs.query, inputs.gallery, inputs.relevance
    if inputs.symmetric and gallery.shape != query.shape:
        raise ValueError("a same-source ranking ranks the queries against themselves")
    device, dtype = query.device, score_dtype(query, gallery)
    kept = relevance_sets.gallery_index
    if kept.numel() != gallery.shape[0]:
        gallery = gallery[kept.to(device)]
    q_mat, g_mat = prepare(query, gallery, options.similarity, dtype)
    # The engine's processing order; rel_index and ex_index are gallery positions in that order.
    options = replace(options, depth=None, cover_relevant=False)
    side = Direction.make(
        inputs, q_mat.shape[0], g_mat.shape[0], options, device=device, dtype=dtype
    )
    if side.g_perm is not None:
        g_mat = g_mat[side.g_perm.to(device)]
    # the engine's own choice of pass and blocks
    layout = choose_layout(side, inputs, q_mat.shape[1], symmetric=inputs.symmetric)
    by_position = _blocked_scores(q_mat, g_mat, side.order, layout)
    scores = torch.empty_like(by_position)
    scores[side.order] = by_position  # rows back in input order
    num_relevant = side.rel_ptr.diff()
    above = torch.zeros(int(side.rel_ptr[-1]), dtype=torch.int64)
    tied = torch.zeros_like(above)
    for q in range(scores.shape[0]):
        r0, r1 = int(side.rel_ptr[q]), int(side.rel_ptr[q + 1])
        keep = torch.ones(scores.shape[1], dtype=torch.bool)
        keep[side.ex_index[int(side.ex_ptr[q]) : int(side.ex_ptr[q + 1])]] = False
        ranked = torch.sort(scores[q][keep]).values  # ascending; exclusions left out
        relevant = scores[q][side.rel_index[r0:r1]]
        at_most = torch.searchsorted(ranked, relevant, right=True)  # items <= each score
        below = torch.searchsorted(ranked, relevant, right=False)  # items < each score
        above[r0:r1] = ranked.numel() - at_most
        tied[r0:r1] = at_most - below
        if side.tie_key is not None:
            # ties by key: the tied items of a smaller key come first, none shares a place
            key = side.tie_key.cpu()
            rel_key = key[side.rel_index[r0:r1]]
            equal = scores[q][keep][None, :] == relevant[:, None]
            above[r0:r1] += (equal & (key[keep][None, :] < rel_key[:, None])).sum(1)
            tied[r0:r1] = 1
    gallery_size = side.num_g - side.ex_ptr.diff()
    items = ItemResults(side.rel_ptr, above, tied, grade=relevance_sets.query_grades)
    return table_from_items(items, num_relevant, gallery_size, gallery_size.clone())


def rank_embeddings_by_full_sort(
    query: Tensor,
    gallery: Tensor | None = None,
    *,
    similarity: str = "cosine",
    memory_budget: int | None = None,
    block_size: tuple[int, int] | None = None,
    **relevance_args: Any,
) -> RankTable:
    """:func:`rank_embeddings` with ``depth=None``, by :func:`rank_by_full_sort`: the same
    keywords (labels, ids, cameras, positions, ``relevant_ids``, ``relevance``, ``qrels``,
    ``radius``, ``ignore_label``), the same relevance sets, order keys and choice of pass.

    Example:
        >>> from retrieval_metrics.functional.ranking import rank_embeddings
        >>> emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> labels = torch.tensor([0, 1, 0, 1])
        >>> ref = rank_embeddings_by_full_sort(emb, query_labels=labels)
        >>> ref.above.tolist(), ref.tied.tolist()
        ([2, 1, 2, 1], [1, 1, 1, 1])
        >>> torch.equal(ref.above, rank_embeddings(emb, query_labels=labels).above)
        True
    """
    keys = {
        side: Keys(**{name: relevance_args.pop(f"{side}_{name}", None) for name in KEY_FIELDS})
        for side in ("query", "gallery")
    }
    relevant_ids = relevance_args.pop("relevant_ids", None)
    # the rest (relevance, qrels, radius, ignore_label) are settings
    options = RankingSettings(
        similarity=similarity, memory_budget=memory_budget, block_size=block_size, **relevance_args
    )
    inputs = embedding_relevance(
        query, gallery, keys["query"], keys["gallery"], options, relevant_ids
    )
    return finish_table(full_sort_table(inputs, options), inputs, options)


class ReferenceEngine(RankingEngine):
    """The reference path as a :class:`RankingEngine` (``engine=ReferenceEngine()``): its
    :meth:`rank_input` is :func:`full_sort_table`, the relevance sets and the finishing of the
    table are the template's, as for the blocked engine. ``exchange`` is unread: each process
    ranks every query. It holds the whole score matrix: meant for tests."""

    def __repr__(self) -> str:
        return "ReferenceEngine()"

    def rank_input(
        self, inputs: RankingInput, options: RankingSettings, exchange: Exchange | None
    ) -> RankTable:
        return full_sort_table(inputs, options)
