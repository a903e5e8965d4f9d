"""What a new user met in a day with the library (round 2): each test a case that gave a number
or a message that misled, checked against a value derived by hand or by brute force.

* an interval, a query count and a chance level computed on the queries the value averages,
  under both empty-query rules (the CMC curve under ``empty_queries="zero"`` was summarised on
  the answerable queries only, its interval above its value);
* intervals that do not depend on the order the queries came in (the command line sorts them
  by id, the API keeps the order of the updates);
* protocol names matched as metric names are (``"BEIR"``), and a cut-off that is not a number
  named as such (``ndcg@ten`` was answered "did you mean ndcg@ten?").
"""

from __future__ import annotations

import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional.measures import paired, stats

# ------------------------------------------------------------- intervals hold their values


def _reid(seed: int = 0):
    """Re-id shaped: 150 queries, 60 of them with no match in the gallery."""
    gen = torch.Generator().manual_seed(seed)
    g_labels = torch.arange(200) % 50
    centres = torch.randn(80, 16, generator=gen)
    gallery = centres[g_labels] + torch.randn(200, 16, generator=gen)
    q_labels = torch.cat([torch.arange(90) % 50, 50 + torch.arange(60) % 30])  # 60 unmatched
    queries = centres[q_labels] + torch.randn(150, 16, generator=gen)
    return queries, q_labels, gallery, g_labels


@pytest.mark.parametrize("empty_queries", ["skip", "zero"])
def test_every_interval_holds_its_value_and_counts_the_queries_it_averages(empty_queries):
    queries, q_labels, gallery, g_labels = _reid()
    metric = rm.RetrievalMetrics(["cmc@10", "map", "hit_rate@1", "mrr"],
                                 empty_queries=empty_queries)
    metric.update(queries, q_labels, role="query")
    metric.update(gallery, g_labels, role="gallery")
    values = metric.compute()
    summary = metric.summary()
    averaged = 150 if empty_queries == "zero" else 90
    # by hand: the brute-force rank of each query's first match
    scores = torch.nn.functional.normalize(queries, dim=1) @ torch.nn.functional.normalize(
        gallery, dim=1).T
    first = []
    for q in range(150):
        relevant = g_labels == q_labels[q]
        if relevant.any():
            first.append(int((scores[q] > scores[q][relevant].max()).sum()) + 1)
    first = torch.tensor(first)
    hits = float((first <= 1).sum()) / averaged
    assert float(values["hit_rate@1"]) == pytest.approx(hits, abs=1e-6)
    for row in summary.rows:
        assert row["queries"] == averaged, row["name"]
        assert row["skipped"] == (0 if empty_queries == "zero" else 60), row["name"]
        lo, hi = row["interval"]
        value = values[row["name"]]
        if row["name"].startswith("cmc"):
            assert bool((lo <= value.double() + 1e-6).all() & (value.double() <= hi + 1e-6).all())
            assert float(value[0]) == pytest.approx(hits, abs=1e-6)  # cmc@1 is hit rate@1
        else:
            assert lo <= float(value) + 1e-6 and float(value) <= hi + 1e-6, row["name"]


def test_intervals_do_not_depend_on_the_order_of_the_queries():
    gen = torch.Generator().manual_seed(3)
    values = torch.rand(200, generator=gen)
    values[::7] = float("nan")
    order = torch.randperm(200, generator=gen)
    assert stats.bootstrap_interval(values) == stats.bootstrap_interval(values[order])
    curve = (torch.rand(120, 5, generator=gen) < 0.4).double().cummax(1).values
    curve[:, 0] = torch.rand(120, generator=gen)  # not 0/1 alone: the bootstrap, not Wilson
    lo, hi = stats._bootstrap_curve(curve, 0.95, 500, 0)
    lo_p, hi_p = stats._bootstrap_curve(curve[torch.randperm(120, generator=gen)], 0.95, 500, 0)
    assert torch.equal(lo, lo_p) and torch.equal(hi, hi_p)
    first, second = torch.rand(80, generator=gen), torch.rand(80, generator=gen)
    perm = torch.randperm(80, generator=gen)
    a = paired.paired_comparison("x", first, second)
    b = paired.paired_comparison("x", first[perm], second[perm])
    assert a.interval == b.interval and a.p_value == b.p_value


def test_summary_intervals_equal_for_queries_given_in_another_order():
    gen = torch.Generator().manual_seed(4)
    ranked = [[f"d{int(d)}" for d in torch.randperm(30, generator=gen)[:8]] for _ in range(60)]
    relevant = [{f"d{int(d)}" for d in torch.randperm(30, generator=gen)[:3]} for _ in range(60)]
    order = torch.randperm(60, generator=gen).tolist()
    rows = []
    for sequence in (range(60), order):
        metric = rm.RetrievalMetrics(["recall@4", "mrr", "ndcg@5"])
        metric.update(ranked_ids=[ranked[i] for i in sequence],
                      relevant_ids=[relevant[i] for i in sequence])
        rows.append([row["interval"] for row in metric.summary().rows])
    assert rows[0] == rows[1]


# ------------------------------------------------------------------------------- names


@pytest.mark.parametrize("spelled", ["BEIR", " Beir ", "beir"])
def test_protocol_names_are_matched_as_metric_names_are(spelled):
    metric = rm.RetrievalMetrics(["ndcg@10"], qrels={"q": ["d"]}, protocol=spelled)
    assert metric.protocol == "beir"
    assert rm.CrossModalRetrieval(protocol="VSEPP").protocol == "vsepp"
    assert rm.RetrievalMetrics(["map"], protocol="Market1501_Official").protocol == (
        "market1501_official"
    )
    assert rm.RetrievalMetrics(["map"], protocol="sentence-transformers").protocol == (
        "sentence_transformers"
    )


