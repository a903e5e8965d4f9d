"""What ``SelectOnValidation`` checks before it selects on validation data, apart from
Lightning: which logged names come from test data, whether two dataloaders read one dataset or
file, and the sample ids of several kinds in one id space (compared across validation and
test)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "DATALOADER_SUFFIX",
    "ID_MIX",
    "dataset_of",
    "flatten_loaders",
    "is_test_key",
    "namespaced_ids",
    "same_file",
    "unique_ids",
]

# Kinds of sample ids other than plain query ids (image ids, caption ids) live in id spaces of
# their own: an image and a caption may share a number. Each kind's ids are mapped into the one
# set of compared ids by an invertible mix with a salt of its own, so that ids of different kinds
# meet only by a 2**-64 chance.
ID_MIX = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: odd, so the product is invertible


def namespaced_ids(kind: str, ids: Tensor) -> Tensor:
    ids = ids.reshape(-1).to("cpu", torch.int64)
    if kind == "query":
        return ids
    salt = int.from_bytes(kind.encode()[:8].ljust(8, b"\0"), "little", signed=True)
    return (ids ^ salt) * ID_MIX


DATALOADER_SUFFIX = re.compile(r"/dataloader_idx_(\d+)$")


def is_test_key(key: str) -> bool:
    """``test/...``, ``test_...``, ``.../test/...``: a name that says it comes from test data."""
    return any(
        part == "test" or part.startswith(("test_", "test.", "test-"))
        for part in key.lower().split("/")
    )


def same_file(a: Any, b: Any) -> bool:
    if not a or not b:
        return False
    a, b = str(a), str(b)
    if "://" in a or "://" in b:
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)


def flatten_loaders(loaders: Any) -> list[Any]:
    if loaders is None:
        return []
    if isinstance(loaders, Mapping):
        return [dl for value in loaders.values() for dl in flatten_loaders(value)]
    if isinstance(loaders, (list, tuple)):
        return [dl for value in loaders for dl in flatten_loaders(value)]
    return [loaders]


def dataset_of(loader: Any) -> Any:
    return getattr(loader, "dataset", loader)


def unique_ids(parts: Iterable[Tensor]) -> Tensor:
    parts = [p.reshape(-1).to("cpu", torch.int64) for p in parts]
    if not parts:
        return torch.zeros(0, dtype=torch.int64)
    return torch.unique(torch.cat(parts))
