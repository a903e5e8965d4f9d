"""What torchmetrics' ``Metric`` contract promises a user beyond update/compute/reset: a value
that follows every change of the states (a MetricCollection's compute groups, merge_state,
load_state_dict, a dtype conversion), forward() that never loses the accumulated states, and
copies (clone, deepcopy, pickle) of a metric whose gallery is a corpus on disk."""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch
from torchmetrics import MetricCollection
from torchmetrics.wrappers import MetricTracker

import retrieval_metrics as rm

N = 60


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (forward's once-per-metric advice)
        yield


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(N, 8)), rng.integers(0, 6, N)


def _map_at_r(emb, labels):
    """MAP@R by hand in float64: cosine, leave-one-out, random floats (no ties)."""
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    scores = unit @ unit.T
    values = []
    for q in range(len(labels)):
        others = np.delete(np.arange(len(labels)), q)
        order = others[np.argsort(-scores[q, others], kind="stable")]
        hits = (labels[order] == labels[q]).astype(float)
        r = int(hits.sum())
        if r:
            precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
            values.append((precision[:r] * hits[:r]).sum() / r)
    return float(np.mean(values))


def _tensors(emb, labels):
    return torch.from_numpy(emb), torch.from_numpy(labels), torch.arange(len(labels))


def test_a_compute_group_member_follows_the_updates_after_a_compute():
    """MetricCollection updates only the first member of a compute group and hands its states
    to the others: the members' ranking kept from a compute part-way through was returned
    again after more updates (MAP@R of the first 30 items for all 60)."""
    emb, labels = _data()
    e, y, ids = _tensors(emb, labels)
    collection = MetricCollection({"hit_rate@1": rm.HitRateAtK(k=1), "map@r": rm.MAPAtR()})
    collection.update(e[:30], y[:30], ids=ids[:30])
    collection.compute()
    collection.update(e[30:], y[30:], ids=ids[30:])
    assert collection.compute_groups == {0: ["hit_rate@1", "map@r"]}  # (the case under test)
    assert float(collection.compute()["map@r"]) == pytest.approx(_map_at_r(emb, labels), abs=1e-6)
    per_query = collection["map@r"].per_query()["map@r"]
    assert int((~per_query.isnan()).sum()) == int(
        sum((labels == label).sum() > 1 for label in labels)
    )


def test_image_text_members_of_a_collection_follow_the_updates():
    rng = np.random.default_rng(1)
    images = torch.from_numpy(rng.normal(size=(12, 6)))
    texts = images.repeat_interleave(2, 0) + torch.from_numpy(rng.normal(size=(24, 6)))
    image_ids, text_image_ids = torch.arange(12), torch.arange(12).repeat_interleave(2)
    whole = rm.RSum()
    whole.update(images, texts, image_ids, text_image_ids=text_image_ids)
    collection = MetricCollection({"c": rm.CrossModalRetrieval(), "rsum": rm.RSum()})
    collection.update(images[:6], texts[:12], image_ids[:6], text_image_ids=text_image_ids[:12])
    collection.compute()
    collection.update(images[6:], texts[12:], image_ids[6:], text_image_ids=text_image_ids[12:])
    assert float(collection.compute()["rsum"]) == pytest.approx(float(whole.compute()))


@pytest.mark.parametrize("compute_with_cache", [True, False])
def test_merge_state_after_a_compute_gives_the_merged_value(compute_with_cache):
    emb, labels = _data()
    e, y, ids = _tensors(emb, labels)
    a, b = rm.MAPAtR(compute_with_cache=compute_with_cache), rm.MAPAtR()
    a.update(e[:30], y[:30], ids=ids[:30])
    b.update(e[30:], y[30:], ids=ids[30:])
    a.compute()
    a.merge_state(b)
    expected = _map_at_r(emb, labels)
    assert float(a.compute()) == pytest.approx(expected, abs=1e-6)
    assert float(a.per_query()["map@r"].nanmean()) == pytest.approx(expected, abs=1e-6)


def test_states_loaded_after_a_compute_replace_its_ranking():
    emb, labels = _data()
    e, y, ids = _tensors(emb, labels)
    source = rm.MAPAtR()
    source.persistent(True)
    source.update(e, y, ids=ids)
    target = rm.MAPAtR()
    target.persistent(True)
    target.update(e[:30], y[:30], ids=ids[:30])
    target.compute()
    target.load_state_dict(source.state_dict())
    expected = _map_at_r(emb, labels)
    assert float(target.compute()) == pytest.approx(expected, abs=1e-6)
    assert float(target.per_query()["map@r"].nanmean()) == pytest.approx(expected, abs=1e-6)


