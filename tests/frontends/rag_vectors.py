"""The RAG evaluators' own test vectors as ranked id lists (the data of test_rag_presets.py).

Every record is one call of the evaluator in one of its own tests (one parametrized case, or one
``run()`` of a Haystack test, which scores several questions at once), with the inputs and the
expected numbers taken from that test. The evaluators' code is not copied here; these are inputs
and outputs only. Each record:

- ``evaluator``, ``version`` (the tag or commit the test file was read at), ``source``
  (``path::test_name[case]``; ``[i]`` is the i-th case of a ``parametrize`` list, 0-based, in file
  order; ``[block i]`` is the i-th ``pytest.raises`` block of one test);
- ``evaluator_metric`` (the evaluator's class / option), ``protocol`` and ``name`` (our preset and
  our measure name, the key of ``compute()`` / ``per_query()``);
- ``ranked_ids`` and ``relevant_ids`` (one list per question; ``relevant_ids`` entries are lists, or
  ``{id: grade}`` dicts where the evaluator uses graded relevance: Haystack's ``Document.score``);
- ``expected`` (per question) and ``mean``: what our preset must return. For ``outcome="warns"``
  these are the values with the repeated id counted once, and ``evaluator_expected`` /
  ``evaluator_mean`` are the numbers the evaluator's own test asserts (its defect, reproduced by
  nobody);
- ``outcome``: ``"value"``; ``"raises"`` (the evaluator raises, so our preset must raise
  ValueError); ``"warns"`` (a relevant id repeats and the evaluator credits it each time: our
  preset warns and counts it once); ``"not_expressible"`` (the case depends on a Document field our
  ranked-id input has no form for; ``why`` says which; these are not run);
- ``note``: translations, and where an expected number was computed from a formula in the test
  (``formula``) or was given to fewer digits (``file_value``).

Translation of Haystack Documents: the evaluator compares one field (``document_comparison_field``:
``content`` by default, ``id`` or ``meta.<key>``); the value of that field is our id. Two Documents
with equal contents are the same id. A Document whose field is missing (``None``), or whose
content is ``""`` (which Haystack's recall ignores but its MRR/MAP match), has no id in our input:
those cases are ``not_expressible``.
"""

from __future__ import annotations

import math

LOG2 = math.log2

# --------------------------------------------------------------------------------------------
# versions read
# --------------------------------------------------------------------------------------------
LLAMA_INDEX_VERSION = (
    "run-llama/llama_index@40cd236 (same vectors at 0f3f958; code llama-index-core 0.14.25)"
)
LLAMA_INDEX_FILE = "llama-index-core/tests/evaluation/test_metrics.py"
HAYSTACK_31 = "deepset-ai/haystack@v3.1.0-rc3 (5de8d6c; same test files at main c7cb46c, 3.2.0-rc0)"
HAYSTACK_30 = "deepset-ai/haystack@v3.0.0 (86e06ee)"
HAYSTACK_FILE = "test/components/evaluators/test_document_{}.py"
RAGAS_VERSION = (
    "vibrantlabsai/ragas@2b38724 (after v0.4.3; explodinggradients/ragas@3e28e9d reads the same)"
)

VECTORS: list[dict] = []


def _add(**record) -> None:
    record.setdefault("outcome", "value")
    record.setdefault("note", "")
    if "expected" in record and "mean" not in record and record["outcome"] != "raises":
        finite = [v for v in record["expected"] if v == v]
        record["mean"] = sum(finite) / len(finite) if finite else float("nan")
    VECTORS.append(record)


# --------------------------------------------------------------------------------------------
# (a) LlamaIndex: llama-index-core/tests/evaluation/test_metrics.py
#     Every case is one question: compute(expected_ids=..., retrieved_ids=...).score
# --------------------------------------------------------------------------------------------
def _li(
    test: str, i: int, metric: str, name: str, expected_ids, retrieved_ids, value, note=""
) -> None:
    _add(
        evaluator="llama_index",
        version=LLAMA_INDEX_VERSION,
        source=f"{LLAMA_INDEX_FILE}::{test}[{i}]",
        evaluator_metric=metric,
        protocol="llama_index",
        name=name,
        ranked_ids=[list(retrieved_ids)],
        relevant_ids=[list(expected_ids)],
        expected=[value],
        note=note,
    )


# test_hit_rate: (expected_ids, retrieved_ids, use_granular, expected_result)
_HIT_RATE = [
    (["id1", "id2", "id3"], ["id3", "id1", "id2", "id4"], False, 1.0),
    (["id1", "id2", "id3", "id4"], ["id1", "id5", "id2"], True, 2 / 4),
    (["id1", "id2"], ["id3", "id4"], False, 0.0),
    (["id1", "id2"], ["id2", "id1", "id7"], True, 2 / 2),
]
for _i, (_e, _r, _g, _v) in enumerate(_HIT_RATE):
    if _g:
        _li(
            "test_hit_rate",
            _i,
            "HitRate(use_granular_hit_rate=True)",
            "recall",
            _e,
            _r,
            _v,
            "granular hit rate = hits / len(expected_ids); no id repeats, so it is our recall",
        )
    else:
        _li("test_hit_rate", _i, "HitRate()", "hit_rate", _e, _r, _v)

