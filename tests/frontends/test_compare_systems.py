"""``compare_systems(*metrics, baseline=...)`` and ``retrieval-metrics compare``: values, tests
and corrections against the metrics' own values, scipy and statsmodels; the tables; the errors."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from scipy import stats
from test_cli import error_of, run_cli

import retrieval_metrics as rm
from retrieval_metrics import cli
from retrieval_metrics.comparison import SystemComparison
from retrieval_metrics.formats import read_ranked_lists
from retrieval_metrics.functional.measures import significance as S
from retrieval_metrics.functional.measures.stats import bootstrap_interval

NAMES = ["hit_rate@1", "map@r", "mrr", "ndcg@10", "cmc@5", "median_rank"]
SYSTEMS = ["base", "strong", "close"]


def labelled_items(seed: int = 0, n: int = 150, classes: int = 15):
    """Labels with one class of one item (its query has nothing relevant) and class centres."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    labels[0] = 99
    centres = torch.randn(100, 16, generator=gen)
    return labels, centres, gen


def three_systems(names=NAMES, **options) -> list:
    """Three systems on the same items: a baseline, a clearly better one, a close one."""
    labels, centres, gen = labelled_items()
    metrics = []
    for noise in (1.0, 0.5, 0.95):
        metric = rm.RetrievalMetrics(names, **options)
        metric.update(centres[labels] + noise * torch.randn(len(labels), 16, generator=gen), labels)
        metrics.append(metric)
    return metrics


def scipy_randomization(a: torch.Tensor, b: torch.Tensor) -> float:
    """scipy's exact paired permutation test of the mean difference (every sign vector)."""
    return stats.permutation_test(
        (a.numpy(), b.numpy()), lambda x, y, axis: np.mean(x - y, axis=axis), vectorized=True,
        permutation_type="samples", alternative="two-sided", n_resamples=10**7,
    ).pvalue  # fmt: skip


def per_query(metric, key: str) -> torch.Tensor:
    """What the comparison tests: the values the mean counts, a CMC curve by its mean over K,
    in percent when the metric reports percent."""
    v = metric.per_query()[key].to(torch.float64)
    v = v.mean(1) if v.dim() > 1 else v
    return v * (100.0 if metric.percent and "rank" not in key else 1.0)


@pytest.fixture(scope="module")
def systems():
    return three_systems()


@pytest.fixture(scope="module")
def result(systems):
    return rm.compare_systems(*systems, names=SYSTEMS)


# ---------------------------------------------------------------------------- the numbers


def test_values_are_each_metric_s_own(systems, result):
    assert isinstance(result, SystemComparison)
    assert result.systems == SYSTEMS and result.baseline == "base"
    assert result.measures == [*NAMES[:4], "cmc@5", "median_rank"]
    for metric, system in zip(systems, SYSTEMS, strict=True):
        computed = metric.compute()
        for name in NAMES:
            row = result[name, system]
            expected = computed[name].to(torch.float64).mean()  # a CMC curve: its mean over K
            assert row["value"] == float(expected), (name, system)
            statistic = "median" if name == "median_rank" else "mean"
            interval = bootstrap_interval(per_query(metric, name), 0.95, 10_000, 0, statistic)
            assert row["interval"] == interval
            assert row["interval"][0] <= row["value"] <= row["interval"][1]
    assert result["cmc@5", "base"]["label"] == "cmc@5 (mean over K = 1..5)"


def test_p_values_equal_scipy_on_the_per_query_values(systems, result):
    base = systems[0]
    for metric, system in zip(systems[1:], SYSTEMS[1:], strict=True):
        for name in NAMES:
            row = result[name, system]
            a, b = per_query(metric, name), per_query(base, name)
            expected = stats.ttest_rel(a.numpy(), b.numpy(), nan_policy="omit").pvalue
            assert row["p_value"] == pytest.approx(expected, rel=1e-10, abs=1e-300), name
            both = ~(torch.isnan(a) | torch.isnan(b))
            assert row["queries"] == int(both.sum()) == 149  # the query of the class of one
            assert row["difference"] == pytest.approx(float((a - b)[both].mean()), abs=1e-15)
            wins, ties, losses = S.wins_ties_losses(a, b, higher_is_better=name != "median_rank")
            assert (row["wins"], row["ties"], row["losses"]) == (wins, ties, losses)
            assert wins + ties + losses == 149
    # the baseline's own row: counted queries, no test
    row = result["map@r", "base"]
    assert row["is_baseline"] and row["queries"] == 149
    assert row["p_value"] is None and row["difference"] is None and row["wins"] is None
    # the better system is better; a lower rank is a win
    strong = result["median_rank", "strong"]
    assert strong["difference"] < 0 and strong["wins"] > strong["losses"]
    assert result["map@r", "strong"]["significant"] and result["map@r", "strong"]["p_value"] < 1e-6


