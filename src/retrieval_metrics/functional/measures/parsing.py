"""The parsing of measure names: "hit_rate@10", "map@r", "precision(rel=2)@5",
"recall@10/micro" and ir_measures' strings ("nDCG@10", "P(rel=2)@5") into a :class:`MetricSpec`,
the hints for an unknown name, and what a set of names asks of the ranking. Each measure's
record is in :mod:`retrieval_metrics.functional.measures.registry`."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from retrieval_metrics.functional.measures.options import MeasureOptions
from retrieval_metrics.functional.measures.registry import (
    IR_MEASURES,
    MEASURES,
    NAME_PARAMS,
    NAMES_GENERATION,
    Measure,
    built_in,
)
from retrieval_metrics.functional.options import OPTIONS, check_option

__all__ = [
    "MetricSpec",
    "average_for",
    "cutoff_depth",
    "depth_for",
    "divides_by_retrieved",
    "judged_needed",
    "judged_queries_needed",
    "parse_metric",
    "refuse_ambiguous_recall",
    "suggest_metric",
]

AVERAGES = OPTIONS["average"].allowed


@functools.lru_cache(maxsize=8)
def _pattern(bases: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(rf"^(?P<base>{'|'.join(sorted(bases, key=len, reverse=True))})"
                      r"(\((?P<params>[^()]*)\))?"
                      rf"(@(?P<k>r|\d+))?(/(?P<average>{'|'.join(AVERAGES)}))?$")


def _match_name(text: str) -> re.Match[str] | None:
    """``text`` matched against the names of the measures registered now."""
    return _pattern(tuple(MEASURES)).match(text)


#: the options an ir_measures string reads at its provider's value, whatever the metric's (the
#: string itself may set them: ``P(rel=2)@5``, ``RBP(p=0.5)``)
_PROVIDER_CONVENTIONS: tuple[tuple[str, Any], ...] = tuple(
    (name, OPTIONS[name].default)
    for name in ("relevance_level", "judged_only", "persistence", "max_grade", "ap", "divisor")
)


@dataclass(frozen=True)
class MetricSpec:
    """A parsed metric name: ``base``, cut-off ``k`` (None, an int, or "r" for map@r), the
    ``average`` the name fixes ("recall@5/micro"), None to follow the metric's ``average``, and
    ``options``: ``(option, value)`` pairs the name sets (``precision(rel=2)@5``, or those an
    ir_measures name implies: ``nDCG@10`` is trec_eval's linear gain). ``name`` is the key of
    its value: the name lower-cased, or an ir_measures name as written."""

    name: str
    base: str
    k: int | str | None
    average: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    #: an ir_measures string: a query judged with grade <= 0 only scores and counts, as there
    ir_measures: bool = False

    @property
    def measure(self) -> Measure:
        return MEASURES[self.base]

    def options_over(self, options: MeasureOptions) -> MeasureOptions:
        """``options`` (the metric's) with what the measure and its name set. An ir_measures
        string reads its provider's conventions, not the metric's options (the tie rule
        excepted); NDCG, DCG and ERR read no relevance level (trec_eval's ``-l`` leaves its
        nDCG alone)."""
        changes: dict[str, Any] = dict(_PROVIDER_CONVENTIONS) if self.ir_measures else {}
        if self.measure.graded:
            changes["relevance_level"] = None
        changes.update(self.measure.own_options)
        changes.update(self.options)
        if not changes:
            return options
        return options.replace(**changes)

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
    # (trec_eval writes "P_10" and "ndcg_cut_10"; pytrec_eval's measure sets "P.10" and
    # "ndcg_cut.10")
    (r"(rank|top|acc|accuracy|hits?|hr|hitrate|success)[-_.@ ]?(?P<k>\d+)",
     "did you mean hit_rate@{k}?"),
    (r"(p|prec|precision)(@|_|\.|_at_)(?P<k>\d+)", "did you mean precision@{k}?"),
    (r"(recall|r)(_|\.|_at_)(?P<k>\d+)", "did you mean recall@{k}?"),
    (r"ndcg_cut[_.](?P<k>\d+)", "did you mean ndcg@{k}?"),
    (r"map_cut[_.](?P<k>\d+)", "did you mean map@{k}?"),
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
    "rank-1", "ndcg_cut_10", ...) or the closest known name for a typo; None if nothing is near.
    A name written as ir_measures writes its strings ("nDCG @10", "Judgd@10") is offered the
    ir_measures string ("nDCG@10": trec_eval's linear gain), not the library's name."""
    ir_hint = _ir_suggestion(str(name))
    if ir_hint is not None:
        return ir_hint
    text = str(name).strip().lower()
    head, slash, average = text.partition("/")
    if slash:
        if _match_name(head) is None:
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
    "ndcg@10", "dcg@10", "cmc@50", "r_precision", "median_rank", "mean_rank", "minp",
    "map_trapezoid", "granular_mrr", "judged@10", "bpref", "err@20", "rbp", "rbp_residual".
    Hit rate, recall, precision and F1 without a cut-off are over the whole ranking (a ranked
    list's every id: trec_eval's set measures).

    A name may fix its own average with a suffix: "recall@10/micro", "map@r/class",
    "hit_rate@1/macro" (see :func:`average_for`), and set options in parentheses before the
    cut-off: "precision(rel=2)@5" (grades below 2 are not relevant), "ndcg(judged_only=true)@10"
    (the condensed list), "rbp(p=0.9)", "err(max_grade=3)@20", "ndcg(gain=linear)@10".

    ir_measures' names are accepted as written, keyed as written: "nDCG@10", "P(rel=2)@5",
    "R@100", "RR@10", "AP", "Rprec", "Bpref", "Judged@10", "ERR@20", "RBP(p=0.8)",
    "Success@10", "nDCG(judged_only=True)@10" (:data:`IR_MEASURES` says what each is here).

    >>> spec = parse_metric("P(rel=2)@5")
    >>> spec.name, spec.base, spec.k, spec.options
    ('P(rel=2)@5', 'precision', 5, (('relevance_level', 2),))
    """
    if not isinstance(name, str):
        raise ValueError(f"metric names must be strings, got {name!r}")
    return _parsed(name, NAMES_GENERATION[0])


@functools.lru_cache(maxsize=1024)
def _parsed(name: str, generation: int) -> MetricSpec:
    """:func:`parse_metric` of ``name`` with the measures registered at ``generation``: every
    compute() of a metric reads its names again (30 parses for image-text's values), and a
    spec is immutable (a name that fails to parse raises each time: nothing is kept)."""
    # ir_measures' names first, case as written: its nDCG@10 (trec_eval's linear gain) is not
    # the library's ndcg@10 (exponential gain, as most papers)
    spec = _ir_measures_spec(name.strip())
    if spec is not None:
        return spec
    match = _match_name(name.strip().lower())
    if match is None:
        hint = suggest_metric(name)
        registered = sorted(b for b in MEASURES if not built_in(b))
        raise ValueError(
            f"unknown metric {name!r}{': ' + hint if hint else '.'} Known names: hit_rate@K, "
            "recall@K, precision@K, f1@K (each also without @K: the whole list), r_precision, "
            "map@r, map, map@K, map_trapezoid, mrr, mrr@K, granular_mrr, ndcg, ndcg@K, dcg@K, "
            "cmc@K, median_rank, mean_rank, minp, judged@K, bpref, err@K, rbp, rbp_residual"
            f"{''.join(', ' + b for b in registered)}, each optionally with /macro, "
            "/micro or /class and options in parentheses (precision(rel=2)@5); or an "
            f"ir_measures name ({', '.join(_IR_EXAMPLES)})"
        )
    base, k = match.group("base"), match.group("k")
    options = _name_options(name, MEASURES[base], match.group("params"))
    return _checked_spec(name.strip().lower(), base, k, match.group("average"), options)


def _checked_spec(
    name: str, base: str, k: str | None, average: str | None,
    options: tuple[tuple[str, Any], ...],
) -> MetricSpec:
    cutoff = MEASURES[base].cutoff
    if k == "r" and base != "map":
        raise ValueError(f"unknown metric {name!r}: only map@r takes @r")
    if cutoff == "required" and k is None:
        raise ValueError(f"metric {name!r} needs a cut-off, e.g. {base}@10")
    if cutoff == "none" and k is not None:
        raise ValueError(f"metric {name!r} takes no cut-off; use {base!r}")
    k_value: int | str | None = k if k in (None, "r") else int(k)
    if isinstance(k_value, int) and not 1 <= k_value < 2**63:
        # (the upper bound: a cut-off is an int64 position, as every rank table's)
        raise ValueError(f"metric {name!r}: the cut-off must be >= 1 and below 2**63")
    if average is not None:
        if MEASURES[base].rank:
            raise ValueError(
                f"metric {name!r}: a rank is aggregated as a median or mean of ranks; no "
                "average applies"
            )
        if average == "micro" and MEASURES[base].micro is None:
            raise ValueError(f"metric {name!r}: {_MICRO_RULE}")
    return MetricSpec(name=name, base=base, k=k_value, average=average, options=options)


_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _param_value(name: str, key: str, text: str) -> Any:
    """The value ``text`` of the option ``key`` written in the name ``name``, checked."""
    option = NAME_PARAMS[key]
    text = text.strip()
    lowered = text.lower()
    value: Any
    if option == "judged_only":
        if lowered not in _TRUE + _FALSE:
            raise ValueError(f"metric {name!r}: `judged_only` is true or false, got {text!r}")
        value = lowered in _TRUE
    elif option in ("relevance_level", "persistence", "max_grade"):
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"metric {name!r}: `{key}` is a number, got {text!r}") from None
        value = int(number) if number.is_integer() and option != "persistence" else number
    else:
        value = lowered
    try:
        check_option(option, value)
    except ValueError as error:
        raise ValueError(f"metric {name!r}: {error}") from None
    return value


def _name_options(
    name: str, measure: Measure, text: str | None, aliases: Mapping[str, str] | None = None
) -> tuple[tuple[str, Any], ...]:
    """The options the parentheses of ``name`` set (``text``: what is inside them), each one a
    key ``measure`` takes; ``aliases`` maps other spellings of a key (ir_measures') to ours."""
    if text is None:
        return ()
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = item.partition("=")
        key = key.strip()
        key = (aliases or {}).get(key, key.lower())
        if not equals or key not in NAME_PARAMS:
            raise ValueError(
                f"metric {name!r}: the parentheses hold key=value options, one of "
                f"{', '.join(sorted(measure.params)) or 'none for this measure'}; got {item!r}"
            )
        if key not in measure.params:
            raise ValueError(
                f"metric {name!r}: {measure.base} takes no `{key}`"
                + (f"; it takes {', '.join(sorted(measure.params))}" if measure.params else "")
                + (" (a relevance level leaves graded gains as they are, as trec_eval -l)"
                   if key == "rel" and measure.params & {"gain", "max_grade"} else "")
            )
        option = NAME_PARAMS[key]
        if option in options:
            raise ValueError(f"metric {name!r}: `{key}` is given twice")
        options[option] = _param_value(name, key, value)
    if options.get("judged_only") is False:
        del options["judged_only"]  # the default: the name is the plain measure
    return tuple(sorted(options.items()))



_IR_EXAMPLES = ("nDCG@10", "P(rel=2)@5", "R@100", "RR@10", "AP", "Bpref", "Judged@10",
                "ERR@20", "RBP(p=0.8)")
#: an ir_measures measure string: ``Name``, ``Name(params)``, with ``@k`` or without
IR_NAME = re.compile(r"^(?P<name>[A-Za-z]+)(\((?P<params>[^()]*)\))?(@(?P<k>\d+))?$")
_QUOTED_VALUE = re.compile(r"""=\s*(['"])([^'"]*)\1""")
# ir_measures' option spellings
_IR_KEYS = {"rel": "rel", "judged_only": "judged_only", "p": "p", "dcg": "gain"}
_IR_DCG = {"log2": "linear", "exp-log2": "exponential"}


def ir_params(params: str) -> str:
    """The parameters of an ir_measures string with their values unquoted: ir_measures writes a
    string value in quotes (``str(nDCG(dcg="exp-log2")@5)`` is ``nDCG(dcg='exp-log2')@5``), and
    both spellings are one measure.

    >>> ir_params("dcg='exp-log2'"), ir_params('dcg="log2"'), ir_params("rel=2")
    ('dcg=exp-log2', 'dcg=log2', 'rel=2')
    """
    return _QUOTED_VALUE.sub(r"=\2", params)


def _ir_suggestion(name: str) -> str | None:
    """The ir_measures string near ``name`` where ``name`` is written as ir_measures writes
    its strings (a capital letter in its name): spaces dropped, a misspelt name corrected."""
    text = re.sub(r"\s+", "", name)
    match = IR_NAME.match(text)
    if match is None or match.group("name").islower():
        return None
    written = match.group("name")
    if written not in IR_MEASURES:
        close = difflib.get_close_matches(written, list(IR_MEASURES), n=1, cutoff=0.7)
        if not close:
            return None
        text = close[0] + text[len(written):]
    if text == name.strip():
        return None
    try:
        _ir_measures_spec(text)
    except ValueError:
        return None
    return f"did you mean {text} (ir_measures' name)?"


def _ir_measures_spec(text: str) -> MetricSpec | None:
    """``text`` read as an ir_measures name (case as written), or None if it is not one."""
    match = IR_NAME.match(text)
    if match is None or match.group("name") not in IR_MEASURES:
        return None
    base, implied = IR_MEASURES[match.group("name")]
    measure = MEASURES[base]
    params = match.group("params")
    if params is not None:
        params = ir_params(params)
        # ir_measures' dcg=log2|exp-log2 is our gain=linear|exponential
        for spelled, gain in _IR_DCG.items():
            params = params.replace(f"dcg={spelled}", f"dcg={gain}")
    written = dict(_name_options(text, measure, params, _IR_KEYS))
    level = written.get("relevance_level")
    if level is not None and not isinstance(level, int):
        # (ir_measures reads rel as an integer grade, and refuses another)
        raise ValueError(f"metric {text!r}: `rel` is a whole grade above 0, got {level!r}")
    options = dict(implied)
    if base == "rbp" and "relevance_level" in written:
        options["gain"] = "binary"  # cwl_eval's RBP(rel=N): binary relevance at level N
    options.update(written)
    spec = _checked_spec(text, base, match.group("k"), None, tuple(sorted(options.items())))
    return replace(spec, ir_measures=True)


def refuse_ambiguous_recall(spec: MetricSpec, as_written: bool) -> None:
    """Refuse ir_measures' ``R@K`` (recall) where it may mean the hit rate: image-text,
    metric-learning and re-id papers write "R@K" for a relevant item in the top K. It is read as
    written (``as_written``) with judgments (``qrels=``) or under an IR or RAG protocol (the
    metrics' ``protocols.IR_PROTOCOLS``)."""
    if spec.base != "recall" or not re.fullmatch(r"R(\(.*\))?(@\d+)?", spec.name):
        return
    if as_written:
        return
    k = spec.k if spec.k is not None else "K"
    raise ValueError(
        f"unknown metric {spec.name!r}: did you mean hit_rate@{k} (\"R@K\" of image-text, "
        f"metric-learning and re-id papers: a relevant item in the top K) or recall@{k} (the IR "
        "measure: the share of relevant items in the top K)? ir_measures' R@K, recall, is read "
        "as written with qrels= or an IR protocol (trec_eval, beir, mteb, ...). Known names: "
        "hit_rate@K, recall@K, ..."
    )


def average_for(spec: MetricSpec, average: str) -> str:
    """The average ``spec`` is aggregated with under a metric's ``average``: the name's own when
    it fixes one; else ``average``, except that "micro" falls back to "macro" for a measure with
    no micro form (a per-query score, where summing numerators over denominators of 1 per query
    is the macro mean anyway)."""
    if spec.average is not None:
        return spec.average
    if spec.ir_measures:
        return "macro"  # (its provider's mean over the queries)
    if average == "micro" and spec.measure.micro is None:
        return "macro"
    return average


def divides_by_retrieved(names: Iterable[str]) -> bool:
    """Whether a measure among ``names`` divides by the distinct items a ranked list returned
    (precision and F1 without a cut-off, Judged@K): the lists' tables must then count them."""
    return any(
        spec.measure.retrieved == "always"
        or (spec.measure.retrieved == "whole" and spec.k is None)
        for spec in map(parse_metric, names)
    )


def judged_needed(names: Iterable[str], options: MeasureOptions | None = None) -> bool:
    """Whether a measure among ``names`` (computed under the metric's ``options``) reads the
    judged documents that are not relevant: Judged@K, bpref, RBP's residual or a condensed list
    (``judged_only``). The ranking then places them all (``judged_documents``).

    >>> judged_needed(["ndcg@10", "P(rel=2)@5"]), judged_needed(["ndcg@10", "Judged@10"])
    (False, True)
    """
    base_options = options if options is not None else MeasureOptions()
    for spec in map(parse_metric, names):
        if spec.measure.reads_judged or spec.options_over(base_options).judged_only:
            return True
    return False


def judged_queries_needed(
    names: Iterable[str], options: MeasureOptions | None = None
) -> bool:
    """Whether the ranking must place the judged documents that are not relevant for ``names``:
    a measure reads them (:func:`judged_needed`), or an ir_measures string tells the queries
    judged with grade <= 0 only (it scores them, as its provider does) from those not judged.

    >>> judged_queries_needed(["ndcg@10"]), judged_queries_needed(["nDCG@10"])
    (False, True)
    """
    names = list(names)
    return judged_needed(names, options) or any(parse_metric(n).ir_measures for n in names)


def cutoff_depth(names: Iterable[str]) -> int | None:
    """The ranking depth that serves all ``names`` without locating any query's best relevant
    item below it (a ranking with ``locate_first=False``): their largest cut-off, where each is
    a measure at an integer cut-off whose record reads no position below it
    (``Measure.within_cutoff``); None (the whole ranking) where one is not.

    >>> cutoff_depth(["ndcg@10", "recall@100", "mrr@10"]), cutoff_depth(["ndcg@10", "mrr"])
    (100, None)
    """
    depth = 1
    for name in names:
        spec = parse_metric(name)
        if not spec.measure.within_cutoff:
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
