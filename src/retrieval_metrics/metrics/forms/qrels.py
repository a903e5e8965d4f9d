"""Queries and a corpus scored against judgments (qrels), as BEIR, MTEB and sentence-transformers
score an embedding retriever: ``RetrievalMetrics([...], qrels=qrels)``, then
``update(q, ids=query_ids, role="query")`` and ``update(d, ids=doc_ids, role="gallery")`` in
batches, in any order, on any process (or the corpus once with ``set_gallery``).

The states, deduplication, gather and ranking are the query/gallery form's; what this form adds
is relevance by the judgments (the ranking's ``relevance="qrels"`` read by the queries' ids: every
judged document's exact rank in the whole corpus, or under an evaluator's protocol within the
depth of its run, ``protocols.RUN_DEPTH``), the refusal of integer ids that collide by accident,
and the counts ``summary()`` reports.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import flat_nonzero
from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.ranking.qrels import sorted_ids
from retrieval_metrics.functional.table import RankTable
from retrieval_metrics.metrics import distributed as D
from retrieval_metrics.metrics.forms.base import Batch, FormContext
from retrieval_metrics.metrics.forms.embeddings import QRELS_SKIP, QueryGallery

__all__ = [
    "Qrels", "check_identical_ids", "check_ids_meet", "judged_against", "judged_table",
    "qrels_notes",
]


def is_in(values: Tensor, universe: Tensor) -> Tensor:
    """``torch.isin(values, universe)`` (int64 on the host) in less memory and time where
    ``universe`` is the larger (a corpus's million ids against the judged documents): its ids
    searched among the distinct values (``sorted_ids``), where torch.isin sorts both together
    with their positions (64 MB above the corpus's ids for 1.2M ids), and a sorted copy of the
    universe sorts what a few thousand values do not need sorted (2M ids: 0.11 s -> 0.06 s).
    The values are then searched in those sorted ids: a corpus numbered in order is kept whole
    by ``sorted_ids``, and torch.isin would sort its millions of ids again (8.8M: 0.64 s)."""
    if universe.numel() <= 4 * values.numel() or values.numel() == 0:
        return torch.isin(values, universe)
    _, present = sorted_ids(universe, among=values)  # (the universe's ids among the values)
    if present.numel() == 0:
        return torch.zeros(values.shape, dtype=torch.bool)
    at = torch.searchsorted(present, values).clamp_max(present.numel() - 1)
    return present[at] == values


def check_identical_ids(context: FormContext, queries: Items, gallery: Items | None) -> None:
    """Refuse, with ``ignore_identical_ids`` left at None, integer query ids that are also corpus
    ids: with two counters (queries 0..Q-1, documents 0..N-1) leaving out the document whose id
    is the query's would silently drop document i from query i's ranking. A sharded corpus
    (``gallery``: this process's shard, or None) is checked on every shard, and refused on every
    process alike."""
    judgments = context.qrels
    if context.options.ignore_identical_ids is not None or judgments is None:
        return
    if not judgments.integer_ids or queries.ids is None:
        return
    if gallery is None or gallery.ids is None:
        shared = torch.zeros(len(queries), dtype=torch.bool)
    else:
        shared = is_in(queries.ids.cpu(), gallery.ids.cpu())
    if context.gallery_sharded and context.processes.distributed:
        # (the queries are every process's: one shard's collision is every process's refusal)
        shared = D.gather_rows([shared[None]], context.processes.group)[0].any(0)
    if bool(shared.any()):
        example = int(queries.ids.cpu()[shared][0])
        raise ValueError(
            f"{context.owner}: {int(shared.sum())} query ids are also document ids "
            f"(e.g. {example}), and the ids are integers. A document whose id is the query's is "
            "left out of its ranking (ignore_identical_ids, as BEIR and MTEB do), which with "
            "query ids 0..Q-1 and document ids 0..N-1 from two counters drops document i from "
            "query i's ranking. Say which: ignore_identical_ids=False (two numberings: rank "
            "every document) or ignore_identical_ids=True (the queries are corpus documents)"
        )


def check_ids_meet(context: FormContext, given: Tensor, corpus: Tensor | None) -> Tensor:
    """Refuse judgments that share no query id with the queries given (``given``: their id
    codes), or whose relevant documents (of the queries given) are none of them in the corpus
    (``corpus``: its id codes; None for a sharded corpus, whose documents are the shards'): every
    value would be a silent 0 (or NaN), the mark of ids that do not meet (int vs str, a prefix,
    another split). Warn where most of those documents are missing. Decided on the synced
    states: alike on every process. Each message counts both sides and names an id of each.
    Returns which of the queries given are judged (on the host): the queries ranked."""
    judgments = context.qrels
    assert judgments is not None
    name = context.owner
    query_example, document_example = judgments.examples
    given_example = context.id_examples.get("query")
    corpus_example = context.id_examples.get("gallery")
    hint = (
        "ids compare as text: 7 and '7' are one id, 'q7' and '7' are not; check the prefix, the "
        "type and the split of the ids on each side"
    )
    given = given.cpu()
    judged = torch.isin(given, judgments.judged)
    if given.numel() and not bool(judged.any()):
        raise ValueError(
            f"{name}: none of the {given.numel()} query ids given (e.g. {given_example!r}) is a "
            f"query of the qrels ({len(judgments)} judged queries, e.g. {query_example!r}): "
            f"nothing can be scored. {hint}"
        )
    if corpus is None:
        return judged
    relevant = torch.isin(judgments.query, given[judged]) & (judgments.grade > 0)
    documents = judgments.document[relevant]
    if documents.numel() == 0:
        return judged  # judged, with nothing relevant: empty_queries decides
    corpus = corpus.cpu()
    present = is_in(documents, corpus)
    missing = int((~present).sum())
    sides = (
        f"corpus of {corpus.numel()} documents, e.g. {corpus_example!r}; qrels documents e.g. "
        f"{document_example!r}"
    )
    if not bool(present.any()):
        raise ValueError(
            f"{name}: none of the {documents.numel()} relevant documents the qrels judge for "
            f"the queries given is in the corpus ({sides}): every value would be 0. {hint}"
        )
    if 2 * missing > documents.numel():
        warnings.warn(
            f"{name}: {missing} of the {documents.numel()} relevant documents the qrels judge "
            f"for the queries given are not in the corpus ({sides}): they count as relevant "
            "and never retrieved. If the corpus is the whole collection, the ids may not meet; "
            f"{hint}",
            UserWarning,
            stacklevel=6,
        )
    return judged


def judged_table(
    context: FormContext,
    queries: Items,
    corpus: Tensor | None,
    rank: Callable[[Items], RankTable],
) -> RankTable:
    """The rank table of the judged ``queries`` (``rank`` ranks them against the corpus, whose
    id codes are ``corpus``; None for a sharded corpus): only the judged queries are ranked, as
    BEIR, MTEB and sentence-transformers leave a query the qrels do not name out of every mean
    (summary() counts it), whatever ``empty_queries`` says of judged queries with nothing
    relevant. The queries' ids stay in the table: two retrievers' tables pair their queries
    by them."""
    judged = check_ids_meet(context, queries.ids, corpus)
    if not bool(judged.all()):
        queries = queries.select(flat_nonzero(judged))
    return replace(rank(queries), query_id=queries.ids.cpu())


def judged_against(context: FormContext, queries: Items, gallery: Items) -> RankTable:
    """:func:`judged_table` of ``queries`` against the whole ``gallery``, which every process
    holds (each ranks a share of the judged queries)."""
    return judged_table(context, queries, gallery.ids, lambda judged: D.rank_queries(
        judged, gallery, context.ranking_options(), context.processes.group,
        context.processes.distributed,
    ))


def qrels_notes(context: FormContext, table: RankTable) -> dict[str, int]:
    """What ``summary()`` counts about judgments beside its rows: relevant judgments whose
    document the corpus lacks (relevant, never retrieved), queries given without any judgment
    (left out of every mean, as BEIR, MTEB and sentence-transformers leave them out) and judged
    queries never given, of the states' queries (one per id) that ``table`` was ranked from."""
    judgments = context.qrels
    assert judgments is not None
    # (the deduplicated queries as the table's ranking read them; their ids were checked
    # there, with the collective a sharded corpus needs: not again)
    queries = context.store.deduped("q", "`ids` of the queries")
    assert queries is not None and queries.ids is not None  # (ranked: see the table)
    given = queries.ids.cpu()
    absent = table.num_absent
    judged = torch.isin(given, judgments.judged)
    return {
        "judged documents not in the corpus": 0 if absent is None else int(absent.sum()),
        "queries without judgments": int((~judged).sum()),
        "judged queries not given": int(len(judgments) - int(judged.sum())),
    }


class Qrels(QueryGallery):
    """``update(q, ids=query_ids, role="query")`` and ``update(d, ids=doc_ids, role="gallery")``
    with ``qrels=`` on the metric: relevance by the judgments."""

    kind = "qrels"
    description = "queries and a corpus with qrels"

    def accepts(self, batch: Batch, context: FormContext) -> bool:
        return context.qrels is not None and context.fixed_gallery is None

    def append(self, context: FormContext, batch: Batch) -> None:
        if batch.role is None:
            raise ValueError(
                "with `qrels=`, say which side each update is: role='query' (query embeddings, "
                "`ids=` their ids in the qrels) or role='gallery' (the corpus, `ids=` its "
                "document ids)"
            )
        if batch.labels is not None or batch.positions is not None:
            raise ValueError("with `qrels=`, relevance is the judgments': give no `labels` or "
                             "`positions`")
        super().append(context, batch)

    def table(self, context: FormContext) -> RankTable:
        queries, gallery = self.sides(context)
        if not context.gallery_sharded:
            assert gallery is not None
            return judged_against(context, queries, gallery)
        return judged_table(
            context, queries, None, lambda judged: self.sharded_table(context, judged, gallery)
        )

    def sides(self, context: FormContext) -> tuple[Items, Items | None]:
        queries, gallery = super().sides(context)
        check_identical_ids(context, queries, gallery)
        return queries, gallery

    def skip_reason(self, context: FormContext) -> str:
        return QRELS_SKIP

    def notes(self, context: FormContext, table: RankTable) -> dict[str, int]:
        return qrels_notes(context, table)
