"""``metric.plot()`` in torchmetrics' convention, and the curves the CLI draws: written to PNG and
opened again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional import chance_table, rank_embeddings, retrieval_measures
from retrieval_metrics.plot import Curve, hit_rate_curve, plot_curves, save_curves

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(80).repeat_interleave(5)
    emb = torch.randn(80, 16, generator=gen)[labels] + torch.randn(400, 16, generator=gen)
    return emb, labels


def open_png(path) -> np.ndarray:
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert image.std() > 0  # something was drawn
    return image


def test_hit_rate_plot_is_the_curve_with_its_chance_curve(data, tmp_path):
    emb, labels = data
    m = rm.HitRateAtK(k=(1, 2, 4, 8))
    m.update(emb, labels)
    fig, ax = m.plot()
    assert fig is not None and ax is not None
    curve, chance = ax.get_lines()
    np.testing.assert_array_equal(curve.get_xdata(), [1, 2, 4, 8])
    expected = [float(v) for v in m.compute().values()]
    np.testing.assert_allclose(curve.get_ydata(), expected, rtol=1e-6)
    summary = m.summary(num_bootstrap=10)
    np.testing.assert_allclose(
        chance.get_ydata(), [float(r["chance"]) for r in summary.rows], rtol=1e-9
    )
    assert "chance" in chance.get_label()
    assert ax.get_xlabel() == "K" and "hit rate" in ax.get_ylabel()
    fig.savefig(tmp_path / "hit_rate.png")
    open_png(tmp_path / "hit_rate.png")


def test_cmc_plot_and_given_values(data, tmp_path):
    emb, labels = data
    cmc = rm.CMC(max_rank=30)
    cmc.update(emb, labels)
    fig, ax = cmc.plot()
    curve = ax.get_lines()[0]
    np.testing.assert_array_equal(curve.get_xdata(), np.arange(1, 31))
    np.testing.assert_allclose(curve.get_ydata(), cmc.compute().numpy(), rtol=1e-6)
    assert ax.get_xscale() == "log"
    fig.savefig(tmp_path / "cmc.png")
    open_png(tmp_path / "cmc.png")
    # torchmetrics' convention: a given value, a list of values (steps), an axis to draw into
    _, ax = cmc.plot(cmc.compute())
    assert len(ax.get_lines()) == 1  # no chance curve for a value given by hand
    _, ax = cmc.plot([cmc.compute(), cmc.compute() * 0.5])
    assert [line.get_label() for line in ax.get_lines()] == ["CMC step 0", "CMC step 1"]
    _fig2, ax2 = plt.subplots()
    out_fig, out_ax = cmc.plot(ax=ax2)
    assert out_ax is ax2 and out_fig is None and len(ax2.get_lines()) == 2


def test_scalar_metrics_plot_labelled_bars_and_steps_as_torchmetrics(data, tmp_path):
    emb, labels = data
    m = rm.MAPAtR()
    m.update(emb, labels)
    fig, ax = m.plot()  # one value: a labelled bar with its interval and chance level
    (bar,) = ax.patches
    assert bar.get_width() == pytest.approx(float(m.compute()))
    assert [t.get_text() for t in ax.get_yticklabels()] == ["map@r"]
    _, ax = m.plot([torch.tensor(0.2), torch.tensor(0.3), torch.tensor(0.5)])  # over steps
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [0.2, 0.3, 0.5])
    several = rm.RetrievalMetrics(["hit_rate@1", "hit_rate@10", "map@r"], prefix="val/")
    several.update(emb, labels)
    _, ax = several.plot()  # two hit rates: the curve, with chance
    np.testing.assert_array_equal(ax.get_lines()[0].get_xdata(), [1, 10])
    _, ax = several.plot(several.compute())  # a dict with map@r too: labelled bars
    assert [t.get_text() for t in ax.get_yticklabels()] == ["hit_rate@1", "hit_rate@10", "map@r"]
    cm = rm.CrossModalRetrieval(k=(1, 5))
    cm.update(emb[::5], emb[1::5], torch.arange(80))
    fig, ax = cm.plot()
    fig.savefig(tmp_path / "cm.png")
    open_png(tmp_path / "cm.png")


def test_two_runs_on_one_axis(data, tmp_path):
    emb, labels = data
    good = rank_embeddings(emb, query_labels=labels)
    bad = rank_embeddings(emb + 2 * torch.randn_like(emb), query_labels=labels)
    curves = [hit_rate_curve(t, 20, label=n) for t, n in ((good, "good"), (bad, "bad"))]
    _fig, ax = plot_curves(curves)
    labels_drawn = [line.get_label() for line in ax.get_lines()]
    assert labels_drawn == ["good", "chance", "bad"]  # one gallery: one chance curve
    values = retrieval_measures(good, ["cmc@20"])["cmc@20"]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), values.numpy(), rtol=1e-9)
    chance = retrieval_measures(chance_table(good), ["cmc@20"])["cmc@20"]
    np.testing.assert_allclose(ax.get_lines()[1].get_ydata(), chance.numpy(), rtol=1e-9)
    # different galleries: a chance curve per run, dashed in the run's colour
    small = rank_embeddings(emb[:100], query_labels=labels[:100])
    curves.append(hit_rate_curve(small, 20, label="small"))
    _, ax = plot_curves(curves)
    assert len(ax.get_lines()) == 6
    assert ax.get_lines()[5].get_linestyle() == "--"
    save_curves(curves, tmp_path / "runs.png", title="runs")
    open_png(tmp_path / "runs.png")


def test_curve_without_a_known_gallery():
    table = rm.rank_lists([["a", "b", "c"], ["c", "d"]], [{"b"}, {"x"}])
    curve = hit_rate_curve(table, ks=[1, 2, 3])
    assert curve.values == [0.0, 0.5, 0.5]
    _fig, ax = plot_curves([Curve([1, 2], [0.5, 1.0], None, "given")])
    assert len(ax.get_lines()) == 1
    with pytest.raises(ValueError, match="empty"):
        plot_curves([])
