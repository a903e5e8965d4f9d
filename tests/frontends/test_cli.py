"""The ``retrieval-metrics`` command: run as a subprocess on files written here, its JSON checked
against the Python API; error messages; the progress bar; the demo."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics import cli
from retrieval_metrics.cli import runs as cli_runs
from retrieval_metrics.cli import summary as cli_summary

ENV = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"}
PNG = b"\x89PNG\r\n\x1a\n"


def run_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "retrieval_metrics", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def class_data(seed: int, n_classes: int = 60, per_class: int = 5, dim: int = 16, noise=1.0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(n_classes), per_class)
    centres = rng.normal(size=(n_classes, dim))
    emb = centres[labels] + noise * rng.normal(size=(labels.size, dim))
    return emb.astype(np.float32), labels


def assert_matches_summary(json_metrics: dict, summary) -> None:
    """Every field of the JSON equals the Python API's summary (same queries, same order)."""
    assert list(json_metrics) == [row["name"] for row in summary.rows]
    for row in summary.rows:
        got = json_metrics[row["name"]]
        value = row["value"]
        if value.dim():
            np.testing.assert_allclose(got["value"], value.numpy(), rtol=1e-12, atol=1e-12)
        else:
            assert got["value"] == pytest.approx(float(value), rel=1e-12, abs=1e-12)
        for g, e in zip(got["interval"], row["interval"], strict=True):
            if isinstance(e, torch.Tensor):  # a curve's pointwise interval, one bound per K
                np.testing.assert_allclose(g, e.numpy(), rtol=1e-12, atol=1e-12)
                continue
            assert (g is None and math.isnan(e)) or g == pytest.approx(e, rel=1e-12, abs=1e-12)
        if row["chance"] is None:
            assert got["chance"] is None
        elif row["chance"].dim():
            np.testing.assert_allclose(got["chance"], row["chance"].numpy(), rtol=1e-12)
        else:
            assert got["chance"] == pytest.approx(float(row["chance"]), rel=1e-12)
        assert got["queries"] == row["queries"]
        assert got["skipped"] == row["skipped"]
        gallery = row["gallery"]
        expected = int(gallery) if gallery.isdigit() else [int(x) for x in gallery.split("-")]
        assert got["gallery_size"] == expected


# ------------------------------------------------------------------------- subprocess runs


