"""Relevance rules and exclusions: who is correct for a query, and who is left out of its ranking.

Everything the ranking needs to know about relevance is decided here and nowhere else, behind one
front door, :func:`build_relevance`. The result is a :class:`Relevance` (``sets.py``): for every
query, the gallery items that are relevant to it and the gallery items that are excluded from its
ranking (they neither help nor compete), both as compressed sparse rows (CSR) over gallery
indices, plus the gallery items that are removed for every query (the ignore label). The parts:

- ``rules.py``: ``"label"``, ``"radius"`` and ``"ids"`` (listed relevant ids), one function each;
- ``judged.py``: ``"qrels"``, relevance by judgments read by the items' ids;
- ``exclusions.py``: the query itself, the same label and camera, the ignore label.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from retrieval_metrics.functional.csr import csr_from_ranges
from retrieval_metrics.functional.ranking.items import Keys
from retrieval_metrics.functional.ranking.relevance.exclusions import (
    check_exclusions,
    excluded_pairs,
    identical_ids_csr,
    leaves_out_identical_ids,
    left_out_of_lists,
    with_exclusions,
)
from retrieval_metrics.functional.ranking.relevance.judged import judged_relevance
from retrieval_metrics.functional.ranking.relevance.rules import RULES
from retrieval_metrics.functional.ranking.relevance.sets import Relevance
from retrieval_metrics.functional.ranking.settings import RankingSettings

__all__ = [
    "Relevance", "build_relevance", "csr_from_ranges", "excluded_pairs", "identical_ids_csr",
    "leaves_out_identical_ids", "left_out_of_lists",
]


def build_relevance(
    queries: Keys,
    gallery: Keys,
    sizes: tuple[int, int],
    settings: RankingSettings,
    *,
    same_source: bool = False,
    relevant_ids: Sequence[Any] | None = None,
) -> Relevance:
    """Decide every query's relevant and excluded gallery items (docs/definitions.md, Terms).

    ``queries`` and ``gallery``: each side's keys as host tensors (labels and ids as the int64
    codes of :func:`~retrieval_metrics.functional.ranking.labels.encode_labels` and
    ``label_codes``; ``(n, P)`` positions); ``sizes``: (queries, gallery items). The rule is
    ``settings.relevance``: ``"label"`` (equal labels), ``"radius"`` (a position within
    ``settings.radius``, inclusive), ``"ids"`` (``relevant_ids[q]``: gallery ids, or a dict
    id -> grade) or ``"qrels"`` (``settings.qrels``, read by the items' ids; their documents
    missing from the gallery are relevant and never retrieved). A gallery item whose id equals
    the query's is the query itself and is excluded (unless ``ignore_identical_ids=False``);
    with ``same_source`` and no ids, the item at the query's own position is; with cameras,
    the items of the query's label and camera; the ignore label's items are removed for every
    query.

    >>> import torch
    >>> labels = torch.tensor([0, 0, 1, 1])
    >>> rel = build_relevance(Keys(labels=labels), Keys(labels=labels), (4, 4),
    ...                       RankingSettings(), same_source=True)
    >>> rel.relevant_index.tolist(), rel.excluded_index.tolist()
    ([1, 0, 3, 2], [0, 1, 2, 3])
    """
    check_exclusions(queries, gallery, settings, same_source)
    if settings.relevance == "qrels":
        return judged_relevance(queries, gallery, sizes, settings)
    relevant = RULES[settings.relevance](queries, gallery, sizes, settings, relevant_ids)
    return with_exclusions(relevant, queries, gallery, sizes, settings, same_source)
