"""A gallery sharded over processes: each shard scores its own relevant items
(``schedule.blocked_scores``), the scores are exchanged, and each shard counts its items above
and tied with every one of them (``schedule.blocked_counts``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.csr import ptr_from_counts, row_of_entries
from retrieval_metrics.functional.primitives import to_device
from retrieval_metrics.functional.ranking.embeddings import embedding_relevance, id_codes
from retrieval_metrics.functional.ranking.engine import schedule
from retrieval_metrics.functional.ranking.engine.counters import choose_counter
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.engine.plan import block_sizes
from retrieval_metrics.functional.ranking.engine.product_shape import least_product_columns
from retrieval_metrics.functional.ranking.engine.similarity import score_dtype
from retrieval_metrics.functional.ranking.items import Keys
from retrieval_metrics.functional.ranking.qrels import judged_ideal, with_unretrieved
from retrieval_metrics.functional.ranking.relevance import Relevance
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.functional.ranking.table_build import (
    ItemResults,
    split_judged,
    table_from_items,
)
from retrieval_metrics.functional.table import RankTable


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
    qrels: Mapping[Any, Any] | None = None,
    ignore_identical_ids: bool | None = None,
    relevance: str = "label",
    radius: float | None = 25.0,
    ignore_label: int | None = None,
    similarity: str = "cosine",
    memory_budget: int | None = None,
) -> RankTable:
    """Rank every query against a gallery split over shards; every shard gets the whole table.

    Every shard holds all the queries and its own part of the gallery. Each shard scores its own
    relevant items, the relevant scores of every query are exchanged, each shard counts its items
    above and tied with each of them, and the counts are summed. What crosses between shards is
    O(queries x (D + relevant per query)), whatever the gallery size; the result equals ranking
    against the whole gallery at once. Self-exclusion works by ids only (positions are local).
    ``relevance="qrels"`` takes judgments as ``qrels``, a mapping query id -> document ids or
    -> {document id: grade} read by ``query_ids`` and ``gallery_ids``: the same on every shard,
    each judged document relevant wherever it lies, and relevant and never retrieved where no
    shard holds it (the arguments as in ``rank_embeddings``).
    """
    options = RankingSettings(
        relevance=relevance,
        radius=radius,
        ignore_label=ignore_label,
        similarity=similarity,
        memory_budget=memory_budget,
        qrels=qrels,
        ignore_identical_ids=ignore_identical_ids,
    )
    query_keys = Keys(query_labels, query_ids, query_cameras, query_positions)
    gallery_keys = Keys(gallery_labels, gallery_ids, gallery_cameras, gallery_positions)
    return sharded_table(query, gallery_shard, query_keys, gallery_keys, options, exchange)


def sharded_table(
    query: Tensor,
    gallery_shard: Tensor,
    query_keys: Keys,
    gallery_keys: Keys,
    options: RankingSettings,
    exchange: Exchange,
    *,
    scan: bool = True,
) -> RankTable:
    """:func:`rank_embeddings_sharded` on keys and settings (their ``depth``, ``cover_relevant``
    and ``block_size`` are not read: every relevant item is located, in blocks of the same shape
    on every shard). ``scan=False``: the embeddings are not scanned for NaN again."""
    if options.relevance == "ids":
        # per-query lists name gallery ids that a shard may not hold; judgments say what is
        # relevant by id, whichever shard holds the document
        raise ValueError(
            'the sharded gallery supports relevance="label", "radius" or "qrels" (judgments by '
            'id), not relevance="ids"'
        )
    inputs = embedding_relevance(
        query, gallery_shard, query_keys, gallery_keys, options, scan=scan
    )
    query, gallery_shard, rel = inputs.query, inputs.gallery, inputs.relevance
    num_q = query.shape[0]
    dtype = score_dtype(query, gallery_shard)
    elem = torch.finfo(dtype).bits // 8
    # Every shard must use the same block shapes, so that equal scores stay equal across shards.
    sizes = exchange.max(
        torch.tensor(
            [rel.gallery_index.numel(), int(rel.num_relevant.max()) if num_q else 0],
            dtype=torch.int64,
        )
    )
    dim = query.shape[1] + (1 if options.similarity == "euclidean" else 0)
    block = block_sizes(
        num_q, int(sizes[0]), dim, max(1, 4 * int(sizes[1])), elem, options.budget_on(query.device),
        choose_counter(query.device).block_caps(),
    )
    # (every shard's blocks at least the columns the host's BLAS computes alike: items in them,
    # not the zero columns a narrower block's products would take, product_columns)
    block = (max(1, min(block[0], 1024)),
             max(block[1], least_product_columns(dim, dtype, query.device)))
    blocked = replace(options, depth=None, cover_relevant=False, block_size=block)
    local_scores = schedule.blocked_scores(inputs, blocked)
    local_query = row_of_entries(rel.relevant_ptr)
    sent = [local_query, local_scores.to(torch.float64)]
    judged = rel.unretrieved is not None
    if judged:
        # the grades travel with the scores; the document ids tell a document that two shards
        # hold (counted twice) from two documents
        grades = rel.query_grades
        codes = id_codes(gallery_keys.ids, "gallery_ids")
        assert codes is not None  # (judgments need the gallery's ids)
        sent += [
            codes.cpu()[rel.relevant_index],
            torch.ones(local_query.numel(), dtype=torch.float64) if grades is None else grades,
        ]
    gathered = exchange.gather(sent)
    order = torch.argsort(gathered[0], stable=True)
    all_query, all_scores = gathered[0][order], gathered[1][order].to(dtype)
    num_relevant = torch.bincount(all_query, minlength=num_q)
    ptr = ptr_from_counts(num_relevant)
    above, tied = schedule.blocked_counts(inputs, blocked, (ptr, all_scores))
    local_size = rel.gallery_index.numel() - rel.num_excluded
    # the three per-query sums in one reduce (one collective, one wait for its result)
    parts = [above, tied, local_size]
    summed = exchange.sum(torch.cat([to_device(x, above.device).reshape(-1) for x in parts]))
    above, tied, gallery_size = summed.split([x.numel() for x in parts])
    all_grades = None
    if judged and rel.query_grades is not None:
        all_grades = gathered[3][order]
    table = table_from_items(
        ItemResults(ptr, above, tied, grade=all_grades), num_relevant, gallery_size,
        gallery_size.clone(),
    )
    if judged:
        table = _judged_over_shards(table, rel, all_query, gathered[2][order])
        if options.judged_documents:
            table = split_judged(table, whole_ranking=True)
    q_labels = inputs.query_key
    return replace(table, query_class=q_labels) if q_labels is not None else table


def _judged_over_shards(
    table: RankTable, rel: Relevance, all_query: Tensor, all_documents: Tensor
) -> RankTable:
    """The table of judgments over every shard: each shard knows every judgment of each query
    (found in its shard, or not); a relevant document no shard holds is never retrieved."""
    if all_query.numel() > 1:
        pair = np.lexsort((all_documents.numpy(), all_query.numpy()))
        q, d = all_query[pair], all_documents[pair]
        twice = (q[1:] == q[:-1]) & (d[1:] == d[:-1])
        if bool(twice.any()):
            raise ValueError(
                f"{int(torch.unique(d[1:][twice]).numel())} judged document(s) are held by two "
                "gallery shards (e.g. id code "
                f"{int(d[1:][twice][0])}): with gallery_sharded=True each document must be given "
                "on one process, or with `ids=` so that repeats are dropped"
            )
    assert rel.unretrieved is not None and rel.unretrieved_grades is not None
    judged_relevant = rel.num_relevant + rel.unretrieved  # the same on every shard
    ideal = None
    if rel.query_grades is not None:
        ideal = judged_ideal(
            rel.relevant_ptr, rel.query_grades, rel.unretrieved, rel.unretrieved_grades
        )
    return with_unretrieved(
        table, judged_relevant - table.num_relevant, ideal=ideal, whole_ranking=True
    )
