"""What ``compare()``, ``metric.plot()`` and the command line say and draw: p-values of 0 from a
bootstrap, the CMC comparison named for what it compares, the message for different measures,
the curve plot's K axis and legend, and the tie rule under a run's header."""

from __future__ import annotations

import io
import json
import math
import re

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics import cli
from retrieval_metrics.cli import demo
from retrieval_metrics.functional.measures.paired import Comparison
from retrieval_metrics.plot import Curve, plot_curves


def two_models(metric: type, **kwargs):
    """A model that finds the class (good) and one that guesses (bad), on the same 120 items."""
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(120) % 12
    good, bad = metric(**kwargs), metric(**kwargs)
    good.update(torch.eye(12)[labels] + 0.3 * torch.randn(120, 12, generator=gen), labels)
    bad.update(torch.randn(120, 12, generator=gen), labels)
    return good, bad


# ---------------------------------------------------------------- p-values of 0


def test_bootstrap_p_of_zero_prints_as_below_one_over_the_resamples():
    good, bad = two_models(rm.MAPAtR)
    for resamples, bound in ((1000, "0.001"), (10_000, "0.0001")):
        result = rm.compare(good, bad, num_bootstrap=resamples)["map@r"]
        # no resample re-centred on 0 comes near a difference this large
        assert result.test == "paired bootstrap" and result.p_value == 0.0
        assert result.num_bootstrap == resamples
        text = str(result)
        assert f", p < {bound} (paired bootstrap, 120 queries)" in text, text
        assert "p = 0 " not in text


def test_p_text_rounds_the_bound_up_and_leaves_other_p_values_alone():
    def comparison(p: float, test: str, resamples: int | None) -> Comparison:
        return Comparison("map", 0.5, 0.3, 0.2, (0.1, 0.3), p, test, 40, resamples)

    # 1/3000 = 0.000333...: "p < 0.00033" would claim more than 3000 resamples show
    assert comparison(0.0, "paired bootstrap", 3000).p_text() == "p < 0.00034"
    assert comparison(0.0, "paired bootstrap", 2000).p_text() == "p < 0.0005"
    assert comparison(0.03125, "paired bootstrap", 2000).p_text() == "p = 0.03125"
    assert comparison(0.03125, "paired bootstrap", 2000).p_text(digits=2) == "p = 0.031"
    # an exact McNemar p-value is 0 only by underflow, not for want of resamples
    assert comparison(0.0, "exact McNemar", 10_000).p_text() == "p = 0"
    # constructed without the number of resamples (the field's default): printed as before
    old = Comparison("map", 0.5, 0.3, 0.2, (0.1, 0.3), 0.0, "paired bootstrap", 40)
    assert old.num_bootstrap is None and ", p = 0 (paired bootstrap, 40 queries)" in str(old)


def test_demo_verdict_uses_the_comparison_p_text():
    ma, mb = two_models(rm.RetrievalMetrics, metrics=["hit_rate@1", "map@r"])
    out = io.StringIO()
    lines = demo._verdict("A", "B", ma, mb, out)
    assert lines["map@r"]["p_value"] == 0.0
    (map_line,) = [line for line in out.getvalue().splitlines() if "MAP@R" in line]
    assert map_line.endswith(", p < 0.0005 (paired bootstrap)"), map_line  # 2000 resamples


# ---------------------------------------------------------------- what a CMC comparison compares


def test_cmc_comparison_is_named_as_the_mean_over_k():
    good, bad = two_models(rm.RetrievalMetrics, metrics=["cmc@20", "map@r"])
    result = rm.compare(good, bad, num_bootstrap=200)
    assert list(result) == ["cmc@20", "map@r"]  # the keys stay the metric names
    cmc = result["cmc@20"]
    assert cmc.name == "cmc@20 (mean over K = 1..20)"
    assert str(cmc).startswith("cmc@20 (mean over K = 1..20): ")
    assert result["map@r"].name == "map@r"
    # the number compared is the mean of the curve compute() reports, not its value at K = 20
    curve_good, curve_bad = good.compute()["cmc@20"], bad.compute()["cmc@20"]
    assert cmc.first == pytest.approx(float(curve_good.mean()), rel=1e-6)
    assert cmc.second == pytest.approx(float(curve_bad.mean()), rel=1e-6)
    assert cmc.first != pytest.approx(float(curve_good[-1]), rel=1e-3)


# ---------------------------------------------------------------- different measures