def test_corrections_over_the_whole_family(systems, result):
    tested = [row for row in result.rows if not row["is_baseline"]]
    assert result.comparisons == len(tested) == 2 * len(NAMES)
    p = [row["p_value"] for row in tested]
    adjusted = S.correct_p_values(p, "holm").tolist()
    assert [row["p_corrected"] for row in tested] == adjusted
    assert [row["significant"] for row in tested] == [q < 0.05 for q in adjusted]
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    np.testing.assert_allclose(adjusted, multitest.multipletests(p, method="holm")[1], atol=1e-12)
    for method, theirs in (("bonferroni", "bonferroni"), ("benjamini-hochberg", "fdr_bh")):
        other = rm.compare_systems(*systems, names=SYSTEMS, correction=method)
        got = [row["p_corrected"] for row in other.rows if not row["is_baseline"]]
        np.testing.assert_allclose(got, multitest.multipletests(p, method=theirs)[1], atol=1e-12)


def test_family_per_measure_and_no_correction(systems, result):
    by_measure = rm.compare_systems(*systems, names=SYSTEMS, family="measure")
    for name in NAMES:
        rows = [by_measure[name, s] for s in SYSTEMS[1:]]
        adjusted = S.correct_p_values([r["p_value"] for r in rows], "holm").tolist()
        assert [r["p_corrected"] for r in rows] == adjusted
        assert [r["p_value"] for r in rows] == [result[name, s]["p_value"] for s in SYSTEMS[1:]]
    assert "within each measure, over its 2 comparisons" in str(by_measure)
    none = rm.compare_systems(*systems, names=SYSTEMS, correction="none")
    assert all(r["p_corrected"] == r["p_value"] for r in none.rows if not r["is_baseline"])
    assert "not corrected" in str(none) and "p (" not in str(none)


def test_randomization_test_and_baseline_by_name_or_index(systems):
    by_name = rm.compare_systems(
        *systems, names=SYSTEMS, baseline="close", test="randomization", num_resamples=2000,
        seed=3,
    )  # fmt: skip
    by_index = rm.compare_systems(
        *systems, names=SYSTEMS, baseline=2, test="randomization", num_resamples=2000, seed=3
    )
    assert by_name.as_dict() == by_index.as_dict()
    assert by_name.baseline == "close" and by_name["map@r", "close"]["is_baseline"]
    for metric, system in zip(systems[:2], SYSTEMS[:2], strict=True):
        a, b = per_query(metric, "mrr"), per_query(systems[2], "mrr")
        expected = S.paired_randomization_test(a, b, num_resamples=2000, seed=3)
        assert by_name["mrr", system]["p_value"] == expected
    # the interval uses the same resamples
    assert by_name["mrr", "base"]["interval"] == bootstrap_interval(
        per_query(systems[0], "mrr"), 0.95, 2000, 3
    )
    text = str(by_name)
    assert "paired randomization test (2000 random sign flips, seed 3" in text
    assert "baseline 'close'" in text


def test_default_names_and_one_measure_metrics():
    labels, centres, gen = labelled_items(1)
    metrics = []
    for noise in (1.0, 0.4):
        metric = rm.HitRateAtK(k=1)  # compute() is a tensor, not a dict
        metric.update(centres[labels] + noise * torch.randn(len(labels), 16, generator=gen), labels)
        metrics.append(metric)
    result = rm.compare_systems(*metrics)
    assert result.systems == ["system 0", "system 1"] and result.comparisons == 1
    assert result["hit_rate@1", "system 1"]["value"] == float(metrics[1].compute())
    assert rm.compare_systems(*metrics, baseline="system 1").baseline == "system 1"


def test_unanswerable_queries_under_zero_count_as_ties():
    metrics = three_systems(["map@r", "mrr"], empty_queries="zero")
    result = rm.compare_systems(*metrics, names=SYSTEMS)
    row = result["map@r", "strong"]
    assert row["queries"] == 150 and row["ties"] >= 1
    a, b = per_query(metrics[1], "map@r"), per_query(metrics[0], "map@r")
    assert row["p_value"] == pytest.approx(stats.ttest_rel(a, b).pvalue, rel=1e-10)
    # the difference is then the difference of the values
    values = [float(m.compute()["map@r"].double()) for m in metrics[:2]]
    assert row["difference"] == pytest.approx(values[1] - values[0], abs=1e-6)


