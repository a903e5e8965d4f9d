"""Embeddings into the two matrices whose product is the score (larger is better).

Every ranking of embeddings scores a block of pairs with one matrix product of these matrices:
unit rows for cosine, the embeddings themselves for dot, one extra column for euclidean.
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval_metrics.functional.primitives import flat_nonzero

SIMILARITIES = ("cosine", "dot", "euclidean")
TINY_NORM = 2.0**-60


def score_dtype(*xs: Tensor) -> torch.dtype:
    # Half precision is scored in float32 (accumulating in half loses ranks); float64 stays.
    return torch.float64 if any(x.dtype == torch.float64 for x in xs) else torch.float32


def _unit_rows(x: Tensor) -> Tensor:
    """Rows scaled to unit length; a zero row stays zero, so its cosine with anything is 0.

    ``torch.nn.functional.normalize`` divides by max(norm, 1e-12), which leaves rows shorter
    than 1e-12 short and so changes their cosines; dividing by the norm itself keeps cosine
    independent of scale for every non-zero row.
    """
    norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    out = x / torch.where(norm > 0, norm, torch.ones_like(norm))
    # Squares of float32 entries below ~1e-19 underflow, so the norm of such a row is wrong or
    # 0; those rows are scaled up by their largest entry (in float64) before normalising.
    # (Only the short rows are looked at: a test of every entry costs as much as the scaling.)
    short = flat_nonzero(norm[:, 0] < TINY_NORM)
    if short.numel():
        rows = x.index_select(0, short)
        tiny = (rows != 0).any(1)  # zero rows stay zero
        if bool(tiny.any()):
            rows = rows[tiny].to(torch.float64)
            rows = rows / rows.abs().amax(1, keepdim=True)
            unit = rows / torch.linalg.vector_norm(rows, dim=1, keepdim=True)
            out[short[tiny]] = unit.to(x.dtype)
    return out


def prepare(
    query: Tensor, gallery: Tensor, similarity: str, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """Turn embeddings into matrices whose product is the score (larger is better)."""
    q = query.to(dtype)
    g = gallery.to(dtype)
    if similarity == "cosine":
        q = _unit_rows(q)
        g = _unit_rows(g)
    elif similarity == "euclidean":
        # -|q - g|^2 + |q|^2 = 2 q.g - |g|^2 orders the gallery exactly as -|q - g| does, and is
        # one matrix product with one extra column.
        q = torch.cat([2 * q, -torch.ones_like(q[:, :1])], dim=1)
        g = torch.cat([g, (g * g).sum(1, keepdim=True)], dim=1)
    elif similarity != "dot":
        raise ValueError(f"`similarity` must be one of {SIMILARITIES}, got {similarity!r}")
    return q.contiguous(), g.contiguous()
