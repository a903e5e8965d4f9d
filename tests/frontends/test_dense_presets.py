"""The dense-retrieval evaluators' presets: protocol="beir", "mteb" and "sentence_transformers".

Sources read (see ../shared/research/rag-evaluators.md sections 1, 5, 6 and 7):

* BEIR 2.2 (beir-cellar/beir ef83d29): ``beir/retrieval/evaluation.py``
  ``EvaluateRetrieval.evaluate`` (pytrec_eval ndcg_cut, map_cut, recall, P; sum over the queries
  pytrec_eval returns / len(scores), rounded to 5 places) and ``beir/retrieval/custom_metrics.py``
  ``mrr`` and ``top_k_accuracy`` (score-only sort, relevant = grade > 0, / len(qrels), rounded).
* MTEB 2.20 (embeddings-benchmark/mteb a905523): ``mteb/_evaluators/retrieval_metrics.py``
  ``calculate_retrieval_scores``, ``parse_metrics_from_scores`` (pytrec_eval plus success,
  rounded to 5 places), ``mrr`` (sorted by (score, doc id) descending, unrounded mean over the
  run's queries), ``make_score_dict`` (the ``*_at_K`` keys; ``accuracy`` = Recall@1).
* sentence-transformers 6.x (huggingface/sentence-transformers cad2119):
  ``sentence_transformers/sentence_transformer/evaluation/information_retrieval.py``
  ``InformationRetrievalEvaluator.compute_metrics`` and ``compute_dcg_at_k``; ``__init__`` keeps
  only queries with relevant documents.

The references below are short paraphrases of those functions (not their code); pytrec_eval
(installed) is BEIR's and MTEB's engine for their pytrec measures. Every comparison uses scores
without ties (also as float32, pytrec_eval's precision), where the evaluators' tie orders do not
matter; the tie cases are hand-worked below.
"""

from __future__ import annotations

import copy
import json
import math
import warnings

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.cli import main
from retrieval_metrics.protocols import (
    DEFAULTS,
    EVALUATOR_NAMES,
    EVALUATOR_REPORTS,
    PROTOCOLS,
    apply_protocol,
    library_names,
)

pytrec_eval = pytest.importorskip("pytrec_eval")

# the evaluators' cut-offs (up to 1000) on small test corpora: the library's warning is expected
pytestmark = pytest.mark.filterwarnings("ignore:.*cut-off reaches the whole gallery")

BEIR_K = (1, 3, 5, 10, 100, 1000)
MTEB_K = (1, 3, 5, 10, 20, 100, 1000)
ST_K = {"accuracy": (1, 3, 5, 10), "precision": (1, 3, 5, 10), "recall": (1, 3, 5, 10),
        "mrr": (10,), "ndcg": (10,), "map": (100,)}


# ============================================================================================
# References, paraphrased from the evaluators' source (cited above)
# ============================================================================================


def _pytrec_means(qrels, results, measures, ks):
    """pytrec_eval's per-query values, summed and divided by the queries it returns."""
    wanted = {f"{m}." + ",".join(map(str, ks)) for m in measures}
    scores = pytrec_eval.RelevanceEvaluator(qrels, wanted).evaluate(results)
    return {
        (m, k): sum(per_query[f"{m}_{k}"] for per_query in scores.values()) / len(scores)
        for m in measures for k in ks
    }


def beir_evaluate(qrels, results, ks=BEIR_K, digits=5):
    """EvaluateRetrieval.evaluate and evaluate_custom('mrr' / 'accuracy'), BEIR's key names."""
    means = _pytrec_means(qrels, results, ("ndcg_cut", "map_cut", "recall", "P"), ks)
    keys = {"ndcg_cut": "NDCG", "map_cut": "MAP", "recall": "Recall", "P": "P"}
    out = {f"{keys[m]}@{k}": v for (m, k), v in means.items()}
    mrr = dict.fromkeys(ks, 0.0)
    accuracy = dict.fromkeys(ks, 0.0)
    for qid, doc_scores in results.items():
        # score only, stable: ties in the dict's insertion order
        top = [d for d, _ in sorted(doc_scores.items(), key=lambda kv: kv[1], reverse=True)]
        relevant = {d for d, g in qrels[qid].items() if g > 0}
        for k in ks:
            first = next((i for i, d in enumerate(top[:k]) if d in relevant), None)
            if first is not None:
                mrr[k] += 1.0 / (first + 1)
                accuracy[k] += 1.0
    out.update({f"MRR@{k}": v / len(qrels) for k, v in mrr.items()})
    out.update({f"Accuracy@{k}": v / len(qrels) for k, v in accuracy.items()})
    return {k: v if digits is None else round(v, digits) for k, v in out.items()}


def mteb_scores(qrels, results, ks=MTEB_K, digits=5):
    """calculate_retrieval_scores + make_score_dict, MTEB's key names (MRR unrounded)."""
    means = _pytrec_means(qrels, results, ("ndcg_cut", "map_cut", "recall", "P", "success"), ks)
    keys = {"ndcg_cut": "ndcg", "map_cut": "map", "recall": "recall", "P": "precision",
            "success": "hit_rate"}
    out = {f"{keys[m]}_at_{k}": v if digits is None else round(v, digits)
           for (m, k), v in means.items()}
    if "recall_at_1" in out:
        out["accuracy"] = out["recall_at_1"]
    for k in ks:
        total = 0.0
        for qid, doc_scores in results.items():
            # (score, doc id) descending, as pytrec_eval orders ties
            top = [d for d, _ in sorted(doc_scores.items(), key=lambda kv: (kv[1], kv[0]),
                                        reverse=True)]
            relevant = {d for d, g in qrels[qid].items() if g > 0}
            first = next((i for i, d in enumerate(top[:k]) if d in relevant), None)
            total += 0.0 if first is None else 1.0 / (first + 1)
        out[f"mrr_at_{k}"] = total / len(results)
    return out


