"""A metric on a CUDA device returns its values there, as torchmetrics' metrics do (checked on
the emulated device of emulated_cuda.py, with the CPU's values)."""

from __future__ import annotations

import torch

import retrieval_metrics as rm
from emulated_cuda import fake_cuda_fixture  # noqa: F401


def _data():
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(60) % 6
    emb = torch.randint(-2, 3, (60, 6), generator=gen).float()
    return emb, labels


def test_values_and_per_query_values_live_on_the_metrics_device(fake_cuda):
    emb, labels = _data()
    on_cpu = rm.RetrievalMetrics(["hit_rate@1", "map@r", "mrr"], similarity="dot")
    on_cpu.update(emb, labels)
    expected, expected_per_query = on_cpu.compute(), on_cpu.per_query()

    metric = rm.RetrievalMetrics(["hit_rate@1", "map@r", "mrr"], similarity="dot").to("cuda")
    metric.update(emb.to("cuda"), labels.to("cuda"))
    values, per_query = metric.compute(), metric.per_query()
    for name, value in values.items():
        assert value.device.type == "cuda", name
        assert torch.equal(value.cpu(), expected[name]), name
    for name, value in per_query.items():
        assert value.device.type == "cuda", name
        assert torch.equal(value.cpu(), expected_per_query[name]), name


def test_image_text_values_live_on_the_metrics_device(fake_cuda):
    emb, _ = _data()
    ids = torch.arange(30).repeat_interleave(2)
    expected = rm.RSum(similarity="dot")
    expected.update(emb[ids // 2], emb[30:][ids // 2] + emb[ids // 2], ids)
    metric = rm.RSum(similarity="dot").to("cuda")
    metric.update(
        emb[ids // 2].to("cuda"), (emb[30:][ids // 2] + emb[ids // 2]).to("cuda"), ids.to("cuda")
    )
    value = metric.compute()
    assert value.device.type == "cuda"
    assert torch.equal(value.cpu(), expected.compute())
