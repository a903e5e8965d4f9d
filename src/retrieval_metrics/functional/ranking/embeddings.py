"""The entry points for embeddings: inputs checked, relevance decided, then the blocked ranking.

:func:`rank_embeddings`, :func:`rank_two_ways` and :func:`rank_relevance` take keywords; each
makes one :class:`~retrieval_metrics.functional.ranking.settings.RankingSettings` and one
:class:`~retrieval_metrics.functional.ranking.items.Keys` per side at its boundary and hands
them down whole. :func:`embedding_relevance` checks the embeddings and keys and builds the
relevance sets (a :class:`~retrieval_metrics.functional.ranking.engine.direction.RankingInput`),
an engine ranks it (:func:`ranked_table`: the blocked ranking of ``engine/schedule``) and
:func:`finish_table` finishes the table, the same for every engine; and
:func:`two_way_tables` ranks two sets against each other from one pass (each table finished by
:func:`finish_table` too). ``scan=False`` skips the
scan for NaN and infinities where the caller has made it already (the metric classes, at
``update``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import all_finite
from retrieval_metrics.functional.ranking.engine import schedule
from retrieval_metrics.functional.ranking.engine.direction import RankingInput
from retrieval_metrics.functional.ranking.engine.exchange import Exchange
from retrieval_metrics.functional.ranking.items import Keys
from retrieval_metrics.functional.ranking.labels import encode_labels, label_codes
from retrieval_metrics.functional.ranking.qrels import judged_ideal, with_unretrieved
from retrieval_metrics.functional.ranking.relevance import Relevance, build_relevance
from retrieval_metrics.functional.ranking.relevance.rules import as_positions
from retrieval_metrics.functional.ranking.row_batches import RowBatches
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.functional.ranking.table_build import split_judged
from retrieval_metrics.functional.ranking.tie_order import id_order_rows, order_ranks
from retrieval_metrics.functional.table import RankTable

__all__ = [
    "check_embeddings",
    "embedding_relevance",
    "finish_table",
    "id_codes",
    "rank_embeddings",
    "rank_relevance",
    "rank_two_ways",
    "ranked_table",
    "two_way_tables",
]


def check_embeddings(name: str, x: Tensor, *, scan: bool = True) -> Tensor:
    """``x`` if it is a real 2-D tensor of finite values, else a ValueError naming ``name``.

    ``scan=False``: the values are not scanned for NaN and infinities (the caller has done it:
    the metric classes scan every batch as it arrives); the shape and dtype are checked still.
    The metric classes also pass a corpus held in batches (:class:`RowBatches`) as it is; one
    whose scan is put off (``RowBatches.check_when_read``: a corpus on disk) is scanned as the
    ranking first reads it.
    """
    if not isinstance(x, (Tensor, RowBatches)):
        raise ValueError(f"`{name}` must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"`{name}` must be 2-D (items x dimensions), got shape {tuple(x.shape)}")
    if x.shape[1] == 0:
        # (every score would be 0: nothing to rank by)
        raise ValueError(f"`{name}` must have at least one dimension, got shape {tuple(x.shape)}")
    if x.is_complex():
        raise ValueError(f"`{name}` must be real, got {x.dtype}")
    if isinstance(x, RowBatches):
        # (rows whose scan is put off to their first read: made then, by their norms)
        scan, finite = scan and x.checked, x.all_finite
    else:
        finite = lambda: all_finite(x)  # noqa: E731
    if scan and not finite():
        raise ValueError(f"`{name}` contains NaN or infinite values")
    if isinstance(x, Tensor) and x.requires_grad:
        # (a model's output outside no_grad: nothing here is differentiated, and the products
        # write into buffers, which autograd refuses; a view, no copy)
        return x.detach()
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
    qrels: Mapping[Any, Any] | None = None,
    ignore_identical_ids: bool | None = None,
    relevance: str = "label",
    radius: float | None = 25.0,
    ignore_label: int | None = None,
    similarity: str = "cosine",
    depth: int | None = None,
    cover_relevant: bool = False,
    locate_first: bool = True,
    memory_budget: int | None = None,
    block_size: tuple[int, int] | None = None,
    exchange: Exchange | None = None,
    ties_by_id: bool = False,
) -> RankTable:
    """Rank the gallery for every query and record where the relevant items landed.

    With ``gallery=None`` every item is a query against all the others ("same source") and never
    retrieves itself (matched by ``query_ids`` when given, else by position).

    Args:
        query: ``(Q, D)`` embeddings on any device; half precision is scored in float32 (the
            float32 scores of the stored numbers), float64 in float64.
        gallery: ``(N, D)`` embeddings, as ``query``; None: the queries themselves.
        relevance: ``"label"``, ``"radius"`` (with positions), ``"qrels"`` (with ``qrels``) or
            ``"ids"`` (with ``relevant_ids``).
        relevant_ids: for ``relevance="ids"``, one collection of gallery ids (or a dict id ->
            grade) per query. A grade <= 0 is not relevant.
        qrels: for ``relevance="qrels"``, judgments: a mapping query id -> gallery ids or ->
            {gallery id: grade}, read by ``query_ids`` (``gallery_ids`` needed), where a judged
            id the gallery lacks is relevant and never retrieved. A grade <= 0 is not relevant.
        ignore_identical_ids: exclude the gallery item whose id equals the query's id (None,
            the default, or True); False ranks it as any other item.
        similarity: ``"cosine"`` (default), ``"dot"`` or ``"euclidean"``. The cosine of a zero
            vector with anything (a zero vector included) is 0: a zero query ties every gallery
            item, and a zero gallery item ties every item whose cosine with the query is exactly
            0. Any non-zero vector, however short, counts by its direction only (up to the
            rounding of its unit vector: parallel rows of different lengths may not tie).
        depth: if given, only relevant items within the top ``depth`` positions (and each query's
            best relevant item) are located exactly; the others are recorded as lying deeper. Enough
            for hit rate, precision, recall and NDCG with ``depth`` >= their cut-off.
        cover_relevant: with ``depth``, locate exactly every relevant item within the top
            max(depth, m_q) positions (R-precision, MAP@R).
        locate_first: with ``depth``, also locate each query's best relevant item wherever it
            lies (default: MRR, CMC and the ranks without a cut-off read it). False when every
            measure has a cut-off of at most ``depth``: a query whose relevant items all lie
            deeper then lists none, and on the CPU stops being ranked once that is known (a
            measure of the best relevant item deeper than ``depth`` then refuses the table).
        memory_budget: bytes of scratch memory the ranking may use, beyond the embeddings and
            its outputs (the table, and until it returns the relevance sets and per-pair results
            it is built from); the normalised copy of the embeddings counts in it. None: 256
            MiB on the CPU, a quarter of an accelerator's free memory (at most 32 GiB).
        block_size: ``(queries, gallery items)`` per block, overriding the choice made from
            ``memory_budget`` (the gallery block must be a multiple of 64). Results do not depend
            on it: a block narrower than the matrix-product library computes alike is multiplied
            with zero columns after it (see the ties section of definitions.md).
        exchange: rank on several processes that all hold these same items, each computing a
            share of the block products (for ``gallery=None``, a share of the symmetric pass's
            block pairs); every process returns the whole table, equal to one process's.
            ``retrieval_metrics.metrics.distributed.DistributedExchange`` is the one over
            ``torch.distributed``; the metric classes use it on synced states.
        ties_by_id: place gallery items that tie a relevant item's score in ascending order of
            ``gallery_ids`` as given (Python's order: strings by code point, integers by
            value), as sentence-transformers 6.x does, instead of letting them share their
            places; the table then has no ties (every ``tied`` is 1). Needs ``gallery``.

    Returns:
        A :class:`RankTable`, queries in input order.

    Example:
        >>> import torch
        >>> emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> table = rank_embeddings(emb, query_labels=torch.tensor([0, 0, 1, 1]))
        >>> table.above.tolist(), table.num_relevant.tolist()
        ([0, 0, 0, 0], [1, 1, 1, 1])
    """
    options = RankingSettings(
        relevance=relevance,
        radius=radius,
        ignore_label=ignore_label,
        similarity=similarity,
        memory_budget=memory_budget,
        depth=depth,
        cover_relevant=cover_relevant,
        locate_first=locate_first,
        block_size=block_size,
        qrels=qrels,
        ignore_identical_ids=ignore_identical_ids,
    )
    query_keys = Keys(query_labels, query_ids, query_cameras, query_positions)
    if ties_by_id and gallery_ids is None:
        raise ValueError("`ties_by_id=True` orders tied gallery items by `gallery_ids`: give them")
    gallery_keys = Keys(
        gallery_labels, gallery_ids, gallery_cameras, gallery_positions,
        gallery_ids if ties_by_id else None,
    )
    inputs = embedding_relevance(query, gallery, query_keys, gallery_keys, options, relevant_ids)
    return ranked_table(inputs, options, exchange)


def ranked_table(
    inputs: RankingInput, options: RankingSettings, exchange: Exchange | None = None
) -> RankTable:
    """The blocked ranking of ``inputs``, finished (:func:`finish_table`)."""
    return finish_table(schedule.blocked_table(inputs, options, exchange), inputs, options)


def finish_table(table: RankTable, inputs: RankingInput, options: RankingSettings) -> RankTable:
    """An engine's table of ``inputs`` finished, the same for every engine: judged documents
    the gallery lacks added as relevant and never retrieved, the judged documents split out
    (``judged_documents``), each query's label (its order key) its class."""
    relevance_sets = inputs.relevance
    if relevance_sets.unretrieved is not None and relevance_sets.unretrieved_grades is not None:
        table = with_unretrieved(
            table, relevance_sets.unretrieved, ideal=judged_ideal_of(relevance_sets),
            whole_ranking=options.depth is None,
        )
        if options.judged_documents:
            table = split_judged(table, whole_ranking=options.depth is None)
    if inputs.query_key is not None:
        table = replace(table, query_class=inputs.query_key)
    return table


