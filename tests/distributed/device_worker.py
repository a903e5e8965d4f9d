"""One process of a multi-process test whose states and batches live on a device:
``python device_worker.py RANK WORLD INIT_FILE SCENARIOS DEVICE OUT``.

The same scenarios as worker.py (a comma-separated list, all on one gloo process group, each on a
fresh metric), but the metric is moved to DEVICE (e.g. "cuda": every rank on the same GPU) and
every tensor a batch feeds is moved there first, so the states that the ranks gather are device
tensors. Writes ``{scenario: result}`` as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

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


def run_scenario(scenario: str, rank: int, world: int, device: torch.device) -> dict:
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
    rank, world, device = int(rank), int(world), torch.device(device)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        payload = {name: run_scenario(name, rank, world, device) for name in scenarios.split(",")}
        Path(out).write_text(json.dumps(payload))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