# test_mrr: (expected_ids, retrieved_ids, use_granular, expected_result)
_MRR = [
    (["id1", "id2", "id3"], ["id3", "id1", "id2", "id4"], False, 1 / 1),
    (["id1", "id2", "id3", "id4"], ["id5", "id1"], False, 1 / 2),
    (["id1", "id2"], ["id3", "id4"], False, 0.0),
    (["id1", "id2"], ["id2", "id1", "id7"], False, 1 / 1),
    (["id1", "id2", "id3"], ["id3", "id1", "id2", "id4"], True, (1 / 1 + 1 / 2 + 1 / 3) / 3),
    (["id1", "id2", "id3", "id4"], ["id1", "id2", "id5"], True, (1 / 1 + 1 / 2) / 2),
    (["id1", "id2"], ["id1", "id7", "id15", "id2"], True, (1 / 1 + 1 / 4) / 2),
]
for _i, (_e, _r, _g, _v) in enumerate(_MRR):
    if _g:
        _li(
            "test_mrr",
            _i,
            "MRR(use_granular_mrr=True)",
            "granular_mrr",
            _e,
            _r,
            _v,
            "formula in the test: mean of 1/rank over the relevant retrieved positions",
        )
    else:
        _li("test_mrr", _i, "MRR()", "mrr", _e, _r, _v)

# test_precision / test_recall / test_ap: (expected_ids, retrieved_ids, expected_result)
_PRECISION = [
    (["id1", "id2", "id3"], ["id3", "id1", "id2", "id4"], 3 / 4),
    (["id1", "id2", "id3", "id4"], ["id5", "id1"], 1 / 2),
    (["id1", "id2"], ["id3", "id4"], 0 / 2),
    (["id1", "id2"], ["id2", "id1", "id7"], 2 / 3),
    (["id1", "id2", "id3"], ["id3", "id1", "id2", "id4"], 3 / 4),
    (["id1", "id2", "id3", "id4"], ["id1", "id2", "id5"], 2 / 3),
    (["id1", "id2"], ["id1", "id7", "id15", "id2"], 2 / 4),
]
for _i, (_e, _r, _v) in enumerate(_PRECISION):
    _li(
        "test_precision",
        _i,
        "Precision()",
        "precision",
        _e,
        _r,
        _v,
        "divisor: the number of distinct retrieved ids (the whole list)",
    )

_RECALL = [
    (["id1", "id2", "id3"], ["id3", "id1", "id2", "id4"], 3 / 3),
    (["id1", "id2", "id3", "id4"], ["id5", "id1"], 1 / 4),
    (["id1", "id2"], ["id3", "id4"], 0 / 2),
    (["id1", "id2"], ["id2", "id1", "id7"], 2 / 2),
    (["id1", "id2", "id3"], ["id3", "id1", "id2", "id4"], 3 / 3),
    (["id1", "id2", "id3", "id4"], ["id1", "id2", "id5"], 2 / 4),
    (["id1", "id2"], ["id1", "id7", "id15", "id2"], 2 / 2),
]
for _i, (_e, _r, _v) in enumerate(_RECALL):
    _li("test_recall", _i, "Recall()", "recall", _e, _r, _v)

_AP = [
    (["id1", "id2", "id3"], ["id3", "id1", "id2", "id4"], (1 / 1 + 2 / 2 + 3 / 3 + 0) / 3),
    (["id1", "id2", "id3", "id4"], ["id5", "id1"], (0 + 1 / 2) / 4),
    (["id1", "id2"], ["id3", "id4"], (0 + 0) / 2),
    (["id1", "id2"], ["id2", "id1", "id7"], (1 / 1 + 2 / 2 + 0) / 2),
    (["id1", "id2", "id3"], ["id3", "id1", "id2", "id4"], (1 / 1 + 2 / 2 + 3 / 3 + 0) / 3),
    (["id1", "id2", "id3", "id4"], ["id1", "id2", "id5"], (1 / 1 + 2 / 2 + 0) / 4),
    (["id1", "id2"], ["id1", "id7", "id15", "id2"], (1 / 1 + 0 + 0 + 2 / 4) / 2),
]
for _i, (_e, _r, _v) in enumerate(_AP):
    _li(
        "test_ap",
        _i,
        "AveragePrecision()",
        "map",
        _e,
        _r,
        _v,
        "formula in the test: sum of precision at each relevant position / |set(expected)|",
    )


