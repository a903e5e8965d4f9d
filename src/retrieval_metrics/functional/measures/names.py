"""Named measures: the registry of measure names ("hit_rate@1", "map@r", "cmc@50", ...), their
parser and the depth of ranking each needs."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.measures.options import MeasureOptions
from retrieval_metrics.functional.measures.per_query import (
    SharedTieGroups,
    average_precision_per_query,
    cmc_per_query,
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
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.functional.table import RankTable

__all__ = [
    "MEASURES",
    "RANK_METRICS",
    "Measure",
    "MetricSpec",
    "average_for",
    "cutoff_depth",
    "depth_for",
    "divides_by_retrieved",
    "parse_metric",
    "register_measure",
    "suggest_metric",
    "unregister_measure",
]

AVERAGES = OPTIONS["average"].allowed


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
    """

    base: str
    per_query: Callable[[RankTable, Any, MeasureOptions, SharedTieGroups | None], Tensor]
    cutoff: str = "none"
    depth: Callable[[Any], int | str | None] = lambda k: None
    micro: Callable[..., tuple[Tensor, Tensor]] | None = None
    rank: bool = False


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


def _average_precision(
    table: RankTable, k: Any, o: MeasureOptions, shared: SharedTieGroups | None
) -> Tensor:
    if k == "r":
        return map_at_r_per_query(table, o.ties, shared=shared)
    return average_precision_per_query(
        table, k, o.ties, ap=o.ap, divisor=o.divisor, shared=shared
    )


#: every named measure, by base name
MEASURES: dict[str, Measure] = {
    m.base: m
    for m in (
        Measure("hit_rate", lambda t, k, o, s: hit_rate_per_query(t, k, o.ties, shared=s),
                "optional", _first_only),
        Measure("recall", lambda t, k, o, s: recall_per_query(t, k, o.ties, shared=s),
                "optional", lambda k: k, _micro_recall),
        Measure("precision", lambda t, k, o, s: precision_per_query(
            t, k, o.ties, shared=s, where_defined=o.empty_queries == "nan"),
                "optional", lambda k: k, _micro_precision),
        Measure("f1", lambda t, k, o, s: f1_per_query(t, k, o.ties, shared=s), "optional",
                lambda k: k),
        Measure("granular_mrr", lambda t, k, o, s: granular_mrr_per_query(t, o.ties, shared=s)),
        Measure("r_precision", lambda t, k, o, s: r_precision_per_query(t, o.ties, shared=s),
                "none", lambda k: "relevant", _micro_r_precision),
        Measure("map", _average_precision, "optional",
                lambda k: "relevant" if k == "r" else k),
        Measure("map_trapezoid", lambda t, k, o, s: average_precision_per_query(
            t, None, o.ties, ap="trapezoid", shared=s)),
        Measure("mrr", lambda t, k, o, s: reciprocal_rank_per_query(t, k, o.ties, shared=s),
                "optional", _first_only),
        Measure("ndcg", lambda t, k, o, s: ndcg_per_query(t, k, o.ties, o.gain, shared=s),
                "optional", lambda k: k),
        Measure("cmc", lambda t, k, o, s: cmc_per_query(t, k, o.ties, shared=s), "required",
                _first_only),
        Measure("median_rank", lambda t, k, o, s: first_rank_per_query(t, o.ties, shared=s),
                depth=_first_only, rank=True),
        Measure("mean_rank", lambda t, k, o, s: first_rank_per_query(t, o.ties, shared=s),
                depth=_first_only, rank=True),
        Measure("minp", lambda t, k, o, s: minp_per_query(t, o.ties, shared=s)),
    )
}
_BUILT_IN = frozenset(MEASURES)
#: the bases of the measures that are ranks (lower is better); kept up to date in place
RANK_METRICS = {base for base, m in MEASURES.items() if m.rank}


def _name_pattern() -> re.Pattern[str]:
    return re.compile(rf"^(?P<base>{'|'.join(sorted(MEASURES, key=len, reverse=True))})"
                      rf"(@(?P<k>r|\d+))?(/(?P<average>{'|'.join(AVERAGES)}))?$")


_NAME = _name_pattern()
_BASE_RULE = re.compile(r"[a-z_][a-z0-9_]*")
_CUTOFFS = ("required", "optional", "none")


def _names_changed() -> None:
    """Rebuild what is read off MEASURES: the name pattern and (in place) RANK_METRICS."""
    global _NAME
    _NAME = _name_pattern()
    RANK_METRICS.clear()
    RANK_METRICS.update(base for base, m in MEASURES.items() if m.rank)


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


