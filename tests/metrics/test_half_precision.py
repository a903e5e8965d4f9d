"""float16 and bfloat16 embeddings stay half precision in the states, and rank exactly as the
float32 ranking of the same numbers upcast (each half number is a float32 number, and the
CPU's ranking reads each block upcast; on an accelerator they are multiplied on the tensor
cores, tests/ranking/test_tensor_cores.py): every input form, every similarity, the emulated
device, 1-3 gloo processes (tests/distributed/half_worker.py), at half the state memory."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

import retrieval_metrics as rm

HERE = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(HERE))

import half_worker  # noqa: E402
import launch  # noqa: E402

from emulated_cuda import fake_cuda_fixture  # noqa: E402, F401

HALVES = [torch.float16, torch.bfloat16]
NAMES = ["hit_rate@1", "recall@5", "map@r", "map", "mrr", "ndcg@10", "median_rank"]


def _values(metric) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {k: float(v) for k, v in metric.compute().items()}


def _data(n: int = 400, dim: int = 24, classes: int = 40, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    emb = torch.randn(classes, dim, generator=gen)[labels] + torch.randn(n, dim, generator=gen)
    return emb, labels


@pytest.mark.parametrize("dtype", HALVES, ids=str)
@pytest.mark.parametrize("similarity", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("form", ["same_source", "query_gallery", "fixed_gallery"])
def test_half_embeddings_rank_as_their_float32_values(form, similarity, dtype):
    emb, labels = _data()
    half = emb.to(dtype)
    results = []
    for x in (half, half.float()):
        metric = rm.RetrievalMetrics(NAMES, similarity=similarity)
        if form == "same_source":
            for part in torch.arange(400).split(90):
                metric.update(x[part], labels[part])
        elif form == "query_gallery":
            for part in torch.arange(100, 400).split(70):
                metric.update(x[part], labels[part], role="gallery")
            metric.update(x[:100], labels[:100], role="query")
        else:
            metric.set_gallery(x[100:], labels[100:])
            for part in torch.arange(100).split(30):
                metric.update(x[part], labels[part], role="query")
        results.append(_values(metric))
        if x is half and form != "fixed_gallery":
            assert all(t.dtype == dtype for t in metric.q_emb + metric.g_emb)
    assert results[0] == results[1]
    # and the values are not those of the float32 embeddings before rounding: the test can fail
    assert half.float().ne(emb).any()


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_qrels_corpus_in_half_precision_read_a_block_at_a_time(dtype):
    """A corpus of half batches is read in blocks, upcast as read: no float32 copy of it."""
    emb, _ = _data(n=600)
    qrels = {q: {1000 + (q * 13 + j) % 500: 1 + j % 3 for j in range(1 + q % 4)}
             for q in range(100)}
    results = []
    for cast in (lambda t: t.to(dtype), lambda t: t.to(dtype).float()):
        metric = rm.RetrievalMetrics(["ndcg@10", "recall@100", "mrr@10", "map"], qrels=qrels,
                                     protocol="beir", memory_budget=2**20)
        for part in torch.arange(100, 600).split(64):
            metric.update(cast(emb[part]), ids=(part + 900).tolist(), role="gallery")
        metric.update(cast(emb[:100]), ids=list(range(100)), role="query")
        results.append(_values(metric))
    assert results[0] == results[1]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_crossmodal_half(dtype):
    emb, _ = _data(n=240)
    images, captions = emb[:40], emb[:40].repeat_interleave(5, 0) + 0.7 * emb[40:]
    image_ids = torch.arange(40)
    results = []
    for cast in (lambda t: t.to(dtype), lambda t: t.to(dtype).float()):
        metric = rm.CrossModalRetrieval(k=(1, 5, 10))
        metric.update(cast(images), cast(captions), image_ids,
                      text_image_ids=image_ids.repeat_interleave(5))
        results.append(_values(metric))
    assert results[0] == results[1]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_states_take_half_the_memory(dtype):
    emb, labels = _data()
    held = {}
    for name, x in (("half", emb.to(dtype)), ("float32", emb)):
        metric = rm.RetrievalMetrics(["mrr"])
        for part in torch.arange(400).split(100):
            metric.update(x[part], labels[part])
        held[name] = sum(t.numel() * t.element_size() for t in metric.q_emb)
    assert held["half"] * 2 == held["float32"]


@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_on_the_emulated_device(dtype, fake_cuda):
    emb, labels = _data(n=120)
    expected = rm.RetrievalMetrics(NAMES)
    expected.update(emb.to(dtype).float(), labels)
    want = _values(expected)
    metric = rm.RetrievalMetrics(NAMES).to("cuda")
    half, on = emb.to(dtype).to("cuda"), labels.to("cuda")
    for part in torch.arange(120).split(50):
        metric.update(half[part.to("cuda")], on[part.to("cuda")])
    assert all(t.dtype == dtype and t.device.type == "cuda" for t in metric.q_emb)
    assert _values(metric) == want


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", HALVES, ids=str)
def test_half_on_cuda(dtype):
    """A real GPU multiplies half embeddings on its tensor cores: on integer embeddings every
    score is exact however the sums are ordered, so the values equal the CPU's exactly."""
    emb, labels = _data(n=2000, dim=64)
    emb = emb.round()
    expected = rm.RetrievalMetrics(NAMES, similarity="dot")
    expected.update(emb.to(dtype).float(), labels)
    metric = rm.RetrievalMetrics(NAMES, similarity="dot").to("cuda")
    metric.update(emb.to(dtype).cuda(), labels.cuda())
    assert _values(metric) == _values(expected)


_RUNS: dict[int, list[dict]] = {}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_half_over_processes(world, tmp_path_factory):
    """Each process's half states through the gather (and the sharded exchange): the values
    of the float32 states of the same numbers, on every process, and one process's values."""
    if world not in _RUNS:
        tmp = tmp_path_factory.mktemp(f"half_world{world}")
        _RUNS[world] = launch.run_workers(HERE / "half_worker.py", [], world, tmp)
    for form in half_worker.FORMS:
        for name, dtype in half_worker.DTYPES.items():
            case = f"{form}-{name}"
            alone = half_worker.values(form, dtype)
            assert alone["half"] == alone["float32"], case
            for rank, result in enumerate(_RUNS[world]):
                where = f"{case} rank {rank}/{world}"
                assert result[case]["half_state_dtypes"] == [str(dtype)], where
                assert result[case]["half"] == result[case]["float32"], where
                assert result[case]["half"] == pytest.approx(alone["half"], abs=1e-12), where