def test_compare_of_different_measures_names_them():
    first, _ = two_models(rm.RetrievalMetrics, metrics=["hit_rate@1", "map@r"])
    _, second = two_models(rm.RetrievalMetrics, metrics=["hit_rate@1", "mrr"])
    expected = (
        "compare() needs the same measures in both metrics; the first reports "
        "['hit_rate@1', 'map@r'], the second ['hit_rate@1', 'mrr']"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        rm.compare(first, second)


# ---------------------------------------------------------------- the curve plot


@pytest.fixture
def plt():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    yield pyplot
    pyplot.close("all")


def tick_values(ax) -> list[int]:
    values = [float(t) for t in ax.get_xticks()]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == [str(int(v)) for v in values]  # integer labels, one per tick
    return [int(v) for v in values]


@pytest.mark.parametrize(
    ("make", "ticks"),
    [
        (lambda: rm.RetrievalMetrics(["cmc@10", "map"]), [1, 2, 5, 10]),
        (lambda: rm.RetrievalMetrics(["hit_rate@1", "hit_rate@5", "hit_rate@10"]), [1, 5, 10]),
        (lambda: rm.HitRateAtK(k=(1, 2, 4, 8)), [1, 2, 4, 8]),
        (lambda: rm.CMC(max_rank=30), [1, 2, 5, 10, 20, 30]),
    ],
    ids=["RetrievalMetrics-cmc@10", "RetrievalMetrics-hit_rates", "HitRateAtK", "CMC-30"],
)
def test_every_curve_plot_has_a_log_k_axis_ticked_at_integers(plt, make, ticks):
    m = make()
    labels = torch.arange(120) % 12
    m.update(torch.eye(12)[labels] + torch.randn(120, 12, generator=torch.Generator()), labels)
    _fig, ax = m.plot()
    assert ax.get_xscale() == "log"
    assert tick_values(ax) == ticks


def test_retrieval_metrics_plot_draws_every_hit_rate_it_reports(plt):
    m, _ = two_models(rm.RetrievalMetrics, metrics=["hit_rate@1", "cmc@5", "hit_rate@10", "map"])
    _fig, ax = m.plot()
    curve, chance = ax.get_lines()
    np.testing.assert_array_equal(curve.get_xdata(), [1, 2, 3, 4, 5, 10])
    values = m.compute()
    expected = [*values["cmc@5"].tolist(), float(values["hit_rate@10"])]
    np.testing.assert_allclose(curve.get_ydata(), expected, rtol=1e-6)
    assert float(values["hit_rate@1"]) == pytest.approx(expected[0])
    np.testing.assert_array_equal(chance.get_xdata(), [1, 2, 3, 4, 5, 10])
    assert tick_values(ax) == [1, 2, 3, 4, 5, 10]


def legend_and_axes(fig, ax):
    fig.canvas.draw()  # lays the figure out (constrained layout) and places the legend
    return ax.get_legend().get_window_extent(), ax.get_window_extent()


def test_legend_hides_no_curve_and_stays_in_the_image(plt, tmp_path):
    # 80 classes of 5: chance ends low at the lower right, the model's curve fills the top
    gen = torch.Generator().manual_seed(1)
    labels = torch.arange(400) % 80
    m = rm.HitRateAtK(k=(1, 2, 4, 8))
    m.update(torch.eye(80)[labels] + 0.1 * torch.randn(400, 80, generator=gen), labels)
    fig, ax = m.plot()
    legend, axes = legend_and_axes(fig, ax)
    assert not legend.overlaps(axes)  # beside the axes: no line can be under it
    for line in ax.get_lines():
        points = ax.transData.transform(np.column_stack([line.get_xdata(), line.get_ydata()]))
        assert not any(legend.contains(x, y) for x, y in points)
    # inside the figure, so the saved image keeps it
    box = fig.bbox
    assert box.x0 <= legend.x0 and legend.x1 <= box.x1
    assert box.y0 <= legend.y0 and legend.y1 <= box.y1
    # the chance curve is at the bottom: 4 relevant among 399 others, chance @8 is about 0.08
    chance = ax.get_lines()[1].get_ydata()
    assert chance[-1] == pytest.approx(1 - math.comb(395, 8) / math.comb(399, 8), rel=1e-6)
    assert ax.get_lines()[0].get_ydata()[0] > 0.9


def test_legend_beside_axes_given_by_the_caller(plt):
    fig, ax = plt.subplots(layout="constrained")
    out_fig, out_ax = plot_curves([Curve([1, 2, 4], [0.2, 0.5, 0.9], [0.1, 0.2, 0.4], "run")], ax)
    assert out_fig is None and out_ax is ax
    legend, axes = legend_and_axes(fig, ax)
    assert not legend.overlaps(axes)
    assert tick_values(ax) == [1, 2, 4]


# ---------------------------------------------------------------- the tie rule under a header

TIE_RULE = "ties by docid descending"


def test_tie_rule_only_under_runs_that_had_scores(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    questions = [
        {"id": "q1", "retrieved": ["d1", "d2", "d3"], "relevant": ["d2"]},
        {"id": "q2", "retrieved": ["d3", "d1"], "relevant": ["d3"]},
    ]
    (tmp_path / "lists.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    assert cli.main(["evaluate", "--run", "lists.jsonl", "--metrics", "mrr"]) == 0
    out = capsys.readouterr().out
    (options,) = [line for line in out.splitlines() if "protocol=" in line]
    assert TIE_RULE not in out and "score" not in options, out
    # the same lists as a scored TREC run with its qrels: ranked by score, the rule applies
    run = "".join(
        f"{q['id']} Q0 {d} {r} {10 - r} tag\n"
        for q in questions
        for r, d in enumerate(q["retrieved"], 1)
    )
    (tmp_path / "run.trec").write_text(run)
    qrels = "".join(f"{q['id']} 0 {d} 1\n" for q in questions for d in q["relevant"])
    (tmp_path / "qrels.trec").write_text(qrels)
    argv = ["evaluate", "--run", "run.trec", "--qrels", "qrels.trec", "--metrics", "mrr"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    (options,) = [line for line in out.splitlines() if "protocol=" in line]
    assert options.endswith("; scored runs ranked by score, " + TIE_RULE), options