def test_a_conversion_to_float64_after_a_compute_carries_every_digit():
    for convert in (lambda m: m.to(torch.float64), lambda m: m.set_dtype(torch.float64)):
        metric = rm.MRR()
        metric.update(relevant_ranks=[[3]])
        assert metric.compute().dtype == torch.float32
        convert(metric)
        value = metric.compute()
        assert value.dtype == torch.float64 and value.item() == 1 / 3


def test_set_dtype_takes_floating_dtypes_only():
    """An integer result dtype truncated MRR 0.5 to 0, bool made every value True."""
    metric = rm.MRR()
    metric.update(relevant_ranks=[[2]])
    for dtype in (torch.int64, torch.bool, torch.complex64, "float64"):
        with pytest.raises(ValueError, match="`dst_type` must be a floating dtype"):
            metric.set_dtype(dtype)
    assert metric.compute().item() == 0.5
    metric.set_dtype("torch.DoubleTensor")  # nn.Module.type's names still work
    assert metric.compute().dtype == torch.float64


@pytest.mark.parametrize("first", ["gallery", "query"])
def test_forward_of_one_side_is_refused_and_keeps_the_states(first):
    """torchmetrics' forward sets the states aside and scores the batch alone; a batch of one
    side cannot be scored alone, and the states set aside were lost with the error."""
    rng = np.random.default_rng(2)
    q, g = torch.from_numpy(rng.normal(size=(10, 4))), torch.from_numpy(rng.normal(size=(30, 4)))
    ql, gl = torch.arange(10) % 3, torch.arange(30) % 3
    expected = rm.MAPAtR()
    expected.update(g, gl, role="gallery")
    expected.update(q, ql, role="query")
    sides = {"gallery": (g, gl), "query": (q, ql)}
    second = "query" if first == "gallery" else "gallery"
    metric = rm.MAPAtR()
    metric.update(*sides[first], role=first)
    with pytest.raises(ValueError, match=f"forward.*role='{second}'.*update"):
        metric(*sides[second], role=second)
    metric.update(*sides[second], role=second)
    assert float(metric.compute()) == float(expected.compute())


def test_forward_of_queries_against_a_fixed_gallery_scores_them_against_it():
    rng = np.random.default_rng(3)
    q, g = torch.from_numpy(rng.normal(size=(10, 4))), torch.from_numpy(rng.normal(size=(30, 4)))
    ql, gl = torch.arange(10) % 3, torch.arange(30) % 3
    metric = rm.MAPAtR()
    metric.set_gallery(g, gl)
    metric.update(q[:5], ql[:5], role="query")
    batch_value = metric(q[5:], ql[5:], role="query")
    alone, whole = rm.MAPAtR(), rm.MAPAtR()
    alone.set_gallery(g, gl)
    alone.update(q[5:], ql[5:], role="query")
    whole.set_gallery(g, gl)
    whole.update(q, ql, role="query")
    assert float(batch_value) == float(alone.compute())
    assert float(metric.compute()) == float(whole.compute())


@pytest.mark.parametrize("relevance", ["labels", "qrels"])
@pytest.mark.parametrize("run_depth", [None, 5])
def test_a_gallery_set_again_after_compute_is_the_one_the_next_compute_ranks(
    relevance, run_depth
):
    """compute(), then set_gallery with another gallery, then compute() and run() again: the
    values and the run are the second gallery's, as a metric given only that one makes them,
    never the value compute() kept from the first (torchmetrics keeps it until the states
    change, and a gallery given once is not a state)."""
    rng = np.random.default_rng(5)
    q = torch.from_numpy(rng.normal(size=(12, 4)))
    first, second = (torch.from_numpy(rng.normal(size=(n, 4))) for n in (30, 25))
    q_ids = [f"q{i}" for i in range(12)]
    first_ids, second_ids = [f"d{j}" for j in range(30)], [f"d{j}" for j in range(25)]
    options: dict = {"run_depth": run_depth}
    if relevance == "qrels":
        options["qrels"] = {qid: {f"d{(5 * i) % 25}": 1} for i, qid in enumerate(q_ids)}
    q_labels = None if relevance == "qrels" else torch.arange(12) % 4

    def labels(n):
        return None if relevance == "qrels" else torch.arange(n) % 4

    metric = rm.RetrievalMetrics(["mrr", "ndcg@10"], **options)
    metric.set_gallery(first, labels(30), ids=first_ids)
    metric.update(q, q_labels, ids=q_ids, role="query")
    before = {k: float(v) for k, v in metric.compute().items()}
    first_run = metric.run(5, ids=q_ids + first_ids)
    metric.set_gallery(second, labels(25), ids=second_ids)
    alone = rm.RetrievalMetrics(["mrr", "ndcg@10"], **options)
    alone.set_gallery(second, labels(25), ids=second_ids)
    alone.update(q, q_labels, ids=q_ids, role="query")
    expected = {k: float(v) for k, v in alone.compute().items()}
    assert expected != before  # (the two galleries score the queries apart)
    assert {k: float(v) for k, v in metric.compute().items()} == expected
    run = metric.run(5, ids=q_ids + second_ids)
    assert run == alone.run(5, ids=q_ids + second_ids) != first_run


