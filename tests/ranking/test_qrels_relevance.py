"""The functional layer's relevance by judgments: ``rank_embeddings(relevance="qrels",
qrels=qrels)`` with a mapping read by the query ids, judged documents the gallery lacks
relevant and never retrieved (m, ideal DCG, depth unbounded), identical ids left out."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import retrieval_metrics as rm
from retrieval_metrics.functional import retrieval_measures
from retrieval_metrics.functional.ranking import rank_embeddings
from retrieval_metrics.functional.ranking.qrels import Judgments, positions_among, sorted_ids
from retrieval_metrics.functional.table import UNBOUNDED


def _unit(angle):
    return [math.cos(angle), math.sin(angle)]


GALLERY = torch.tensor([_unit(a) for a in (0.1, 0.5, 1.0, 2.0)], dtype=torch.float64)
QUERY = torch.tensor([_unit(0.0), _unit(2.1)], dtype=torch.float64)


def test_a_mapping_is_read_by_query_ids_with_documents_the_gallery_lacks():
    qrels = {"q1": {"d1": 2, "d3": 1, "dx": 3, "d0": 0}, "q2": ["d3", "q2"]}
    table = rank_embeddings(
        QUERY, GALLERY, query_ids=["q1", "q2"], gallery_ids=["d0", "d1", "d2", "q2"],
        relevance="qrels", qrels=qrels,
    )
    # q1: d1 at rank 2; d3 and dx are not in this gallery (relevant, never retrieved); d0 grade 0
    # q2: "q2" is the query's own id: left out of ranking and judgments; d3 absent
    assert table.num_relevant.tolist() == [3, 1]
    assert table.above.tolist() == [1]
    assert table.gallery_size.tolist() == [4, 3]
    assert table.depth.tolist() == [UNBOUNDED, UNBOUNDED]
    assert table.ideal_grade.tolist() == [3.0, 2.0, 1.0, 1.0]
    values = retrieval_measures(table, ["recall@4", "mrr", "ndcg"], gain="linear")
    assert float(values["recall@4"]) == pytest.approx((1 / 3 + 0) / 2, abs=1e-15)
    dcg = 2 / math.log2(3)
    idcg = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert float(values["ndcg"]) == pytest.approx((dcg / idcg + 0) / 2, abs=1e-15)


def test_identical_ids_kept_when_asked_and_string_ids_in_sequences():
    qrels = {"q2": ["q2"]}
    kept = rank_embeddings(
        QUERY[1:], GALLERY, query_ids=["q2"], gallery_ids=["d0", "d1", "d2", "q2"],
        relevance="qrels", qrels=qrels, ignore_identical_ids=False,
    )
    assert kept.num_relevant.tolist() == [1] and kept.above.tolist() == [0]
    # one collection per query, naming string gallery ids
    per_query = rank_embeddings(
        QUERY, GALLERY, gallery_ids=["d0", "d1", "d2", "d3"], relevance="ids",
        relevant_ids=[["d1"], {"d3": 2}],
    )
    assert per_query.above.tolist() == [1, 0]


def test_judgments_fingerprint_and_refusals():
    a = Judgments.of({"q": {"d": 1}, 7: ["x"]})
    assert a.fingerprint == Judgments.of({7: ["x"], "q": {"d": 1}}).fingerprint
    assert a.fingerprint != Judgments.of({"q": {"d": 2}, 7: ["x"]}).fingerprint
    assert Judgments.of({"7": ["1"]}).integer_ids and not a.integer_ids
    with pytest.raises(ValueError, match="one query twice"):
        Judgments.of({7: ["a"], "7": ["b"]})
    with pytest.raises(ValueError, match="twice"):
        Judgments.of({"q": {1: 1, "1": 2}})
    with pytest.raises(ValueError, match="finite"):
        Judgments.of({"q": {"d": float("nan")}})
    with pytest.raises(ValueError, match="collection"):
        Judgments.of({"q": "d1"})


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-5, 60), min_size=0, max_size=300),
       st.lists(st.integers(-8, 70), max_size=12))
def test_ids_looked_up_among_a_few_are_found_as_in_the_whole_sort(ids, among):
    """``sorted_ids(ids, among=...)`` (the corpus looked up in a few judged ids) finds every id
    of ``among`` at the positions, in the order, that the sort of every id gives."""
    ids, among = torch.tensor(ids, dtype=torch.int64), torch.tensor(among, dtype=torch.int64)
    whole_order, whole = sorted_ids(ids)
    order, some = sorted_ids(ids, among=among)
    assert torch.equal(some, ids[order]) and bool((some[1:] >= some[:-1]).all())
    for value in among.tolist():
        assert torch.equal(order[some == value], whole_order[whole == value]), value


INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=120, deadline=None)
@given(
    ids=st.lists(
        st.one_of(INT64, st.integers(-3, 3).map(lambda k: k << 40), st.integers(-50, 50)),
        max_size=400,
    ),
    wanted=st.lists(st.one_of(INT64, st.integers(-3, 3).map(lambda k: k << 40),
                              st.integers(-50, 50)), min_size=1, max_size=40),
    scale=st.sampled_from([1, 2**20, 2**40]),
)
def test_positions_among_equal_torch_isin(ids, wanted, scale):
    """``positions_among`` (each id's bucket read in a table of the wanted ids' buckets, the
    few in a marked bucket searched) finds exactly the ids ``torch.isin`` finds, over the whole
    int64 range: ids that share their low bits (multiples of 2**20, 2**40), the extremes, repeats
    on either side, ids that collide in a bucket."""
    t = torch.tensor(ids, dtype=torch.int64)
    t = torch.where(t.abs() <= 50, t * scale, t)  # (small ids spread over the high bits too)
    w = torch.unique(torch.tensor(wanted, dtype=torch.int64))
    w = torch.unique(torch.where(w.abs() <= 50, w * scale, w))
    expected = torch.nonzero(torch.isin(t, w)).view(-1)
    assert torch.equal(positions_among(t, w), expected)


def test_positions_among_a_large_corpus_searches_few_ids():
    """Over a corpus of 2**17 sequential ids (one bucket table of 2**16 at least), the ids
    searched exactly are the wanted ones and about 1 in 256 others: a corpus-sized binary
    search is what the table spares, so the count of ids that reach it is the work."""
    import retrieval_metrics.functional.ranking.qrels as Q

    ids = torch.arange(2**17) * 1_000_000  # (ids that share their low bits)
    wanted = ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(0))[:200]]
    wanted = torch.sort(wanted).values
    searched = []
    original = torch.searchsorted

    def counting(sorted_sequence, values, *args, **kwargs):
        searched.append(values.numel())
        return original(sorted_sequence, values, *args, **kwargs)

    Q.torch.searchsorted = counting
    try:
        found = positions_among(ids, wanted)
    finally:
        Q.torch.searchsorted = original
    assert torch.equal(ids[found], wanted)
    assert len(searched) == 1 and searched[0] < 200 + 3 * ids.numel() // 256


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    corpus_size=st.integers(0, 600),
    num_queries=st.integers(0, 6),
    extra=st.lists(st.integers(-5, 1100), max_size=10),
)
def test_one_lookup_of_the_corpus_serves_relevance_and_the_identical_ids(
    seed, corpus_size, num_queries, extra
):
    """The corpus's ids looked up once (``sorted_ids`` among the queries' judged documents,
    their own ids and any more: a few beside the corpus, so that the corpus is searched in
    them, not sorted) give the judged relevance and the identical ids' exclusion what each
    one's own lookup gives."""
    from retrieval_metrics.functional.ranking.relevance.exclusions import identical_ids_csr

    gen = torch.Generator().manual_seed(seed)

    def draw(n: int) -> list[int]:
        return torch.randint(0, 1000, (n,), generator=gen).tolist()

    # queries 0..9 (the even ones judged), documents 0..999 (a query's id may be a document's),
    # grades 0..2 (0: judged, not relevant)
    judgments = Judgments.of({
        q: {d: grade % 3 for d, grade in zip(draw(1 + q % 4), draw(1 + q % 4), strict=True)}
        for q in range(0, 10, 2)
    })
    g = torch.randperm(1000, generator=gen)[:corpus_size]
    q = torch.randperm(10, generator=gen)[:num_queries]
    among = torch.cat([judgments.documents_of(q), q, torch.tensor(extra, dtype=torch.int64)])
    lookup = sorted_ids(g, among=among)
    for every in (False, True):
        alone = judgments.relevance(q, g, every_judged=every)
        shared = judgments.relevance(q, g, every_judged=every, lookup=lookup)
        for name in ("ptr", "index", "grades", "unretrieved", "unretrieved_grades"):
            a, b = getattr(alone, name), getattr(shared, name)
            assert (a is None and b is None) or torch.equal(a, b), name
    for a, b in zip(identical_ids_csr(q, g), identical_ids_csr(q, g, lookup), strict=True):
        assert torch.equal(a, b)