def judged_ideal_of(relevance_sets: Relevance) -> tuple[Tensor, Tensor] | None:
    """The ideal grades of graded judgments (every relevant grade of each query, those of the
    documents the corpus lacks included); None for binary ones."""
    if relevance_sets.query_grades is None or relevance_sets.unretrieved is None:
        return None
    assert relevance_sets.unretrieved_grades is not None
    return judged_ideal(
        relevance_sets.relevant_ptr, relevance_sets.query_grades, relevance_sets.unretrieved,
        relevance_sets.unretrieved_grades,
    )


def embedding_relevance(
    query: Tensor,
    gallery: Tensor | RowBatches | None,
    query_keys: Keys,
    gallery_keys: Keys | None,
    options: RankingSettings,
    relevant_ids: Sequence[Any] | None = None,
    *,
    scan: bool = True,
) -> RankingInput:
    """Validate the inputs of :func:`rank_embeddings` and decide relevance and exclusions.

    ``gallery=None`` is same source: the gallery is the queries, its keys the queries' where
    ``gallery_keys`` leaves them out. Returns the engine's input: the embeddings, the relevance
    sets and the int64 query and kept-gallery labels (or None) as order keys.
    """
    query = check_embeddings("query", query, scan=scan)
    same_source = gallery is None
    if gallery is None:
        gallery = query
        gallery_keys = query_keys if gallery_keys is None else gallery_keys.filled_from(query_keys)
    else:
        gallery = check_embeddings("gallery", gallery, scan=scan)
        if gallery.shape[1] != query.shape[1]:
            raise ValueError(
                f"`query` and `gallery` must have the same dimension, got {query.shape[1]} and "
                f"{gallery.shape[1]}"
            )
    if gallery_keys is None:
        gallery_keys = Keys()
    num_q, num_g = query.shape[0], gallery.shape[0]

    def per_item(name: str, value: Any, n: int) -> Tensor | None:
        if value is None:
            return None
        t = value if isinstance(value, Tensor) else torch.as_tensor(value)
        if t.shape[0] != n:
            raise ValueError(f"`{name}` must have {n} entries (one per item), got {t.shape[0]}")
        return t.cpu()

    q_labels = g_labels = None
    if query_keys.labels is not None or gallery_keys.labels is not None:
        if query_keys.labels is None or gallery_keys.labels is None:
            raise ValueError("labels must be given for both queries and gallery items")
        q_labels, g_labels = encode_labels(
            query_keys.labels, gallery_keys.labels, names=("query_labels", "gallery_labels")
        )
        # the relevance sets are built on the host: keep the host copies per_item returns
        q_labels = per_item("query_labels", q_labels, num_q)
        g_labels = per_item("gallery_labels", g_labels, num_g)
    # ids compare across the two sides and with judgments' ids: one code for one id
    # (``label_codes``: integers as they are, strings by a hash)
    q_ids = per_item("query_ids", id_codes(query_keys.ids, "query_ids"), num_q)
    g_ids = per_item("gallery_ids", id_codes(gallery_keys.ids, "gallery_ids"), num_g)
    relevance_sets = build_relevance(
        Keys(
            q_labels, q_ids, per_item("query_cameras", query_keys.cameras, num_q),
            None if query_keys.positions is None else as_positions(
                "query_positions", query_keys.positions, num_q, scan, 3
            ).cpu(),
        ),
        Keys(
            g_labels, g_ids, per_item("gallery_cameras", gallery_keys.cameras, num_g),
            None if gallery_keys.positions is None else as_positions(
                "gallery_positions", gallery_keys.positions, num_g, scan, 3
            ).cpu(),
        ),
        (num_q, num_g),
        options,
        same_source=same_source,
        relevant_ids=relevant_ids,
    )
    g_key = None if g_labels is None else g_labels[relevance_sets.gallery_index]
    tie_key = None
    if gallery_keys.order is not None:
        if same_source:
            raise ValueError(
                "ties ordered by id (ties='id') need queries ranked against a gallery of their "
                "own (role='query' and role='gallery'), not same-source items"
            )
        rows = gallery_keys.order
        if not (isinstance(rows, Tensor) and rows.dtype == torch.uint8 and rows.dim() == 2):
            rows = id_order_rows(rows, "gallery ids")
        rows = per_item("gallery ids", rows, num_g)
        tie_key = order_ranks(rows.index_select(0, relevance_sets.gallery_index))
    return RankingInput(
        query, gallery, relevance_sets, q_labels, g_key, same_source, tie_key=tie_key
    )


