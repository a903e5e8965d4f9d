"""The metric layer's options as one object: :class:`MetricOptions`, built once per metric.

Each option is declared once, in :data:`retrieval_metrics.functional.options.OPTIONS` (name,
default, allowed values, meaning); a protocol may fix some (``metrics/protocols.py``). A metric
builds its :class:`MetricOptions` when it is made, after the protocol is applied, and every
layer below takes its own options object whole from it: the measures' :class:`MeasureOptions`
(made once, :attr:`MetricOptions.measures`) and the ranking's ``RankingOptions``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from retrieval_metrics.functional.measures import MeasureOptions
from retrieval_metrics.functional.measures.options import MEASURE_OPTION_NAMES
from retrieval_metrics.functional.options import OPTIONS
from retrieval_metrics.functional.primitives import fingerprint
from retrieval_metrics.metrics.protocols import apply_protocol, protocol_name

__all__ = ["MetricOptions"]


@dataclass(frozen=True)
class MetricOptions(MeasureOptions):
    """Every option of a metric, each checked against its declaration once, when made.

    The measures' options are inherited (a measure option is one field of
    :class:`MeasureOptions`, and then the metrics have it too); the fields below are the
    ranking's and the input forms'. Build it with :meth:`build` (a protocol's values applied,
    the defaults filled in); a test holds the fields equal to the declared options.

    >>> options = MetricOptions.build("vsepp", {"ties": None})
    >>> options.similarity, options.median, options.measures.ties
    ('cosine', 'vsepp', 'expected')
    """

    similarity: str = OPTIONS["similarity"].default
    relevance: str = OPTIONS["relevance"].default
    radius: float = OPTIONS["radius"].default
    ignore_label: int | None = OPTIONS["ignore_label"].default
    ignore_identical_ids: bool | None = OPTIONS["ignore_identical_ids"].default
    memory_budget: int | None = OPTIONS["memory_budget"].default
    all_skipped: str = OPTIONS["all_skipped"].default
    nonpositive: str = OPTIONS["nonpositive"].default
    duplicates: str = OPTIONS["duplicates"].default
    empty_lists: str = OPTIONS["empty_lists"].default
    protocol: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "radius", float(self.radius))

    @classmethod
    def build(cls, protocol: str | None, given: dict[str, Any]) -> MetricOptions:
        """The options of a metric made with ``protocol`` and the options ``given`` (None, or
        left out: the protocol's value, else the declared default). An option that disagrees
        with the protocol is refused by name, as is an unknown one."""
        unknown = sorted(set(given) - set(OPTIONS))
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}")
        return cls(protocol=protocol_name(protocol), **apply_protocol(protocol, given))

    @cached_property
    def fingerprint(self) -> int:
        """A hash of every option that decides a value (all but ``memory_budget``, which
        bounds the work's memory only): processes that rank their own queries or shards and
        merge the results must agree on it."""
        return fingerprint(
            repr((f.name, getattr(self, f.name)))
            for f in fields(self) if f.name != "memory_budget"
        )

    @cached_property
    def measures(self) -> MeasureOptions:
        """The measure layer's options alone, made once."""
        return MeasureOptions(**{name: getattr(self, name) for name in MEASURE_OPTION_NAMES})
