"""Read saved embeddings and their per-item arrays (labels, sample ids, cameras, positions).

A ``.npz`` or ``.pt`` file (a dict of arrays / tensors) holds named arrays: ``embeddings``
(required), ``labels``, ``ids``, ``cameras``, ``positions``; the names can be changed with
``keys``. A ``.npy`` file (or a ``.pt`` holding one tensor) is the embeddings alone; its other
arrays are files beside it named ``STEM.labels.npy``, ``STEM.ids.npy``, ... (``STEM.labels.pt``
beside a ``.pt``).

Every check stops with a :class:`FormatError` that names the file and the array; the messages
name the ``retrieval-metrics evaluate`` options (``--keys``) that fix them, since the command is
what reads these files.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from retrieval_metrics.formats.errors import FormatError
from retrieval_metrics.functional.ranking.labels import label_codes

__all__ = ["ARRAYS", "EmbeddingFile", "check_pair", "load_items"]

#: The arrays an embedding file may hold, ``embeddings`` first (the only required one).
ARRAYS = ("embeddings", "labels", "ids", "cameras", "positions")


def _as_numpy(value: Any, path: Path, name: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            # numpy has no bfloat16 (float32 holds each value exactly); float16 stays float16,
            # half the memory, as a .npy of float16 does
            value = value.float()
        return value.numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)):
        try:
            return np.asarray(value)
        except ValueError as err:
            raise FormatError(f"{path}: array {name!r} is not rectangular: {err}") from None
    raise FormatError(f"{path}: {name!r} is a {type(value).__name__}, not an array, tensor or list")


def _read_file(path: Path) -> dict[str, np.ndarray] | np.ndarray:
    """The arrays of one file: a dict of named arrays, or one array."""
    if not path.exists():
        raise FormatError(f"{path}: no such file")
    if path.is_dir():
        raise FormatError(f"{path}: is a directory, not a .npz, .npy or .pt file")
    suffix = path.suffix.lower()
    # numpy reads a file that is not what its name says as a pickle, and refuses with a message
    # about allow_pickle; name what the file should have been instead
    if suffix == ".npz" and not zipfile.is_zipfile(path):
        if _head(path, raw=True)[:4] == b"PK\x03\x04":
            # a zip's directory is at its end: a file cut short starts as a zip all the same
            raise FormatError(
                f"{path}: a damaged or truncated npz archive ({path.stat().st_size} bytes): it "
                "starts as a zip but its end (the archive's directory) is missing, as when a "
                "write did not finish or a copy was cut short; write or copy it again"
            )
        raise FormatError(
            f"{path}: not an npz archive (a zip of .npy arrays, as numpy.savez writes); "
            f"it starts with {_head(path)}"
        )
    if suffix == ".npy" and _head(path, raw=True) != b"\x93NUMPY":
        raise FormatError(
            f"{path}: not a .npy file (numpy.save's format, which starts with \\x93NUMPY); "
            f"it starts with {_head(path)}"
        )
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {name: _npz_array(data, name, path) for name in data.files}
        if suffix == ".npy":
            # memory-mapped: a corpus is read a block at a time, never whole (set_gallery)
            return np.load(path, allow_pickle=False, mmap_mode="r")
        if suffix in (".pt", ".pth"):
            obj = torch.load(path, map_location="cpu", weights_only=True)
            if isinstance(obj, dict):
                return {str(k): _as_numpy(v, path, str(k)) for k, v in obj.items()}
            return _as_numpy(obj, path, "embeddings")
    except FormatError:
        raise
    except Exception as err:
        raise FormatError(f"{path}: cannot be read as a {suffix} file: {err}") from None
    raise FormatError(f"{path}: unknown file type {suffix!r}; use .npz, .npy or .pt")


def _npz_array(data: Any, name: str, path: Path) -> np.ndarray:
    """One array of an open .npz; an object array (Python strings saved from a list of str with
    dtype=object) named with the fix, since numpy only says it would need pickle."""
    try:
        return data[name]
    except ValueError as err:
        if "allow_pickle" not in str(err):
            raise
        raise FormatError(
            f"{path}: array {name!r} holds Python objects (dtype=object), which numpy reads only "
            "by unpickling; save strings as a numpy unicode array, e.g. "
            f"np.savez(..., {name}=np.array(ids, dtype=str))"
        ) from None


def _head(path: Path, raw: bool = False) -> Any:
    """The first bytes of a file (6, as the .npy magic), or a short printable view of them."""
    with open(path, "rb") as f:
        head = f.read(6 if raw else 16)
    return head if raw else repr(head)


def _sibling(path: Path, name: str) -> Path:
    return path.with_name(f"{path.stem}.{name}{path.suffix}")


def _integer_like(arr: np.ndarray, path: Path, name: str) -> np.ndarray:
    """Labels, ids and cameras: integers or strings; floats by the rule of the Python API
    (:func:`retrieval_metrics.functional.ranking.labels.label_codes`): whole numbers their
    dtype stores exactly."""
    if arr.dtype.kind == "f":
        try:
            return label_codes(arr, name).numpy()
        except ValueError as err:
            raise FormatError(f"{path}: array {name!r}: {err}") from None
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.dtype.kind == "S":
        # bytes (np.bytes_, as h5py and older scripts save text): as text, so that b"d1" is the
        # id "d1" of a qrels file, and labels of one file match the str labels of another
        try:
            return np.char.decode(arr, "utf-8")
        except UnicodeDecodeError as err:
            raise FormatError(
                f"{path}: array {name!r} holds bytes that are not UTF-8: {err}"
            ) from None
    if arr.dtype.kind not in "iuU":
        raise FormatError(
            f"{path}: array {name!r} has dtype {arr.dtype}; {name} must be integers or strings"
        )
    return arr


@dataclass
class EmbeddingFile:
    """One side of an evaluation, read from a file: the embeddings and the per-item arrays
    found with them (None where the file has none)."""

    path: Path
    embeddings: np.ndarray
    labels: np.ndarray | None = None
    ids: np.ndarray | None = None
    cameras: np.ndarray | None = None
    positions: np.ndarray | None = None
    found: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.embeddings.shape[0])


def load_items(
    path: str | Path,
    keys: dict[str, str] | None = None,
    *,
    need_labels: bool = True,
    need_positions: bool = False,
    need_ids: str | None = None,
) -> EmbeddingFile:
    """Read embeddings and their per-item arrays from a .npz, .npy or .pt file.

    ``need_ids``, when given, says why the ``ids`` array is required (e.g. judgments read by
    id); labels, ids and cameras stored as bytes are read as text (UTF-8).

    Raises :class:`FormatError` naming the file and the array for a missing file, a missing array,
    or arrays whose shapes do not match.
    """
    path = Path(path)
    keys = {name: name for name in ARRAYS} | dict(keys or {})
    content = _read_file(path)
    if isinstance(content, dict):
        data = content
        where = f"{path}"
    else:
        data = {keys["embeddings"]: content}
        for name in ARRAYS[1:]:
            sibling = _sibling(path, keys[name])
            if sibling.exists():
                value = _read_file(sibling)
                if isinstance(value, dict):
                    raise FormatError(f"{sibling}: expected one array ({name}), found named arrays")
                data[keys[name]] = value
        where = f"{path} (and {_sibling(path, 'NAME')} files beside it)"
    found = ", ".join(sorted(data)) or "nothing"

    def missing(name: str, why: str) -> FormatError:
        return FormatError(
            f"{where}: no array named {keys[name]!r} ({why}); it holds: {found}. "
            f"Name the array with --keys {name}=NAME"
        )

    if keys["embeddings"] not in data:
        raise missing("embeddings", "the embeddings")
    emb = data[keys["embeddings"]]
    if emb.dtype.kind not in "fiub":
        raise FormatError(
            f"{path}: array {keys['embeddings']!r} has dtype {emb.dtype}, not numbers"
        )
    if emb.ndim != 2:
        raise FormatError(
            f"{path}: array {keys['embeddings']!r} must be 2-D (items x dimensions), got shape "
            f"{emb.shape}"
        )
    if emb.shape[0] == 0:
        raise FormatError(f"{path}: array {keys['embeddings']!r} has no rows")
    if emb.dtype.kind != "f":
        emb = emb.astype(np.float32)
    # (a memory-mapped .npy is scanned as it is read, a chunk at a time: not read whole here)
    if not isinstance(emb, np.memmap) and not np.all(np.isfinite(emb)):
        bad = int((~np.isfinite(emb)).any(axis=1).sum())
        raise FormatError(
            f"{path}: array {keys['embeddings']!r} has NaN or infinite values in {bad} rows"
        )
    n = emb.shape[0]
    items = EmbeddingFile(path=path, embeddings=emb, found=sorted(data))
    for name in ARRAYS[1:]:
        value = data.get(keys[name])
        if value is None:
            continue
        if name == "positions":
            if value.ndim != 2 or value.dtype.kind not in "fiu":
                raise FormatError(
                    f"{path}: array {keys[name]!r} must be 2-D numbers (items x coordinates), "
                    f"got shape {value.shape} and dtype {value.dtype}"
                )
        else:
            if value.ndim != 1:
                raise FormatError(
                    f"{path}: array {keys[name]!r} must be 1-D (one entry per item), got shape "
                    f"{value.shape}"
                )
            value = _integer_like(value, path, keys[name])
        if value.shape[0] != n:
            raise FormatError(
                f"{path}: array {keys[name]!r} has {value.shape[0]} entries but "
                f"{keys['embeddings']!r} has {n} rows; they must match (one entry per item)"
            )
        setattr(items, name, value)
    if need_labels and items.labels is None:
        raise missing("labels", "relevance is by equal labels")
    if need_positions and items.positions is None:
        raise missing("positions", 'relevance="radius" needs positions')
    if need_ids is not None and items.ids is None:
        raise missing("ids", need_ids)
    return items


def check_pair(query: EmbeddingFile, gallery: EmbeddingFile) -> None:
    """Raise :class:`FormatError` unless a query file and a gallery file can be ranked against
    each other: same dimension, the same per-item arrays, labels of one kind."""
    dq, dg = query.embeddings.shape[1], gallery.embeddings.shape[1]
    if dq != dg:
        raise FormatError(
            f"{query.path}: embeddings have {dq} dimensions but {gallery.path}'s have {dg}; "
            "query and gallery must come from the same model"
        )
    for name in ("labels", "cameras", "positions", "ids"):
        q, g = getattr(query, name), getattr(gallery, name)
        if (q is None) != (g is None) and name in ("labels", "cameras", "positions"):
            has, lacks = (query, gallery) if q is not None else (gallery, query)
            raise FormatError(
                f"{lacks.path}: no array {name!r}, but {has.path} has one; give it in both files "
                "or in neither"
            )
        if name == "positions" and q is not None and g is not None and q.shape[1] != g.shape[1]:
            raise FormatError(
                f"{query.path}: positions have {q.shape[1]} coordinates but {gallery.path}'s "
                f"have {g.shape[1]}"
            )
        if (
            name == "labels"
            and q is not None
            and g is not None
            and (q.dtype.kind in "US") != (g.dtype.kind in "US")
        ):
            raise FormatError(
                f"{query.path} and {gallery.path}: array 'labels' is text in one file and "
                "numbers in the other, so no label could ever match"
            )
