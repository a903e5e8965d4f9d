"""Named protocols: a field's official evaluation is one argument away (the documentation's Named
protocols page, docs/protocols.md).

``protocol="NAME"`` on any metric sets the options below. An option you pass yourself must agree
with the protocol (otherwise the metric raises), so a protocol never silently changes what you
asked for. This is the policy the metric classes read; :mod:`retrieval_metrics.protocols` is its
public face, beside the converters of two protocols' inputs
(:mod:`retrieval_metrics.formats.converters`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from typing import Any

from retrieval_metrics.functional.measures import parse_metric
from retrieval_metrics.functional.options import OPTIONS

__all__ = [
    "EVALUATOR_NAMES",
    "EVALUATOR_REPORTS",
    "HIT_RATE_RECALL_PROTOCOLS",
    "IR_PROTOCOLS",
    "NOT_GIVEN",
    "PROTOCOLS",
    "PROTOCOL_DEFAULTS",
    "RUN_DEPTH",
    "NotGiven",
    "apply_protocol",
    "library_names",
    "protocol_name",
]


class NotGiven:
    """Marks an option the caller left out (where ``None`` is itself a valid choice)."""

    def __repr__(self) -> str:
        return "<not given>"


NOT_GIVEN = NotGiven()

PROTOCOLS: dict[str, tuple[dict[str, Any], str]] = {
    "vsepp": (
        {"median": "vsepp", "percent": True, "similarity": "cosine"},
        "VSE++ evaluation.py: R@K in percent, medr = floor(median(r - 1)) + 1; COCO 1K is "
        "CrossModalRetrieval(folds=5), 5K folds=None",
    ),
    "pml": (
        {"similarity": "euclidean", "empty_queries": "skip", "average": "macro"},
        "pytorch-metric-learning AccuracyCalculator: L2 kNN (IndexFlatL2), self removed, queries "
        "whose label has no other item skipped, MAP@R and R-precision over R = m_q. Exact ties: "
        "PML keeps faiss' order (lower gallery index first), which no order-free rule "
        "reproduces; ties stay 'expected' here, equal to PML whenever no tie touches a "
        "relevant item. PML computes MAP@R and R-precision from its k-neighbour list, so with an "
        "integer k below a query's relevant count its values are truncated (its own log says "
        "they will be incorrect); these values equal PML's with k=None or k >= the largest class "
        "size (k='max_bin_count'), and retrieval_metrics.compat.pml.AccuracyCalculator "
        "reproduces the truncation for any k",
    ),
    "torchreid": (
        {"similarity": "euclidean", "ap": "step", "empty_queries": "skip", "ignore_label": None},
        "torchreid eval_market1501 on its default distance: ranked by euclidean distance "
        "(torchreid's metric='euclidean'; for its metric='cosine' drop the protocol and pass its "
        "other options), same identity and camera removed (pass cameras=), step AP, queries "
        "without a valid match skipped, CMC to max_rank",
    ),
    "market1501_official": (
        {"ap": "trapezoid", "empty_queries": "zero", "ignore_label": -1},
        "official Market-1501 code: also drops the junk label -1, trapezoid AP, queries without "
        "a valid match count as 0",
    ),
    "netvlad": (
        {"relevance": "radius", "radius": 25.0, "empty_queries": "zero", "percent": True,
         "similarity": "euclidean"},
        "NetVLAD / VPR: L2 nearest neighbours (faiss IndexFlatL2), positives within 25 m "
        "(inclusive), queries with no positive count as misses, recall@N = hit rate @N for "
        "N = 1, 5, 10, 20, in percent as the VPR benchmark prints it. Exact ties: faiss keeps the "
        "lower database index first; ties stay 'expected' here (equal whenever no tie touches a "
        "positive), or pass ties='id' with the database's indices as ids for faiss' order",
    ),
    "msls": (
        {"relevance": "radius", "radius": 25.0, "empty_queries": "skip", "divisor": "min"},
        "MSLS: queries with no positive skipped, mAP@K divided by min(m_q, K), recall@K = hit "
        "rate @K; it scores a file of predictions, so the similarity is the caller's",
    ),
    "ann_benchmarks": (
        {"empty_queries": "zero", "ties": "optimistic"},
        "ann-benchmarks k-recall@k: a returned item counts if its true distance is <= the k-th "
        "true distance + 1e-3; feed ann_benchmarks_ranks(...) to update(relevant_ranks=...)",
    ),
    "trec_eval": (
        {"gain": "linear", "empty_queries": "zero", "ties": "optimistic"},
        "trec_eval: ties broken by document id in descending byte order (trec_run_to_lists), "
        "NDCG with linear gain, P@K divides by K, a query with no relevant document scores 0",
    ),
    "torchmetrics": (
        {"nonpositive": "miss", "all_skipped": "zero", "divisor": "retrieved", "gain": "linear"},
        "torchmetrics.retrieval 1.9 on preds/target/indexes: a relevant item scored <= 0 is never "
        "a hit of MAP, MRR, precision and recall (hit rate, R-precision and NDCG count it), AP "
        "divides by the relevant items retrieved (scored > 0, in the top K), NDCG has linear "
        "gain, and when empty_queries='skip' leaves no query the value is 0.0. Its "
        "empty_target_action='neg' (its default) is empty_queries='zero', 'skip' is 'skip', "
        "'error' is 'error'. Tied scores: torchmetrics orders them as topk/argsort happens to "
        "(its NDCG averages them, as ties='expected' does); equal whenever no tie touches a "
        "relevant item",
    ),
    "llama_index": (
        {"empty_queries": "error", "empty_lists": "error", "gain": "binary",
         "duplicates": "warn"},
        "LlamaIndex RetrieverEvaluator metrics (llama-index-core 0.14): no cut-off, each measure "
        "over the whole list in its order (name them without @K: hit_rate, mrr, precision, "
        "recall, ap -> map, ndcg; MRR(use_granular_mrr=True) is granular_mrr and "
        "HitRate(use_granular_hit_rate=True) is recall), precision over the distinct ids "
        "retrieved, NDCG with binary gain and an ideal DCG over every expected id (not cut at "
        "the list's length), an empty list or empty expected ids refused as LlamaIndex raises. "
        "A list that repeats a relevant id warns: LlamaIndex credits each repeat (AP, NDCG and "
        "the granular hit rate above 1, its PR #22683); here it counts once",
    ),
    "haystack": (
        {"empty_queries": "zero", "gain": "linear"},
        "Haystack 3.1+ Document*Evaluators: no cut-off, the whole list in its order "
        "(DocumentRecallEvaluator single_hit -> hit_rate, multi_hit -> recall; "
        "DocumentMRREvaluator -> mrr; DocumentMAPEvaluator -> map; DocumentNDCGEvaluator -> "
        "ndcg, linear gain from the ground-truth documents' scores given as grades, ideal DCG "
        "over all of them, not cut), a repeated id credited once, at its first position; empty "
        "ground truth or empty retrieval scores 0 and counts in the mean",
    ),
    "haystack<3.1": (
        {"empty_queries": "zero", "gain": "linear", "divisor": "retrieved",
         "duplicates": "warn"},
        "Haystack 2.x to 3.0 Document*Evaluators: as protocol='haystack', except that "
        "DocumentMAPEvaluator divides by the relevant documents retrieved (one hit at rank 1 "
        "is 1.0 whatever the ground truth holds). A list that repeats a relevant id warns: "
        "those versions credit each repeat (NDCG above 1, MAP over repeated hits; fixed in "
        "3.1 by Haystack PRs #11959 and #12255); here it counts once",
    ),
    "ragas": (
        {"empty_queries": "nan"},
        "ragas IDBasedContextRecall -> recall and IDBasedContextPrecision -> precision: sets "
        "of ids compared as text, the whole list, precision over the distinct ids retrieved; a "
        "value is NaN where its formula divides by zero (recall with no reference id, "
        "precision with nothing retrieved) and the mean leaves NaNs out (ragas' safe_nanmean)",
    ),
    "beir": (
        {"gain": "linear", "empty_queries": "zero"},
        "BEIR 2.2 EvaluateRetrieval.evaluate (beir/retrieval/evaluation.py): pytrec_eval "
        "ndcg_cut (linear gain from the qrels grades, ideal DCG cut at K), map_cut (divided by "
        "all relevant documents), recall and P (divided by K) at 1, 3, 5, 10, 100, 1000 "
        "(EVALUATOR_REPORTS['beir']; BEIR's NDCG@K, MAP@K, Recall@K, P@K), a query judged with "
        "grade 0 only scores 0 and counts (a query passed with no judgment at all is left out, "
        "as BEIR's loader and pytrec_eval leave it out); "
        "evaluate_custom's MRR@K and Accuracy@K "
        "(beir/retrieval/custom_metrics.py mrr, top_k_accuracy) are mrr@K and hit_rate@K. BEIR "
        "rounds every mean to 5 places: the float64 mean (summary()) rounded to 5 places is its "
        "number (compute() returns float32, as torchmetrics). Ties: pytrec_eval "
        "orders tied scores (as float32) by document id descending, BEIR's MRR@K and "
        "Accuracy@K by the run dict's insertion order; no order-free rule reproduces either, so "
        "ties stay 'expected' here, equal to BEIR whenever no tie touches a relevant document "
        "(a ranked list keeps its own order: protocols.trec_run_to_lists gives pytrec_eval's). "
        "ignore_identical_ids defaults to True, as BEIR's evaluate: the query's own id leaves "
        "its run and a judgment of it stays (relevant, never retrieved); pass False as you "
        "would to evaluate. R_cap@K and Hole@K have no name here",
    ),
    "mteb": (
        {"gain": "linear", "empty_queries": "zero"},
        "MTEB 2.x retrieval (mteb/_evaluators/retrieval_metrics.py calculate_retrieval_scores, "
        "make_score_dict): pytrec_eval ndcg_cut, map_cut, recall, P and success (hit_rate) at 1, "
        "3, 5, 10, 20, 100, 1000 (EVALUATOR_REPORTS['mteb']; its ndcg_at_K, map_at_K, "
        "recall_at_K, precision_at_K, hit_rate_at_K), its own mrr_at_K, main score ndcg_at_10, "
        "and its 'accuracy' key, which is recall_at_1 (not hit rate); linear gain; a query "
        "judged with grade 0 only scores 0 (MTEB drops only queries with no judgment at all, "
        "_filter_queries_without_positives, and so does the qrels form). MTEB rounds the "
        "pytrec_eval means to 5 places (not mrr_at_K): the float64 mean (summary()) rounded to 5 "
        "places is its number. Ties: "
        "pytrec_eval orders tied float32 scores by document id descending, MTEB's MRR tied "
        "float64 scores likewise; ties stay 'expected' here, equal to MTEB whenever no tie "
        "touches a relevant document. ignore_identical_ids defaults to False, MTEB's "
        "RetrievalEvaluator default; pass True for the tasks that set it",
    ),
    "sentence_transformers": (
        {"gain": "binary", "divisor": "min", "empty_queries": "skip", "ties": "id",
         "ignore_identical_ids": False},
        "sentence-transformers InformationRetrievalEvaluator.compute_metrics (sentence_"
        "transformers/sentence_transformer/evaluation/information_retrieval.py): accuracy@K is "
        "hit_rate@K, precision@K divides by K, recall@K by the relevant documents, MRR@K, NDCG@K "
        "with binary gain and an ideal DCG over min(m, K), MAP@K divided by min(m, K); queries "
        "without relevant documents dropped (its __init__); nothing rounded; defaults in "
        "EVALUATOR_REPORTS['sentence_transformers'], main score ndcg@10. Ties: 6.x orders tied "
        "scores by ascending corpus id (Python's order of the ids as given), and so does "
        "ties='id' here (5.x ordered them by its heap); ties='id' needs the corpus given with "
        "`ids=` and gathered (not gallery_sharded). "
        "Identical query and corpus ids are not removed, as in sentence-transformers",
    ),
}
"""Each protocol by name -> (the options it fixes, what the field's code does that they
reproduce)."""

#: protocol -> the evaluator's own defaults of an option it takes as an argument: used where the
#: option is left out, while a value passed wins (BEIR's evaluate(ignore_identical_ids=True);
#: MTEB's RetrievalEvaluator(ignore_identical_ids=False), which some tasks set to True)
PROTOCOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "beir": {"ignore_identical_ids": True},
    "mteb": {"ignore_identical_ids": False},
}

#: the protocols of fields whose "R@K" is recall (IR, RAG): under them ir_measures' R@K is read
#: as written without judgments too (image-text, metric-learning and re-id papers' R@K is the
#: hit rate)
IR_PROTOCOLS = frozenset({"trec_eval", "beir", "mteb", "sentence_transformers", "llama_index",
                          "haystack", "haystack<3.1", "ragas"})
if not IR_PROTOCOLS <= set(PROTOCOLS):
    raise AssertionError(f"IR_PROTOCOLS names no protocol: {sorted(IR_PROTOCOLS - set(PROTOCOLS))}")

#: the protocols of fields whose papers print "Recall@K" for the hit rate (a relevant item in the
#: top K): under them the library's recall@K, the IR measure, is refused as ambiguous
HIT_RATE_RECALL_PROTOCOLS = frozenset({"vsepp", "pml", "torchreid", "market1501_official",
                                       "netvlad", "msls"})
if not HIT_RATE_RECALL_PROTOCOLS <= set(PROTOCOLS):
    raise AssertionError("HIT_RATE_RECALL_PROTOCOLS names an unknown protocol")


def refuse_field_recall(protocol: str | None, names: Sequence[str]) -> None:
    """Refuse the IR measure recall@K under a protocol whose field prints "Recall@K" for the
    hit rate (VSE++'s R@K, metric learning's Recall@K, NetVLAD's and MSLS's recall@N): the
    library's recall@K there would be a different number under the field's name."""
    if protocol not in HIT_RATE_RECALL_PROTOCOLS:
        return
    for name in names:
        spec = parse_metric(name)
        if spec.base == "recall" and not spec.ir_measures:
            k = spec.k if spec.k is not None else "K"
            raise ValueError(
                f"under protocol={protocol!r}, {name!r} would be the IR measure (the share of a "
                f"query's relevant items in the top {k}), while the field's Recall@{k} is the hit "
                f"rate (a relevant item in the top {k}): name it 'hit_rate@{k}' (HitRateAtK), or "
                "drop the protocol for the IR measure"
            )

#: protocol -> (an evaluator's measure name -> the library's), for the names that differ. A name
#: is looked up whole, else by its base before the cut-off ("accuracy@10" -> "hit_rate@10"), and
#: under these protocols "_at_K" is also read as "@K" (MTEB's "ndcg_at_10" is "ndcg@10").
EVALUATOR_NAMES: dict[str, dict[str, str]] = {
    "llama_index": {"ap": "map", "granular_hit_rate": "recall"},
    "haystack": {"recall_single_hit": "hit_rate", "recall_multi_hit": "recall"},
    "haystack<3.1": {"recall_single_hit": "hit_rate", "recall_multi_hit": "recall"},
    "ragas": {"id_based_context_recall": "recall", "id_based_context_precision": "precision"},
    # BEIR's NDCG@K, MAP@K, Recall@K, MRR@K are the library's names once lower-cased
    "beir": {"p": "precision", "accuracy": "hit_rate"},
    # MTEB's "accuracy" key is its recall_at_1 (make_score_dict)
    "mteb": {"accuracy": "recall@1"},
    "sentence_transformers": {"accuracy": "hit_rate"},
}

#: protocol -> the library's names of what the evaluator reports by default (its main score
#: first): ``RetrievalMetrics(EVALUATOR_REPORTS["beir"], protocol="beir")``.
EVALUATOR_REPORTS: dict[str, list[str]] = {
    "beir": ["ndcg@10"] + [
        f"{base}@{k}" for base in ("ndcg", "map", "recall", "precision", "mrr")
        for k in (1, 3, 5, 10, 100, 1000) if (base, k) != ("ndcg", 10)
    ],
    "mteb": ["ndcg@10"] + [
        f"{base}@{k}" for base in ("ndcg", "map", "recall", "precision", "mrr", "hit_rate")
        for k in (1, 3, 5, 10, 20, 100, 1000) if (base, k) != ("ndcg", 10)
    ],
    "sentence_transformers": ["ndcg@10", "mrr@10", "map@100"] + [
        f"{base}@{k}" for base in ("hit_rate", "precision", "recall") for k in (1, 3, 5, 10)
    ],
}

RUN_DEPTH: dict[str, int] = {"beir": 1000, "mteb": 1000, "sentence_transformers": 1}
"""Protocol -> the depth of the run its evaluator scores, for queries ranked against a corpus with
judgments (``qrels=``): BEIR and MTEB retrieve the top 1000 documents by default (more where a
cut-off asks), sentence-transformers as many as its largest cut-off. Under these protocols the
ranking locates the judged documents within that depth (the largest of it and the metrics'
cut-offs), and a query whose judged documents all lie deeper stops being ranked once that is
known: every value is the whole ranking's. Without one of them, every judged document's exact
rank in the whole corpus is located (``rank_table()`` holds them all)."""

_SPELLED = re.compile(r"^(?P<base>[a-z][a-z0-9_]*?)(?:(?:@|_at_)(?P<k>\d+|r))?(?P<rest>/\w+)?$")


def library_names(protocol: str | None, names: Sequence[str]) -> list[str]:
    """``names`` with a protocol's evaluator names replaced by the library's ("ap" is "map"
    under ``protocol="llama_index"``, "accuracy@10" is "hit_rate@10" under
    ``"sentence_transformers"``, "ndcg_at_10" is "ndcg@10" under ``"mteb"``); other names
    unchanged (the metric classes read names in any case: BEIR's "NDCG@10" is "ndcg@10").

    >>> library_names("ragas", ["id_based_context_recall", "f1@5"])
    ['recall', 'f1@5']
    >>> library_names("beir", ["NDCG@10", "P@10", "Recall@100", "MRR@10", "Accuracy@5"])
    ['NDCG@10', 'precision@10', 'Recall@100', 'MRR@10', 'hit_rate@5']
    >>> library_names("mteb", ["ndcg_at_10", "hit_rate_at_5", "accuracy", "map_at_1000"])
    ['ndcg@10', 'hit_rate@5', 'recall@1', 'map@1000']
    >>> library_names("sentence_transformers", ["accuracy@1", "map@100", "ndcg@10"])
    ['hit_rate@1', 'map@100', 'ndcg@10']
    """
    renames = EVALUATOR_NAMES.get(protocol or "", {})
    out = []
    for name in names:
        text = str(name).strip().lower()
        match = _SPELLED.match(text) if renames else None
        if match is None:
            out.append(name)
            continue
        base, k, rest = match.group("base", "k", "rest")
        new = renames.get(base, base)
        if k is not None:
            if "@" in new:  # a whole-name rename ("accuracy" -> "recall@1") takes no cut-off
                out.append(name)
                continue
            new += f"@{k}"
        new += rest or ""
        out.append(name if new == text else new)
    return out

DEFAULTS: dict[str, Any] = {
    name: option.default for name, option in OPTIONS.items() if name != "memory_budget"
}
"""The constructor defaults a protocol may replace (declared in functional/options.py)."""


def _left_out(name: str, value: Any) -> bool:
    # None means "left out" except for ignore_label, where None is a choice (no ignore label).
    return value is NOT_GIVEN or (value is None and name != "ignore_label")


def protocol_name(protocol: str | None) -> str | None:
    """The protocol's name as :data:`PROTOCOLS` spells it: matched without regard to case or
    surrounding spaces, and with ``-`` for ``_`` (``"BEIR"``, ``"Sentence-Transformers"``), as
    metric names are; None stays None. An unknown name raises, with the nearest names.

    >>> protocol_name("BEIR"), protocol_name(" Market1501_Official ")
    ('beir', 'market1501_official')
    """
    if protocol is None:
        return None
    if not isinstance(protocol, str):
        raise ValueError(f"`protocol` must be a str or None, got {protocol!r}")
    spelled = {name.lower(): name for name in PROTOCOLS}
    key = protocol.strip().lower()
    for candidate in (key, key.replace("-", "_")):
        if candidate in spelled:
            return spelled[candidate]
    close = difflib.get_close_matches(key.replace("-", "_"), list(spelled), n=2, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(spelled[c]) for c in close)}?)" if close else ""
    raise ValueError(
        f"`protocol` must be one of {tuple(PROTOCOLS)} or None, got {protocol!r}{hint}"
    )


def apply_protocol(protocol: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """Every option resolved: what was passed, else the protocol's value, else the default.

    ``protocol`` as :func:`protocol_name` spells it. An option passed explicitly that disagrees
    with the protocol raises.
    """
    given = {name: value for name, value in options.items() if not _left_out(name, value)}
    fixed: dict[str, Any] = {}
    protocol = protocol_name(protocol)
    if protocol is not None:
        fixed = PROTOCOLS[protocol][0]
    defaults = PROTOCOL_DEFAULTS.get(protocol or "", {})
    for name, value in fixed.items():
        if name in given and given[name] != value:
            raise ValueError(
                f"protocol={protocol!r} sets {name}={value!r}, but {name}={given[name]!r} was "
                "passed; drop one of them"
            )
    return {**DEFAULTS, **defaults, **fixed, **given}
