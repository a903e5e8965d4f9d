"""The relevance rules of a ranking of embeddings, one function each: ``"label"`` (equal labels),
``"radius"`` (a position within the radius, inclusive) and ``"ids"`` (each query's relevant
gallery ids, listed). Each reads the two sides' keys and returns CSR rows of relevant gallery
items, sorted ascending within a query, with their grades where the rule has any. Judgments
(``"qrels"``) are :mod:`.judged`'s."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.csr import csr_from_ranges, ptr_from_counts
from retrieval_metrics.functional.primitives import all_finite, in_float64
from retrieval_metrics.functional.ranking.items import Keys
from retrieval_metrics.functional.ranking.labels import canonical_id, label_codes
from retrieval_metrics.functional.ranking.settings import RankingSettings

__all__ = ["RULES", "as_positions", "label_csr"]

#: (relevant rows, relevant items, grades or None)
RelevantRows = tuple[Tensor, Tensor, "Tensor | None"]


def label_relevant(
    queries: Keys, gallery: Keys, sizes: tuple[int, int], settings: RankingSettings,
    relevant_ids: Sequence[Any] | None,
) -> RelevantRows:
    if queries.labels is None or gallery.labels is None:
        raise ValueError('relevance="label" needs `labels` for queries and gallery items')
    return (*label_csr(queries.labels, gallery.labels), None)


def radius_relevant(
    queries: Keys, gallery: Keys, sizes: tuple[int, int], settings: RankingSettings,
    relevant_ids: Sequence[Any] | None,
) -> RelevantRows:
    if queries.positions is None or gallery.positions is None:
        raise ValueError('relevance="radius" needs `positions` for queries and gallery items')
    radius = settings.radius
    if radius is None or not radius >= 0:
        raise ValueError(f"`radius` must be a non-negative number of metres, got {radius!r}")
    widths = queries.positions.shape[1], gallery.positions.shape[1]
    if widths[0] != widths[1]:
        raise ValueError(
            f"`positions` of queries and gallery items must have the same number of "
            f"coordinates, got {widths[0]} and {widths[1]}"
        )
    return (*_radius_csr(queries.positions, gallery.positions, float(radius)), None)


def ids_relevant(
    queries: Keys, gallery: Keys, sizes: tuple[int, int], settings: RankingSettings,
    relevant_ids: Sequence[Any] | None,
) -> RelevantRows:
    num_queries, num_gallery = sizes
    if relevant_ids is None:
        raise ValueError('relevance="ids" needs `relevant_ids`, one collection of ids per query')
    if isinstance(relevant_ids, Mapping):
        raise ValueError(
            '`relevant_ids` must list each query\'s relevant ids (one collection per query); '
            'judgments by query id (qrels, a mapping) are relevance="qrels" with `qrels=`'
        )
    if len(relevant_ids) != num_queries:
        raise ValueError(
            f"`relevant_ids` must have one entry per query ({num_queries}), "
            f"got {len(relevant_ids)}"
        )
    return _ids_csr(relevant_ids, gallery.ids, num_gallery)


#: each rule by its name in ``RankingSettings.relevance``
RULES: dict[str, Callable[..., RelevantRows]] = {
    "label": label_relevant,
    "radius": radius_relevant,
    "ids": ids_relevant,
}


_LOW_PRECISION = (torch.float16, torch.bfloat16, torch.float32, np.float16, np.float32)


def as_positions(
    name: str, positions: Any, n: int, scan: bool = True, stacklevel: int = 2
) -> Tensor:
    """Positions as the radius rule reads them: float64 ``(n, P)``, finite.

    Python numbers are read as the doubles they are (``torch.as_tensor`` would make float32 of
    them); positions that arrive in fewer than 64 bits warn, since a float32 UTM easting keeps
    a few centimetres, enough to move an item across the radius. ``scan=False`` leaves the
    NaN and infinity scan to the caller.
    """
    if getattr(positions, "dtype", None) in _LOW_PRECISION:
        warnings.warn(
            f"`{name}` arrived as {positions.dtype}, which keeps about 7 significant digits "
            "(UTM eastings to a few centimetres, enough to move an item across the radius); "
            "pass float64 positions",
            UserWarning,
            stacklevel=stacklevel + 1,
        )
    try:
        if isinstance(positions, Tensor):  # (on the host where the device has no float64)
            pos = in_float64(positions)
        else:
            pos = torch.as_tensor(positions, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"`{name}` must be numbers, an ({n}, P) array of coordinates, got "
            f"{type(positions).__name__} ({err})"
        ) from None
    if pos.dim() != 2 or pos.shape[0] != n:
        raise ValueError(f"`{name}` must have shape ({n}, P), got {tuple(pos.shape)}")
    if scan and not all_finite(pos):
        raise ValueError(f"`{name}` contains NaN or infinite values")
    return pos


def label_csr(query_labels: Tensor, gallery_labels: Tensor) -> tuple[Tensor, Tensor]:
    order = torch.sort(gallery_labels, stable=True).indices
    sorted_labels = gallery_labels[order]
    # (labels sliced with a step, a view: searchsorted warns and copies them twice)
    query_labels = query_labels.contiguous()
    start = torch.searchsorted(sorted_labels, query_labels, right=False)
    stop = torch.searchsorted(sorted_labels, query_labels, right=True)
    # A stable sort keeps equal labels in index order: every row comes out sorted ascending.
    return csr_from_ranges(start, stop, order)


def _radius_csr(
    query_positions: Tensor, gallery_positions: Tensor, radius: float, block: int = 4096
) -> tuple[Tensor, Tensor]:
    rows, cols = [], []
    qp = query_positions.to(torch.float64)
    gp = gallery_positions.to(torch.float64)
    for start in range(0, qp.shape[0], block):
        # Distances in float64 so that "<= radius" is decided the same way whatever the block.
        dist = torch.cdist(
            qp[start : start + block], gp, compute_mode="donot_use_mm_for_euclid_dist"
        )
        r, c = torch.nonzero(dist <= radius, as_tuple=True)
        rows.append(r + start)
        cols.append(c)
    row = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64)
    col = torch.cat(cols) if cols else torch.zeros(0, dtype=torch.int64)
    return ptr_from_counts(torch.bincount(row, minlength=qp.shape[0])), col


def _ids_csr(
    relevant_ids: Sequence[Any], gallery_ids: Tensor | None, num_gallery: int
) -> tuple[Tensor, Tensor, Tensor | None]:
    """CSR of explicit relevant ids; a dict gives graded relevance (grade <= 0: not relevant)."""
    if gallery_ids is None:
        lookup = None
    else:
        lookup = {int(v): i for i, v in enumerate(gallery_ids.tolist())}
    # relevant ids compare with the gallery ids as every id does (``label_codes``)
    ptr = [0]
    index: list[int] = []
    grades: list[float] = []
    graded = False
    for q, ids in enumerate(relevant_ids):
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        if isinstance(ids, dict):
            graded = True
            items = [(k, float(v)) for k, v in ids.items() if float(v) > 0]
        else:
            items = [(k, 1.0) for k in dict.fromkeys(ids)]
        row = []
        for item_id, grade in items:
            if lookup is None:
                position = int(item_id)
                if not 0 <= position < num_gallery:
                    raise ValueError(
                        f"`relevant_ids[{q}]` names gallery item {item_id!r}, but the gallery has "
                        f"{num_gallery} items (indices 0..{num_gallery - 1}); pass `gallery_ids` "
                        "to name items by id"
                    )
            else:
                key = canonical_id(item_id)
                if not isinstance(key, int):  # a string id: by its hash, as the gallery's
                    key = int(label_codes([item_id], f"relevant_ids[{q}]")[0])
                if key not in lookup:
                    raise ValueError(
                        f"`relevant_ids[{q}]` names id {item_id!r}, which is not in `gallery_ids`"
                    )
                position = lookup[key]
            row.append((position, grade))
        row.sort()
        index.extend(p for p, _ in row)
        grades.extend(g for _, g in row)
        ptr.append(len(index))
    return (
        torch.tensor(ptr, dtype=torch.int64),
        torch.tensor(index, dtype=torch.int64),
        torch.tensor(grades, dtype=torch.float64) if graded else None,
    )