def test_percent_values_are_compared_in_percent(systems, result):
    metrics = three_systems(["map@r", "median_rank"], percent=True)
    percent = rm.compare_systems(*metrics, names=SYSTEMS)
    row, plain = percent["map@r", "strong"], result["map@r", "strong"]
    assert row["value"] == pytest.approx(100 * plain["value"], rel=1e-6)
    assert row["difference"] == pytest.approx(100 * plain["difference"], rel=1e-12)
    assert row["p_value"] == pytest.approx(plain["p_value"], rel=1e-9)
    lo, hi = row["interval"]
    assert (lo, hi) == pytest.approx(tuple(100 * x for x in plain["interval"]), rel=1e-12)
    rank = percent["median_rank", "strong"]  # a rank is not a fraction: not scaled
    assert rank["difference"] == pytest.approx(result["median_rank", "strong"]["difference"])
    with pytest.raises(ValueError, match=r"same unit: `percent` is \{'a': True, 'b': False\}"):
        rm.compare_systems(metrics[0], three_systems(["map@r", "median_rank"])[0], names=["a", "b"])


def test_image_text_metrics_compare_each_direction():
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(30, 8, generator=gen)
    owners = torch.arange(30).repeat_interleave(2)
    metrics = []
    for noise in (0.8, 0.3, 0.8):
        metric = rm.CrossModalRetrieval(k=(1, 5), prefix="val/")
        captions = images[owners] + noise * torch.randn(60, 8, generator=gen)
        metric.update(images, captions, torch.arange(30), owners)
        metrics.append(metric)
    result = rm.compare_systems(*metrics, names=SYSTEMS)
    keys = [f"{d}/{n}" for d in ("i2t", "t2i") for n in metrics[0].metric_names()]
    assert result.measures == keys and "val/rsum" not in result.measures
    assert result.comparisons == 2 * len(keys)
    for metric, system in zip(metrics, SYSTEMS, strict=True):
        computed = metric.compute()
        for key in keys:
            assert result[key, system]["value"] == float(computed[f"val/{key}"])
    assert result["i2t/hit_rate@1", "base"]["queries"] == 30
    assert result["t2i/hit_rate@1", "strong"]["queries"] == 60
    assert "over the 16 comparisons (2 systems x 8 measures)" in str(result)


def test_a_ranking_in_chunks_is_compared_without_its_whole_table():
    """Many relevant items per query and a small memory budget: each metric ranks a chunk of
    queries at a time and keeps per-query parts only; the comparison reads those."""
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(150) % 3
    metrics = []
    for noise in (1.0, 0.5):
        metric = rm.RetrievalMetrics(["map@r", "mrr"], memory_budget=2**16)
        metric.update(torch.eye(3)[labels] + noise * torch.randn(150, 3, generator=gen), labels)
        metrics.append(metric)
    result = rm.compare_systems(*metrics, names=["a", "b"])
    assert metrics[0]._tables is None and metrics[0]._chunk_parts is not None
    for metric, system in zip(metrics, ["a", "b"], strict=True):
        assert result["mrr", system]["value"] == float(metric.compute()["mrr"])
    a, b = per_query(metrics[1], "mrr"), per_query(metrics[0], "mrr")
    assert result["mrr", "b"]["p_value"] == pytest.approx(
        stats.ttest_rel(a.numpy(), b.numpy()).pvalue, rel=1e-10, abs=1e-300
    )
    assert result["mrr", "b"]["queries"] == 150


# ---------------------------------------------------------------------------- the tables