@dataclass(frozen=True)
class MetricSpec:
    """A parsed metric name: ``base``, cut-off ``k`` (None, an int, or "r" for map@r) and the
    ``average`` the name fixes ("recall@5/micro"), None to follow the metric's ``average``."""

    name: str
    base: str
    k: int | str | None
    average: str | None = None

    @property
    def measure(self) -> Measure:
        return MEASURES[self.base]

    @property
    def higher_is_better(self) -> bool:
        return not self.measure.rank

    def depth_needed(self) -> int | str | None:
        """Positions that must be known exactly: an int, None (the whole ranking) or
        "relevant" (at least m_q per query)."""
        return self.measure.depth(self.k)


# Names other libraries and papers use, as (pattern on the lower-cased name, suggestion); "{k}" is
# the cut-off the name carried.
_ALIASES: tuple[tuple[str, str], ...] = (
    (r"r@(?P<k>\d+)", "did you mean hit_rate@{k} (\"R@K\" of image-text, metric-learning and "
     "re-id papers: a relevant item in the top K) or recall@{k} (the IR measure: the share of "
     "relevant items in the top K)?"),
    (r"(rank|top|acc|accuracy|hits?|hr|hitrate|success)[-_@ ]?(?P<k>\d+)",
     "did you mean hit_rate@{k}?"),
    (r"(p|prec|precision)(@|_|_at_)(?P<k>\d+)", "did you mean precision@{k}?"),
    (r"(recall|r)(_|_at_)(?P<k>\d+)", "did you mean recall@{k}?"),
    (r"ndcg_cut_(?P<k>\d+)", "did you mean ndcg@{k}?"),
    (r"map_cut_(?P<k>\d+)", "did you mean map@{k}?"),
    (r"(recip_rank|mean_reciprocal_rank)", "did you mean mrr?"),
    (r"(rprec|r-?prec|r-precision|rprecision)", "did you mean r_precision?"),
    (r"(map@r|mapr|map_at_r|map-r)", "did you mean map@r?"),
    (r"(mean_average_precision|m_ap)", "did you mean map?"),
    (r"(medr|med_r|median)", "did you mean median_rank?"),
    (r"(meanr|mean_r|mnr)", "did you mean mean_rank?"),
    (r"cmc", "did you mean cmc@K (e.g. cmc@50)?"),
    (r"rsum", "rsum is reported by CrossModalRetrieval and RSum (image-text, both directions), "
     "not by a one-direction metric."),
)


def suggest_metric(name: str) -> str | None:
    """A hint for an unknown metric name: the library's name for a common alias ("R@1", "P@10",
    "rank-1", "ndcg_cut_10", ...) or the closest known name for a typo; None if nothing is near."""
    text = str(name).strip().lower()
    head, slash, average = text.partition("/")
    if slash:
        if _NAME.match(head) is None:
            return suggest_metric(head)
        close = difflib.get_close_matches(average, AVERAGES, n=1, cutoff=0.6)
        if close:
            return f"did you mean {head}/{close[0]}?"
        return f"the part after '/' names an average, one of {', '.join(AVERAGES)}."
    for pattern, hint in _ALIASES:
        match = re.fullmatch(pattern, text)
        if match is not None:
            return hint.format(**match.groupdict())
    base, at, k = text.partition("@")
    cutoff_ok = not at or k.isdigit() or k == "r"
    close = [base] if base in MEASURES else difflib.get_close_matches(
        base, list(MEASURES), n=1, cutoff=0.75
    )
    if close and cutoff_ok:
        return f"did you mean {close[0]}{'@' + k if k else ''}?" if close[0] != base else None
    if close:
        # "ndcg@ten", "recall@k": a known measure with a cut-off that is not one
        return (
            f"the cut-off after '@' is a whole number of positions, as in {close[0]}@10"
            + (" (or r, in map@r)" if close[0] == "map" else "")
            + f", not {k!r}"
        )
    return None


_MICRO_RULE = (
    'average="micro" (summed numerators over summed denominators) is defined for recall, '
    "precision and r_precision; the other measures are one score per query, averaged as the "
    "macro mean"
)


