"""What the ranking of embeddings is given: the items of each side and one object of options.

:class:`Items` bundles one side's per-item tensors (embeddings, labels, sample ids, cameras,
positions); :class:`RankingOptions` carries every option of the ranking, so that callers hand one
object around instead of a dozen keywords, and :meth:`RankingOptions.rank` is the one place where
they become :func:`~retrieval_metrics.functional.ranking.rank_embeddings`' keywords.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from torch import Tensor

from retrieval_metrics.functional.primitives import is_identity
from retrieval_metrics.functional.ranking import (
    DEFAULT_MEMORY_BUDGET,
    Exchange,
    rank_embeddings,
    rank_embeddings_sharded,
    rank_two_ways,
)
from retrieval_metrics.functional.table import RankTable

__all__ = ["ITEM_FIELDS", "Items", "RankingOptions"]

#: the per-item tensors a side may carry, embeddings first
ITEM_FIELDS = ("emb", "labels", "ids", "cameras", "positions")


@dataclass(frozen=True)
class Items:
    """One side's items: ``emb`` ``(n, D)`` and optional per-item ``labels``, ``ids``,
    ``cameras`` (int64) and ``positions`` (``(n, P)`` float64)."""

    emb: Tensor
    labels: Tensor | None = None
    ids: Tensor | None = None
    cameras: Tensor | None = None
    positions: Tensor | None = None

    def __len__(self) -> int:
        return int(self.emb.shape[0])

    def select(self, index: Tensor | slice) -> Items:
        """The items at ``index`` (indices, a mask or a slice), every field alike.

        An index that keeps every item in place returns these items, not a copy of the
        embeddings (gathered states are usually already deduplicated and in order)."""
        if isinstance(index, Tensor) and is_identity(index, len(self)):
            return self

        def pick(value: Tensor | None) -> Tensor | None:
            if value is None:
                return None
            if isinstance(index, slice):
                return value[index]
            return value[index.to(value.device)]

        return Items(**{f.name: pick(getattr(self, f.name)) for f in fields(self)})

    def with_ids(self, ids: Tensor) -> Items:
        return replace(self, ids=ids)


@dataclass(frozen=True)
class RankingOptions:
    """Every option of the ranking of embeddings (see ``rank_embeddings``)."""

    relevance: str = "label"
    radius: float = 25.0
    ignore_label: int | None = None
    similarity: str = "cosine"
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    depth: int | None = None
    cover_relevant: bool = False

    def rank(
        self, queries: Items, gallery: Items | None, exchange: Exchange | None = None
    ) -> RankTable:
        """Rank ``gallery`` for every query; self-exclusion and relevance by the items' ids.

        ``gallery=None`` is same source: the queries ranked against themselves, each never
        retrieving itself. Stated by the caller, never inferred from the two sides holding the
        same tensors: it is what lets the ranking compute each block pair of the symmetric score
        matrix once for both of its sides. ``exchange``: the processes that all hold these items
        share the ranking out (see ``rank_embeddings``)."""
        if gallery is None:
            keywords = {f"query_{n}": getattr(queries, n) for n in ITEM_FIELDS[1:]}
            query, gallery_emb = queries.emb, None
        else:
            keywords = _keywords(queries, gallery)
            query, gallery_emb = queries.emb.to(gallery.emb.device), gallery.emb
        return rank_embeddings(
            query,
            gallery_emb,
            **keywords,
            relevance=self.relevance,
            radius=self.radius,
            ignore_label=self.ignore_label,
            similarity=self.similarity,
            memory_budget=self.memory_budget,
            depth=self.depth,
            cover_relevant=self.cover_relevant,
            exchange=exchange,
        )

    def rank_two_ways(self, a: Items, b: Items) -> tuple[RankTable, RankTable]:
        """``b`` ranked for every item of ``a`` and ``a`` for every item of ``b`` (relevant: the
        same label), both from one pass over the products."""
        return rank_two_ways(
            a.emb,
            b.emb.to(a.emb.device),
            a_labels=a.labels,
            b_labels=b.labels,
            similarity=self.similarity,
            depth=self.depth,
            cover_relevant=self.cover_relevant,
            memory_budget=self.memory_budget,
        )

    def rank_sharded(self, queries: Items, shard: Items, exchange: Exchange) -> RankTable:
        """Rank every query against a gallery split over processes (this one holds ``shard``)."""
        return rank_embeddings_sharded(
            queries.emb,
            shard.emb,
            exchange,
            **_keywords(queries, shard),
            relevance=self.relevance,
            radius=self.radius,
            ignore_label=self.ignore_label,
            similarity=self.similarity,
            memory_budget=self.memory_budget,
        )


def _keywords(queries: Items, gallery: Items) -> dict[str, Any]:
    out = {}
    for name in ITEM_FIELDS[1:]:
        q, g = getattr(queries, name), getattr(gallery, name)
        if q is not None and g is None and len(gallery) == 0:
            # an empty gallery shard still needs empty per-item tensors where queries have them
            g = q[:0]
        out[f"query_{name}"], out[f"gallery_{name}"] = q, g
    return out

