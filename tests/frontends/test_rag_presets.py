"""The RAG evaluators' presets (protocol="llama_index", "haystack", "haystack<3.1", "ragas").

Part 1 runs every test vector of the evaluators' own test files (tests/frontends/rag_vectors.py:
LlamaIndex ``llama-index-core/tests/evaluation/test_metrics.py``, Haystack's
``test/components/evaluators/test_document_{recall,mrr,map,ndcg}.py`` at v3.1.0-rc3 and v3.0.0,
and ragas' documentation examples of the id-based metrics, since ragas has no unit test of them)
through our API: each per-question value (``per_query()``, float64) and their mean to 1e-9, and
``compute()`` (float32, as every ``compute()`` of the library) to 1e-6;
``pytest.raises(ValueError)`` where the evaluator raises;
``pytest.warns(UserWarning)`` and the counted-once value where the evaluator credits a repeated
relevant id each time.

Part 2 is the hand-worked disagreements of research/rag-evaluators.md section 9 that involve these
evaluators (items 1-4 and 9-12), each re-derived in its comment from the evaluators' source.

Not run (``outcome="not_expressible"`` in rag_vectors.py, with the reason in each record's
``why``):

- LlamaIndex ``test_exceptions[0]`` and ``[1]`` (12 records): ``expected_ids=None`` /
  ``retrieved_ids=None``; our input has no None for a question (``[2]``, the empty lists, is run).
- Haystack, at both tags: documents whose comparison field is missing or empty
  (``test_empty_string_{ground_truth,retrieved}_documents``,
  ``test_no_match_when_comparison_field_missing_on_{all,some}_documents``,
  ``test_ground_truth_missing_comparison_field_excluded_from_denominator``,
  ``test_run_with_meta_missing_key_treated_as_no_match``,
  ``test_run_with_meta_missing_key_can_still_reach_perfect_ndcg``); ground truth mixing scored and
  unscored documents (``test_run_with_mixed_documents_with_and_without_scores``); an unsupported
  comparison field (``test_unsupported_comparison_field_raises``); the DCG/IDCG helper tests
  (``test_calculate_{dcg,idcg}_{with_scores,without_scores,empty}``); at 3.1 only, one ground
  truth holding the same document with two scores
  (``test_run_with_duplicate_ground_truth_documents_with_different_scores``).

Serialisation tests (to_dict / from_dict / init) hold no vectors and are not listed.
"""

from __future__ import annotations

import math
import re

import pytest
from tests.frontends.rag_vectors import VECTORS

import retrieval_metrics as rm

TOL = 1e-9  # per question (per_query() is float64) and the float64 mean of per_query()
MEAN_TOL = 1e-6  # compute(): float32, like every compute() of the library
LOG3 = math.log2(3)  # 1/log2(3) = 0.63093: the discount of rank 2


def approx(value: float) -> object:
    return pytest.approx(value, abs=TOL)


def vector_id(v: dict) -> str:
    return f"{v['source']}|{v['evaluator_metric']}|{v['protocol']}"


def by(outcome: str) -> list:
    return [pytest.param(v, id=vector_id(v)) for v in VECTORS if v["outcome"] == outcome]


def metric(protocol: str, name: str) -> rm.RetrievalMetrics:
    return rm.RetrievalMetrics([name], protocol=protocol)


def assert_values(m: rm.RetrievalMetrics, name: str, expected: list[float], mean: float) -> None:
    per_query = m.per_query()[name]
    assert per_query.dtype.is_floating_point and per_query.shape == (len(expected),)
    for got, want in zip(per_query.tolist(), expected, strict=True):
        if math.isnan(want):
            assert math.isnan(got)
        else:
            assert got == approx(want)
    got_mean = means(m)[name]
    if math.isnan(mean):
        assert math.isnan(got_mean)
    else:
        assert got_mean == approx(mean)


