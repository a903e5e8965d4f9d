"""Judgments (qrels): relevance of a query set against a corpus given as query id -> document ids,
or -> {document id: grade}, many to many (BEIR, MTEB, TREC).

:class:`Judgments` holds a mapping as three sorted int64 / float64 arrays, ids as the library
compares them (:func:`~retrieval_metrics.functional.ranking.labels.label_codes`: ``7`` is ``"7"``,
strings by a hash that is the same in every process), with a fingerprint that processes compare.
:meth:`Judgments.relevance` turns it into one ranking's relevance sets, given the queries' and the
corpus's ids: a judged document with a grade > 0 is relevant; one that is not in the corpus is
relevant and never retrieved (it counts in m_q, as trec_eval counts it), returned as a count and
its grades per query for :func:`judged_ideal` and :func:`with_unretrieved`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.csr import csr_from_ranges, ptr_from_counts, row_of_entries
from retrieval_metrics.functional.primitives import fingerprint, flat_nonzero
from retrieval_metrics.functional.ranking.labels import canonical_id, label_codes
from retrieval_metrics.functional.ranking.table_build import ideal_from
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = [
    "JudgedRelevance", "Judgments", "judged_ideal", "positions_among", "sorted_ids",
    "with_unretrieved",
]


def sorted_ids(ids: Tensor, among: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The permutation sorting host int64 ``ids`` and the sorted ids; no sort where they are
    sorted already (deduplicated states come in ascending id order).

    ``among``: only the positions whose id is one of these are wanted (the rest may be left
    out): where they are few beside ``ids`` (a few thousand judged documents in a corpus of a
    million), the ids are looked up in them instead of all sorted. A search in the sorted
    result finds every id of ``among`` as it would in the whole sort."""
    if ids.numel() < 2 or bool((ids[1:] >= ids[:-1]).all()):
        return torch.arange(ids.numel()), ids
    if among is not None and among.numel() * 8 < ids.numel():
        wanted = torch.unique(among)
        if wanted.numel() == 0:
            return torch.zeros(0, dtype=torch.int64), ids[:0]
        kept = positions_among(ids, wanted)
        order = kept[torch.from_numpy(np.argsort(ids[kept].numpy(), kind="stable"))]
        return order, ids[order]
    order = torch.from_numpy(np.argsort(ids.numpy(), kind="stable"))
    return order, ids[order]


@functools.cache
def _prime_below(n: int) -> int:
    """The largest prime below ``n`` (``n`` a power of two, 2**10 to 2**24: a few thousand
    trial divisions, once each)."""
    return next(c for c in range(n - 1, 1, -1)
                if all(c % d for d in range(2, math.isqrt(c) + 1)))


