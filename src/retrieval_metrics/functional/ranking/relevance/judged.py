"""Relevance by judgments (``relevance="qrels"``): the queries and the gallery named by their ids,
each query's judged documents relevant (grade > 0), those the gallery lacks relevant and never
retrieved; the document whose id is the query's left out."""

from __future__ import annotations

import torch

from retrieval_metrics.functional.ranking.items import Keys
from retrieval_metrics.functional.ranking.qrels import sorted_ids
from retrieval_metrics.functional.ranking.relevance.exclusions import identical_ids_csr, sorted_rows
from retrieval_metrics.functional.ranking.relevance.sets import Relevance
from retrieval_metrics.functional.ranking.settings import RankingSettings

__all__ = ["judged_relevance"]


def judged_relevance(
    queries: Keys, gallery: Keys, sizes: tuple[int, int], settings: RankingSettings
) -> Relevance:
    """Relevance by ``settings.qrels``; the document whose id is the query's excluded (unless
    ``ignore_identical_ids`` is False): not ranked, and not relevant (None) or relevant and
    never retrieved (True, BEIR's and MTEB's rule). With
    ``judged_documents``, every judged document is listed, grade <= 0 included (the ranking
    places them all, and the table splits them off after)."""
    num_queries, num_gallery = sizes
    query_ids, gallery_ids = queries.ids, gallery.ids
    if query_ids is None or gallery_ids is None:
        raise ValueError("judgments (qrels) need the ids of the queries and of the gallery items")
    leave_out = settings.ignore_identical_ids is not False
    judgments = settings.qrels
    # the corpus's ids searched once, among the queries' judged documents and their own ids:
    # both lookups below read that (each a pass over a million ids otherwise)
    query_ids, gallery_ids = query_ids.cpu(), gallery_ids.cpu()
    judged_documents = judgments.documents_of(query_ids)
    among = torch.cat([judged_documents, query_ids]) if leave_out else judged_documents
    lookup = sorted_ids(gallery_ids, among=among)
    # the judgment of the query's own id is dropped with the document (in the corpus or not)
    # True is BEIR's and MTEB's rule: the document leaves the run, its judgment stays (relevant,
    # never retrieved); None, the default, leaves the query's own id out of its judgments too
    judged = judgments.relevance(
        query_ids, gallery_ids, drop_identical=settings.ignore_identical_ids is None,
        identical_unretrieved=settings.ignore_identical_ids is True,
        every_judged=settings.judged_documents, lookup=lookup,
    )
    if leave_out:
        ex_ptr, ex_index = identical_ids_csr(query_ids, gallery_ids, lookup)
        ex_index = sorted_rows(ex_ptr, ex_index)
    else:
        ex_ptr = torch.zeros(num_queries + 1, dtype=torch.int64)
        ex_index = torch.zeros(0, dtype=torch.int64)
    return Relevance(
        relevant_ptr=judged.ptr,
        relevant_index=judged.index,
        excluded_ptr=ex_ptr,
        excluded_index=ex_index,
        gallery_index=torch.arange(num_gallery),
        query_grades=judged.grades,
        unretrieved=judged.unretrieved,
        unretrieved_grades=judged.unretrieved_grades,
    )
