"""Chance level, intervals and paired comparison (docs/definitions.md)."""

from __future__ import annotations

import itertools
import math
import time
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

import retrieval_metrics as rm
from retrieval_metrics.functional.measures.paired import mcnemar_exact, paired_comparison
from retrieval_metrics.functional.measures.stats import bootstrap_interval, wilson_interval


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
    # the same difference on every query: every bootstrap resample is that difference, and
    # the p-value is the sign-flip test's (p = 0, "p < 0.0001", claimed what the bootstrap
    # cannot show); 100 queries, 10,000 random sign vectors: (0 + 1) / 10,001, twice
    assert better.test == "paired randomization"
    assert better.p_value == pytest.approx(2 / 10_001)
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


# ---------------------------------------------------------------- the interval of the value
# (an audit: a micro or class average's interval was that of the mean of per-query values,
# and could leave out the value it was printed beside)


def _numpy_percentiles(stats: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    return tuple(np.quantile(stats, [(1 - level) / 2, (1 + level) / 2]).tolist())


def test_a_micro_average_interval_resamples_its_sums():
    ranked, relevant = [], []
    for q in range(40):
        rel = {f"r{q}_{i}" for i in range(20)} if q % 2 else {f"r{q}_0"}
        found = sorted(rel)[:2] if q % 2 else sorted(rel)
        ranked.append(found + [f"n{q}_{i}" for i in range(10)])
        relevant.append(rel)
    metric = rm.RetrievalMetrics(["recall@10/micro", "recall@10"])
    metric.update(ranked_ids=ranked, relevant_ids=relevant)
    summary = metric.summary(num_bootstrap=4000)
    # by hand: 20 queries find their one relevant item, 20 find 2 of 20: 60 / 420 (micro)
    hits = np.array([2.0 if q % 2 else 1.0 for q in range(40)])
    relevant_count = np.array([20.0 if q % 2 else 1.0 for q in range(40)])
    assert float(summary["recall@10/micro"]["value"]) == pytest.approx(60 / 420)
    draws = np.random.default_rng(0).integers(0, 40, (20_000, 40))
    expected = _numpy_percentiles(hits[draws].sum(1) / relevant_count[draws].sum(1))
    lo, hi = summary["recall@10/micro"]["interval"]
    assert lo < 60 / 420 < hi
    assert (lo, hi) == pytest.approx(expected, abs=0.006)  # (the macro mean's: 0.415, 0.685)
    # in percent, the same interval times 100
    in_percent = rm.RetrievalMetrics(["recall@10/micro"], percent=True)
    in_percent.update(ranked_ids=ranked, relevant_ids=relevant)
    lo_pct, hi_pct = in_percent.summary(num_bootstrap=4000)["recall@10/micro"]["interval"]
    assert (lo_pct, hi_pct) == pytest.approx((100 * lo, 100 * hi), rel=1e-12)


def unbalanced_classes() -> tuple[torch.Tensor, torch.Tensor]:
    """One class of 40 tight items (each finds its class at rank 1) and five of two items
    lost in noise: the class average (about 1/6) is far from the mean over queries (about
    0.8)."""
    gen = torch.Generator().manual_seed(0)
    centres = 10 * torch.randn(6, 16, generator=gen)
    labels = torch.cat([torch.zeros(40, dtype=torch.int64), torch.arange(1, 6).repeat(2)])
    spread = torch.where(labels == 0, 0.01, 30.0)[:, None]
    return centres[labels] + spread * torch.randn(50, 16, generator=gen), labels


def _class_bootstrap(values: np.ndarray, classes: np.ndarray, draws: np.ndarray) -> np.ndarray:
    out = []
    for row in draws:
        v, c = values[row], classes[row]
        out.append(np.mean([v[c == k].mean() for k in np.unique(c)]))
    return np.array(out)


@pytest.mark.parametrize("name", ["hit_rate@1", "map@r"])
def test_a_class_average_interval_resamples_the_class_means(name):
    embeddings, labels = unbalanced_classes()
    metric = rm.RetrievalMetrics([name], average="class")
    metric.update(embeddings, labels)
    row = metric.summary(num_bootstrap=4000)[name]
    per_query = metric.per_query()[name].numpy()
    classes = labels.numpy()
    value = np.mean([per_query[classes == k].mean() for k in range(6)])
    assert float(row["value"]) == pytest.approx(value)
    assert abs(value - per_query.mean()) > 0.3  # (the mean over queries is elsewhere)
    draws = np.random.default_rng(1).integers(0, 50, (4000, 50))
    expected = _numpy_percentiles(_class_bootstrap(per_query, classes, draws))
    lo, hi = row["interval"]
    assert lo <= value <= hi
    assert (lo, hi) == pytest.approx(expected, abs=0.03)


def test_a_class_averaged_curve_resamples_the_class_means_at_each_k():
    embeddings, labels = unbalanced_classes()
    metric = rm.RetrievalMetrics(["cmc@3"], average="class")
    metric.update(embeddings, labels)
    row = metric.summary(num_bootstrap=4000)["cmc@3"]
    lo, hi = row["interval"]
    per_query = metric.per_query()["cmc@3"].numpy()
    classes = labels.numpy()
    draws = np.random.default_rng(2).integers(0, 50, (4000, 50))
    for k in range(3):
        assert float(lo[k]) <= float(row["value"][k]) <= float(hi[k])
        expected = _numpy_percentiles(_class_bootstrap(per_query[:, k], classes, draws))
        assert (float(lo[k]), float(hi[k])) == pytest.approx(expected, abs=0.03)


def test_the_interval_header_shows_the_level_as_given():
    metric = rm.RetrievalMetrics(["mrr"])
    metric.update(ranked_ids=[["a", "b"], ["b", "a"]], relevant_ids=[{"a"}, {"a"}])
    for level, shown in ((0.975, "97.5% interval"), (0.57, "57% interval"),
                         (0.999, "99.9% interval"), (0.95, "95% interval")):  # fmt: skip
        assert shown in str(metric.summary(level=level, num_bootstrap=50)).splitlines()[0]


# ---------------------------------------------------------------- compare(): the values compared


def _lists_metric(names: list[str], ranks: list[int], **options) -> rm.RetrievalMetrics:
    """One relevant document per query, at the rank given, in lists of 8."""
    metric = rm.RetrievalMetrics(names, **options)
    metric.update(ranked_ids=[[f"d{j}" for j in range(8)] for _ in ranks],
                  relevant_ids=[{f"d{r - 1}"} for r in ranks],
                  ids=[f"q{i}" for i in range(len(ranks))])  # fmt: skip
    return metric


def test_compare_reports_each_measures_own_value_and_difference():
    a = _lists_metric(["median_rank", "mean_rank"], [1, 1, 1, 6], median="plain")
    b = _lists_metric(["median_rank", "mean_rank"], [1, 1, 1, 1], median="plain")
    result = rm.compare(a, b, num_bootstrap=2000)
    median = result["median_rank"]
    # the medians (1 and 1), not the mean ranks (2.25 and 1) under the median's name
    assert (median.first, median.second, median.difference) == (1.0, 1.0, 0.0)
    assert median.p_value == 1.0 and str(median).startswith(
        "median_rank: 1.0000 vs 1.0000, difference +0.0000"
    )
    assert (result["mean_rank"].first, result["mean_rank"].second) == (2.25, 1.0)
    # a resample's median difference: 0 where the rank-6 query is drawn at most once (189/256
    # of the resamples), 2.5 where twice (54/256), 5 where 3 or 4 times (13/256 > 2.5%)
    assert median.interval == (0.0, 5.0)

    def micro(found):
        metric = rm.RetrievalMetrics(["recall@3/micro"])
        metric.update(ranked_ids=[["a", "x", "y"], found],
                      relevant_ids=[{"a"}, {f"r{i}" for i in range(10)}], ids=["q0", "q1"])
        return metric

    first, second = micro(["r0", "r1", "r2"]), micro(["x", "y", "z"])
    row = rm.compare(first, second, num_bootstrap=2000)["recall@3/micro"]
    # 4 of 11 relevant documents found against 1 of 11 (the mean of per-query recalls: 0.65, 0.5)
    assert row.first == pytest.approx(4 / 11) and row.second == pytest.approx(1 / 11)
    assert row.first == pytest.approx(float(first.compute()["recall@3/micro"]), rel=1e-6)
    assert row.difference == pytest.approx(3 / 11)
    # the two queries drawn: q0 twice (0), q1 twice (3/10), one of each (3/11)
    assert row.interval == pytest.approx((0.0, 0.3))


def test_compare_chooses_its_test_on_unit_free_values():
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(200) % 40
    base = torch.eye(40)[labels][:, :16]
    emb_a = torch.randn(200, 16, generator=gen) + 1.2 * base
    emb_b = torch.randn(200, 16, generator=gen) + 1.0 * base
    results = {}
    for percent in (False, True):
        a, b = rm.HitRateAtK(k=1, percent=percent), rm.HitRateAtK(k=1, percent=percent)
        a.update(emb_a, labels)
        b.update(emb_b, labels)
        results[percent] = rm.compare(a, b)["hit_rate@1"]
        va, vb = a.per_query()["hit_rate@1"], b.per_query()["hit_rate@1"]
    only_a = int(((va > 0) & (vb == 0)).sum())
    only_b = int(((va == 0) & (vb > 0)).sum())
    expected = binomtest(only_a, only_a + only_b).pvalue
    for percent, row in results.items():
        assert row.test == "exact McNemar", percent
        assert row.p_value == pytest.approx(expected, rel=1e-12)
    fraction, percent = results[False], results[True]
    assert percent.first == pytest.approx(100 * fraction.first, rel=1e-12)
    assert percent.difference == pytest.approx(100 * fraction.difference, rel=1e-12)
    assert percent.interval == pytest.approx(tuple(100 * x for x in fraction.interval), rel=1e-9)


def test_compare_claims_no_p_value_from_one_query_or_one_difference():
    one = rm.compare(_lists_metric(["mrr"], [1]), _lists_metric(["mrr"], [2]))["mrr"]
    assert math.isnan(one.p_value) and one.test == "none" and one.queries == 1
    assert (one.first, one.second, one.difference) == (1.0, 0.5, 0.5)
    assert str(one) == ("mrr: 1.0000 vs 0.5000, difference +0.5000 [+0.5000, +0.5000], "
                        "p = n/a (untested, 1 query)")  # fmt: skip
    # three queries, each 1/1 against 1/2: the bootstrap has no spread; the exact sign-flip
    # test counts 2 of the 8 sign vectors as extreme as the observed one: p = 2/8
    three = rm.compare(_lists_metric(["mrr"], [1, 1, 1]), _lists_metric(["mrr"], [2, 2, 2]))
    assert three["mrr"].test == "paired randomization"
    assert three["mrr"].p_value == 0.25
    assert ", p = 0.25 (paired randomization, 3 queries)" in str(three["mrr"])
    # a median's difference that never varies: every swap of the two systems' ranks, by hand
    first, second = [2.0, 3.0, 4.0, 6.0], [1.0, 2.0, 3.0, 5.0]
    result = paired_comparison("median_rank", torch.tensor(first), torch.tensor(second),
                               statistic="median")  # fmt: skip
    observed = float(np.median(first) - np.median(second))
    null = []
    for swaps in itertools.product((False, True), repeat=4):
        x = [s if swap else f for f, s, swap in zip(first, second, swaps, strict=True)]
        y = [f if swap else s for f, s, swap in zip(first, second, swaps, strict=True)]
        null.append(float(np.median(x) - np.median(y)))
    one_sided = min(sum(v <= observed for v in null), sum(v >= observed for v in null))
    assert result.test == "paired randomization" and result.difference == observed == 1.0
    assert result.p_value == min(1.0, 2 * one_sided / 16)


def test_few_queries_are_tested_by_every_swap_not_by_the_bootstrap():
    """Two or three queries whose differences vary a little: the bootstrap's few distinct
    resamples gave p < 0.0001 (a review found it), where no paired test of n queries goes below
    2 / 2^n. Their 2^n swaps are enumerated: by hand, differences 0.1 and 0.7 (mean 0.4) swap
    to means 0.4, -0.3, 0.3 and -0.4, so 2 of 4 are as far from 0: p = 0.5."""
    two = paired_comparison("mrr", torch.tensor([0.9, 0.8]), torch.tensor([0.8, 0.1]))
    assert two.test == "paired randomization" and two.p_value == 0.5
    nearly = paired_comparison("mrr", torch.tensor([0.9, 0.900000001]), torch.tensor([0.6, 0.6]))
    assert nearly.p_value == 0.5
    three = paired_comparison("mrr", torch.tensor([0.7, 0.6, 0.7]), torch.tensor([0.5, 0.45, 0.5]))
    assert three.p_value == 0.25  # the smallest p of 3 queries: 2 of the 8 swaps
    # many queries: the bootstrap, as before
    gen = torch.Generator().manual_seed(1)
    a, b = torch.rand(40, generator=gen, dtype=torch.float64), torch.rand(40, generator=gen,
                                                                           dtype=torch.float64)
    assert paired_comparison("mrr", a, b).test == "paired bootstrap"


def test_a_bootstrap_p_value_does_not_depend_on_the_order_of_the_queries():
    # reciprocal ranks, many resampled mean differences equal to the observed one: in the
    # given order they were counted as "as extreme" or not by the rounding of the sum
    a = torch.tensor([1 / 7, 1 / 6, 1, 1 / 4, 1, 1, 1 / 6, 1 / 6, 1 / 6, 1 / 3, 1 / 3, 1 / 3,
                      1 / 6, 1, 1 / 7, 1, 1 / 3, 1 / 4, 1, 1 / 4, 1, 1 / 4, 1 / 2, 1 / 5, 1 / 4,
                      1 / 7, 1 / 4, 1 / 4, 1 / 3, 1 / 3], dtype=torch.float64)  # fmt: skip
    b = torch.tensor([1 / 2, 1 / 2, 1 / 2, 1 / 3, 1 / 4, 1 / 4, 1 / 4, 1 / 6, 1, 1 / 4, 1 / 5, 1,
                      1 / 2, 1 / 2, 1 / 7, 1, 1 / 5, 1 / 3, 1 / 4, 1 / 5, 1 / 6, 1 / 5, 1 / 5,
                      1 / 5, 1 / 2, 1 / 4, 1 / 7, 1, 1, 1 / 3], dtype=torch.float64)  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    p_values = set()
    for _ in range(12):
        order = torch.randperm(30, generator=gen)
        p_values.add(paired_comparison("mrr", a[order], b[order], num_bootstrap=2000).p_value)
    assert len(p_values) == 1, p_values


# ---------------------------------------------------------------- the exact McNemar test


def _old_mcnemar(only_a: int, only_b: int) -> float:
    """The exact sum of binomial coefficients the test used to compute (slow for large n)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def _outcomes(only_a: int, only_b: int, both: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.tensor([1] * only_a + [0] * only_b + [1] * both + [0] * both)
    b = torch.tensor([0] * only_a + [1] * only_b + [1] * both + [0] * both)
    return a, b


def test_mcnemar_equals_the_exact_sum_for_small_counts():
    for n in range(0, 61):
        for only_a in range(0, n + 1):
            expected = _old_mcnemar(only_a, n - only_a)
            got = mcnemar_exact(*_outcomes(only_a, n - only_a))
            assert got == pytest.approx(expected, rel=1e-13, abs=0), (only_a, n)


@pytest.mark.timeout(60)
def test_mcnemar_is_fast_and_exact_for_many_discordant_pairs():
    # the exact tail by big integers, each coefficient from the one before (O(k) products)
    def exact(k: int, n: int) -> float:
        coefficient = total = 1
        for i in range(k):
            coefficient = coefficient * (n - i) // (i + 1)
            total += coefficient
        return float(min(1, Fraction(2 * total, 2**n)))

    for only_a, only_b in ((9_600, 10_400), (4_900, 5_100), (29_700, 30_300), (1, 20_000)):
        expected = exact(only_a, only_a + only_b)
        got = mcnemar_exact(*_outcomes(only_a, only_b))
        assert got == pytest.approx(expected, rel=1e-12), (only_a, only_b)
        assert got == pytest.approx(binomtest(only_a, only_a + only_b).pvalue, rel=1e-9)
    # 20,000 discordant pairs, 200 more one way: p = 0.0047 (the sum of coefficients: 34 s)
    assert mcnemar_exact(*_outcomes(9_900, 10_100)) == pytest.approx(
        exact(9_900, 20_000), rel=1e-12
    )
    # a million: the sum never finished
    start = time.perf_counter()
    assert mcnemar_exact(*_outcomes(499_000, 501_000)) == pytest.approx(
        binomtest(499_000, 1_000_000).pvalue, rel=1e-9
    )
    assert time.perf_counter() - start < 5


def test_compare_of_class_averages_compares_the_class_averages():
    embeddings, labels = unbalanced_classes()
    first = rm.RetrievalMetrics(["map@r"], average="class")
    first.update(embeddings, labels)
    second = rm.RetrievalMetrics(["map@r"], average="class")
    noise = torch.randn(embeddings.shape, generator=torch.Generator().manual_seed(1))
    second.update(embeddings + 12 * noise, labels)  # (the same items, other scores)
    row = rm.compare(first, second, num_bootstrap=2000)["map@r"]
    values = [float(m.compute()["map@r"]) for m in (first, second)]
    assert (row.first, row.second) == pytest.approx(values, rel=1e-6)
    assert row.difference == pytest.approx(values[0] - values[1], abs=1e-6)
    assert row.interval[0] <= row.difference <= row.interval[1]
    assert abs(values[0] - values[1]) > 0.05
