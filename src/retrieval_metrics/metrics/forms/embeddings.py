"""Embeddings in, the metric ranks them at compute(): same source (every item is a query and a
gallery item, never retrieving itself) and separate query and gallery sets."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import finite_flag
from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.ranking.tie_order import id_order_rows
from retrieval_metrics.functional.table import RankTable
from retrieval_metrics.metrics import distributed as D
from retrieval_metrics.metrics.chunks import PAIR_BYTES, label_pair_counts, query_chunks
from retrieval_metrics.metrics.forms.base import Batch, FormContext, InputForm
from retrieval_metrics.metrics.inputs import item_tensors, score_copy

__all__ = ["QRELS_SKIP", "QueryGallery", "SameSource", "relevance_skip_reason"]

#: why a query scored against judgments has nothing relevant
QRELS_SKIP = (
    "the qrels judge no document relevant to it (its id is not in `qrels`, or every grade "
    "it has is <= 0)"
)


def relevance_skip_reason(context: FormContext) -> str:
    """Why an embedding query can have nothing relevant, by the metric's relevance rule."""
    if context.options.relevance == "radius":
        return f"no gallery item lies within radius={context.options.radius:g} m of it"
    if context.options.relevance == "qrels":
        return QRELS_SKIP
    return "no other gallery item has its label, e.g. when every label appears once"


class _EmbeddingStates(InputForm):
    """Embeddings kept in the states (side "q"; the gallery in side "g") and ranked at compute."""

    arguments = ("embeddings",)
    keywords = ("labels", "role", "ids", "cameras", "positions")
    call = "`embeddings` (+ labels)"
    same_source: bool

    def append(self, context: FormContext, batch: Batch) -> None:
        emb, finite = context.store.scanned("embeddings", batch.embeddings)
        items = item_tensors(
            emb, context.options.relevance, batch.labels, batch.ids, batch.cameras,
            batch.positions, scan=False,
        )
        scans = {"embeddings": finite}
        if items.positions is not None:
            scans["positions"] = context.store.verdict("positions", finite_flag(items.positions))
        self.check_width(context, emb)
        side = "g" if batch.role == "gallery" else "q"
        if context.options.ties == "id":
            items = replace(items, order=self.tie_order(batch, side))
        context.store.note_key_kinds(side, batch.keys())
        context.store.append_items(
            side, replace(items, emb=score_copy(emb)), f"role={batch.role!r}"
        )
        context.store.note_scans(scans)

    def check_width(self, context: FormContext, emb: Tensor) -> None:
        """Refuse ``emb`` (an update's embeddings) of another width than the states'."""
        context.store.check_width("embeddings", emb)

    def tie_order(self, batch: Batch, side: str) -> Tensor | None:
        """Under ties="id", a separate gallery's ids as given, in rows that sort as Python sorts
        them (the codes ids compare by do not keep that order: ``"7"`` is ``7``). Items without
        them keep their ties, which compute() refuses where one touches a relevant item."""
        if side != "g" or batch.role is None or batch.ids is None:
            return None
        return id_order_rows(batch.ids, "ids")

    def sides(self, context: FormContext) -> tuple[Items, Items | None]:
        """The deduplicated queries and the gallery they are ranked against (None: same
        source), refused by name where a side is missing or empty."""
        raise NotImplementedError

    def table(self, context: FormContext) -> RankTable:
        queries, gallery = self.sides(context)
        pairs = _label_pairs(context, queries, gallery)
        return with_query_ids(context, queries, D.rank_queries(
            queries, gallery,
            context.ranking_options(None if pairs is None else int(pairs.sum())),
            context.processes.group, context.processes.distributed,
        ))

    def tables_in_chunks(self, context: FormContext) -> Iterator[RankTable] | None:
        """Relevant pairs beyond ``memory_budget`` at ``PAIR_BYTES`` each (thousands of relevant
        items per query) would make rank tables, relevance sets and tie groups of gigabytes: then
        a chunk of queries at a time, each reduced to per-query values before the next is ranked,
        holding that many. ``PAIR_BYTES`` is several times what a pair takes at the peak (42 to 58
        bytes measured, every measure at once), so a chunk takes less than a quarter of the
        budget, and the ranking the rest (``chunks.ranking_budget``). Taken where the
        pairs can be counted before ranking (label relevance), not for a sharded gallery; on several
        processes, this process's share of the queries (their parts are gathered after)."""
        budget = context.memory_budget()
        if (
            context.gallery_sharded
            or context.options.nonpositive != "hit"
            or context.options.relevance != "label"
        ):
            return None  # (before the sides: with qrels, they check the ids against the corpus)
        queries, gallery = self.sides(context)
        pairs = _label_pairs(context, queries, gallery)
        if pairs is None:
            return None
        gallery = queries if gallery is None else gallery
        if int(pairs.sum()) * PAIR_BYTES <= budget:
            return None  # the same decision on every process: the states are synced
        options = context.ranking_options()
        # (each chunk's relevance is built on the host from the keys: read from a device once)
        same = gallery is queries
        queries = queries.keys_on_host()
        gallery = queries if same else gallery.keys_on_host()
        if context.processes.several:
            mine = D.query_share(len(queries), context.processes.group, True)
            queries, pairs = queries.select(mine), pairs[mine]
            if len(queries) == 0:
                # nothing to rank here, but empty parts of the right kinds to gather
                return iter([with_query_ids(context, queries, options.rank(queries, gallery))])
        return (
            with_query_ids(context, chunk, options.rank(chunk, gallery))
            for chunk in (
                queries.select(slice(start, stop)) for start, stop in query_chunks(pairs, budget)
            )
        )

    def skip_reason(self, context: FormContext) -> str:
        return relevance_skip_reason(context)


