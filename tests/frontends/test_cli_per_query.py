"""``retrieval-metrics evaluate --per-query OUT``: each query's value keyed by its query id (a
run's qids, a query file's ids, row numbers where a file has none), for significance tests and
error analysis in other tools. The values are worked by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from retrieval_metrics import cli

LOG3 = math.log2(3)


def evaluate(capsys, *args: str) -> None:
    capsys.readouterr()
    status = cli.main(["evaluate", *args, "--bootstrap", "20", "--progress-delay", "-1"])
    assert status == 0, capsys.readouterr().err


def test_a_run_per_query_is_keyed_by_its_qids(tmp_path, capsys):
    # q1: d2 (grade 0), d1 (grade 2): NDCG@2 (trec_eval's linear gain) = (2 / log2 3) / 2,
    # RR = 1/2; q10: d7 (unjudged), d6 (1): 1 / log2 3, RR = 1/2; q2 judged grade 0 only:
    # 0 under the runs' default protocol (trec_eval)
    (tmp_path / "qrels.txt").write_text("q1 0 d1 2\nq1 0 d2 0\nq2 0 d3 0\nq10 0 d6 1\n")
    (tmp_path / "run.txt").write_text(
        "q1 Q0 d2 1 0.9 s\nq1 Q0 d1 2 0.8 s\nq2 Q0 d3 1 0.9 s\nq10 Q0 d7 1 0.9 s\n"
        "q10 Q0 d6 2 0.8 s\n"
    )
    out = tmp_path / "per_query.json"
    evaluate(capsys, "--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "qrels.txt"),
             "--metrics", "ndcg@2,mrr", "--per-query", str(out))
    got = json.loads(out.read_text())["run"]
    assert got["ndcg@2"] == pytest.approx({"q1": 1 / LOG3, "q10": 1 / LOG3, "q2": 0.0})
    assert got["mrr"] == {"q1": 0.5, "q10": 0.5, "q2": 0.0}
    # tab-separated, a query left out (--protocol none: q2 skipped) empty
    tsv = tmp_path / "per_query.tsv"
    evaluate(capsys, "--run", str(tmp_path / "run.txt"), "--qrels", str(tmp_path / "qrels.txt"),
             "--metrics", "mrr", "--protocol", "none", "--per-query", str(tsv))
    lines = tsv.read_text().splitlines()
    assert lines[0] == "run\tquery_id\tmeasure\tvalue"
    assert set(lines[1:]) == {"run\tq10\tmrr\t0.5", "run\tq1\tmrr\t0.5", "run\tq2\tmrr\t"}


def test_embeddings_per_query_is_keyed_by_the_query_files_ids_or_row_numbers(tmp_path, capsys):
    # dot products: query "b" = [1, 0] meets item 0 (label 0) first; query "a" = [0, 1] meets
    # item 1 (label 1) second, after item 2 (label 0, score 2)
    gallery = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 2.0]], dtype=np.float32)
    queries = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    np.savez(tmp_path / "g.npz", embeddings=gallery, labels=np.array([0, 1, 0]))
    np.savez(tmp_path / "q.npz", embeddings=queries, labels=np.array([0, 1]),
             ids=np.array(["b", "a"]))
    out = tmp_path / "pq.json"
    evaluate(capsys, "--query", str(tmp_path / "q.npz"), "--gallery", str(tmp_path / "g.npz"),
             "--metrics", "mrr", "--similarity", "dot", "--per-query", str(out))
    assert json.loads(out.read_text())["q"]["mrr"] == {"b": 1.0, "a": 0.5}
    # a file without ids: its row numbers
    np.savez(tmp_path / "q2.npz", embeddings=queries, labels=np.array([0, 1]))
    evaluate(capsys, "--query", str(tmp_path / "q2.npz"), "--gallery", str(tmp_path / "g.npz"),
             "--metrics", "mrr", "--similarity", "dot", "--per-query", str(out))
    assert json.loads(out.read_text())["q2"]["mrr"] == {"0": 1.0, "1": 0.5}
