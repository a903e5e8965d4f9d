"""A metric on a CUDA device returns its values there, as torchmetrics' metrics do (checked on
the emulated device of emulated_cuda.py, with the CPU's values)."""

from __future__ import annotations

import pytest
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


def test_listing_every_relevant_item_keeps_the_reciprocal_rank_exact():
    """On a device the ranking lists every relevant item (it counts whole blocks) where the CPU
    stops at the depth the measures need: a query whose relevant items 2, 3 and 4 tie, all of
    them relevant, must still score exactly 1/2 (the best at rank 2), not 0.49999999999999994
    from a sum of probabilities of a certain event (consecutive relevant items form one tie
    group of relevant items only)."""
    from retrieval_metrics.functional import measures as M
    from retrieval_metrics.functional.table import UNBOUNDED, RankTable

    def one_query(above, tied):
        n = len(above)
        return RankTable(
            ptr=torch.tensor([0, n]), above=torch.tensor(above), tied=torch.tensor(tied),
            num_relevant=torch.tensor([6]), gallery_size=torch.tensor([20]),
            depth=torch.tensor([UNBOUNDED]),
        )

    listed = one_query([1, 2, 2, 4, 6, 9], [1, 2, 2, 2, 1, 1])
    for name in ("mrr", "mrr@3"):
        value = M.retrieval_measures(listed, [name])[name]
        assert float(value) == 0.5, name
    # the last relevant item of a group that is all relevant: at its group's end, for certain
    assert float(M.retrieval_measures(listed, ["minp"])["minp"]) == pytest.approx(6 / 10)
