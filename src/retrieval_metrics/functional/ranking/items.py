"""What a ranking of embeddings is given for each side: its items and their keys.

:class:`Items` bundles one side's per-item tensors as the metric classes hold them (embeddings,
labels, sample ids, cameras, positions); :class:`Keys` is the same per-item keys without the
embeddings, as any caller gives them (tensors, arrays or lists, checked when ranked). The keyword
functions (``rank_embeddings(query_labels=..., gallery_ids=...)``) make one :class:`Keys` per
side at their boundary; below it, the keys of a side travel as one record.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import is_identity, to_device, to_host
from retrieval_metrics.functional.ranking.row_batches import RowBatches

__all__ = ["ITEM_FIELDS", "KEY_FIELDS", "Items", "Keys", "keys_on_host"]

#: the per-item tensors a side may carry, embeddings first
ITEM_FIELDS = ("emb", "labels", "ids", "cameras", "positions", "order")
#: the per-item keys: every item field but the embeddings
KEY_FIELDS = ITEM_FIELDS[1:]


@dataclass(frozen=True)
class Keys:
    """One side's per-item keys: ``labels`` (relevance by label, classes), ``ids`` (sample ids:
    an item never retrieves its own id), ``cameras`` (re-identification: same label and camera
    excluded), ``positions`` (``(n, P)``, relevance by radius) and ``order`` (a gallery's ids
    as given, or their rows of ``tie_order.id_order_rows``: tied items in ascending order of
    them, ``ties="id"``). Each is None or holds one entry per item, in any form the keyword
    functions take; they are checked when ranked."""

    labels: Any = None
    ids: Any = None
    cameras: Any = None
    positions: Any = None
    order: Any = None

    def filled_from(self, other: Keys) -> Keys:
        """These keys, each one missing here taken from ``other`` (a same-source gallery takes
        the queries' keys)."""
        return Keys(
            **{
                name: getattr(other, name) if getattr(self, name) is None else getattr(self, name)
                for name in KEY_FIELDS
            }
        )


@dataclass(frozen=True)
class Items:
    """One side's items: ``emb`` ``(n, D)`` and optional per-item ``labels``, ``ids``,
    ``cameras`` (int64), ``positions`` (``(n, P)`` float64) and ``order`` (``(n, 64)`` uint8:
    the ids as given, ordered for ``ties="id"``). A gallery's ``emb`` may be the batches it
    was updated in (:class:`RowBatches`), which the ranking reads without joining them."""

    emb: Tensor | RowBatches
    labels: Tensor | None = None
    ids: Tensor | None = None
    cameras: Tensor | None = None
    positions: Tensor | None = None
    order: Tensor | None = None

    def __len__(self) -> int:
        return int(self.emb.shape[0])

    @property
    def keys(self) -> Keys:
        """The per-item keys of these items."""
        return Keys(**{name: getattr(self, name) for name in KEY_FIELDS})

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
            if index.dtype == torch.bool:
                return value[to_device(index, value.device)]
            # (index_select: advanced indexing copies rows several times slower)
            return value.index_select(0, to_device(index, value.device))

        return Items(**{f.name: pick(getattr(self, f.name)) for f in fields(self)})

    def keys_on_host(self) -> Items:
        """These items with their keys (every field but ``emb``) on the host, read from a device
        in one copy: the relevance sets are built on the host, so a ranking in chunks of
        queries reads them once, not once a chunk."""
        return keys_on_host(self)[0]

    def with_ids(self, ids: Tensor) -> Items:
        return replace(self, ids=ids)


def keys_on_host(*sides: Items) -> tuple[Items, ...]:
    """Each of ``sides`` with its keys (every field but ``emb``) on the host, all of them read
    from a device in one copy (:func:`~retrieval_metrics.functional.primitives.to_host`): the
    relevance sets are built on the host, and each key read by itself is a wait apiece."""
    names = [
        [f.name for f in fields(side) if f.name != "emb" and getattr(side, f.name) is not None]
        for side in sides
    ]
    read = iter(to_host([getattr(side, n) for side, side_names in zip(sides, names, strict=True)
                         for n in side_names]))
    return tuple(
        replace(side, **{n: next(read) for n in side_names})
        for side, side_names in zip(sides, names, strict=True)
    )