# test_ndcg: (expected_ids, retrieved_ids, mode, expected_result); the test writes each value as
# a formula of 1/log2(i+1) terms: evaluated here. IDCG runs over len(expected_ids), not cut.
def _dcg(n_terms_at: list[int]) -> float:
    return sum(1 / LOG2(i + 1) for i in n_terms_at)


_NDCG = [
    (
        ["id1", "id2", "id3"],
        ["id3", "id1", "id2", "id4"],
        "linear",
        _dcg([1, 2, 3]) / _dcg([1, 2, 3]),
    ),
    (["id1", "id2", "id3", "id4"], ["id5", "id1"], "linear", _dcg([2]) / _dcg([1, 2, 3, 4])),
    (["id1", "id2"], ["id3", "id4"], "linear", 0.0),
    (["id1", "id2"], ["id2", "id1", "id7"], "linear", _dcg([1, 2]) / _dcg([1, 2])),
    (
        ["id1", "id2", "id3"],
        ["id3", "id1", "id2", "id4"],
        "exponential",
        _dcg([1, 2, 3]) / _dcg([1, 2, 3]),
    ),
    (
        ["id1", "id2", "id3", "id4"],
        ["id1", "id2", "id5"],
        "exponential",
        _dcg([1, 2]) / _dcg([1, 2, 3, 4]),
    ),
    (["id1", "id2"], ["id1", "id7", "id15", "id2"], "exponential", _dcg([1, 4]) / _dcg([1, 2])),
]
for _i, (_e, _r, _mode, _v) in enumerate(_NDCG):
    _li(
        "test_ndcg",
        _i,
        f"NDCG(mode={_mode!r})",
        "ndcg",
        _e,
        _r,
        _v,
        "formula in the test (sums of 1/log2(i+1)); binary gain, so mode changes nothing; "
        "ideal DCG over all expected ids, not cut at the list length",
    )

# test_exceptions: (expected_ids, retrieved_ids, use_granular); each case calls all six metrics
# and asserts ValueError for each.
_LI_ALL = [
    ("HitRate()", "hit_rate"),
    ("MRR()", "mrr"),
    ("Precision()", "precision"),
    ("Recall()", "recall"),
    ("AveragePrecision()", "map"),
    ("NDCG()", "ndcg"),
]
_LI_ALL_GRANULAR = [
    ("HitRate(use_granular_hit_rate=True)", "recall"),
    ("MRR(use_granular_mrr=True)", "granular_mrr"),
    *_LI_ALL[2:],
]
for _metric, _name in _LI_ALL:
    _add(
        evaluator="llama_index",
        version=LLAMA_INDEX_VERSION,
        source=f"{LLAMA_INDEX_FILE}::test_exceptions[0]",
        evaluator_metric=_metric,
        protocol="llama_index",
        name=_name,
        ranked_ids=[["id3", "id1", "id2", "id4"]],
        relevant_ids=[None],
        outcome="not_expressible",
        why="expected_ids=None: our input has no None for a question's judgments "
        "(an empty list is the expressible form: [2])",
    )
for _metric, _name in _LI_ALL_GRANULAR:
    _add(
        evaluator="llama_index",
        version=LLAMA_INDEX_VERSION,
        source=f"{LLAMA_INDEX_FILE}::test_exceptions[1]",
        evaluator_metric=_metric,
        protocol="llama_index",
        name=_name,
        ranked_ids=[None],
        relevant_ids=[["id1", "id2", "id3"]],
        outcome="not_expressible",
        why="retrieved_ids=None: our input has no None for a run (an empty list is: [2])",
    )
for _metric, _name in _LI_ALL:
    _add(
        evaluator="llama_index",
        version=LLAMA_INDEX_VERSION,
        source=f"{LLAMA_INDEX_FILE}::test_exceptions[2]",
        evaluator_metric=_metric,
        protocol="llama_index",
        name=_name,
        ranked_ids=[[]],
        relevant_ids=[[]],
        outcome="raises",
        note="empty expected and empty retrieved: 'Retrieved ids and expected ids must be "
        "provided'",
    )


# --------------------------------------------------------------------------------------------
# (b) Haystack: test/components/evaluators/test_document_{recall,mrr,map,ndcg}.py
#     One record per run(): one list per question; individual_scores and score.
# --------------------------------------------------------------------------------------------
_HS_PROTOCOL = {HAYSTACK_31: "haystack", HAYSTACK_30: "haystack<3.1"}


def _hs(
    version, file, test, metric, name, ranked, relevant, expected=None, mean=None, **extra
) -> None:
    record = dict(
        evaluator="haystack",
        version=version,
        source=f"{HAYSTACK_FILE.format(file)}::{test}",
        evaluator_metric=metric,
        protocol=_HS_PROTOCOL[version],
        name=name,
        ranked_ids=ranked,
        relevant_ids=relevant,
        **extra,
    )
    if expected is not None:
        record["expected"] = expected
    if mean is not None:
        record["mean"] = mean
    _add(**record)


