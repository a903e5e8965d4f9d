"""Incomplete judgments: the measures and views that read which documents were judged at all.

Relevance by judgments (qrels) knows three kinds of document: judged relevant (grade >= the
relevance level, 1 unless a measure names another), judged not relevant, and unjudged. A rank
table whose ranking located the judged documents that are not relevant carries them in its
``judged_*`` fields (:class:`~retrieval_metrics.functional.table.RankTable`), with their exact
positions in the whole ranking. From there:

* :func:`judged_per_query`: Judged@K, the share of the top K that has a judgment;
* :func:`bpref_per_query`: bpref (Buckley and Voorhees, SIGIR 2004), as trec_eval computes it;
* :func:`condensed`: the table of the condensed list (Sakai, SIGIR 2007; trec_eval ``-J``):
  the unjudged documents leave the ranking before any measure reads it;
* :func:`at_level`: the table at a relevance level N (trec_eval ``-l N``, ir_measures'
  ``rel=N``): relevant documents graded below N become judged non-relevant ones.

Every view is exact under every tie rule: positions are only recounted, and the tie groups of
the measures read the recounted ``above`` and ``tied`` as they read any table's.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from retrieval_metrics.functional.csr import ptr_from_counts, row_of_entries
from retrieval_metrics.functional.measures.options import DEFAULT_TIES
from retrieval_metrics.functional.measures.per_query import expected_hits_per_query
from retrieval_metrics.functional.primitives import flat_nonzero, order_by_row
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = [
    "as_trec_eval_judges",
    "at_level",
    "bpref_per_query",
    "condensed",
    "judged_per_query",
    "judged_view",
    "require_judged",
]


def require_judged(table: RankTable, what: str) -> None:
    """Refuse ``what`` on a table that does not know which documents were judged."""
    if table.judged_ptr is None or table.num_nonrelevant is None:
        raise ValueError(
            f"{what} reads which documents were judged, which only relevance by judgments "
            "gives: pass `qrels=` (or ranked lists with {document id: grade} judgments, "
            "judged_documents=True in the functional layer)"
        )


def _require_whole(table: RankTable, what: str) -> None:
    """Refuse ``what`` where the ranking stopped before every judged document was placed."""
    cut = (table.depth != UNBOUNDED) & (table.depth < table.gallery_size)
    if bool(cut.any()):
        q = int(flat_nonzero(cut)[0])
        raise ValueError(
            f"{what} needs the position of every judged document, but the ranking of query {q} "
            f"stopped at depth {int(table.depth[q])} of {int(table.gallery_size[q])}; rank the "
            "whole gallery (depth=None)"
        )


def _merged(table: RankTable) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Every located judged document of each query, relevant or not, by position:
    ``(query, above, tied, order)`` with ``order`` the permutation of the
    concatenated [relevant items, judged non-relevant items] that sorts them. A stable sort:
    the relevant items keep their order among themselves (tied ones by decreasing grade)."""
    assert table.judged_ptr is not None
    rel_q, non_q = table.item_query, row_of_entries(table.judged_ptr)
    query = torch.cat([rel_q, non_q])
    above = torch.cat([table.above, table.judged_above])
    tied = torch.cat([table.tied, table.judged_tied])
    order = order_by_row(query, above)
    return query[order], above[order], tied[order], order


def as_trec_eval_judges(table: RankTable) -> RankTable:
    """``table`` with the documents judged with a negative grade (the TREC Web track's -2,
    spam) unjudged, as trec_eval reads them (a negative relevance is no judgment there): what
    bpref and the condensed lists read. Judged@K counts them, as ir_measures' judged does."""
    grade, negative = table.judged_grade, table.num_negative
    if grade is None or negative is None or not bool((negative > 0).any()):
        return table
    assert table.judged_ptr is not None and table.num_nonrelevant is not None
    keep = grade >= 0
    query = row_of_entries(table.judged_ptr)[keep]
    return replace(
        table,
        judged_ptr=ptr_from_counts(torch.bincount(query, minlength=table.num_queries)),
        judged_above=None if table.judged_above is None else table.judged_above[keep],
        judged_tied=None if table.judged_tied is None else table.judged_tied[keep],
        judged_grade=grade[keep],
        num_nonrelevant=table.num_nonrelevant - negative,
        num_negative=torch.zeros_like(negative),
    )


