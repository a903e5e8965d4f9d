"""A measure registered by the user: parsed, computed by retrieval_measures and by the metric
classes like the library's own, and removed again."""

from __future__ import annotations

import math

import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.measures.names import RANK_METRICS
from retrieval_metrics.functional.ranking import rank_lists


def hits_squared(table, k, options, shared):
    """(relevant items in the top K)^2, NaN for unanswerable queries."""
    hits = M.expected_hits_per_query(table, k, options.ties, shared=shared)
    return torch.where(table.num_relevant > 0, hits**2, torch.full_like(hits, math.nan))


HITS_SQ = M.Measure("hits_sq", hits_squared, "required", depth=lambda k: k)


@pytest.fixture
def hits_sq():
    M.register_measure(HITS_SQ)
    try:
        yield HITS_SQ
    finally:
        M.unregister_measure("hits_sq")


def test_a_registered_measure_is_computed_everywhere(hits_sq):
    # query 0: a b c d with a, c, d relevant; query 1: x y z with y relevant
    # hits_sq@3 = (2^2 + 1^2) / 2 = 2.5; hits_sq@1 = (1 + 0) / 2 = 0.5
    table = rank_lists([["a", "b", "c", "d"], ["x", "y", "z"]], [{"a", "c", "d"}, {"y"}])
    values = M.retrieval_measures(table, ["hits_sq@3", "hits_sq@1", "hit_rate@1"])
    assert float(values["hits_sq@3"]) == 2.5
    assert float(values["hits_sq@1"]) == 0.5
    assert float(values["hit_rate@1"]) == 0.5
    assert M.parse_metric("hits_sq@3/class").average == "class"
    assert M.depth_for(["hits_sq@7"]) == (7, False)

    metric = rm.RetrievalMetrics(["hits_sq@3", "hits_sq@1"])
    preds = torch.tensor([4.0, 3.0, 2.0, 1.0, 3.0, 2.0, 1.0])
    target = torch.tensor([1, 0, 1, 1, 0, 1, 0])
    indexes = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    metric.update(preds=preds, target=target, indexes=indexes)
    out = metric.compute()
    assert float(out["hits_sq@3"]) == 2.5
    assert float(out["hits_sq@1"]) == 0.5


def test_unregistered_names_are_unknown_again(hits_sq):
    M.parse_metric("hits_sq@2")
    M.unregister_measure("hits_sq")
    try:
        with pytest.raises(ValueError, match="unknown metric"):
            M.parse_metric("hits_sq@2")
        assert "hits_sq" not in M.MEASURES
        # the same name registered again with another cut-off rule parses by the new rule
        # (parse_metric keeps its specs, and reads a name again once the measures change)
        M.register_measure(M.Measure("hits_sq", hits_squared, "none"))
        with pytest.raises(ValueError, match="takes no cut-off"):
            M.parse_metric("hits_sq@2")
        assert M.parse_metric("hits_sq").k is None
        M.unregister_measure("hits_sq")
    finally:
        M.register_measure(HITS_SQ)  # for the fixture to remove


def test_a_rank_measure_joins_rank_metrics():
    worst = M.Measure("last_rank", lambda t, k, o, s: M.first_rank_per_query(t, o.ties,
                                                                              shared=s),
                      rank=True)
    M.register_measure(worst)
    try:
        assert "last_rank" in RANK_METRICS
        assert not M.parse_metric("last_rank").higher_is_better
    finally:
        M.unregister_measure("last_rank")
    assert "last_rank" not in RANK_METRICS


@pytest.mark.parametrize(
    ("measure", "match"),
    [
        (M.Measure("map", HITS_SQ.per_query), "exists already"),
        (M.Measure("Hits", HITS_SQ.per_query), "lower-case identifier"),
        (M.Measure("hits@2", HITS_SQ.per_query), "lower-case identifier"),
        (M.Measure("hit-rate", HITS_SQ.per_query), "lower-case identifier"),
        (M.Measure("", HITS_SQ.per_query), "lower-case identifier"),
        (M.Measure("hits2", HITS_SQ.per_query, "r"), "`cutoff` must be one of"),
    ],
)
def test_bad_registrations_are_refused(measure, match):
    with pytest.raises(ValueError, match=match):
        M.register_measure(measure)
    assert measure.base not in M.MEASURES or measure.base == "map"


def test_the_librarys_measures_cannot_be_removed():
    with pytest.raises(ValueError, match="cannot be removed"):
        M.unregister_measure("map")
    with pytest.raises(ValueError, match="no measure named"):
        M.unregister_measure("nothing_here")