def parse_metric(name: str) -> MetricSpec:
    """Parse "hit_rate@1", "recall@10", "f1@10", "map@r", "map", "map@100", "mrr", "mrr@10",
    "ndcg@10", "cmc@50", "r_precision", "median_rank", "mean_rank", "minp", "map_trapezoid",
    "granular_mrr". Hit rate, recall, precision and F1 without a cut-off are over the whole
    ranking (a ranked list's every id: trec_eval's set measures).

    A name may fix its own average with a suffix: "recall@10/micro", "map@r/class",
    "hit_rate@1/macro" (see :func:`average_for`)."""
    if not isinstance(name, str):
        raise ValueError(f"metric names must be strings, got {name!r}")
    match = _NAME.match(name.strip().lower())
    if match is None:
        hint = suggest_metric(name)
        registered = sorted(set(MEASURES) - _BUILT_IN)
        raise ValueError(
            f"unknown metric {name!r}{': ' + hint if hint else '.'} Known names: hit_rate@K, "
            "recall@K, precision@K, f1@K (each also without @K: the whole list), r_precision, "
            "map@r, map, map@K, map_trapezoid, mrr, mrr@K, granular_mrr, ndcg, ndcg@K, cmc@K, "
            "median_rank, mean_rank, minp"
            f"{''.join(', ' + b for b in registered)}, each optionally with /macro, "
            "/micro or /class"
        )
    base, k = match.group("base"), match.group("k")
    cutoff = MEASURES[base].cutoff
    if k == "r" and base != "map":
        raise ValueError(f"unknown metric {name!r}: only map@r takes @r")
    if cutoff == "required" and k is None:
        raise ValueError(f"metric {name!r} needs a cut-off, e.g. {base}@10")
    if cutoff == "none" and k is not None:
        raise ValueError(f"metric {name!r} takes no cut-off; use {base!r}")
    k_value: int | str | None = k if k in (None, "r") else int(k)
    if isinstance(k_value, int) and k_value < 1:
        raise ValueError(f"metric {name!r}: the cut-off must be >= 1")
    average = match.group("average")
    if average is not None:
        if MEASURES[base].rank:
            raise ValueError(
                f"metric {name!r}: a rank is aggregated as a median or mean of ranks; no "
                "average applies"
            )
        if average == "micro" and MEASURES[base].micro is None:
            raise ValueError(f"metric {name!r}: {_MICRO_RULE}")
    return MetricSpec(name=name.strip().lower(), base=base, k=k_value, average=average)


def average_for(spec: MetricSpec, average: str) -> str:
    """The average ``spec`` is aggregated with under a metric's ``average``: the name's own when
    it fixes one; else ``average``, except that "micro" falls back to "macro" for a measure with
    no micro form (a per-query score, where summing numerators over denominators of 1 per query
    is the macro mean anyway)."""
    if spec.average is not None:
        return spec.average
    if average == "micro" and spec.measure.micro is None:
        return "macro"
    return average


def divides_by_retrieved(names: Iterable[str]) -> bool:
    """Whether a measure among ``names`` divides by the distinct items a ranked list returned
    (precision and F1 without a cut-off): the lists' tables must then count them."""
    return any(
        spec.k is None and spec.base in ("precision", "f1")
        for spec in map(parse_metric, names)
    )


#: built-in measures that read no position below their cut-off K (hit rate, MRR and CMC
#: included: with a cut-off they need each query's best relevant item only within the top K)
_WITHIN_CUTOFF = frozenset({"hit_rate", "recall", "precision", "f1", "map", "mrr", "ndcg", "cmc"})


def cutoff_depth(names: Iterable[str]) -> int | None:
    """The ranking depth that serves all ``names`` without locating any query's best relevant
    item below it (a ranking with ``locate_first=False``): their largest cut-off, where each is
    a built-in measure at an integer cut-off that reads no position below it; None (the whole
    ranking) where one is not.

    >>> cutoff_depth(["ndcg@10", "recall@100", "mrr@10"]), cutoff_depth(["ndcg@10", "mrr"])
    (100, None)
    """
    depth = 1
    for name in names:
        spec = parse_metric(name)
        if spec.base not in _WITHIN_CUTOFF:  # (a registered measure never takes these names)
            return None
        if not isinstance(spec.k, int):
            return None
        depth = max(depth, spec.k)
    return depth


def depth_for(names: Iterable[str]) -> tuple[int | None, bool]:
    """The ranking depth that serves all ``names``: ``(depth, cover_relevant)``.

    ``depth=None`` means the whole ranking; ``cover_relevant`` asks for at least m_q positions
    per query (R-precision, MAP@R).
    """
    depth, cover_relevant = 1, False
    for name in names:
        need = parse_metric(name).depth_needed()
        if need == "relevant":
            cover_relevant = True
        elif need is None:
            return None, False
        else:
            depth = max(depth, int(need))
    return depth, cover_relevant
