"""The device matrix: every metric class x every input form x ids or none x the options that
change the path, on the emulated CUDA device (tests/emulated_cuda.py), on one process and on 2
and 3 gloo processes whose states and batches are device tensors: no error, and every value,
per-query value, summary row and comparison equal to the CPU's, exactly.

The cases live in tests/distributed/device_matrix.py (integer-valued embeddings ranked by
``similarity="dot"``, so every score is exact on any device: "equal" means bit for bit). On one
process every case runs; on several, each split runs its share of them (device_matrix.py says
which and why), all cases of one world size in one set of processes (device_worker.py), against
the same single-process CPU answers. Beside the values each case records where its results live
(``value.device`` of compute() and per_query()); :data:`RESULTS_ON_METRIC_DEVICE` and
:data:`PER_QUERY_ON_METRIC_DEVICE` turn on the assertion that they are on the metric's device,
as torchmetrics returns them.

Also here: ``plot()`` of device metrics and SelectOnValidation's sample-id check over device
metrics (one process and three). The host-sync budget of compute() is in test_device_syncs.py.

``DEVICE_MATRIX_FULL=1`` runs the whole cartesian product instead of the representative matrix.
"""

from __future__ import annotations

import fnmatch
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[1] / "distributed"
sys.path.insert(0, str(HERE))

import device_matrix as dm  # noqa: E402
import launch  # noqa: E402

from emulated_cuda import fake_cuda_fixture, fake_mps_fixture  # noqa: E402, F401

#: torchmetrics returns compute()'s results on the metric's device. True: every case asserts it
#: (one process and several). False: where they live is recorded only.
RESULTS_ON_METRIC_DEVICE = True
#: The same for the values of per_query().
PER_QUERY_ON_METRIC_DEVICE = True

# Failures of the library that this matrix finds, while they are open: {fnmatch pattern of case
# names: reason}, e.g. {"*-relevant_ranks-*": "..."}. Marked xfail(strict) so that the fix shows
# as XPASS, which fails until the entry is removed. (The first one found, num_relevant= as a
# device tensor compared with a host tensor in metric.py's _table_from_ranks, is fixed.)
KNOWN_FAILURES: dict[str, str] = {}


def _param(case: dm.Case, *prefix: Any) -> Any:
    marks = [
        pytest.mark.xfail(strict=True, reason=reason)
        for pattern, reason in KNOWN_FAILURES.items()
        if fnmatch.fnmatchcase(case.name, pattern)
    ]
    return pytest.param(*prefix, case, id="-".join([*map(str, prefix), case.name]), marks=marks)


# ------------------------------------------------------------------------------ comparisons


def _nan_safe(x: Any) -> Any:
    """NaN as the string "nan" (NaN != NaN), so that nested results compare with ==."""
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if isinstance(x, list):
        return [_nan_safe(v) for v in x]
    if isinstance(x, dict):
        return {k: _nan_safe(v) for k, v in x.items()}
    return x


def assert_same_results(got: dict, want: dict, context: str) -> None:
    """Values and per-query values bit for bit (NaN where the CPU has NaN); summary rows and
    comparisons wherever ``got`` has them."""
    for part in ("values", "per_query"):
        assert got[part].keys() == want[part].keys(), f"{context}: {part} keys"
        for key, value in want[part].items():
            np.testing.assert_array_equal(
                np.asarray(got[part][key], dtype=float),
                np.asarray(value, dtype=float),
                err_msg=f"{context}: {part} {key}",
            )
    for part in ("summary", "compare"):
        if part in got:
            assert _nan_safe(got[part]) == _nan_safe(want[part]), f"{context}: {part}"


def assert_results_on_metric_device(got: dict, context: str) -> None:
    """compute()'s (and per_query()'s) results on the metric's device, where the flags ask."""
    device = got["metric_device"]
    for flag, part in (
        (RESULTS_ON_METRIC_DEVICE, "value_devices"),
        (PER_QUERY_ON_METRIC_DEVICE, "per_query_devices"),
    ):
        if flag:
            elsewhere = {k: d for k, d in got[part].items() if d != device}
            assert not elsewhere, f"{context}: {part} not on the metric's {device}: {elsewhere}"