# Inputs several tests share (content strings as ids: the default comparison field).
_BP_TRUTH = [["Berlin"], ["Paris"]]
_BP_ALL = [["Berlin"], ["Paris"]]
_BP_NONE = [["Paris"], ["London"]]
_BP_PARTIAL = [["Berlin"], ["London"]]
_COMPLEX_TRUTH = [
    ["France"],
    ["9th century", "9th"],
    ["classical music", "classical"],
    ["11th century", "the 11th"],
    ["Denmark, Iceland and Norway"],
    ["10th century", "10th"],
]
_COMPLEX_RUN = [
    ["France"],
    ["9th century", "10th century", "9th"],
    ["classical", "rock music", "dubstep"],
    ["11th", "the 11th", "11th century"],
    ["Denmark", "Norway", "Iceland"],
    ["10th century", "the first half of the 10th century", "10th", "10th"],
]
_COMPLEX_TRUTH_MULTI = list(_COMPLEX_TRUTH)
_COMPLEX_TRUTH_MULTI[4] = ["Denmark", "Iceland", "Norway", "Denmark, Iceland and Norway"]
_MRR_COMPLEX_RUN = [
    ["France"],
    ["10th century", "9th century", "9th"],
    ["rock music", "dubstep", "classical"],
    ["11th", "the 11th", "11th century"],
    ["Denmark", "Norway", "Iceland"],
    ["10th century", "the first half of the 10th century", "10th", "10th"],
]
_ID_NOTE = "document_comparison_field='id': Document.id as our id"
_META_NOTE = "document_comparison_field='meta.file_id': the meta value as our id"
_NESTED_NOTE = "document_comparison_field='meta.source.url': the nested meta value as our id"
_REPEAT_NOTE = (
    "question 6 retrieves the relevant '10th' twice; this evaluator's value does not "
    "depend on the repeat"
)


def _different_lengths(version, file, metric, name, test="test_run_with_different_lengths"):
    _hs(
        version,
        file,
        f"{test}[block 1]",
        metric,
        name,
        [["Berlin"], ["London"]],
        [["Berlin"]],
        outcome="raises",
        note="1 ground-truth list, 2 retrieved lists",
    )
    _hs(
        version,
        file,
        f"{test}[block 2]",
        metric,
        name,
        [["Berlin"]],
        [["Berlin"], ["Paris"]],
        outcome="raises",
        note="2 ground-truth lists, 1 retrieved list",
    )


def _missing_field(version, file, test, metric, name, why, **extra):
    _hs(version, file, test, metric, name, None, None, outcome="not_expressible", why=why, **extra)


_WHY_EMPTY_CONTENT = (
    "Document(content=''): Haystack's recall ignores an empty comparison value "
    "(its MRR/MAP match it); our ids have no 'missing' value"
)
_WHY_MISSING_META = (
    "a Document without the meta key (comparison value None) is skipped by "
    "Haystack; our ids have no 'missing' value (dropping it from the ground truth "
    "and putting a never-relevant placeholder in the run gives the same number)"
)