def test_tables_render(result):
    text = str(result)
    lines = text.splitlines()
    assert lines[0] == (
        "Two-sided paired t-test of each system against the baseline 'base'; p-values "
        "corrected by Holm over the 12 comparisons (2 systems x 6 measures)."
    )
    assert lines[1].split() == ["measure", "system", "value", "95%", "interval", "difference",
                                "p", "p", "(Holm)", "wins/ties/losses", "queries"]  # fmt: skip
    assert len(lines) == 2 + 18 + 1 and lines[-1].startswith("* corrected p < 0.05")
    assert lines[2].startswith("hit_rate@1") and "baseline" in lines[2]
    assert lines[3].split()[0] == "strong" and lines[3].rstrip().endswith("149")
    assert any(line.startswith("cmc@5 (mean over K = 1..5)") for line in lines)
    assert repr(result) == text

    markdown = result.to_markdown().splitlines()
    assert markdown[0] == lines[0] and markdown[1] == ""
    assert markdown[2].startswith("| measure | system | value | 95% interval |")
    assert markdown[3] == "|---|---|--:|--:|--:|--:|--:|--:|--:|"
    assert sum(line.startswith("| ") for line in markdown) == 19
    assert markdown[-1].startswith("* corrected p")

    latex = result.to_latex()
    assert latex.startswith("% Two-sided paired t-test")
    assert "\\begin{tabular}{llrlrrrrr}" in latex and latex.rstrip().endswith("\\end{tabular}")
    assert "hit\\_rate@1 & base &" in latex and "95\\% interval" in latex
    assert latex.count("\\\\") == 19 and latex.count("\\midrule") == 6


def test_as_dict_is_plain_and_complete(result):
    d = result.as_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["test"] == "t-test" and d["correction"] == "holm" and d["family"] == "all"
    assert d["comparisons"] == 12 and d["baseline"] == "base" and d["systems"] == SYSTEMS
    assert d["alpha"] == pytest.approx(0.05)
    entry = d["measures"]["map@r"]
    assert entry["higher_is_better"] and set(entry["systems"]) == set(SYSTEMS)
    assert entry["systems"]["strong"]["p_value"] == result["map@r", "strong"]["p_value"]
    assert entry["systems"]["base"]["p_value"] is None
    assert d["measures"]["median_rank"]["higher_is_better"] is False


def test_dataframe_and_a_clear_message_without_pandas(result, monkeypatch):
    pd = pytest.importorskip("pandas")
    frame = result.to_dataframe()
    assert isinstance(frame, pd.DataFrame) and frame.shape == (18, 14)
    assert list(frame.columns[:4]) == ["measure", "system", "baseline", "value"]
    strong = frame[(frame.measure == "map@r") & (frame.system == "strong")].iloc[0]
    assert strong.p_value == result["map@r", "strong"]["p_value"]
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas fails
    with pytest.raises(ImportError, match=r"needs pandas.*retrieval-metrics\[pandas\]"):
        result.to_dataframe()


def test_reading_rows():
    result = rm.compare_systems(*three_systems(["mrr"]), names=SYSTEMS)
    assert set(result["mrr"]) == set(SYSTEMS)
    with pytest.raises(KeyError, match="no measure 'map'"):
        result["map"]
    with pytest.raises(KeyError, match="no row for measure 'mrr' and system 'x'"):
        result["mrr", "x"]


# ---------------------------------------------------------------------------- refused inputs


