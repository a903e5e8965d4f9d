"""A query's scores do not depend on how many rows its product holds (``plan.least_product_rows``).

A BLAS may compute a product of a few rows otherwise than one of many: MKL on an Intel Xeon
(AVX-512) takes other kernels for 8 rows than for 16 (768 wide), and with two threads splits the
inner dimension for products of up to about ``width / 8`` rows. The probe asks the host's BLAS
which row counts compute alike; every product of a pass, a run and the reference is padded to
at least that. On a host whose BLAS computes every multiple of 8 rows alike (the AMD EPYC this
project was first built on) the probe says 8 and these tests hold trivially; on one that does
not (this project's Intel CI hosts), they failed before the probe.
"""

from __future__ import annotations

import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional.ranking.engine import plan


@pytest.mark.parametrize(("columns", "width"), [(2112, 64), (2112, 768), (4032, 1024), (192, 1025)])
def test_products_of_the_least_rows_or_more_compute_each_row_alike(columns, width):
    """Checked on data of its own (not the probe's): every product of at least the least rows,
    up to the probe's block, equals the block's rows bit for bit; one of 8 rows fewer does not,
    where the least is above 8 (it is the least)."""
    least = plan.least_product_rows(1, columns, width, torch.float32, torch.device("cpu"))
    assert least % plan.PRODUCT_ROWS == 0 and plan.PRODUCT_ROWS <= least <= plan.PROBE_ROWS
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(plan.PROBE_ROWS, width, generator=gen)
    g = torch.randn(columns, width, generator=gen)
    block = torch.mm(x, g.T)
    for rows in range(least, plan.PROBE_ROWS + 1, plan.PRODUCT_ROWS):
        assert torch.equal(torch.mm(x[:rows], g.T), block[:rows]), rows
    if least > plan.PRODUCT_ROWS:
        fewer = least - plan.PRODUCT_ROWS
        assert not torch.equal(torch.mm(x[:fewer], g.T), block[:fewer])


def test_a_device_is_not_probed():
    assert plan.least_product_rows(8, 2112, 1024, torch.float32, torch.device("cuda")) == 8


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_a_query_ranks_alone_as_among_many(similarity):
    """1,024-wide embeddings, 30 near-copies of each query's relevant item (a unit in the last
    place apart) among 3,000 others: each query's reciprocal rank (optimistic ties: one plus the
    items strictly above) is the same ranked alone, among 3 and among 200. Before the probe, on
    an Intel host with two threads (products of 8 and of 200 rows computed otherwise), the
    first query ranked its relevant item 3rd alone and 12th among 200 (cosine), and among 6
    queries 6 of 6 (cosine) and 5 of 6 (dot) ranked otherwise than among 200."""
    gen = torch.Generator().manual_seed(3)
    num_q, width = 200, 1024
    q = torch.randn(num_q, width, generator=gen)
    relevant = q + 0.8 * torch.randn(q.shape, generator=gen)
    near = [relevant[:6] * (1 + 3e-7 * torch.randn(6, width, generator=gen)) for _ in range(30)]
    g = torch.cat([relevant, *near, torch.randn(3000, width, generator=gen)])
    labels = torch.full((g.shape[0],), -1)
    labels[:num_q] = torch.arange(num_q)

    def reciprocal_ranks(count: int) -> list[float]:
        metric = rm.RetrievalMetrics(["mrr"], similarity=similarity, ties="optimistic")
        metric.update(q[:count], torch.arange(count), role="query")
        metric.update(g, labels, role="gallery")
        return metric.per_query()["mrr"][:6].tolist()

    among_many = reciprocal_ranks(num_q)
    assert min(among_many) < 1.0  # (near-copies above some relevant items: ranks to get right)
    for count in (1, 3):
        assert reciprocal_ranks(count) == among_many[:count], count