for _v in (HAYSTACK_31, HAYSTACK_30):
    # ---- recall, both modes (the two tags' test files and code are identical) ----
    for _mode, _name, _cls in (
        ("single_hit", "hit_rate", "TestDocumentRecallEvaluatorSingleHit"),
        ("multi_hit", "recall", "TestDocumentRecallEvaluatorMultiHit"),
    ):
        _m = f"DocumentRecallEvaluator(mode={_mode!r})"
        _t = f"{_cls}::"
        _hs(
            _v,
            "recall",
            f"{_t}test_run_with_all_matching",
            _m,
            _name,
            _BP_ALL,
            _BP_TRUTH,
            [1.0, 1.0],
            1.0,
        )
        _hs(
            _v,
            "recall",
            f"{_t}test_run_with_no_matching",
            _m,
            _name,
            _BP_NONE,
            _BP_TRUTH,
            [0.0, 0.0],
            0.0,
        )
        _hs(
            _v,
            "recall",
            f"{_t}test_run_with_partial_matching",
            _m,
            _name,
            _BP_PARTIAL,
            _BP_TRUTH,
            [1.0, 0.0],
            0.5,
        )
        if _mode == "single_hit":
            _hs(
                _v,
                "recall",
                f"{_t}test_run_with_complex_data",
                _m,
                _name,
                _COMPLEX_RUN,
                _COMPLEX_TRUTH,
                [1, 1, 1, 1, 0, 1],
                0.8333333333333334,
                note=_REPEAT_NOTE,
            )
        else:
            _hs(
                _v,
                "recall",
                f"{_t}test_run_with_complex_data",
                _m,
                _name,
                _COMPLEX_RUN,
                _COMPLEX_TRUTH_MULTI,
                [1.0, 1.0, 0.5, 1.0, 0.75, 1.0],
                0.875,
                note=_REPEAT_NOTE,
            )
        _different_lengths(_v, "recall", _m, _name, f"{_t}test_run_with_different_lengths")
        _hs(
            _v,
            "recall",
            f"{_t}test_empty_ground_truth_documents",
            _m,
            _name,
            [["test"]],
            [[]],
            [0.0],
            0.0,
            note="empty ground truth: 0, counted in the mean",
        )
        _hs(
            _v,
            "recall",
            f"{_t}test_empty_retrieved_documents",
            _m,
            _name,
            [[]],
            [["test"]],
            [0.0],
            0.0,
            note="empty retrieval: 0, counted in the mean",
        )
        _missing_field(
            _v,
            "recall",
            f"{_t}test_empty_string_ground_truth_documents",
            _m,
            _name,
            _WHY_EMPTY_CONTENT,
            file_expected=[0.0],
        )
        _missing_field(
            _v,
            "recall",
            f"{_t}test_empty_string_retrieved_documents",
            _m,
            _name,
            _WHY_EMPTY_CONTENT,
            file_expected=[0.0],
        )
        if _mode == "single_hit":
            _missing_field(
                _v,
                "recall",
                f"{_t}test_no_match_when_comparison_field_missing_on_all_documents",
                _m,
                _name,
                _WHY_MISSING_META,
                file_expected=[0.0],
            )
        _missing_field(
            _v,
            "recall",
            f"{_t}test_no_match_when_comparison_field_missing_on_some_documents",
            _m,
            _name,
            _WHY_MISSING_META,
            file_expected=[0.0],
        )
        if _mode == "multi_hit":
            _missing_field(
                _v,
                "recall",
                f"{_t}test_ground_truth_missing_comparison_field_excluded_from_denominator",
                _m,
                _name,
                _WHY_MISSING_META,
                file_expected=[1.0],
            )
    _hs(
        _v,
        "recall",
        "test_run_with_id_comparison",
        "DocumentRecallEvaluator(mode='single_hit')",
        "hit_rate",
        [["doc1"], ["wrong"]],
        [["doc1"], ["doc2"]],
        [1.0, 0.0],
        0.5,
        note=_ID_NOTE,
    )
    _hs(
        _v,
        "recall",
        "test_run_with_meta_comparison",
        "DocumentRecallEvaluator(mode='multi_hit')",
        "recall",
        [["a", "c"]],
        [["a", "b"]],
        [0.5],
        0.5,
        note=_META_NOTE,
    )
    _hs(
        _v,
        "recall",
        "test_run_with_nested_meta_comparison",
        "DocumentRecallEvaluator(mode='multi_hit')",
        "recall",
        [["https://a.com", "https://c.com"]],
        [["https://a.com", "https://b.com"]],
        [0.5],
        0.5,
        note=_NESTED_NOTE,
    )

    # ---- MRR (identical test files and code at both tags) ----
    _m = "DocumentMRREvaluator()"
    _hs(
        _v,
        "mrr",
        "test_run_with_id_comparison",
        _m,
        "mrr",
        [["doc1"], ["wrong"]],
        [["doc1"], ["doc2"]],
        [1.0, 0.0],
        0.5,
        note=_ID_NOTE,
    )
    _hs(
        _v,
        "mrr",
        "test_run_with_meta_comparison",
        _m,
        "mrr",
        [["a"], ["c"]],
        [["a"], ["b"]],
        [1.0, 0.0],
        0.5,
        note=_META_NOTE,
    )
    _hs(
        _v,
        "mrr",
        "test_run_with_nested_meta_comparison",
        _m,
        "mrr",
        [["https://a.com"], ["https://c.com"]],
        [["https://a.com"], ["https://b.com"]],
        [1.0, 0.0],
        0.5,
        note=_NESTED_NOTE,
    )
    _hs(_v, "mrr", "test_run_with_all_matching", _m, "mrr", _BP_ALL, _BP_TRUTH, [1.0, 1.0], 1.0)
    _hs(_v, "mrr", "test_run_with_no_matching", _m, "mrr", _BP_NONE, _BP_TRUTH, [0.0, 0.0], 0.0)
    _hs(
        _v,
        "mrr",
        "test_run_with_partial_matching",
        _m,
        "mrr",
        _BP_PARTIAL,
        _BP_TRUTH,
        [1.0, 0.0],
        0.5,
    )
    _hs(
        _v,
        "mrr",
        "test_run_with_complex_data",
        _m,
        "mrr",
        _MRR_COMPLEX_RUN,
        _COMPLEX_TRUTH,
        [1.0, 0.5, 0.3333333333333333, 0.5, 0.0, 1.0],
        0.555555555555555,
        note=_REPEAT_NOTE + "; the file's mean 0.555555555555555 is compared with pytest.approx",
    )
    _different_lengths(_v, "mrr", _m, "mrr")

    # ---- MAP: the two tags differ (PR #12255 in 3.1: divisor |R| instead of the hits) ----
    _m = "DocumentMAPEvaluator()"
    _hs(
        _v,
        "map",
        "test_run_with_id_comparison",
        _m,
        "map",
        [["doc1"], ["wrong"]],
        [["doc1"], ["doc2"]],
        [1.0, 0.0],
        0.5,
        note=_ID_NOTE,
    )
    _hs(
        _v,
        "map",
        "test_run_with_meta_comparison",
        _m,
        "map",
        [["a"], ["c"]],
        [["a"], ["b"]],
        [1.0, 0.0],
        0.5,
        note=_META_NOTE,
    )
    _hs(
        _v,
        "map",
        "test_run_with_nested_meta_comparison",
        _m,
        "map",
        [["https://a.com"], ["https://c.com"]],
        [["https://a.com"], ["https://b.com"]],
        [1.0, 0.0],
        0.5,
        note=_NESTED_NOTE,
    )
    _hs(_v, "map", "test_run_with_all_matching", _m, "map", _BP_ALL, _BP_TRUTH, [1.0, 1.0], 1.0)
    _hs(_v, "map", "test_run_with_no_matching", _m, "map", _BP_NONE, _BP_TRUTH, [0.0, 0.0], 0.0)
    _hs(
        _v,
        "map",
        "test_run_with_partial_matching",
        _m,
        "map",
        _BP_PARTIAL,
        _BP_TRUTH,
        [1.0, 0.0],
        0.5,
    )
    _different_lengths(_v, "map", _m, "map")

    # ---- NDCG (gain = Document.score of the ground truth; 1 when no score) ----
    _m = "DocumentNDCGEvaluator()"
    _SCORED = {"doc1": 3, "doc2": 2, "doc3": 3, "doc6": 2, "doc7": 3, "doc8": 2}
    _SCORED_RUN = ["doc1", "doc2", "doc3", "doc4", "doc5"]
    # DCG = 3/log2 2 + 2/log2 3 + 3/log2 4; IDCG = grades [3,3,3,2,2,2] over log2 2..7
    _NDCG_SCORED = (3 / LOG2(2) + 2 / LOG2(3) + 3 / LOG2(4)) / (
        3 / LOG2(2) + 3 / LOG2(3) + 3 / LOG2(4) + 2 / LOG2(5) + 2 / LOG2(6) + 2 / LOG2(7)
    )
    _NDCG_FRANCE = (1 / LOG2(2) + 1 / LOG2(4)) / (1 / LOG2(2) + 1 / LOG2(3))
    _F = (
        "expected value computed here from the DCG/IDCG formula; the test asserts it to "
        "abs=1e-4 (file_value)"
    )
    _hs(
        _v,
        "ndcg",
        "test_run_with_scores",
        _m,
        "ndcg",
        [_SCORED_RUN],
        [dict(_SCORED)],
        [_NDCG_SCORED],
        _NDCG_SCORED,
        file_value=0.6592,
        note="graded: Document.score as the grade; " + _F,
    )
    _hs(
        _v,
        "ndcg",
        "test_run_without_scores",
        _m,
        "ndcg",
        [["France", "Germany", "Paris"]],
        [["France", "Paris"]],
        [_NDCG_FRANCE],
        _NDCG_FRANCE,
        file_value=0.9197,
        note="no scores: binary gain; " + _F,
    )
    _hs(
        _v,
        "ndcg",
        "test_run_with_multiple_lists_of_docs",
        _m,
        "ndcg",
        [["France", "Germany", "Paris"], _SCORED_RUN],
        [["France", "Paris"], dict(_SCORED)],
        [_NDCG_FRANCE, _NDCG_SCORED],
        (_NDCG_FRANCE + _NDCG_SCORED) / 2,
        file_value=[0.9197, 0.6592, 0.7895],
        note="one binary and one graded question; " + _F,
    )
    _different_lengths(_v, "ndcg", _m, "ndcg")
    _missing_field(
        _v,
        "ndcg",
        "test_run_with_mixed_documents_with_and_without_scores",
        _m,
        "ndcg",
        "ground truth mixing a scored and an unscored Document (Haystack raises "
        "ValueError); a {id: grade} dict has no unscored entry",
        file_outcome="raises",
    )
    _hs(_v, "ndcg", "test_run_empty_retrieved", _m, "ndcg", [[]], [["France"]], [0.0], 0.0)
    _hs(
        _v,
        "ndcg",
        "test_run_empty_ground_truth",
        _m,
        "ndcg",
        [["France"]],
        [[]],
        [0.0],
        0.0,
        note="ideal DCG 0: NDCG 0, counted in the mean",
    )
    _hs(
        _v,
        "ndcg",
        "test_run_empty_retrieved_and_empty_ground_truth",
        _m,
        "ndcg",
        [[]],
        [[]],
        [0.0],
        0.0,
    )
    _hs(
        _v,
        "ndcg",
        "test_run_no_retrieved",
        _m,
        "ndcg",
        [],
        [["France"]],
        outcome="raises",
        note="no retrieved lists at all (and 1 ground-truth list)",
    )
    _hs(
        _v,
        "ndcg",
        "test_run_no_ground_truth",
        _m,
        "ndcg",
        [["France"]],
        [],
        outcome="raises",
        note="no ground-truth lists at all (and 1 retrieved list)",
    )
    _hs(
        _v,
        "ndcg",
        "test_run_no_retrieved_and_no_ground_truth",
        _m,
        "ndcg",
        [],
        [],
        outcome="raises",
        note="zero questions: Haystack's NDCG raises ValueError (its recall/MRR/MAP raise "
        "ZeroDivisionError); our preset must raise ValueError at update or compute",
    )
    for _helper, _val in (
        ("test_calculate_dcg_with_scores", 6.8611),
        ("test_calculate_dcg_without_scores", 1.5),
        ("test_calculate_dcg_empty", 0),
        ("test_calculate_idcg_with_scores", 8.7403),
        ("test_calculate_idcg_without_scores", 2.1309),
        ("test_calculate_idcg_empty", 0),
    ):
        _missing_field(
            _v,
            "ndcg",
            _helper,
            "DocumentNDCGEvaluator.calculate_dcg/idcg",
            "ndcg",
            "tests a helper's DCG or IDCG, not a score: our API returns no DCG",
            file_value=_val,
        )
    _hs(
        _v,
        "ndcg",
        "test_run_with_id_comparison",
        _m,
        "ndcg",
        [["doc1", "doc3", "doc2"]],
        [["doc1", "doc2"]],
        [_NDCG_FRANCE],
        _NDCG_FRANCE,
        file_value=0.9197,
        note=_ID_NOTE + "; " + _F,
    )
    _hs(
        _v,
        "ndcg",
        "test_run_with_id_comparison_no_match",
        _m,
        "ndcg",
        [["doc99"]],
        [["doc1"]],
        [0.0],
        0.0,
        note=_ID_NOTE,
    )
    _hs(
        _v,
        "ndcg",
        "test_run_with_meta_comparison",
        _m,
        "ndcg",
        [["f1", "f99", "f2"]],
        [["f1", "f2"]],
        [_NDCG_FRANCE],
        _NDCG_FRANCE,
        file_value=0.9197,
        note=_META_NOTE + "; " + _F,
    )
    _hs(
        _v,
        "ndcg",
        "test_run_with_nested_meta_comparison",
        _m,
        "ndcg",
        [["https://a.com"]],
        [["https://a.com"]],
        [1.0],
        1.0,
        note=_NESTED_NOTE,
    )
    _missing_field(
        _v,
        "ndcg",
        "test_run_with_meta_missing_key_treated_as_no_match",
        _m,
        "ndcg",
        _WHY_MISSING_META,
        file_expected=[0.0],
    )
    _hs(
        _v,
        "ndcg",
        "test_run_with_id_comparison_with_scores",
        _m,
        "ndcg",
        [_SCORED_RUN],
        [dict(_SCORED)],
        [_NDCG_SCORED],
        _NDCG_SCORED,
        file_value=0.6592,
        note=_ID_NOTE + "; " + _F,
    )
    _missing_field(
        _v,
        "ndcg",
        "test_unsupported_comparison_field_raises",
        _m,
        "ndcg",
        "document_comparison_field='embedding' is refused by Haystack; our input has no "
        "comparison field",
        file_outcome="raises",
    )
    _missing_field(
        _v,
        "ndcg",
        "test_run_with_meta_missing_key_can_still_reach_perfect_ndcg",
        _m,
        "ndcg",
        _WHY_MISSING_META,
        file_expected=[1.0],
    )

