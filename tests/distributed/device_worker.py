"""One process of a multi-process test whose states and batches live on a device:
``python device_worker.py RANK WORLD INIT_FILE SCENARIOS DEVICE OUT``.

The same scenarios as worker.py (a comma-separated list, all on one gloo process group, each on a
fresh metric), but the metric is moved to DEVICE (e.g. "cuda": every rank on the same GPU) and
every tensor a batch feeds is moved there first, so the states that the ranks gather are device
tensors. Writes ``{scenario: result}`` as JSON.

DEVICE "emulated" is the emulated CUDA device of tests/emulated_cuda.py: the process runs inside
``emulated_cuda()`` and uses "cuda", so its states and batches are fake-cuda tensors, the gloo
group reports "nccl", and every collective refuses a host tensor as NCCL does. Three more kinds of
entries in SCENARIOS come from device_matrix.py: ``matrix:SPLIT`` runs every device-matrix case
of that split (``{case name: result}``), ``select`` runs SelectOnValidation's sample-id check;
``syncs:N`` counts one compute()'s host syncs with the gallery sharded (:func:`sharded_syncs`);
``nan`` has the last rank's update give a NaN (:func:`nan_on_one_rank`); ``qrels_on_disk``
ranks qrels_worker.py's corpus given as a ``.npy`` file (:func:`qrels_on_disk`);
``qrels_run`` and ``qrels_run_sharded`` list its runs (:func:`qrels_run`).
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/emulated_cuda.py
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scenarios

import device_matrix
from scenarios import SCENARIOS, per_query_lists, split_for_rank


class OnDevice:
    """Passes every call on to ``metric`` with its tensor arguments moved to ``device``."""

    def __init__(self, metric, device: torch.device) -> None:
        self._metric, self._device = metric, device

    def _move(self, x):
        return x.to(self._device) if isinstance(x, torch.Tensor) else x

    def update(self, *args, **kwargs) -> None:
        self._metric.update(
            *(self._move(a) for a in args), **{k: self._move(v) for k, v in kwargs.items()}
        )


def sharded_syncs(n: int, rank: int, world: int, device: torch.device) -> dict:
    """compute()'s host syncs on this rank at ``n`` items, the gallery sharded over the
    processes (``gallery_sharded=True``: each rank ranks every query against its shard), every
    rank holding its share of the queries and of the gallery; and its query blocks. On the
    emulated device (``syncs:N`` scenarios)."""
    import retrieval_metrics as rm
    from emulated_cuda import active_emulation
    from retrieval_metrics.functional.ranking.engine import counting

    gen = torch.Generator().manual_seed(n)
    emb = torch.randint(-2, 3, (n, 16), generator=gen).float()
    labels = torch.randint(0, max(2, n // 4), (n,), generator=gen)
    ids, q = torch.arange(n), n // 4
    metric = rm.RetrievalMetrics(
        ["hit_rate@1", "map@r", "mrr", "ndcg@10"], similarity="dot", gallery_sharded=True,
        memory_budget=16 * 2**20,
    ).to(device)
    for role, rows in (("query", slice(0, q)), ("gallery", slice(q, n))):
        mine = torch.arange(n)[rows][rank::world]
        metric.update(
            emb[mine].to(device), labels[mine].to(device), ids=ids[mine].to(device), role=role
        )
    blocks = [0]
    original = counting.QueryBlock.__init__

    def counted(self, *args, **kwargs):
        blocks[0] += 1
        original(self, *args, **kwargs)

    counting.QueryBlock.__init__ = counted
    try:
        with active_emulation().counting() as log:
            metric.compute()
    finally:
        counting.QueryBlock.__init__ = original
    return {"syncs": len(log), "log": list(log), "blocks": blocks[0]}


def nan_on_one_rank(rank: int, world: int, device: torch.device) -> dict:
    """Same-source and image-text metrics on the device, the last rank's second update holding
    a NaN: what each rank's update and compute() raised (an update on a device leaves its scan
    for NaN to compute(), which must refuse on every rank, the others included: a rank that
    raised alone would leave the others waiting in the next collective)."""
    import retrieval_metrics as rm

    gen = torch.Generator().manual_seed(rank)
    emb, labels = torch.randn(24, 8, generator=gen), torch.arange(24) % 6
    bad = emb.clone()
    if rank == world - 1:
        bad[5, 3] = float("nan")
    got = {}
    for name, metric, feed in (
        ("same source", rm.RetrievalMetrics(["hit_rate@1", "map@r"]),
         lambda m, x: m.update(x.to(device), labels.to(device))),
        ("image-text", rm.CrossModalRetrieval(k=(1, 5)),
         lambda m, x: m.update(emb.to(device), x.to(device), (labels + 6 * rank).to(device))),
    ):
        metric = metric.to(device)
        errors = []
        for x in (emb, bad):
            try:
                feed(metric, x)
            except ValueError as e:
                errors.append(f"update: {e}")
        try:
            metric.compute()
        except ValueError as e:
            errors.append(f"compute: {e}")
        got[name] = errors
    return got


def qrels_on_disk(rank: int, world: int, device: torch.device) -> dict:
    """qrels_worker.py's ``qrels_fixed_on_disk`` with the metric on ``device``: the corpus a
    ``.npy`` file given to set_gallery on every rank, read onto the device by the first
    ranking (its norms and its scan for NaN made from the rows as read), the queries spread as
    DistributedSampler spreads them and moved to the device."""
    import tempfile

    import numpy as np
    import qrels_worker

    metric = qrels_worker.build().to(device)
    docs, d_ids = qrels_worker.data()[1], qrels_worker.data()[3]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "corpus.npy"
        np.save(path, docs.numpy())
        metric.set_gallery(str(path), ids=d_ids)
        qrels_worker.feed(OnDevice(metric, device), rank, world, fixed=True)
        result = qrels_worker.scored(metric)
    states = [t for v in metric.metric_state.values() for t in (v if isinstance(v, list) else [v])]
    return {**result, "state_devices": sorted({t.device.type for t in states})}


def qrels_run(rank: int, world: int, device: torch.device, sharded: bool) -> dict:
    """qrels_worker.py's ``qrels_run`` (a tied corpus gathered, ties by id) or
    ``qrels_run_sharded`` (each process its shard) with the metric on ``device``: each query's
    top 12 as ``metric.run`` lists them, ids back as text."""
    import qrels_worker

    tied = not sharded
    metric = qrels_worker.build(sharded=sharded, ties="id" if tied else "expected").to(device)
    qrels_worker.feed(OnDevice(metric, device), rank, world, tied=tied)
    _, _, q_ids, d_ids, _ = qrels_worker.data(tied=tied)
    return {"run": metric.run(12, ids=q_ids + d_ids)}


def run_scenario(scenario: str, rank: int, world: int, device: torch.device) -> dict:
    if scenario == "qrels_on_disk":
        return qrels_on_disk(rank, world, device)
    if scenario in ("qrels_run", "qrels_run_sharded"):
        return qrels_run(rank, world, device, sharded=scenario == "qrels_run_sharded")
    if scenario == "nan":
        return nan_on_one_rank(rank, world, device)
    if scenario.startswith("syncs:"):
        return sharded_syncs(int(scenario.split(":", 1)[1]), rank, world, device)
    if scenario.startswith("matrix:"):
        return device_matrix.run_split(scenario.split(":", 1)[1], rank, world, device)
    if scenario == "select":
        return device_matrix.select_on_validation(rank, world, device)
    build, feed = SCENARIOS[scenario]
    metric = build().to(device)
    for batch in split_for_rank(scenario, rank, world):
        feed(OnDevice(metric, device), batch)
    states = [
        v for v in metric.metric_state.values() if isinstance(v, torch.Tensor)
    ] + [t for v in metric.metric_state.values() if isinstance(v, list) for t in v]
    result = metric.compute()
    values = result if isinstance(result, dict) else {"value": result}
    return {
        "values": {k: v.cpu().tolist() for k, v in values.items()},
        "per_query": per_query_lists(metric),
        "state_devices": sorted({t.device.type for t in states}),
    }


def main() -> None:
    rank, world, init_file, scenarios, device, out = sys.argv[1:7]
    rank, world = int(rank), int(world)
    torch.set_num_threads(1)
    emulation: contextlib.AbstractContextManager = contextlib.nullcontext()
    if device == "emulated":
        from emulated_cuda import emulated_cuda

        emulation, device = emulated_cuda(), "cuda"
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        # the emulation starts after the group exists and ends before it is destroyed: it
        # patches torch.distributed's collectives for its lifetime only
        with emulation:
            payload = {
                name: run_scenario(name, rank, world, torch.device(device))
                for name in scenarios.split(",")
            }
        Path(out).write_text(json.dumps(payload))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