def test_bad_input_is_refused_by_name(systems):
    a, b, _ = systems
    cases = [
        ((a,), {}, "needs at least two metric objects"),
        (([a, b],), {}, r"compare_systems\(\*metrics\), not compare_systems\(metrics\)"),
        ((a, "b"), {}, "`metrics`: argument 1 is a str"),
        ((a, b), {"names": ["x"]}, "`names` must be a list of 2 non-empty strings"),
        ((a, b), {"names": "xy"}, "`names` must be a list of 2 strings"),
        ((a, b), {"names": ["x", "x"]}, r"`names` must name each system once, got \['x'\]"),
        ((a, b), {"baseline": 2}, "`baseline` must be an index from 0 to 1"),
        ((a, b), {"baseline": True}, "`baseline` must be a system's index"),
        ((a, b), {"baseline": "nobody"}, "`baseline` 'nobody' names no system"),
        ((a, b), {"test": "ttest"}, "`test` must be one of 't-test', 'randomization'"),
        ((a, b), {"correction": "fdr_bh"}, "`correction` must be one of .*'benjamini-hochberg'"),
        ((a, b), {"family": "system"}, "`family` must be one of"),
        ((a, b), {"level": 95}, "`level` must be between 0 and 1"),
        ((a, b), {"num_resamples": 0}, "`num_resamples` must be a positive int"),
        ((a, b), {"seed": "0"}, "`seed` must be an int"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            rm.compare_systems(*args, **kwargs)
    other = rm.RetrievalMetrics(["map@r"])
    other.update(torch.randn(150, 16), torch.arange(150) % 15)
    with pytest.raises(ValueError, match="needs the same measures in every metric"):
        rm.compare_systems(a, other)
    fewer = three_systems()[0]
    fewer.reset()
    labels, centres, _ = labelled_items()
    fewer.update(centres[labels[:100]], labels[:100])
    with pytest.raises(ValueError, match="were not scored on the same queries"):
        rm.compare_systems(a, fewer)
    torchmetrics_rule = [rm.RetrievalMetrics(NAMES, protocol="torchmetrics") for _ in range(2)]
    with pytest.raises(ValueError, match=r"compare_systems\(\) is not available"):
        rm.compare_systems(*torchmetrics_rule)


# ---------------------------------------------------------------------------- the command line


def write_systems(tmp_path) -> tuple[np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(40), 5)
    labels[0] = 999  # a class of one
    centres = rng.normal(size=(1000, 16))
    embeddings = []
    for name, noise in zip(SYSTEMS, (1.0, 0.5, 0.95), strict=True):
        emb = (centres[labels] + noise * rng.normal(size=(labels.size, 16))).astype(np.float32)
        np.savez(tmp_path / f"{name}.npz", embeddings=emb, labels=labels)
        embeddings.append(emb)
    return labels, embeddings


def test_command_line_end_to_end(tmp_path):
    labels, embeddings = write_systems(tmp_path)
    names = ["hit_rate@1", "map@r", "cmc@5"]
    proc = run_cli(
        "compare", "base.npz", "strong.npz", "close.npz", "--metrics", ",".join(names),
        "--baseline", "close", "--correction", "benjamini-hochberg", "--resamples", "2000",
        "--markdown", "table.md", "--latex", "table.tex", "--json", "out.json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    metrics = []
    for emb in embeddings:
        metric = rm.RetrievalMetrics(names)
        metric.set_dtype(torch.float64)  # (the command line's values: every digit, as evaluate's)
        metric.update(torch.from_numpy(emb), torch.from_numpy(labels))
        metrics.append(metric)
    expected = rm.compare_systems(
        *metrics, names=SYSTEMS, baseline="close", correction="benjamini-hochberg",
        num_resamples=2000,
    )  # fmt: skip
    assert str(expected) in proc.stdout
    assert "== strong: strong.npz: 200 items, each queries all the others" in proc.stdout
    assert (tmp_path / "table.md").read_text() == expected.to_markdown()
    assert (tmp_path / "table.tex").read_text() == expected.to_latex()
    report = json.loads((tmp_path / "out.json").read_text())
    assert [s["name"] for s in report["systems"]] == SYSTEMS
    assert report["options"]["metrics"] == names
    assert report["comparison"] == json.loads(json.dumps(expected.as_dict()))
    assert report["comparison"]["measures"]["map@r"]["systems"]["strong"]["queries"] == 199


def test_command_line_runs_with_the_randomization_test(tmp_path, capsys):
    rng = np.random.default_rng(3)
    qrels = {f"q{q}": {f"d{d}": int(rng.integers(1, 3)) for d in rng.permutation(60)[:4]}
             for q in range(12)}  # fmt: skip
    (tmp_path / "qrels.txt").write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items())
    )
    for name, boost in (("bm25", 0.0), ("dense", 1.5), ("hybrid", 0.7)):
        lines = []
        for q in qrels:
            scores = {f"d{d}": rng.normal() + boost * (f"d{d}" in qrels[q]) for d in range(60)}
            ranked = sorted(scores, key=scores.get, reverse=True)[:30]
            lines += [f"{q} Q0 {d} {r + 1} {scores[d]:.6f} {name}" for r, d in enumerate(ranked)]
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n")
    args = ["compare"] + [x for n in ("bm25", "dense", "hybrid") for x in ("--run", f"{n}.txt")]
    args += ["--qrels", "qrels.txt", "--metrics", "map,ndcg@10", "--test", "randomization",
             "--json", "out.json", "--progress-delay", "-1"]  # fmt: skip
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "paired randomization test (10000 random sign flips, seed 0; every sign flip when " \
           "2^n <= 10000) of each system against the baseline 'bm25'" in out
    report = json.loads((tmp_path / "out.json").read_text())["comparison"]
    assert report["test"] == "randomization" and report["comparisons"] == 4
    # the runs as the Python API reads them (runs default to the trec_eval protocol)
    metrics = {}
    for name in ("bm25", "dense", "hybrid"):
        lists = read_ranked_lists(tmp_path / f"{name}.txt", tmp_path / "qrels.txt")
        metrics[name] = rm.RetrievalMetrics(["map", "ndcg@10"], protocol="trec_eval")
        metrics[name].set_dtype(torch.float64)  # (the command line's values: every digit)
        # (the qids as ids, as the command line gives them: the same sums in the same order)
        metrics[name].update(ranked_ids=lists.ranked_ids, relevant_ids=lists.relevant_ids,
                             ids=lists.qids)
    for measure in ("map", "ndcg@10"):
        for name in ("dense", "hybrid"):
            row = report["measures"][measure]["systems"][name]
            a, b = per_query(metrics[name], measure), per_query(metrics["bm25"], measure)
            # 12 queries: 2^12 <= 10000, every sign flip: scipy's exact p-value
            assert row["p_value"] == pytest.approx(scipy_randomization(a, b), abs=1e-12)
            assert row["queries"] == 12 and row["wins"] + row["ties"] + row["losses"] == 12
            assert row["value"] == float(metrics[name].compute()[measure])


def test_command_line_errors(tmp_path, capsys):
    write_systems(tmp_path)
    a, b = str(tmp_path / "base.npz"), str(tmp_path / "strong.npz")
    err = error_of(["compare", a], capsys)
    assert "compare needs two or more systems, got one (base)" in err
    err = error_of(["compare", a, b, "--baseline", "7"], capsys)
    assert "--baseline '7' is neither a system's name (base, strong) nor a position" in err
    err = error_of(["compare", a, a], capsys)
    assert "two runs are named 'base'" in err and "give each its own --name" in err
    # evaluate refuses them alike: its --per-query report, keyed by name, kept one of them
    err = error_of(["evaluate", a, a, "--per-query", str(tmp_path / "pq.json")], capsys)
    assert "two runs are named 'base'" in err
    err = error_of(["evaluate", a, b, "--name", "m a", "--name", "m_a", "--write-run",
                    str(tmp_path / "run.trec")], capsys)
    assert "--write-run: two runs' names make one file name" in err and "run.m_a.trec" in err
    err = error_of(["compare", a, b, "--resamples", "0"], capsys)
    assert "--resamples must be a positive integer" in err
    err = error_of(["compare", a, b, "--level", "95"], capsys)
    assert "--level must be between 0 and 1" in err
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "other.npz", embeddings=rng.normal(size=(50, 16)),
             labels=np.arange(50) % 10)  # fmt: skip
    err = error_of(["compare", a, str(tmp_path / "other.npz")], capsys)
    assert "other scores other queries than base" in err
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["compare", a, b, "--correction", "fdr_bh"])
    assert "invalid choice: 'fdr_bh'" in capsys.readouterr().err


