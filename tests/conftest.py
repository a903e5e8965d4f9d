"""Shared helpers: the library's per-query values under the reference's key names."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

if not (torch.cuda.is_available() and torch.version.cuda):
    # Without a CUDA GPU, Triton kernels (the fused count, engine/triton_count.py) run in
    # Triton's interpreter on the CPU: set before anything imports triton, which reads it then
    os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # two test processes share the cores: one thread each, not two each on two cores
    torch.set_num_threads(1)

from reference import KS
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional.ranking import RankTable


def ours_per_query(
    table: RankTable, ties: str, cmc_len: int | None = None, shared: M.SharedTieGroups | None = None
) -> list[dict | None]:
    """Every per-query value the reference computes, from the library, keyed like the reference;
    with ``shared``, every measure reads the tie groups of that one shared cache.

    Unanswerable queries give None, as in the reference.
    """
    cols: dict[str, torch.Tensor] = {}
    for k in KS:
        cols[f"hit_rate@{k}"] = M.hit_rate_per_query(table, k, ties, shared=shared)
        cols[f"recall@{k}"] = M.recall_per_query(table, k, ties, shared=shared)
        cols[f"precision@{k}"] = M.precision_per_query(table, k, ties, shared=shared)
        for divisor in ("relevant", "min", "retrieved"):
            cols[f"ap@{k}/{divisor}"] = M.average_precision_per_query(
                table, k, ties, divisor=divisor, shared=shared
            )
        cols[f"rr@{k}"] = M.reciprocal_rank_per_query(table, k, ties, shared=shared)
        for gain in ("exponential", "linear"):
            cols[f"ndcg@{k}/{gain}"] = M.ndcg_per_query(table, k, ties, gain, shared=shared)
    cols["r_precision"] = M.r_precision_per_query(table, ties, shared=shared)
    cols["map@r"] = M.map_at_r_per_query(table, ties, shared=shared)
    cols["ap"] = M.average_precision_per_query(table, None, ties, shared=shared)
    cols["ap_trapezoid"] = M.average_precision_per_query(
        table, None, ties, ap="trapezoid", shared=shared
    )
    cols["rr"] = M.reciprocal_rank_per_query(table, None, ties, shared=shared)
    cols["first_rank"] = M.first_rank_per_query(table, ties, shared=shared)
    for gain in ("exponential", "linear"):
        cols[f"ndcg/{gain}"] = M.ndcg_per_query(table, None, ties, gain, shared=shared)
    cols["minp"] = M.minp_per_query(table, ties, shared=shared)
    cmc = M.cmc_per_query(table, cmc_len, ties, shared=shared) if cmc_len else None
    out: list[dict | None] = []
    for q in range(table.num_queries):
        if int(table.num_relevant[q]) == 0:
            out.append(None)
            continue
        row = {name: float(values[q]) for name, values in cols.items()}
        if cmc is not None:
            row["cmc"] = cmc[q].numpy()
        out.append(row)
    return out


def assert_query_matches(ours: dict | None, ref: dict | None, context: str, tol: float = 1e-9):
    """Compare one query's values, key by key, with a readable failure."""
    assert (ours is None) == (ref is None), f"{context}: answerable mismatch ({ours}, {ref})"
    if ref is None:
        return
    for key, value in ours.items():
        expected = ref[key]
        if key == "cmc":
            n = min(len(value), len(expected))
            np.testing.assert_allclose(value[:n], expected[:n], atol=tol, err_msg=context)
            continue
        if math.isinf(expected):
            assert math.isinf(value), f"{context}: {key} ours {value} reference {expected}"
            continue
        assert value == pytest.approx(expected, abs=tol, rel=tol), (
            f"{context}: {key} ours {value} reference {expected}"
        )
