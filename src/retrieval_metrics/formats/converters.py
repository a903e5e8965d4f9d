"""Converters of two protocols' inputs into the library's input forms: a TREC run with its
qrels as ranked lists in trec_eval's tie order (:func:`trec_run_to_lists`), and ann-benchmarks'
distances as ranks whose recall is its distance-threshold recall (:func:`ann_benchmarks_ranks`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.formats.runs import (
    checked_grade,
    checked_score,
    text_keyed,
    trec_eval_order,
)

__all__ = ["ann_benchmarks_ranks", "trec_run_to_lists"]


def trec_run_to_lists(
    run: Mapping[str, Mapping[str, float]], qrels: Mapping[str, Mapping[str, int]]
) -> tuple[list[list[str]], list[dict[str, int]], list[str]]:
    """A TREC run (qid -> docid -> score) and qrels (qid -> docid -> grade) as ranked lists.

    Documents are ordered by decreasing score (compared as float32, as trec_eval holds scores),
    ties by document id in descending byte order (trec_eval's rule). Ids may be str or int, and
    are returned as text: the integer 7 and ``"7"`` are one id, and ties are ordered by the
    text (``"9"`` before ``"10"``), as trec_eval orders the ids of a run file. Queries are those
    of the qrels, sorted; a query missing from the run gets an empty list (it scores 0, as
    ``trec_eval -c``). Returns (ranked ids, relevance dicts, qids).

    A score must be a finite number and a grade a whole number, as the file readers require:
    anything else is a ``ValueError`` naming ``run`` or ``qrels``, the query and the document
    (a NaN has no place in a ranking; a grade 0.5 would be truncated to 0).
    """
    run, qrels = text_keyed(run, "`run`"), text_keyed(qrels, "`qrels`")
    qids = sorted(qrels)
    ranked, relevant = [], []
    for qid in qids:
        ranked.append(trec_eval_order(checked_run_query(run, qid)))
        relevant.append(checked_qrels_query(qrels, qid))
    return ranked, relevant, qids


def checked_run_query(run: Mapping[str, Mapping[Any, Any]], qid: str) -> dict[str, float]:
    """``run[qid]`` (empty where the run lacks the query) with each score checked and made a
    float, whatever number type the run holds (int, numpy, 0-d tensor)."""
    scores = text_keyed(run.get(qid, {}), f"`run`, query {qid!r}")
    return {doc: checked_score(score, f"`run`, query {qid!r}, document {doc!r}")
            for doc, score in scores.items()}


def checked_qrels_query(qrels: Mapping[str, Mapping[Any, Any]], qid: str) -> dict[str, int]:
    """``qrels[qid]`` with each grade checked and made an int."""
    grades = text_keyed(qrels[qid], f"`qrels`, query {qid!r}")
    return {doc: checked_grade(g, f"`qrels`, query {qid!r}, document {doc!r}")
            for doc, g in grades.items()}


def _distances(name: str, value: Any) -> Tensor:
    try:
        return torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"`{name}` must be a (queries, items) matrix of distances (a short result padded "
            f"with inf, as ann-benchmarks stores it), got {type(value).__name__} ({err})"
        ) from None


def ann_benchmarks_ranks(
    run_distances: Tensor | Sequence[Sequence[float]],
    true_distances: Tensor | Sequence[Sequence[float]],
    k: int,
    epsilon: float = 1e-3,
) -> tuple[list[list[int]], list[int]]:
    """ann-benchmarks' k-recall@k as ranks for ``update(relevant_ranks=..., num_relevant=...)``.

    A returned item (in the first k of the run) counts when its distance is <= the k-th true
    distance + ``epsilon``; each query has k "relevant" slots, so recall@k of the result equals
    ann-benchmarks' recall.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` must be a positive int, got {k!r}")
    run = _distances("run_distances", run_distances)
    true = _distances("true_distances", true_distances)
    if run.dim() != 2 or true.dim() != 2 or run.shape[0] != true.shape[0]:
        raise ValueError(
            "`run_distances` and `true_distances` must be (queries, items) with the same number "
            f"of queries, got {tuple(run.shape)} and {tuple(true.shape)}"
        )
    if true.shape[1] < k:
        raise ValueError(f"`true_distances` needs at least k={k} columns, got {true.shape[1]}")
    threshold = true[:, k - 1] + epsilon
    ranks = [
        [i + 1 for i in range(min(k, run.shape[1])) if float(run[q, i]) <= float(threshold[q])]
        for q in range(run.shape[0])
    ]
    return ranks, [k] * run.shape[0]