def _copies():
    return {
        "clone": lambda m: m.clone(),
        "deepcopy": copy.deepcopy,
        "pickle": lambda m: pickle.loads(pickle.dumps(m)),
        "MetricTracker": lambda m: (lambda t: (t.increment(), t)[1])(MetricTracker(m)),
    }


@pytest.mark.parametrize("how", sorted(_copies()))
@pytest.mark.parametrize("given", ["path", "memmap"])
def test_a_metric_with_a_corpus_on_disk_copies_by_naming_the_file_again(tmp_path, how, given):
    rng = np.random.default_rng(4)
    corpus = rng.normal(size=(5_000, 16)).astype(np.float32)
    path = tmp_path / "corpus.npy"
    np.save(path, corpus)
    labels = torch.arange(5_000) % 500
    queries = torch.from_numpy(corpus[:40] + 0.3 * rng.normal(size=(40, 16)).astype(np.float32))
    gallery = str(path) if given == "path" else np.load(path, mmap_mode="r")
    metric = rm.MAPAtR()
    metric.set_gallery(gallery, labels)
    in_memory = rm.MAPAtR()
    in_memory.set_gallery(torch.from_numpy(corpus), labels)
    in_memory.update(queries, labels[:40], role="query")
    copied = _copies()[how](metric)  # (a tracker's update and compute are its new copy's)
    copied.update(queries, labels[:40], role="query")
    assert float(copied.compute()) == float(in_memory.compute())
    # the copy maps the file; the rows do not travel with it
    assert len(pickle.dumps(metric)) < corpus.nbytes // 4


def test_a_copy_on_write_corpus_is_not_copied(tmp_path):
    path = tmp_path / "corpus.npy"
    np.save(path, np.ones((20, 4), dtype=np.float32))
    metric = rm.MAPAtR()
    metric.set_gallery(np.load(path, mmap_mode="c"), torch.arange(20) % 4)
    with pytest.raises(TypeError, match=r"copy-on-write.*mmap_mode='r'"):
        copy.deepcopy(metric)


def test_fixed_gallery_members_of_a_compute_group_rank_by_their_own_measures():
    """Metrics with a gallery given once each (``set_gallery``) keep only the queries as
    states, so a MetricCollection puts hit_rate@1 and ndcg@10 in one compute group: each member
    then ranks the first member's queries against its own gallery with its own measures, and
    reports what it reports alone."""
    rng = np.random.default_rng(3)
    gallery = torch.from_numpy(rng.normal(size=(40, 6)))
    g_labels = torch.from_numpy(rng.integers(0, 5, 40))
    queries = torch.from_numpy(rng.normal(size=(24, 6)))
    q_labels = torch.from_numpy(rng.integers(0, 5, 24))
    members = {"hit": lambda: rm.HitRateAtK(k=1), "ndcg": lambda: rm.NDCGAtK(k=10)}
    collection = MetricCollection({name: make() for name, make in members.items()})
    alone = {name: make() for name, make in members.items()}
    for metric in [*collection.values(copy_state=False), *alone.values()]:
        metric.set_gallery(gallery, g_labels)
    for start in range(0, 24, 8):
        rows = slice(start, start + 8)
        collection.update(queries[rows], q_labels[rows], role="query",
                          ids=torch.arange(start, start + 8))
        for metric in alone.values():
            metric.update(queries[rows], q_labels[rows], role="query",
                          ids=torch.arange(start, start + 8))
    assert collection.compute_groups == {0: ["hit", "ndcg"]}  # (the case under test)
    values = collection.compute()
    assert float(values["hit"]) == float(alone["hit"].compute())
    assert float(values["ndcg"]) == float(alone["ndcg"].compute())
