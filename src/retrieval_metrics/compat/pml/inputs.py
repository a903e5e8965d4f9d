"""Inputs as pytorch-metric-learning takes them: tensors, numpy arrays or lists, embeddings
and labels cast to float32 as PML casts them (so that ranks and label matches agree)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["as_embeddings", "as_labels", "label_rows"]


def _as_tensor(x: Any, name: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    try:
        return torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(
            f"`{name}` must be a torch.Tensor or a numpy array, got {type(x).__name__}"
        ) from err


def as_embeddings(x: Any, name: str, device: torch.device) -> Tensor:
    t = _as_tensor(x, name)
    if t.dim() != 2:
        raise ValueError(f"`{name}` must be 2-D (items x dimensions), got shape {tuple(t.shape)}")
    # PML casts embeddings to float32 (.type(torch.float)); so do we, so that ranks agree.
    return t.to(device).to(torch.float32)


def as_labels(x: Any, name: str, device: torch.device) -> Tensor:
    t = _as_tensor(x, name)
    if t.dim() == 0:
        raise ValueError(f"`{name}` must have one label (or label row) per item, got a scalar")
    if t.is_complex():
        raise ValueError(f"`{name}` must hold real numbers, got {t.dtype}")
    # PML compares labels after casting them to float32: integers above 2**24 can merge there,
    # and they merge here too, so that the numbers stay PML's.
    return t.to(device).to(torch.float32)


def label_rows(labels: Tensor) -> Tensor:
    """Labels as (items, columns): a label is a row, compared whole (PML's multi-column labels)."""
    return labels.reshape(labels.shape[0], -1)
