"""The qrels form on 1-3 real gloo processes (tests/distributed/qrels_worker.py): queries and
corpus spread unevenly with DistributedSampler's padding give the one-process values on every
process, the corpus also kept split (``gallery_sharded=True``, the sampler's repeats dropped
by id), and tied documents placed by id (``ties="id"``); processes that disagree (different
qrels, ``ids=`` on some processes only, integer labels or image ids on one and strings on
another) are refused by name on every process.
Every run has a timeout and kills its processes on failure (launch.run_workers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(HERE))

import launch  # noqa: E402
import qrels_worker  # noqa: E402

SCORED = ["qrels", "qrels_fixed", "qrels_sharded", "qrels_ties_by_id", "qrels_fixed_ties_by_id",
          "qrels_run_depth", "qrels_fixed_on_disk"]
MEET = list(qrels_worker.IDS_DO_NOT_MEET)
REFUSED = ["different_qrels", "sharded_integer_ids_collide", "ids_on_some_processes",
           "ids_on_some_processes_lists", "int_and_string_labels", "int_and_string_image_ids",
           "set_gallery_shards", "set_gallery_shards_sharded", "set_gallery_on_some_processes",
           "set_gallery_reordered", "different_options"]
_RUNS: dict[int, list[dict]] = {}


def results_of(scenario: str, world: int, tmp_path_factory) -> list[dict]:
    if world not in _RUNS:
        names = SCORED + MEET + ["qrels_run", "qrels_run_sharded", "qrels_run_kept",
                                 "qrels_run_fixed_kept"] + (
            REFUSED if world > 1 else []
        )
        tmp = tmp_path_factory.mktemp(f"qrels_world{world}")
        _RUNS[world] = launch.run_workers(HERE / "qrels_worker.py", [",".join(names)], world, tmp)
    return [by_scenario[scenario] for by_scenario in _RUNS[world]]


def one_process(fixed: bool, ties: str = "expected", protocol: str | None = None) -> dict:
    metric = qrels_worker.build(fixed=fixed, ties=ties, protocol=protocol)
    qrels_worker.feed(metric, 0, 1, fixed=fixed, tied=ties == "id")
    return qrels_worker.scored(metric)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("scenario", SCORED)
def test_every_process_gives_the_one_process_values(scenario, world, tmp_path_factory):
    by_id = scenario.endswith("ties_by_id")
    fixed = scenario in ("qrels_fixed", "qrels_fixed_ties_by_id", "qrels_fixed_on_disk")
    protocol = "sentence_transformers" if scenario == "qrels_run_depth" else None
    expected = one_process(fixed=fixed, ties="id" if by_id else "expected", protocol=protocol)
    if by_id:  # the ties touch relevant documents: their order changes the values
        metric = qrels_worker.build(fixed=fixed)
        qrels_worker.feed(metric, 0, 1, fixed=fixed, tied=True)
        shared = qrels_worker.scored(metric)
        assert shared["values"]["mrr@10"] != pytest.approx(expected["values"]["mrr@10"])
    assert expected["notes"]["judged documents not in the corpus"] > 0
    assert expected["notes"]["queries without judgments"] > 0
    for rank, result in enumerate(results_of(scenario, world, tmp_path_factory)):
        assert result["notes"] == expected["notes"], f"{scenario} rank {rank}/{world}"
        for name, value in expected["values"].items():
            assert result["values"][name] == pytest.approx(value, abs=1e-12), (
                f"{scenario} rank {rank}/{world}: {name}"
            )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize(
    ("scenario", "named"),
    [
        ("different_qrels", "different `qrels`"),
        ("set_gallery_shards", "different galleries with `set_gallery`"),
        ("set_gallery_shards_sharded", "different galleries with `set_gallery`"),
        ("set_gallery_on_some_processes", "different galleries with `set_gallery`"),
        ("set_gallery_reordered", "the same rows in the same order"),
        ("different_options", "different options"),
        ("sharded_integer_ids_collide", "query ids are also document ids"),
        ("ids_on_some_processes", "`ids` were given on some processes"),
        ("ids_on_some_processes_lists", "with and without ids"),
        ("int_and_string_labels", "`labels` of the queries were integers"),
        ("int_and_string_image_ids", "`ids` of the images were integers"),
    ],
)
def test_processes_that_disagree_are_refused_on_every_process(
    scenario, named, world, tmp_path_factory
):
    for rank, result in enumerate(results_of(scenario, world, tmp_path_factory)):
        assert result["error"] is not None and named in result["error"], (
            f"{scenario} rank {rank}/{world}: {result['error']}"
        )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_ids_that_do_not_meet_are_named_alike_on_every_process(world, tmp_path_factory):
    """Query ids or corpus ids that do not meet the judgments' are refused, and a corpus that
    lacks most judged documents is warned of, with the counts of one process, on every
    process."""
    expected = {}
    for scenario, renamed in qrels_worker.IDS_DO_NOT_MEET.items():
        metric = qrels_worker.build()
        qrels_worker.feed(metric, 0, 1, renamed=renamed)
        expected[scenario] = (qrels_worker.warned if scenario == "most_documents_renamed"
                              else qrels_worker.refused)(metric)
    n_queries = qrels_worker.NUM_Q
    assert f"none of the {n_queries} query ids given" in expected["query_ids_renamed"]["error"]
    assert "is in the corpus (corpus of 61 documents" in expected["document_ids_renamed"]["error"]
    (warning,) = [w for w in expected["most_documents_renamed"]["warnings"]
                  if "not in the corpus" in w]
    counts = warning.split(" are not in the corpus")[0]  # "N of the M relevant documents ..."
    assert "of the" in counts
    for scenario in qrels_worker.IDS_DO_NOT_MEET:
        for rank, result in enumerate(results_of(scenario, world, tmp_path_factory)):
            where = f"{scenario} rank {rank}/{world}"
            if scenario != "most_documents_renamed":
                # the same refusal, up to the example id this process was given
                head = expected[scenario]["error"].split("(")[0]
                assert result["error"] is not None and result["error"].startswith(head), where
                continue
            mine = [w for w in result["warnings"] if "not in the corpus" in w]
            assert len(mine) == 1 and mine[0].startswith(counts), where
            assert result["values"] == pytest.approx(expected[scenario]["values"], abs=1e-12)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_run_of_every_process_is_the_one_process_run(world, tmp_path_factory):
    """metric.run(k) on the synced states (a tied corpus, ties by id): every process lists
    what one process fed everything lists."""
    metric = qrels_worker.build(ties="id")
    qrels_worker.feed(metric, 0, 1, tied=True)
    _, _, q_ids, d_ids, _ = qrels_worker.data(tied=True)
    expected = json.loads(json.dumps(metric.run(12, ids=q_ids + d_ids)))  # tuples as lists
    assert len(expected) == qrels_worker.NUM_Q
    for rank, result in enumerate(results_of("qrels_run", world, tmp_path_factory)):
        assert result["run"] == expected, f"rank {rank}/{world}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_run_after_compute_with_run_depth_is_the_one_process_run(world, tmp_path_factory):
    """run_depth=12, compute() then run(12), every query judged, the corpus in updates: each
    process's ranking keeps the lists of its share of the queries, gathered after (before,
    several processes ranked again); every process lists, with no product, what one process
    fed everything lists without run_depth."""
    metric = qrels_worker.build(qrels=qrels_worker.every_query_judged())
    qrels_worker.feed(metric, 0, 1)
    _, _, q_ids, d_ids, _ = qrels_worker.data()
    expected = json.loads(json.dumps(metric.run(12, ids=q_ids + d_ids)))
    for rank, result in enumerate(results_of("qrels_run_kept", world, tmp_path_factory)):
        assert result["run"] == expected, f"rank {rank}/{world}"
        assert result["run_multiply_adds"] == 0, f"rank {rank}/{world}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_lists_kept_against_a_fixed_gallery_are_the_run_on_every_process(
    world, tmp_path_factory
):
    """run_depth=12 with set_gallery on every process, the queries spread as DistributedSampler
    spreads them (padding repeats a few): compute()'s ranking keeps each process's share of
    the lists, gathered after, and every process lists the one-process run without a
    product."""
    metric = qrels_worker.build(fixed=True, qrels=qrels_worker.every_query_judged())
    qrels_worker.feed(metric, 0, 1, fixed=True)
    _, _, q_ids, d_ids, _ = qrels_worker.data()
    expected = json.loads(json.dumps(metric.run(12, ids=q_ids + d_ids)))
    for rank, result in enumerate(results_of("qrels_run_fixed_kept", world, tmp_path_factory)):
        assert result["run"] == expected, f"rank {rank}/{world}"
        assert result["run_multiply_adds"] == 0, f"rank {rank}/{world}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_run_of_a_sharded_corpus_is_the_gathered_run(world, tmp_path_factory):
    """gallery_sharded=True: each process lists the best of its shard and the lists merge into
    the run of the whole corpus (scores without ties here: the tie rule at the cut differs; each
    shard's product rounds in its own summation order)."""
    metric = qrels_worker.build()
    qrels_worker.feed(metric, 0, 1)
    _, _, q_ids, d_ids, _ = qrels_worker.data()
    expected = json.loads(json.dumps(metric.run(12, ids=q_ids + d_ids)))
    for rank, result in enumerate(results_of("qrels_run_sharded", world, tmp_path_factory)):
        where = f"rank {rank}/{world}"
        assert list(result["run"]) == list(expected), where
        for qid, listed in expected.items():
            # the same documents in the same order; a shard's product rounds in its own order
            assert [d for d, _ in result["run"][qid]] == [d for d, _ in listed], where
            assert [v for _, v in result["run"][qid]] == pytest.approx(
                [v for _, v in listed], abs=1e-12), where


@pytest.mark.timeout(300)
def test_the_runs_on_the_device_of_two_processes_are_the_one_cpu_process_runs(tmp_path):
    """metric.run(12) with the metric on the emulated CUDA device (gloo reporting "nccl"), on 2
    processes: the gathered tied corpus (ties by id, ties at every cut: the device's running
    lists mark those rows and list them again) and a sharded corpus (each shard's best merged)
    list what one CPU process fed everything lists."""
    expected = {}
    for scenario, tied in (("qrels_run", True), ("qrels_run_sharded", False)):
        metric = qrels_worker.build(ties="id" if tied else "expected")
        qrels_worker.feed(metric, 0, 1, tied=tied)
        _, _, q_ids, d_ids, _ = qrels_worker.data(tied=tied)
        expected[scenario] = json.loads(json.dumps(metric.run(12, ids=q_ids + d_ids)))
    runs = launch.run_workers(
        HERE / "device_worker.py", [",".join(expected), "emulated"], 2, tmp_path
    )
    for rank, by_scenario in enumerate(runs):
        assert by_scenario["qrels_run"]["run"] == expected["qrels_run"], rank
        got = by_scenario["qrels_run_sharded"]["run"]
        assert list(got) == list(expected["qrels_run_sharded"]), rank
        for qid, listed in expected["qrels_run_sharded"].items():
            # the same documents in the same order; a shard's product rounds in its own order
            assert [d for d, _ in got[qid]] == [d for d, _ in listed], (rank, qid)
            assert [v for _, v in got[qid]] == pytest.approx(
                [v for _, v in listed], abs=1e-12), (rank, qid)


@pytest.mark.timeout(300)
def test_a_corpus_on_disk_ranked_on_the_device_by_two_processes(tmp_path):
    """The corpus given as a ``.npy`` file to set_gallery on 2 processes whose metric lives on
    the emulated CUDA device (gloo reporting "nccl": a host tensor in a collective is refused):
    the first ranking reads the file onto the device, and every process gets the one-process
    values of the corpus in memory on the host."""
    expected = one_process(fixed=True)
    runs = launch.run_workers(
        HERE / "device_worker.py", ["qrels_on_disk", "emulated"], 2, tmp_path
    )
    for rank, by_scenario in enumerate(runs):
        result = by_scenario["qrels_on_disk"]
        assert result["state_devices"] == ["cuda"], rank
        assert result["notes"] == expected["notes"], rank
        for name, value in expected["values"].items():
            assert result["values"][name] == pytest.approx(value, abs=1e-12), (rank, name)