def test_command_line_choices_are_the_library_s():
    from retrieval_metrics.cli import parser as cli_parser
    from retrieval_metrics.comparison import FAMILIES

    assert cli_parser.TESTS == S.TESTS
    assert cli_parser.CORRECTIONS == S.CORRECTIONS
    assert cli_parser.FAMILIES == FAMILIES


def _with_ids(ids, noise=1.0, **options):
    labels, centres, gen = labelled_items()
    metric = rm.RetrievalMetrics(["map@r"], **options)
    x = centres[labels] + noise * torch.randn(len(labels), 16, generator=gen)
    metric.update(x, labels, ids=ids)
    return metric


def test_queries_paired_by_id_or_refused():
    """Found by an audit: only the numbers of queries and of relevant items were compared, so
    a metric given ids and one without, or two with other ids, were paired by position."""
    n = len(labelled_items()[0])
    ids = torch.arange(n)
    a, b = _with_ids(ids), _with_ids(ids, noise=0.5)
    # the same ids in another update order: paired by id (the tables hold queries by id)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(1))
    labels, centres, gen = labelled_items()
    shuffled = rm.RetrievalMetrics(["map@r"])
    shuffled.update((centres[labels] + 0.5 * torch.randn(n, 16, generator=gen))[order],
                    labels[order], ids=ids[order])
    for pair in ((a, b), (a, shuffled)):
        assert rm.compare_systems(*pair)["map@r", "system 1"]["queries"] > 0
    with pytest.raises(ValueError, match="'system 0' was given query ids and the other not"):
        rm.compare_systems(a, three_systems(["map@r"])[1])
    with pytest.raises(ValueError, match=f"{n} of {n} queries have other ids"):
        rm.compare_systems(a, _with_ids(ids + 1000))
    with pytest.raises(ValueError, match="'the first' was given query ids and the other not"):
        rm.compare(a, three_systems(["map@r"])[1])