def test_a_reader_that_leaves_stops_the_command_quietly(tmp_path):
    """`retrieval-metrics evaluate ... | head`: once the pipe's reader is gone, the command ends
    with 141 (128 + SIGPIPE), not a BrokenPipeError traceback."""
    emb, labels = class_data(0)
    np.savez(tmp_path / "a.npz", embeddings=emb, labels=labels)
    proc = subprocess.Popen(
        [sys.executable, "-m", "retrieval_metrics", "evaluate", "a.npz", "--metrics", "mrr"],
        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdout.close()  # the reader leaves before the first line
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()


def test_same_source_npz_json_and_plot_match_python_api(tmp_path):
    emb, labels = class_data(0)
    emb_b, _ = class_data(0, noise=1.6)
    labels = labels.copy()
    labels[:5] = 999  # one class of 5 -> fine; make one singleton class: skipped queries
    labels[0] = 1000
    np.savez(tmp_path / "a.npz", embeddings=emb, labels=labels)
    np.savez(tmp_path / "b.npz", embeddings=emb_b, labels=labels)
    names = ["hit_rate@1", "hit_rate@5", "recall@5", "map@r", "r_precision", "mrr", "cmc@10"]
    proc = run_cli(
        "evaluate", "a.npz", "b.npz", "--metrics", ",".join(names), "--json", "out.json",
        "--plot", "out.png", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # fast: no progress bar
    report = json.loads((tmp_path / "out.json").read_text())
    assert [r["name"] for r in report["runs"]] == ["a", "b"]
    assert report["options"]["metrics"] == names
    for run, arr in zip(report["runs"], (emb, emb_b), strict=True):
        m = rm.RetrievalMetrics(names)
        m.update(torch.from_numpy(arr), torch.from_numpy(labels))
        summary = m.summary()
        assert_matches_summary(run["metrics"], summary)
        assert run["metrics"]["map@r"]["skipped"] == 1  # the singleton class
        assert run["queries"] == len(labels)
        curve = run["curve"]
        cmc = rm.CMC(max_rank=len(curve["k"]))
        cmc.update(torch.from_numpy(arr), torch.from_numpy(labels))
        np.testing.assert_allclose(curve["hit_rate"], cmc.compute().numpy(), rtol=1e-6)
        assert curve["chance"][0] < curve["hit_rate"][0]
    assert report["comparison"]["hit_rate@1"]["difference"] > 0
    # the table: aligned columns, the diagnostics named
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("metric "))
    for col in ("value", "95% interval", "chance", "queries", "skipped", "gallery"):
        assert col in header
    table = lines[lines.index(header) : lines.index(header) + len(names)]
    assert len({len(line) for line in table}) == 1, table
    assert "cmc@10:" in proc.stdout and "paired on the same queries" in proc.stdout
    png = tmp_path / "out.png"
    assert png.read_bytes()[:8] == PNG
    image = pytest.importorskip("matplotlib.image").imread(png)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_query_gallery_pt_with_ids_cameras_and_protocol(tmp_path):
    pytest.importorskip("retrieval_metrics.protocols")
    rng = np.random.default_rng(1)
    g_emb, g_lab = class_data(1, n_classes=40, per_class=6)
    q_idx = rng.choice(len(g_lab), 60, replace=False)
    q_emb = g_emb[q_idx] + 0.3 * rng.normal(size=(60, g_emb.shape[1])).astype(np.float32)
    q_lab = g_lab[q_idx]
    q_cam, g_cam = rng.integers(0, 3, 60), rng.integers(0, 3, len(g_lab))
    g_lab = g_lab.copy()
    g_lab[::17] = -1  # junk
    g_ids = np.arange(len(g_lab)) + 1000
    # a gallery item given twice (same id, label and camera): kept once
    g_ids[5], g_lab[5], g_cam[5], g_emb[5] = g_ids[4], g_lab[4], g_cam[4], g_emb[4]
    q_ids = np.arange(60)
    torch.save(
        {"embeddings": torch.from_numpy(q_emb), "pids": torch.from_numpy(q_lab),
         "camids": torch.from_numpy(q_cam), "ids": torch.from_numpy(q_ids)},
        tmp_path / "query.pt",
    )  # fmt: skip
    torch.save(
        {"embeddings": torch.from_numpy(g_emb), "pids": torch.from_numpy(g_lab),
         "camids": torch.from_numpy(g_cam), "ids": torch.from_numpy(g_ids)},
        tmp_path / "gallery.pt",
    )  # fmt: skip
    names = ["cmc@5", "map", "minp", "hit_rate@1"]
    proc = run_cli(
        "evaluate", "--query", "query.pt", "--gallery", "gallery.pt", "--protocol",
        "market1501_official", "--keys", "labels=pids,cameras=camids", "--metrics",
        ",".join(names), "--json", "out.json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["options"]["protocol"] == "market1501_official"
    assert report["options"]["ignore_label"] == -1
    m = rm.RetrievalMetrics(names, protocol="market1501_official")
    m.update(torch.from_numpy(q_emb), torch.from_numpy(q_lab), ids=torch.from_numpy(q_ids),
             cameras=torch.from_numpy(q_cam), role="query")  # fmt: skip
    m.update(torch.from_numpy(g_emb), torch.from_numpy(g_lab), ids=torch.from_numpy(g_ids),
             cameras=torch.from_numpy(g_cam), role="gallery")  # fmt: skip
    assert_matches_summary(report["runs"][0]["metrics"], m.summary())


def write_trec(tmp_path: Path) -> tuple[dict, dict]:
    rng = np.random.default_rng(3)
    run, qrels = {}, {}
    docs = [f"d{i}" for i in range(40)] + ["10", "9", "2"]
    for q in range(12):
        picked = rng.choice(len(docs), 25, replace=False)
        run[f"q{q}"] = {docs[i]: float(rng.integers(0, 6)) for i in picked}  # many ties
        judged = rng.choice(len(docs), 6, replace=False)
        qrels[f"q{q}"] = {docs[i]: int(rng.integers(0, 3)) for i in judged}
    run["q0"].update({"9": 9.0, "10": 9.0, "2": 9.0})  # byte order: 9 > 2 > 10
    qrels["q0"]["10"] = 2
    run["extra"] = {"d1": 1.0}  # a run query without judgments: ignored
    qrels["lost"] = {"d1": 1}  # a judged query the run lacks: ignored unless -c
    lines = [
        f"{q} Q0 {d} {r + 1} {s} tag"
        for q, docs_ in run.items()
        for r, (d, s) in enumerate(docs_.items())
    ]
    (tmp_path / "run.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "qrels.txt").write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs_ in qrels.items() for d, g in docs_.items())
    )
    return run, qrels


def trec_reference_lists(run: dict, qrels: dict, qids: list[str]):
    """trec_eval's order written out by hand: score descending, then docid bytes descending."""
    ranked, relevant = [], []
    for q in qids:
        docs = run.get(q, {})
        ranked.append(sorted(docs, key=lambda d: (docs[d], d.encode()), reverse=True))
        relevant.append({d: g for d, g in qrels[q].items() if g >= 1})
    return ranked, relevant


def test_trec_run_matches_python_api(tmp_path):
    pytest.importorskip("retrieval_metrics.protocols")
    run, qrels = write_trec(tmp_path)
    names = ["map", "ndcg@10", "precision@5", "recall@10", "mrr", "r_precision"]
    proc = run_cli(
        "evaluate", "--run", "run.txt", "--qrels", "qrels.txt", "--metrics", ",".join(names),
        "--json", "out.json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "1 run query without judgments ignored" in proc.stdout
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["options"]["protocol"] == "trec_eval"
    qids = sorted(q for q in run if q in qrels)
    ranked, relevant = trec_reference_lists(run, qrels, qids)
    assert ranked[0][:3] == ["9", "2", "10"]
    m = rm.RetrievalMetrics(names, protocol="trec_eval")
    m.update(ranked_ids=ranked, relevant_ids=relevant)
    summary = m.summary()
    for row in summary.rows:
        row["chance"] = None  # the collection behind a run is unknown
    assert_matches_summary(report["runs"][0]["metrics"], summary)

    # -c: every judged query, as the library's own trec_run_to_lists (trec_eval -c)
    from retrieval_metrics.protocols import trec_run_to_lists

    args = ["evaluate", "--run", tmp_path / "run.txt", "--qrels", tmp_path / "qrels.txt", "-c",
            "--metrics", ",".join(names), "--json", tmp_path / "c.json"]  # fmt: skip
    assert cli.main([str(a) for a in args]) == 0
    ranked, relevant, _ = trec_run_to_lists(run, qrels)
    m = rm.RetrievalMetrics(names, protocol="trec_eval")
    m.update(ranked_ids=ranked, relevant_ids=relevant)
    got = json.loads((tmp_path / "c.json").read_text())["runs"][0]["metrics"]
    for name, value in m.compute().items():  # compute() is float32
        assert got[name]["value"] == pytest.approx(float(value), rel=1e-6)
    assert got["map"]["queries"] == len(qrels)


def test_demo_prints_every_section(tmp_path):
    # how long it takes is measured in benchmarks, never asserted here (a busy machine is slow)
    proc = run_cli("demo", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for text in ('"1K" vs "5K"', "COCO 1K (5 folds)", "COCO 5K", "hit_rate@K", "recall@K",
                 "precision@K", "r_precision", "optimistic", "expected", "pessimistic",
                 "handwritten digits", "MAP@R", "prefers"):  # fmt: skip
        assert text in out, text
    # 1K beats 5K on every R@K (a smaller gallery), rsum included
    rows = {line.split("  ")[1]: line for line in out.splitlines() if line.startswith("  COCO ")}
    one = [float(x) for x in re.findall(r"\d+\.\d", rows["COCO 1K (5 folds)"])]
    five = [float(x) for x in re.findall(r"\d+\.\d", rows["COCO 5K"])]
    assert len(one) == len(five) == 7 and all(a > b for a, b in zip(one, five, strict=True))


def test_console_script(tmp_path):
    script = shutil.which("retrieval-metrics") or str(
        Path(sys.executable).parent / "retrieval-metrics"
    )
    if not Path(script).exists():
        pytest.skip("the console script is not installed (pip install -e .)")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 0 and "evaluate" in proc.stdout and "demo" in proc.stdout


# ------------------------------------------------------------------------- demo sections


def test_demo_sections_agree_with_the_library():
    from retrieval_metrics.cli import demo

    gen = torch.Generator().manual_seed(0)
    with open(os.devnull, "w") as out:
        ties = demo.ties(gen, out)
        recalls = demo.four_recalls(gen, out)
        classes = demo.class_retrieval(gen, out)
    for name in ("hit_rate@1", "map@r", "mrr"):
        assert ties["optimistic"][name] >= ties["expected"][name] >= ties["pessimistic"][name]
        assert ties["optimistic"][name] > ties["pessimistic"][name]  # there are ties
    assert recalls["hit_rate@1"] == pytest.approx(recalls["precision@1"])
    assert recalls["recall@5"] == pytest.approx(recalls["precision@5"])
    assert recalls["recall@5"] == pytest.approx(recalls["r_precision"])
    assert recalls["recall@1"] <= 0.2 + 1e-9 and recalls["precision@10"] <= 0.5 + 1e-9
    assert recalls["hit_rate@10"] >= recalls["recall@10"]
    verdict = classes["verdict"]
    assert verdict["hit_rate@1"]["better"] != verdict["map@r"]["better"]


# ------------------------------------------------------------------------- in-process: errors


def error_of(args: list[str], capsys) -> str:
    capsys.readouterr()
    assert cli.main([*args, "--progress-delay", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("retrieval-metrics: error: ") and err.count("\n") == 1, err
    return err


def test_error_missing_file(tmp_path, capsys):
    err = error_of(["evaluate", str(tmp_path / "nope.npz")], capsys)
    assert "nope.npz" in err and "no such file" in err


def test_error_missing_array(tmp_path, capsys):
    emb, labels = class_data(0)
    np.savez(tmp_path / "e.npz", feats=emb, labels=labels)
    err = error_of(["evaluate", str(tmp_path / "e.npz")], capsys)
    assert "e.npz" in err and "'embeddings'" in err and "feats" in err and "--keys" in err
    np.savez(tmp_path / "nolab.npz", embeddings=emb)
    err = error_of(["evaluate", str(tmp_path / "nolab.npz")], capsys)
    assert "nolab.npz" in err and "'labels'" in err
    # --keys renames
    assert cli.main(["evaluate", str(tmp_path / "e.npz"), "--keys", "embeddings=feats",
                     "--metrics", "hit_rate@1", "--progress-delay", "-1"]) == 0  # fmt: skip


def test_error_shapes(tmp_path, capsys):
    emb, labels = class_data(0)
    np.savez(tmp_path / "short.npz", embeddings=emb, labels=labels[:-3])
    err = error_of(["evaluate", str(tmp_path / "short.npz")], capsys)
    assert "short.npz" in err and "'labels'" in err and str(len(labels) - 3) in err
    np.savez(tmp_path / "flat.npz", embeddings=emb[:, 0], labels=labels)
    err = error_of(["evaluate", str(tmp_path / "flat.npz")], capsys)
    assert "flat.npz" in err and "'embeddings'" in err and "2-D" in err
    np.savez(tmp_path / "q.npz", embeddings=emb[:10, :8], labels=labels[:10])
    np.savez(tmp_path / "g.npz", embeddings=emb, labels=labels)
    err = error_of(["evaluate", "--query", str(tmp_path / "q.npz"), "--gallery",
                    str(tmp_path / "g.npz")], capsys)  # fmt: skip
    assert "q.npz" in err and "g.npz" in err and "8" in err and "16" in err
    np.savez(tmp_path / "nan.npz", embeddings=np.full((4, 2), np.nan), labels=np.arange(4))
    err = error_of(["evaluate", str(tmp_path / "nan.npz")], capsys)
    assert "nan.npz" in err and "NaN" in err


def test_error_bad_options(tmp_path, capsys):
    emb, labels = class_data(0)
    np.savez(tmp_path / "e.npz", embeddings=emb, labels=labels)
    err = error_of(["evaluate", str(tmp_path / "e.npz"), "--metrics", "recall@ten"], capsys)
    assert "recall@ten" in err
    err = error_of(["evaluate"], capsys)
    assert "nothing to evaluate" in err
    err = error_of(["evaluate", "--run", str(tmp_path / "e.npz")], capsys)
    assert "--qrels" in err


def test_error_protocol_conflict(tmp_path, capsys):
    pytest.importorskip("retrieval_metrics.protocols")
    emb, labels = class_data(0)
    np.savez(tmp_path / "e.npz", embeddings=emb, labels=labels)
    err = error_of(
        ["evaluate", str(tmp_path / "e.npz"), "--protocol", "pml", "--similarity", "dot"], capsys
    )
    assert "pml" in err and "similarity" in err


@pytest.fixture
def each_form(tmp_path):
    """One input of each form (cli.parser.FORMS), as the command's arguments."""
    emb, labels = class_data(0, n_classes=4)
    np.savez(tmp_path / "e.npz", embeddings=emb, labels=labels,
             ids=np.array([f"d{i}" for i in range(len(labels))]))
    np.savez(tmp_path / "q.npz", embeddings=emb[:3], labels=labels[:3],
             ids=np.array(["q0", "q1", "q2"]))
    (tmp_path / "run.txt").write_text("q1 Q0 d1 1 2 t\nq1 Q0 d2 2 1 t\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\nq2 0 d3 1\n")
    (tmp_path / "own.jsonl").write_text('{"id": "q1", "retrieved": ["d1"], "relevant": ["d1"]}\n')
    (tmp_path / "run.jsonl").write_text('{"id": "q1", "retrieved": ["d2", "d1", "d2"]}\n')
    e, q, qrels = str(tmp_path / "e.npz"), str(tmp_path / "q.npz"), str(tmp_path / "qrels.txt")
    return {
        "files": [e],
        "pairs": ["--query", q, "--gallery", e],
        "judged": ["--query", q, "--gallery", e, "--qrels", qrels],
        "scored_run": ["--run", str(tmp_path / "run.txt"), "--qrels", qrels],
        "jsonl_run": ["--run", str(tmp_path / "run.jsonl"), "--qrels", qrels],
        "jsonl": ["--run", str(tmp_path / "own.jsonl")],
    }


SCORED = "the input given is a TREC or .json --run"


@pytest.mark.parametrize(("form", "option", "flag", "why"), [
    # each was accepted and changed nothing, exit 0 (found by an audit)
    ("files", ["--complete"], "--complete", "the input given is same-source embedding FILEs"),
    ("files", ["--duplicates", "error"], "--duplicates", "same-source embedding FILEs"),
    ("files", ["--run-depth", "7"], "--run-depth", "--write-run was not given"),
    ("files", ["--plot-k", "5"], "--plot-k", "--plot was not given"),
    ("scored_run", ["--similarity", "dot"], "--similarity", SCORED),
    ("scored_run", ["--relevance", "radius"], "--relevance", SCORED),
    ("scored_run", ["--radius", "3"], "--radius", SCORED),
    ("scored_run", ["--ignore-label", "1"], "--ignore-label", SCORED),
    ("scored_run", ["--keys", "labels=x"], "--keys", SCORED),
    ("scored_run", ["--protocol", "none", "--ties", "pessimistic"], "--ties", SCORED),
    ("scored_run", ["--duplicates", "error"], "--duplicates", SCORED),
    ("jsonl", ["--complete"], "--complete", 'a .jsonl --run with its own "relevant"'),
    ("judged", ["--ignore-label", "1"], "--ignore-label", "judged by --qrels"),
    ("pairs", ["--radius", "3"], "--radius", "--relevance was not given"),
    ("pairs", ["--relevance", "label", "--radius", "3"], "--radius", "--relevance is label"),
    # the parser's default value, given explicitly, is given all the same
    ("files", ["--run-depth", "100"], "--run-depth", "--write-run was not given"),
    ("scored_run", ["--similarity", "cosine"], "--similarity", SCORED),
])
def test_an_option_that_does_not_act_on_the_input_is_refused_by_name(each_form, capsys, form,
                                                                     option, flag, why):
    """One rule (cli.parser.APPLIES) for every option that acts on some inputs only: given
    elsewhere it is refused on one line that names it and what it applies to, exit 2, rather
    than accepted and ignored."""
    err = error_of(["evaluate", *each_form[form], *option, "--metrics", "mrr"], capsys)
    assert f"error: {flag} applies to " in err and why in err, err
    if flag not in ("--run-depth", "--plot-k"):  # (evaluate's alone)
        # compare reads the same inputs, and refuses the same way
        assert f"error: {flag} applies to " in error_of(["compare", *each_form[form], *option],
                                                        capsys)


def test_options_that_act_on_the_input_are_still_taken(each_form, tmp_path):
    """The rule refuses no option where it acts: --duplicates on a .jsonl run, --complete on a
    judged run, the embeddings' options on embeddings judged by qrels, --radius under a
    protocol that sets relevance radius, --plot-k with --plot."""
    quiet = ["--progress-delay", "-1", "--bootstrap", "10", "--metrics", "mrr"]
    assert cli.main(["evaluate", *each_form["jsonl_run"], "--duplicates", "first",
                     "--complete", *quiet]) == 0
    assert cli.main(["evaluate", *each_form["jsonl"], "--duplicates", "warn", *quiet]) == 0
    assert cli.main(["evaluate", *each_form["scored_run"], "-c", *quiet]) == 0
    assert cli.main(["evaluate", *each_form["judged"], "--similarity", "dot", "--ties",
                     "optimistic", "--keys", "ids=ids", "--ignore-identical-ids", "false",
                     *quiet]) == 0
    assert cli.main(["evaluate", *each_form["files"], "--plot", str(tmp_path / "p.png"),
                     "--plot-k", "3", "--write-run", str(tmp_path / "r.txt"), "--run-depth", "2",
                     "--relevance", "label", "--ignore-label", "9", *quiet]) == 0
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "places.npz", embeddings=rng.normal(size=(20, 2)),
             positions=rng.uniform(0, 60, size=(20, 2)))
    assert cli.main(["evaluate", str(tmp_path / "places.npz"), "--relevance", "radius",
                     "--radius", "30", *quiet]) == 0
    assert cli.main(["evaluate", str(tmp_path / "places.npz"), "--protocol", "msls",
                     "--radius", "25", *quiet]) == 0


def test_a_name_beyond_the_last_input_is_refused(each_form, capsys):
    """A third --name for two runs named nothing and was dropped without a word."""
    err = error_of(["evaluate", *each_form["files"], "--name", "a", "--name", "b"], capsys)
    assert "--name is given 2 times for 1 run" in err and "'b' names none" in err


def test_counts_of_one_take_the_singular():
    """'1 judged queries not in the run' and '1 run queries without judgments ignored'."""
    run = cli_runs.Run("r", "trec", ["run.txt", "qrels.txt"], None, 1,
                       {"run_queries_without_qrels": 1, "qrels_queries_without_run": 1})
    assert cli_runs.describe(run) == (
        "run.txt judged by qrels.txt: 1 query (1 run query without judgments ignored; 1 judged "
        "query not in the run ignored)"
    )
    run = cli_runs.Run("r", "trec", ["q.jsonl"], None, 1, {"run_queries_without_qrels": 2})
    assert cli_runs.describe(run) == (
        "q.jsonl: 1 question with its relevant ids (2 run queries without judgments ignored)"
    )


def test_error_trec_format(tmp_path, capsys):
    (tmp_path / "run.txt").write_text("q1 Q0 d1 1 0.5 tag\nq1 Q0 d2 2 tag\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 1\n")
    err = error_of(["evaluate", "--run", str(tmp_path / "run.txt"), "--qrels",
                    str(tmp_path / "qrels.txt")], capsys)  # fmt: skip
    assert "run.txt, line 2" in err and "6 fields" in err
    (tmp_path / "run.txt").write_text("q1 Q0 d1 1 0.5 tag\nq1 Q0 d1 2 0.4 tag\n")
    err = error_of(["evaluate", "--run", str(tmp_path / "run.txt"), "--qrels",
                    str(tmp_path / "qrels.txt")], capsys)  # fmt: skip
    assert "line 2" in err and "'d1'" in err and "twice" in err
    (tmp_path / "qrels.txt").write_text("q1 0 d1 yes\n")
    err = error_of(["evaluate", "--run", str(tmp_path / "run.txt"), "--qrels",
                    str(tmp_path / "qrels.txt")], capsys)  # fmt: skip
    assert "qrels.txt, line 1" in err


# ------------------------------------------------------------------------- in-process: inputs


def test_npy_with_sibling_arrays_and_string_labels(tmp_path, capsys):
    emb, labels = class_data(2)
    names = np.array([f"class-{c}" for c in labels])
    np.save(tmp_path / "e.npy", emb)
    err = error_of(["evaluate", str(tmp_path / "e.npy")], capsys)
    assert "e.npy" in err and "'labels'" in err and "e.NAME.npy" in err
    np.save(tmp_path / "e.labels.npy", names)
    args = ["evaluate", tmp_path / "e.npy", "--metrics", "hit_rate@1,map@r", "--json",
            tmp_path / "o.json"]  # fmt: skip
    assert cli.main([str(a) for a in args]) == 0
    got = json.loads((tmp_path / "o.json").read_text())["runs"][0]["metrics"]
    m = rm.RetrievalMetrics(["hit_rate@1", "map@r"])
    m.update(torch.from_numpy(emb), torch.from_numpy(labels))
    for name, value in m.compute().items():
        assert got[name]["value"] == pytest.approx(float(value), rel=1e-6)


def test_same_source_ids_dedupe_like_the_api(tmp_path):
    emb, labels = class_data(4)
    ids = np.arange(len(labels))
    ids[10:20] = ids[0:10]  # ten repeated samples, as a DistributedSampler pads
    emb[10:20], labels[10:20] = emb[0:10], labels[0:10]
    np.savez(tmp_path / "e.npz", embeddings=emb, labels=labels, ids=ids)
    names = ["hit_rate@1", "map@r", "mrr"]
    assert cli.main([str(a) for a in ("evaluate", tmp_path / "e.npz", "--metrics",
                     ",".join(names), "--json", tmp_path / "o.json")]) == 0  # fmt: skip
    got = json.loads((tmp_path / "o.json").read_text())["runs"][0]["metrics"]
    m = rm.RetrievalMetrics(names)
    m.update(torch.from_numpy(emb), torch.from_numpy(labels), ids=torch.from_numpy(ids))
    assert_matches_summary(got, m.summary())
    assert got["map@r"]["queries"] == len(labels) - 10


def test_chunked_ranking_equals_one_update(tmp_path, monkeypatch):
    """Queries given to the metric in chunks of 37 (kept, then ranked together against the
    fixed gallery): the values of one update."""
    emb, labels = class_data(5, n_classes=100)
    np.savez(tmp_path / "e.npz", embeddings=emb, labels=labels)
    monkeypatch.setattr(cli_runs, "_chunks", lambda n, parts=20, minimum=0: [
        slice(lo, min(n, lo + 37)) for lo in range(0, n, 37)])  # fmt: skip
    names = ["hit_rate@1", "recall@4", "map@r", "ndcg@10", "map"]
    assert cli.main([str(a) for a in ("evaluate", tmp_path / "e.npz", "--metrics",
                     ",".join(names), "--json", tmp_path / "o.json")]) == 0  # fmt: skip
    got = json.loads((tmp_path / "o.json").read_text())["runs"][0]["metrics"]
    m = rm.RetrievalMetrics(names)
    m.update(torch.from_numpy(emb), torch.from_numpy(labels))
    assert_matches_summary(got, m.summary())


def test_progress_bar_only_for_slow_evaluations(tmp_path, capsys):
    emb, labels = class_data(6)
    np.savez(tmp_path / "e.npz", embeddings=emb, labels=labels)
    assert cli.main(["evaluate", str(tmp_path / "e.npz"), "--metrics", "hit_rate@1"]) == 0
    assert capsys.readouterr().err == ""  # quick: nothing on stderr
    assert cli.main(["evaluate", str(tmp_path / "e.npz"), "--metrics", "hit_rate@1",
                     "--progress-delay", "0"]) == 0  # fmt: skip
    captured = capsys.readouterr()
    # the queries given (rows; shown where the bar's thread drew before they were all given),
    # then their ranking, made at once at compute(), a step of its own, shown to its end
    lines = captured.err.splitlines()
    ranking = [i for i, line in enumerate(lines) if line.startswith("e: ranking [")]
    queries = [i for i, line in enumerate(lines) if line.startswith("e: queries [")]
    assert ranking and " 1/1 " in lines[ranking[-1]]
    assert all(i < ranking[0] for i in queries)
    assert not queries or f" {len(labels)}/{len(labels)} " in lines[queries[-1]]
    assert "ranking" not in captured.out


def test_progress_bar_appears_after_the_delay():
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    with cli.Progress(10, "work", delay=0.05, stream=stream) as bar:
        time.sleep(0.4)
        bar.advance(10)
    text = stream.getvalue()
    assert text.startswith("\rwork [") and text.endswith("s\n")
    assert "10/10" in text.split("\r")[-1]
    # a log file: a line a state, no carriage return (the redraws piled onto one line there)
    log = io.StringIO()
    with cli.Progress(10, "work", delay=0.05, stream=log) as bar:
        time.sleep(0.2)
        bar.advance(10)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and lines[0].startswith("work [") and "0/10" in lines[0]
    assert "10/10" in lines[-1] and len(lines) == 2
    quiet = io.StringIO()
    with cli.Progress(10, "work", delay=5, stream=quiet) as bar:
        bar.advance(10)
    assert quiet.getvalue() == ""


def test_ties_option_and_single_tensor_pt(tmp_path):
    gen = torch.Generator().manual_seed(7)
    labels = torch.arange(50).repeat_interleave(4)
    codes = torch.sign(
        torch.randn(50, 8, generator=gen)[labels] + torch.randn(200, 8, generator=gen)
    )
    torch.save(codes, tmp_path / "codes.pt")  # one tensor: the embeddings
    torch.save(labels, tmp_path / "codes.labels.pt")  # its labels beside it
    names = ["hit_rate@1", "map@r"]
    values = {}
    for rule in ("optimistic", "expected", "pessimistic"):
        out = tmp_path / f"{rule}.json"
        args = ["evaluate", tmp_path / "codes.pt", "--similarity", "dot", "--ties", rule,
                "--metrics", ",".join(names), "--json", out]  # fmt: skip
        assert cli.main([str(a) for a in args]) == 0
        got = json.loads(out.read_text())["runs"][0]["metrics"]
        m = rm.RetrievalMetrics(names, similarity="dot", ties=rule)
        m.update(codes, labels)
        assert_matches_summary(got, m.summary())
        values[rule] = got["hit_rate@1"]["value"]
    assert values["optimistic"] > values["expected"] > values["pessimistic"]


def test_place_recognition_positions_with_protocol(tmp_path):
    pytest.importorskip("retrieval_metrics.protocols")
    rng = np.random.default_rng(8)
    g_pos = rng.uniform(0, 500, size=(400, 2))
    q_pos = g_pos[rng.choice(400, 50, replace=False)] + rng.normal(scale=15, size=(50, 2))
    g_emb = (g_pos / 100 + rng.normal(scale=0.3, size=(400, 2))).astype(np.float32)
    q_emb = (q_pos / 100 + rng.normal(scale=0.3, size=(50, 2))).astype(np.float32)
    np.savez(tmp_path / "q.npz", embeddings=q_emb, positions=q_pos)
    np.savez(tmp_path / "g.npz", embeddings=g_emb, positions=g_pos)
    names = ["hit_rate@1", "hit_rate@5", "hit_rate@10", "hit_rate@20"]
    args = ["evaluate", "--query", tmp_path / "q.npz", "--gallery", tmp_path / "g.npz",
            "--protocol", "netvlad", "--similarity", "euclidean", "--metrics", ",".join(names),
            "--json", tmp_path / "o.json"]  # fmt: skip
    assert cli.main([str(a) for a in args]) == 0
    got = json.loads((tmp_path / "o.json").read_text())["runs"][0]["metrics"]
    m = rm.RetrievalMetrics(names, protocol="netvlad", similarity="euclidean")
    m.update(torch.from_numpy(q_emb), positions=torch.from_numpy(q_pos), role="query")
    m.update(torch.from_numpy(g_emb), positions=torch.from_numpy(g_pos), role="gallery")
    assert_matches_summary(got, m.summary())
    assert got["hit_rate@1"]["value"] > 1  # netvlad reports percent


def test_importing_the_commands_module_by_its_path_leaves_main_the_function():
    """``import retrieval_metrics.cli.<module>`` binds the submodule as an attribute of the
    package: a submodule named ``main`` replaced the function ``cli.main`` for whoever imported
    it by its path first (a test worker calling ``cli.main([...])`` then called a module)."""
    import importlib

    importlib.import_module("retrieval_metrics.cli.commands")
    assert callable(cli.main) and cli.main.__module__ == "retrieval_metrics.cli.commands"


# ------------------------------------------------------------------------- an audit's findings


def test_a_curve_is_printed_up_to_its_own_k(tmp_path, capsys):
    """cmc@3 printed @1 and @2 only, cmc@15 stopped at @10; the interval line read "97%" for
    --level 0.975."""
    emb, labels = class_data(3, n_classes=8)
    np.savez(tmp_path / "a.npz", embeddings=emb, labels=labels)
    capsys.readouterr()
    assert cli.main(["evaluate", str(tmp_path / "a.npz"), "--metrics", "cmc@3,cmc@15",
                     "--level", "0.975", "--bootstrap", "100"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    shown = re.compile(r"cmc@\d+:|97\.5% interval:|chance:")
    heads = [line.split()[0] for line in lines if shown.match(line)]
    assert heads == ["cmc@3:", "97.5%", "chance:", "cmc@15:", "97.5%", "chance:"]
    for name, ks in (("cmc@3", [1, 2, 3]), ("cmc@15", [1, 2, 5, 10, 15])):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{name}:"))
        for line in lines[at:at + 3]:
            assert [int(k) for k in re.findall(r"@(\d+) ", line)] == ks, line
    assert cli_summary.curve_points(1) == [1] and cli_summary.curve_points(20) == [1, 2, 5, 10, 20]


def _trec_pair(tmp_path, queries: int = 1):
    """Two runs of ``queries`` judged queries, each with its relevant document at rank 1 in
    run a and at rank 2 in run b."""
    a = "".join(f"q{q} Q0 d1 1 3 a\nq{q} Q0 d2 2 2 a\nq{q} Q0 d3 3 1 a\n" for q in range(queries))
    b = "".join(f"q{q} Q0 d2 1 3 b\nq{q} Q0 d1 2 2 b\nq{q} Q0 d3 3 1 b\n" for q in range(queries))
    (tmp_path / "a.txt").write_text(a)
    (tmp_path / "b.txt").write_text(b)
    (tmp_path / "qrels.txt").write_text("".join(f"q{q} 0 d1 1\n" for q in range(queries)))
    return ["--run", str(tmp_path / "a.txt"), "--run", str(tmp_path / "b.txt"), "--qrels",
            str(tmp_path / "qrels.txt")]  # fmt: skip


def test_two_runs_compare_the_values_they_print(tmp_path, capsys):
    """The paired comparison of two runs printed mean ranks under median_rank, claimed
    p < 0.001 from one query, and changed its test with --percent."""
    capsys.readouterr()
    assert cli.main(["evaluate", *_trec_pair(tmp_path), "--metrics", "mrr"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "   mrr: 1.0000 vs 0.5000, difference +0.5000 [+0.5000, +0.5000], p = n/a (untested, "
        "1 query)"
    )
    assert cli.main(["evaluate", *_trec_pair(tmp_path, 3), "--metrics", "mrr", "--json",
                     str(tmp_path / "e.json")]) == 0  # fmt: skip
    row = json.loads((tmp_path / "e.json").read_text())["comparison"]["mrr"]
    assert row["test"] == "paired randomization" and row["p_value"] == 0.25  # 2 of 2^3
    # median and mean ranks: each run's printed values, and the difference of those
    emb, labels = class_data(5, n_classes=12)
    np.savez(tmp_path / "m1.npz", embeddings=emb, labels=labels)
    np.savez(tmp_path / "m2.npz", embeddings=emb + 1.5 * np.random.default_rng(1).normal(
        size=emb.shape).astype(np.float32), labels=labels)  # fmt: skip
    files = [str(tmp_path / "m1.npz"), str(tmp_path / "m2.npz")]
    capsys.readouterr()
    assert cli.main(["evaluate", *files, "--metrics", "median_rank,mean_rank", "--percent",
                     "--json", str(tmp_path / "m.json")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    runs = json.loads((tmp_path / "m.json").read_text())["runs"]
    for name in ("median_rank", "mean_rank"):
        first, second = (run["metrics"][name]["value"] for run in runs)
        assert f"   {name}: {first:.4f} vs {second:.4f}, difference {first - second:+.4f}" in out
    # a hit rate in percent: the exact McNemar test, as in fractions
    tests = []
    for unit in ([], ["--percent"]):
        capsys.readouterr()
        assert cli.main(["evaluate", *files, "--metrics", "hit_rate@1", *unit]) == 0
        tests.append(capsys.readouterr().out.splitlines()[-1].split(", p = ")[1])
    assert tests[0] == tests[1] and tests[0].endswith("(exact McNemar, 60 queries)")


def test_the_refusal_of_r_at_k_names_the_command_line_s_flags(each_form, capsys):
    """R@K under --protocol none is refused as ambiguous (the papers' hit rate, or recall); the
    refusal named the Python API's qrels= to a user who had given --qrels (an audit)."""
    err = error_of(["evaluate", *each_form["scored_run"], "--protocol", "none", "--metrics",
                    "R@10"], capsys)
    assert "did you mean hit_rate@10" in err and "qrels=" not in err
    assert "under an IR --protocol (trec_eval, a --run's default" in err