def st_compute_metrics(results, relevant_docs, ks=ST_K):
    """InformationRetrievalEvaluator: queries without relevant documents dropped (__init__), then
    compute_metrics on each query's hits sorted by (-score, corpus id)."""
    queries = [q for q in results if len(relevant_docs.get(q, ())) > 0]
    per = {(name, k): [] for name, kk in ks.items() for k in kk}
    for qid in queries:
        top = [d for d, _ in sorted(results[qid].items(), key=lambda kv: (-kv[1], kv[0]))]
        rel = relevant_docs[qid]
        for name, kk in ks.items():
            for k in kk:
                flags = [d in rel for d in top[:k]]
                hits = sum(flags)
                if name == "accuracy":
                    value = float(hits > 0)
                elif name == "precision":
                    value = hits / k
                elif name == "recall":
                    value = hits / len(rel)
                elif name == "mrr":
                    value = next((1.0 / (i + 1) for i, f in enumerate(flags) if f), 0.0)
                elif name == "ndcg":
                    dcg = sum(f / math.log2(i + 2) for i, f in enumerate(flags))
                    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(rel), k)))
                    value = dcg / ideal
                else:  # map: divided by min(k, |R|)
                    found, total = 0, 0.0
                    for i, f in enumerate(flags):
                        if f:
                            found += 1
                            total += found / (i + 1)
                    value = total / min(k, len(rel))
                per[(name, k)].append(value)
    return {f"{name}@{k}": float(np.mean(v)) for (name, k), v in per.items()}


# ============================================================================================
# Data: random scores without ties (as float32 too), graded judgments
# ============================================================================================


def _no_float32_ties(scores: np.ndarray) -> None:
    for row in np.atleast_2d(scores):
        assert len(set(row.astype(np.float32).tolist())) == row.size


def graded_scores(seed=0, queries=12, docs=40):
    """Every query scores every document ("d00".."d39"); grades 0-2, a few queries all 0."""
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((queries, docs))
    _no_float32_ties(scores)
    grades = rng.choice([0, 1, 2], size=(queries, docs), p=[0.8, 0.12, 0.08])
    grades[3] = 0  # judged, grade 0 only
    grades[7] = 0
    grades[5, :] = 0
    grades[5, 39] = 2  # one relevant document, scored anywhere
    doc_ids = [f"d{j:02d}" for j in range(docs)]
    qids = [f"q{i:02d}" for i in range(queries)]
    qrels = {q: {d: int(grades[i, j]) for j, d in enumerate(doc_ids)} for i, q in enumerate(qids)}
    results = {q: {d: float(scores[i, j]) for j, d in enumerate(doc_ids)}
               for i, q in enumerate(qids)}
    return scores, grades, qids, doc_ids, qrels, results


def values64(metric):
    """The float64 means (summary()'s values); compute() returns them as float32, as
    torchmetrics does, so it is checked against them to float32 precision."""
    exact = {row["name"]: float(row["value"]) for row in metric.summary(num_bootstrap=10).rows}
    for name, value in metric.compute().items():
        assert float(value) == pytest.approx(exact[name], rel=1e-6, abs=1e-7), name
    return exact


def ours(names, protocol, **update):
    metric = rm.RetrievalMetrics(names, protocol=protocol)
    metric.update(**update)
    return values64(metric)


def scores_form(scores, grades):
    q, d = scores.shape
    return {"preds": torch.tensor(scores.ravel()), "target": torch.tensor(grades.ravel()),
            "indexes": torch.arange(q).repeat_interleave(d)}


def compare(theirs: dict, mine: dict, names, protocol, tol=1e-9):
    """Each evaluator name's value in ``theirs`` against ours under its library name."""
    for name, lib in zip(names, library_names(protocol, names), strict=True):
        assert mine[lib.lower()] == pytest.approx(theirs[name], abs=tol), (protocol, name)


BEIR_NAMES = [f"{m}@{k}" for m in ("NDCG", "MAP", "Recall", "P", "MRR", "Accuracy")
              for k in BEIR_K]
MTEB_NAMES = [f"{m}_at_{k}" for m in ("ndcg", "map", "recall", "precision", "mrr", "hit_rate")
              for k in MTEB_K if (m, k) != ("recall", 1)] + ["accuracy"]
ST_NAMES = [f"{name}@{k}" for name, kk in ST_K.items() for k in kk]


# ============================================================================================
# The evaluators' own numbers, on every input form
# ============================================================================================


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beir_scores_form_equals_beir(seed):
    scores, grades, _, _, qrels, results = graded_scores(seed)
    exact = beir_evaluate(qrels, results, digits=None)
    printed = beir_evaluate(qrels, results)
    mine = ours(BEIR_NAMES, "beir", **scores_form(scores, grades))
    compare(exact, mine, BEIR_NAMES, "beir")
    # at BEIR's printed precision: the float64 mean rounded to 5 places is its number
    for name, lib in zip(BEIR_NAMES, library_names("beir", BEIR_NAMES), strict=True):
        assert round(mine[lib.lower()], 5) == printed[name], name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mteb_scores_form_equals_mteb(seed):
    scores, grades, _, _, qrels, results = graded_scores(seed)
    exact = mteb_scores(qrels, results, digits=None)
    printed = mteb_scores(qrels, results)
    mine = ours(MTEB_NAMES, "mteb", **scores_form(scores, grades))
    compare(exact, mine, MTEB_NAMES, "mteb")
    for name, lib in zip(MTEB_NAMES, library_names("mteb", MTEB_NAMES), strict=True):
        value = mine[lib.lower()]
        # MTEB rounds its pytrec_eval means to 5 places, not its MRR
        assert (value if name.startswith("mrr") else round(value, 5)) == pytest.approx(
            printed[name], abs=0 if not name.startswith("mrr") else 1e-12), name


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sentence_transformers_scores_form_equals_compute_metrics(seed):
    scores, grades, qids, doc_ids, _, results = graded_scores(seed)
    relevant = {q: {d for j, d in enumerate(doc_ids) if grades[i, j] > 0}
                for i, q in enumerate(qids)}
    theirs = st_compute_metrics(results, relevant)
    mine = ours(ST_NAMES, "sentence_transformers", **scores_form(scores, grades))
    compare(theirs, mine, ST_NAMES, "sentence_transformers")


