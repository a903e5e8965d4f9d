"""The whole-block counting backends (torch's kernels, the fused Triton kernel: see
engine/counters.py) on several real gloo processes, forced on the CPU through
``RETRIEVAL_METRICS_COUNTER`` (the workers inherit it; Triton runs under ``TRITON_INTERPRET=1``,
set by conftest.py where there is no CUDA GPU): a set ranked against itself with its block pairs
shared out (tests/distributed/shared_pass.py) and judgments with the corpus gathered, fixed and
kept sharded (tests/distributed/qrels_worker.py) give every process the values one process gets
with the CPU's own counting. The GPU's paths over NCCL take these same exchanges, with the
counts of each process summed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(HERE))

import launch  # noqa: E402
import qrels_worker  # noqa: E402

from retrieval_metrics.functional.ranking.engine.counters import COUNTER_ENV  # noqa: E402
from triton_here import needs_triton  # noqa: E402

BACKENDS = ["torch", pytest.param("triton", marks=needs_triton)]
QRELS_SCENARIOS = {"qrels": False, "qrels_fixed": True, "qrels_sharded": False}


def _with_backend(backend: str, monkeypatch, run):
    monkeypatch.setenv(COUNTER_ENV, backend)
    try:
        return run()
    finally:
        monkeypatch.delenv(COUNTER_ENV)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_symmetric_pass_with_a_whole_block_backend(backend, tmp_path, monkeypatch):
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    # the symmetric pass with its block pairs shared (through the class: the functional layer's
    # "full" takes the same pass) and query blocks shared (euclidean): Triton's interpreter
    # takes seconds a block
    parts = ["class", "euclidean"]
    single = launch.run_workers(HERE / "shared_pass.py", parts, 1, tmp_path / "one")[0]
    runs = _with_backend(backend, monkeypatch, lambda: launch.run_workers(
        HERE / "shared_pass.py", parts, 2, tmp_path / "two"))
    assert set(runs[0]) == set(parts)
    for rank, got in enumerate(runs):
        assert got["class"]["values"] == single["class"]["values"], rank
        assert got["class"]["per_query"] == single["class"]["per_query"], rank
        assert got["euclidean"]["table"] == single["euclidean"]["table"], rank


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS)
def test_judgments_over_processes_with_a_whole_block_backend(backend, tmp_path, monkeypatch):
    runs = _with_backend(backend, monkeypatch, lambda: launch.run_workers(
        HERE / "qrels_worker.py", [",".join(QRELS_SCENARIOS)], 2, tmp_path))
    for scenario, fixed in QRELS_SCENARIOS.items():
        metric = qrels_worker.build(fixed=fixed)
        qrels_worker.feed(metric, 0, 1, fixed=fixed)
        expected = qrels_worker.scored(metric)  # one process, the CPU's counting
        for rank, by_scenario in enumerate(runs):
            got = by_scenario[scenario]
            assert got["notes"] == expected["notes"], (scenario, rank)
            for name, value in expected["values"].items():
                assert got["values"][name] == pytest.approx(value, abs=1e-12), (
                    scenario, rank, name)