def judged_view(table: RankTable, what: str = "Judged@K") -> RankTable:
    """Binary table whose relevant items are every located judged document (any grade): what
    Judged@K counts, and the RBP residual leaves out (``what`` names the measure in a
    refusal)."""
    require_judged(table, what)
    query, above, tied, _ = _merged(table)
    assert table.num_nonrelevant is not None
    return RankTable(
        ptr=ptr_from_counts(torch.bincount(query, minlength=table.num_queries)),
        above=above,
        tied=tied,
        num_relevant=table.num_relevant + table.num_nonrelevant,
        gallery_size=table.gallery_size,
        depth=table.depth,
        query_class=table.query_class,
        query_id=table.query_id,
        num_retrieved=table.num_retrieved,
    )


def condensed(table: RankTable) -> RankTable:
    """The table of the condensed list: each query's ranking with its unjudged documents removed
    (trec_eval ``-J``, ir_measures' ``judged_only=True``). A document's new ``above`` is the
    judged documents scored strictly higher, its ``tied`` the judged documents of its score;
    the gallery is the judged documents in it. Needs every judged document placed. A
    document judged with a negative grade leaves too (:func:`as_trec_eval_judges`)."""
    require_judged(table, "a condensed list (judged_only)")
    _require_whole(table, "a condensed list (judged_only)")
    table = as_trec_eval_judges(table)
    query, above, _, order = _merged(table)
    n = query.numel()
    # runs of one query and one score: their start is the judged documents above, their
    # length the judged documents tied
    new_run = torch.ones(n, dtype=torch.bool)
    if n > 1:
        new_run[1:] = (query[1:] != query[:-1]) | (above[1:] != above[:-1])
    run = torch.cumsum(new_run.to(torch.int64), 0) - 1
    starts = flat_nonzero(new_run)
    lengths = torch.diff(starts, append=torch.tensor([n], dtype=torch.int64))
    per_query = torch.bincount(query, minlength=table.num_queries)
    query_start = ptr_from_counts(per_query)[:-1]
    new_above = starts[run] - query_start[query]
    new_tied = lengths[run]
    # back to the [relevant, non-relevant] concatenation's order
    back_above = torch.empty_like(new_above).scatter_(0, order, new_above)
    back_tied = torch.empty_like(new_tied).scatter_(0, order, new_tied)
    num_rel = table.above.numel()
    size = per_query.to(torch.int64)
    depth = torch.where(table.depth == UNBOUNDED, table.depth, size)
    return replace(
        table,
        above=back_above[:num_rel],
        tied=back_tied[:num_rel],
        judged_above=back_above[num_rel:],
        judged_tied=back_tied[num_rel:],
        gallery_size=size,
        depth=depth,
        num_retrieved=None if table.num_retrieved is None else size,
    )


def at_level(table: RankTable, level: float) -> RankTable:
    """The table at relevance level ``level``: relevant items graded below it become judged
    non-relevant documents (trec_eval ``-l``, ir_measures' ``rel=``); a binary table's items
    have grade 1. ``num_relevant`` counts the grades at or above the level, listed or not
    (the table's ideal grades). The view carries no ``num_absent``."""
    grade = table.grade
    if grade is None:
        grade = torch.ones(table.above.numel(), dtype=torch.float64)
    if table.ideal_grade is not None and table.ideal_ptr is not None:
        owner = row_of_entries(table.ideal_ptr)
        reaching = (table.ideal_grade >= level).to(torch.int64)
        num_relevant = torch.zeros(table.num_queries, dtype=torch.int64).index_add_(
            0, owner, reaching
        )
    else:
        num_relevant = table.num_relevant if level <= 1 else torch.zeros_like(table.num_relevant)
    keep = grade >= level
    if bool(keep.all()) and bool((num_relevant == table.num_relevant).all()):
        return replace(table, num_absent=None)
    item_query = table.item_query
    ptr = ptr_from_counts(torch.bincount(item_query[keep], minlength=table.num_queries))
    changes: dict[str, Tensor | None] = {
        "ptr": ptr,
        "above": table.above[keep],
        "tied": table.tied[keep],
        "grade": None if table.grade is None else table.grade[keep],
        "num_relevant": num_relevant,
        "num_absent": None,
    }
    if table.judged_ptr is not None and table.num_nonrelevant is not None:
        # the items below the level join the judged non-relevant documents, by position
        drop = ~keep
        query = torch.cat([row_of_entries(table.judged_ptr), item_query[drop]])
        above = torch.cat([table.judged_above, table.above[drop]])
        tied = torch.cat([table.judged_tied, table.tied[drop]])
        order = order_by_row(query, above)
        changes.update(
            judged_ptr=ptr_from_counts(torch.bincount(query, minlength=table.num_queries)),
            judged_above=above[order],
            judged_tied=tied[order],
            num_nonrelevant=table.num_nonrelevant + table.num_relevant - num_relevant,
        )
        if table.judged_grade is not None:
            changes["judged_grade"] = torch.cat([table.judged_grade, grade[drop]])[order]
    return replace(table, **changes)


