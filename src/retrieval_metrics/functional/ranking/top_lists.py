"""Each query's K best gallery items, exactly, in bounded memory: what a run file lists.

The ranking elsewhere counts, per relevant item, the items above it; a run names the items
themselves. :func:`top_k` computes the scores a block of queries x a block of the gallery at a
time (the matrices of ``engine.similarity.prepare``: the scores every measure of this library
reads) and keeps each query's K best so far, so its memory is a few blocks whatever the gallery.

Ties are broken by a key per gallery item, smaller first: the item's place in the gallery by
default, or the ids' order (``ties="id"``, as sentence-transformers orders tied documents).
The K-th place goes to the tied item of the smallest key, never to whichever a sort left
there, so the list is the same for every block size and device.

Every product has the shape the ranking's products have (``engine.plan``): whole panels of
:data:`~retrieval_metrics.functional.ranking.engine.plan.PRODUCT_COLUMNS` gallery columns, the
last block padded, and query rows padded to a multiple of ``PRODUCT_ROWS``, and to at least the
rows the host's BLAS computes alike (``plan.least_product_rows``). A BLAS rounds a
score by the kernel its row and column panel fell in, so otherwise two copies of a document, one
in a whole block and one in the narrower last block, got scores a unit in the last place apart
and were listed out of their tie order (and a query's scores depended on how many queries were
listed with it).

On an accelerator (a counter with ``whole_blocks``) the blocks are the ranking's for the device's
budget, half-precision rows go to its tensor cores as the ranking's do (``tensor_cores``), and
the lists are kept with no host read per block (``running_best.UnwaitedBest``; the query blocks
where a cut may fall in a tie listed again, the tied columns taken smallest first): a fixed
handful of host syncs a call, whatever the number of blocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.csr import row_of_entries
from retrieval_metrics.functional.primitives import flat_nonzero, to_device
from retrieval_metrics.functional.ranking.corpus import as_corpus, as_embeddings
from retrieval_metrics.functional.ranking.engine.counters import Counter, choose_counter
from retrieval_metrics.functional.ranking.engine.fp32 import full_fp32_products
from retrieval_metrics.functional.ranking.engine.plan import (
    PRODUCT_COLUMNS,
    block_sizes,
    product_row_count,
    product_rows,
)
from retrieval_metrics.functional.ranking.engine.product_shape import (
    least_product_rows,
    product_columns,
)
from retrieval_metrics.functional.ranking.engine.running_best import (
    RunningBest,
    UnwaitedBest,
    running_lists,
)
from retrieval_metrics.functional.ranking.engine.similarity import (
    gallery_in_blocks,
    prepare,
    prepare_query,
    score_dtype,
    stands,
)
from retrieval_metrics.functional.ranking.engine.tensor_cores import block_product, prepare_half
from retrieval_metrics.functional.ranking.labels import label_codes
from retrieval_metrics.functional.ranking.relevance import identical_ids_csr
from retrieval_metrics.functional.ranking.row_batches import RowBatches, padded_block
from retrieval_metrics.functional.ranking.settings import memory_budget_on
from retrieval_metrics.functional.ranking.tie_order import id_order_rows, order_ranks

__all__ = ["TopK", "top_k"]

TIES = ("position", "id")
#: gallery ids made codes at once, for the items of a query's id
ID_CHUNK = 1 << 16
#: gallery items scored at once per query (the block's columns: whole product panels; a
#: narrower setting is still multiplied at a whole panel's width, see padded_block)
BLOCK_G = 21 * PRODUCT_COLUMNS
#: scores computed at once, per query block x gallery block (float32: 64 MiB)
BLOCK_ENTRIES = 1 << 24


@dataclass(frozen=True)
class TopK:
    """``indices``: ``(Q, k')`` gallery rows, best first, ``k' = min(k, N)`` (``N - 1`` for a
    set ranked against itself; -1 where a query has fewer items to list); ``scores``: their
    scores (-inf there). Euclidean scores are the ranking's, ``2 q.g - |g|^2``: the negative
    squared distance shifted by the query's ``|q|^2`` (the same shift for all of a query's
    items), in the order of the ranking exactly."""

    indices: Tensor
    scores: Tensor

    def run(self, query_ids: Any, gallery_ids: Any) -> dict[str, list[tuple[str, float]]]:
        """As a run: query id -> its (document id, score) pairs, best first, ids as text
        (what :func:`retrieval_metrics.formats.write_run` writes)."""
        return dict(self.lines(query_ids, gallery_ids))

    def lines(
        self, query_ids: Any, gallery_ids: Any
    ) -> Iterator[tuple[str, list[tuple[str, float]]]]:
        """:meth:`run`'s entries one query at a time (for ``formats.write_run_lines``): only
        the ids listed are made text (a corpus's million ids are not)."""
        queries = _texts(query_ids)
        if len(queries) != self.indices.shape[0]:
            raise ValueError(
                f"`query_ids` must have one id per query ({self.indices.shape[0]}), got "
                f"{len(queries)}"
            )
        if len(queries) != len(set(queries)):
            raise ValueError("`query_ids` name a query twice: a run lists each query once")
        indices = self.indices.cpu()
        listed = (indices >= 0).numpy()
        texts = id_texts(gallery_ids, indices.numpy()[listed])
        yield from zip(queries, listed_pairs(texts, self.scores.cpu().numpy(), listed),
                       strict=True)


def top_k(
    query: Tensor,
    gallery: Any,
    k: int,
    *,
    similarity: str = "cosine",
    ties: str = "position",
    query_ids: Any = None,
    gallery_ids: Any = None,
    exclude_identical_ids: bool = False,
    tie_keys: Tensor | None = None,
    excluded: tuple[Tensor, Tensor] | None = None,
    memory_budget: int | None = None,
) -> TopK:
    """The ``k`` best gallery items of every query, best first, and their scores.

    The scores are those the ranking of this library ranks by (float32 for float32 and half
    precision embeddings, float64 for float64). On an accelerator, half-precision rows are
    multiplied as stored on its tensor cores (float32 sums of their exact products, cosine's
    norms applied per pair after each product), blocks are sized to its free memory, and the
    lists are kept with no wait for the device per block. Memory: a few blocks of scores,
    whatever the gallery's size.

    Args:
        query: ``(Q, D)`` embeddings (a tensor or a numpy array).
        gallery: ``(N, D)`` embeddings in any form ``set_gallery`` takes: a tensor, a numpy
            array, or a corpus on disk (a ``.npy`` path, a glob or a list of them, memory-mapped
            arrays), read a block at a time and never whole; None ranks the queries against
            each other, each query never listing itself. A corpus on disk is read onto the
            queries' device; one held in another device's memory is listed there (as the
            ranking ranks it), the lists returned on the queries' device.
        k: how many items a query lists.
        similarity: ``"cosine"``, ``"dot"`` or ``"euclidean"`` (listed by distance; the score
            is ``2 q.g - |g|^2 = |q|^2 - |q - g|^2``, the ranking's: subtracting ``|q|^2``
            in float32 would tie near-copies the ranking tells apart).
        ties: ``"position"`` (tied items in gallery order) or ``"id"`` (in the order of their
            ids: integers by value, strings by code point, as ``ties="id"`` ranks them).
        query_ids: a sequence or 1-D integer tensor, one id per query.
        gallery_ids: a sequence or 1-D integer tensor, one id per gallery item.
        exclude_identical_ids: a gallery item whose id is the query's is not listed (BEIR's
            ``ignore_identical_ids``; with ``gallery=None``, items sharing the query's id).
        tie_keys: int64, one per gallery item: tied items by ascending key, in place of
            ``ties`` (the metric classes pass the ids' order they keep).
        excluded: ``(query rows, gallery rows)``, int64 of one length: pairs never listed,
            besides the above (the metric classes pass the pairs their ranking leaves out:
            the items of a query's label and camera, in re-identification).
        memory_budget: bytes of scratch the blocks may take; None: on the CPU blocks of 64 MiB
            of scores, on an accelerator the budget a ranking there takes (a share of its free
            memory). The lists do not depend on it.

    >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> g = torch.tensor([[1.0, 1.0], [1.0, 0.0], [2.0, 2.0], [0.0, 1.0]])
    >>> top_k(q, g, 3).indices.tolist()      # (items 0 and 2 tie: in gallery order)
    [[1, 0, 2], [3, 0, 2]]
    >>> top_k(q, g, 3, ties="id", gallery_ids=["d", "c", "b", "a"]).indices.tolist()
    [[1, 2, 0], [3, 2, 0]]
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"`k` must be a positive int, got {k!r}")
    if ties not in TIES:
        raise ValueError(f"`ties` must be one of {TIES}, got {ties!r}")
    same = gallery is None
    query = as_embeddings("query", query)
    # (a corpus on disk: read a block at a time, its judged rows alone)
    items = query if gallery is None else as_corpus("gallery", gallery)
    if isinstance(items, RowBatches) and items.on_disk:
        # streamed to the queries' device (a GPU's) a chunk at a time, as the ranking streams it
        items = items.onto(query.device)
    elif items.device != query.device:
        # a gallery held in another device's memory (a corpus in the host's beside queries on a
        # GPU): listed where it lies, as the ranking ranks it there (``options.rank``), so that
        # a run lists the scores the ranking counted; the lists come back to the queries' device
        listed = top_k(
            query.to(items.device), items, k, similarity=similarity, ties=ties,
            query_ids=query_ids, gallery_ids=gallery_ids,
            exclude_identical_ids=exclude_identical_ids, tie_keys=tie_keys, excluded=excluded,
            memory_budget=memory_budget,
        )
        return TopK(listed.indices.to(query.device), listed.scores.to(query.device))
    if items.shape[1] != query.shape[1]:
        raise ValueError(
            f"`gallery` must have {query.shape[1]} columns, the width of `query`, got "
            f"{items.shape[1]}"
        )
    num_q, num_g = query.shape[0], items.shape[0]
    item_ids = query_ids if same else gallery_ids
    if item_ids is not None and len(item_ids) != num_g:
        # (also where nothing orders or excludes by them: the ids name the listed items)
        name = "query_ids" if same else "gallery_ids"
        raise ValueError(
            f"`{name}` must hold one id per gallery item ({num_g}), got {len(item_ids)}"
        )
    if tie_keys is not None:
        key = torch.as_tensor(tie_keys, dtype=torch.int64).cpu()
        if key.shape != (num_g,):
            raise ValueError(f"`tie_keys` must hold one key per gallery item ({num_g})")
    elif ties == "id":
        if item_ids is None:
            raise ValueError('ties="id" orders tied items by their ids: give `gallery_ids`')
        key = order_ranks(id_order_rows(item_ids, "gallery_ids"))
        if key.shape != (num_g,):
            name = "query_ids" if same else "gallery_ids"
            raise ValueError(
                f"`{name}` must hold one id per gallery item ({num_g}), got {key.numel()}"
            )
    else:
        key = None  # the gallery's order
    # the gallery in key order: the columns of every block are then in tie order
    # (None: the gallery's own order, no index of it made)
    columns = None if key is None else torch.argsort(key, stable=True)
    excluded_given = excluded  # (as given: for the listing again below)
    excluded = _excluded(
        num_q, num_g, same, query_ids, item_ids, exclude_identical_ids, excluded
    )
    dtype = score_dtype(query, items)
    in_order = columns is None or bool(torch.equal(columns, torch.arange(num_g)))
    # a gallery in its own order is read a block at a time where that needs no copy of it (a
    # corpus in batches or on disk, for cosine and dot): never joined, normalised or upcast
    batches = items if isinstance(items, RowBatches) else RowBatches([items])
    counter = choose_counter(query.device)  # (how a block's entering items are found)
    g_blocks = None
    # half rows on an accelerator's tensor cores, as the ranking multiplies them (float32 sums
    # of the exact products), each score a true cosine (rows_scaled: a run lists its scores);
    # None where a norm is out of bounds, or elsewhere: the float32 matrices
    half_prepared = prepare_half(
        query, items if same else batches, similarity, None if in_order else columns,
        rows_scaled=True,
    ) if counter.multiplies_half(query.dtype, batches.stored_dtype) else None
    half = None
    if half_prepared is not None:
        q_mat, g_mat, half = half_prepared
        half = replace(half, fused=counter.fuses_pair_factors)
    elif in_order and not same and (
        g_blocks := gallery_in_blocks(batches, similarity, dtype)
    ) is not None:
        q_mat, g_mat = prepare_query(query, similarity, dtype), g_blocks
    else:
        if columns is None:
            columns = torch.arange(num_g)
        q_mat, g_mat = prepare(query, items, similarity, dtype, gallery_rows=columns)
    assert q_mat is not None
    device = q_mat.device
    if excluded is not None and columns is not None:
        # as columns of the gallery in key order
        place = torch.empty_like(columns)
        place[columns] = torch.arange(num_g)
        excluded = (excluded[0], place.index_select(0, excluded[1]))
    width = min(k, num_g - same)  # (a query never lists itself)
    if width <= 0:
        empty_rows = torch.empty((num_q, 0), dtype=torch.int64, device=query.device)
        return TopK(empty_rows, empty_rows.to(score_dtype(query, items)))
    best_scores = torch.empty((num_q, width), dtype=dtype, device=device)
    best_cols = torch.empty((num_q, width), dtype=torch.int64, device=device)
    block_q, block_g = _block_sizes(counter, num_q, num_g, q_mat.shape[1], width, dtype,
                                    memory_budget)
    # every product this many columns wide, the last block's (and a narrower block's) padded
    # (a half product: as wide as the ranking's, the block itself)
    width_g = block_g if half is not None else product_columns(
        block_g, q_mat.shape[1], dtype, device
    )
    buffer = torch.zeros(width_g, q_mat.shape[1], dtype=g_mat.dtype, device=device)
    # a block's scores and masks, reused block after block
    # (the rows of the ranking's products: a query's scores alike whichever come with it)
    least = least_product_rows(block_q, width_g, q_mat.shape[1], q_mat.dtype, device)
    s_flat = torch.empty(product_row_count(block_q, least) * width_g, dtype=dtype,
                         device=device)
    # (RunningBest's; an accelerator's lists, UnwaitedBest, take none)
    masks = None if counter.whole_blocks else torch.empty(
        3 * block_q * block_g, dtype=torch.bool, device=device
    )
    # (cosine's factors per pair of a half product, written out block by block)
    work = torch.empty_like(s_flat) if half is not None and half.needs_work else None

    def listed(q0: int, q1: int, best: RunningBest | UnwaitedBest) -> None:
        """The lists of queries ``q0:q1``, every gallery block added to ``best``."""
        q_block = product_rows(q_mat[q0:q1], least)
        for g0 in range(0, num_g, block_g):
            g1 = min(num_g, g0 + block_g)
            g_block = padded_block(g_mat, g0, g1, buffer)
            rows = q_block.shape[0]
            out = s_flat[: rows * width_g].view(rows, width_g)
            if half is None:
                product = torch.mm(q_block, g_block.T, out=out)[: q1 - q0]
            else:
                product = block_product(
                    q_block, g_block, out, half, half.rows(half.a_factor, slice(q0, q1), rows),
                    half.rows(half.b_factor, slice(g0, g1), width_g), work,
                )[: q1 - q0]
            s = product[:, : g1 - g0]
            if excluded is not None:
                _mask(s, excluded, q0, q1, g0, g1)
            best.add(s, g0, masks, product)
        best_scores[q0:q1], best_cols[q0:q1] = best.lists()

    with full_fp32_products():
        unsure = []
        for q0 in range(0, num_q, block_q):
            q1 = min(num_q, q0 + block_q)
            best = running_lists(q1 - q0, width, dtype, device, counter)
            listed(q0, q1, best)
            if isinstance(best, UnwaitedBest):
                unsure.append(best.unsure.any())
        if unsure:
            # (the one wait of a listing on an accelerator: which query blocks hold a row
            # whose lists may break a tie otherwise than the tie order; listed again, exactly)
            again = torch.stack(unsure).tolist()
            for q0, redo in zip(range(0, num_q, block_q), again, strict=True):
                if redo:
                    q1 = min(num_q, q0 + block_q)
                    listed(q0, q1, UnwaitedBest(q1 - q0, width, dtype, device, exact=True))
    if g_mat is g_blocks and not stands(g_blocks):
        # the norms computed as the rows were read ask for another path (a non-zero row too
        # short for its squares, whose unit row is rescaled on a copy; finite values whose
        # squares overflow, read as zeros so far): listed again, the norms known now
        return top_k(
            query, batches, k, similarity=similarity, ties=ties, query_ids=query_ids,
            gallery_ids=gallery_ids, exclude_identical_ids=exclude_identical_ids,
            tie_keys=tie_keys, excluded=excluded_given, memory_budget=memory_budget,
        )
    indices = best_cols if columns is None else (
        to_device(columns, device).index_select(0, best_cols.view(-1)).view(best_cols.shape))
    empty = torch.isneginf(best_scores)
    # (euclidean: the ranking's score 2 q.g - |g|^2 as it is. Shifted by |q|^2 to the negative
    # squared distance and clamped at 0, near-copies of a query were written tied at 0.0 where
    # the ranking told them apart, and a reader of the run re-sorted them)
    best_scores = best_scores.masked_fill(empty, float("-inf"))
    return TopK(indices.masked_fill(empty, -1), best_scores)


def _block_sizes(
    counter: Counter, num_q: int, num_g: int, dim: int, width: int, dtype: torch.dtype,
    memory_budget: int | None,
) -> tuple[int, int]:
    """top_k's query and gallery blocks. On the CPU without a budget, :data:`BLOCK_G` items and
    :data:`BLOCK_ENTRIES` scores (blocks its caches hold). On an accelerator, or under a
    ``memory_budget``, the ranking's blocks (``plan.block_sizes``) for the budget a ranking on
    that device takes (``settings.memory_budget_on``: a share of an accelerator's free memory),
    each query's lists (``2 width`` scores and columns at a merge) counted as its relevant
    pairs: 256 MiB of scores a block left a GPU's products a few milliseconds each and its
    Python steps the time."""
    if memory_budget is None and not counter.whole_blocks:
        block_g = max(1, min(num_g, BLOCK_G))
        width_g = product_columns(block_g, dim, dtype, counter.device)
        return max(1, min(num_q, BLOCK_ENTRIES // width_g)), block_g
    elem = torch.finfo(dtype).bits // 8
    budget = memory_budget_on(memory_budget, counter.device)
    return block_sizes(num_q, num_g, dim, 2 * width, elem, budget, counter.block_caps())


def _excluded(
    num_q: int, num_g: int, same: bool, query_ids: Any, gallery_ids: Any, identical: bool,
    given: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor] | None:
    """The (query row, gallery row) pairs never listed: a query itself (same source), with
    ``identical`` the items whose id is the query's, and the pairs ``given``; None for none."""
    pairs = []
    if given is not None:
        rows, cols = (torch.as_tensor(x, dtype=torch.int64).cpu().reshape(-1) for x in given)
        if rows.shape != cols.shape or (rows.numel() and not (
            0 <= int(rows.min()) and int(rows.max()) < num_q
            and 0 <= int(cols.min()) and int(cols.max()) < num_g
        )):
            raise ValueError(
                f"`excluded` must be (query rows, gallery rows) of one length, within {num_q} "
                f"queries and {num_g} gallery items"
            )
        pairs.append((rows, cols))
    if same:
        pairs.append((torch.arange(num_q), torch.arange(num_q)))
    if identical:
        if query_ids is None or gallery_ids is None:
            raise ValueError("exclude_identical_ids=True needs `query_ids` and `gallery_ids`")
        # (on the host, as every block's mask reads them, whatever device the ids came on)
        q_codes = label_codes(query_ids, "query_ids").cpu()
        g_rows, g_codes, num_ids = _among(gallery_ids, q_codes)
        if q_codes.numel() != num_q or num_ids != num_g:
            raise ValueError(
                f"`query_ids` and `gallery_ids` must have one id per item ({num_q} and {num_g}), "
                f"got {q_codes.numel()} and {num_ids}"
            )
        ptr, index = identical_ids_csr(q_codes, g_codes)
        pairs.append((row_of_entries(ptr), g_rows.index_select(0, index)))
    if not pairs:
        return None
    return torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])


