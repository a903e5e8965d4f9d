"""Copies of one document tie wherever they fall in a block's product.

A BLAS kernel computes a product in panels of columns and computes a last, narrower panel with
another kernel that rounds differently (MKL's float64 kernel on AVX2: panels of 12 columns, so
the last 4 columns of a 64-column block scored a document otherwise than the first 60). The
engine's gallery blocks are whole multiples of ``plan.PRODUCT_COLUMNS`` where the budget allows,
so that no panel is narrower; here copies of a document, spread over every column of several
blocks, must all tie, and each query's relevant copies sit exactly after the copies of the
documents it scores strictly higher (counted from the distinct documents' scores in numpy).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.ranking.engine import schedule
from retrieval_metrics.functional.ranking.engine.plan import (
    CPU_BLOCK_CAPS,
    PADDED_AT_MOST,
    PRODUCT_COLUMNS,
    SEGMENT,
    WIDE_ROWS_QUERIES,
    balanced,
    block_sizes,
    square_block,
)

Q = 200


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("similarity", ["dot", "cosine"])
@pytest.mark.parametrize("n", [61, 700, 5000])
def test_copies_of_a_document_tie_wherever_they_fall(dtype, similarity, n):
    g = torch.Generator().manual_seed(n)
    # (the last panel rounds otherwise in about half of its entries: many queries, so that
    # every label's queries meet some)
    distinct = torch.randn(8, 16, generator=g, dtype=dtype)
    docs = distinct[torch.arange(n) % 8]
    queries = torch.randn(Q, 16, generator=g, dtype=dtype)
    labels_q, labels_g = torch.arange(Q) % 8, torch.arange(n) % 8
    table = rank_embeddings(queries, docs, query_labels=labels_q, gallery_labels=labels_g,
                            similarity=similarity)
    copies = np.bincount(labels_g.numpy(), minlength=8)
    x = distinct.numpy().astype(np.float64)
    if similarity == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    scores = queries.numpy().astype(np.float64) @ x.T  # (Q, 8): distinct documents apart
    for q in range(Q):
        mine = int(labels_q[q])
        higher = scores[q] > scores[q, mine]
        assert not np.isclose(scores[q], scores[q, mine])[~np.eye(8, dtype=bool)[mine]].any()
        lo, hi = int(table.ptr[q]), int(table.ptr[q + 1])
        assert hi - lo == copies[mine]
        assert table.tied[lo:hi].tolist() == [copies[mine]] * copies[mine], (q, n)
        assert table.above[lo:hi].tolist() == [int(copies[higher].sum())] * copies[mine]


def test_blocks_are_whole_product_panels_where_the_budget_allows():
    for num_g in (61, 700, 5000, 10**6):
        for budget in (2**20, 16 * 2**20, 256 * 2**20):
            _, block_g = block_sizes(100, num_g, 384, 5, 4, budget)
            assert block_g % SEGMENT == 0
            if 3 * 100 * PRODUCT_COLUMNS * 4 <= budget // 2:
                assert block_g % PRODUCT_COLUMNS == 0, (num_g, budget, block_g)
            block = square_block(num_g, 4, budget)
            if 4 * PRODUCT_COLUMNS**2 * 4 <= budget // 2:
                assert block % PRODUCT_COLUMNS == 0, (num_g, budget, block)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("similarity", ["dot", "cosine", "euclidean"])
@pytest.mark.parametrize("num_g", [10, 700])
def test_a_narrow_gallery_takes_taller_query_blocks_with_the_same_ranks(
    dtype, similarity, num_g, monkeypatch
):
    """A gallery narrower than the widest block leaves room for more queries a block (the same
    score-block area: 9,000 queries in 2 blocks against 10 items, not 9 of 1,024 rows), and a
    query's scores do not depend on how many rows its block has: the rank table (copies of
    documents tied, integer embeddings full of ties) equals the one of 1,024-row blocks."""
    g = torch.Generator().manual_seed(num_g)
    num_q = 9000
    docs = torch.randn(num_g, 16, generator=g, dtype=dtype)
    docs[1::3] = docs[0]
    queries = torch.randn(num_q, 16, generator=g, dtype=dtype)
    queries[::2] = torch.randint(-2, 3, (num_q // 2, 16), generator=g).to(dtype)
    labels_q, labels_g = torch.arange(num_q) % 4, torch.arange(num_g) % 4
    layouts = []
    choose = schedule.choose_layout
    monkeypatch.setattr(schedule, "choose_layout",
                        lambda *a, **k: layouts.append(choose(*a, **k)) or layouts[-1])

    def ranked(block_size):
        return rank_embeddings(queries, docs, query_labels=labels_q, gallery_labels=labels_g,
                               similarity=similarity, block_size=block_size)

    tall = ranked(None)
    (layout,) = layouts
    assert layout.block_q >= 2048 and layout.block_g < 2112, layout
    narrow = ranked((1024, layout.block_g))
    for field in ("ptr", "above", "tied", "num_relevant", "gallery_size"):
        assert torch.equal(getattr(narrow, field), getattr(tall, field)), field


def test_wide_rows_narrow_the_gallery_block_not_the_query_block():
    # 1,000 queries x 20,000 items of 4,096 dimensions (+1: euclidean's column) in a 64 MiB
    # pass: the gallery block alone (2,112 x 4,097 floats, 35 MB) overfilled the budget, and
    # the query block shrank to 8 rows (1,250 products, each reading the whole gallery block)
    budget = 64 * 2**20
    block_q, block_g = block_sizes(1000, 20000, 4097, 1, 4, budget)
    assert block_q >= WIDE_ROWS_QUERIES and block_g % PRODUCT_COLUMNS == 0
    assert 3 * block_q * block_g * 4 + block_q * 2 * 28 + block_g * 4097 * 4 <= budget // 2
    # rows of ordinary width keep their query block, in the default budget their gallery block
    # too, and in this one a narrower gallery block, not fewer queries
    default, widest = 256 * 2**20, CPU_BLOCK_CAPS[1]
    assert block_sizes(1000, 20000, 769, 1, 4, default) == (1000, balanced(20000, widest))
    block_q, block_g = block_sizes(1000, 20000, 769, 1, 4, budget)
    assert block_q == 1000 and block_g % PRODUCT_COLUMNS == 0
    assert CPU_BLOCK_CAPS[1] // 2 <= block_g < CPU_BLOCK_CAPS[1]


@pytest.mark.parametrize(
    ("num", "block"), [(5000, 3072), (4500, 3072), (20000, 2112), (10**6, 3072), (700, 3072)]
)
def test_balanced_blocks_cover_the_gallery_padding_little(num, block):
    """A gallery's blocks, all of one width, cover its items; where a block or two more pads
    less than PADDED_AT_MOST, those; and never more blocks than two beyond the fewest."""
    width = balanced(num, block)
    blocks = -(-num // width)
    fewest = -(-num // block)
    assert width <= block and width % PRODUCT_COLUMNS == 0 and blocks * width >= num
    assert fewest <= blocks <= fewest + 2
    padded = blocks * width - num
    tries = [c * min(block, -(-num // (c * PRODUCT_COLUMNS)) * PRODUCT_COLUMNS) - num
             for c in range(fewest, fewest + 3)]
    assert padded <= num * PADDED_AT_MOST or padded == min(tries)


@pytest.mark.parametrize("similarity", ["dot", "cosine", "euclidean"])
def test_wide_rows_rank_alike_in_any_budget(similarity):
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(3000, 2048, generator=gen)
    g[2990:] = g[:10]  # copies in the last columns
    labels = torch.randint(0, 40, (3000,), generator=gen)
    q = g[:64] + 0.5 * torch.randn(64, 2048, generator=gen)
    values = []
    for budget in (32 * 2**20, 2**30):  # a narrowed gallery block, and the usual one
        metric = rm.RetrievalMetrics(["mrr", "map", "recall@10"], similarity=similarity,
                                     memory_budget=budget, ties="pessimistic")
        metric.update(q, labels[:64], role="query")
        metric.update(g, labels, role="gallery")
        values.append({k: v.tolist() for k, v in metric.per_query().items()})
    assert values[0] == values[1]
