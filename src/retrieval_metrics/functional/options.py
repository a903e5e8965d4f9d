"""Every option of the library, declared once: its name, allowed values, default and meaning.

The metric classes check their constructor arguments here, :mod:`retrieval_metrics.protocols`
takes its defaults from here, the functional signatures name these defaults, and the option
list of the documentation (docs/definitions.md, "Options") is this table, which the docs tests
compare with it. Add an option here first: scikit-learn's declared validation, without the
decorator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["OPTIONS", "Option", "check_option", "option_table_markdown"]


@dataclass(frozen=True)
class Option:
    """One option: ``allowed`` values (a tuple), or a ``valid`` test described by ``expected``.

    ``layer`` says who reads it: "ranking" (the engine and the relevance rules), "measures"
    (RankTable -> numbers) or "metrics" (the stateful classes' input forms).
    """

    name: str
    default: Any
    layer: str
    meaning: str
    allowed: tuple[Any, ...] | None = None
    valid: Callable[[Any], bool] | None = None
    expected: str = ""

    def check(self, value: Any) -> Any:
        """``value`` if it is allowed, else a ValueError naming the option and what it takes."""
        if self.allowed is not None:
            if value not in self.allowed:
                raise ValueError(f"`{self.name}` must be one of {self.allowed}, got {value!r}")
        elif self.valid is not None and not self.valid(value):
            raise ValueError(f"`{self.name}` must be {self.expected}, got {value!r}")
        return value

    def describe(self) -> str:
        if self.allowed is not None:
            return ", ".join(f"`{v!r}`" for v in self.allowed)
        return self.expected


def _non_negative_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _optional_int(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _optional_level(value: Any) -> bool:
    # (above 0: grades of 0 and below are judged not relevant at every level)
    return value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool)
        and math.isfinite(value) and value > 0
    )


def _persistence(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _budget(value: Any) -> bool:
    return value is None or (
        isinstance(value, int) and not isinstance(value, bool) and value >= 2**16
    )


OPTIONS: dict[str, Option] = {
    o.name: o
    for o in (
        Option("similarity", "cosine", "ranking", "how a query scores a gallery item",
               allowed=("cosine", "dot", "euclidean")),
        Option("relevance", "label", "ranking",
               "what makes an item relevant: the same label, a position within `radius`, or "
               "the judgments of `qrels=` (set by giving them)",
               allowed=("label", "radius", "qrels")),
        Option("radius", 25.0, "ranking", "metres for relevance='radius', inclusive",
               valid=_non_negative_number, expected="a non-negative number"),
        Option("ignore_label", None, "ranking",
               "gallery items with this label are removed from every ranking",
               valid=_optional_int, expected="an int or None"),
        Option("ignore_identical_ids", None, "ranking",
               "with qrels=: whether the document whose id is the query's id is left out of "
               "its ranking; None leaves it out (and its judgment) and refuses integer ids "
               "that collide; True, BEIR's and MTEB's rule, keeps its judgment (relevant, "
               "never retrieved)",
               allowed=(None, True, False)),
        Option("memory_budget", None, "ranking",
               "bytes of scratch memory the ranking may use; None: 256 MiB on the CPU, on an "
               "accelerator a quarter of its free memory, at most 32 GiB",
               valid=_budget, expected="an int >= 65536 bytes or None"),
        Option("ties", "expected", "measures", "how equal scores are ordered: averaged over "
               "every order, relevant first or last, or by ascending gallery id (a ranking "
               "of embeddings with gallery ids: sentence-transformers' order)",
               allowed=("expected", "optimistic", "pessimistic", "id")),
        Option("empty_queries", "skip", "measures", "queries with no relevant item: left out, "
               "scored 0, refused, or left out where a measure divides by zero ('nan', ragas)",
               allowed=("skip", "zero", "error", "nan")),
        Option("percent", False, "measures", "report fractions as percentages",
               valid=lambda value: isinstance(value, bool), expected="a bool"),
        Option("average", "macro", "measures", "how per-query values are averaged",
               allowed=("macro", "micro", "class")),
        Option("ap", "step", "measures", "average precision: step or trapezoid",
               allowed=("step", "trapezoid")),
        Option("divisor", "relevant", "measures", "what AP divides by: m_q, min(m_q, K) (AP@K) or "
               "the relevant items retrieved", allowed=("relevant", "min", "retrieved")),
        Option("gain", "exponential", "measures", "NDCG gain: 2^g - 1, g, or 1 for every "
               "relevant item", allowed=("exponential", "linear", "binary")),
        Option("median", "vsepp", "measures", "median rank: floor(median(r - 1)) + 1 or the "
               "plain median", allowed=("vsepp", "plain")),
        Option("relevance_level", None, "measures", "the lowest grade that is relevant "
               "(trec_eval -l, ir_measures' rel=; in a name: precision(rel=2)@5); grades below "
               "it are judged not relevant. None: every grade > 0",
               valid=_optional_level, expected="a number above 0, or None"),
        Option("judged_only", False, "measures", "score the condensed list: unjudged "
               "documents leave the ranking first (trec_eval -J; in a name: "
               "ndcg(judged_only=true)@10)", valid=lambda value: isinstance(value, bool),
               expected="a bool"),
        Option("persistence", 0.8, "measures", "RBP's persistence p (in a name: rbp(p=0.9))",
               valid=_persistence, expected="a number in (0, 1)"),
        Option("max_grade", 4, "measures", "ERR's highest grade: R = (2^g - 1) / 2^max_grade "
               "(in a name: err(max_grade=3)@20)", valid=_positive_number,
               expected="a positive number"),
        Option("all_skipped", "nan", "measures",
               "the value when empty_queries='skip' leaves no query", allowed=("nan", "zero")),
        Option("nonpositive", "hit", "metrics", "whether a relevant item scored <= 0 can be a "
               "hit (preds/target/indexes form)", allowed=("hit", "miss")),
        Option("duplicates", "first", "metrics", "a ranked list that returns an id twice: "
               "counted once at its first position, refused, or counted once with a warning "
               "when the id is relevant", allowed=("first", "error", "warn")),
        Option("empty_lists", "score", "metrics", "a ranked list that returns nothing: scored "
               "(every relevant id missed) or refused", allowed=("score", "error")),
    )
}
"""Every option of the library, by name: its default, the layer that reads it, its meaning and the
values it takes (docs/definitions.md's option table is this declaration)."""


def check_option(name: str, value: Any) -> Any:
    """``OPTIONS[name].check(value)``."""
    return OPTIONS[name].check(value)


def option_table_markdown() -> str:
    """The option list of the documentation, as a markdown table."""
    rows = ["| option | default | allowed | meaning |", "|---|---|---|---|"]
    rows += [
        f"| `{o.name}` | `{o.default!r}` | {o.describe()} | {o.meaning} |"
        for o in OPTIONS.values()
    ]
    return "\n".join(rows)
