"""engine.listing: the lists a ranking keeps as it counts (``retrieval-metrics evaluate
--write-run``: one pass over the corpus for the table and the run) are top_k's, bit for bit, and
the table is the same as without them; where the pass cannot keep top_k's lists (another pass,
ties ordered by id, half products on a device's tensor cores), none are given and the caller
lists with top_k."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
from emulated_cuda import fake_cuda_fixture  # noqa: F401
from retrieval_metrics.functional.ranking.engine.counters import COUNTER_ENV
from retrieval_metrics.functional.ranking.engine.listing import RunListing, listing
from retrieval_metrics.functional.ranking.labels import label_codes
from retrieval_metrics.functional.ranking.top_lists import top_k

NAMES = ["ndcg@10", "recall@5", "mrr@10"]


def _data(nq, ng, dim, seed, codes, dtype):
    """Queries and a corpus (binary codes: scores full of ties), ids with some queries' own ids
    among the documents (left out of their lists), 1-3 judged documents a query."""
    gen = torch.Generator().manual_seed(seed)
    if codes:
        q = torch.randint(0, 2, (nq, dim), generator=gen).to(dtype)
        g = torch.randint(0, 2, (ng, dim), generator=gen).to(dtype)
    else:
        g = torch.randn(ng, dim, generator=gen).to(dtype)
        q = (g[torch.randint(0, ng, (nq,), generator=gen)]
             + torch.randn(nq, dim, generator=gen).to(dtype))
    q_ids = [f"q{i}" for i in range(nq)]
    d_ids = [f"d{j}" for j in range(ng)]
    for i in range(0, min(nq, ng), 3):
        d_ids[(7 * i) % ng] = q_ids[i] if q_ids[i] not in d_ids else d_ids[(7 * i) % ng]
    picks = torch.randint(0, ng, (nq, 3), generator=gen).tolist()
    qrels = {q_ids[i]: {d_ids[j]: 1 + (j % 2) for j in row[: 1 + i % 3]}
             for i, row in enumerate(picks)}
    return q, g, q_ids, d_ids, qrels


def _ranked(q, g, q_ids, d_ids, qrels, k, similarity, parts, kept, **options):
    """A metric of a fixed gallery, its queries given in ``parts`` updates, inside a listing of
    ``k`` where ``kept`` (else none); its values and the listing."""
    metric = rm.RetrievalMetrics(NAMES, qrels=qrels, protocol="beir", similarity=similarity,
                                 **options)
    metric.set_gallery(g, ids=d_ids)
    bounds = np.linspace(0, len(q_ids), parts + 1).round().astype(int)

    def updates():
        for lo, hi in itertools.pairwise(bounds):
            metric.update(q[lo:hi], ids=q_ids[lo:hi], role="query")

    updates()
    if not kept:
        return metric.compute(), None
    with listing(k) as lists:  # (the queries are ranked at compute(), all at once)
        values = metric.compute()
    return values, _InOrderGiven(lists, q_ids)


class _InOrderGiven:
    """A listing whose ``found`` puts the rows back in the order the queries were given: the
    metric ranks its queries in ascending order of their ids' codes (per_query()'s order)."""

    def __init__(self, lists: RunListing, q_ids: list[str]):
        self.lists, self.complete = lists, lists.complete
        self.back = torch.argsort(torch.argsort(label_codes(q_ids, "ids")))

    def found(self, num_queries: int):
        found = self.lists.found(num_queries)
        if found is None:
            return None
        return found[0][self.back.to(found[0].device)], found[1][self.back.to(found[1].device)]

    def exact(self) -> bool:
        return self.lists.exact()


def _same_values(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.filterwarnings("ignore:RetrievalMetrics. the cut-off reaches")
@settings(max_examples=60, deadline=None)
@given(
    nq=st.integers(1, 30), ng=st.integers(2, 260), dim=st.integers(1, 6), k=st.integers(1, 40),
    seed=st.integers(0, 10_000), codes=st.booleans(),
    similarity=st.sampled_from(["cosine", "dot", "euclidean"]),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]),
    parts=st.integers(1, 3), budget=st.sampled_from([None, 1 << 16, 1 << 18]),
)
def test_the_lists_kept_as_the_ranking_counts_are_top_ks(nq, ng, dim, k, seed, codes,
                                                         similarity, dtype, parts, budget):
    """Against top_k of every query at once: ties in gallery order, a document of the query's
    own id left out (BEIR's ``ignore_identical_ids``), the queries in one to three updates (ranked
    together at compute()), scratch budgets small enough for several query and gallery blocks (the
    kept and the gathered relevant blocks too); and the values of a metric ranked without a
    listing, whose queries leave the products once their ranks are known."""
    q, g, q_ids, d_ids, qrels = _data(nq, ng, dim, seed, codes, dtype)
    options = {} if budget is None else {"memory_budget": budget}
    plain, _ = _ranked(q, g, q_ids, d_ids, qrels, k, similarity, parts, False, **options)
    values, lists = _ranked(q, g, q_ids, d_ids, qrels, k, similarity, parts, True, **options)
    _same_values(values, plain)
    found = lists.found(nq)
    assert found is not None
    expected = top_k(q, g, k, similarity=similarity, query_ids=q_ids, gallery_ids=d_ids,
                     exclude_identical_ids=True)
    assert torch.equal(found[0], expected.indices)
    assert torch.equal(found[1], expected.scores)



@pytest.mark.filterwarnings("ignore:RetrievalMetrics. the cut-off reaches")
@settings(max_examples=30, deadline=None)
@given(
    nq=st.integers(1, 30), ng=st.integers(2, 260), dim=st.integers(2, 6), k=st.integers(1, 40),
    seed=st.integers(0, 10_000), codes=st.booleans(),
    budget=st.sampled_from([None, 1 << 16, 1 << 18]),
)
def test_an_accelerators_lists_are_top_ks_or_none_where_a_cut_ties(nq, ng, dim, k, seed, codes,
                                                                   budget):
    """The lists an accelerator's pass keeps (torch's whole-block counter, here on the CPU:
    running_best.UnwaitedBest, no host read a block): top_k's where no block's cut falls in a
    tie; where one may (binary codes), None, from the one read of the device that says so,
    and the caller lists with top_k. The values are those of the CPU's ranking."""
    q, g, q_ids, d_ids, qrels = _data(nq, ng, dim, seed, codes, torch.float32)
    options = {} if budget is None else {"memory_budget": budget}
    plain, _ = _ranked(q, g, q_ids, d_ids, qrels, k, "cosine", 1, False, **options)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(COUNTER_ENV, "torch")
        values, lists = _ranked(q, g, q_ids, d_ids, qrels, k, "cosine", 1, True, **options)
    _same_values(values, plain)
    found = lists.found(nq)
    if found is None:
        assert lists.complete and not lists.exact()
        return
    expected = top_k(q, g, k, query_ids=q_ids, gallery_ids=d_ids, exclude_identical_ids=True)
    assert torch.equal(found[0], expected.indices)
    assert torch.equal(found[1], expected.scores)