def means(m: rm.RetrievalMetrics) -> dict[str, float]:
    """The means over the questions that count (NaN = left out), in float64 from per_query();
    compute() must agree to float32 rounding (it returns float32, as everywhere in the library)."""
    out = {}
    computed = m.compute()
    for name, per_query in m.per_query().items():
        kept = per_query[~per_query.isnan()]
        mean = float(kept.mean()) if kept.numel() else float("nan")
        got = float(computed[name])
        assert (math.isnan(got) and math.isnan(mean)) or got == pytest.approx(mean, abs=MEAN_TOL), (
            name
        )
        out[name] = mean
    return out


def repeated_relevant(v: dict) -> list[str]:
    """The relevant ids that repeat in a ranked list or in a relevant list."""
    out = []
    for ranked, relevant in zip(v["ranked_ids"], v["relevant_ids"], strict=True):
        rel = set(relevant)
        seen: set = set()
        for doc in ranked:
            if doc in rel and doc in seen:
                out.append(str(doc))
            seen.add(doc)
        if not isinstance(relevant, dict) and len(set(relevant)) < len(relevant):
            out.extend(str(d) for d in relevant if list(relevant).count(d) > 1)
    return out


# ============================================================================================
# Part 1: the evaluators' own test vectors
# ============================================================================================


@pytest.mark.parametrize("v", by("value"))
def test_evaluator_vector_value(v: dict) -> None:
    m = metric(v["protocol"], v["name"])
    m.update(ranked_ids=v["ranked_ids"], relevant_ids=v["relevant_ids"])
    assert_values(m, v["name"], v["expected"], v["mean"])


@pytest.mark.parametrize("v", by("raises"))
def test_evaluator_vector_raises(v: dict) -> None:
    m = metric(v["protocol"], v["name"])  # outside the block: a bad name must not pass
    with pytest.raises(ValueError):
        m.update(ranked_ids=v["ranked_ids"], relevant_ids=v["relevant_ids"])
        m.compute()


@pytest.mark.parametrize("v", by("warns"))
def test_evaluator_vector_warns(v: dict) -> None:
    m = metric(v["protocol"], v["name"])
    repeated = repeated_relevant(v)
    assert repeated, "a 'warns' vector must repeat a relevant id"
    with pytest.warns(UserWarning, match=re.escape(repeated[0])):
        m.update(ranked_ids=v["ranked_ids"], relevant_ids=v["relevant_ids"])
        m.compute()
    # the evaluator's own number differs: ours is the counted-once value
    assert v["evaluator_expected"] != v["expected"]
    assert_values(m, v["name"], v["expected"], v["mean"])


def test_vector_counts() -> None:
    """Every evaluator's file contributed; a vector file edit that drops a family shows here."""
    families = {
        (v["evaluator"], v["protocol"], v["name"])
        for v in VECTORS
        if v["outcome"] != "not_expressible"
    }
    for name in ("hit_rate", "recall", "mrr", "granular_mrr", "precision", "map", "ndcg"):
        assert ("llama_index", "llama_index", name) in families
    for protocol in ("haystack", "haystack<3.1"):
        for name in ("hit_rate", "recall", "mrr", "map", "ndcg"):
            assert ("haystack", protocol, name) in families
    for name in ("recall", "precision"):
        assert ("ragas", "ragas", name) in families


# ============================================================================================
# Part 2: research/rag-evaluators.md section 9, re-derived
# ============================================================================================


def run(protocol: str, names: list[str], ranked: list, relevant: list) -> rm.RetrievalMetrics:
    m = rm.RetrievalMetrics(names, protocol=protocol)
    m.update(ranked_ids=ranked, relevant_ids=relevant)
    return m


def test_s9_1_map_divisor() -> None:
    # R = {a,b,c}, ranked [a, x]. One hit at rank 1: precision there 1/1.
    # LlamaIndex AveragePrecision: sum / |set(expected)| = 1/3. Haystack 3.1 (PR #12255): / the
    # unique ground-truth values = 1/3. Haystack <= 3.0: / the relevant retrieved (1 hit) = 1.0.
    ranked, relevant = [["a", "x"]], [["a", "b", "c"]]
    assert means(run("llama_index", ["map"], ranked, relevant))["map"] == approx(1 / 3)
    assert means(run("haystack", ["map"], ranked, relevant))["map"] == approx(1 / 3)
    assert means(run("haystack<3.1", ["map"], ranked, relevant))["map"] == approx(1.0)


