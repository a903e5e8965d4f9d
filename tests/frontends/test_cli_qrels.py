"""``retrieval-metrics evaluate --query Q --gallery CORPUS --qrels QRELS``: embeddings judged by
qrels, run in-process through ``cli.main``; the numbers are checked against a hand-computed case,
a brute force over the full score matrix and pytrec_eval, not against the Python API alone."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from retrieval_metrics import cli

PNG = b"\x89PNG\r\n\x1a\n"


def write_qrels(path, qrels: dict[str, dict[str, int]]) -> None:
    """A BEIR qrels file: a header, then 'query-id corpus-id score' tab-separated."""
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{g}" for q, docs in qrels.items() for d, g in docs.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def evaluate(tmp_path, capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = cli.main(["evaluate", *args, "--bootstrap", "50", "--progress-delay", "-1"])
    out = capsys.readouterr()
    return status, out.out, out.err


def report(path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def values(entry: dict) -> dict[str, float]:
    return {name: row["value"] for name, row in entry["metrics"].items()}


# --------------------------------------------------------------------- a case by hand

# cosine scores of q1 = (1, .1): d0 .995, d1 .950, d2 .100, d3 -.980 (ranked d0 d1 d2 d3);
# q2 = (0, 1): d2 1, d1 .406, d3 .100, d0 0 (ranked d2 d1 d3 d0)
CORPUS = np.array([[1.0, 0.0], [0.9, 0.4], [0.0, 1.0], [-1.0, 0.1]])
QUERIES = np.array([[1.0, 0.1], [0.0, 1.0], [0.5, 0.5], [-1.0, 0.0]])
QRELS = {
    "q1": {"d1": 2, "d3": 1, "d9": 1},  # d9: not in the corpus
    "q2": {"d0": 1},
    "q4": {"d2": 1},  # judged, never given
    "q5": {"d0": 0},  # judged, nothing relevant
}


@pytest.fixture
def small(tmp_path):
    np.savez(tmp_path / "corpus.npz", embeddings=CORPUS, ids=np.array(["d0", "d1", "d2", "d3"]))
    # q3 has no judgments: left out, as BEIR's loader and trec_eval leave it
    np.savez(tmp_path / "q.npz", embeddings=QUERIES, ids=np.array(["q1", "q2", "q3", "q5"]))
    write_qrels(tmp_path / "qrels.tsv", QRELS)
    return tmp_path


def test_hand_computed_values_notes_and_json(small, capsys):
    metrics = "recall@2,mrr@10,map,ndcg@3"
    status, out, err = evaluate(
        small, capsys, "--query", str(small / "q.npz"), "--gallery", str(small / "corpus.npz"),
        "--qrels", str(small / "qrels.tsv"), "--metrics", metrics, "--json", str(small / "r.json"),
    )
    assert status == 0, err
    entry = report(small / "r.json")["runs"][0]
    # q1: d1 2nd, d3 4th, d9 never (m = 3); q2: d0 4th; q5 (grade 0 only) skipped by default
    ndcg_q1 = (3 / math.log2(3)) / (3 + 1 / math.log2(3) + 1 / math.log2(4))  # gain 2^g - 1
    expected = {
        "recall@2": (1 / 3 + 0) / 2,
        "mrr@10": (1 / 2 + 1 / 4) / 2,
        "map": ((1 / 2 + 2 / 4) / 3 + 1 / 4) / 2,
        "ndcg@3": (ndcg_q1 + 0) / 2,
    }
    assert values(entry) == pytest.approx(expected, abs=1e-9)
    for row in entry["metrics"].values():
        assert (row["queries"], row["skipped"], row["gallery_size"]) == (2, 1, 4)
        assert row["chance"] is None  # d9 lies outside the corpus: no random ranking has it
    assert entry["kind"] == "qrels"
    assert entry["queries"] == 3
    assert entry["notes"] == {"query_file_queries_without_qrels": 1}
    # q5 is judged (grade 0): skipped in the rows, not a query "without judgments"; q3, which
    # has none, never reached the metric
    assert entry["summary_notes"] == {
        "judged documents not in the corpus": 1,
        "queries without judgments": 0,
        "judged queries not given": 1,
    }
    assert "judged by" in out and "3 queries (1 query of the file without judgments ignored)" in out
    for line in ("judged documents not in the corpus: 1", "queries without judgments: 0",
                 "judged queries not given: 1"):
        assert line in out


def test_beir_protocol_scores_grade_zero_queries_zero(small, capsys):
    status, _, err = evaluate(
        small, capsys, "--query", str(small / "q.npz"), "--gallery", str(small / "corpus.npz"),
        "--qrels", str(small / "qrels.tsv"), "--protocol", "beir", "--metrics", "ndcg@3,mrr@10",
        "--json", str(small / "r.json"),
    )
    assert status == 0, err
    got = report(small / "r.json")
    assert got["options"]["protocol"] == "beir" and got["options"]["gain"] == "linear"
    ndcg_q1 = (2 / math.log2(3)) / (2 + 1 / math.log2(3) + 1 / math.log2(4))  # linear gain
    # q5, judged with grade 0 only, counts as 0 (pytrec_eval's value); q3 stays out
    assert values(got["runs"][0]) == pytest.approx(
        {"ndcg@3": ndcg_q1 / 3, "mrr@10": (1 / 2 + 1 / 4) / 3}, abs=1e-9
    )


def test_default_metrics_and_bytes_ids(small, capsys):
    # ids saved as bytes (np.bytes_) are the qrels' text ids
    np.savez(small / "qb.npz", embeddings=QUERIES, ids=np.array([b"q1", b"q2", b"q3", b"q5"]))
    status, _, err = evaluate(
        small, capsys, "--query", str(small / "qb.npz"), "--gallery", str(small / "corpus.npz"),
        "--qrels", str(small / "qrels.tsv"), "--json", str(small / "r.json"),
    )
    assert status == 0, err
    got = values(report(small / "r.json")["runs"][0])
    assert list(got) == ["ndcg@10", "recall@100", "map@100", "mrr@10"]
    assert got["mrr@10"] == pytest.approx(0.375, abs=1e-9)


# --------------------------------------------------------------- random cases, pytrec_eval


def random_case(seed: int, n_docs: int = 150, n_queries: int = 24, dim: int = 8):
    """Float64 embeddings with str ids, graded qrels (one judged document outside the corpus, one
    judged query not given), the query file with one unjudged query."""
    rng = np.random.default_rng(seed)
    corpus = rng.normal(size=(n_docs, dim))
    doc_ids = np.array([f"doc-{i}" for i in range(n_docs)])
    qrels: dict[str, dict[str, int]] = {}
    queries = []
    for q in range(n_queries):
        rel = rng.choice(n_docs, size=int(rng.integers(1, 5)), replace=False)
        qrels[f"query {q}"] = {str(doc_ids[d]): int(rng.integers(1, 4)) for d in rel}
        queries.append(corpus[rel].mean(0) + 1.5 * rng.normal(size=dim))
    qrels["query 0"]["doc-missing"] = 2
    qrels["query never given"] = {"doc-1": 1}
    query_ids = [f"query {q}" for q in range(n_queries)] + ["query unjudged"]
    queries.append(rng.normal(size=dim))
    return np.array(queries), np.array(query_ids), corpus, doc_ids, qrels


def scores(queries: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    qn = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    cn = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    return qn @ cn.T


def brute_force(queries, query_ids, corpus, doc_ids, qrels, ks):
    """Per judged query: recall@K for each K and the reciprocal rank within 10, by sorting its
    row of the full score matrix."""
    s = scores(queries, corpus)
    recall = {k: [] for k in ks}
    rr10 = []
    for row, qid in zip(s, query_ids, strict=True):
        if qid not in qrels:
            continue
        relevant = {d for d, g in qrels[qid].items() if g > 0}
        order = doc_ids[np.argsort(-row, kind="stable")]
        ranks = [int(np.flatnonzero(order == d)[0]) + 1 for d in relevant if d in set(doc_ids)]
        for k in ks:
            recall[k].append(sum(r <= k for r in ranks) / len(relevant))
        first = min(ranks, default=math.inf)
        rr10.append(1 / first if first <= 10 else 0.0)
    return {k: float(np.mean(v)) for k, v in recall.items()}, float(np.mean(rr10))


def test_beir_matches_pytrec_eval_on_the_full_score_matrix(tmp_path, capsys):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    queries, query_ids, corpus, doc_ids, qrels = random_case(1)
    np.savez(tmp_path / "q.npz", embeddings=queries, ids=query_ids)
    np.savez(tmp_path / "c.npz", embeddings=corpus, ids=doc_ids)
    write_qrels(tmp_path / "qrels.tsv", qrels)
    status, _, err = evaluate(
        tmp_path, capsys, "--query", str(tmp_path / "q.npz"), "--gallery",
        str(tmp_path / "c.npz"), "--qrels", str(tmp_path / "qrels.tsv"), "--protocol", "beir",
        "--metrics", "ndcg@10,recall@100,map@100,precision@5,mrr@10",
        "--json", str(tmp_path / "r.json"),
    )
    assert status == 0, err
    got = values(report(tmp_path / "r.json")["runs"][0])
    # BEIR: pytrec_eval on every query's full run, averaged over the queries it returns
    s = scores(queries, corpus)
    run = {
        qid: {str(d): float(v) for d, v in zip(doc_ids, row, strict=True)}
        for qid, row in zip(query_ids, s, strict=True)
    }
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "map_cut.100",
                                                       "P.5"})
    per_query = evaluator.evaluate(run)
    assert len(per_query) == len(query_ids) - 1  # the unjudged query has no value
    for ours, theirs in (("ndcg@10", "ndcg_cut_10"), ("recall@100", "recall_100"),
                         ("map@100", "map_cut_100"), ("precision@5", "P_5")):
        mean = float(np.mean([v[theirs] for v in per_query.values()]))
        assert got[ours] == pytest.approx(mean, abs=1e-9), ours
    _, rr10 = brute_force(queries, query_ids, corpus, doc_ids, qrels, [10])
    assert got["mrr@10"] == pytest.approx(rr10, abs=1e-12)


def test_two_models_compared_and_plotted(tmp_path, capsys):
    queries, query_ids, corpus, doc_ids, qrels = random_case(2)
    del qrels["query 0"]["doc-missing"]  # every judged document in the corpus: chance is defined
    rng = np.random.default_rng(3)
    # model b: other dimensions, its corpus and queries stored in another order
    project = rng.normal(size=(8, 12))
    noisy_q = queries @ project + 2.0 * rng.normal(size=(len(queries), 12))
    perm_c, perm_q = rng.permutation(len(corpus)), rng.permutation(len(queries))
    np.savez(tmp_path / "a_q.npz", embeddings=queries, ids=query_ids)
    np.savez(tmp_path / "a_c.npz", embeddings=corpus, ids=doc_ids)
    np.savez(tmp_path / "b_q.npz", embeddings=noisy_q[perm_q], ids=query_ids[perm_q])
    np.savez(tmp_path / "b_c.npz", embeddings=(corpus @ project)[perm_c], ids=doc_ids[perm_c])
    write_qrels(tmp_path / "qrels.tsv", qrels)
    status, out, err = evaluate(
        tmp_path, capsys, "--query", str(tmp_path / "a_q.npz"), "--gallery",
        str(tmp_path / "a_c.npz"), "--query", str(tmp_path / "b_q.npz"), "--gallery",
        str(tmp_path / "b_c.npz"), "--qrels", str(tmp_path / "qrels.tsv"), "--metrics",
        "recall@10,mrr@10,hit_rate@5", "--name", "model-a", "--name", "model-b",
        "--plot", str(tmp_path / "cmp.png"), "--plot-k", "50", "--json", str(tmp_path / "r.json"),
    )
    assert status == 0, err
    got = report(tmp_path / "r.json")
    a, b = got["runs"]
    assert (a["name"], b["name"]) == ("model-a", "model-b")
    ks = a["curve"]["k"]
    assert ks[:10] == list(range(1, 11)) and ks[-1] == 50
    recall_a, rr_a = brute_force(queries, query_ids, corpus, doc_ids, qrels, ks)
    recall_b, rr_b = brute_force(noisy_q, query_ids, corpus @ project, doc_ids, qrels, ks)
    assert values(a)["mrr@10"] == pytest.approx(rr_a, abs=1e-12)
    assert values(b)["mrr@10"] == pytest.approx(rr_b, abs=1e-12)
    # the plot: recall @K of each model, the brute force's; chance K / N for each judged document
    assert a["curve"]["recall"] == pytest.approx([recall_a[k] for k in ks], abs=1e-12)
    assert b["curve"]["recall"] == pytest.approx([recall_b[k] for k in ks], abs=1e-12)
    assert a["curve"]["chance"] == pytest.approx([k / len(corpus) for k in ks], abs=1e-12)
    assert (tmp_path / "cmp.png").read_bytes()[:8] == PNG
    # paired on the same queries, whatever order each file holds them in
    comparison = got["comparison"]
    assert list(comparison) == ["recall@10", "mrr@10", "hit_rate@5"]
    for name, row in comparison.items():
        assert row["difference"] == pytest.approx(values(a)[name] - values(b)[name], abs=1e-12)
        assert row["queries"] == len(query_ids) - 1
        assert 0 <= row["p_value"] <= 1
    assert comparison["hit_rate@5"]["test"].startswith("exact McNemar")
    assert "== model-a vs model-b, paired on the same queries" in out
    assert f"plot written to {tmp_path / 'cmp.png'}" in out


def test_two_query_files_one_corpus_and_different_queries(tmp_path, capsys):
    queries, query_ids, corpus, doc_ids, qrels = random_case(4)
    np.savez(tmp_path / "c.npz", embeddings=corpus, ids=doc_ids)
    np.savez(tmp_path / "a.npz", embeddings=queries, ids=query_ids)
    np.savez(tmp_path / "b.npz", embeddings=queries[::-1] + 0.5, ids=query_ids[::-1])
    np.savez(tmp_path / "few.npz", embeddings=queries[:5], ids=query_ids[:5])
    write_qrels(tmp_path / "qrels.tsv", qrels)
    common = ["--gallery", str(tmp_path / "c.npz"), "--qrels", str(tmp_path / "qrels.tsv")]
    status, out, err = evaluate(
        tmp_path, capsys, "--query", str(tmp_path / "a.npz"), "--query", str(tmp_path / "b.npz"),
        *common,
    )
    assert status == 0, err
    assert "== a vs b, paired on the same queries" in out
    status, out, err = evaluate(
        tmp_path, capsys, "--query", str(tmp_path / "a.npz"), "--query",
        str(tmp_path / "few.npz"), *common,
    )
    assert status == 0, err
    assert "(no paired comparison: a and few score different queries)" in out


# --------------------------------------------------------------------------------- errors


def test_errors_name_the_file_and_the_fix(small, capsys):
    q, c, qrels = str(small / "q.npz"), str(small / "corpus.npz"), str(small / "qrels.tsv")
    np.savez(small / "noids.npz", embeddings=QUERIES, labels=np.arange(4))
    status, _, err = evaluate(small, capsys, "--query", str(small / "noids.npz"), "--gallery", c,
                              "--qrels", qrels)
    assert status == 2
    assert f"{small / 'noids.npz'}: no array named 'ids'" in err
    assert "judges queries and documents by their ids" in err and "--keys ids=NAME" in err

    status, _, err = evaluate(small, capsys, "--query", q, "--gallery", str(small / "noids.npz"),
                              "--qrels", qrels)
    assert status == 2 and f"{small / 'noids.npz'}: no array named 'ids'" in err

    status, _, err = evaluate(small, capsys, c, "--qrels", qrels)
    assert status == 2 and "--qrels with same-source FILEs is not supported" in err

    status, _, err = evaluate(small, capsys, "--query", q, "--gallery", c, "--qrels", qrels, "-c")
    assert status == 2 and "--complete" in err

    status, _, err = evaluate(small, capsys, "--query", q, "--gallery", c,
                              "--ignore-identical-ids", "true", "--metrics", "hit_rate@1")
    assert status == 2 and "--ignore-identical-ids applies to embeddings judged by qrels" in err

    np.savez(small / "other.npz", embeddings=QUERIES, ids=np.array(["x", "y", "z", "w"]))
    status, _, err = evaluate(small, capsys, "--query", str(small / "other.npz"), "--gallery", c,
                              "--qrels", qrels)
    assert status == 2 and "none of its 4 query ids has judgments in" in err
    status, _, err = evaluate(small, capsys, "--query", q, "--gallery", str(small / "other.npz"),
                              "--qrels", qrels)
    assert status == 2 and "none of its 4 document ids is judged in" in err

    # Python strings saved with dtype=object: numpy would only mention pickles
    np.savez(small / "objects.npz", embeddings=QUERIES,
             ids=np.array(["q1", "q2", "q3", "q5"], dtype=object))
    status, _, err = evaluate(small, capsys, "--query", str(small / "objects.npz"), "--gallery",
                              c, "--qrels", qrels)
    assert status == 2 and "array 'ids' holds Python objects (dtype=object)" in err
    assert "dtype=str" in err


def test_integer_ids_that_collide_need_the_option(tmp_path, capsys):
    np.savez(tmp_path / "c.npz", embeddings=CORPUS, ids=np.arange(4))
    np.savez(tmp_path / "q.npz", embeddings=QUERIES[:2], ids=np.arange(2))
    write_qrels(tmp_path / "qrels.tsv", {"0": {"1": 1}, "1": {"0": 1}})
    args = ["--query", str(tmp_path / "q.npz"), "--gallery", str(tmp_path / "c.npz"), "--qrels",
            str(tmp_path / "qrels.tsv"), "--metrics", "mrr@10"]
    status, _, err = evaluate(tmp_path, capsys, *args)
    assert status == 2 and "--ignore-identical-ids false or true" in err
    status, _, err = evaluate(tmp_path, capsys, *args, "--ignore-identical-ids", "false",
                              "--json", str(tmp_path / "r.json"))
    assert status == 0, err
    got = report(tmp_path / "r.json")
    assert got["options"]["ignore_identical_ids"] is False
    # two numberings: query 0 ranks d0 d1 .. (d1 2nd), query 1 ranks d2 d1 d3 d0 (d0 4th)
    assert values(got["runs"][0]) == pytest.approx({"mrr@10": (1 / 2 + 1 / 4) / 2}, abs=1e-9)


def test_a_plot_below_the_protocols_run_depth_is_refused_by_name(tmp_path, capsys):
    """sentence-transformers' protocol ranks to its largest cut-off (10 here): a recall curve to
    50 would read positions it did not rank, and the command says so instead of plotting."""
    queries, query_ids, corpus, doc_ids, qrels = random_case(4)
    np.savez(tmp_path / "q.npz", embeddings=queries, ids=query_ids)
    np.savez(tmp_path / "c.npz", embeddings=corpus, ids=doc_ids)
    write_qrels(tmp_path / "qrels.tsv", qrels)
    common = ["--query", str(tmp_path / "q.npz"), "--gallery", str(tmp_path / "c.npz"),
              "--qrels", str(tmp_path / "qrels.tsv"), "--metrics", "recall@10",
              "--protocol", "sentence_transformers", "--plot", str(tmp_path / "r.png")]
    status, _, err = evaluate(tmp_path, capsys, *common, "--plot-k", "50")
    assert status == 2
    assert "--plot-k 50 reaches below the 10 documents" in err and "sentence_transformers" in err
    assert not (tmp_path / "r.png").exists()
    status, _, err = evaluate(tmp_path, capsys, *common, "--plot-k", "10")
    assert status == 0, err
    assert (tmp_path / "r.png").exists()
