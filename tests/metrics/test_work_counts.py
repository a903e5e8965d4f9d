"""The work of a compute(), counted and held to its plan (tests/work_counts.py).

A clock drifts by 2x on a shared machine; these counts do not. Each workload is held to the
least work its plan needs, as a share of one full product of its shapes:

* a set ranked against itself (metric learning): the symmetric pass, half of the product (the
  diagonal blocks whole: (b + 1) / 2b of it in b square blocks), whatever the sizes of the
  classes (all of one size, of varied sizes as in every real dataset, shuffled or grouped), the
  same through a metric class as through the functional layer;
* queries against a gallery, and queries against a judged corpus: one ``Q x N`` product, the
  last gallery block not padded to a wide block's width;
* image-text in both directions: one image x caption product for both tables;
* a class too large for the pairs' budget: ranked a chunk of queries at a time, one product.

On ``44b1674`` the same-source classes of varied size took the one-sided pass (all of the
product) and image-text both ways 2.2x one product: these tests failed there.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from emulated_cuda import emulated_cuda
from retrieval_metrics.functional import rank_embeddings
from retrieval_metrics.functional.ranking.embeddings import embedding_relevance
from retrieval_metrics.functional.ranking.engine import kernels, plan, schedule
from retrieval_metrics.functional.ranking.engine.counters import choose_counter
from retrieval_metrics.functional.ranking.items import Keys
from retrieval_metrics.functional.ranking.reference import rank_embeddings_by_full_sort
from retrieval_metrics.functional.ranking.row_norms import reads_in_one_pass
from retrieval_metrics.functional.ranking.settings import RankingSettings
from retrieval_metrics.metrics.chunks import PAIR_BYTES
from work_counts import Work, counting_work

NAMES = ["hit_rate@1", "hit_rate@4", "map@r", "r_precision", "mrr"]
CLASS_BUDGET = 2**24


def ranking_budget(labels: torch.Tensor, budget: int = CLASS_BUDGET) -> int:
    """The budget a metric class ranks within: what its relevant pairs (counted before the
    ranking, by label: each item's class, itself included, which the ranking then excludes)
    leave at PAIR_BYTES each, and at least half."""
    pairs = int(torch.bincount(labels)[labels].sum())
    return max(budget // 2, budget - min(pairs, budget // PAIR_BYTES) * PAIR_BYTES)


def class_labels(n: int, kind: str, seed: int = 0) -> torch.Tensor:
    """Labels of ``n`` items in classes of one size (5), of sizes 1 to 15 drawn at random
    (``varied``), skewed as SOP's (2 to 12, mostly small: ``skewed``), or with one class
    holding a fifth of the items (``huge``); shuffled."""
    rng = np.random.default_rng(seed)
    if kind == "fixed":
        labels = np.arange(n) // 5
    elif kind == "varied":
        labels = np.repeat(np.arange(n), rng.integers(1, 16, size=n))[:n]
    elif kind == "skewed":
        support = np.arange(2, 13)
        p = 0.84 ** (support - 2)
        labels = np.repeat(np.arange(n), rng.choice(support, size=n, p=p / p.sum()))[:n]
    elif kind == "huge":
        labels = np.where(np.arange(n) < n // 5, 0, 1 + np.arange(n) // 5)
    else:
        raise ValueError(kind)
    return torch.from_numpy(rng.permutation(labels).astype(np.int64))


def embedded(labels: torch.Tensor, dim: int = 16, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(int(labels.max()) + 1, dim, generator=gen)
    return centres[labels] + torch.randn(labels.numel(), dim, generator=gen)


def half_product(n: int, block: int) -> float:
    """The symmetric pass's share of one n x n product: b (b + 1) / 2 square blocks of the
    b^2 that cover n items."""
    b = -(-n // block)
    return b * (b + 1) / 2 * block * block / (n * n)


class _Laid(Exception):
    """Raised once the first ranking of a compute() has chosen its layout: nothing is
    multiplied, so a layout at full size costs only its relevance sets."""


def recorded_layouts(monkeypatch, stop: bool) -> list[schedule.Layout]:
    """The layouts the rankings of the code run take (``schedule.choose_layout``'s answers); with
    ``stop``, the first ranking stops there (``_Laid``)."""
    seen: list[schedule.Layout] = []
    original = schedule.choose_layout

    def recorded(*args, **kwargs):
        seen.append(original(*args, **kwargs))
        if stop:
            raise _Laid
        return seen[-1]

    monkeypatch.setattr(schedule, "choose_layout", recorded)
    return seen


@pytest.fixture
def layouts(monkeypatch):
    """The layout the first ranking of a compute() takes; the compute stops there."""
    return recorded_layouts(monkeypatch, stop=True)


@pytest.fixture
def plans(monkeypatch):
    """Every layout the rankings of the code run take (they run as usual)."""
    return recorded_layouts(monkeypatch, stop=False)


def _assert_laid_out_symmetric(emb: torch.Tensor, labels: torch.Tensor, layouts) -> None:
    """RetrievalMetrics at its default budget, updated in batches of 4,096, lays its one
    ranking out in the symmetric pass (the compute stops there: ``layouts``)."""
    metric = rm.RetrievalMetrics(NAMES)
    for start in range(0, emb.shape[0], 4096):
        metric.update(emb[start : start + 4096], labels[start : start + 4096])
    with pytest.raises(_Laid):
        metric.compute()
    assert len(layouts) == 1
    assert layouts[0].symmetric, layouts[0]


@pytest.mark.parametrize("kind", ["fixed", "varied", "skewed"])
@pytest.mark.parametrize("grouped", [False, True])
def test_sop_sized_classes_take_the_symmetric_pass_at_the_default_budget(layouts, kind, grouped):
    """60,502 x 128 (SOP's test split) through RetrievalMetrics at its default budget, updated
    in batches of 4,096: the symmetric pass in wide square blocks, whatever the class sizes."""
    n = 60502
    labels = class_labels(n, kind)
    if grouped:
        labels = torch.sort(labels).values
    emb = embedded(labels, dim=128)
    _assert_laid_out_symmetric(emb, labels, layouts)
    # wide square blocks (at least half the CPU's widest: fewer pairs of blocks, fewer
    # counting steps), about half of the product
    assert layouts[0].block_g >= plan.CPU_BLOCK_CAPS[2] // 2, layouts[0]
    assert half_product(n, layouts[0].block_g) <= 0.55


def test_wide_rows_take_the_symmetric_pass_where_its_states_cost_less_than_a_matrix(layouts):
    """60,502 x 512 (SOP's size at a common width) at the default budget: its 118 MiB of unit
    rows leave the pass a quarter of the budget, whose quarter its 13 MiB of row states
    overfill; but the symmetric pass never makes the queries' matrix that the one-sided pass
    makes beside the gallery's, and the states fit in that: half the product, in less memory
    (the one-sided pass took 1.9x the time and 411 MiB against 310 MiB above the start)."""
    n = 60502
    labels = class_labels(n, "skewed")
    emb = embedded(labels, dim=512)
    _assert_laid_out_symmetric(emb, labels, layouts)


def test_a_tight_budget_ranks_same_source_in_the_symmetric_pass_alike():
    """3,072 x 256 in 5 MiB: the row states overfill a quarter of the pass's budget but fit in
    the queries' matrix the symmetric pass spares; it computes half the product, and the table
    is the full sort's, bit for bit."""
    n, dim, budget = 3072, 256, 5 * 2**20
    labels = class_labels(n, "varied")
    emb = embedded(labels, dim)
    with counting_work() as work:
        table = rank_embeddings(emb, query_labels=labels, memory_budget=budget)
    assert work.passes == {"one_sided": 0, "symmetric": 1, "two_way": 0}
    assert work.ratio(n, n, dim) <= 0.6
    reference = rank_embeddings_by_full_sort(emb, query_labels=labels, memory_budget=budget)
    for name in ("ptr", "above", "tied", "num_relevant", "gallery_size"):
        assert torch.equal(getattr(table, name), getattr(reference, name)), name


@pytest.mark.parametrize("kind", ["fixed", "varied", "skewed"])
def test_same_source_computes_its_plan_half_the_product(plans, kind):
    """The symmetric pass computes exactly its plan, the b (b + 1) / 2 products of b square
    blocks (none twice: the products it keeps between reading and counting fit), its blocks
    even (under one panel of padding each), the same products through the class as through the
    functional layer given the class's ranking budget."""
    n, dim = 3072, 16
    labels = class_labels(n, kind)
    emb = embedded(labels, dim)
    metric = rm.RetrievalMetrics(NAMES, memory_budget=CLASS_BUDGET)
    for start in range(0, n, 500):
        metric.update(emb[start : start + 500], labels[start : start + 500])
    with counting_work() as work:
        metric.compute()
    assert work.passes == {"one_sided": 0, "symmetric": 1, "two_way": 0}
    assert work.rankings == 1
    (layout,) = plans
    block = layout.block_g
    assert -(-n // block) * block - n < -(-n // block) * 192  # even blocks
    assert work.ratio(n, n, dim) == pytest.approx(half_product(n, block))
    assert half_product(n, block) <= 0.75  # several blocks: about half of the product
    # the counting reads each product once, for the queries on both of its sides (where the
    # compiled count is built): the entries the products computed, not twice as many
    if kernels._count is not None:
        assert 0.9 <= work.entries_counted / (work.multiply_adds // dim) <= 1.0
        assert work.entries_maxima == 0
    with counting_work() as functional:
        rank_embeddings(emb, query_labels=labels, memory_budget=ranking_budget(labels))
    assert functional.multiply_adds == work.multiply_adds
    assert functional.passes == work.passes


def test_a_class_too_large_for_the_pairs_budget_is_one_product_in_chunks():
    n, dim = 3072, 16
    labels = class_labels(n, "huge")  # 614 items in one class: 376k relevant pairs
    emb = embedded(labels, dim)
    metric = rm.RetrievalMetrics(NAMES, memory_budget=CLASS_BUDGET)
    metric.update(emb, labels)
    with counting_work() as work:
        metric.compute()
    assert work.rankings > 1  # chunks of queries, each against every item
    assert work.passes["symmetric"] == 0
    assert 1.0 <= work.ratio(n, n, dim) <= 1.05


@pytest.mark.parametrize(("num_q", "num_g"), [(1000, 4500), (300, 2300), (2500, 700)])
def test_query_gallery_computes_one_product(num_q, num_g):
    dim = 16
    labels = class_labels(num_q + num_g, "varied")
    emb = embedded(labels, dim)
    metric = rm.RetrievalMetrics(NAMES)
    metric.update(emb[:num_q], labels[:num_q], role="query")
    for start in range(num_q, num_q + num_g, 1000):
        stop = min(start + 1000, num_q + num_g)
        metric.update(emb[start:stop], labels[start:stop], role="gallery")
    with counting_work() as work:
        metric.compute()
    assert work.passes["symmetric"] == work.passes["two_way"] == 0
    # the padding: query rows to a multiple of 8, gallery blocks to whole panels of 192
    assert 1.0 <= work.ratio(num_q, num_g, dim) <= 1.1
    # the compiled count raises each row's depth threshold from its own heap: no block is
    # reduced to segment maxima, not even the first ones read before counting starts
    if kernels._count is not None:
        assert work.entries_maxima == 0


@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("form", ["labels", "qrels"])
def test_a_gallery_of_small_batches_costs_what_one_batch_costs(similarity, dtype, form):
    """A gallery given 8 rows an update (a dataloader's batches) is read as one batch is:
    the operators of a compute() do not grow with the number of batches (on 96c0f54 they did,
    a handful a batch: a norm, a division and a copy each, or four to pick rows from each, 1.6x
    the user's product + topk where the batches were 10,000), and the values are the same."""
    num_q, num_g, dim = 40, 3000, 16
    gen = torch.Generator().manual_seed(1)
    docs = torch.randn(num_g, dim, generator=gen).to(dtype)
    labels = torch.randint(0, 300, (num_g,), generator=gen)
    queries = docs[:num_q].float() + 0.3 * torch.randn(num_q, dim, generator=gen)
    qrels = {f"q{q}": {f"d{(7 * q) % num_g}": 1, f"d{q}": 2} for q in range(num_q)}

    def counted(rows_an_update: int) -> tuple[dict[str, float], int]:
        if form == "labels":
            metric = rm.RetrievalMetrics(NAMES, similarity=similarity)
            metric.update(queries.to(dtype), labels[:num_q], role="query")
        else:
            metric = rm.RetrievalMetrics(["ndcg@10", "recall@100"], qrels=qrels,
                                         similarity=similarity)
            metric.update(queries.to(dtype), ids=[f"q{q}" for q in range(num_q)], role="query")
        for start in range(0, num_g, rows_an_update):
            stop = min(start + rows_an_update, num_g)
            if form == "labels":
                metric.update(docs[start:stop], labels[start:stop], role="gallery")
            else:
                metric.update(docs[start:stop], ids=[f"d{d}" for d in range(start, stop)],
                              role="gallery")
        with counting_work() as work:
            values = {k: float(v) for k, v in metric.compute().items()}
        return values, work.operations

    one, one_ops = counted(num_g)
    small, small_ops = counted(8)  # 375 batches
    assert small == one
    assert small_ops <= one_ops + 20


@pytest.mark.parametrize("protocol", [None, "beir"])
def test_qrels_computes_at_most_one_product(protocol):
    num_q, num_g, dim = 400, 5000, 16
    gen = torch.Generator().manual_seed(0)
    docs = embedded(torch.arange(num_g) % 1000, dim)
    judged = torch.randint(0, num_g, (num_q, 3), generator=gen)
    queries = docs[judged[:, 0]] + 0.5 * torch.randn(num_q, dim, generator=gen)
    qrels = {f"q{q}": {f"d{int(d)}": 1 for d in judged[q]} for q in range(num_q)}
    metric = rm.RetrievalMetrics(["ndcg@10", "recall@100", "mrr@10"], qrels=qrels,
                                 protocol=protocol)
    metric.update(queries, ids=[f"q{q}" for q in range(num_q)], role="query")
    for start in range(0, num_g, 1024):
        ids = [f"d{d}" for d in range(start, min(start + 1024, num_g))]
        metric.update(docs[start : start + 1024], ids=ids, role="gallery")
    with counting_work() as work:
        metric.compute()
    assert work.passes == {"one_sided": 1, "symmetric": 0, "two_way": 0}
    assert work.ratio(num_q, num_g, dim) <= 1.05


def test_locating_the_judged_documents_computes_one_product():
    # graded judgments with grade-0 documents, queries judging from 1 to 40 documents: the
    # measures that read which documents were judged (Judged@K, bpref, a condensed list)
    # place every judged document in the same single product as the relevant ones
    num_q, num_g, dim = 300, 4000, 16
    gen = torch.Generator().manual_seed(1)
    docs = embedded(torch.arange(num_g) % 800, dim)
    sizes = 1 + torch.arange(num_q) % 40
    judged = [torch.randint(0, num_g, (int(n),), generator=gen) for n in sizes]
    queries = docs[torch.stack([j[0] for j in judged])] + 0.5 * torch.randn(num_q, dim,
                                                                            generator=gen)
    qrels = {f"q{q}": {f"d{int(d)}": int(d) % 4 for d in judged[q]} for q in range(num_q)}
    works = {}
    for names in (["ndcg@10", "map"], ["ndcg@10", "map", "Judged@10", "Bpref",
                                       "nDCG(judged_only=True)@10"]):
        metric = rm.RetrievalMetrics(names, qrels=qrels, ignore_identical_ids=False)
        metric.update(queries, ids=[f"q{q}" for q in range(num_q)], role="query")
        metric.update(docs, ids=[f"d{d}" for d in range(num_g)], role="gallery")
        with counting_work() as work:
            metric.compute()
        works[len(names)] = work
    for work in works.values():
        assert work.passes == {"one_sided": 1, "symmetric": 0, "two_way": 0}
        # the padding: query rows to a multiple of 8, gallery blocks to whole panels of 192
        assert work.ratio(num_q, num_g, dim) <= 1.1
    assert works[5].multiply_adds == works[2].multiply_adds
    assert works[5].products == works[2].products


def test_a_half_precision_corpus_does_the_float32_work(tmp_path):
    """float16 corpora read a block at a time (in batches, or from a .npy on disk through
    set_gallery, its query updates ranked at compute()): the multiply-adds of the same corpus
    in float32, one queries x corpus product."""
    num_q, num_g, dim = 400, 5000, 16
    gen = torch.Generator().manual_seed(2)
    docs = embedded(torch.arange(num_g) % 1000, dim).half()
    judged = torch.randint(0, num_g, (num_q, 2), generator=gen)
    queries = docs[judged[:, 0]].float() + 0.5 * torch.randn(num_q, dim, generator=gen)
    qrels = {f"q{q}": {f"d{int(d)}": 1 for d in judged[q]} for q in range(num_q)}
    doc_ids = [f"d{d}" for d in range(num_g)]
    np.save(tmp_path / "corpus.npy", docs.numpy())
    work = {}
    for held in ("float32_batches", "half_batches", "half_on_disk"):
        metric = rm.RetrievalMetrics(["ndcg@10", "recall@100"], qrels=qrels, protocol="beir")
        if held == "half_on_disk":
            metric.set_gallery(tmp_path / "corpus.npy", ids=doc_ids)
        else:
            corpus = docs.float() if held == "float32_batches" else docs
            for start in range(0, num_g, 1024):
                metric.update(corpus[start : start + 1024], ids=doc_ids[start : start + 1024],
                              role="gallery")
        with counting_work() as work[held]:
            metric.update(queries, ids=[f"q{q}" for q in range(num_q)], role="query")
            metric.compute()
        assert work[held].passes == {"one_sided": 1, "symmetric": 0, "two_way": 0}, held
        assert work[held].ratio(num_q, num_g, dim) <= 1.05, held
    assert work["half_batches"].multiply_adds == work["float32_batches"].multiply_adds
    assert work["half_on_disk"].multiply_adds == work["float32_batches"].multiply_adds


@pytest.mark.parametrize(("images", "per_image"), [(560, 5), (376, 5), (1140, 1)])
def test_image_text_both_ways_is_one_product(images, per_image):
    dim = 16
    captions = images * per_image
    gen = torch.Generator().manual_seed(1)
    image_emb = torch.randn(images, dim, generator=gen)
    image_of = torch.arange(captions) // per_image
    caption_emb = image_emb[image_of] + torch.randn(captions, dim, generator=gen)
    metric = rm.CrossModalRetrieval(k=(1, 5, 10))
    for start in range(0, captions, 500):
        rows = image_of[start : start + 500]
        # images given once per caption, as a loader of pairs gives them
        metric.update(image_emb[rows], caption_emb[start : start + 500], rows)
    with counting_work() as work:
        metric.compute()
    assert work.passes == {"one_sided": 0, "symmetric": 0, "two_way": 1}
    # each set in even blocks of its own, padded to whole panels of 192 (560 images: 576 rows;
    # 2,800 captions: two blocks of 1,536); no set padded to the other's block
    assert 1.0 <= work.ratio(images, captions, dim) <= 1.15
    # each product read once by the counting, for both directions (where the compiled count
    # is built)
    if kernels._count is not None:
        assert work.entries_counted == work.multiply_adds // dim


def test_emulated_device_same_source_takes_the_symmetric_pass(plans):
    n, dim = 1536, 16
    labels = class_labels(n, "varied")
    emb = embedded(labels, dim)
    with emulated_cuda():
        metric = rm.RetrievalMetrics(NAMES, memory_budget=CLASS_BUDGET).to("cuda")
        for start in range(0, n, 512):
            metric.update(emb[start : start + 512].cuda(), labels[start : start + 512].cuda())
        with counting_work() as work:
            metric.compute()
    assert work.passes == {"one_sided": 0, "symmetric": 1, "two_way": 0}
    (layout,) = plans
    assert work.ratio(n, n, dim) == pytest.approx(half_product(n, layout.block_g))
    assert half_product(n, layout.block_g) <= 0.75


def test_plan_of_gives_the_layout_the_ranking_takes(plans):
    """``schedule.plan_of`` answers, without ranking, with the layout the ranking then takes."""
    n = 3072
    labels = class_labels(n, "varied")
    emb = embedded(labels)
    settings = RankingSettings(memory_budget=2**23)
    inputs = embedding_relevance(emb, None, Keys(labels=labels), None, settings)
    asked = schedule.plan_of(inputs, settings)
    rank_embeddings(emb, query_labels=labels, memory_budget=2**23)
    assert plans == [asked, asked]  # plan_of's own choice, then the ranking's: the same
    assert asked.symmetric


def _beir_work(num_g: int, similarity: str, dtype: torch.dtype, strong: bool) -> Work:
    """compute()'s work on 300 queries x ``num_g`` judged documents (in batches of 10,000, 64
    wide, BEIR's protocol): a middling model, or a strong one (every query near a judged
    document: its rows stay in the products to the end)."""
    num_q, dim = 300, 64
    gen = torch.Generator().manual_seed(0)
    qrels = {f"q{q}": {f"d{(q * 37 + j) % 20000}": 1 for j in range(1 + q % 3)}
             for q in range(num_q)}
    metric = rm.RetrievalMetrics(["ndcg@10", "recall@100"], qrels=qrels, protocol="beir",
                                 similarity=similarity)
    first = None
    for start in range(0, num_g, 10000):
        x = torch.randn(10000, dim, generator=gen)
        first = x if first is None else first
        metric.update(x.to(dtype), ids=[f"d{i}" for i in range(start, start + 10000)],
                      role="gallery")
    queries = torch.randn(num_q, dim, generator=gen)
    if strong:
        queries += 3 * first[(torch.arange(num_q) * 37) % 10000]
    metric.update(queries.to(dtype), ids=[f"q{i}" for i in range(num_q)], role="query")
    with counting_work() as work:
        metric.compute()
    return work


@pytest.mark.parametrize("strong", [False, True], ids=["middling", "strong"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_work_besides_the_product_is_a_pass_over_the_corpus(similarity, dtype, strong):
    """What compute() writes besides its products (torch's operators and the compiled one-pass
    read; the compiled count reads the scores and writes nothing per item), per corpus item
    added: the gallery's blocks read from its batches (the quarter of them that straddle two
    batches copied), upcast and divided by their norms in one pass (for cosine, or half
    precision; two passes by torch's operators where the compiled read is not built), and a
    few dozen numbers of bookkeeping an item (ids, positions, orders); per score entry, nearly
    nothing (a kept block cut to the rows still ranked, once). On a GPU-fast product this is
    what is left: another pass over the corpus, or a copy of the score blocks, would show
    here. (Before the one-pass read, float16 rows under cosine were written twice.)"""
    small, large = (_beir_work(n, similarity, dtype, strong) for n in (20000, 80000))
    assert small.query_blocks == large.query_blocks == 1
    added_items, dim = 60000, 64
    added_scores = (large.multiply_adds - small.multiply_adds) / dim
    cosine, half = similarity == "cosine", dtype == torch.float16
    one_pass = reads_in_one_pass(dtype, dim, torch.device("cpu"))
    passes = 0.25 + (max(cosine, half) if one_pass else cosine + half)
    allowed = added_items * (passes * dim + 40) + 0.1 * added_scores
    assert large.elements_written - small.elements_written <= allowed
    # and the strong model's rows, counted to the end, did read almost every score
    assert not strong or added_scores > 0.9 * added_items * 300


def _device_beir_work(num_g: int, similarity: str, dtype: torch.dtype) -> Work:
    """The ranking's work on the emulated CUDA device: 300 queries against ``num_g`` documents
    given with set_gallery in device memory, BEIR's protocol, a small budget (several query
    blocks, one gallery block: the corpus padded to the block's width)."""
    num_q, dim = 300, 64
    gen = torch.Generator().manual_seed(0)
    qrels = {f"q{q}": {f"d{(q * 37 + j) % num_g}": 1 for j in range(1 + q % 3)}
             for q in range(num_q)}
    corpus = torch.randn(num_g, dim, generator=gen)
    queries = torch.randn(num_q, dim, generator=gen)
    with emulated_cuda():
        metric = rm.RetrievalMetrics(["ndcg@10", "recall@100"], qrels=qrels, protocol="beir",
                                     similarity=similarity, memory_budget=2**26).to("cuda")
        metric.set_gallery(corpus.to(dtype).cuda(), ids=[f"d{i}" for i in range(num_g)])
        # whether the device has the half product is asked of it once in a process (a 1 x 1
        # product), before the first ranking: asked here, so that the count is the ranking's
        choose_counter("cuda").multiplies_half(dtype, dtype)
        with counting_work() as work:
            # (against a gallery given once, the query updates are ranked at compute())
            metric.update(queries.to(dtype).cuda(), ids=[f"q{i}" for i in range(num_q)],
                          role="query")
            metric.compute()
    return work


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
def test_device_work_besides_the_product_and_the_count(similarity, dtype):
    """On a device, what compute() writes besides its products and the counting backend's own
    work, per corpus item added: a few passes over the item (its padded block, the norms, the
    extra column of euclidean's float32 rows), and per score nothing but the one pass of a
    half-precision product's factors (cosine's 1/|g|, euclidean's |g|^2). A copy of the score
    blocks, or the padded corpus copied again for every query block (as it was), fails it.
    torch's whole-block count writes its positions and flags, a bounded number a score (the
    Triton kernel writes none)."""
    small, large = (_device_beir_work(n, similarity, dtype) for n in (6000, 24100))
    for work in (small, large):  # several query blocks, one (padded) gallery block each
        assert work.products == work.query_blocks > 1
    added_items, num_q, dim = 18100, 300, 64
    added_scores = large.entries_counted - small.entries_counted  # (every score counted)
    assert added_scores == pytest.approx(added_items * num_q, rel=0.02)
    besides = [w.elements_written - w.elements_counting for w in (small, large)]
    score_passes = int(dtype == torch.bfloat16 and similarity != "dot")
    item_passes = 6 if similarity == "euclidean" else 3
    allowed = added_scores * score_passes + added_items * (item_passes * (dim + 1) + 40)
    assert besides[1] - besides[0] <= allowed
    assert large.elements_counting - small.elements_counting <= 16 * added_scores


@pytest.mark.parametrize("qrels", [False, True], ids=["labels", "qrels"])
def test_queries_in_small_updates_against_a_fixed_gallery_share_one_pass(qrels):
    """Queries given 8 at a time against a gallery given once (``set_gallery``): the updates
    rank nothing, and compute() ranks them all in one pass over the gallery, the work of one
    update of every query (16 passes before: each update was ranked as it came, the gallery
    read and divided by its norms once per 8 queries). The values are the same."""
    num_q, num_g, dim = 128, 3000, 16
    gen = torch.Generator().manual_seed(4)
    docs = embedded(torch.arange(num_g) % 300, dim)
    labels = torch.randint(0, 300, (num_q,), generator=gen)
    queries = embedded(labels, dim) + 0.5 * torch.randn(num_q, dim, generator=gen)
    q_ids = [f"q{q}" for q in range(num_q)]
    judged = {f"q{q}": {f"d{int(labels[q]) + 300 * j}": 1 for j in range(3)} for q in range(num_q)}

    def metric() -> rm.RetrievalMetrics:
        names = ["ndcg@10", "recall@100", "mrr"]
        if qrels:
            m = rm.RetrievalMetrics(names, qrels=judged, protocol="beir")
            m.set_gallery(docs, ids=[f"d{d}" for d in range(num_g)])
        else:
            m = rm.RetrievalMetrics(names)
            m.set_gallery(docs, torch.arange(num_g) % 300)
        return m

    def given(m, rows) -> None:
        m.update(queries[rows], None if qrels else labels[rows], role="query",
                 ids=[q_ids[r] for r in rows])

    whole, small = metric(), metric()
    with counting_work() as updates:
        for start in range(0, num_q, 8):
            given(small, range(start, start + 8))
    assert updates.rankings == 0 and updates.multiply_adds == 0
    with counting_work() as work:
        values = small.compute()
    given(whole, range(num_q))
    with counting_work() as one:
        expected = whole.compute()
    assert work.passes == {"one_sided": 1, "symmetric": 0, "two_way": 0}
    assert work.rankings == 1
    assert work.multiply_adds == one.multiply_adds
    assert work.ratio(num_q, num_g, dim) <= 1.1
    assert {k: float(v) for k, v in values.items()} == {k: float(v) for k, v in expected.items()}