# ---- MAP at 3.1 only ----
_m = "DocumentMAPEvaluator()"
_hs(
    HAYSTACK_31,
    "map",
    "test_run_with_unhashable_meta_comparison",
    _m,
    "map",
    [["['a']"]],
    [["['a']", "['b']"]],
    [0.5],
    0.5,
    note="document_comparison_field='meta.tags' holding lists ['a'], ['b']: their repr as our str "
    "id (lists of str are equal exactly when their reprs are)",
)
_hs(
    HAYSTACK_31,
    "map",
    "test_run_with_missed_and_duplicate_relevant_documents[0]",
    _m,
    "map",
    [["A"]],
    [["A", "B"]],
    [0.5],
    0.5,
)
_hs(
    HAYSTACK_31,
    "map",
    "test_run_with_missed_and_duplicate_relevant_documents[1]",
    _m,
    "map",
    [["A", "A"]],
    [["A", "B"]],
    [0.5],
    0.5,
    note="repeated retrieval credited once (3.1): no warning",
)
_hs(
    HAYSTACK_31,
    "map",
    "test_run_with_complex_data",
    _m,
    "map",
    _COMPLEX_RUN,
    _COMPLEX_TRUTH,
    [1.0, 0.8333333333333333, 0.5, 0.5833333333333333, 0.0, 0.8333333333333333],
    0.625,
    note="question 6 repeats '10th': credited once (3.1)",
)
# ---- MAP at 3.0.0: divisor = relevant retrieved (hits), repeats credited each time ----
_hs(
    HAYSTACK_30,
    "map",
    "test_run_with_complex_data",
    _m,
    "map",
    _COMPLEX_RUN,
    _COMPLEX_TRUTH,
    [1.0, 0.8333333333333333, 1.0, 0.5833333333333333, 0.0, (1 / 1 + 2 / 3) / 2],
    (1.0 + 0.8333333333333333 + 1.0 + 0.5833333333333333 + 0.0 + (1 / 1 + 2 / 3) / 2) / 6,
    outcome="warns",
    evaluator_expected=[1.0, 0.8333333333333333, 1.0, 0.5833333333333333, 0.0, 0.8055555555555555],
    evaluator_mean=0.7037037037037037,
    note="question 3: one hit of two relevant scores 1.0 (divided by the hits); question 6 "
    "retrieves '10th' at ranks 3 and 4: the evaluator credits both, (1/1 + 2/3 + 3/4)/3 = "
    "0.80556; counted once: (1/1 + 2/3)/2 = 0.83333 (the 3.1 value)",
)
# ---- NDCG at 3.1 only (PR #11959): repeats credited once, duplicate truth collapsed ----
_m = "DocumentNDCGEvaluator()"
_hs(
    HAYSTACK_31,
    "ndcg",
    "test_run_with_duplicate_retrieved_document_does_not_exceed_one",
    _m,
    "ndcg",
    [["A", "A"]],
    [{"A": 1.0}],
    [1.0],
    1.0,
    note="repeated retrieval credited once (3.1): no warning",
)
_hs(
    HAYSTACK_31,
    "ndcg",
    "test_run_with_duplicate_ground_truth_document_can_still_reach_perfect_ndcg",
    _m,
    "ndcg",
    [["A"]],
    [["A", "A"]],
    [1.0],
    1.0,
    note="ground truth A twice with score 1.0: a relevant list with A twice "
    "(binary gain 1 = score 1.0)",
)
_missing_field(
    HAYSTACK_31,
    "ndcg",
    "test_run_with_duplicate_ground_truth_documents_with_different_scores",
    _m,
    "ndcg",
    "ground truth A twice with scores 1.0 and 0.5 (Haystack keeps the highest): "
    "a {id: grade} dict cannot hold A twice ({'A': 1.0} gives the same 1.0)",
    file_expected=[1.0],
)


