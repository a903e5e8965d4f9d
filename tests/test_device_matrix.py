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

Also here: ``plot()`` of device metrics, SelectOnValidation's sample-id check over device
metrics (one process and three), and the host-sync budget of one same-source compute(), measured
with the emulator's sync counter (:func:`measure_compute_syncs`; ``python
tests/test_device_matrix.py`` prints the measurements at every size, image-text included).

``DEVICE_MATRIX_FULL=1`` runs the whole cartesian product instead of the representative matrix.
"""

from __future__ import annotations

import collections
import fnmatch
import importlib
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import retrieval_metrics as rm

HERE = Path(__file__).resolve().parent / "distributed"
sys.path.insert(0, str(HERE))

import device_matrix as dm  # noqa: E402
import launch  # noqa: E402

from emulated_cuda import emulated_cuda, fake_cuda_fixture  # noqa: E402, F401

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


# ------------------------------------------------------------------------ the host-sync budget

SYNC_NAMES = ["hit_rate@1", "hit_rate@4", "map@r", "r_precision", "mrr"]


# Where the ranking's two passes live, newest layout first: (module, one-sided, two-sided).
_PASSES = [
    ("retrieval_metrics.functional.ranking.schedule", "_one_sided_pass", "two_sided_pass"),
    ("retrieval_metrics.functional.ranking", "_one_sided_pass", "_two_sided_pass"),
]


class _BlockSpy:
    """Counts the query blocks (and block products) of the rankings run while it is active,
    from the arguments of the ranking's two passes. ``found`` is False when neither layout of
    :data:`_PASSES` is there (the counts stay 0: update _PASSES)."""

    def __init__(self) -> None:
        self.query_blocks = 0
        self.products = 0
        self.found = False

    def __enter__(self) -> _BlockSpy:
        self._saved = None
        for module_name, one_name, two_name in _PASSES:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            if hasattr(module, one_name) and hasattr(module, two_name):
                break
        else:
            return self
        one_sided, two_sided = getattr(module, one_name), getattr(module, two_name)

        def one(p, q_mat, g_mat, block_q, mode):
            rows = -(-q_mat.shape[0] // block_q)
            self.query_blocks += rows
            self.products += rows * -(-p.num_g // p.block_g)
            return one_sided(p, q_mat, g_mat, block_q, mode)

        def two(p_rows, p_cols, a, b, cache_room):
            block = p_rows.block_g
            rows, cols = -(-a.shape[0] // block), -(-b.shape[0] // block)
            if p_cols is None:  # one set against itself: the pairs i <= j
                self.query_blocks += rows
                self.products += rows * (rows + 1) // 2
            else:  # both directions' queries from one product per block pair
                self.query_blocks += rows + cols
                self.products += rows * cols
            return two_sided(p_rows, p_cols, a, b, cache_room)

        # the passes are looked up as module attributes at each call, so patching them here
        # reaches every caller
        self._saved = (module, one_name, one_sided, two_name, two_sided)
        setattr(module, one_name, one)
        setattr(module, two_name, two)
        self.found = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._saved is not None:
            module, one_name, one_sided, two_name, two_sided = self._saved
            setattr(module, one_name, one_sided)
            setattr(module, two_name, two_sided)


def _sync_source() -> str:
    """The innermost line of the library (src/retrieval_metrics) on the stack: who synced. For
    a helper of functional/primitives.py (used everywhere), its caller too."""
    frame = sys._getframe(2)
    found: list[str] = []
    while frame is not None and len(found) < 2:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/retrieval_metrics/" in path and "/tests/" not in path:
            where = path.split("/retrieval_metrics/", 1)[1]
            found.append(f"{where}:{frame.f_lineno} ({frame.f_code.co_name})")
            if not where.endswith("primitives.py"):
                break
        frame = frame.f_back
    return " <- ".join(found) or "outside the library"


def _measured_compute(metric, emu) -> dict[str, Any]:
    """compute()'s host syncs (by operator and by library line), query blocks and seconds."""
    sources: list[str] = []
    record = emu.record_sync

    def recording(why: str) -> None:
        record(why)
        sources.append(_sync_source())

    emu.record_sync = recording  # this instance only, for this compute
    try:
        with emu.counting() as log, _BlockSpy() as blocks:
            start = time.perf_counter()
            metric.compute()
            seconds = time.perf_counter() - start
    finally:
        del emu.record_sync
    return {
        "syncs": len(log),
        "by_op": collections.Counter(log).most_common(),
        "by_source": collections.Counter(sources).most_common(),
        "query_blocks": blocks.query_blocks if blocks.found else None,
        "block_products": blocks.products,
        "seconds": seconds,
    }