def with_query_ids(context: FormContext, queries: Items, table: RankTable) -> RankTable:
    """``table`` of ``queries`` with their sample ids (``query_id``: what ``per_query(ids=...)``
    finds each query by), where the queries came with ids (not the positions standing in)."""
    given = getattr(context.store.metric, "q_ids", None)  # (the state, not concatenated)
    if isinstance(given, list):
        given = given or None
    if (
        table.query_id is not None
        or queries.ids is None
        or given is None
        or table.num_queries != len(queries)
    ):
        return table
    return replace(table, query_id=queries.ids.to(table.num_relevant.device))


#: the keys a sample keeps whatever role it is given in: one id, one of each
SAMPLE_KEYS = ("labels", "cameras", "positions")


def check_ids_across_sides(
    context: FormContext, queries: Items, gallery: Items | None, sharded: bool = False
) -> None:
    """Refuse a query id that is also the id of a gallery item with another label, camera or
    position (label and radius relevance; judgments have their own rule, ``check_identical_ids``).

    A gallery item whose id is a query's is that query itself (a gallery that holds the
    queries), and leaves its ranking; but queries and gallery numbered from 0 each (two
    counters, as a re-id dataset's query and gallery files are) name different samples by one
    id, and gallery item i would silently leave query i's ranking. The same sample has the same
    label wherever it is given, so ids that disagree are two samples. The embeddings are not
    compared: a query encoder and a gallery encoder may embed one sample apart. ``sharded``:
    ``gallery`` is this process's shard (or None); every process refuses alike. Once per
    ranking: the chunking decision and the ranking both read the sides."""
    if context.qrels is not None or queries.ids is None or context.ranking.ids_checked:
        return
    keys = [
        name for name in SAMPLE_KEYS
        if getattr(queries, name) is not None and gallery is not None
        and getattr(gallery, name) is not None
    ]
    by_key = None  # (per key, per gallery item: differs from the query of its id)
    count = torch.zeros((), dtype=torch.int64, device=queries.ids.device)
    if gallery is not None and gallery.ids is not None and keys and len(gallery) and len(queries):
        device = gallery.ids.device
        q_ids = queries.ids.to(device)
        order = torch.argsort(q_ids)  # (ascending already when deduplicated: a cheap sort)
        at = torch.searchsorted(q_ids[order], gallery.ids).clamp_max(q_ids.numel() - 1)
        q_rows = order[at]
        shared = q_ids[q_rows] == gallery.ids
        if context.options.ignore_label is not None and gallery.labels is not None:
            # (an item of the ignore label is in no ranking: whose id it carries changes nothing)
            shared &= gallery.labels.to(device) != context.options.ignore_label
        per_key = []
        for name in keys:
            theirs = getattr(gallery, name)
            # (compared where the gallery's key is: positions are float64, which some devices
            # do not hold, and stay on the host there)
            rows, here = q_rows.to(theirs.device), shared.to(theirs.device)
            differ = getattr(queries, name).to(theirs.device)[rows] != theirs
            per_key.append((here & differ.reshape(differ.shape[0], -1).any(1)).to(device))
        by_key = torch.stack(per_key)
        count = by_key.any(0).sum()
    if sharded and context.processes.several:
        # (every process refuses alike: one all-reduce, read with the count)
        count = D.DistributedExchange(context.processes.group).sum(count.reshape(1))[0]
    total = int(count)  # the one read of the device where nothing differs
    if total == 0:
        context.ranking.ids_checked = True
        return
    differing: list[str] = []
    bad = torch.zeros(0, dtype=torch.int64)
    if by_key is not None:
        differing = [name for name, d in zip(keys, by_key.any(1).tolist(), strict=True) if d]
        bad = q_ids[q_rows][by_key.any(0)].cpu()
    shown = (
        context.store.ids_shown("q", torch.unique(bad)[:5]) if bad.numel() else "on another process"
    )
    what = " and ".join(name.rstrip("s") for name in differing) or "label"  # (another process's)
    raise ValueError(
        f"{context.owner}: {total} query id(s) are also ids of gallery items with another "
        f"{what} (e.g. {shown}). A gallery item whose id is a query's is that query itself, "
        "and leaves its ranking; ids numbered from 0 in the queries and again in the gallery "
        "(two counters) name two samples by one id, and would silently drop gallery item i "
        "from query i's ranking. Give ids unique across both sets (e.g. offset the gallery's "
        "by the number of queries), or no ids"
    )


