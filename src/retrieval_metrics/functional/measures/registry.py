"""The registry of measures: one :class:`Measure` record per measure, holding everything about
it in one place (its name grammar, per-query function, aggregation, defaults, the ranking it
needs and its citation), and :func:`register_measure`. The parsing of names is
:mod:`retrieval_metrics.functional.measures.parsing`."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.measures.judged import bpref_per_query, judged_per_query
from retrieval_metrics.functional.measures.options import MeasureOptions
from retrieval_metrics.functional.measures.per_query import (
    SharedTieGroups,
    average_precision_per_query,
    cmc_per_query,
    dcg_per_query,
    expected_hits_per_query,
    f1_per_query,
    first_rank_per_query,
    granular_mrr_per_query,
    hit_rate_per_query,
    map_at_r_per_query,
    minp_per_query,
    ndcg_per_query,
    precision_per_query,
    r_precision_per_query,
    recall_per_query,
    reciprocal_rank_per_query,
)
from retrieval_metrics.functional.measures.user_models import (
    err_per_query,
    rbp_per_query,
    rbp_residual_per_query,
)
from retrieval_metrics.functional.table import RankTable

__all__ = [
    "IR_MEASURES",
    "MEASURES",
    "NAME_PARAMS",
    "RANK_METRICS",
    "Measure",
    "built_in",
    "register_measure",
    "unregister_measure",
]

IrOptions = tuple[tuple[str, Any], ...]

@dataclass(frozen=True)
class Measure:
    """One named measure: how to compute it per query and what it needs.

    Attributes:
        base: the name before "@" ("hit_rate", "map", ...).
        per_query: ``(table, k, options, shared) -> (Q,)`` values (CMC: ``(Q, K)``), NaN for
            unanswerable queries; ``options`` is the :class:`MeasureOptions` of the call (read
            ``options.ties``, ``.ap``, ``.divisor``, ``.gain``), ``shared`` the
            :class:`SharedTieGroups` of the call (or None), to hand to the per-query functions.
        cutoff: "required" (hit_rate@10), "optional" (map, map@100), "none" (minp) or "r"
            (map@r: R = each query's number of relevant items, also accepted beside "optional").
        depth: positions that must be known exactly, from the cut-off: an int, None for the
            whole ranking, or "relevant" for at least m_q positions per query.
        micro: ``(table, k, ties, shared=None) -> (numerator, denominator)`` per query for
            ``average="micro"``, or None where a micro average is not defined.
        rank: a rank (lower is better), aggregated as a median or mean of ranks.
        params: the options a name may set in parentheses (``precision(rel=2)@5``), by their
            short names (:data:`NAME_PARAMS`).
        own_options: ``(option, value)`` pairs the measure reads at its own value, not the
            metric's, unless its name sets them (RBP's gain is binary, whatever NDCG's is).
        needs_relevant: the value is defined only for a query with something relevant (NaN
            otherwise, and ``empty_queries`` decides); False for Judged@K and RBP's residual,
            defined for every query.
        reads_judged: it reads which documents were judged (Judged@K, bpref, RBP's residual):
            the ranking then places the judged documents that are not relevant.
        within_cutoff: with an integer cut-off K it reads no position below K (hit rate, MRR
            and CMC included: their best relevant item only within the top K), so a ranking to
            depth K serves it.
        retrieved: when it divides by the distinct items a ranked list returned: "never",
            "whole" (without a cut-off: precision, F1) or "always" (Judged@K).
        ir_names: the ir_measures names it is read under, each with the options the name
            implies (``("nDCG", (("gain", "linear"),))``: trec_eval's linear gain).
        graded: it reads the grades as gains (NDCG, DCG, ERR): no relevance level applies.
        cite: where its definition comes from.
    """

    base: str
    per_query: Callable[[RankTable, Any, MeasureOptions, SharedTieGroups | None], Tensor]
    cutoff: str = "none"
    depth: Callable[[Any], int | str | None] = lambda k: None
    micro: Callable[..., tuple[Tensor, Tensor]] | None = None
    rank: bool = False
    params: frozenset[str] = frozenset({"judged_only", "rel"})
    needs_relevant: bool = True
    own_options: tuple[tuple[str, Any], ...] = ()
    reads_judged: bool = False
    within_cutoff: bool = False
    retrieved: str = "never"
    ir_names: tuple[tuple[str, IrOptions], ...] = ()
    graded: bool = False
    cite: str = ""


def _first_only(k: Any) -> int:
    return 1  # only each query's best relevant item, which is always located exactly


def _micro_recall(
    table: RankTable, k: Any, ties: str, shared: SharedTieGroups | None = None
) -> tuple[Tensor, Tensor]:
    hits = expected_hits_per_query(table, k, ties, shared=shared)
    return hits, table.num_relevant.to(torch.float64)


def _micro_precision(
    table: RankTable, k: Any, ties: str, shared: SharedTieGroups | None = None
) -> tuple[Tensor, Tensor]:
    if k is None:  # the whole list: over the distinct items retrieved
        hits = expected_hits_per_query(table, None, ties, shared=shared)
        return hits, table.retrieved.to(torch.float64)
    hits = expected_hits_per_query(table, k, ties, shared=shared)
    return hits, torch.full_like(hits, float(k))


def _micro_r_precision(
    table: RankTable, k: Any, ties: str, shared: SharedTieGroups | None = None
) -> tuple[Tensor, Tensor]:
    hits = expected_hits_per_query(table, table.num_relevant.clamp_min(1), ties, shared=shared)
    return hits, table.num_relevant.to(torch.float64)


# the measures that read grades as gains take no relevance level (trec_eval -l leaves its
# nDCG's gains as they are)
_GRADED = frozenset({"judged_only"})


def _average_precision(
    table: RankTable, k: Any, o: MeasureOptions, shared: SharedTieGroups | None
) -> Tensor:
    if k == "r":
        return map_at_r_per_query(table, o.ties, shared=shared)
    return average_precision_per_query(
        table, k, o.ties, ap=o.ap, divisor=o.divisor, shared=shared
    )



_STEP_AP: IrOptions = (("ap", "step"), ("divisor", "relevant"))

MEASURES: dict[str, Measure] = {
    m.base: m
    for m in (
        Measure("hit_rate", lambda t, k, o, s: hit_rate_per_query(t, k, o.ties, shared=s),
                "optional", _first_only, within_cutoff=True, ir_names=(("Success", ()),),
                cite="a relevant item in the top K: the R@K of image-text (VSE++), "
                "metric-learning and re-id papers; trec_eval's success"),
        Measure("recall", lambda t, k, o, s: recall_per_query(t, k, o.ties, shared=s),
                "optional", lambda k: k, _micro_recall, within_cutoff=True,
                ir_names=(("R", ()),),
                cite="Manning, Raghavan and Schuetze, Introduction to IR (2008), ch. 8; "
                "trec_eval's recall"),
        Measure("precision", lambda t, k, o, s: precision_per_query(
            t, k, o.ties, shared=s, where_defined=o.empty_queries == "nan"),
                "optional", lambda k: k, _micro_precision, within_cutoff=True,
                retrieved="whole", ir_names=(("P", ()),),
                cite="trec_eval's P (over K) and set_P (over the list)"),
        Measure("f1", lambda t, k, o, s: f1_per_query(t, k, o.ties, shared=s), "optional",
                lambda k: k, within_cutoff=True, retrieved="whole",
                cite="ranx's f1; trec_eval's set_F"),
        Measure("granular_mrr", lambda t, k, o, s: granular_mrr_per_query(t, o.ties, shared=s),
                cite="LlamaIndex's MRR(use_granular_mrr=True)"),
        Measure("r_precision", lambda t, k, o, s: r_precision_per_query(t, o.ties, shared=s),
                "none", lambda k: "relevant", _micro_r_precision, ir_names=(("Rprec", ()),),
                cite="trec_eval's Rprec"),
        Measure("map", _average_precision, "optional",
                lambda k: "relevant" if k == "r" else k,
                params=frozenset({"judged_only", "rel", "ap", "divisor"}), within_cutoff=True,
                ir_names=(("AP", _STEP_AP),),
                cite="Manning et al. (2008), ch. 8, trec_eval's map and map_cut; map@r: "
                "Musgrave, Belongie and Lim, ECCV 2020"),
        Measure("map_trapezoid", lambda t, k, o, s: average_precision_per_query(
            t, None, o.ties, ap="trapezoid", shared=s),
                cite="the official Market-1501 evaluation (Zheng et al., ICCV 2015)"),
        Measure("mrr", lambda t, k, o, s: reciprocal_rank_per_query(t, k, o.ties, shared=s),
                "optional", _first_only, within_cutoff=True, ir_names=(("RR", ()),),
                cite="Voorhees, TREC-8 question answering (1999); trec_eval's recip_rank"),
        Measure("ndcg", lambda t, k, o, s: ndcg_per_query(t, k, o.ties, o.gain, shared=s),
                "optional", lambda k: k, params=_GRADED | {"gain"}, within_cutoff=True,
                ir_names=(("nDCG", (("gain", "linear"),)),), graded=True,
                cite="Jarvelin and Kekalainen, ACM TOIS 2002; ties: McSherry and Najork, "
                "ECIR 2008"),
        Measure("cmc", lambda t, k, o, s: cmc_per_query(t, k, o.ties, shared=s), "required",
                _first_only, within_cutoff=True,
                cite="re-identification's CMC curve (torchreid's eval_market1501)"),
        Measure("median_rank", lambda t, k, o, s: first_rank_per_query(t, o.ties, shared=s),
                depth=_first_only, rank=True, params=frozenset({"judged_only"}),
                cite="VSE++'s evaluation.py (Faghri et al., BMVC 2018)"),
        Measure("mean_rank", lambda t, k, o, s: first_rank_per_query(t, o.ties, shared=s),
                depth=_first_only, rank=True, params=frozenset({"judged_only"}),
                cite="VSE++'s evaluation.py (Faghri et al., BMVC 2018)"),
        Measure("minp", lambda t, k, o, s: minp_per_query(t, o.ties, shared=s),
                cite="Ye et al., TPAMI 2021"),
        Measure("dcg", lambda t, k, o, s: dcg_per_query(t, k, o.ties, o.gain, shared=s),
                "optional", lambda k: k, params=_GRADED | {"gain"}, graded=True,
                cite="Jarvelin and Kekalainen, ACM TOIS 2002"),
        Measure("judged", lambda t, k, o, s: judged_per_query(t, k, o.ties), "optional",
                lambda k: k, params=frozenset(), needs_relevant=False, reads_judged=True,
                retrieved="always", ir_names=(("Judged", ()),),
                cite="ir_measures' Judged@k (OpenNIR)"),
        Measure("bpref", lambda t, k, o, s: bpref_per_query(t, o.ties),
                params=frozenset({"rel"}), reads_judged=True,
                ir_names=(("Bpref", ()), ("BPref", ())),
                cite="Buckley and Voorhees, SIGIR 2004; trec_eval's bpref"),
        Measure("err", lambda t, k, o, s: err_per_query(t, k, o.ties, o.max_grade), "optional",
                lambda k: k, params=_GRADED | {"max_grade"},
                ir_names=(("ERR", (("max_grade", 4),)),), graded=True,
                cite="Chapelle, Metzler, Zhang and Grinspan, CIKM 2009; gdeval"),
        # ir_measures' RBP without rel: trectools' graded RBP (gain = the grade); with rel=N,
        # cwl_eval's binary one (parsing.py reads rel=N as binary)
        Measure("rbp", lambda t, k, o, s: rbp_per_query(
            t, k, o.ties, o.persistence, "binary" if o.relevance_level is not None else o.gain),
                "optional", params=frozenset({"judged_only", "rel", "p", "gain"}),
                own_options=(("gain", "binary"),), ir_names=(("RBP", (("gain", "linear"),)),),
                cite="Moffat and Zobel, ACM TOIS 2008"),
        Measure("rbp_residual", lambda t, k, o, s: rbp_residual_per_query(
            t, k, o.ties, o.persistence), "optional", lambda k: k,
                params=frozenset({"p"}), needs_relevant=False, reads_judged=True,
                cite="Moffat and Zobel, ACM TOIS 2008"),
    )
}
"""Every named measure, by base name."""
_BUILT_IN = frozenset(MEASURES)
#: the bases of the measures that are ranks (lower is better); kept up to date in place
RANK_METRICS = {base for base, m in MEASURES.items() if m.rank}
#: ir_measures' measure names, as ``name -> (base, options it implies)``, read off the
#: measures' ``ir_names`` (kept up to date in place). Its aliases NDCG and MAP are not among
#: them: the library reads its own names in any case, and BEIR's "NDCG@10" and "MAP@10" are
#: those.
IR_MEASURES: dict[str, tuple[str, IrOptions]] = {
    ir: (m.base, implied) for m in MEASURES.values() for ir, implied in m.ir_names
}
_BASE_RULE = re.compile(r"[a-z_][a-z0-9_]*")
_CUTOFFS = ("required", "optional", "none")
_RETRIEVED = ("never", "whole", "always")


def built_in(base: str) -> bool:
    """Whether ``base`` is one of the library's own measures (not a registered one)."""
    return base in _BUILT_IN


#: How many times MEASURES has changed: what is read off the names and kept (the specs
#: ``parsing.parse_metric`` caches) is keyed by it, so that it is read again after a change.
NAMES_GENERATION = [0]


def _names_changed() -> None:
    """Rebuild, in place, what is read off MEASURES: RANK_METRICS and IR_MEASURES."""
    NAMES_GENERATION[0] += 1
    RANK_METRICS.clear()
    RANK_METRICS.update(base for base, m in MEASURES.items() if m.rank)
    IR_MEASURES.clear()
    IR_MEASURES.update(
        (ir, (m.base, implied)) for m in MEASURES.values() for ir, implied in m.ir_names
    )


def register_measure(measure: Measure) -> Measure:
    """Add ``measure`` to :data:`MEASURES`: :func:`parse_metric`, :func:`retrieval_measures`
    and every metric class (``RetrievalMetrics(["my_measure@5"])``) then accept its name.

    ``measure.base`` must be a new lower-case identifier (letters, digits, "_"), and its
    ``cutoff`` "required", "optional" or "none". Register at import time, before any metric is
    made; :func:`unregister_measure` removes it.

    >>> from retrieval_metrics.functional.measures import hit_rate_per_query
    >>> success = Measure(
    ...     "success", lambda t, k, o, s: hit_rate_per_query(t, k, o.ties, shared=s),
    ...     "required", depth=lambda k: 1)
    >>> register_measure(success) is success
    True
    >>> from retrieval_metrics.functional.measures.parsing import parse_metric
    >>> parse_metric("success@5").k
    5
    >>> unregister_measure("success").base
    'success'
    """
    if not isinstance(measure, Measure):
        raise TypeError(f"`measure` must be a Measure, got {type(measure).__name__}")
    base = measure.base
    if not isinstance(base, str) or _BASE_RULE.fullmatch(base) is None:
        raise ValueError(
            f"a measure's name must be a lower-case identifier (a-z, 0-9, _), got {base!r}"
        )
    if base in MEASURES:
        raise ValueError(f"a measure named {base!r} exists already")
    if measure.cutoff not in _CUTOFFS:
        raise ValueError(f"`cutoff` must be one of {_CUTOFFS}, got {measure.cutoff!r}")
    if measure.retrieved not in _RETRIEVED:
        raise ValueError(f"`retrieved` must be one of {_RETRIEVED}, got {measure.retrieved!r}")
    taken = sorted(set(IR_MEASURES) & {ir for ir, _ in measure.ir_names})
    if taken:
        raise ValueError(f"the ir_measures names {taken} are another measure's already")
    if not callable(measure.per_query) or not callable(measure.depth):
        raise TypeError("a measure's `per_query` and `depth` must be callables")
    MEASURES[base] = measure
    _names_changed()
    return measure


def unregister_measure(base: str) -> Measure:
    """Remove the measure :func:`register_measure` added under ``base``, and return it (the
    library's own measures cannot be removed)."""
    if base in _BUILT_IN:
        raise ValueError(f"{base!r} is one of the library's measures; it cannot be removed")
    if base not in MEASURES:
        raise ValueError(f"no measure named {base!r} was registered")
    measure = MEASURES.pop(base)
    _names_changed()
    return measure


#: the options a name may set in parentheses, by the short name it is written with
NAME_PARAMS: dict[str, str] = {
    "rel": "relevance_level",
    "judged_only": "judged_only",
    "p": "persistence",
    "max_grade": "max_grade",
    "gain": "gain",
    "ap": "ap",
    "divisor": "divisor",
}

