"""Named protocols: a field's official evaluation is one argument away (the documentation's Named
protocols page, docs/protocols.md).

``protocol="NAME"`` on any metric sets the options of :data:`PROTOCOLS`. An option you pass
yourself must agree with the protocol (otherwise the metric raises), so a protocol never
silently changes what you asked for. :func:`trec_run_to_lists` (trec_eval's tie order) and
:func:`ann_benchmarks_ranks` (ann-benchmarks' distance-threshold recall) turn two protocols'
inputs into the library's input forms.

This module is the public face: the policy lives with the metric classes that read it
(``retrieval_metrics.metrics.protocols``), the converters with the file formats
(``retrieval_metrics.formats.converters``); each name is imported when first read.
"""

from typing import TYPE_CHECKING

from retrieval_metrics.functional._lazy import lazy_names

if TYPE_CHECKING:
    from retrieval_metrics.formats.converters import ann_benchmarks_ranks, trec_run_to_lists
    from retrieval_metrics.metrics.protocols import (
        DEFAULTS,
        EVALUATOR_NAMES,
        EVALUATOR_REPORTS,
        NOT_GIVEN,
        PROTOCOL_DEFAULTS,
        PROTOCOLS,
        RUN_DEPTH,
        NotGiven,
        apply_protocol,
        library_names,
        protocol_name,
    )

__getattr__, __dir__ = lazy_names(__name__, {
    "retrieval_metrics.formats.converters": ["ann_benchmarks_ranks", "trec_run_to_lists"],
    "retrieval_metrics.metrics.protocols": [
        "DEFAULTS", "EVALUATOR_NAMES", "EVALUATOR_REPORTS", "NOT_GIVEN", "PROTOCOLS",
        "PROTOCOL_DEFAULTS", "RUN_DEPTH",
        "NotGiven", "apply_protocol", "library_names", "protocol_name",
    ],
})

__all__ = [
    "DEFAULTS",
    "EVALUATOR_NAMES",
    "EVALUATOR_REPORTS",
    "NOT_GIVEN",
    "PROTOCOLS",
    "PROTOCOL_DEFAULTS",
    "RUN_DEPTH",
    "NotGiven",
    "ann_benchmarks_ranks",
    "apply_protocol",
    "library_names",
    "protocol_name",
    "trec_run_to_lists",
]