def test_one_name_for_judgments_and_the_refusals_of_the_others():
    gallery_ids = ["d0", "d1", "d2", "d3"]
    # judgments are relevance="qrels" with qrels=; a mapping is not a list per query
    with pytest.raises(ValueError, match='relevance="qrels" with `qrels=`'):
        rank_embeddings(QUERY, GALLERY, query_ids=["q1", "q2"], gallery_ids=gallery_ids,
                        relevance="ids", relevant_ids={"q1": ["d1"]})
    with pytest.raises(ValueError, match='relevance="qrels" reads the judgments'):
        rank_embeddings(QUERY, GALLERY, query_ids=["q1", "q2"], gallery_ids=gallery_ids,
                        relevance="qrels")
    with pytest.raises(ValueError, match="`qrels=` needs"):
        rank_embeddings(QUERY, GALLERY, query_labels=[0, 1], gallery_labels=[0, 1, 0, 1],
                        qrels={"q1": ["d1"]})
    # the metric's qrels reach the ranking under the same name and value
    metric = rm.RetrievalMetrics(["mrr"], qrels={"q1": ["d1"]})
    options = metric.context().ranking_options()
    assert options.relevance == "qrels" and options.qrels is metric.qrels
    assert options.ignore_identical_ids is None  # the option's own default, read as "left out"


