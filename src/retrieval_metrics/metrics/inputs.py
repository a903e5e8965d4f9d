"""What ``update()`` accepts, turned into tensors: embeddings, per-item values and given ranks.

Embeddings and per-item values may be torch tensors or numpy arrays; a corpus given once
(``set_gallery``) may also stay on disk (:func:`as_corpus`). Labels, ids and cameras are
integers or strings (:func:`~retrieval_metrics.functional.ranking.labels.label_codes`); floats
only when they hold whole numbers their dtype stores exactly.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import holds_float64
from retrieval_metrics.functional.ranking.corpus import as_corpus, as_embeddings, load_npy
from retrieval_metrics.functional.ranking.items import Items
from retrieval_metrics.functional.ranking.labels import label_codes
from retrieval_metrics.functional.ranking.relevance.rules import as_positions
from retrieval_metrics.functional.table import UNBOUNDED, RankTable

__all__ = ["as_corpus", "as_embeddings", "item_tensors", "num_batches", "per_item", "read_ids",
           "score_copy", "table_from_ranks"]


def read_ids(path: str | Path) -> list[str] | np.ndarray:
    """Ids from a file: a ``.npy`` array, or text with one id a line (as given, without the line
    end; an empty line is refused)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"`ids`: no such file {str(path)!r}")
    if path.suffix.lower() == ".npy":
        # read through the mapping as it is hashed, a chunk at a time (label_codes): a corpus's
        # ids as fixed-width text are 32 bytes an id and more, never copied whole
        return load_npy("ids", path, mmap_mode="r")
    ids = path.read_text(encoding="utf-8").splitlines()
    if "" in ids:
        raise ValueError(f"`ids`: {path} line {ids.index('') + 1} is empty (one id a line)")
    return ids


def check_device_holds(name: str, emb: Tensor | Any, device: torch.device) -> None:
    """Refuse float64 embeddings (a tensor, or a corpus on disk) for a metric on a device
    without float64 (Apple's MPS), at the update that gives them: they are scored in float64,
    which such a device cannot hold, and scored in float32 they could rank otherwise than on
    the CPU."""
    if emb.dtype == torch.float64 and not holds_float64(device):
        raise ValueError(
            f"`{name}` are float64, which the metric's device ({device}) cannot hold (Apple's "
            "MPS has no float64): give float32 (or float16, bfloat16) embeddings, or keep the "
            "metric on the CPU to score them in float64"
        )


def score_copy(emb: Tensor) -> Tensor:
    """Detached embeddings as the states keep them: float16, bfloat16, float32 and float64 as
    they are (half precision is read as float32 a block at a time when ranked: the values of
    the upcast numbers at half the memory), other types (integers) as float32."""
    if emb.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        return emb.detach()
    return emb.detach().to(torch.float32)


def num_batches(state: Any) -> int:
    """Batches a state holds: a list state's length, or 1 for a non-empty synced tensor."""
    if isinstance(state, list):
        return len(state)
    return int(state.numel() > 0)


def per_item(name: str, value: Tensor, n: int) -> Tensor:
    if value.shape[0] != n:
        raise ValueError(f"`{name}` must have {n} entries (one per item), got {value.shape[0]}")
    return value


def item_tensors(
    emb: Tensor, relevance: str, labels: Any, ids: Any, cameras: Any, positions: Any,
    scan: bool = True,
) -> Items:
    """One batch's items: ``emb`` with its labels, ids and cameras as int64 codes and positions
    as float64, each checked against the batch size; ``relevance`` says which are required.
    ``scan=False``: the positions are not scanned for NaN and infinities (the caller's
    ``SideStore.verdict`` does it)."""
    n = emb.shape[0]
    codes = {
        name: None if value is None else per_item(name, label_codes(value, name), n)
        for name, value in (("labels", labels), ("ids", ids), ("cameras", cameras))
    }
    pos = None if positions is None else as_positions("positions", positions, n, scan, 5)
    if relevance == "label" and codes["labels"] is None:
        raise ValueError('`labels` are needed with relevance="label"')
    if relevance == "radius" and pos is None:
        raise ValueError('`positions` are needed with relevance="radius"')
    if relevance == "qrels" and codes["ids"] is None:
        raise ValueError(
            "`ids` are needed with `qrels=`: the query ids and the document ids the qrels name"
        )
    return Items(emb=emb, positions=pos, **codes)


def _whole_number(value: Any, name: str) -> int:
    """``value`` as an int: Python and numpy integers, 0-d integer tensors; bools, floats and
    text are refused (a rank of 2.7 was read as 2, "23" as the ranks 2 and 3)."""
    if isinstance(value, (Tensor, np.ndarray)) and value.ndim == 0:
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"`{name}` must hold integers, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(
            f"`{name}` must hold integers, got {value!r} ({type(value).__name__})"
        ) from None


def _rows_of(value: Any, name: str) -> list[Any]:
    """A list of entries (a tensor or array by its rows); a string is no list of ranks."""
    if isinstance(value, (Tensor, np.ndarray)):
        return list(value) if value.ndim else [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"`{name}` must be a list, got {type(value).__name__}")
    return list(value)


def table_from_ranks(relevant_ranks: Sequence[Sequence[int]], num_relevant: Any) -> RankTable:
    """A table from 1-based ranks of each query's relevant items (no ties)."""
    ranks = []
    for q, given in enumerate(_rows_of(relevant_ranks, "relevant_ranks")):
        name = f"relevant_ranks[{q}]"
        row = sorted(_whole_number(r, name) for r in _rows_of(given, name))
        if any(r < 1 for r in row):
            raise ValueError(f"`{name}` must hold 1-based ranks (>= 1), got {row}")
        if len(set(row)) < len(row):
            # a repeat was dropped, and with it a relevant item (recall@5 0.75 read 0.5)
            raise ValueError(
                f"`{name}` holds a rank twice ({row}): each relevant item has a rank of its "
                "own in this form (no ties)"
            )
        ranks.append(row)
    found = torch.tensor([len(r) for r in ranks], dtype=torch.int64)
    if num_relevant is None:
        total = found.clone()
    else:
        # (on the host, with the ranks: a rank table is host data whatever the metric's device)
        counts = [_whole_number(n, "num_relevant") for n in _rows_of(num_relevant, "num_relevant")]
        total = torch.tensor(counts, dtype=torch.int64)
        if total.numel() != len(ranks):
            raise ValueError(
                f"`num_relevant` must have one entry per query ({len(ranks)}), got {total.numel()}"
            )
        if bool((total < found).any()):
            raise ValueError("`num_relevant` must be at least the number of ranks given per query")
    ptr = torch.zeros(len(ranks) + 1, dtype=torch.int64)
    torch.cumsum(found, 0, out=ptr[1:])
    above = torch.tensor([r - 1 for row in ranks for r in row], dtype=torch.int64)
    return RankTable(
        ptr=ptr,
        above=above,
        tied=torch.ones_like(above),
        num_relevant=total,
        gallery_size=torch.full((len(ranks),), UNBOUNDED, dtype=torch.int64),
        depth=torch.full((len(ranks),), UNBOUNDED, dtype=torch.int64),
    )
