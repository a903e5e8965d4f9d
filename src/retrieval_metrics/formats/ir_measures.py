"""A scored run evaluated as ir_measures evaluates it: each measure string ranked by the tie
rule of the provider ir_measures computes it with (:mod:`retrieval_metrics.functional.measures.
providers`), so that a run with tied scores gives each string its provider's value.

>>> run = {"1": {"a": 1.0, "b": 1.0, "c": 0.5}}
>>> qrels = {"1": {"a": 1, "c": 0}}
>>> qids, values = ir_measures_per_query(run, qrels, ["P@1", "Judged@1"])
>>> values["P@1"].tolist(), values["Judged@1"].tolist()  # b first (descending), a (ascending)
([0.0], [1.0])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.formats.converters import checked_qrels_query, checked_run_query
from retrieval_metrics.formats.runs import checked_score, text_keyed, trec_eval_order
from retrieval_metrics.functional.measures import MeasureOptions, parse_metric, per_query_values
from retrieval_metrics.functional.measures.aggregation import counted_values
from retrieval_metrics.functional.measures.providers import Provider, provider_of
from retrieval_metrics.functional.ranking import rank_lists
from retrieval_metrics.functional.table import RankTable

__all__ = ["ir_measures_per_query", "provider_order"]

# every provider reports each judged query (ir_measures fills the ones it leaves out with the
# measure's default, 0): a query judged grade 0 only scores 0 and counts
_OPTIONS = MeasureOptions(empty_queries="zero")


def provider_order(scores: Mapping[str, float], provider: Provider) -> list[str]:
    """One query's documents (``scores``: document id -> score, in the run's order) in the order
    ``provider`` ranks them. A score that is no finite number is refused, naming the document."""
    given = {doc: checked_score(score, f"`scores`, document {doc!r}")
             for doc, score in scores.items()}
    if provider.float32:
        with np.errstate(over="ignore"):  # (beyond float32's range: inf, as trec_eval 9)
            values = {doc: float(np.float32(score)) for doc, score in given.items()}
    else:
        values = given
    if provider.order == "id_descending":
        order = trec_eval_order(values, as_float32=provider.float32)
    elif provider.order == "id_ascending":
        order = sorted(values, key=lambda doc: (-values[doc], doc))
    else:  # the run's order: a stable sort by score
        order = sorted(values, key=lambda doc: -values[doc])
    return order if provider.depth is None else order[: provider.depth]


def _averaged(
    table: RankTable, ranked: list[list[str]], run: Mapping[str, Mapping[str, float]],
    qids: list[str], k: int | None,
) -> RankTable:
    """``table`` with each document of the top ``k`` placed in its tie group cut at ``k`` (a
    group of the same score, in the order ranked): the "expected" tie rule then gives each the
    mean weight of the group's positions there, as trectools' ``average_ties``."""
    above, tied = table.above.clone(), table.tied.clone()
    judged = table.judged_ptr is not None and table.judged_above is not None
    j_above = table.judged_above.clone() if judged else None
    j_tied = table.judged_tied.clone() if judged else None
    for q, (qid, docs) in enumerate(zip(qids, ranked, strict=True)):
        limit = len(docs) if k is None else min(k, len(docs))
        if limit == 0:
            continue
        scores = np.array([float(run[qid][d]) for d in docs[:limit]])
        new = np.r_[True, scores[1:] != scores[:-1]]
        starts = np.flatnonzero(new)
        ends = np.r_[starts[1:], limit]
        start = np.repeat(starts, ends - starts)
        size = np.repeat(ends - starts, ends - starts)
        parts = [(above, tied, table.ptr)]
        if judged:
            parts.append((j_above, j_tied, table.judged_ptr))
        for at, ties, ptr in parts:
            lo, hi = int(ptr[q]), int(ptr[q + 1])
            inside = (at[lo:hi] < limit).nonzero().flatten() + lo
            positions = at[inside].numpy()
            at[inside] = torch.from_numpy(start[positions]).to(at.dtype)
            ties[inside] = torch.from_numpy(size[positions]).to(ties.dtype)
    return replace(table, above=above, tied=tied, judged_above=j_above, judged_tied=j_tied)


def ir_measures_per_query(
    run: Mapping[str, Mapping[str, float]],
    qrels: Mapping[str, Mapping[str, int]],
    names: Iterable[str],
) -> tuple[list[str], dict[str, Tensor]]:
    """Per-query values of ir_measures' measure strings ``names`` on a scored ``run`` (query id
    -> document id -> score) judged by ``qrels`` (query id -> document id -> grade), each
    ranked by its provider's tie rule (:func:`~retrieval_metrics.functional.measures.providers.
    provider_of`): ``(qids, {name: (Q,) float64})``, over the judged queries, sorted.

    As ir_measures reports them: every judged query, a query judged grade 0 only scoring 0
    (Judged@K its share of judged documents), a query the run lacks scoring 0; run queries
    without judgments are left out. The whole run is ranked (ir_measures' providers read it
    whole; cwl_eval stops at 1,000 documents a query). A score must be a finite number and a
    grade a whole number: anything else is a ``ValueError`` naming ``run`` or ``qrels``, the
    query and the document.
    """
    # ids as text: the integer 7 is the string "7", and the tie rules order the text
    run, qrels = text_keyed(run, "`run`"), text_keyed(qrels, "`qrels`")
    qids = sorted(qrels)
    # checked first (a NaN score ranked wherever the input put it, a grade 0.5 truncated to 0),
    # each problem named by its argument, query and document
    relevant = [checked_qrels_query(qrels, qid) for qid in qids]
    run = {qid: checked_run_query(run, qid) for qid in qids if qid in run}
    missing = torch.tensor([qid not in run for qid in qids], dtype=torch.bool)
    tables: dict[tuple[str, int | None], RankTable] = {}
    out: dict[str, Tensor] = {}
    for name in names:
        spec, provider = parse_metric(name), provider_of(name)
        cut = spec.k if provider.averaged and isinstance(spec.k, int) else None
        key = (provider.name, cut)
        if key not in tables:
            ranked = [provider_order(run.get(qid, {}), provider) for qid in qids]
            table = rank_lists(ranked, relevant, judged_documents=True)
            if provider.averaged:
                table = _averaged(table, ranked, run, qids, cut)
            tables[key] = table
        table = tables[key]
        values = counted_values(
            per_query_values(table, spec, options=_OPTIONS), table, spec, _OPTIONS
        )
        out[spec.name] = values.masked_fill(missing, 0.0)
    return qids, out