def positions_among(ids: Tensor, wanted: Tensor) -> Tensor:
    """The positions, ascending, of the host int64 ``ids`` that are one of ``wanted`` (sorted,
    distinct, not empty).

    A binary search of every id among the wanted ones is a corpus-sized pass of a dozen steps
    an id (2M ids among 3,000: 0.06 s); here each id's bucket (the id modulo a prime, so that
    ids sharing their low bits or decimal zeros spread) is read in a table marking the wanted
    ids' buckets, one gather (0.011 s in all), and only the ids in a marked bucket (the wanted
    ones and about 1 in 128 others) are searched exactly. Ids that collide cost time only: the
    answer is the search's. The table holds 128 to 256 buckets a wanted id, but no more than
    half as many as the ids (a table the size of the corpus would cost more to clear than the
    search it spares): an int64 and a bool written an id, one pass fewer than the search."""
    wide = min(256 * wanted.numel(), ids.numel() // 2)
    size = _prime_below(1 << min(24, max(10, wide.bit_length() - 1)))
    marked = torch.zeros(size, dtype=torch.bool)
    marked[wanted.remainder(size)] = True
    candidates = flat_nonzero(marked[ids.remainder(size)])
    found = ids[candidates]
    # (an id above every wanted one lands past them, on a repeat of the last: no clamp)
    probe = torch.cat([wanted, wanted[-1:]])
    return candidates[probe[torch.searchsorted(wanted, found)] == found]


def _is_integer_id(value: Any) -> bool:
    key = canonical_id(value)
    return isinstance(key, int) and not isinstance(key, bool)


def _grade(value: Any, query: Any, document: Any) -> float:
    return checked_grade(value, f"qrels[{query!r}][{document!r}]")


def checked_grade(value: Any, where: str) -> float:
    """A judgment's grade as a float: a finite number (not a bool, not the text of a number),
    else a ValueError naming ``where`` (the argument and its keys)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"`{where}` must be a number (a grade), got {value!r}")
    try:
        grade = float(value)
    except OverflowError:  # (an int beyond a double's range)
        grade = math.inf
    if not math.isfinite(grade):
        text = repr(value) if len(repr(value)) <= 24 else f"{repr(value)[:20]}..."
        raise ValueError(f"`{where}` must be finite, got {text}")
    return grade


@dataclass(frozen=True, eq=False)
class JudgedRelevance:
    """One ranking's relevance from judgments: CSR of the relevant corpus positions of each query
    (ascending), their grades (None for binary judgments), and per query the relevant judged
    documents absent from the corpus (``unretrieved``) with their grades grouped by query."""

    ptr: Tensor
    index: Tensor
    grades: Tensor | None
    unretrieved: Tensor
    unretrieved_grades: Tensor


@dataclass(frozen=True, eq=False)
class Judgments:
    """A qrels mapping as sorted arrays: ``query`` and ``document`` int64 id codes (sorted by
    query, then document), ``grade`` float64 (every judgment, grade <= 0 included: judged not
    relevant). ``graded``: some query was given as {document id: grade} (else every grade is 1).
    ``integer_ids``: every query and document id is an integer (or its decimal text): the case
    where ids from two counters can collide. ``fingerprint``: a 63-bit hash of the arrays, equal
    for equal judgments in every process."""

    query: Tensor
    document: Tensor
    grade: Tensor
    judged: Tensor
    graded: bool
    integer_ids: bool
    fingerprint: int
    #: a judged query's id and a judged document's id as the qrels wrote them (for messages)
    examples: tuple[Any, Any] = (None, None)

    @staticmethod
    def of(qrels: Any) -> Judgments:
        """``qrels`` (a mapping query id -> collection of document ids, or -> {document id:
        grade}; or Judgments) as :class:`Judgments`."""
        if isinstance(qrels, Judgments):
            return qrels
        if not isinstance(qrels, Mapping):
            raise ValueError(
                "`qrels` must be a mapping query id -> document ids, or -> {document id: "
                f"grade}}, got {type(qrels).__name__}"
            )
        queries: list[Any] = []
        documents: list[Any] = []
        grades: list[float] = []
        graded = False
        for query, judged in qrels.items():
            if isinstance(judged, Mapping):
                graded = True
                pairs = [(doc, _grade(value, query, doc)) for doc, value in judged.items()]
            elif isinstance(judged, (str, bytes)) or not hasattr(judged, "__iter__"):
                raise ValueError(
                    f"`qrels[{query!r}]` must be a collection of document ids or a mapping "
                    f"document id -> grade, got {judged!r}"
                )
            else:
                if isinstance(judged, Tensor):
                    judged = judged.tolist()
                pairs = [(doc, 1.0) for doc in dict.fromkeys(judged)]
            queries += [query] * len(pairs)
            documents += [doc for doc, _ in pairs]
            grades += [grade for _, grade in pairs]
        # every judged query, also one whose collection is empty: it was judged (and has nothing
        # relevant)
        judged_queries = list(qrels)
        query_codes = label_codes(judged_queries, "qrels query ids") if judged_queries else None
        if query_codes is not None and torch.unique(query_codes).numel() != len(judged_queries):
            raise ValueError(
                "`qrels` names one query twice (as an int and as its decimal text, e.g. 7 and "
                '"7", which are one id)'
            )
        empty = torch.zeros(0, dtype=torch.int64)
        q = label_codes(queries, "qrels query ids") if queries else empty
        d = label_codes(documents, "qrels document ids") if documents else empty
        g = torch.tensor(grades, dtype=torch.float64)
        # sorted by query, then document
        order = torch.from_numpy(np.lexsort((d.numpy(), q.numpy())))
        q, d, g = q[order], d[order], g[order]
        if q.numel() > 1:
            same = (q[1:] == q[:-1]) & (d[1:] == d[:-1])
            if bool(same.any()):
                raise ValueError(
                    "`qrels` judges one document twice for a query (an int id and its decimal "
                    'text, e.g. 7 and "7", are one id)'
                )
        integer_ids = all(_is_integer_id(v) for v in judged_queries) and all(
            _is_integer_id(v) for v in documents
        )
        sorted_codes = () if query_codes is None else (torch.sort(query_codes).values,)
        printed = fingerprint((q, d, g, bytes([graded]), *sorted_codes))
        judged_codes = (
            torch.sort(query_codes).values if query_codes is not None
            else torch.zeros(0, dtype=torch.int64)
        )
        examples = (judged_queries[0] if judged_queries else None,
                    documents[0] if documents else None)
        return Judgments(q, d, g, judged_codes, graded, integer_ids, printed, examples)

    def __len__(self) -> int:
        return int(self.judged.numel())

    def _entries(self, query_ids: Tensor) -> tuple[Tensor, Tensor]:
        """CSR of the judgments of each of ``query_ids`` (host int64 codes): their entries."""
        start = torch.searchsorted(self.query, query_ids, right=False)
        stop = torch.searchsorted(self.query, query_ids, right=True)
        return csr_from_ranges(start, stop)

    def documents_of(self, query_ids: Tensor) -> Tensor:
        """The documents judged for ``query_ids`` (host int64 codes), any grade, repeats kept."""
        return self.document[self._entries(query_ids.cpu())[1]]

    def relevance(
        self,
        query_ids: Tensor,
        gallery_ids: Tensor,
        *,
        drop_identical: bool = True,
        identical_unretrieved: bool = False,
        every_judged: bool = False,
        lookup: tuple[Tensor, Tensor] | None = None,
    ) -> JudgedRelevance:
        """The relevant corpus positions of each query (``query_ids``: int64 codes) in a corpus
        of ``gallery_ids`` (int64 codes, each once), and the relevant documents it lacks.
        ``drop_identical``: a judgment of the document whose id is the query's is dropped (in
        the corpus or not), as the ranking leaves that document out; ``identical_unretrieved``:
        it is kept, relevant and never retrieved, as the ranking leaves the document out (BEIR
        and MTEB pop it from the run, not from the qrels). ``every_judged``: every
        judged document is returned, grade <= 0 included (their grades tell them apart).
        ``lookup``: :func:`sorted_ids` of ``gallery_ids`` among ids that hold every judged
        document of these queries (one pass over the corpus's ids for several lookups; by
        default, among those documents)."""
        query_ids, gallery_ids = query_ids.cpu(), gallery_ids.cpu()
        ptr, entry = self._entries(query_ids)
        row = row_of_entries(ptr)
        docs, grades = self.document[entry], self.grade[entry]
        positive = grades > 0 if not every_judged else torch.ones_like(grades, dtype=torch.bool)
        if drop_identical:
            positive &= docs != query_ids[row]
        row, docs, grades = row[positive], docs[positive], grades[positive]
        num_q, num_g = query_ids.numel(), gallery_ids.numel()
        found = torch.zeros_like(docs, dtype=torch.bool)
        index = torch.zeros_like(docs)
        if num_g and docs.numel():
            # (the corpus ids looked up in the judged ones, where those are few)
            g_order, g_sorted = lookup or sorted_ids(gallery_ids, among=docs)
            if g_sorted.numel():
                at = torch.searchsorted(g_sorted, docs).clamp_max(g_sorted.numel() - 1)
                found = g_sorted[at] == docs
                index = g_order[at]
        if identical_unretrieved:
            found &= docs != query_ids[row]
        f_row, f_index, f_grade = row[found], index[found], grades[found]
        # each query's positions ascending (rows are grouped already: sort within them)
        if f_row.numel():
            order = torch.from_numpy(np.lexsort((f_index.numpy(), f_row.numpy())))
            f_row, f_index, f_grade = f_row[order], f_index[order], f_grade[order]
        return JudgedRelevance(
            ptr=ptr_from_counts(torch.bincount(f_row, minlength=num_q)),
            index=f_index,
            grades=f_grade if self.graded else None,
            unretrieved=torch.bincount(row[~found], minlength=num_q),
            unretrieved_grades=grades[~found],
        )


def judged_ideal(
    relevant_ptr: Tensor, grades: Tensor, unretrieved: Tensor, unretrieved_grades: Tensor
) -> tuple[Tensor, Tensor]:
    """Every relevant grade of each query, decreasing: those of its relevant documents in the
    corpus (``grades``, grouped as ``relevant_ptr`` says) and of those the corpus lacks
    (``unretrieved`` per query, ``unretrieved_grades`` grouped by query)."""
    rows = torch.cat([row_of_entries(relevant_ptr), row_of_entries(ptr_from_counts(unretrieved))])
    values = torch.cat([grades.to(torch.float64), unretrieved_grades.to(torch.float64)])
    counts = torch.bincount(rows, minlength=relevant_ptr.numel() - 1)
    return ideal_from(ptr_from_counts(counts), values, rows)


def with_unretrieved(
    table: RankTable,
    unretrieved: Tensor,
    *,
    ideal: tuple[Tensor, Tensor] | None,
    whole_ranking: bool,
) -> RankTable:
    """``table`` with each query's relevant documents that the corpus lacks (``unretrieved``
    per query): they count in m_q and are never retrieved; ``ideal`` (:func:`judged_ideal`, None
    for binary judgments) holds every relevant grade, theirs included. ``whole_ranking``: every
    relevant item in the corpus was located (no depth), so what is unlisted was never retrieved
    at all (depth ``UNBOUNDED``). Their number per query is the table's ``num_absent``."""
    changes: dict[str, Any] = {"num_absent": unretrieved.to(torch.int64)}
    if ideal is not None:
        changes["ideal_ptr"], changes["ideal_grade"] = ideal
    if unretrieved.numel() and bool((unretrieved > 0).any()):
        unretrieved = unretrieved.to(torch.int64)
        changes["num_relevant"] = table.num_relevant + unretrieved
        if whole_ranking:
            changes["depth"] = torch.where(
                unretrieved > 0, torch.full_like(table.depth, UNBOUNDED), table.depth
            )
    return replace(table, **changes)