def id_codes(ids: Any, name: str) -> Tensor | None:
    """Sample ids as the int64 codes every id compares by (``label_codes``); int64 tensors as
    they are."""
    if ids is None:
        return None
    if isinstance(ids, Tensor) and not ids.is_floating_point() and ids.dim() == 1:
        return ids.to(torch.int64)
    return label_codes(ids, name)


def rank_relevance(
    query: Tensor,
    gallery: Tensor,
    relevance_sets: Relevance,
    *,
    similarity: str = "cosine",
    depth: int | None = None,
    cover_relevant: bool = False,
    memory_budget: int | None = None,
    block_size: tuple[int, int] | None = None,
    query_order_key: Tensor | None = None,
    gallery_order_key: Tensor | None = None,
    same_source: bool = False,
    exchange: Exchange | None = None,
) -> RankTable:
    """Blocked ranking of ``query`` against the kept gallery of ``relevance_sets``: the entry
    for relevance sets made by the caller (``build_relevance``, or ``compat.pml``'s custom
    comparison) rather than by the rules of :func:`rank_embeddings`.

    ``query_order_key`` and ``gallery_order_key`` (e.g. labels; the latter aligned with the kept
    gallery) only change the order in which items are processed, so that each query block's
    relevant items sit in one or two gallery blocks; results come back in input order.
    ``same_source``: ``gallery`` holds the queries themselves (the caller says so), so the score
    matrix is symmetric and each block pair may serve the queries of both of its sides.
    ``exchange``: several processes hold these items and share the ranking out (see
    :func:`rank_embeddings`).
    """
    options = RankingSettings(
        similarity=similarity,
        memory_budget=memory_budget,
        depth=depth,
        cover_relevant=cover_relevant,
        block_size=block_size,
    )
    inputs = RankingInput(
        query, gallery, relevance_sets, query_order_key, gallery_order_key, same_source
    )
    return schedule.blocked_table(inputs, options, exchange)


