"""Tied gallery items in ascending order of their ids (``ties="id"``), as sentence-transformers
6.x orders them: by ``(-score, corpus_id)``, Python's order of the ids as given (strings by code
point, integers by value; ``"10"`` sorts before ``"9"``).

The ids travel as fixed-width byte rows (:func:`id_order_rows`), one per item, so that they
gather, deduplicate and select like any other per-item tensor on every process and device, and
compare as Python compares the ids: a type byte, then an integer's 8 bytes big-endian with the
sign bit flipped, or a string's UTF-8 bytes padded with zeros (UTF-8 byte order is code point
order). :func:`order_ranks` turns the rows of a whole gallery into each item's place in that
order, the key the engine breaks ties by.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["ORDER_WIDTH", "id_order_rows", "order_ranks"]

#: bytes of one id's row: a type byte and up to 63 bytes of UTF-8 text (or an integer's 8)
ORDER_WIDTH = 64
_INT, _STR = 1, 2
_SIGN = 1 << 63


def _row(value: Any, name: str, at: int) -> bytes:
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(
            f"`{name}[{at}]` must be an int or a str to order ties by id, got {value!r}"
        )
    if isinstance(value, (int, np.integer)):
        number = int(value)
        if not -(1 << 63) <= number < 1 << 63:
            raise ValueError(f"`{name}[{at}]` must fit in 64 bits, got {number}")
        return bytes([_INT]) + ((number + (1 << 64)) % (1 << 64) ^ _SIGN).to_bytes(8, "big")
    if isinstance(value, str):
        text = str(value).encode("utf-8")
        if b"\x00" in text:
            raise ValueError(
                f"`{name}[{at}]` holds a NUL character, which ties ordered by id cannot tell "
                f"from the end of the id: {value!r}"
            )
        if len(text) >= ORDER_WIDTH:
            raise ValueError(
                f"`{name}[{at}]` is {len(text)} bytes of UTF-8; ties ordered by id (ties='id') "
                f"take ids of at most {ORDER_WIDTH - 1} bytes: {value[:20]!r}..."
            )
        return bytes([_STR]) + text
    raise ValueError(f"`{name}[{at}]` must be an int or a str to order ties by id, got {value!r}")


def id_order_rows(ids: Any, name: str) -> Tensor:
    """``(n, ORDER_WIDTH)`` uint8 rows of ``ids`` (a sequence, array or int tensor of ids as
    given) whose byte order is the ids' Python order."""
    if isinstance(ids, Tensor):
        if ids.is_floating_point() or ids.is_complex() or ids.dim() != 1:
            raise ValueError(f"`{name}` must be a 1-D integer tensor or a sequence of ids")
        ids = ids.cpu().numpy()
    if isinstance(ids, np.ndarray) and ids.dtype.kind in "iu" and ids.dtype != np.uint64:
        return _integer_rows(ids.astype(np.int64).reshape(-1))
    if isinstance(ids, np.ndarray):
        ids = ids.tolist()
    ids = list(ids)
    if all(type(v) is str for v in ids):
        return _text_rows(ids, name)
    if all(type(v) is int for v in ids):
        try:
            return _integer_rows(np.array(ids, dtype=np.int64))
        except OverflowError:
            pass  # the loop below names the id
    rows = [_row(value, name, at) for at, value in enumerate(ids)]
    out = np.zeros((len(rows), ORDER_WIDTH), dtype=np.uint8)
    if rows:
        joined = np.frombuffer(b"".join(row.ljust(ORDER_WIDTH, b"\x00") for row in rows), np.uint8)
        out[:] = joined.reshape(len(rows), ORDER_WIDTH)
    return torch.from_numpy(out)


def _integer_rows(values: np.ndarray) -> Tensor:
    """:func:`_row` of int64 ``values``, every one at once."""
    out = np.zeros((values.shape[0], ORDER_WIDTH), dtype=np.uint8)
    out[:, 0] = _INT
    flipped = values.view(np.uint64) ^ np.uint64(_SIGN)
    out[:, 1:9] = flipped.astype(">u8").view(np.uint8).reshape(-1, 8)
    return torch.from_numpy(out)


def _text_rows(ids: list[str], name: str) -> Tensor:
    """:func:`_row` of Python strings, joined in one buffer (a third of the loop's time on a
    million ids); an id it refuses is named by :func:`_row`."""
    encoded = [v.encode("utf-8") for v in ids]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    too_long = np.flatnonzero(lengths >= ORDER_WIDTH)
    if too_long.size:
        _row(ids[int(too_long[0])], name, int(too_long[0]))
    if b"\x00" in b"".join(encoded):
        at = next(i for i, text in enumerate(encoded) if b"\x00" in text)
        _row(ids[at], name, at)
    width = ORDER_WIDTH - 1
    joined = bytearray(b"".join(b"\x02" + text.ljust(width, b"\x00") for text in encoded))
    if not joined:
        return torch.zeros(0, ORDER_WIDTH, dtype=torch.uint8)
    return torch.frombuffer(joined, dtype=torch.uint8).view(len(ids), ORDER_WIDTH)


def order_ranks(rows: Tensor, name: str = "gallery ids") -> Tensor:
    """Each item's place (int64, 0-based) in the ascending order of the ids of ``rows``
    (:func:`id_order_rows`, every item once). Refused where integers and strings are mixed:
    Python does not order them (sentence-transformers' ``sorted`` raises)."""
    rows = rows.cpu()
    n = rows.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.int64)
    kinds = torch.unique(rows[:, 0])
    if kinds.numel() > 1:
        raise ValueError(
            f"the {name} mix integers and strings, which have no order to break ties by "
            "(ties='id'): give them all as integers or all as strings"
        )
    # eight big-endian words: their lexicographic order is the rows' byte order
    words = np.ascontiguousarray(rows.numpy()).view(">u8")
    order = np.lexsort(tuple(words[:, k] for k in range(words.shape[1] - 1, -1, -1)))
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = np.arange(n, dtype=np.int64)
    return torch.from_numpy(ranks)