def measure_compute_syncs(n: int, dim: int = 32, classes: int = 100, seed: int = 0) -> dict:
    """One same-source RetrievalMetrics(SYNC_NAMES) compute() over ``n`` items on the emulated
    device (default memory_budget), after its update: its host syncs and query blocks."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=gen)
    emb = torch.randint(-2, 3, (n, dim), generator=gen).float()
    with emulated_cuda() as emu:
        metric = rm.RetrievalMetrics(SYNC_NAMES, similarity="dot").to("cuda")
        metric.update(emb.to("cuda"), labels.to("cuda"))
        return {"n": n, **_measured_compute(metric, emu)}


def measure_crossmodal_syncs(images: int = 5000, per_image: int = 5, dim: int = 32) -> dict:
    """One CrossModalRetrieval compute() over ``images`` images and ``per_image`` captions each
    (COCO 5K's shape by default), as (image, caption) pairs, on the emulated device."""
    gen = torch.Generator().manual_seed(1)
    image_emb = torch.randint(-2, 3, (images, dim), generator=gen).float()
    caption_image = torch.arange(images).repeat_interleave(per_image)
    captions = image_emb[caption_image] + torch.randint(
        -1, 2, (len(caption_image), dim), generator=gen
    ).float()
    with emulated_cuda() as emu:
        metric = rm.CrossModalRetrieval(similarity="dot").to("cuda")
        text_ids = torch.arange(len(caption_image))
        metric.update(*(t.to("cuda") for t in (image_emb[caption_image], captions, caption_image)),
                      text_ids=text_ids.to("cuda"))
        return {"n": f"{images} x {len(caption_image)}", **_measured_compute(metric, emu)}


# 24,000 items take about a minute on the emulated device (each ATen operator is a Python
# dispatch there): measured by hand (python tests/test_device_matrix.py), not in the suite
SUITE_SIZES = (3000, 6000, 12000)
SYNC_BUDGET = 200


@pytest.fixture(scope="module")
def sync_measurements() -> list[dict]:
    return [measure_compute_syncs(n) for n in SUITE_SIZES]


def test_the_sync_measurement_sees_every_sync_and_block(sync_measurements):
    """The measurement works: every counted sync has an operator and a source, and the
    ranking's query blocks are seen (how many depends on the path and on the block sizes the
    engine picks for the device, not only on the input's size)."""
    for m in sync_measurements:
        print(f"n={m['n']}: {m['syncs']} syncs, {m['query_blocks']} query blocks, "
              f"{m['block_products']} block products, {m['seconds']:.1f} s; {m['by_op']}")
        assert m["syncs"] == sum(c for _, c in m["by_op"]) == sum(c for _, c in m["by_source"])
        assert m["query_blocks"] is not None, "the ranking's passes moved: update _PASSES"
        assert m["query_blocks"] > 0


def test_host_syncs_of_compute_stay_within_budget(sync_measurements):
    """A same-source compute() syncs with the host fewer than SYNC_BUDGET times (at 24,000
    items, so at every smaller size too) and its syncs grow at most linearly with its query
    blocks: syncs per query block do not grow with the input."""
    for m in sync_measurements:
        assert m["syncs"] < SYNC_BUDGET, (m["n"], m["syncs"], m["by_source"][:8])
    per_block = [m["syncs"] / m["query_blocks"] for m in sync_measurements]
    # linear with a constant part: syncs per block fall (or stay) as blocks are added
    assert all(b <= per_block[0] * 1.1 for b in per_block), per_block


def _print_measurement(m: dict, top: int = 8) -> None:
    print(f"\n{m['n']}: {m['syncs']} host syncs in compute(), {m['query_blocks']} query blocks, "
          f"{m['block_products']} block products, {m['seconds']:.1f} s on the emulated device")
    print("  by operator:", ", ".join(f"{op} {c}" for op, c in m["by_op"]))
    for source, count in m["by_source"][:top]:
        print(f"  {count:6d}  {source}")


if __name__ == "__main__":
    # the measurements for people: every size, and image-text at COCO 5K's shape
    for size in (*SUITE_SIZES, 24000):
        _print_measurement(measure_compute_syncs(size))
    _print_measurement(measure_crossmodal_syncs())