def test_s9_2_ndcg_ideal_not_cut() -> None:
    # R = {a,b,c}, ranked [a, b]. DCG = 1 + 1/log2 3. Both evaluators take the ideal DCG over all
    # three relevant ids, not cut at the 2 retrieved: 1 + 1/log2 3 + 1/2. NDCG = 0.76536.
    ranked, relevant = [["a", "b"]], [["a", "b", "c"]]
    want = (1 + 1 / LOG3) / (1 + 1 / LOG3 + 1 / 2)
    assert want == pytest.approx(0.76536, abs=1e-5)
    for protocol in ("llama_index", "haystack", "haystack<3.1"):
        assert means(run(protocol, ["ndcg"], ranked, relevant))["ndcg"] == approx(want)


def test_s9_3_precision_divisor() -> None:
    # R = {a}; the retriever asked for 5 returned [a, x]. LlamaIndex Precision and ragas
    # IDBasedContextPrecision divide by the distinct retrieved ids: 1/2 (P@5 would be 1/5).
    ranked, relevant = [["a", "x"]], [["a"]]
    for protocol in ("llama_index", "ragas"):
        assert means(run(protocol, ["precision"], ranked, relevant))["precision"] == approx(0.5)


def test_s9_4_repeated_retrieved_id() -> None:
    # R = {a}, ranked [a, a, x] (a fusion retriever returned a twice).
    ranked, relevant = (
        [["d42", "d42", "x"]],
        [["d42"]],
    )  # a = "d42", a name a warning can be matched on
    # LlamaIndex credits a at ranks 1 and 2: AP (1/1 + 2/2)/1 = 2.0, NDCG (1 + 1/log2 3)/1 = 1.63,
    # granular hit rate 2/1 = 2.0, granular MRR (1 + 1/2)/2 = 0.75. Counted once, at rank 1, all
    # four are 1.0; the preset warns naming a. Precision (set: 1/2), MRR (1) and hit rate (1) do
    # not depend on the repeat.
    for name in ("map", "ndcg", "recall", "granular_mrr"):
        m = rm.RetrievalMetrics([name], protocol="llama_index")
        with pytest.warns(UserWarning, match="d42"):
            m.update(ranked_ids=ranked, relevant_ids=relevant)
            got = means(m)[name]
        assert got == approx(1.0), name
    m = run("llama_index", ["precision", "mrr", "hit_rate"], ranked, relevant)
    assert means(m) == {"precision": approx(0.5), "mrr": approx(1.0), "hit_rate": approx(1.0)}
    # Haystack 3.1 credits each value once (PR #11959 for NDCG, #12255 for MAP): all 1.0, silently.
    names = ["hit_rate", "recall", "mrr", "map", "ndcg"]
    assert means(run("haystack", names, ranked, relevant)) == {n: approx(1.0) for n in names}
    # Haystack 3.0: NDCG = (1 + 1/log2 3)/1 = 1.63 and MAP = (1/1 + 2/2)/2 hits = 1.0, both
    # crediting a twice: the preset warns and counts a once: NDCG 1.0, MAP 1/1 = 1.0.
    m = rm.RetrievalMetrics(["map", "ndcg"], protocol="haystack<3.1")
    with pytest.warns(UserWarning, match="d42"):
        m.update(ranked_ids=ranked, relevant_ids=relevant)
        got = means(m)
    assert got == {"map": approx(1.0), "ndcg": approx(1.0)}
    # ragas: sets. Precision |{a}| / |{a, x}| = 0.5, recall 1/1.
    assert means(run("ragas", ["precision", "recall"], ranked, relevant)) == {
        "precision": approx(0.5),
        "recall": approx(1.0),
    }


