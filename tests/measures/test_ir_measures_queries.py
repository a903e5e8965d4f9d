"""Which queries an ir_measures string counts: every judged query, as its provider reports it,
whatever the metric's ``empty_queries`` (a query judged grade 0 only scores 0, Judged@K its
share of judged documents); the library's own names keep ``empty_queries``' rule."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import retrieval_metrics as rm

ir_measures = pytest.importorskip("ir_measures")

# q2 is judged, grade 0 only: ir_measures reports it (0 for nDCG, P, AP, RR; Judged@2 = 1)
QRELS = {
    "q1": {"d1": 2, "d2": 0, "d5": 1},
    "q2": {"d3": 0, "d4": 0},
    "q3": {"d6": 1, "d1": 0},
}
RUN = {
    "q1": {"d2": 0.9, "d1": 0.8, "d7": 0.7, "d5": 0.6},
    "q2": {"d3": 0.9, "d8": 0.8, "d4": 0.7},
    "q3": {"d7": 0.9, "d6": 0.8, "d1": 0.7},
}
STRINGS = ["nDCG@10", "P@2", "AP", "RR", "Judged@2", "Success@2"]


def _ir_measures() -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    measures = [ir_measures.parse_measure(s) for s in STRINGS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows: dict[str, dict[str, float]] = {s: {} for s in STRINGS}
        for m in ir_measures.iter_calc(measures, QRELS, RUN):
            rows[str(m.measure)][m.query_id] = m.value
        means = {str(k): v for k, v in ir_measures.calc_aggregate(measures, QRELS, RUN).items()}
    return rows, means


def _ranked_lists_metric(names, **options) -> rm.RetrievalMetrics:
    qids = sorted(QRELS)
    metric = rm.RetrievalMetrics(names, **options)
    metric.update(
        ranked_ids=[sorted(RUN[q], key=lambda d: -RUN[q][d]) for q in qids],
        relevant_ids=[QRELS[q] for q in qids],
    )
    return metric


@pytest.mark.parametrize("empty_queries", ["skip", "zero"])
def test_ir_measures_strings_count_every_judged_query_whatever_empty_queries(empty_queries):
    rows, means = _ir_measures()
    assert len(rows["nDCG@10"]) == 3 and rows["nDCG@10"]["q2"] == 0.0  # the reference's rule
    metric = _ranked_lists_metric(STRINGS, empty_queries=empty_queries)
    values, per_query = metric.compute(), metric.per_query()
    summary = {row["name"]: row for row in metric.summary(num_bootstrap=100).rows}
    for name in STRINGS:
        expected = [rows[name][q] for q in sorted(QRELS)]
        # (calc_aggregate's means are pytrec_eval's, printed at 1e-6)
        assert float(values[name]) == pytest.approx(means[name], abs=1e-6), name
        assert float(values[name]) == pytest.approx(sum(expected) / 3, abs=1e-6), name  # (float32)
        assert per_query[name].tolist() == pytest.approx(expected, abs=1e-9), name
        assert summary[name]["queries"] == 3 and summary[name]["skipped"] == 0, name
        lo, hi = summary[name]["interval"]
        assert min(expected) - 1e-9 <= lo <= hi <= max(expected) + 1e-9, name


def test_ir_measures_strings_count_judged_queries_against_a_corpus_too():
    # the same judgments, embeddings ranked by cosine: q2 is judged grade 0 only
    docs = ["d1", "d2", "d3", "d4", "d5", "d6"]
    corpus = torch.eye(6, dtype=torch.float64)
    queries = torch.tensor([[0.5, 1.0, 0, 0, 0.2, 0], [0, 0, 1.0, 0.5, 0, 0],
                            [0, 0, 0, 0, 0, 1.0]], dtype=torch.float64)
    metric = rm.RetrievalMetrics(["nDCG@3", "ndcg@3"], qrels=QRELS)
    metric.update(queries, ids=["q1", "q2", "q3"], role="query")
    metric.update(corpus, ids=docs, role="gallery")
    scores = torch.nn.functional.normalize(queries, dim=1) @ corpus.T
    run = {q: {d: float(scores[i, j]) for j, d in enumerate(docs)}
           for i, q in enumerate(["q1", "q2", "q3"])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ir_measures.calc_aggregate([ir_measures.parse_measure("nDCG@3")], QRELS, run)
    values = metric.compute()
    assert float(values["nDCG@3"]) == pytest.approx(next(iter(ref.values())), abs=1e-6)
    rows = metric.per_query()
    q2 = rows["ndcg@3"].isnan()
    # q2 scores 0 under the ir_measures string; the library's own name keeps
    # empty_queries="skip": q2 alone is left out of its mean
    assert int(q2.sum()) == 1 and float(rows["nDCG@3"][q2]) == 0.0


def test_a_query_without_any_judgment_follows_empty_queries_for_ir_measures_strings():
    # relevant_ids={} says nothing was judged: no provider reports such a query; it is skipped
    metric = rm.RetrievalMetrics(["nDCG@10"])
    metric.update(ranked_ids=[["d1", "d2"], ["d3"]], relevant_ids=[{"d1": 1}, {}])
    values, rows = metric.compute(), metric.per_query()["nDCG@10"]
    assert float(values["nDCG@10"]) == 1.0
    assert float(rows[0]) == 1.0 and math.isnan(float(rows[1]))


def test_the_command_line_counts_judged_queries_for_ir_measures_strings_without_a_protocol(
    tmp_path, capsys
):
    import json

    from retrieval_metrics import cli

    (tmp_path / "qrels.txt").write_text("".join(
        f"{q} 0 {d} {g}\n" for q, judged in QRELS.items() for d, g in judged.items()))
    (tmp_path / "run.txt").write_text("".join(
        f"{q} Q0 {d} {i + 1} {s!r} sys\n" for q, scored in RUN.items()
        for i, (d, s) in enumerate(sorted(scored.items(), key=lambda x: -x[1]))))
    status = cli.main(["evaluate", "--run", str(tmp_path / "run.txt"), "--qrels",
                       str(tmp_path / "qrels.txt"), "--metrics", "nDCG@10,P@2,ndcg@10",
                       "--protocol", "none", "--json", str(tmp_path / "out.json"),
                       "--bootstrap", "20", "--progress-delay", "-1"])
    assert status == 0, capsys.readouterr().err
    got = json.loads((tmp_path / "out.json").read_text())["runs"][0]["metrics"]
    rows, _ = _ir_measures()
    for name in ("nDCG@10", "P@2"):
        assert got[name]["value"] == pytest.approx(sum(rows[name].values()) / 3, abs=1e-6)
    # the library's name under --protocol none (empty_queries="skip"): q2 left out
    assert got["ndcg@10"]["queries"] == 2  # q1 and q3


def test_empty_queries_error_refuses_only_the_queries_no_provider_reports():
    # q2 judged grade 0 only: scored by the ir_measures string (0), so not refused
    metric = _ranked_lists_metric(["nDCG@10"], empty_queries="error")
    _, means = _ir_measures()
    assert float(metric.compute()["nDCG@10"]) == pytest.approx(means["nDCG@10"], abs=1e-6)
    # the library's name refuses q2, and the string refuses a query given no judgment at all
    with pytest.raises(ValueError, match="1 queries have no relevant gallery item"):
        _ranked_lists_metric(["ndcg@10"], empty_queries="error").compute()
    unjudged = rm.RetrievalMetrics(["nDCG@10"], empty_queries="error")
    unjudged.update(ranked_ids=[["d1"], ["d2"]], relevant_ids=[{"d1": 1}, {}])
    with pytest.raises(ValueError, match="1 queries have no relevant gallery item"):
        unjudged.compute()


def _ndcg_linear(order: list[str], grades: dict[str, int], k: int) -> float:
    """trec_eval's ndcg_cut (linear gain) of one ranking, by its definition."""
    import math as m

    dcg = sum(grades.get(d, 0) / m.log2(i + 2) for i, d in enumerate(order[:k]) if grades.get(d))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    return dcg / sum(g / m.log2(i + 2) for i, g in enumerate(ideal))


def test_the_chance_level_of_an_ir_measures_string_covers_the_queries_its_value_does():
    import itertools

    docs = ["d1", "d2", "d3", "d4", "d5", "d6"]
    g = torch.Generator().manual_seed(0)
    queries = torch.randn(3, 4, generator=g, dtype=torch.float64)
    metric = rm.RetrievalMetrics(["nDCG@3"], qrels=QRELS)
    metric.update(queries, ids=["q1", "q2", "q3"], role="query")
    metric.update(torch.randn(6, 4, generator=g, dtype=torch.float64), ids=docs, role="gallery")
    row = metric.summary(num_bootstrap=20).rows[0]
    # brute force: NDCG@3 averaged over every order of the 6 documents; q2 (judged grade 0
    # only) scores 0 under every order and is counted, as in the value
    orders = list(itertools.permutations(docs))
    chance = [sum(_ndcg_linear(list(o), QRELS[q], 3) for o in orders) / len(orders)
              if q != "q2" else 0.0 for q in ("q1", "q2", "q3")]
    assert row["queries"] == 3
    assert float(row["chance"]) == pytest.approx(sum(chance) / 3, abs=1e-9)