def test_ranked_lists_form_equals_all_three():
    """Top-20 lists (judged documents beyond them, and grade-0 judgments, in the qrels)."""
    _, _, qids, _, qrels, results = graded_scores(3)
    top = {q: dict(sorted(r.items(), key=lambda kv: -kv[1])[:20]) for q, r in results.items()}
    ranked = [list(top[q]) for q in qids]
    relevant = [qrels[q] for q in qids]  # every judgment, grade 0 included
    form = {"ranked_ids": ranked, "relevant_ids": relevant}
    compare(beir_evaluate(qrels, top, digits=None), ours(BEIR_NAMES, "beir", **form),
            BEIR_NAMES, "beir")
    compare(mteb_scores(qrels, top, digits=None), ours(MTEB_NAMES, "mteb", **form),
            MTEB_NAMES, "mteb")
    positives = {q: {d for d, g in qrels[q].items() if g > 0} for q in qids}
    compare(st_compute_metrics(top, positives),
            ours(ST_NAMES, "sentence_transformers", **form), ST_NAMES, "sentence_transformers")


def _label_data(seed):
    rng = np.random.default_rng(seed)
    q_labels = np.arange(15) % 8
    g_labels = np.concatenate([np.arange(8), rng.integers(0, 8, 42)])  # every label in gallery
    q = rng.standard_normal((15, 16))
    g = rng.standard_normal((50, 16))
    return q, q_labels, g, g_labels