def _cpu_run(case: dm.Case) -> dict:
    try:
        return dm.run_case(case, "single", 0, 1, "cpu")
    except Exception as error:  # the device test of the case says so; the others still run
        return {"error": f"{type(error).__name__}: {error}"}


@pytest.fixture(scope="module")
def expected() -> dict[str, dict]:
    """Every case on one CPU process (before any emulation starts): the answers."""
    return {case.name: _cpu_run(case) for case in dm.split_cases("single")}


# ------------------------------------------------------------------------------ one process


@pytest.mark.parametrize("case", [_param(c) for c in dm.split_cases("single")])
def test_one_process_on_the_device_gives_the_cpu_values(case, expected, fake_cuda):
    """The case on the emulated device: its states are device tensors, nothing raises (no host
    tensor meets a device tensor, no numpy of a device tensor), and compute(), per_query(),
    summary() and compare() give the CPU's answers exactly."""
    want = expected[case.name]
    assert "error" not in want, f"the CPU run failed: {want['error']}"
    got = dm.run_case(case, "single", 0, 1, "cuda")
    assert got["metric_device"] == "cuda:0"
    assert got["state_devices"] == ["cuda"], "states left on the host"
    assert got["ranked_in_chunks"] == want["ranked_in_chunks"] == (case.option == "chunked")
    assert_same_results(got, want, case.name)
    assert_results_on_metric_device(got, case.name)


@pytest.mark.parametrize("case", [_param(c) for c in dm.split_cases("single")])
def test_one_process_on_a_device_without_float64_gives_the_cpu_values(case, expected, fake_mps):
    """The case on a device that has no float64 (Apple's MPS, emulated: a float64 tensor there
    raises), fed float32 where the CPU run had float64 (whole numbers, so the same scores):
    nothing raises, and every value is the CPU's exactly. The states that are float64 (integer
    scores, positions, rank tables' grades) are on the host, every other on the device;
    compute()'s float32 results are on the device, per_query()'s float64 values on the host."""
    want = expected[case.name]
    assert "error" not in want, f"the CPU run failed: {want['error']}"
    got = dm.run_case(case, "single", 0, 1, "cuda")
    assert got["metric_device"] == "cuda:0"
    assert got["float64_state_devices"] in ([], ["cpu"]), "float64 states on the device"
    assert got["other_state_devices"] == ["cuda"], "states left on the host"
    assert got["ranked_in_chunks"] == want["ranked_in_chunks"] == (case.option == "chunked")
    assert_same_results(got, want, case.name)
    for part in ("value", "per_query"):
        devices, dtypes = got[f"{part}_devices"], got[f"{part}_dtypes"]
        for name, device in devices.items():
            home = "cpu" if dtypes[name] == "torch.float64" else "cuda:0"
            assert device == home, f"{case.name}: {part} {name} ({dtypes[name]}) on {device}"


# ----------------------------------------------------------------------- several processes

WORLDS = {2: ("even",), 3: ("uneven_empty", "padded")}
WORLD_OF = {split: world for world, splits in WORLDS.items() for split in splits}
# Splits run by one set of processes: every split of a world size together (starting processes
# costs more than the cases); with DEVICE_MATRIX_FULL one set per split, each within launch.py's
# timeout.
GROUPS = [(split,) for split in WORLD_OF] if dm.FULL else list(WORLDS.values())
_RUNS: dict[tuple[str, ...], list[dict]] = {}


def _runs(split: str, tmp_path_factory) -> list[dict]:
    """Every rank's results for the set of processes that runs ``split`` (launched once, under
    launch.py's timeout; SelectOnValidation's check runs with the padded split, whose
    DistributedSampler padding repeats ids across ranks)."""
    group = next(g for g in GROUPS if split in g)
    if group not in _RUNS:
        scenarios = [f"matrix:{s}" for s in group] + (["select"] if "padded" in group else [])
        _RUNS[group] = launch.run_workers(
            HERE / "device_worker.py",
            [",".join(scenarios), "emulated"],
            WORLD_OF[split],
            tmp_path_factory.mktemp(f"device_matrix_{'_'.join(group)}"),
        )
    return _RUNS[group]


