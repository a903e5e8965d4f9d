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
QRELS = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 0, "d2": 0}}
BY_HAND = {"q1": 0.5, "q2": 1.0}


def _judged_metric(**options) -> rm.RetrievalMetrics:
    metric = rm.RetrievalMetrics(["Judged@2"], qrels=QRELS, **options)
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
        value = float(metric.compute()["Judged@2"])
        rows = metric.per_query()["Judged@2"]
        row = metric.summary(num_bootstrap=200).rows[0]
    expected = [BY_HAND[q] for q in counted]
    assert value == pytest.approx(sum(expected) / len(expected))
    shown = sorted(float(v) for v in rows if not math.isnan(float(v)))
    assert shown == sorted(expected)  # the rows are the queries the value averages
    assert row["queries"] == len(counted)
    assert row["skipped"] == (1 if empty_queries == "skip" else 0)
    lo, hi = row["interval"]
    assert min(expected) <= lo <= hi <= max(expected)