def test_s9_9_empty_ground_truth() -> None:
    # q1: R = {a}, ranked [a]; q2: R = {} , ranked [x].
    ranked, relevant = [["a"], ["x"]], [["a"], []]
    # Haystack (all versions): an empty ground truth scores 0 and counts: (1 + 0)/2.
    for protocol in ("haystack", "haystack<3.1"):
        m = run(protocol, ["hit_rate", "recall"], ranked, relevant)
        assert means(m) == {"hit_rate": approx(0.5), "recall": approx(0.5)}
        assert m.per_query()["recall"].tolist() == [1.0, 0.0]
    # ragas: recall 1/0 is NaN and safe_nanmean leaves it out: 1.0. Precision |{} ∩ {x}| / |{x}|
    # = 0 is a number: (1 + 0)/2 = 0.5.
    m = run("ragas", ["recall", "precision"], ranked, relevant)
    recall = m.per_query()["recall"].tolist()
    assert recall[0] == approx(1.0) and math.isnan(recall[1])
    assert m.per_query()["precision"].tolist() == [approx(1.0), approx(0.0)]
    assert means(m) == {"recall": approx(1.0), "precision": approx(0.5)}
    # LlamaIndex raises on an empty expected list: the preset raises at compute.
    m = rm.RetrievalMetrics(["recall"], protocol="llama_index")
    m.update(ranked_ids=ranked, relevant_ids=relevant)
    with pytest.raises(ValueError):
        m.compute()


def test_llama_index_empty_retrieved_raises_at_update() -> None:
    # LlamaIndex raises "Retrieved ids and expected ids must be provided" on an empty retrieved
    # list (llama_index#13926): the preset refuses it at update.
    m = rm.RetrievalMetrics(["hit_rate"], protocol="llama_index")
    with pytest.raises(ValueError):
        m.update(ranked_ids=[["a"], []], relevant_ids=[["a"], ["b"]])


def test_ragas_empty_retrieved_and_both_empty() -> None:
    # ragas: empty retrieved -> precision 0/0 = NaN, recall 0/|R| = 0; both empty -> both NaN;
    # a run with only NaN questions has a NaN mean (safe_nanmean of all-NaN).
    m = run("ragas", ["recall", "precision"], [[], []], [["a"], []])
    p, r = m.per_query()["precision"].tolist(), m.per_query()["recall"].tolist()
    assert math.isnan(p[0]) and math.isnan(p[1])
    assert r[0] == approx(0.0) and math.isnan(r[1])
    got = means(m)
    assert math.isnan(got["precision"]) and got["recall"] == approx(0.0)


def test_ragas_ids_compare_as_text() -> None:
    # ragas converts every id with str(): 1 and "1" are one id.
    m = run("ragas", ["recall", "precision"], [[1, "2", 3]], [["1", 2]])
    assert means(m) == {"recall": approx(1.0), "precision": approx(2 / 3)}


def test_s9_10_graded_ndcg() -> None:
    # Qrels {a: 2, b: 1}, ranked [b, a]. Haystack's gain is the ground truth's Document.score,
    # linear: DCG = 1/1 + 2/log2 3, IDCG = 2/1 + 1/log2 3 -> 0.85972. LlamaIndex is binary: both
    # relevant, [b, a] is ideal -> 1.0.
    ranked, relevant = [["b", "a"]], [{"a": 2.0, "b": 1.0}]
    want = (1 + 2 / LOG3) / (2 + 1 / LOG3)
    assert want == pytest.approx(0.85972, abs=1e-5)
    for protocol in ("haystack", "haystack<3.1"):
        assert means(run(protocol, ["ndcg"], ranked, relevant))["ndcg"] == approx(want)
    assert means(run("llama_index", ["ndcg"], ranked, relevant))["ndcg"] == approx(1.0)


