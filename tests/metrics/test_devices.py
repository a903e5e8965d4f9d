"""Metrics whose inputs and states live on an accelerator give the values the CPU gives.

Every test runs on "cpu" and, where one is present, on "cuda" (skipped cleanly otherwise):
states on the device, ``.to(device)`` before and after updates, every input form with its
tensors on the device, image-text retrieval, and two processes on one gloo group exchanging
device states. Embeddings are small integers and similarity is "dot", so every score is exact on
any device and the values must agree exactly with the CPU's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import retrieval_metrics as rm

HERE = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(HERE))

import launch  # noqa: E402
from scenarios import single_process  # noqa: E402

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    ),
]
NAMES = ["hit_rate@1", "recall@3", "map@r", "map", "mrr", "ndcg@5", "r_precision"]


def integer_embeddings(n: int, seed: int, dim: int = 6):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 5, (n,), generator=gen)
    emb = torch.randint(-2, 3, (n, dim), generator=gen).float()
    return emb, labels


def states_on(metric) -> set[str]:
    found = set()
    for value in metric.metric_state.values():
        for t in value if isinstance(value, list) else [value]:
            if isinstance(t, torch.Tensor):
                found.add(t.device.type)
    return found


def assert_same_values(ours, expected):
    ours = ours if isinstance(ours, dict) else {"value": ours}
    expected = expected if isinstance(expected, dict) else {"value": expected}
    assert ours.keys() == expected.keys()
    for k in expected:
        np.testing.assert_allclose(
            ours[k].cpu().numpy(), expected[k].cpu().numpy(), rtol=0, atol=1e-12, err_msg=k
        )


def computed(metric_factory, feed, device):
    metric = metric_factory().to(device)
    feed(metric, device)
    return metric


FORMS = {}


def form(name):
    def register(fn):
        FORMS[name] = fn
        return fn

    return register


@form("same_source")
def _same_source(metric, device):
    emb, labels = integer_embeddings(40, 0)
    for part in (slice(0, 17), slice(17, 40)):
        metric.update(emb[part].to(device), labels[part].to(device))


@form("query_gallery")
def _query_gallery(metric, device):
    q, ql = integer_embeddings(15, 1)
    g, gl = integer_embeddings(33, 2)
    metric.update(q.to(device), ql.to(device), role="query")
    metric.update(g.to(device), gl.to(device), role="gallery")


@form("fixed_gallery")
def _fixed_gallery(metric, device):
    q, ql = integer_embeddings(15, 1)
    g, gl = integer_embeddings(33, 2)
    metric.set_gallery(g.to(device), gl.to(device))
    metric.update(q[:7].to(device), ql[:7].to(device), role="query")
    metric.update(q[7:].to(device), ql[7:].to(device), role="query")


@form("scores")
def _scores(metric, device):
    gen = torch.Generator().manual_seed(3)
    preds = torch.randint(0, 4, (60,), generator=gen).float()
    target = torch.randint(0, 2, (60,), generator=gen)
    indexes = torch.randint(0, 9, (60,), generator=gen)
    metric.update(preds=preds.to(device), target=target.to(device), indexes=indexes.to(device))


@form("ranked_lists")
def _ranked_lists(metric, device):
    ranked = [torch.tensor([(q * 7 + i * 3) % 20 for i in range(8)], device=device)
              for q in range(6)]
    relevant = [torch.tensor([(q * 5) % 20, 1], device=device) for q in range(6)]
    metric.update(ranked_ids=ranked, relevant_ids=relevant)


@form("relevant_ranks")
def _relevant_ranks(metric, device):
    metric.update(relevant_ranks=[[1, 4], [2], []], num_relevant=torch.tensor([2, 3, 1]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(FORMS))
def test_every_input_form_on_the_device(name, device):
    def factory():
        return rm.RetrievalMetrics(NAMES, similarity="dot")

    expected = computed(factory, FORMS[name], "cpu").compute()
    metric = computed(factory, FORMS[name], device)
    assert_same_values(metric.compute(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_states_live_on_the_device_and_follow_to(device):
    emb, labels = integer_embeddings(40, 0)
    metric = rm.RetrievalMetrics(NAMES, similarity="dot").to(device)
    metric.update(emb.to(device), labels.to(device))
    assert states_on(metric) == {torch.device(device).type}
    expected = rm.RetrievalMetrics(NAMES, similarity="dot")
    expected.update(emb, labels)
    expected = expected.compute()
    assert_same_values(metric.compute(), expected)
    # moved back after the updates: states and values follow
    metric = metric.to("cpu")
    assert states_on(metric) == {"cpu"}
    assert_same_values(metric.compute(), expected)
    # and out again, then more data
    metric = metric.to(device)
    metric.update(emb[:5].to(device), labels[:5].to(device))
    again = rm.RetrievalMetrics(NAMES, similarity="dot")
    again.update(emb, labels)
    again.update(emb[:5], labels[:5])
    assert_same_values(metric.compute(), again.compute())


@pytest.mark.parametrize("device", DEVICES)
def test_image_text_on_the_device(device):
    gen = torch.Generator().manual_seed(5)
    images = torch.randint(-2, 3, (12, 6), generator=gen).float()
    caption_image = torch.arange(12).repeat_interleave(3)
    captions = images[caption_image] + torch.randint(-1, 2, (36, 6), generator=gen).float()

    def run(dev):
        metric = rm.CrossModalRetrieval(k=(1, 5), similarity="dot").to(dev)
        metric.update(images[caption_image].to(dev), captions.to(dev), caption_image.to(dev))
        return metric.compute()

    assert_same_values(run(device), run("cpu"))


EXCHANGE_SCENARIOS = ["same_source", "query_gallery", "scores", "crossmodal"]
_EXCHANGES: dict[str, list[dict]] = {}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scenario", EXCHANGE_SCENARIOS)
def test_two_processes_exchange_device_states(scenario, device, tmp_path_factory):
    expected_values, expected_per_query = single_process(scenario)
    if device not in _EXCHANGES:
        # one set of processes runs every scenario for this device, each on a fresh metric
        _EXCHANGES[device] = launch.run_workers(
            HERE / "device_worker.py",
            [",".join(EXCHANGE_SCENARIOS), device],
            2,
            tmp_path_factory.mktemp(f"exchange_{device}"),
        )
    results = [by_scenario[scenario] for by_scenario in _EXCHANGES[device]]
    for rank, result in enumerate(results):
        assert result["state_devices"] == [torch.device(device).type], f"rank {rank}"
        for key, value in expected_values.items():
            np.testing.assert_allclose(
                np.asarray(result["values"][key], dtype=float),
                np.asarray(value, dtype=float),
                atol=1e-6,
                rtol=0,
                err_msg=f"{scenario} rank {rank}: {key}",
            )
        assert result["per_query"].keys() == expected_per_query.keys()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("similarity", ["cosine", "dot"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["float16", "float32"])
def test_a_corpus_on_disk_ranks_on_the_device_as_in_its_memory(
    device, similarity, dtype, tmp_path
):
    """A corpus on disk given to set_gallery with the metric on the device: its chunks read on
    the host, their norms computed there (cosine) and sent with them, the file read once
    (float16 queries against a float16 file take the tensor cores on CUDA, which write
    cosine's factors as the blocks are read). The values are those of the same corpus in the
    device's memory, whose norms are computed before the ranking, and under dot those of the
    CPU. Small-integer embeddings, full of ties."""
    gen = torch.Generator().manual_seed(11)
    n, dim, num_q = 3000, 8, 50
    corpus = torch.randint(-3, 4, (n, dim), generator=gen)
    queries = torch.randint(-3, 4, (num_q, dim), generator=gen)
    qrels = {f"q{i}": {f"d{(i * 37 + j * 11) % n}": 1 + j % 2 for j in range(3)}
             for i in range(num_q)}
    ids = [f"d{i}" for i in range(n)]
    np.save(tmp_path / "c.npy", corpus.numpy().astype(dtype))
    as_dtype = torch.float16 if dtype == np.float16 else torch.float32

    def run(gallery, dev):
        metric = rm.RetrievalMetrics(["ndcg@10", "recall@100", "mrr", "map"], qrels=qrels,
                                     similarity=similarity, protocol="beir").to(dev)
        metric.set_gallery(gallery, ids=ids)
        metric.update(queries.to(as_dtype).to(dev), ids=[f"q{i}" for i in range(num_q)],
                      role="query")
        return metric.compute()

    on_disk = run(str(tmp_path / "c.npy"), device)
    assert_same_values(on_disk, run(corpus.to(as_dtype).to(device), device))
    if similarity == "dot":
        assert_same_values(on_disk, run(corpus.to(as_dtype), "cpu"))
