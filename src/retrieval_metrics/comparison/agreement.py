"""What two or more metric objects must share before their per-query values are paired: the same
measures' options, the same directions and the same queries, query i the same query in each
(by its id where the metrics were given ``ids=``).
:func:`~retrieval_metrics.comparison.pairwise.compare` and
:func:`~retrieval_metrics.comparison.systems.compare_systems` both check through here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

import torch

from retrieval_metrics.functional.table import RankTable
from retrieval_metrics.metrics.base import RetrievalMetricBase

__all__ = ["same_options", "same_queries"]

#: options that change no per-query value: the scratch memory, the unit (checked on its own,
#: or converted), the protocol's name (its options are compared one by one)
_NOT_COMPARED = ("memory_budget", "percent", "protocol")


def same_options(metrics: Sequence[RetrievalMetricBase], labels: list[str]) -> None:
    """Refuse metrics whose options that decide a value differ (``gain``, ``ties``,
    ``empty_queries``, ...): their per-query values would differ with no system behind it."""
    percent = [bool(metric.percent) for metric in metrics]
    if len(set(percent)) > 1:
        raise ValueError(
            "the metrics must report in the same unit: `percent` is "
            f"{dict(zip(labels, percent, strict=True))}"
        )
    first = metrics[0].options
    for label, metric in zip(labels[1:], metrics[1:], strict=True):
        differ = [
            f"{f.name} {getattr(first, f.name)!r} and {getattr(metric.options, f.name)!r}"
            for f in fields(first)
            if f.name not in _NOT_COMPARED
            and getattr(first, f.name) != getattr(metric.options, f.name)
        ]
        if differ:
            raise ValueError(
                f"{labels[0]!r} and {label!r} were made with different options ("
                + "; ".join(differ) + "): the same options in every metric compare the systems, "
                "not the options"
            )


def same_queries(fields_of: list[dict[str, RankTable]], labels: list[str]) -> None:
    """Refuse metrics that rank in other directions or did not score the same queries in the
    same order: as many, with as many relevant items each, and, where ids were given, query i
    of the same id in each (a metric given ``ids=`` and one without are refused alike).
    ``fields_of``: each metric's rank tables (or their query fields) by direction."""
    first = fields_of[0]
    for label, own in zip(labels[1:], fields_of[1:], strict=True):
        if list(own) != list(first):
            raise ValueError(
                f"the metrics rank in different directions: {labels[0]!r} in "
                f"{[k.rstrip('/') or 'one' for k in first]}, {label!r} in "
                f"{[k.rstrip('/') or 'one' for k in own]}"
            )
        for key, table in own.items():
            _same_query_fields(first[key], table, (labels[0], label), key)


def _same_query_fields(
    first: RankTable, table: RankTable, names: tuple[str, str], key: str
) -> None:
    where = f" in {key.rstrip('/')}" if key else ""
    a, b = names
    if table.num_queries != first.num_queries or not bool(
        (table.num_relevant.cpu() == first.num_relevant.cpu()).all()
    ):
        raise ValueError(
            f"{a!r} and {b!r} were not scored on the same queries ({first.num_queries} and "
            f"{table.num_queries} queries{where}, or different numbers of relevant items per "
            "query); update every metric with the same queries, with ids= or in the same order"
        )
    ids = first.query_id, table.query_id
    if (ids[0] is None) != (ids[1] is None):
        given = a if ids[0] is not None else b
        raise ValueError(
            f"{given!r} was given query ids and the other not{where}: its queries cannot be "
            "paired with the other's by id; give every metric ids= (or none)"
        )
    if ids[0] is not None and ids[1] is not None:
        differ = torch.nonzero(ids[0].cpu() != ids[1].cpu()).flatten()
        if differ.numel():
            raise ValueError(
                f"{a!r} and {b!r} were not scored on the same queries{where}: "
                f"{differ.numel()} of {first.num_queries} queries have other ids at the same "
                f"position (the first at position {int(differ[0])}); update every metric with "
                "the same query ids"
            )