def test_s9_11_relevant_listed_twice() -> None:
    # Expected list [a, a], ranked [a].
    ranked, relevant = [["d42"]], [["d42", "d42"]]  # a = "d42"
    # LlamaIndex: Recall (sets) 1/1; NDCG's ideal DCG runs over the raw list (2 entries):
    # 1/(1 + 1/log2 3) = 0.61315; granular hit rate 1 hit / len([a, a]) = 0.5. The preset warns
    # and counts a once: NDCG 1.0 and recall 1.0. AP divides by |set(expected)|: 1.0 either way.
    want_ndcg_evaluator = 1 / (1 + 1 / LOG3)
    assert want_ndcg_evaluator == pytest.approx(0.61315, abs=1e-5)
    for name in ("ndcg", "recall"):
        m = rm.RetrievalMetrics([name], protocol="llama_index")
        with pytest.warns(UserWarning, match="d42"):
            m.update(ranked_ids=ranked, relevant_ids=relevant)
            got = means(m)[name]
        assert got == approx(1.0), name
    # Haystack 3.1 collapses a repeated ground truth (sets for recall, _build_relevance_map for
    # NDCG): 1.0, silently.
    assert means(run("haystack", ["recall", "ndcg"], ranked, relevant)) == {
        "recall": approx(1.0),
        "ndcg": approx(1.0),
    }
    # Haystack 3.0 NDCG: the ideal DCG sums both copies (0.61315): warns, counted once 1.0.
    m = rm.RetrievalMetrics(["ndcg"], protocol="haystack<3.1")
    with pytest.warns(UserWarning, match="d42"):
        m.update(ranked_ids=ranked, relevant_ids=relevant)
        assert means(m)["ndcg"] == approx(1.0)


def test_s9_12_granular_mrr_is_not_mrr() -> None:
    # R = {a, b}, ranked [a, x, b]: MRR = 1/1; granular MRR = mean of 1/rank over the relevant
    # retrieved = (1/1 + 1/3)/2 = 0.66667.
    m = run("llama_index", ["mrr", "granular_mrr"], [["a", "x", "b"]], [["a", "b"]])
    assert means(m) == {"mrr": approx(1.0), "granular_mrr": approx(2 / 3)}


def test_llama_index_granular_mrr_no_hit_is_zero() -> None:
    # MRR(use_granular_mrr=True) with no relevant retrieved: 0.0 (its guard on the hit count).
    m = run("llama_index", ["granular_mrr", "map", "ndcg"], [["x", "y"]], [["a"]])
    assert means(m) == {"granular_mrr": approx(0.0), "map": approx(0.0), "ndcg": approx(0.0)}


def test_haystack_map_no_hit_is_zero_in_both_versions() -> None:
    # Haystack <= 3.0 divides by the hits, guarded: 0 hits -> 0.0 (not an error); 3.1 -> 0/|R| = 0.
    for protocol in ("haystack", "haystack<3.1"):
        m = run(protocol, ["map"], [["x", "y"], ["a"]], [["a", "b"], ["a"]])
        assert m.per_query()["map"].tolist() == [approx(0.0), approx(1.0)]


@pytest.mark.parametrize(
    ("ranked", "relevant", "named"),
    [
        ([1.0], ["1"], r"`ranked_ids\[0\]` holds 1.0 \(float\)"),
        ([1.0, 2], [2], r"`ranked_ids\[0\]` holds 1.0 \(float\)"),
        (["a", None], ["a"], r"`ranked_ids\[0\]` holds None"),
        (["a"], [float("nan")], r"`relevant_ids\[0\]` holds nan \(float\)"),
        ([1, 2], [True], r"`relevant_ids\[0\]` holds True \(bool\)"),
    ],
)
def test_ids_that_are_no_ids_are_refused(ranked, relevant, named):
    """ragas 0.4 refuses float and None ids; here 1.0 matched 1, True matched 1 and a NaN id
    matched nothing, silently (found by an audit)."""
    for protocol in ("ragas", None):
        m = rm.RetrievalMetrics(["recall"], protocol=protocol)
        with pytest.raises(ValueError, match=named):
            m.update(ranked_ids=[ranked], relevant_ids=[relevant])