def rank_two_ways(
    a: Tensor,
    b: Tensor,
    *,
    a_labels: Any,
    b_labels: Any,
    similarity: str = "cosine",
    depth: int | None = None,
    cover_relevant: bool = False,
    memory_budget: int | None = None,
    block_size: int | None = None,
) -> tuple[RankTable, RankTable]:
    """Rank ``b`` for every row of ``a`` and ``a`` for every row of ``b`` (relevant: same label).

    The tables equal ``rank_embeddings(a, b, ...)`` and ``rank_embeddings(b, a, ...)``, but both
    come from one pass over the ``a x b`` products: each block of scores is counted along its
    rows for the first table and along its columns for the second (image-to-text and
    text-to-image retrieval from one product). ``block_size`` (a multiple of 64) sets the square
    blocks; results do not depend on it (float64 aside, as for ``rank_embeddings``).

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
    if block_size is not None and (not isinstance(block_size, int) or isinstance(block_size, bool)):
        raise ValueError(
            f"`block_size` must be an int (the side of the square block), got {block_size!r}"
        )
    options = RankingSettings(
        similarity=similarity,
        memory_budget=memory_budget,
        depth=depth,
        cover_relevant=cover_relevant,
        block_size=None if block_size is None else (block_size, block_size),
    )
    return two_way_tables(a, b, a_labels, b_labels, options)


def two_way_tables(
    a: Tensor,
    b: Tensor,
    a_labels: Any,
    b_labels: Any,
    options: RankingSettings,
    *,
    scan: bool = True,
) -> tuple[RankTable, RankTable]:
    """:func:`rank_two_ways` on settings: relevance is the same label, whatever
    ``options.relevance`` and ``options.ignore_label`` say."""
    options = replace(options, relevance="label", ignore_label=None)
    a_keys, b_keys = Keys(labels=a_labels), Keys(labels=b_labels)
    ab = embedding_relevance(a, b, a_keys, b_keys, options, scan=scan)
    # the embeddings are scanned once, above
    ba = embedding_relevance(b, a, b_keys, a_keys, options, scan=False)
    ab_table, ba_table = schedule.two_way_ranking(ab, ba, options)
    # finished as every engine's table is (each query's label its class)
    return finish_table(ab_table, ab, options), finish_table(ba_table, ba, options)