@pytest.mark.parametrize("option", [{"gain": "linear"}, {"empty_queries": "zero"},
                                    {"ties": "optimistic"}])
def test_systems_made_with_other_options_are_refused(option):
    """gain, empty_queries or ties change the per-query values of one ranking: a difference
    that would be the options', not the systems'."""
    metrics = three_systems(["map@r", "ndcg@10"])
    other = three_systems(["map@r", "ndcg@10"], **option)[1]
    name = next(iter(option))
    with pytest.raises(ValueError, match=f"made with different options \\({name} "):
        rm.compare_systems(metrics[0], other)
    with pytest.raises(ValueError, match=f"made with different options \\({name} "):
        rm.compare(metrics[0], other)
    # the scratch memory changes no value
    budget = three_systems(["map@r", "ndcg@10"], memory_budget=1 << 20)[1]
    assert rm.compare_systems(metrics[0], budget)["map@r", "system 1"]["queries"] > 0


def test_compare_reports_percent_metrics_in_percent():
    """rm.compare printed 0.4050 vs 0.1400 for hit rates the metrics report as 40.5 and 14.0."""
    plain, percent = three_systems(["map@r"]), three_systems(["map@r"], percent=True)
    fraction = rm.compare(plain[1], plain[0])["map@r"]
    scaled = rm.compare(percent[1], percent[0])["map@r"]
    assert scaled.difference == pytest.approx(100 * fraction.difference, rel=1e-12)
    assert scaled.difference == pytest.approx(
        float(percent[1].compute()["map@r"]) - float(percent[0].compute()["map@r"]), abs=1e-3
    )
    assert scaled.first == pytest.approx(float(percent[1].compute()["map@r"]), abs=1e-3)
    with pytest.raises(ValueError, match="same unit"):
        rm.compare(plain[1], percent[0])


def test_a_family_without_p_values_says_so():
    """One query: no paired test has a p-value; the header read "corrected by Holm over the 0
    comparisons (2 systems x 2 measures)"."""
    def one(ranked):
        m = rm.RetrievalMetrics(["mrr", "ndcg@3"])
        m.update(ranked_ids=[ranked], relevant_ids=[{"d2"}], ids=["q0"])
        return m

    result = rm.compare_systems(one(["d1", "d2", "d3"]), one(["d2", "d1", "d3"]),
                                one(["d3", "d1", "d2"]))
    assert result.comparisons == 0
    assert "no comparison has a p-value to correct" in result.description()


# ---------------------------------------------------------------------------- an audit's findings


def test_a_p_value_equal_to_alpha_is_not_significant():
    """p = 2 x 25 / 1000 = 0.05 exactly (999 sign flips) was marked significant at level 0.95:
    1 - 0.95 is 0.050000000000000044 in floats."""
    ranks_a = [3, 1, 2, 2, 4, 1, 2, 5, 1, 5, 2, 2, 2, 1]
    ranks_b = [3, 3, 1, 3, 5, 4, 2, 2, 2, 5, 5, 5, 3, 2]

    def system(ranks):
        metric = rm.RetrievalMetrics(["mrr"])
        metric.update(ranked_ids=[[f"d{j}" for j in range(6)] for _ in ranks],
                      relevant_ids=[{f"d{r - 1}"} for r in ranks],
                      ids=[f"q{i}" for i in range(len(ranks))])  # fmt: skip
        return metric

    result = rm.compare_systems(
        system(ranks_b), system(ranks_a), names=["B", "A"], test="randomization",
        correction="none", num_resamples=999,
    )  # fmt: skip
    row = result["mrr", "A"]
    assert row["p_value"] == 0.05 and row["significant"] is False
    assert result.alpha == 0.05 and result.as_dict()["alpha"] == 0.05
    assert "*" not in str(result).splitlines()[3]


def test_one_comparison_is_named_in_the_singular():
    a, b = three_systems(["map@r"])[:2]
    assert "over the 1 comparison (1 system x 1 measure)" in rm.compare_systems(a, b).description()