def _among(ids: Any, codes: Tensor) -> tuple[Tensor, Tensor, int]:
    """The gallery items whose id is among ``codes`` (the queries' id codes): their rows and
    codes, and how many ids ``ids`` holds; read :data:`ID_CHUNK` ids at a time (a million
    corpus ids' codes at once, and their sort, took 46 MB)."""
    wanted = torch.unique(codes)
    rows, found, count = [], [], 0
    if isinstance(ids, Tensor) and ids.dim() != 1:
        ids = ids.reshape(-1)
    for start in range(0, len(ids), ID_CHUNK):
        chunk = label_codes(ids[start : start + ID_CHUNK], "gallery_ids").cpu()
        at = torch.searchsorted(wanted, chunk).clamp_max(max(0, wanted.numel() - 1))
        hit = flat_nonzero(wanted[at] == chunk) if wanted.numel() else chunk[:0]
        rows.append(hit + start)
        found.append(chunk.index_select(0, hit))
        count += chunk.numel()
    if not rows:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 0
    return torch.cat(rows), torch.cat(found), count


def _mask(s: Tensor, excluded: tuple[Tensor, Tensor], q0: int, q1: int, g0: int, g1: int) -> None:
    rows, cols = excluded
    inside = (rows >= q0) & (rows < q1) & (cols >= g0) & (cols < g1)
    if bool(inside.any()):
        # (the indices sent without waiting and -inf made on the device: a blocking copy of
        # either waited for the device at every block)
        at = (to_device(rows[inside] - q0, s.device), to_device(cols[inside] - g0, s.device))
        s.index_put_(at, torch.full((1,), float("-inf"), dtype=s.dtype, device=s.device))


