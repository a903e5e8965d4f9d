"""The options of the measure layer as one object: :class:`MeasureOptions`.

Each option is declared once, in :data:`retrieval_metrics.functional.options.OPTIONS` (default,
allowed values, meaning); the defaults below and the checks of :class:`MeasureOptions` are read
from there. Inside the measure layer the options travel whole, as one :class:`MeasureOptions`;
the public functions still take them one keyword at a time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from retrieval_metrics.functional.options import OPTIONS, check_option

__all__ = ["MeasureOptions"]

# The declared defaults, for the signatures of the measure layer (each written once, in OPTIONS).
DEFAULT_TIES: str = OPTIONS["ties"].default
DEFAULT_EMPTY_QUERIES: str = OPTIONS["empty_queries"].default
DEFAULT_AVERAGE: str = OPTIONS["average"].default
DEFAULT_PERCENT: bool = OPTIONS["percent"].default
DEFAULT_AP: str = OPTIONS["ap"].default
DEFAULT_DIVISOR: str = OPTIONS["divisor"].default
DEFAULT_GAIN: str = OPTIONS["gain"].default
DEFAULT_MEDIAN: str = OPTIONS["median"].default
DEFAULT_RELEVANCE_LEVEL: float | None = OPTIONS["relevance_level"].default
DEFAULT_JUDGED_ONLY: bool = OPTIONS["judged_only"].default
DEFAULT_PERSISTENCE: float = OPTIONS["persistence"].default
DEFAULT_MAX_GRADE: float = OPTIONS["max_grade"].default


@dataclass(frozen=True)
class MeasureOptions:
    """How the measures are computed and aggregated (docs/definitions.md, "Options").

    Every field is checked against its declaration in
    :data:`~retrieval_metrics.functional.options.OPTIONS` when the object is made, with the
    same message as the functions taking the options one by one ("`ties` must be one of ...").

    >>> MeasureOptions(ties="optimistic").per_query_options()
    {'ties': 'optimistic', 'ap': 'step', 'divisor': 'relevant', 'gain': 'exponential'}
    """

    ties: str = DEFAULT_TIES
    empty_queries: str = DEFAULT_EMPTY_QUERIES
    average: str = DEFAULT_AVERAGE
    percent: bool = DEFAULT_PERCENT
    ap: str = DEFAULT_AP
    divisor: str = DEFAULT_DIVISOR
    gain: str = DEFAULT_GAIN
    median: str = DEFAULT_MEDIAN
    relevance_level: float | None = DEFAULT_RELEVANCE_LEVEL
    judged_only: bool = DEFAULT_JUDGED_ONLY
    persistence: float = DEFAULT_PERSISTENCE
    max_grade: float = DEFAULT_MAX_GRADE

    def __post_init__(self) -> None:
        # every declared option among the fields (a subclass may add others, MetricOptions'
        # protocol name)
        for f in fields(self):
            if f.name in OPTIONS:
                check_option(f.name, getattr(self, f.name))

    @classmethod
    def of(cls, options: MeasureOptions | None = None, **keywords: Any) -> MeasureOptions:
        """``options`` (the defaults when None) with ``keywords``, the options given one by one.

        A keyword that differs from its default and from ``options`` is refused (the option
        would be given twice); an unknown keyword is a TypeError, as in a signature.
        """
        unknown = sorted(set(keywords) - set(MEASURE_OPTION_NAMES))
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
        if options is None:
            return cls(**keywords)
        if not isinstance(options, MeasureOptions):
            raise TypeError(f"`options` must be a MeasureOptions, got {type(options).__name__}")
        for name, value in keywords.items():
            default = OPTIONS[name].default
            if _differs(value, default) and _differs(value, getattr(options, name)):
                raise ValueError(
                    f"`{name}` is given both as a keyword ({value!r}) and in `options` "
                    f"({getattr(options, name)!r}); give it once"
                )
        return options

    def replace(self, **changes: Any) -> MeasureOptions:
        """A copy with ``changes`` (checked like the constructor's arguments)."""
        return dataclasses.replace(self, **changes)

    def per_query_options(self) -> dict[str, Any]:
        """The options that shape per-query values (tie rule, AP kind, AP@K divisor, NDCG
        gain), as keywords of :func:`~retrieval_metrics.functional.measures.per_query_values`
        and :func:`~retrieval_metrics.functional.measures.query_parts_in_chunks`."""
        return {"ties": self.ties, "ap": self.ap, "divisor": self.divisor, "gain": self.gain}

    def aggregation_options(self) -> dict[str, Any]:
        """The options of the aggregation (empty queries, average, percent, median), as keywords
        of :func:`~retrieval_metrics.functional.measures.aggregate_query_parts`."""
        return {"empty_queries": self.empty_queries, "average": self.average,
                "percent": self.percent, "median": self.median}

    def as_dict(self) -> dict[str, Any]:
        """Every option by name, as keywords of
        :func:`~retrieval_metrics.functional.measures.retrieval_measures`."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


MEASURE_OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(MeasureOptions))


def _differs(a: Any, b: Any) -> bool:
    return type(a) is not type(b) or a != b