def test_a_micro_average_interval_is_that_of_its_ratio():
    """Each system's interval is of its value: a micro average's sum of hits over the sum of
    relevant items, resampled as one (its rank table whole, or a ranking in chunks)."""
    gen = torch.Generator().manual_seed(0)
    labels = torch.cat([torch.arange(60) % 20, torch.full((60,), 20)])  # one class of 60
    for budget in (None, 2**16):
        metrics = []
        for noise in (1.0, 0.6):
            metric = rm.RetrievalMetrics(["recall@5/micro"], memory_budget=budget)
            metric.update(torch.eye(21)[labels] + noise * torch.randn(120, 21, generator=gen),
                          labels)  # fmt: skip
            metrics.append(metric)
        result = rm.compare_systems(*metrics, names=["a", "b"])
        if budget is not None:
            assert metrics[0]._tables is None and metrics[0]._chunk_parts is not None
        relevant = torch.tensor([2.0] * 60 + [59.0] * 60).numpy()  # items of the class but one
        draws = np.random.default_rng(0).integers(0, 120, (10_000, 120))
        for metric, system in zip(metrics, ["a", "b"], strict=True):
            row = result["recall@5/micro", system]
            hits = (metric.per_query()["recall@5/micro"].numpy() * relevant).round(9)
            assert row["value"] == pytest.approx(hits.sum() / relevant.sum(), rel=1e-6)
            boot = hits[draws].sum(1) / relevant[draws].sum(1)
            expected = np.quantile(boot, [0.025, 0.975])
            lo, hi = row["interval"]
            assert lo <= row["value"] <= hi
            assert (lo, hi) == pytest.approx(tuple(expected), abs=0.004), (budget, system)


def _npz_pair(tmp_path, *, ids: bool):
    rng = np.random.default_rng(5)
    labels = np.arange(60) % 12
    item_ids = np.arange(60) * 7 + 3
    centres = rng.normal(size=(12, 8))
    second = centres[labels] + 1.3 * rng.normal(size=(60, 8))
    order = rng.permutation(60)
    extra = {"ids": item_ids} if ids else {}
    np.savez(tmp_path / "m1.npz", embeddings=centres[labels] + rng.normal(size=(60, 8)),
             labels=labels, **extra)  # fmt: skip
    np.savez(tmp_path / "m2.npz", embeddings=second[order], labels=labels[order],
             **({"ids": item_ids[order]} if ids else {}))  # fmt: skip
    np.savez(tmp_path / "m2_sorted.npz", embeddings=second, labels=labels, **extra)


def test_files_of_the_same_items_in_another_row_order_pair_by_id(tmp_path, capsys):
    """Two files with the same ids and labels, rows in another order, were refused as "m2
    scores other queries than m1", where the metrics pair them by id."""
    _npz_pair(tmp_path, ids=True)
    files = [str(tmp_path / f"{name}.npz") for name in ("m1", "m2", "m2_sorted")]
    capsys.readouterr()
    assert cli.main(["compare", *files, "--metrics", "map@r,mrr", "--json",
                     str(tmp_path / "c.json")]) == 0  # fmt: skip
    report = json.loads((tmp_path / "c.json").read_text())["comparison"]["measures"]
    for name in ("map@r", "mrr"):
        shuffled, ordered = (report[name]["systems"][s] for s in ("m2", "m2_sorted"))
        assert shuffled == ordered
    assert cli.main(["evaluate", files[0], files[1], "--metrics", "map@r"]) == 0
    assert "== m1 vs m2, paired on the same queries" in capsys.readouterr().out
    # without ids the rows are the queries' only names: another order is other queries
    _npz_pair(tmp_path, ids=False)
    err = error_of(["compare", *files[:2], "--metrics", "map@r"], capsys)
    assert "m2 scores other queries than m1" in err


def test_compare_json_values_have_every_digit_as_evaluate_s(tmp_path, capsys):
    """`compare --json` wrote compute()'s float32 value (0.14583332836627960), `evaluate
    --json` the float64 one (0.14583333333333334)."""
    _npz_pair(tmp_path, ids=True)
    files = [str(tmp_path / f"{name}.npz") for name in ("m1", "m2")]
    names = "map@r,mrr,recall@3/micro"
    assert cli.main(["compare", *files, "--metrics", names, "--json",
                     str(tmp_path / "c.json")]) == 0  # fmt: skip
    assert cli.main(["evaluate", *files, "--metrics", names, "--json",
                     str(tmp_path / "e.json")]) == 0  # fmt: skip
    compared = json.loads((tmp_path / "c.json").read_text())["comparison"]["measures"]
    evaluated = json.loads((tmp_path / "e.json").read_text())["runs"]
    for run in evaluated:
        for name in names.split(","):
            value = compared[name]["systems"][run["name"]]["value"]
            assert value == run["metrics"][name]["value"], (run["name"], name)