@settings(max_examples=120, deadline=None)
@given(
    codes=st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3), max_size=200),
    form=st.sampled_from(["tensor", "device tensor", "int64 array", "float array", "list"]),
    order=st.sampled_from(["as drawn", "ascending", "descending"]),
)
def test_all_distinct_says_whether_a_code_repeats(codes, form, order):
    """``all_distinct`` (a comparison of neighbours for ascending codes, else one sorted copy)
    is True exactly where no value repeats, as a set of them tells; on the host, on the
    (emulated) device, codes in any order."""
    from emulated_cuda import emulated_cuda
    from retrieval_metrics.functional.ranking.labels import all_distinct

    if order != "as drawn":
        codes = sorted(codes, reverse=order == "descending")
    if form == "device tensor":
        with emulated_cuda():
            got = all_distinct(torch.tensor(codes, dtype=torch.int64).cuda())
        assert got == (len(set(codes)) == len(codes))
        return
    if form == "tensor":
        given_codes = torch.tensor(codes, dtype=torch.int64)
    elif form == "int64 array":
        given_codes = np.array(codes, dtype=np.int64)
    elif form == "float array":
        codes = [c % 1000 for c in codes]  # (whole floats, as the command line reads them)
        given_codes = np.array(codes, dtype=np.float64)
    else:
        given_codes = codes
    assert all_distinct(given_codes) == (len(set(codes)) == len(codes))


def test_all_distinct_sorts_no_ascending_codes(monkeypatch):
    """Ascending codes (a corpus numbered in order) are told distinct by their neighbours, not
    by a sort (8.8M ids: 1.0 s of numpy's sort on the CI machine); on a device they are not
    copied to the host. Codes out of order are still sorted, there."""
    from emulated_cuda import emulated_cuda
    from retrieval_metrics.functional.ranking import labels as L

    sorts = []
    for module, name in ((L.np, "numpy"), (L.torch, "torch")):
        original = module.sort

        def counted(*args, original=original, name=name, **kwargs):
            sorts.append(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, "sort", counted)
    codes = torch.arange(0, 3000, 3)
    assert L.all_distinct(codes) and L.all_distinct(codes.numpy()) and sorts == []
    with emulated_cuda() as emu:
        on_device = codes.cuda()
        with emu.counting() as log:
            assert L.all_distinct(on_device)
        assert sorts == [] and len(log) == 1, list(log)  # (one scalar read, no copy)
        assert not L.all_distinct(on_device.flip(0).index_fill(0, torch.tensor([0]).cuda(), 3))
        assert sorts == ["torch"]
    assert not L.all_distinct(codes.flip(0).index_fill(0, torch.tensor([0]), 3))
    assert sorts == ["torch", "numpy"]
