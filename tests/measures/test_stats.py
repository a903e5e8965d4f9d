"""Chance level, intervals and paired comparison (docs/definitions.md)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import binomtest

import retrieval_metrics as rm
from retrieval_metrics.functional.measures.stats import (
    bootstrap_interval,
    mcnemar_exact,
    paired_comparison,
    wilson_interval,
)


def test_wilson_interval_hand_worked():
    # p = 0.8, n = 10, z = 1.959964: centre (0.8 + z^2/20) / (1 + z^2/10) = 0.71672,
    # half-width z * sqrt(0.016 + z^2/400) / (1 + z^2/10) = 0.22659
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.49016, abs=1e-4) and hi == pytest.approx(0.94331, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0


@pytest.mark.parametrize(("only_a", "only_b"), [(0, 0), (3, 0), (7, 2), (10, 11), (1, 9)])
def test_mcnemar_equals_binomial_test(only_a, only_b):
    a = torch.tensor([1] * only_a + [0] * only_b + [1] * 5 + [0] * 4)
    b = torch.tensor([0] * only_a + [1] * only_b + [1] * 5 + [0] * 4)
    n = only_a + only_b
    expected = 1.0 if n == 0 else binomtest(only_a, n, 0.5).pvalue
    assert mcnemar_exact(a, b) == pytest.approx(expected, abs=1e-12)


def test_bootstrap_is_seeded_and_covers_the_mean():
    values = torch.rand(200, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    lo, hi = bootstrap_interval(values, seed=3)
    assert (lo, hi) == bootstrap_interval(values, seed=3)
    assert lo < float(values.mean()) < hi
    # standard error of the mean ~ 0.29 / sqrt(200) = 0.0204: the 95% width is about 0.08
    assert 0.05 < hi - lo < 0.11
    assert bootstrap_interval(torch.full((5,), 0.5)) == (0.5, 0.5)
    assert all(math.isnan(x) for x in bootstrap_interval(torch.tensor([math.nan])))


def test_paired_comparison_of_identical_and_different_models():
    a = torch.tensor([1.0, 0, 1, 1, 0, 1, 1, 1])
    same = paired_comparison("hit_rate@1", a, a.clone())
    assert same.difference == 0 and same.p_value == 1.0 and same.test == "exact McNemar"
    x = torch.linspace(0, 1, 100, dtype=torch.float64)
    better = paired_comparison("map", x, x - 0.2)
    assert better.difference == pytest.approx(0.2)
    assert better.interval == pytest.approx((0.2, 0.2))
    assert better.p_value == 0.0 and better.test == "paired bootstrap"
    with pytest.raises(ValueError, match="different queries"):
        paired_comparison("map", x, x[:5])


def test_compare_and_confidence_interval_on_metric_objects():
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(120) % 12
    good_emb = torch.eye(12)[labels] + 0.3 * torch.randn(120, 12, generator=gen)
    bad_emb = torch.randn(120, 12, generator=gen)
    good, bad = (
        rm.RetrievalMetrics(["hit_rate@1", "map@r"]),
        rm.RetrievalMetrics(["hit_rate@1", "map@r"]),
    )
    good.update(good_emb, labels)
    bad.update(bad_emb, labels)
    result = rm.compare(good, bad)
    assert result["hit_rate@1"].test == "exact McNemar"
    assert result["hit_rate@1"].difference > 0.3 and result["hit_rate@1"].p_value < 1e-6
    assert result["map@r"].interval[0] > 0
    intervals = good.confidence_interval()
    value = good.compute()
    for name, (lo, hi) in intervals.items():
        assert lo <= float(value[name]) <= hi
    other = rm.RetrievalMetrics(["hit_rate@1", "map@r"])
    other.update(bad_emb[:60], labels[:60])
    with pytest.raises(ValueError, match="same queries"):
        rm.compare(good, other)


def test_chance_level_single_relevant_is_k_over_n():
    # every query has exactly one relevant item among N - 1 = 9 others
    labels = torch.arange(10) // 2
    m = rm.RetrievalMetrics(["hit_rate@3", "mrr"])
    m.update(torch.randn(10, 4), labels)
    row = m.summary()["hit_rate@3"]
    assert float(row["chance"]) == pytest.approx(3 / 9)
    # MRR of a uniformly random rank among 9: (1/9) * H(9)
    assert float(m.summary()["mrr"]["chance"]) == pytest.approx(
        sum(1 / i for i in range(1, 10)) / 9
    )


def test_ranked_lists_have_no_chance_level_and_chance_is_shared_per_gallery():
    m = rm.RecallAtK(k=2)
    m.update(ranked_ids=[["a", "b", "c"]], relevant_ids=[{"b", "z"}])
    assert m.summary()["recall@2"]["chance"] is None
    # queries with the same gallery size and relevant count share one chance computation;
    # the result equals the chance table's own measures
    from retrieval_metrics.functional import measures as M

    labels = torch.arange(30) % 7  # classes of 5 and 4 items: two distinct galleries
    metric = rm.RetrievalMetrics(["mrr", "hit_rate@3", "map@r", "median_rank"])
    metric.update(torch.randn(30, 5), labels)
    table = metric.rank_table()
    direct = M.retrieval_measures(M.chance_table(table), metric.metric_names())
    shared = M.chance_measures(table, metric.metric_names())
    for name in direct:
        torch.testing.assert_close(direct[name], shared[name])


def test_the_median_rank_interval_resamples_the_median_reported():
    """Per-query ranks 1 and 3: a resample's ordinary median is 1, 2 or 3 (1/4, 1/2, 1/4);
    torch's lower median, which the interval took, is 1 (3/4) or 3. At level 0.4 the percentile
    interval of the reported median is (2, 2); of the lower median it was (1, 1) (found by an
    audit: the interval did not describe the value)."""
    ranks = torch.tensor([1.0, 3.0])
    assert bootstrap_interval(ranks, 0.4, 4000, 0, "median") == (2.0, 2.0)
    assert bootstrap_interval(ranks, 0.4, 4000, 0, "median_vsepp") == (2.0, 2.0)
    with pytest.raises(ValueError, match="`statistic` must be one of"):
        bootstrap_interval(ranks, 0.4, 10, 0, "lower median")
    for median in ("plain", "vsepp"):
        m = rm.MedianRank(median=median)
        m.update(relevant_ranks=[[1], [3]])
        row = m.summary(level=0.4, num_bootstrap=4000).as_dict()["median_rank"]
        assert row["value"] == 2.0 and tuple(row["interval"]) == (2.0, 2.0), median