def _texts(ids: Any) -> list[str]:
    values = ids.tolist() if isinstance(ids, (Tensor, np.ndarray)) else list(ids)
    return [str(v) for v in values]


def listed_pairs(
    texts: list[str], scores: np.ndarray, listed: np.ndarray
) -> Iterator[list[tuple[str, float]]]:
    """Each row's ``(text, score)`` pairs in order: ``listed`` (rows x k, bool) marks the
    entries a row lists, ``texts`` names them row after row (every listed entry made text at
    once, not an entry at a time), ``scores`` is rows x k."""
    kept = scores[listed].tolist()
    start = 0
    for count in listed.sum(1).tolist():
        yield list(zip(texts[start : start + count], kept[start : start + count], strict=True))
        start += count


def id_texts(ids: Any, rows: np.ndarray) -> list[str]:
    """The text of ``ids[row]`` for each of ``rows`` (int64): ``str`` of the id, a number of
    numpy or torch by its Python value. An array or a tensor of integers or of str, and a
    sequence of str, in a few vectorised steps (a run of a million entries: a conversion per
    entry took seconds); any other ids one at a time."""
    if isinstance(ids, Tensor):
        ids = ids.cpu().numpy()
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iuU":
        return ids[rows].astype(str).tolist()
    picked = [ids[row] for row in rows.tolist()]
    if all(type(value) is str for value in picked):
        return picked
    return [str(value.item() if hasattr(value, "item") else value) for value in picked]
