"""A query's scores do not depend on how many rows its product holds
(``product_shape.least_product_rows``).

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
from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.ranking.engine import plan, product_shape


@pytest.mark.parametrize(
    ("columns", "width"), [(2112, 64), (2112, 768), (4032, 1024), (192, 1025), (1536, 4097)]
)
def test_products_of_the_least_rows_or_more_compute_each_row_alike(columns, width):
    """Checked on data of its own (not the probe's): products of the least rows, and of more
    (the next few counts, and counts about the thresholds MKL uses on an Intel Xeon with two
    threads: width / 8 rows), equal the same rows of a product of PROBE_ROWS rows bit for bit;
    one of 8 rows fewer does not, where the least is above 8 (it is the least)."""
    least = product_shape.least_product_rows(1, columns, width, torch.float32, torch.device("cpu"))
    assert least % plan.PRODUCT_ROWS == 0 and plan.PRODUCT_ROWS <= least <= product_shape.PROBE_ROWS
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(product_shape.PROBE_ROWS, width, generator=gen)
    g = torch.randn(columns, width, generator=gen)
    block = torch.mm(x, g.T)
    counts = {least + 8 * i for i in range(4)} | {128, 136, 256, 264, 512, 520, 1024}
    for rows in sorted(n for n in counts if least <= n <= product_shape.PROBE_ROWS):
        assert torch.equal(torch.mm(x[:rows], g.T), block[:rows]), rows
    if least > plan.PRODUCT_ROWS:
        fewer = least - plan.PRODUCT_ROWS
        assert not torch.equal(torch.mm(x[:fewer], g.T), block[:fewer])


def test_a_device_is_not_probed():
    assert product_shape.least_product_rows(8, 2112, 1024, torch.float32, torch.device("cuda")) == 8


def _near_copies(num_q: int, width: int, gallery: int, seed: int = 3):
    """Queries, a gallery holding each one's relevant item, 30 near-copies of the first six
    relevant items (a unit in the last place apart) and ``gallery`` others, and its labels."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(num_q, width, generator=gen)
    relevant = q + 0.8 * torch.randn(q.shape, generator=gen)
    near = [relevant[:6] * (1 + 3e-7 * torch.randn(6, width, generator=gen)) for _ in range(30)]
    g = torch.cat([relevant, *near, torch.randn(gallery, width, generator=gen)])
    labels = torch.full((g.shape[0],), -1)
    labels[:num_q] = torch.arange(num_q)
    return q, g, labels


def _on_threads(threads: int, fn, *args):
    """``fn(*args)`` computed with ``threads`` threads (the setting restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn(*args)
    finally:
        torch.set_num_threads(before)


#: the CPU, and a CUDA device where there is one: a device's BLAS (cuBLAS) is not probed, and
#: these tests are how a GPU check (benchmarks/gpu_check.sh) learns whether it must be
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    ),
]


def _reciprocal_ranks(
    q, g, labels, count: int, similarity: str, device: str = "cpu"
) -> list[float]:
    metric = rm.RetrievalMetrics(["mrr"], similarity=similarity, ties="optimistic").to(device)
    q, g, labels = q.to(device), g.to(device), labels.to(device)
    metric.update(q[:count], torch.arange(count), role="query")
    metric.update(g, labels, role="gallery")
    return metric.per_query()["mrr"].tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_a_query_ranks_alone_as_among_many(similarity, device):
    """1,024-wide embeddings, 30 near-copies of each query's relevant item (a unit in the last
    place apart) among 3,000 others: each query's reciprocal rank (optimistic ties: one plus the
    items strictly above) is the same ranked alone, among 3 and among 200. Before the probe, on
    an Intel host with two threads (products of 8 and of 200 rows computed otherwise), the
    first query ranked its relevant item 3rd alone and 12th among 200 (cosine), and among 6
    queries 6 of 6 (cosine) and 5 of 6 (dot) ranked otherwise than among 200."""
    q, g, labels = _near_copies(200, 1024, 3000)
    among_many = _reciprocal_ranks(q, g, labels, 200, similarity, device)[:6]
    assert min(among_many) < 1.0  # (near-copies above some relevant items: ranks to get right)
    for count in (1, 3):
        alone = _reciprocal_ranks(q, g, labels, count, similarity, device)[:6]
        assert alone == among_many[:count], count


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_wide_rows_rank_alike_in_any_number_and_on_any_thread_count(similarity):
    """4,096 dimensions (euclidean: 4,097 columns multiplied): each query ranks the same among
    100 queries as among 600 (MKL splits the inner dimension of products of up to 512 rows,
    that many included, on an Intel Xeon with two threads), and with one thread as with two
    (a DDP worker of one thread beside a single process). It failed (cosine and euclidean)
    while the probe compared with products of 512 rows, themselves split, and at 1,152
    columns, where 8 rows of 4,097-d computed alike but not at 1,536 columns."""
    q, g, labels = _near_copies(600, 4096, 1500, seed=5)
    among_600 = _on_threads(2, _reciprocal_ranks, q, g, labels, 600, similarity)
    among_100 = _on_threads(2, _reciprocal_ranks, q, g, labels, 100, similarity)
    one_thread = _on_threads(1, _reciprocal_ranks, q, g, labels, 100, similarity)
    assert min(among_600[:6]) < 1.0
    assert among_100 == among_600[:100]
    assert one_thread == among_100


@pytest.mark.parametrize("width", [1024, 4096])
def test_products_of_the_least_columns_or_more_compute_each_column_alike(width):
    """Checked on data of its own: products of the least columns and of more equal the same
    columns of a product of 2,048 columns, bit for bit; one of 192 columns fewer does not,
    where the least is above 192. And at that width, the least rows compute alike too."""
    cpu = torch.device("cpu")
    # (0: whole panels are enough)
    least = product_shape.least_product_columns(width, torch.float32, cpu) or plan.PRODUCT_COLUMNS
    assert least % plan.PRODUCT_COLUMNS == 0
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(product_shape.PROBE_ROWS, width, generator=gen)
    g = torch.randn(2048, width, generator=gen)
    block = torch.mm(x, g.T)
    for columns in range(least, min(2048, least + 4 * plan.PRODUCT_COLUMNS) + 1,
                         plan.PRODUCT_COLUMNS):
        assert torch.equal(torch.mm(x, g[:columns].T), block[:, :columns]), columns
    if least > plan.PRODUCT_COLUMNS:
        fewer = least - plan.PRODUCT_COLUMNS
        assert not torch.equal(torch.mm(x, g[:fewer].T), block[:, :fewer])
    rows = product_shape.least_product_rows(1, least, width, torch.float32, cpu)
    assert torch.equal(torch.mm(x[:rows], g[:least].T), block[:rows, :least])


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_a_small_wide_gallery_ranks_alike_on_any_thread_count(similarity):
    """380 items of 4,096 dimensions (one gallery block): the same reciprocal ranks with one
    thread as with two. A block of 384 columns was a product MKL splits between two threads
    on an Intel Xeon (up to 512 columns at this width), and the ranks differed; now the block
    is padded to the columns the BLAS computes alike."""
    q, g, labels = _near_copies(100, 4096, 100, seed=9)
    two = _on_threads(2, _reciprocal_ranks, q, g, labels, 100, similarity)
    one = _on_threads(1, _reciprocal_ranks, q, g, labels, 100, similarity)
    assert min(two[:6]) < 1.0
    assert one == two


def test_a_small_wide_set_ranked_against_itself_ranks_alike_on_any_thread_count():
    """A same-source set of 380 items of 4,096 dimensions (the symmetric pass, one square
    block): every relevant pair's items above and tied the same with one thread as with two, and
    with a budget that narrows the square blocks. Square products of 384 were split between two
    threads on an Intel Xeon (the pairs' counts differed); now the blocks are at least the square
    the BLAS computes alike."""
    _, g, labels = _near_copies(100, 4096, 100, seed=13)
    labels = torch.where(labels < 0, torch.arange(labels.numel()) % 7 + 1000, labels)
    labels[100:280] = torch.arange(6).repeat(30)  # each near-copy in its original's class

    def counts(budget: int | None) -> torch.Tensor:
        table = rank_embeddings(g, None, query_labels=labels, similarity="dot",
                                memory_budget=budget)
        return torch.stack([table.above, table.tied])

    two, narrow = _on_threads(2, counts, None), _on_threads(2, counts, 2**20)
    one = _on_threads(1, counts, None)
    assert torch.equal(one, two)
    assert torch.equal(narrow, two)


def _copies_in_classes(width: int, items: int = 600, seed: int = 17):
    """``items`` rows in pairs, the second of each a unit in the last place above the first
    (near-copies that tie or not by how their products round), 50 classes of pairs."""
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(items, width, generator=gen)
    g[1::2] = torch.nextafter(g[0::2], torch.full_like(g[0::2], 10.0))
    return g, torch.arange(items) // 2 % 50


def _counts(table) -> torch.Tensor:
    return torch.stack([table.above, table.tied]).cpu()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("width", [1024, 2048])
def test_blocks_set_by_block_size_or_a_tiny_budget_rank_alike(width, device):
    """Near-copies at 1,024 and 2,048 dimensions: every relevant pair's items above and tied
    are the same whatever ``block_size`` or ``memory_budget`` cuts the gallery into, one-sided
    (queries against a gallery), same source (square blocks) and both ways (image-text), as
    the docs promise. Blocks of 64 and 128 items, and of 192 at 2,048-d, were multiplied as
    products MKL computes otherwise on an Intel Xeon with two threads (it splits the sum of a
    product of up to about width / 8 columns): 915 of the one-sided pairs' counts, 1,779 of the
    same-source ones and 915 of the two-way ones differed at 1,024-d. Now every block is
    multiplied as a product of the columns the host's BLAS computes alike, zero columns after
    its items (product_shape.product_columns), and cut to them."""
    g, labels = _copies_in_classes(width)
    gen = torch.Generator().manual_seed(1)
    q, q_labels = g[::2][:200] + 0.5 * torch.randn(200, width, generator=gen), labels[::2][:200]
    q, q_labels, g, labels = (x.to(device) for x in (q, q_labels, g, labels))

    one_sided = _counts(rank_embeddings(q, g, query_labels=q_labels, gallery_labels=labels))
    same = _counts(rank_embeddings(g, None, query_labels=labels))
    both = [_counts(t) for t in rm.functional.rank_two_ways(q, g, a_labels=q_labels,
                                                            b_labels=labels)]
    for block in (64, 128, 192):
        got = rank_embeddings(q, g, query_labels=q_labels, gallery_labels=labels,
                              block_size=(8, block))
        assert torch.equal(_counts(got), one_sided), block
        got = rank_embeddings(g, None, query_labels=labels, block_size=(block, block))
        assert torch.equal(_counts(got), same), block
        got = rm.functional.rank_two_ways(q, g, a_labels=q_labels, b_labels=labels,
                                          block_size=block)
        assert all(torch.equal(_counts(t), want) for t, want in zip(got, both, strict=True)), block
    for budget in (2**16, 2**18):
        got = rank_embeddings(q, g, query_labels=q_labels, gallery_labels=labels,
                              memory_budget=budget)
        assert torch.equal(_counts(got), one_sided), budget
        got = rank_embeddings(g, None, query_labels=labels, memory_budget=budget)
        assert torch.equal(_counts(got), same), budget
