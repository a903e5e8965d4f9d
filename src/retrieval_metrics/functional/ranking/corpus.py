"""A corpus in any of the forms ``set_gallery`` and :func:`~retrieval_metrics.functional.top_k`
take: a tensor, a numpy array, or a corpus on disk read a block at a time and never whole (the
path of a ``.npy`` file, a glob or a list of them, their rows one after the other in the order
given, a glob's files in sorted order; or memory-mapped arrays, ``numpy.load(path,
mmap_mode="r")``), as a tensor or as :class:`RowBatches` over the files."""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval_metrics.functional.ranking.embeddings import check_embeddings
from retrieval_metrics.functional.ranking.row_batches import MappedRows, RowBatches

__all__ = ["as_corpus", "as_embeddings", "load_npy", "on_disk"]


def as_embeddings(name: str, value: Any, scan: bool = True) -> Tensor:
    """Embeddings as a tensor: a numpy array is taken as torch.from_numpy would (no copy).
    ``scan=False``: not scanned for NaN and infinities (:func:`check_embeddings`)."""
    if isinstance(value, np.ndarray):
        # (booleans as 0/1, as a torch bool tensor is taken: binary codes)
        if value.dtype.kind not in "fiub":
            raise ValueError(f"`{name}` must hold numbers, got a numpy array of {value.dtype}")
        value = torch.from_numpy(np.ascontiguousarray(value))
    elif not isinstance(value, Tensor):
        raise ValueError(
            f"`{name}` must be a torch.Tensor or a numpy array, got {type(value).__name__}"
        )
    return check_embeddings(name, value, scan=scan)


def as_corpus(name: str, value: Any) -> Tensor | RowBatches:
    """A corpus as :func:`as_embeddings` takes it, or on disk (see the module): checked (2-D,
    real, finite). A file's values are scanned as its first ranking reads them
    (``RowBatches.check_when_read``): a NaN or an infinity is then a ValueError naming
    ``name``, from the call that ranks it first (``compute()``, ``top_k``)."""
    if isinstance(value, RowBatches):
        return check_embeddings(name, value)  # type: ignore[return-value]  # (read in chunks)
    arrays = on_disk(name, value)
    if arrays is None:
        return as_embeddings(name, value)
    for array in arrays:
        if array.dtype not in (np.float16, np.float32, np.float64):
            raise ValueError(
                f"`{name}`: a corpus on disk must hold float16, float32 or float64 numbers, "
                f"got {array.dtype}"
            )
        if array.dtype != arrays[0].dtype:
            raise ValueError(
                f"`{name}`: the files of a corpus on disk must share one dtype, got "
                f"{arrays[0].dtype} in {_file_of(arrays[0])} and {array.dtype} in "
                f"{_file_of(array)}; save them in one dtype"
            )
    try:
        rows = RowBatches([MappedRows(array) for array in arrays])
    except ValueError as err:
        raise ValueError(f"`{name}`: {err}") from None
    # (its scan for NaN made as the first ranking reads it: the file read once, not twice)
    return check_embeddings(name, rows.check_when_read(name))  # type: ignore[return-value]


def _file_of(array: np.ndarray) -> str:
    return repr(str(getattr(array, "filename", None) or "a memory-mapped array"))


def on_disk(name: str, value: Any) -> list[np.ndarray] | None:
    """The memory-mapped arrays ``value`` names, or None where it is not a corpus on disk."""
    if isinstance(value, np.memmap):
        return [value]
    if isinstance(value, (str, Path)):
        text = str(value)
        paths = sorted(glob.glob(text)) if glob.has_magic(text) else [text]
        if not paths:
            raise ValueError(f"`{name}`: no file matches {text!r}")
    elif isinstance(value, (list, tuple)) and value and all(
        isinstance(v, (str, Path, np.memmap)) for v in value
    ):
        paths = list(value)
    else:
        return None
    arrays = []
    for path in paths:
        if isinstance(path, np.memmap):
            arrays.append(path)
            continue
        if not Path(path).is_file():
            raise ValueError(f"`{name}`: no such file {str(path)!r}")
        if Path(path).suffix.lower() != ".npy":
            raise ValueError(
                f"`{name}`: a corpus on disk is read from .npy files (numpy.save), got "
                f"{str(path)!r}"
            )
        arrays.append(load_npy(name, path, mmap_mode="r"))
    return arrays


def load_npy(name: str, path: str | Path, mmap_mode: str | None = None) -> np.ndarray:
    """``numpy.load`` of one .npy file, its errors (a truncated file: "mmap length is greater
    than file size") naming the argument and the file."""
    try:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise ValueError(
            f"`{name}`: {str(path)!r} cannot be read as a .npy file (numpy.save's format, "
            f"whole; a truncated or partly written file is refused): {err}"
        ) from None