def _cosine(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


@pytest.mark.parametrize("seed", [0, 1])
def test_query_gallery_embeddings_equal_all_three(seed):
    q, q_labels, g, g_labels = _label_data(seed)
    scores = _cosine(q, g)
    _no_float32_ties(scores)
    qids, gids = [f"q{i}" for i in range(len(q))], [f"g{j:02d}" for j in range(len(g))]
    results = {qid: {gid: float(scores[i, j]) for j, gid in enumerate(gids)}
               for i, qid in enumerate(qids)}
    qrels = {qid: {gid: 1 for j, gid in enumerate(gids) if g_labels[j] == q_labels[i]}
             for i, qid in enumerate(qids)}
    for protocol, names, theirs in (
        ("beir", BEIR_NAMES, beir_evaluate(qrels, results, digits=None)),
        ("mteb", MTEB_NAMES, mteb_scores(qrels, results, digits=None)),
        ("sentence_transformers", ST_NAMES,
         st_compute_metrics(results, {k: set(v) for k, v in qrels.items()})),
    ):
        metric = rm.RetrievalMetrics(names, protocol=protocol)
        metric.update(torch.tensor(q), torch.tensor(q_labels), role="query")
        metric.update(torch.tensor(g), torch.tensor(g_labels), role="gallery")
        compare(theirs, values64(metric), names, protocol)


def test_same_source_embeddings_equal_all_three():
    """update(embeddings, labels): each item a query against the others (itself removed)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((30, 8))
    labels = np.arange(30) % 6  # five items per label
    scores = _cosine(x, x)
    ids = [f"i{j:02d}" for j in range(30)]
    results = {ids[i]: {ids[j]: float(scores[i, j]) for j in range(30) if j != i}
               for i in range(30)}
    qrels = {ids[i]: {ids[j]: 1 for j in range(30) if j != i and labels[j] == labels[i]}
             for i in range(30)}
    for protocol, names, theirs in (
        ("beir", BEIR_NAMES, beir_evaluate(qrels, results, digits=None)),
        ("mteb", MTEB_NAMES, mteb_scores(qrels, results, digits=None)),
        ("sentence_transformers", ST_NAMES,
         st_compute_metrics(results, {k: set(v) for k, v in qrels.items()})),
    ):
        mine = ours(names, protocol, embeddings=torch.tensor(x), labels=torch.tensor(labels))
        compare(theirs, mine, names, protocol)


def test_a_query_without_any_relevant_gallery_item():
    """With labels, such a query has no judgment at all: pytrec_eval (BEIR, MTEB) and
    sentence-transformers leave it out. The beir and mteb presets count it as 0, as they must a
    query judged with grade 0 only (which labels cannot express): drop such queries before update,
    or drop the protocol and pass gain='linear' (empty_queries='skip' is the default)."""
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    g = torch.tensor([[1.0, 0.1], [0.2, 1.0]])
    q_labels, g_labels = torch.tensor([0, 5]), torch.tensor([0, 1])  # label 5: nothing relevant
    got = {}
    for protocol in ("beir", "mteb", "sentence_transformers", None):
        options = {"protocol": protocol} if protocol else {"gain": "linear"}
        metric = rm.RetrievalMetrics(["ndcg@10"], **options)
        metric.update(q, q_labels, role="query")
        metric.update(g, g_labels, role="gallery")
        got[protocol] = values64(metric)["ndcg@10"]
    assert got == {"beir": 0.5, "mteb": 0.5, "sentence_transformers": 1.0, None: 1.0}
    qrels, results = {"q0": {"g0": 1}}, {"q0": {"g0": 1.0, "g1": 0.2}, "q1": {"g0": 0.1}}
    assert beir_evaluate(qrels, {"q0": results["q0"]}, ks=(10,))["NDCG@10"] == 1.0
    # (BEIR's loader keeps only the queries of its qrels; pytrec_eval skips the others)
    assert _pytrec_means(qrels, results, ("ndcg_cut",), (10,))[("ndcg_cut", 10)] == 1.0


# ============================================================================================
# Hand-worked cases (rag-evaluators.md section 9, re-derived)
# ============================================================================================


def run1(names, ranked, relevant, protocol):
    return {k: round(v, 5) for k, v in ours(names, protocol, ranked_ids=[ranked],
                                             relevant_ids=[relevant]).items()}


def test_map_divisor_item_1():
    # R = {a, b, c}, [a, x]: map_cut.2 = (1/1) / 3; sentence-transformers 1 / min(2, 3)
    for protocol in ("beir", "mteb"):
        assert run1(["map@2"], ["a", "x"], ["a", "b", "c"], protocol) == {"map@2": 0.33333}
    assert run1(["map@2"], ["a", "x"], ["a", "b", "c"], "sentence_transformers") == {
        "map@2": 0.5}


def test_ndcg_ideal_cut_at_k_item_2():
    # R = {a, b, c}, [a, b]: the ideal DCG@2 is 1 + 1/log2 3 under all three
    for protocol in ("beir", "mteb", "sentence_transformers"):
        assert run1(["ndcg@2"], ["a", "b"], ["a", "b", "c"], protocol) == {"ndcg@2": 1.0}


def test_ties_item_5():
    """Scores {d1: 0.5, d2: 0.5}, d2 relevant. pytrec_eval (BEIR's and MTEB's P@1, NDCG@1) puts
    d2 first (doc id descending): 1.0; sentence-transformers 6.x puts d1 first (ascending): 0.0;
    BEIR's MRR@1 keeps insertion order (d1 first): 0.0. BEIR's and MTEB's presets keep
    ties='expected': the mean over the two orders, 0.5. sentence-transformers' sets ties='id':
    with the documents' ids (embeddings and a gallery with ids=) its 0.0; scores without ids
    have nothing to order by, refused where a tie touches a relevant item."""
    form = {"preds": torch.tensor([0.5, 0.5]), "target": torch.tensor([0, 1]),
            "indexes": torch.tensor([0, 0])}
    qrels, results = {"q": {"d1": 0, "d2": 1}}, {"q": {"d1": 0.5, "d2": 0.5}}
    assert beir_evaluate(qrels, results, ks=(1,))["P@1"] == 1.0
    assert beir_evaluate(qrels, results, ks=(1,))["MRR@1"] == 0.0
    assert mteb_scores(qrels, results, ks=(1,))["mrr_at_1"] == 1.0
    assert st_compute_metrics(results, {"q": {"d2"}}, {"precision": (1,)}) == {
        "precision@1": 0.0}
    for protocol in ("beir", "mteb"):
        assert ours(["precision@1", "mrr@1"], protocol, **form) == {
            "precision@1": 0.5, "mrr@1": 0.5}
    with pytest.raises(ValueError, match="ties='id' orders tied items by their gallery ids"):
        ours(["precision@1"], "sentence_transformers", **form)
    m = rm.RetrievalMetrics(["precision@1", "mrr@10"], qrels={"q": ["d2"]},
                            protocol="sentence_transformers")
    m.update(torch.tensor([[1.0, 0.0]]), ids=["q"], role="query")
    m.update(torch.tensor([[1.0, 1.0], [1.0, 1.0]]), ids=["d2", "d1"], role="gallery")
    assert {k: float(v) for k, v in m.compute().items()} == {"precision@1": 0.0, "mrr@10": 0.5}
    # a tie that touches no relevant item changes nothing: equal to all of them
    form = {"preds": torch.tensor([0.9, 0.5, 0.5]), "target": torch.tensor([1, 0, 0]),
            "indexes": torch.tensor([0, 0, 0])}
    for protocol in ("beir", "mteb", "sentence_transformers"):
        assert ours(["precision@1", "mrr@3"], protocol, **form) == {
            "precision@1": 1.0, "mrr@3": 1.0}


def test_accuracy_item_6():
    # R = {a, b}, [a, x]: sentence-transformers' and BEIR's Accuracy@1 are hit rate (1.0), MTEB's
    # accuracy is its recall_at_1 (0.5), its hit_rate_at_1 1.0
    assert run1(["accuracy@1"], ["a", "x"], ["a", "b"], "sentence_transformers") == {
        "hit_rate@1": 1.0}
    assert run1(["Accuracy@1"], ["a", "x"], ["a", "b"], "beir") == {"hit_rate@1": 1.0}
    assert run1(["accuracy", "hit_rate_at_1"], ["a", "x"], ["a", "b"], "mteb") == {
        "recall@1": 0.5, "hit_rate@1": 1.0}
    assert mteb_scores({"q": {"a": 1, "b": 1}}, {"q": {"a": 2.0, "x": 1.0}}, ks=(1,))[
        "accuracy"] == 0.5


def test_query_missing_from_the_run_item_7():
    """Qrels q1 = {a}, q2 = {b}; the run has only q1 (a first). BEIR's MRR@10 divides by
    len(qrels) (0.5), its NDCG@10 by the queries pytrec_eval returns (1.0). Here a query counts
    when it is passed: with an empty list (0.5 both), or left out (1.0 both)."""
    beir = beir_evaluate({"q1": {"a": 1}, "q2": {"b": 1}}, {"q1": {"a": 1.0}}, ks=(10,))
    assert (beir["MRR@10"], beir["NDCG@10"]) == (0.5, 1.0)
    passed = ours(["mrr@10", "ndcg@10"], "beir", ranked_ids=[["a"], []],
                  relevant_ids=[["a"], ["b"]])
    assert passed == {"mrr@10": 0.5, "ndcg@10": 0.5}
    # pytrec_eval itself scores a query whose run is empty: 0, counted (BEIR's NDCG@10 then 0.5)
    assert beir_evaluate({"q1": {"a": 1}, "q2": {"b": 1}}, {"q1": {"a": 1.0}, "q2": {}},
                         ks=(10,))["NDCG@10"] == 0.5
    left_out = ours(["mrr@10", "ndcg@10"], "beir", ranked_ids=[["a"]], relevant_ids=[["a"]])
    assert left_out == {"mrr@10": 1.0, "ndcg@10": 1.0}
    # MTEB's MRR divides by the run's queries: 1.0
    assert mteb_scores({"q1": {"a": 1}, "q2": {"b": 1}}, {"q1": {"a": 1.0}}, ks=(10,))[
        "mrr_at_10"] == 1.0


def test_capped_map_item_8():
    # R = {a, b, c}, [a]: recall@1 = 1/3 everywhere; sentence-transformers MAP@1 = 1/min(1, 3)
    for protocol in ("beir", "mteb", "sentence_transformers"):
        assert run1(["recall@1"], ["a"], ["a", "b", "c"], protocol) == {"recall@1": 0.33333}
    assert run1(["map@1"], ["a"], ["a", "b", "c"], "sentence_transformers") == {"map@1": 1.0}
    assert run1(["map_at_1"], ["a"], ["a", "b", "c"], "mteb") == {"map@1": 0.33333}


def test_graded_ndcg_item_10():
    # qrels {a: 2, b: 1}, [b, a]: linear gain (1 + 2/log2 3) / (2 + 1/log2 3); binary gain 1.0
    for protocol in ("beir", "mteb"):
        assert run1(["ndcg@2"], ["b", "a"], {"a": 2, "b": 1}, protocol) == {"ndcg@2": 0.85972}
    assert run1(["ndcg@2"], ["b", "a"], {"a": 2, "b": 1}, "sentence_transformers") == {
        "ndcg@2": 1.0}
    qrels, results = {"q": {"a": 2, "b": 1}}, {"q": {"b": 2.0, "a": 1.0}}
    assert beir_evaluate(qrels, results, ks=(2,))["NDCG@2"] == 0.85972


def test_queries_without_relevant_documents():
    """Grade 0 only: BEIR and MTEB score 0 and count it (pytrec_eval); sentence-transformers
    drops it. A query without any judgment is left out by pytrec_eval and MTEB: leave it out of
    update (passed, it counts as 0 under beir and mteb)."""
    form = {"ranked_ids": [["a"], ["b"]], "relevant_ids": [{"a": 1}, {"b": 0}]}
    for protocol in ("beir", "mteb"):
        assert ours(["ndcg@10"], protocol, **form) == {"ndcg@10": 0.5}
    assert ours(["ndcg@10"], "sentence_transformers", **form) == {"ndcg@10": 1.0}
    qrels, results = {"q1": {"a": 1}, "q2": {"b": 0}}, {"q1": {"a": 1.0}, "q2": {"b": 1.0}}
    assert beir_evaluate(qrels, results, ks=(10,))["NDCG@10"] == 0.5
    assert mteb_scores(qrels, results, ks=(10,))["ndcg_at_10"] == 0.5
    assert st_compute_metrics(results, {"q1": {"a"}, "q2": set()}, {"ndcg": (10,)}) == {
        "ndcg@10": 1.0}


def test_precision_divides_by_k_on_a_short_list():
    # R = {a}, [a, x] at k = 5: 1/5 under all three (sentence-transformers divides by k)
    for protocol in ("beir", "mteb", "sentence_transformers"):
        assert run1(["precision@5"], ["a", "x"], ["a"], protocol) == {"precision@5": 0.2}


# ============================================================================================
# Names and options
# ============================================================================================


@pytest.mark.parametrize(
    ("protocol", "given", "expected"),
    [
        ("beir", ["NDCG@10", "MAP@100", "Recall@1000", "P@3", "MRR@10", "Accuracy@5"],
         ["ndcg@10", "map@100", "recall@1000", "precision@3", "mrr@10", "hit_rate@5"]),
        ("mteb", ["ndcg_at_10", "map_at_1000", "recall_at_20", "precision_at_1", "mrr_at_10",
                  "hit_rate_at_5", "accuracy"],
         ["ndcg@10", "map@1000", "recall@20", "precision@1", "mrr@10", "hit_rate@5",
          "recall@1"]),
        ("sentence_transformers", ["accuracy@1", "accuracy@10", "precision@3", "recall@5",
                                   "mrr@10", "ndcg@10", "map@100"],
         ["hit_rate@1", "hit_rate@10", "precision@3", "recall@5", "mrr@10", "ndcg@10",
          "map@100"]),
        # the existing presets' names still work, now with a cut-off and the _at_ spelling too
        ("llama_index", ["ap", "granular_hit_rate", "mrr"], ["map", "recall", "mrr"]),
        ("haystack", ["recall_single_hit", "recall_multi_hit@5"], ["hit_rate", "recall@5"]),
        ("ragas", ["id_based_context_precision", "f1@5"], ["precision", "f1@5"]),
        ("mteb", ["recall_at_10/micro", "ndcg_at_10"], ["recall@10/micro", "ndcg@10"]),
    ],
)
def test_evaluator_names(protocol, given, expected):
    assert [n.lower() for n in library_names(protocol, given)] == expected
    assert rm.RetrievalMetrics(given, protocol=protocol).names == expected


def test_names_outside_their_protocol_are_unchanged():
    assert library_names(None, ["accuracy@1", "ndcg_at_10"]) == ["accuracy@1", "ndcg_at_10"]
    assert library_names("trec_eval", ["P@10"]) == ["P@10"]
    # "accuracy" is MTEB's recall_at_1 and takes no cut-off of its own
    assert library_names("mteb", ["accuracy@5"]) == ["accuracy@5"]
    with pytest.raises(ValueError, match="unknown metric"):
        rm.RetrievalMetrics(["accuracy@1"])
    with pytest.raises(ValueError, match="names a metric twice") as err:
        rm.RetrievalMetrics(["ndcg_at_10", "accuracy", "recall_at_1"], protocol="mteb")
    # the message names the renames that collide, not every rename
    assert "'accuracy' is 'recall@1', 'recall_at_1' is 'recall@1'" in str(err.value)
    assert "ndcg_at_10" not in str(err.value)


def test_reports_are_the_evaluators_defaults():
    beir = rm.RetrievalMetrics(EVALUATOR_REPORTS["beir"], protocol="beir")
    # BEIR's Accuracy@K (top_k_accuracy) is an evaluate_custom option, not a default
    assert set(beir.names) == {n.lower() for n in library_names("beir", BEIR_NAMES)} - {
        f"hit_rate@{k}" for k in BEIR_K}
    mteb = rm.RetrievalMetrics(EVALUATOR_REPORTS["mteb"], protocol="mteb")
    assert set(mteb.names) == set(library_names("mteb", MTEB_NAMES))
    st = rm.RetrievalMetrics(EVALUATOR_REPORTS["sentence_transformers"],
                             protocol="sentence_transformers")
    assert set(st.names) == set(library_names("sentence_transformers", ST_NAMES))
    for report in EVALUATOR_REPORTS.values():
        assert report[0] == "ndcg@10"  # the main score first
    assert set(EVALUATOR_REPORTS) <= set(EVALUATOR_NAMES) <= set(PROTOCOLS)


@pytest.mark.parametrize(
    ("protocol", "option"),
    [
        ("beir", {"gain": "exponential"}),
        ("beir", {"empty_queries": "skip"}),
        ("mteb", {"gain": "binary"}),
        ("mteb", {"empty_queries": "nan"}),
        ("sentence_transformers", {"divisor": "relevant"}),
        ("sentence_transformers", {"gain": "linear"}),
        ("sentence_transformers", {"empty_queries": "zero"}),
    ],
)
def test_conflicting_option_raises(protocol, option):
    name, value = next(iter(option.items()))
    assert PROTOCOLS[protocol][0][name] != value
    with pytest.raises(ValueError, match=f"protocol='{protocol}' sets {name}"):
        apply_protocol(protocol, option)


def test_option_sets():
    assert PROTOCOLS["beir"][0] == {"gain": "linear", "empty_queries": "zero"}
    assert PROTOCOLS["mteb"][0] == {"gain": "linear", "empty_queries": "zero"}
    assert PROTOCOLS["sentence_transformers"][0] == {
        "gain": "binary", "divisor": "min", "empty_queries": "skip", "ties": "id",
        "ignore_identical_ids": False}
    # the evaluators' own defaults of their ignore_identical_ids, which a value passed changes
    assert apply_protocol("beir", {})["ignore_identical_ids"] is True
    assert apply_protocol("beir", {"ignore_identical_ids": False})["ignore_identical_ids"] is False
    assert apply_protocol("mteb", {})["ignore_identical_ids"] is False
    assert apply_protocol("mteb", {"ignore_identical_ids": True})["ignore_identical_ids"] is True
    # pytrec_eval's order (descending id of float32 scores) is no rule here: ties not fixed
    for protocol in ("beir", "mteb"):
        assert apply_protocol(protocol, {})["ties"] == DEFAULTS["ties"] == "expected"


# ============================================================================================
# The command line ranks a run by trec_eval's rule: pytrec_eval's numbers even with ties
# ============================================================================================


def test_command_line_tied_run_equals_beir_and_mteb(tmp_path):
    """Scores with one decimal (many ties): the command line orders ties by document id
    descending, pytrec_eval's rule and MTEB's MRR's, so every BEIR pytrec measure and every MTEB
    measure is theirs; BEIR's MRR@K (insertion order) is left out."""
    rng = np.random.default_rng(7)
    qrels, results, run_lines, qrel_lines = {}, {}, [], []
    for i in range(10):
        qid = f"q{i}"
        docs = [f"d{j}" for j in rng.choice(60, size=25, replace=False)]
        results[qid] = {d: float(np.round(rng.random(), 1)) for d in docs}
        judged = [f"d{j}" for j in rng.choice(60, size=6, replace=False)]
        qrels[qid] = {d: int(rng.integers(0, 3)) for d in judged}
        run_lines += [f"{qid} Q0 {d} {r} {s} dense"
                      for r, (d, s) in enumerate(results[qid].items(), start=1)]
        qrel_lines += [f"{qid} 0 {d} {g}" for d, g in qrels[qid].items()]
    (tmp_path / "run.txt").write_text("\n".join(run_lines) + "\n")
    (tmp_path / "qrels.txt").write_text("\n".join(qrel_lines) + "\n")
    ks = (1, 3, 5, 10)
    for protocol, names, theirs in (
        ("beir", [f"{m}@{k}" for m in ("NDCG", "MAP", "Recall", "P") for k in ks],
         beir_evaluate(qrels, results, ks=ks, digits=None)),
        ("mteb", [f"{m}_at_{k}" for m in ("ndcg", "map", "recall", "precision", "hit_rate",
                                           "mrr") for k in ks],
         mteb_scores(qrels, results, ks=ks, digits=None)),
    ):
        out = tmp_path / f"{protocol}.json"
        assert main(["evaluate", "--run", str(tmp_path / "run.txt"), "--qrels",
                     str(tmp_path / "qrels.txt"), "--protocol", protocol, "--metrics",
                     ",".join(names), "--json", str(out)]) == 0
        metrics = json.loads(out.read_text())["runs"][0]["metrics"]
        compare(theirs, {k: v["value"] for k, v in metrics.items()}, names, protocol)


def test_float32_ties_of_pytrec_eval_item_5():
    """pytrec_eval (trec_eval 9.0.8) compares scores as float32: 0.1 + 1e-9 and 0.1 are tied
    there (d2 first by id descending, P@1 = 1) and distinct in float64, where d1 is first (MTEB's
    MRR, sentence-transformers and the presets: 0). Scores given as float32 are tied here too,
    then scored as ties='expected' (0.5)."""
    qrels, results = {"q": {"d1": 0, "d2": 1}}, {"q": {"d1": 0.1 + 1e-9, "d2": 0.1}}
    assert beir_evaluate(qrels, results, ks=(1,))["P@1"] == 1.0
    assert mteb_scores(qrels, results, ks=(1,))["mrr_at_1"] == 0.0
    form = {"preds": torch.tensor([0.1 + 1e-9, 0.1], dtype=torch.float64),
            "target": torch.tensor([0, 1]), "indexes": torch.tensor([0, 0])}
    for protocol in ("beir", "mteb", "sentence_transformers"):
        assert ours(["precision@1"], protocol, **form) == {"precision@1": 0.0}
    form["preds"] = form["preds"].float()
    assert ours(["precision@1"], "beir", **form) == {"precision@1": 0.5}


# ============================================================================================
# Every query of a query file given: BEIR's number all the same
# ============================================================================================


def _query_file(seed=0):
    """30 queries against 80 documents: 16 judged with relevant documents (graded), 4 judged
    grade 0 only, and 10 the qrels never name (a dataset's whole query file embedded)."""
    rng = np.random.default_rng(seed)
    q, g = rng.standard_normal((30, 16)), rng.standard_normal((80, 16))
    qids, gids = [f"q{i}" for i in range(30)], [f"d{j:02d}" for j in range(80)]
    qrels = {}
    for i in range(20):
        docs = rng.choice(80, size=4, replace=False)
        grades = rng.integers(1, 3, size=4) if i < 16 else np.zeros(4, dtype=int)
        qrels[qids[i]] = {gids[d]: int(grade) for d, grade in zip(docs, grades, strict=True)}
    order = rng.permutation(30)  # the unjudged queries among the others
    return q[order], [qids[i] for i in order], g, gids, qrels


@pytest.mark.parametrize("protocol", ["beir", "mteb"])
def test_unjudged_queries_given_leave_beirs_number_unchanged(protocol):
    """BEIR's EvaluateRetrieval.evaluate, the package's own and its pytrec_eval read here
    (means over the queries both the qrels and the run name), on a run of every given query, a
    third of them without any judgment and four judged grade 0 only: the preset gives its
    numbers to its 5 places, and summary() counts the queries left out."""
    q, qids, g, gids, qrels = _query_file()
    scores = _cosine(q, g)
    _no_float32_ties(scores)
    results = {qid: {gid: float(scores[i, j]) for j, gid in enumerate(gids)}
               for i, qid in enumerate(qids)}
    names = [f"{m}@{k}" for m in ("NDCG", "MAP", "Recall", "P") for k in (1, 3, 5, 10, 100)]
    # EvaluateRetrieval.evaluate (and MTEB's pytrec part): pytrec_eval's means over the
    # queries both name, rounded to 5 places
    keys = {"ndcg_cut": "NDCG", "map_cut": "MAP", "recall": "Recall", "P": "P"}
    theirs = {f"{keys[m]}@{k}": round(v, 5) for (m, k), v in
              _pytrec_means(qrels, results, tuple(keys), (1, 3, 5, 10, 100)).items()}
    # and BEIR's own package (its evaluate() drops a document whose id is the query's from the
    # run it is given: a copy)
    from beir.retrieval.evaluation import EvaluateRetrieval

    beirs = {}
    for part in EvaluateRetrieval.evaluate(
        qrels, copy.deepcopy(results), [1, 3, 5, 10, 100]
    ):
        beirs.update(part)
    assert beirs == theirs
    metric = rm.RetrievalMetrics(names if protocol == "beir" else _mteb_names(names),
                                 qrels=qrels, protocol=protocol)
    metric.update(torch.tensor(q), ids=qids, role="query")
    metric.update(torch.tensor(g), ids=gids, role="gallery")
    mine = values64(metric)
    for name, lib in zip(names, library_names("beir", names), strict=True):
        assert round(mine[lib.lower()], 5) == pytest.approx(theirs[name], abs=1e-12), name
    notes = metric.summary(num_bootstrap=10).notes
    assert notes["queries without judgments"] == 10
    assert notes["judged queries not given"] == 0
    # the same numbers from the judged queries alone
    judged = [i for i, qid in enumerate(qids) if qid in qrels]
    alone = rm.RetrievalMetrics(names if protocol == "beir" else _mteb_names(names),
                                qrels=qrels, protocol=protocol)
    alone.update(torch.tensor(q[judged]), ids=[qids[i] for i in judged], role="query")
    alone.update(torch.tensor(g), ids=gids, role="gallery")
    assert values64(alone) == mine


def _mteb_names(names):
    keys = {"NDCG": "ndcg", "MAP": "map", "Recall": "recall", "P": "precision"}
    return [f"{keys[n.split('@')[0]]}_at_{n.split('@')[1]}" for n in names]


def _corpus_given(metric, g, gids, fixed):
    if fixed:
        metric.set_gallery(torch.tensor(g), ids=gids)
    else:
        metric.update(torch.tensor(g), ids=gids, role="gallery")


@pytest.mark.parametrize("fixed", [False, True], ids=["corpus_updates", "set_gallery"])
def test_ids_that_do_not_meet_are_refused_by_name(fixed):
    q, qids, g, gids, qrels = _query_file()
    metric = rm.RetrievalMetrics(["ndcg@10"], qrels=qrels, protocol="beir")
    _corpus_given(metric, g, gids, fixed)
    metric.update(torch.tensor(q), ids=[f"query-{i}" for i in range(30)], role="query")
    with pytest.raises(ValueError, match=r"none of the 30 query ids given \(e.g. 'query-0'\) is "
                                         r"a query of the qrels \(20 judged queries, e.g. 'q0'\)"):
        metric.compute()
    metric = rm.RetrievalMetrics(["ndcg@10"], qrels=qrels, protocol="beir")
    _corpus_given(metric, g, [f"doc{j}" for j in range(80)], fixed)
    metric.update(torch.tensor(q), ids=qids, role="query")
    with pytest.raises(ValueError, match=r"none of the 64 relevant documents the qrels judge "
                                         r"for the queries given is in the corpus \(corpus of 80 "
                                         r"documents, e.g. 'doc0'; qrels documents e.g. 'd"):
        metric.summary()
    # most of them missing (a part of the corpus under other ids): a warning with the count
    metric = rm.RetrievalMetrics(["ndcg@10"], qrels=qrels)
    _corpus_given(metric, g, [gid if j < 20 else f"x{j}" for j, gid in enumerate(gids)], fixed)
    metric.update(torch.tensor(q), ids=qids, role="query")
    with pytest.warns(UserWarning, match=r"of the 64 relevant documents the qrels judge for the "
                                         r"queries given are not in the corpus \(corpus of 80"):
        metric.compute()


# A corpus that holds the query: "a" is query and document; cosine ranks a (itself), b, c.
SELF_QUERY = torch.tensor([[1.0, 0.0]])
SELF_CORPUS = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]])


