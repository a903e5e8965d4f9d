"""The relevance sets every ranking reads: :class:`Relevance`, per query the relevant and the
excluded gallery items as compressed sparse rows (CSR) over gallery indices."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["Relevance"]


@dataclass(frozen=True)
class Relevance:
    """Relevant and excluded gallery items of every query.

    Attributes:
        relevant_ptr: ``(Q + 1,)`` int64 CSR pointers into ``relevant_index``.
        relevant_index: gallery indices (into the kept gallery) of each query's relevant items,
            sorted ascending within a query. Excluded items are never relevant.
        excluded_ptr: ``(Q + 1,)`` int64 CSR pointers into ``excluded_index``.
        excluded_index: kept-gallery indices excluded from each query's ranking.
        gallery_index: ``(N',)`` int64 indices of the kept gallery items in the input gallery (all
            of them unless an ignore label removed some).
        query_grades: optional float64 grades aligned with ``relevant_index`` (graded relevance).
        unretrieved: optional ``(Q,)`` int64, relevant items of each query that are not in the
            gallery at all (judged documents the corpus lacks): relevant, never retrieved.
        unretrieved_grades: their grades, grouped by query (float64).
    """

    relevant_ptr: Tensor
    relevant_index: Tensor
    excluded_ptr: Tensor
    excluded_index: Tensor
    gallery_index: Tensor
    query_grades: Tensor | None = None
    unretrieved: Tensor | None = None
    unretrieved_grades: Tensor | None = None

    @property
    def num_queries(self) -> int:
        return self.relevant_ptr.numel() - 1

    @property
    def num_relevant(self) -> Tensor:
        return self.relevant_ptr.diff()

    @property
    def num_excluded(self) -> Tensor:
        return self.excluded_ptr.diff()
