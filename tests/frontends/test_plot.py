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


def _hit_rates(scores: np.ndarray, relevant: np.ndarray, ks: list[int]) -> np.ndarray:
    """Brute force, per query: whether a relevant item is among the ``k`` best scores (no
    ties in these scores), for each K."""
    order = np.argsort(-scores, axis=1, kind="stable")
    hits = np.take_along_axis(relevant, order, 1)
    return np.stack([hits[:, :k].any(1) for k in ks], 1).astype(np.float64)


def test_a_curve_plots_what_compute_reports_under_a_class_average():
    """average="class" averages the queries of each class, then the classes; the plot drew
    the queries' plain mean (0.41/0.59/0.82 against compute()'s 0.19/0.28/0.56)."""
    gen = torch.Generator().manual_seed(5)
    labels = torch.tensor([0] * 12 + [1] * 3 + [2] * 2 + [3] * 2 + [4] * 2)
    emb = torch.randn(len(labels), 6, generator=gen, dtype=torch.float64)
    x, y = emb.numpy(), labels.numpy()
    x = x / np.linalg.norm(x, axis=1, keepdims=True)  # cosine, the default similarity
    scores = x @ x.T
    np.fill_diagonal(scores, -np.inf)  # a query is not its own result
    relevant = (y[:, None] == y[None, :]) & ~np.eye(len(y), dtype=bool)
    per_query = _hit_rates(scores, relevant, [1, 2, 5])
    expected = np.mean([per_query[y == c].mean(0) for c in np.unique(y)], 0)
    for metric in (
        rm.HitRateAtK(k=(1, 2, 5), average="class"), rm.CMC(max_rank=5, average="class")
    ):
        metric.update(emb, labels)
        _, ax = metric.plot()
        line = ax.get_lines()[0]
        plotted = dict(zip(line.get_xdata(), line.get_ydata(), strict=True))
        np.testing.assert_allclose([plotted[k] for k in (1, 2, 5)], expected, rtol=1e-6)


def test_crossmodal_folds_plot_the_mean_over_folds():
    """compute() averages the folds' values; the plot ranked the folds' queries as one set,
    which differs when the folds differ in size (10 images in folds of 3, 3 and 4)."""
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(10, 8, generator=gen, dtype=torch.float64)
    image_of = torch.arange(10).repeat_interleave(2)
    captions = images[image_of] + 1.5 * torch.randn(20, 8, generator=gen, dtype=torch.float64)
    metric = rm.CrossModalRetrieval(k=(1, 2), folds=3)
    metric.update(images, captions, torch.arange(10), image_of)
    _, ax = metric.plot()
    lines = {line.get_label(): line.get_ydata() for line in ax.get_lines()}
    i2t, t2i = [], []
    unit = torch.nn.functional.normalize  # cosine, the default similarity
    for lo, hi in ((0, 3), (3, 6), (6, 10)):
        img, cap = unit(images[lo:hi]).numpy(), unit(captions[2 * lo : 2 * hi]).numpy()
        owner = image_of[2 * lo : 2 * hi].numpy() - lo
        relevant = owner[None, :] == np.arange(hi - lo)[:, None]  # image x caption
        i2t.append(_hit_rates(img @ cap.T, relevant, [1, 2]).mean(0))
        t2i.append(_hit_rates(cap @ img.T, relevant.T, [1, 2]).mean(0))
    i2t_line = next(v for k, v in lines.items() if "i2t" in k and "chance" not in k)
    t2i_line = next(v for k, v in lines.items() if "t2i" in k and "chance" not in k)
    np.testing.assert_allclose(i2t_line, np.mean(i2t, 0), rtol=1e-6)
    np.testing.assert_allclose(t2i_line, np.mean(t2i, 0), rtol=1e-6)