def test_an_unknown_protocol_names_the_nearest():
    with pytest.raises(ValueError, match=r"`protocol` must be one of .*did you mean 'beir'"):
        rm.RetrievalMetrics(["map"], protocol="bier")


@pytest.mark.parametrize(("name", "hint"), [
    ("ndcg@ten", r"the cut-off after '@' is a whole number of positions, as in ndcg@10"),
    ("recall@k", r"as in recall@10, not 'k'"),
    ("ndgc@10", r"did you mean ndcg@10\?"),
])
def test_a_cut_off_that_is_not_a_number_is_named(name, hint):
    with pytest.raises(ValueError, match=hint):
        rm.RetrievalMetrics([name])
    with pytest.raises(ValueError) as caught:
        rm.RetrievalMetrics([name])
    assert f"did you mean {name}?" not in str(caught.value)


# ----------------------------------------------------------------- cut-offs beyond what exists


def test_summary_warns_as_compute_does_of_a_cut_off_beyond_the_gallery():
    """The command line reads summary() alone: it gave hit_rate@100 = 1.0000 on a gallery of 49
    without a word, where compute() warns."""
    gen = torch.Generator().manual_seed(0)
    metric = rm.RetrievalMetrics(["hit_rate@100", "cmc@60", "mrr"])
    metric.update(torch.randn(10, 8, generator=gen), torch.arange(10) % 5, role="query")
    metric.update(torch.randn(49, 8, generator=gen), torch.arange(49) % 5, role="gallery")
    with pytest.warns(UserWarning, match=r"hit_rate@100 \(gallery of 49\), cmc@60 \(gallery of 49"):
        metric.summary()


def test_the_command_line_warns_of_a_cut_off_beyond_the_gallery(tmp_path, capsys):
    import numpy as np

    from retrieval_metrics import cli

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "e.npz", embeddings=rng.standard_normal((50, 8)),
             labels=np.arange(50) % 5)
    with pytest.warns(UserWarning, match=r"hit_rate@100 \(gallery of 49\)"):
        assert cli.main(["evaluate", str(tmp_path / "e.npz"), "--metrics", "hit_rate@100",
                         "--progress-delay", "-1"]) == 0


# ------------------------------------------------------------- defaults that differ by front end


def test_the_command_line_says_what_its_default_for_runs_did(tmp_path, capsys):
    """A JSONL run with unanswerable questions: the command line's default (trec_eval's
    conventions) scores them 0, the API's leaves them out; the table says so in words, and
    --protocol none gives the API's number."""
    import json

    from retrieval_metrics import cli

    lines = [
        {"id": "q1", "retrieved": ["a", "b"], "relevant": ["a"]},
        {"id": "q2", "retrieved": ["c", "d"], "relevant": ["x"]},
        {"id": "q3", "retrieved": ["e", "f"], "relevant": []},
    ]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli.main(["evaluate", "--run", str(path), "--metrics", "hit_rate@2", "--json",
                     str(tmp_path / "a.json"), "--progress-delay", "-1"]) == 0
    printed = capsys.readouterr().out
    assert "1 query with no relevant document scored 0, as trec_eval scores them" in printed
    assert "--protocol none" in printed
    default = json.loads((tmp_path / "a.json").read_text())["runs"][0]["metrics"]
    assert default["hit_rate@2"]["value"] == pytest.approx(1 / 3)
    assert cli.main(["evaluate", "--run", str(path), "--metrics", "hit_rate@2", "--protocol",
                     "none", "--json", str(tmp_path / "b.json"), "--progress-delay", "-1"]) == 0
    assert "scored 0, as trec_eval" not in capsys.readouterr().out
    api = rm.RetrievalMetrics(["hit_rate@2"])
    api.update(ranked_ids=[line["retrieved"] for line in lines],
               relevant_ids=[line["relevant"] for line in lines])
    none = json.loads((tmp_path / "b.json").read_text())["runs"][0]["metrics"]
    assert none["hit_rate@2"]["value"] == pytest.approx(float(api.compute()["hit_rate@2"]))
    assert none["hit_rate@2"]["value"] == pytest.approx(0.5)


# -------------------------------------------------------------------------- words and files


def test_a_truncated_npz_is_named_as_truncated(tmp_path):
    import numpy as np

    from retrieval_metrics.formats import FormatError, load_items

    np.savez(tmp_path / "whole.npz", embeddings=np.ones((20, 4)), labels=np.arange(20))
    data = (tmp_path / "whole.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match=r"truncated npz archive .* its end .* is missing"):
        load_items(tmp_path / "cut.npz")
    (tmp_path / "text.npz").write_text("not an archive")
    with pytest.raises(FormatError, match=r"not an npz archive"):
        load_items(tmp_path / "text.npz")


def test_single_values_plot_as_labelled_bars():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    gen = torch.Generator().manual_seed(0)
    metric = rm.RetrievalMetrics(["ndcg@10", "map"])
    metric.update(torch.randn(60, 8, generator=gen), torch.arange(60) % 6)
    _, ax = metric.plot()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["ndcg@10", "map"]
    bars = [p.get_width() for p in ax.patches]
    values = metric.compute()
    assert bars == pytest.approx([float(values["ndcg@10"]), float(values["map"])], abs=1e-6)
    written = {t.get_text() for t in ax.texts}
    assert f"{float(values['map']):.4g}" in written
    _, ax_v = metric.plot(metric.compute())
    assert [t.get_text() for t in ax_v.get_yticklabels()] == ["ndcg@10", "map"]