def _label_pairs(context: FormContext, queries: Items, gallery: Items | None) -> Tensor | None:
    """Per query, its relevant pairs before exclusions, where they can be counted before the
    ranking (label relevance, labels on both sides); None elsewhere. Counted once per ranking:
    the chunking decision and the ranking's budget read the same sides."""
    if context.options.relevance != "label":
        return None
    gallery = queries if gallery is None else gallery
    if queries.labels is None or gallery.labels is None:
        return None
    if context.ranking.label_pairs is None:
        context.ranking.label_pairs = label_pair_counts(queries.labels, gallery.labels)
    return context.ranking.label_pairs


class SameSource(_EmbeddingStates):
    """``update(embeddings, labels)``: every item is both a query and a gallery item."""

    kind = "same_source"
    description = "same-source embeddings"

    def accepts(self, batch: Batch, context: FormContext) -> bool:
        return batch.role is None and context.fixed_gallery is None

    def sides(self, context: FormContext) -> tuple[Items, Items | None]:
        queries = context.store.deduped("q", "`ids`")
        if queries is None:
            raise ValueError("no data: call `update` before `compute`")
        if len(queries) == 0:
            raise ValueError("no items were given: every update had 0 rows")
        if queries.ids is None:
            # self-exclusion by position: name every item by its index
            queries = queries.with_ids(torch.arange(len(queries)))
        return queries, None


class QueryGallery(_EmbeddingStates):
    """``update(q, q_labels, role="query")`` and ``update(g, g_labels, role="gallery")``."""

    kind = "query_gallery"
    description = "query and gallery embeddings"

    def accepts(self, batch: Batch, context: FormContext) -> bool:
        return batch.role is not None and context.fixed_gallery is None

    def sides(self, context: FormContext) -> tuple[Items, Items | None]:
        queries = context.store.deduped("q", "`ids` of the queries")
        if queries is None:
            if context.store.read("g_emb") is not None:
                raise ValueError(
                    "gallery items were given but no queries (update with role='query')"
                )
            raise ValueError("no data: call `update` before `compute`")
        if len(queries) == 0:
            raise ValueError(
                "no items were given: every update had 0 rows of query embeddings "
                "(role='query')"
            )
        # held as updated, not joined (a sharded gallery's rows travel: one tensor)
        gallery = context.store.deduped(
            "g", "`ids` of the gallery items", batched=not context.gallery_sharded
        )
        if context.gallery_sharded:
            return queries, gallery  # this process's shard: it may hold nothing
        if gallery is None:
            raise ValueError("queries were given but no gallery (update with role='gallery')")
        if len(gallery) == 0:
            raise ValueError(
                "the gallery is empty: every update with role='gallery' had 0 rows, so no "
                "query has anything to retrieve"
            )
        check_ids_across_sides(context, queries, gallery)
        return queries, gallery

    def table(self, context: FormContext) -> RankTable:
        if not context.gallery_sharded:
            return super().table(context)
        queries, shard = self.sides(context)
        return self.sharded_table(context, queries, shard)

    def sharded_table(
        self, context: FormContext, queries: Items, shard: Items | None
    ) -> RankTable:
        """Every query against the gallery that stays split over the processes (this one holds
        ``shard``, or nothing): the items that a lower-ranked process also holds (sampler
        padding) dropped, by their ids."""
        sent = 0
        several = context.processes.several
        if several:
            if shard is None:  # this process holds no gallery items, but joins the collectives
                shard = queries.select(torch.zeros(0, dtype=torch.int64))
            shard, sent = D.dedupe_across_shards(
                shard, "`ids` of the gallery items", context.processes.group
            )
        check_ids_across_sides(context, queries, shard, sharded=True)
        options = context.ranking_options()
        if not several and shard is not None and len(shard):
            # one process: its shard is the whole gallery, ranked in one pass (the sharded
            # ranking's first pass, the relevant scores to exchange, would add up to half a
            # product more for nothing)
            table, ranked = D.rank_queries(queries, shard, options, None, False), 0
        else:
            table, ranked = D.rank_gallery_sharded(
                queries, shard, options, context.processes.group, several
            )
        # what this process sent: its states, the shard's ids and the ranking's relevant
        # scores and counts
        context.bytes_exchanged = sent + ranked + context.processes.synced_bytes
        return with_query_ids(context, queries, table)
