"""Full float32 products for the ranking, whatever the global matmul precision.

``torch.set_float32_matmul_precision("high")``, which Lightning suggests on every recent GPU, lets
float32 products run in TF32 (about 10 mantissa bits) on CUDA, and in reduced precision on CPUs
with matrix units. A retrieval score is a ranking: two items a rounding apart may swap places or
tie, so the values would change with the device. The ranking's products therefore run in full
float32 and the user's setting is restored after them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

__all__ = ["full_fp32_products", "in_full_fp32"]

F = TypeVar("F", bound=Callable[..., Any])


def _backends() -> list[Any]:
    """The per-backend matmul settings of this build of torch (CUDA, oneDNN), where it has them."""
    found = []
    for name in ("cuda", "mkldnn"):
        matmul = getattr(getattr(torch.backends, name, None), "matmul", None)
        if matmul is not None and hasattr(matmul, "fp32_precision"):
            found.append(matmul)
    return found


@contextmanager
def full_fp32_products() -> Iterator[None]:
    """Float32 products inside the block run in IEEE float32; the global matmul precision and
    each backend's own setting are what they were after it.

    >>> torch.set_float32_matmul_precision("high")
    >>> with full_fp32_products():
    ...     torch.get_float32_matmul_precision()
    'highest'
    >>> torch.get_float32_matmul_precision()
    'high'
    >>> torch.set_float32_matmul_precision("highest")
    """
    saved_global = torch.get_float32_matmul_precision()
    backends = _backends()
    saved = [b.fp32_precision for b in backends]
    if saved_global == "highest" and all(s in ("ieee", "none") for s in saved):
        yield  # already full precision: nothing to set or restore
        return
    torch.set_float32_matmul_precision("highest")
    for backend in backends:
        backend.fp32_precision = "ieee"
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved_global)
        for backend, value in zip(backends, saved, strict=True):
            backend.fp32_precision = value


def in_full_fp32(fn: F) -> F:
    """``fn`` run inside :func:`full_fp32_products` (for the passes that compute products)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with full_fp32_products():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
