"""Multi-process tests: real processes, torch.distributed with gloo on CPU.

WORLD worker processes (tests/distributed/worker.py) feed their share of each scenario's dataset,
compute, and write JSON; every rank's result must equal the single-process result on the same
data (each sample once). All scenarios of one world size run in one set of processes, each
scenario on fresh metrics; each is still its own test item. Every run has a timeout and kills its
processes on failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

HERE = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(HERE))

import launch  # noqa: E402
from gather import tensors_of  # noqa: E402
from scenarios import SUMMARY_SCENARIOS, single_process, single_process_summary  # noqa: E402

SCENARIOS = [
    "same_source",
    "same_source_empty_rank",
    "query_gallery",
    "ranked_lists",
    "scores",
    "fixed_gallery",
    "sharded_gallery",
    "crossmodal",
    "many_relevant",
]
_RUNS: dict[int, list[dict]] = {}


def results_of(scenario: str, world: int, tmp_path_factory) -> list[dict]:
    """Every rank's result for ``scenario``; the first call for a world size runs all of them."""
    if world not in _RUNS:
        names = ",".join([*SCENARIOS, "no_ids", "crossmodal_no_ids"])
        tmp = tmp_path_factory.mktemp(f"world{world}")
        _RUNS[world] = launch.run_workers(HERE / "worker.py", [names], world, tmp)
    return [by_scenario[scenario] for by_scenario in _RUNS[world]]


def assert_same(a, b, context):
    assert a.keys() == b.keys(), context
    for k in a:
        np.testing.assert_allclose(
            np.asarray(a[k], dtype=float),
            np.asarray(b[k], dtype=float),
            atol=1e-6,
            rtol=0,
            err_msg=f"{context}: {k}",
        )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_rank_equals_single_process(scenario, world, tmp_path_factory):
    expected_values, expected_per_query = single_process(scenario)
    results = results_of(scenario, world, tmp_path_factory)
    for rank, result in enumerate(results):
        assert_same(result["values"], expected_values, f"{scenario} rank {rank}/{world}")
        assert_same(result["per_query"], expected_per_query, f"{scenario} per_query rank {rank}")
        assert not any("cannot be detected" in w for w in result["warnings"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("scenario", SUMMARY_SCENARIOS)
def test_summary_equals_single_process(scenario, world, tmp_path_factory):
    """summary() on every rank: the same rows as one process (the bootstrap is seeded and sees
    the per-query values in the same order)."""
    expected = single_process_summary(scenario)
    for rank, result in enumerate(results_of(scenario, world, tmp_path_factory)):
        got = result["summary"]
        assert [r["name"] for r in got] == [r["name"] for r in expected], f"rank {rank}"
        for mine, theirs in zip(got, expected, strict=True):
            context = f"{scenario} rank {rank}/{world}: {theirs['name']}"
            for key in ("queries", "skipped", "gallery"):
                assert mine[key] == theirs[key], f"{context} {key}"
            numbers = ("value", "chance", "interval")
            assert_same({k: mine[k] for k in numbers}, {k: theirs[k] for k in numbers}, context)


@pytest.mark.timeout(300)
def test_without_ids_warns_once(tmp_path_factory):
    expected_values, _ = single_process("no_ids")
    results = results_of("no_ids", 2, tmp_path_factory)
    for result in results:
        assert_same(result["values"], expected_values, "no_ids")
        assert sum("cannot be detected" in w for w in result["warnings"]) == 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_image_text_without_text_ids_warns_once(world, tmp_path_factory):
    """RSum / CrossModalRetrieval on several processes without ``text_ids``: captions that
    DistributedSampler repeats cannot be dropped, so it warns once, as the one-direction metrics
    do (on an exact split the value is still one process's)."""
    expected_values, _ = single_process("crossmodal_no_ids")
    for result in results_of("crossmodal_no_ids", world, tmp_path_factory):
        assert_same(result["values"], expected_values, "crossmodal_no_ids")
        warned = [w for w in result["warnings"] if "cannot be detected" in w]
        assert len(warned) == 1 and "`text_ids=`" in warned[0]


def test_many_relevant_scenario_ranks_in_query_chunks():
    """The many_relevant scenario has more relevant pairs than its budget: one process ranks it
    in query chunks (so on several the processes gather per-query parts, not tables)."""
    from scenarios import SCENARIOS

    build, feed = SCENARIOS["many_relevant"]
    metric = build()
    feed(metric, list(range(53)))
    tables = metric._tables_in_chunks()
    assert tables is not None and len(list(tables)) > 1


def _joined_in_one_process(world: int) -> list[torch.Tensor]:
    """gather.py's tensors of every rank joined in one process: the non-empty shares' promoted
    dtype and trailing shape (an empty share's own are ignored)."""
    out = []
    for pieces in zip(*[tensors_of(rank) for rank in range(world)], strict=True):
        filled = [p for p in pieces if p.shape[0] > 0]
        if not filled:
            out.append(pieces[0])
            continue
        dtype = filled[0].dtype
        for p in filled[1:]:
            dtype = torch.promote_types(dtype, p.dtype)
        out.append(torch.cat([p.to(dtype) for p in filled]))
    return [*out, torch.zeros(0, 2, dtype=torch.int64), torch.zeros(0)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_gather_rows_gives_every_rank_every_share_in_rank_order(world, tmp_path_factory):
    """gather_rows, which every synced state and gathered table goes through: each tensor of
    every rank, concatenated in rank order, whatever the mix of dtypes, shapes and empty shares
    (it sends them all as the bytes of one buffer)."""
    expected = _joined_in_one_process(world)
    for rank, got in enumerate(results_of("gather_rows", world, tmp_path_factory)):
        assert len(got) == len(expected)
        for i, (g, want) in enumerate(zip(got, expected, strict=True)):
            context = f"rank {rank}, tensor {i}"
            assert g["dtype"] == str(want.dtype), context
            assert g["shape"] == list(want.shape), context
            assert g["values"] == want.double().tolist(), context


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_a_sharded_gallery_id_of_another_sample_is_refused_on_every_process(world, tmp_path):
    """Only the last process's shard holds a query's id under another label: every process
    refuses it at compute() (one all-reduce of the counts), none waits in a collective."""
    results = launch.run_workers(HERE / "id_collision_worker.py", [], world, tmp_path)
    assert all(r["refused"] is not None for r in results), results
    assert all("1 query id(s) are also ids of gallery items with another" in r["refused"]
               for r in results)
    assert "another label (e.g. 5)" in results[-1]["refused"]
    assert "on another process" in results[0]["refused"]