def _self_corpus_values(names, qrels, **options):
    metric = rm.RetrievalMetrics(names, qrels=qrels, **options)
    metric.update(SELF_QUERY, ids=["a"], role="query")
    metric.update(SELF_CORPUS, ids=["a", "b", "c"], role="gallery")
    return values64(metric)


def test_identical_ids_as_each_evaluator_treats_them():
    """Worked by hand (found by an audit against BEIR 2.2, MTEB 2.26 and sentence-transformers
    6.3):

    - BEIR's evaluate(ignore_identical_ids=True), its default, pops "a" from the run, not from
      the qrels: judged {a, b}, "a" relevant and never retrieved, b first. NDCG@3 = 1 / (1 +
      1/log2(3)) = 0.61315, MAP@3 = 1/2, Recall@3 = 1/2.
    - MTEB's RetrievalEvaluator (ignore_identical_ids=False by default) and sentence-transformers
      (no such option) rank "a" first: with b relevant, NDCG@1 = accuracy@1 = 0, MRR@10 = 1/2.
    - The library's default, without a protocol, leaves "a" out of the ranking and of the
      judgments: b first, NDCG@3 = MAP@3 = Recall@3 = 1.
    """
    both = {"a": {"a": 1, "b": 1}}
    beir = _self_corpus_values(["ndcg@3", "map@3", "recall@3"], both, protocol="beir")
    assert beir == {"ndcg@3": pytest.approx(1 / (1 + 1 / math.log2(3)), abs=1e-12),
                    "map@3": pytest.approx(0.5), "recall@3": pytest.approx(0.5)}
    kept = _self_corpus_values(["ndcg@3", "map@3", "recall@3"], both, protocol="beir",
                               ignore_identical_ids=False)
    # BEIR's evaluate(ignore_identical_ids=False): a first and relevant, b second
    assert kept["map@3"] == pytest.approx(1.0)
    plain = _self_corpus_values(["ndcg@3", "map@3", "recall@3"], both, gain="linear")
    assert plain == {"ndcg@3": pytest.approx(1.0), "map@3": pytest.approx(1.0),
                     "recall@3": pytest.approx(1.0)}
    only_b = {"a": {"b": 1}}
    for protocol, names in (("mteb", ["ndcg@1", "mrr@10"]),
                            ("sentence_transformers", ["hit_rate@1", "mrr@10"])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the cut-off reaches the gallery of 3)
            got = _self_corpus_values(names, only_b, protocol=protocol)
        assert got == {names[0]: 0.0, "mrr@10": pytest.approx(0.5)}, protocol
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        task = _self_corpus_values(["ndcg@1"], only_b, protocol="mteb", ignore_identical_ids=True)
    assert task == {"ndcg@1": 1.0}  # an MTEB task that sets ignore_identical_ids=True
    with pytest.raises(ValueError, match="sets ignore_identical_ids=False"):
        rm.RetrievalMetrics(["mrr@10"], qrels=only_b, protocol="sentence_transformers",
                            ignore_identical_ids=True)