def test_an_accelerators_lists_of_distinct_scores_are_kept():
    """Real-valued scores, no tie at any cut: the accelerator's pass keeps top_k's lists."""
    q, g, q_ids, d_ids, qrels = _data(40, 3000, 16, 1, False, torch.float32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(COUNTER_ENV, "torch")
        _, lists = _ranked(q, g, q_ids, d_ids, qrels, 25, "cosine", 2, True,
                           memory_budget=1 << 18)
    found = lists.found(40)
    assert found is not None
    expected = top_k(q, g, 25, query_ids=q_ids, gallery_ids=d_ids, exclude_identical_ids=True)
    assert torch.equal(found[0], expected.indices)
    assert torch.equal(found[1], expected.scores)


def test_a_corpus_on_disk_read_once_gives_top_ks_lists(tmp_path):
    """A float16 corpus in a .npy file (norms and the scan for NaN computed as the ranking
    reads it), 700 queries in two updates, blocks of a small budget."""
    q, g, q_ids, d_ids, qrels = _data(700, 5_000, 24, 3, False, torch.float16)
    np.save(tmp_path / "corpus.npy", g.numpy())
    metric = rm.RetrievalMetrics(NAMES, qrels=qrels, protocol="beir", memory_budget=1 << 20)
    metric.set_gallery(tmp_path / "corpus.npy", ids=d_ids)
    metric.update(q[:400], ids=q_ids[:400], role="query")
    metric.update(q[400:], ids=q_ids[400:], role="query")
    with listing(100) as lists:
        metric.compute()
    found = _InOrderGiven(lists, q_ids).found(700)
    assert found is not None
    expected = top_k(q, tmp_path / "corpus.npy", 100, query_ids=q_ids, gallery_ids=d_ids,
                     exclude_identical_ids=True)
    assert torch.equal(found[0], expected.indices)
    assert torch.equal(found[1], expected.scores)


def test_rankings_whose_lists_are_not_top_ks_give_none():
    """Ties ordered by id (sentence-transformers' preset: top_k orders the gallery by id, the
    ranking counts ties by key), a same-source set (the symmetric pass), and a listing asked
    for more queries than were ranked: None, and the caller lists with top_k."""
    q, g, q_ids, d_ids, qrels = _data(20, 200, 4, 5, True, torch.float32)
    metric = rm.RetrievalMetrics(NAMES, qrels=qrels, protocol="sentence_transformers")
    metric.set_gallery(g, ids=d_ids)
    metric.update(q, ids=q_ids, role="query")
    with listing(10) as lists:
        metric.compute()
    assert not lists.complete and lists.found(20) is None
    same = rm.RetrievalMetrics(["mrr"], similarity="dot")
    with listing(10) as lists:
        same.update(g, torch.arange(200) % 7)
        same.compute()
    assert lists.found(200) is None
    _, lists = _ranked(q, g, q_ids, d_ids, qrels, 10, "cosine", 1, True)
    assert lists.found(20) is not None and lists.found(21) is None


def test_on_the_emulated_device_the_lists_are_top_ks_in_float32_and_on_the_tensor_cores(
    fake_cuda,
):
    """On a device, float32 queries and corpus, and float16 ones multiplied on the tensor cores
    (``tensor_cores``: the pass counts cosines without each query's factor, and lists the true
    cosines from each block's product before its factors): the lists are top_k's there, bit
    for bit."""
    for dtype in (torch.float32, torch.float16):
        q, g, q_ids, d_ids, qrels = _data(25, 300, 8, 6, False, dtype)
        metric = rm.RetrievalMetrics(NAMES, qrels=qrels, protocol="beir").to("cuda")
        metric.set_gallery(g.to("cuda"), ids=d_ids)
        metric.update(q.to("cuda"), ids=q_ids, role="query")
        with listing(15) as lists:
            metric.compute()
        found = _InOrderGiven(lists, q_ids).found(25)
        assert found is not None, dtype
        expected = top_k(q.to("cuda"), g.to("cuda"), 15, query_ids=q_ids,
                         gallery_ids=d_ids, exclude_identical_ids=True)
        assert found[0].device.type == "cuda"
        assert torch.equal(found[0].cpu(), expected.indices.cpu()), dtype
        assert torch.equal(found[1].cpu(), expected.scores.cpu()), dtype


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_a_listing_of_no_positive_depth_is_refused_by_name(k):
    with pytest.raises(ValueError, match="`k` must be a positive int"):
        RunListing(k)