MULTI_PROCESS = [_param(c, split) for split in WORLD_OF for c in dm.split_cases(split)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("split", "case"), MULTI_PROCESS)
def test_every_rank_on_the_device_gives_one_cpu_process_values(
    split, case, expected, tmp_path_factory
):
    """The case on 2 or 3 processes whose states and batches are on the emulated device (the
    gloo group reports "nccl" and refuses host tensors as NCCL does): every rank's values,
    per-query values (and summary and comparison, where run) equal one CPU process fed every
    sample once. With ids, DistributedSampler's repeats are found, so nothing warns about them."""
    want = expected[case.name]
    assert "error" not in want, f"the CPU run failed: {want['error']}"
    for rank, payload in enumerate(_runs(split, tmp_path_factory)):
        got = payload[f"matrix:{split}"][case.name]
        context = f"{case.name} rank {rank}"
        assert "error" not in got, f"{context}: {got['error']}"
        assert got["state_devices"] in (["cuda"], []), f"{context}: states left on the host"
        assert got["ranked_in_chunks"] == (case.option == "chunked"), context
        assert_same_results(got, want, context)
        assert_results_on_metric_device(got, context)
        if case.ids:
            assert not [w for w in got["warnings"] if "cannot be detected" in w], context


# ------------------------------------------------------------------------- SelectOnValidation


def _assert_select(result: dict, context: str) -> None:
    # 41 query ids, 12 image ids and 36 caption ids, each kind apart
    assert result["validation_ids"] == 89, context
    assert result["overlap"] is not None and "10 of the 89 test sample ids" in result["overlap"]
    assert result["disjoint"] is None, context


def test_select_on_validation_compares_the_ids_of_device_metrics(fake_cuda):
    """SelectOnValidation's hooks collect sample ids from metrics on the device (query ids,
    image ids, caption ids) and refuse a test set sharing 10 of them, as on the CPU."""
    got = dm.select_on_validation(0, 1, "cuda")
    _assert_select(got, "one process")


@pytest.mark.timeout(600)
def test_select_on_validation_gathers_device_metric_ids_over_processes(tmp_path_factory):
    """On 3 processes (emulated NCCL: host tensors refused), the ids every rank collected are
    gathered, the padding repeats are one id each, and the same 10 shared ids are found on
    every rank."""
    for rank, payload in enumerate(_runs("padded", tmp_path_factory)):
        _assert_select(payload["select"], f"rank {rank}")


# ----------------------------------------------------------------------------------- plot()

PLOTTED = [
    "CMC-same_source-ids",  # a curve: hit rate @K with its chance curve
    "HitRateAtK-same_source-ids",  # several k: a curve too
    "RetrievalMetrics-query_gallery-no_ids",  # the hit rates it reports
    "MAPAtR-same_source-no_ids",  # one value: torchmetrics' own plot
    "CrossModalRetrieval-pairs-ids",  # a curve per direction
]


@pytest.mark.parametrize("name", PLOTTED)
def test_plot_of_a_device_metric_draws_the_cpu_figure(name, fake_cuda):
    """plot() of a metric on the device runs (nothing hands a device tensor to matplotlib) and
    draws the lines the CPU metric draws."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    case = next(c for c in dm.split_cases("single") if c.name == name)
    lines = {}
    for device in ("cpu", "cuda"):
        fig, ax = dm.fed(case, "single", 0, 1, device).plot()
        try:
            assert isinstance(fig, matplotlib.figure.Figure), device
            lines[device] = [np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()]
        finally:
            plt.close(fig)
    assert len(lines["cuda"]) == len(lines["cpu"])
    for ours, cpu in zip(lines["cuda"], lines["cpu"], strict=True):
        np.testing.assert_array_equal(ours, cpu)