# --------------------------------------------------------------------------------------------
# (c) ragas: IDBasedContextRecall / IDBasedContextPrecision
#     ragas has NO unit test of these two metrics (none in tests/ at vibrantlabsai/ragas@2b38724
#     or explodinggradients/ragas@3e28e9d; `git log -S IDBasedContext` touches no test file).
#     The only worked examples are in its documentation pages, used here.
# --------------------------------------------------------------------------------------------
_add(
    evaluator="ragas",
    version=RAGAS_VERSION,
    source="docs/concepts/metrics/available_metrics/context_precision.md"
    "::ID Based Context Precision/Example",
    evaluator_metric="IDBasedContextPrecision().single_turn_ascore",
    protocol="ragas",
    name="precision",
    ranked_ids=[["doc_1", "doc_2", "doc_3", "doc_4"]],
    relevant_ids=[["doc_1", "doc_4", "doc_5", "doc_6"]],
    expected=[0.5],
    note="documentation example (no unit test exists); Output: 0.5",
)
_add(
    evaluator="ragas",
    version=RAGAS_VERSION,
    source="docs/concepts/metrics/available_metrics/context_recall.md"
    "::ID BasedContext Recall/Example",
    evaluator_metric="IDBasedContextRecall().single_turn_ascore",
    protocol="ragas",
    name="recall",
    ranked_ids=[["doc_1", "doc_2", "doc_3"]],
    relevant_ids=[["doc_1", "doc_4", "doc_5", "doc_6"]],
    expected=[0.25],
    note="documentation example (no unit test exists); Output: 0.25",
)


def by_outcome(outcome: str) -> list[dict]:
    return [v for v in VECTORS if v["outcome"] == outcome]


def counts() -> dict[tuple[str, str], dict[str, int]]:
    """{(evaluator, version): {outcome: number of records}}."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for v in VECTORS:
        slot = out.setdefault((v["evaluator"], v["version"]), {})
        slot[v["outcome"]] = slot.get(v["outcome"], 0) + 1
    return out


if __name__ == "__main__":
    for key, c in counts().items():
        print(key, c)
    print(len(VECTORS), "records")
