"""summary(ids=...): each row holds its values keyed by the query ids, the keys of
per_query(ids=...), over the queries its value and interval cover."""

from __future__ import annotations

import math
import warnings

import pytest

import retrieval_metrics as rm


def test_summary_rows_carry_per_query_values_keyed_by_query_id():
    # by hand: "who" finds d1 first (RR 1, recall@2 1/2: d4 never returned); "what" finds d5
    # third (RR 1/3, recall@2 0); "none" has nothing relevant (left out under "skip")
    metric = rm.RetrievalMetrics(["mrr", "recall@2"], prefix="val/")
    metric.update(ranked_ids=[["d1", "d2", "d3"], ["d2", "d3", "d5"], ["d1"]],
                  relevant_ids=[{"d1", "d4"}, {"d5"}, set()], ids=["who", "what", "none"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        summary = metric.summary(num_bootstrap=50, ids=["what", "who", "none"])
    rows = summary.as_dict()
    mrr = rows["val/mrr"]["per_query"]
    assert list(mrr) == ["what", "who", "none"]  # the order of ids
    assert mrr["what"] == pytest.approx(1 / 3) and mrr["who"] == 1.0 and math.isnan(mrr["none"])
    assert rows["val/recall@2"]["per_query"]["who"] == 0.5
    # the value and the count are over the keyed values that are not NaN
    counted = [v for v in mrr.values() if not math.isnan(v)]
    assert rows["val/mrr"]["queries"] == len(counted) == 2
    assert float(rows["val/mrr"]["value"]) == pytest.approx(sum(counted) / 2)
    # without ids the rows are as before
    assert "per_query" not in metric.summary(num_bootstrap=50).as_dict()["val/mrr"]
