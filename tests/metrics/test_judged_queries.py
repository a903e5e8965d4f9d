"""Measures that read which documents were judged (Judged@K, bpref, condensed lists): the
queries they count, and the judgments they need."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import retrieval_metrics as rm

# q1 judges d1 (relevant) and d2 (not); q2 judges d3 and d2, both grade 0 (nothing relevant).
# Cosine ranking: q1 = [1, 0] ranks d1 (1.0), d9 (0.9), d2, d3; q2 = [0, 1] ranks d3 (1.0),
# d2 (0.71), d9, d1. Judged@2 by hand: q1 top 2 = {d1, d9}: 1 of 2 judged = 0.5;
# q2 top 2 = {d3, d2}: both judged = 1.0.
# (q2 has nothing relevant: "skip" leaves it out)
QRELS = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 0, "d2": 0}}
BY_HAND = {"q1": 0.5, "q2": 1.0}


def _judged_metric(**options) -> rm.RetrievalMetrics:
    # the library's name (judged@2): its queries follow empty_queries (ir_measures' Judged@2
    # scores a query judged grade 0 only, as ir_measures does)
    metric = rm.RetrievalMetrics(["judged@2"], qrels=QRELS, **options)
    metric.update(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), ids=["q1", "q2"], role="query")
    metric.update(
        torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.5, 0.5]]),
        ids=["d1", "d9", "d3", "d2"], role="gallery",
    )
    return metric


@pytest.mark.parametrize(("empty_queries", "counted"), [("skip", ["q1"]), ("zero", ["q1", "q2"])])
def test_judged_value_rows_and_interval_cover_the_same_queries(empty_queries, counted):
    metric = _judged_metric(empty_queries=empty_queries)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(metric.compute()["judged@2"])
        rows = metric.per_query()["judged@2"]
        row = metric.summary(num_bootstrap=200).rows[0]
    expected = [BY_HAND[q] for q in counted]
    assert value == pytest.approx(sum(expected) / len(expected))
    shown = sorted(float(v) for v in rows if not math.isnan(float(v)))
    assert shown == sorted(expected)  # the rows are the queries the value averages
    assert row["queries"] == len(counted)
    assert row["skipped"] == (1 if empty_queries == "skip" else 0)
    lo, hi = row["interval"]
    assert min(expected) <= lo <= hi <= max(expected)


# One list d1, d2, d3; judged: d1 not relevant (grade 0), d3 relevant; d2 unjudged.
# By hand: bpref = 1 - min(#judged non-relevant above d3, R) / min(R, N) = 1 - 1/1 = 0;
# Judged@2 = |{d1}| / 2 = 0.5.
RANKED = [["d1", "d2", "d3"]]
JUDGMENTS = [{"d1": 0, "d3": 1}]


def test_judged_measures_from_the_judgments_score_by_hand_without_warning():
    metric = rm.RetrievalMetrics(["Bpref", "Judged@2"])
    metric.update(ranked_ids=RANKED, relevant_ids=JUDGMENTS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = metric.compute()
    assert float(values["Bpref"]) == pytest.approx(0.0)
    assert float(values["Judged@2"]) == pytest.approx(0.5)


@pytest.mark.parametrize("relevant", [[{"d3"}], [{"d3": 1}]])
def test_judged_measures_without_non_relevant_judgments_warn_by_name(relevant):
    metric = rm.RetrievalMetrics(["Bpref", "Judged@2", "nDCG(judged_only=True)@2", "recall@3"])
    metric.update(ranked_ids=RANKED, relevant_ids=relevant)
    named = r"Bpref, Judged@2, nDCG\(judged_only=True\)@2 read"
    with pytest.warns(UserWarning, match=named) as got:
        metric.compute()
    message = str(next(w.message for w in got if "judged not relevant" in str(w.message)))
    assert "recall@3" not in message
    assert "relevant_ids=[{doc: grade" in message and "qrels=" in message
    # summary() (what the command line prints) says it too, once per metric
    fresh = rm.RetrievalMetrics(["Bpref"])
    fresh.update(ranked_ids=RANKED, relevant_ids=relevant)
    with pytest.warns(UserWarning, match="Bpref read which documents were judged not relevant"):
        fresh.summary(num_bootstrap=10)
