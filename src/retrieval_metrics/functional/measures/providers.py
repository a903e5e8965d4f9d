"""Which of ir_measures' providers computes each of its measure strings, and how that provider
orders tied scores: the conventions an ir_measures string carries beyond its formula.

ir_measures 0.4.3 hands each measure to the first provider of its default pipeline that
supports it (``ir_measures.DefaultPipeline``: pytrec_eval, cwl_eval, ..., judged, msmarco,
gdeval); ``RBP(p=P)`` without ``rel`` is supported by none of them (its ``calc_aggregate``
refuses it) and is trectools' (``ir_measures.trectools``), which ir_measures ships outside the
pipeline. Each provider ranks a scored run its own way:

* pytrec_eval (trec_eval 9): scores rounded to float32, ties by document id in descending byte
  order;
* gdeval: scores as written (float64), ties by document id descending;
* judged and msmarco: ``sorted(..., key=(-score, doc_id))``, ties by document id ascending;
* cwl_eval: a stable sort by decreasing score, ties in the run's order (the order its
  documents were given);
* trectools: ties in the run's order (a stable sort), then each document of the top K takes
  the mean of the weights of its tie group's positions within the top K (``average_ties``).
"""

from __future__ import annotations

from dataclasses import dataclass

from retrieval_metrics.functional.measures.names import IR_MEASURES
from retrieval_metrics.functional.measures.parsing import IR_NAME, ir_params

__all__ = ["IR_PROVIDERS", "Provider", "provider_of"]


@dataclass(frozen=True)
class Provider:
    """One ir_measures provider and its tie rule.

    Attributes:
        name: ir_measures' name of the provider.
        order: how tied scores are ordered: "id_descending", "id_ascending" or "input" (the
            run's order of its documents).
        float32: scores are rounded to float32 before ties are found (trec_eval 9's ``float``).
        averaged: within the top K, each tie group's documents share the mean weight of the
            group's positions there (trectools' ``average_ties``); the order places the group's
            documents in or out of the top K.
        depth: the documents a query it reads (cwl_eval: 1,000), None for all.
        pipeline: whether ``ir_measures.DefaultPipeline`` (``ir_measures.calc_aggregate``,
            ``iter_calc``) runs it for its strings; trectools is called on its own.
    """

    name: str
    order: str
    float32: bool = False
    averaged: bool = False
    depth: int | None = None
    pipeline: bool = True


IR_PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider("pytrec_eval", "id_descending", float32=True),
        Provider("gdeval", "id_descending"),
        Provider("judged", "id_ascending"),
        Provider("msmarco", "id_ascending"),
        Provider("cwl_eval", "input", depth=1000),
        Provider("trectools", "input", averaged=True, pipeline=False),
        Provider("ranx", "unstable"),
    )
}
"""The providers of the ir_measures strings the library accepts, by name."""



def provider_of(name: str) -> Provider:
    """The provider ir_measures computes the measure string ``name`` with (as written, as
    :func:`~retrieval_metrics.functional.measures.parse_metric` reads it).

    >>> provider_of("nDCG@10").name, provider_of("Judged@10").name, provider_of("RR@10").name
    ('pytrec_eval', 'judged', 'msmarco')
    >>> provider_of("RBP(p=0.8)").name, provider_of("RBP(p=0.8,rel=2)").name
    ('trectools', 'cwl_eval')
    """
    match = IR_NAME.match(name.strip())
    if match is None or match.group("name") not in IR_MEASURES:
        raise ValueError(f"{name!r} is not an ir_measures measure string")
    base, k = match.group("name"), match.group("k")
    params = ir_params(match.group("params") or "").replace(" ", "")
    keys = {part.partition("=")[0] for part in params.split(",") if part}
    if _no_provider(base, k is not None, keys, params):
        raise ValueError(
            f"ir_measures 0.4.3 has no provider that computes {name!r}: its pipeline and "
            "trectools refuse it (the library computes it as its definition says)"
        )
    if base == "Judged":
        return IR_PROVIDERS["judged"]
    if base == "nDCG" and "dcg=exp-log2" in params and k is None:
        return IR_PROVIDERS["ranx"]  # the one provider of the pipeline without a cut-off
    if base == "ERR" or (base == "nDCG" and "dcg=exp-log2" in params):
        # pytrec_eval's nDCG is log2 only: ir_measures hands exp-log2 (with a cut-off) to gdeval
        return IR_PROVIDERS["gdeval"]
    if base == "RR" and k is not None:
        return IR_PROVIDERS["msmarco"]  # pytrec_eval and cwl_eval take RR without a cut-off
    if base == "RBP":
        return IR_PROVIDERS["cwl_eval" if "rel" in keys else "trectools"]
    return IR_PROVIDERS["pytrec_eval"]


def _no_provider(base: str, cut: bool, keys: set[str], params: str) -> bool:
    """Whether ir_measures 0.4.3 computes no value for the string (every provider refuses it)."""
    if not cut and base in ("P", "R", "Success", "ERR"):
        return True  # pytrec_eval's P, recall, success and gdeval's ERR need a cut-off
    if "dcg" in keys and base != "nDCG":
        return True  # dcg= is nDCG's option alone
    if "judged_only" in keys and (base in ("ERR", "RBP") or (base == "RR" and cut)):
        return True
    return base == "RBP" and cut and "rel" in keys  # cwl_eval's RBP takes no cut-off