# ------------------------------------------------------------------------------ the measures


def judged_per_query(
    table: RankTable, k: int | None, ties: str = DEFAULT_TIES, *, hits: Tensor | None = None
) -> Tensor:
    """Judged@K: the judged documents (any grade) among the top K, over min(K, documents
    ranked): ir_measures' ``Judged@k`` (OpenNIR's judgment rate). Without a cut-off, over the
    whole ranking. Defined for every query, also one with nothing relevant. ``hits``: the
    expected judged documents in the top K, where the caller has them (the tie rule's
    expectation over the judged view, :func:`judged_view`).

    Returns:
        ``(Q,)`` float64; 0 where nothing was ranked (an empty list judges nothing: the value
        of a judged query the run lacks, which ir_measures' providers score 0).
    """
    if hits is None:
        hits = expected_hits_per_query(judged_view(table), k, ties)
    ranked = table.retrieved.to(torch.float64)
    size = ranked if k is None else torch.clamp(ranked, max=float(k))
    return torch.where(size > 0, hits / size.clamp_min(1), 0.0)


def bpref_per_query(table: RankTable, ties: str = DEFAULT_TIES) -> Tensor:
    """bpref (Buckley and Voorhees, SIGIR 2004) as trec_eval computes it: with R relevant and
    N judged non-relevant documents, each relevant document ranked adds
    ``1 - min(n, R) / min(N, R)`` (1 when N = 0), n the judged non-relevant documents ranked
    above it; the sum is divided by R. Unjudged documents take no part, nor do those judged
    with a negative grade (:func:`as_trec_eval_judges`).

    A judged non-relevant document tied with a relevant one is above it in a random half of the
    orders: under "expected" ties the number n is n0 + J with J uniform over 0..s (s of them
    tied), and the term's expectation is taken over J; "optimistic" takes J = 0, "pessimistic"
    J = s.

    Returns:
        ``(Q,)`` float64, NaN for queries with nothing relevant.
    """
    require_judged(table, "bpref")
    _require_whole(table, "bpref")
    table = as_trec_eval_judges(table)
    assert table.judged_ptr is not None and table.num_nonrelevant is not None
    if ties == "id" and bool((table.tied != 1).any()):
        raise ValueError("ties='id' needs a ranking with no ties left; choose another `ties`")
    item_query = table.item_query
    # judged non-relevant documents strictly above, and tied with, each relevant item: counted
    # by searching the sorted (query, above) keys of the non-relevant ones
    every_above = torch.cat([table.above, table.judged_above])
    width = int(every_above.max()) + 2 if every_above.numel() else 1
    non_key = row_of_entries(table.judged_ptr) * width + table.judged_above
    key = item_query * width + table.above
    start = table.judged_ptr[:-1][item_query]
    n0 = torch.searchsorted(non_key, key, right=False) - start
    s = torch.searchsorted(non_key, key, right=True) - start - n0
    if ties == "optimistic":
        s = torch.zeros_like(s)
    elif ties == "pessimistic":
        n0, s = n0 + s, torch.zeros_like(s)
    big_r = table.num_relevant[item_query].to(torch.float64)
    big_n = table.num_nonrelevant[item_query].to(torch.float64)
    n0f, sf = n0.to(torch.float64), s.to(torch.float64)
    # E[min(n0 + J, R)], J uniform on 0..s: the first m values of n0 + j lie below R
    m = torch.clamp(big_r - n0f, min=0.0)
    m = torch.minimum(m, sf + 1)
    mean_min = (m * n0f + m * (m - 1) / 2 + (sf + 1 - m) * big_r) / (sf + 1)
    denominator = torch.minimum(big_n, big_r)
    term = torch.where(denominator > 0, 1.0 - mean_min / denominator.clamp_min(1), 1.0)
    total = torch.zeros(table.num_queries, dtype=torch.float64).index_add_(0, item_query, term)
    r = table.num_relevant.to(torch.float64)
    return torch.where(r > 0, total / r.clamp_min(1), math.nan)
