"""One process of a multi-process test: ``python worker.py RANK WORLD INIT_FILE SCENARIOS OUT``.

``SCENARIOS`` is a comma-separated list; all of them run one after the other on the same process
group (starting processes costs more than the scenarios). Each scenario feeds this rank's share
of a dataset to a fresh metric the way a data-parallel validation loop would (uneven batches, a
different number of updates, an empty rank, samples repeated by DistributedSampler), calls
``compute()``; the results are written as JSON, ``{scenario: result}``, with what gather_rows
made of this rank's tensors of gather.py under ``"gather_rows"``.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gather import gathered
from scenarios import SCENARIOS, SUMMARY_SCENARIOS, per_query_lists, split_for_rank, summary_lists


def run_scenario(scenario: str, rank: int, world: int) -> dict:
    build, feed = SCENARIOS[scenario]
    metric = build()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in split_for_rank(scenario, rank, world):
            feed(metric, batch)
        result = metric.compute()
        per_query = per_query_lists(metric)
        summary = summary_lists(metric) if scenario in SUMMARY_SCENARIOS else None
    values = result if isinstance(result, dict) else {"value": result}
    return {
        "values": {k: v.tolist() for k, v in values.items()},
        "per_query": per_query,
        "summary": summary,
        "warnings": [str(w.message) for w in caught],
    }


def main() -> None:
    rank, world, init_file, scenarios, out = sys.argv[1:6]
    rank, world = int(rank), int(world)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        payload = {name: run_scenario(name, rank, world) for name in scenarios.split(",")}
        payload["gather_rows"] = gathered(rank)
        Path(out).write_text(json.dumps(payload))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
