"""The metric classes reach the engine's best path, and rank once per state.

* Same source through a metric class takes the symmetric (half-product) pass, as the functional
  ``rank_embeddings(emb, None, ...)`` does, with the same values: the classes state same source
  (``gallery=None``) instead of the engine guessing it from object identity.
* ``compute()``, ``per_query()``, ``summary()`` and ``rank_tables()`` share one ranking of the
  states until the next ``update()`` or ``reset()``, both where the whole rank table is kept and
  where the ranking runs a chunk of queries at a time (many relevant pairs). Counted by the calls
  into the engine, not by the clock.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrieval_metrics as rm
from retrieval_metrics.functional import measures as M
from retrieval_metrics.functional import ranking as R
from retrieval_metrics.functional.ranking import options as O
from retrieval_metrics.functional.ranking.engine import schedule as S

NAMES = ["hit_rate@1", "hit_rate@4", "map@r", "r_precision", "mrr"]


@pytest.fixture
def engine_calls(monkeypatch):
    """Every ranking of embeddings a metric asks for goes through its options' engine
    (``RankingOptions.rank`` -> ``BlockedEngine.rank``): count the calls, and which of them took
    the symmetric pass."""
    calls = {"rank": 0, "symmetric": 0}
    original_rank, original_pass = O.BlockedEngine.rank, S.two_sided_pass

    def rank(*args, **kwargs):
        calls["rank"] += 1
        return original_rank(*args, **kwargs)

    def two_sided(*args, **kwargs):
        calls["symmetric"] += args[1] is None  # the symmetric (same-source) form
        return original_pass(*args, **kwargs)

    monkeypatch.setattr(O.BlockedEngine, "rank", rank)
    monkeypatch.setattr(S, "two_sided_pass", two_sided)
    return calls


def clustered(n: int, classes: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    centres = torch.randn(classes, 16, generator=gen)
    return centres[labels] + 0.8 * torch.randn(n, 16, generator=gen), labels


@pytest.mark.parametrize("batch", [None, 96])
def test_same_source_metric_takes_the_symmetric_pass(engine_calls, batch):
    emb, labels = clustered(600, 30)
    metric = rm.RetrievalMetrics(NAMES)
    for start in range(0, len(emb), batch or len(emb)):
        stop = start + (batch or len(emb))
        metric.update(emb[start:stop], labels[start:stop])
    ours = metric.compute()
    assert engine_calls == {"rank": 1, "symmetric": 1}

    # the functional layer's own same-source ranking, with the whole-table measures
    table = R.rank_embeddings(emb, query_labels=labels)
    expected = M.retrieval_measures(table, NAMES)
    for name in NAMES:
        assert float(ours[name]) == pytest.approx(float(expected[name]), abs=1e-6), name


def test_separate_query_and_gallery_stay_one_sided(engine_calls):
    """A query set that happens to hold the gallery's rows is not same source: no exclusion of
    "itself", and no symmetric pass."""
    emb, labels = clustered(300, 10)
    metric = rm.HitRateAtK(k=1)
    metric.update(emb, labels, role="query")
    metric.update(emb, labels, role="gallery")
    value = float(metric.compute())
    assert engine_calls["symmetric"] == 0
    assert value == 1.0  # every query finds itself first: nothing was excluded


def test_rank_embeddings_with_the_same_tensor_twice_is_not_same_source():
    emb = torch.eye(3)
    table = R.rank_embeddings(emb, emb, query_labels=torch.tensor([0, 1, 2]),
                              gallery_labels=torch.tensor([0, 1, 2]))
    assert table.num_relevant.tolist() == [1, 1, 1]  # each row's own item is relevant
    same = R.rank_embeddings(emb, query_labels=torch.tensor([0, 1, 2]))
    assert same.num_relevant.tolist() == [0, 0, 0]  # same source excludes the item itself


def _use_everything(metric) -> None:
    metric.compute()
    metric.per_query()
    metric.summary(num_bootstrap=20)
    metric.compute()


def test_whole_table_is_ranked_once_per_state(engine_calls):
    emb, labels = clustered(400, 20)
    metric = rm.RetrievalMetrics(NAMES)
    metric.update(emb, labels)
    _use_everything(metric)
    metric.rank_tables()
    assert engine_calls["rank"] == 1

    metric.update(emb[:10] + 1.0, labels[:10])  # new states: one new ranking
    _use_everything(metric)
    assert engine_calls["rank"] == 2

    metric.reset()
    metric.update(emb, labels)
    _use_everything(metric)
    assert engine_calls["rank"] == 3


@pytest.mark.parametrize("same_source", [True, False])
def test_label_pairs_are_counted_once_per_ranking(monkeypatch, same_source):
    """The chunking decision and the ranking's budget both read each query's relevant pairs:
    one count (a sort of the labels) serves both."""
    from retrieval_metrics.metrics.forms import embeddings as forms_embeddings

    counted = []
    original = forms_embeddings.label_pair_counts

    def counting(query_labels, gallery_labels):
        counted.append(len(query_labels))
        return original(query_labels, gallery_labels)

    monkeypatch.setattr(forms_embeddings, "label_pair_counts", counting)
    emb, labels = clustered(200, 10)
    metric = rm.RetrievalMetrics(NAMES)
    if same_source:
        metric.update(emb, labels)
    else:
        metric.update(emb[:50], labels[:50], role="query")
        metric.update(emb, labels, role="gallery")
    metric.compute()
    assert counted == [200 if same_source else 50]


def test_ranking_in_query_chunks_is_done_once_per_state(engine_calls):
    """Few large classes and the smallest budget: compute() ranks a chunk of queries at a time
    and keeps per-query parts only; per_query() and summary() read those parts instead of
    ranking every chunk again, and give what a whole-table metric gives."""
    emb, labels = clustered(900, 3)
    chunked = rm.RetrievalMetrics(NAMES, memory_budget=2**16)
    chunked.update(emb, labels)
    chunked.compute()
    chunks = engine_calls["rank"]
    assert chunks > 1  # the budget made it rank in chunks
    per_query = chunked.per_query()
    summary = chunked.summary(num_bootstrap=50)
    chunked.compute()
    assert engine_calls["rank"] == chunks

    whole = rm.RetrievalMetrics(NAMES, memory_budget=2**30)
    whole.update(emb, labels)
    expected = whole.per_query()
    for name in NAMES:
        np.testing.assert_allclose(per_query[name].numpy(), expected[name].numpy(), atol=1e-12)
    expected_rows = {row["name"]: row for row in whole.summary(num_bootstrap=50).rows}
    for row in summary.rows:
        other = expected_rows[row["name"]]
        assert float(row["value"]) == pytest.approx(float(other["value"]), abs=1e-9)
        np.testing.assert_allclose(
            np.asarray([float(x) for x in row["interval"]]),
            np.asarray([float(x) for x in other["interval"]]),
            atol=1e-9,
        )

    chunked.update(emb[:5], labels[:5])
    chunked.compute()
    assert engine_calls["rank"] > chunks  # new states are ranked again


@pytest.mark.parametrize("form", ["same_source", "query_gallery", "scores"])
def test_updates_of_a_loop_write_only_what_they_add(form, monkeypatch):
    """An update of the kind the states hold already, with keys of the kinds they hold, writes
    its rows and nothing else: not the ``form`` bits or the key kinds again, not the (empty)
    ranking (each attribute write goes through torch's Module.__setattr__: a third of an update
    of 8 rows was such writes). Counted by the writes, then checked that a later compute()
    still sees the new rows and that a new kind of key is still recorded."""
    import torch.nn

    gen = torch.Generator().manual_seed(0)
    metric = rm.RetrievalMetrics(["hit_rate@1", "mrr"])

    def feed(i: int, ids=None) -> None:
        if form == "scores":
            metric.update(preds=torch.rand(8, generator=gen), target=torch.arange(8) % 2,
                          indexes=torch.arange(8) // 4 + 2 * i)
            return
        emb, labels = torch.randn(8, 4, generator=gen), torch.arange(8) % 2
        role = {} if form == "same_source" else {"role": "query" if i % 2 else "gallery"}
        metric.update(emb, labels, ids=ids if ids is not None else torch.arange(8) + 8 * i,
                      **role)

    feed(0)
    feed(1)
    metric.compute()
    queries_before = metric.per_query()["mrr"].numel()
    written: list[str] = []
    setattr_ = torch.nn.Module.__setattr__

    def spy(self, name, value):
        written.append(name)
        setattr_(self, name, value)

    monkeypatch.setattr(torch.nn.Module, "__setattr__", spy)
    feed(2)  # after compute(): what it derived is forgotten
    written.clear()
    feed(3)
    assert not {"form", "key_kinds", "_tables", "_chunk_parts", "_ranking"} & set(written), written
    metric.compute()
    assert metric.per_query()["mrr"].numel() > queries_before  # the new rows are ranked
    if form != "scores":
        written.clear()
        feed(4, ids=[f"s{j}" for j in range(8)])  # string ids: a kind not held yet
        assert "key_kinds" in written, written
