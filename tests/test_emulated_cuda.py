"""The emulated CUDA device (tests/emulated_cuda.py): each rule trips on a planted wrong op.

The emulator is a test tool: these tests pin what it refuses, what it counts as a host sync, and
that what it lets through computes the CPU's values on tensors that stay on "cuda".
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torchmetrics

from emulated_cuda import (
    CUDA,
    EmulatedCuda,
    FakeCudaTensor,
    emulated_cuda,
    fake_cuda_fixture,  # noqa: F401  (the `fake_cuda` fixture)
    is_fake_cuda,
    to_fake_cuda,
)

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"


def fake(values, dtype=None) -> FakeCudaTensor:
    return to_fake_cuda(torch.as_tensor(values, dtype=dtype))


def host(t: torch.Tensor) -> torch.Tensor:
    return t.host if is_fake_cuda(t) else t


# ------------------------------------------------------------------------------ the tensor


def test_a_fake_tensor_reports_cuda_and_keeps_its_data_on_the_host():
    x = fake([1.0, 2.0, 3.0])
    assert x.device == torch.device("cuda:0") == CUDA
    assert x.is_cuda and x.device.type == "cuda"
    assert x.host.device.type == "cpu" and x.host.tolist() == [1.0, 2.0, 3.0]
    assert x.shape == (3,) and x.dtype == torch.float32
    assert "device='cuda:0'" in repr(x)


def test_results_of_ops_on_fake_tensors_are_fake(fake_cuda):
    x = fake([[1.0, -2.0], [3.0, 0.5]])
    for out in (x + 1, x @ x, x.sum(0), x.t(), x[0], x.clone(), torch.exp(x), x.max(1).values):
        assert is_fake_cuda(out) and out.device == CUDA
    assert all(is_fake_cuda(t) for t in torch.sort(x, dim=1))


def test_in_place_and_out_results_are_the_same_objects(fake_cuda):
    x = fake([1.0, 2.0])
    assert x.add_(1) is x
    assert x.tolist() == [2.0, 3.0]
    out = torch.empty(0, device="cuda")  # out= resizes it: the wrapper follows its host
    assert torch.cumsum(x, 0, out=out) is out
    assert out.shape == (2,) and out.tolist() == [2.0, 5.0]


# ---------------------------------------------------------------------------- same device


def test_mixing_a_cpu_tensor_with_a_device_tensor_raises(fake_cuda):
    x = fake([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match=f"{SAME_DEVICE}, cuda:0 and cpu!"):
        x + torch.ones(3)
    with pytest.raises(RuntimeError, match=f"{SAME_DEVICE}, cpu and cuda:0!"):
        torch.ones(3) + x
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.cat([x, torch.ones(2)])
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.mm(x[None], torch.ones(3, 1))


def test_a_cpu_scalar_mixes_where_cuda_takes_one(fake_cuda):
    x = fake([1.0, 2.0, 3.0])
    assert (x + torch.tensor(1.0)).tolist() == [2.0, 3.0, 4.0]
    assert torch.where(x > 1, x, torch.tensor(0.0)).tolist() == [0.0, 2.0, 3.0]
    # an operator with CUDA's generated device check refuses even a 0-dim CPU tensor
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.searchsorted(x, torch.tensor(2.0))
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.index_select(x, 0, torch.tensor(1))


def test_index_select_and_gather_want_device_indices(fake_cuda):
    x = fake([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.index_select(x, 0, torch.tensor([1]))
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        x.gather(1, torch.tensor([[0], [1]]))
    assert torch.index_select(x, 0, fake([1])).tolist() == [[3.0, 4.0]]
    assert x.gather(1, fake([[0], [1]])).tolist() == [[1.0], [4.0]]


def test_advanced_indexing_takes_cpu_indices_for_a_device_tensor_only(fake_cuda):
    x = fake([10.0, 20.0, 30.0])
    assert is_fake_cuda(x[torch.tensor([2, 0])]) and x[torch.tensor([2, 0])].tolist() == [30, 10]
    assert x[[0, 1]].tolist() == [10.0, 20.0]
    with pytest.raises(RuntimeError, match="indices should be either on cpu or on the same"):
        torch.ones(3)[fake([0])]


def test_setitem_values_follow_cuda(fake_cuda):
    x = fake([0.0, 0.0, 0.0])
    x[0:2] = torch.ones(2)  # a copy_ from the host: allowed
    x[fake([2])] = 5.0
    assert x.tolist() == [1.0, 1.0, 5.0]
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        x[fake([0, 1])] = torch.tensor([7.0, 8.0])  # index_put_ values on the host


def test_copies_between_host_and_device_are_allowed(fake_cuda):
    x = fake([1.0, 2.0])
    x.copy_(torch.tensor([3.0, 4.0]))
    assert x.tolist() == [3.0, 4.0]
    dst = torch.zeros(2)
    with fake_cuda.counting() as log:
        dst.copy_(x)
    assert dst.tolist() == [3.0, 4.0] and len(log) == 1


def test_numpy_of_a_device_tensor_raises_as_on_cuda(fake_cuda):
    x = fake([1.0, 2.0])
    with pytest.raises(TypeError, match="can't convert cuda:0 device type tensor to numpy"):
        x.numpy()
    with pytest.raises(TypeError, match=r"Use Tensor.cpu\(\) to copy"):
        np.asarray(x)
    assert x.cpu().numpy().tolist() == [1.0, 2.0]


# ---------------------------------------------------------------------------------- syncs


def test_scalar_reads_count_one_sync_each(fake_cuda):
    x = fake([1.0, 2.0, 3.0])
    i = fake(2)
    reads = [
        lambda: int(x.sum()),
        lambda: float(x.sum()),
        lambda: bool(x.sum() > 0),
        lambda: x.sum().item(),
        lambda: x.tolist(),
        lambda: [0, 1, 2][i],
        lambda: f"{x.sum():.1f}",
        lambda: torch.equal(x, x),
    ]
    for read in reads:
        with fake_cuda.counting() as log:
            read()
        assert len(log) == 1, log
    assert int(x.sum()) == 6 and [0, 1, 2][i] == 2


def test_ops_without_data_dependent_sizes_do_not_sync(fake_cuda):
    x = fake([3.0, 1.0, 2.0])
    with fake_cuda.counting() as log:
        y = torch.sort(x).values.cumsum(0)
        torch.topk(x, 2)
        torch.searchsorted(y, x)
        x[x > 1] = 0.0  # CUDA turns it into masked_fill_ with the host scalar
        torch.zeros_like(x).scatter_add_(0, fake([0, 0, 1]), x)
        torch.cat([x, y]).view(2, 3).t().contiguous()
    assert log == []


def test_boolean_mask_indexing_counts_a_sync(fake_cuda):
    x = fake([-1.0, 2.0, 3.0])
    with fake_cuda.counting() as log:
        picked = x[x > 0]
    assert picked.tolist() == [2.0, 3.0] and len(log) == 1


@pytest.mark.parametrize(
    "op",
    [
        lambda x: torch.nonzero(x),
        lambda x: x.nonzero(),
        lambda x: torch.argwhere(x),
        lambda x: torch.where(x > 0),
        lambda x: torch.masked_select(x, x > 0),
        lambda x: torch.unique(x),
        lambda x: torch.unique_consecutive(x),
        lambda x: torch.bincount(x.long().clamp(min=0)),
        lambda x: torch.bincount(x.long().clamp(min=0), minlength=5),  # CUDA still reads max
    ],
    ids=[
        "nonzero",
        "Tensor.nonzero",
        "argwhere",
        "where(cond)",
        "masked_select",
        "unique",
        "unique_consecutive",
        "bincount",
        "bincount_minlength",
    ],
)
def test_data_dependent_sizes_count_a_sync(fake_cuda, op):
    x = fake([0.0, 2.0, 2.0, 3.0])
    expected = op(x.host)
    with fake_cuda.counting() as log:
        out = op(x)
    assert len(log) == 1, log
    for got, want in zip(
        out if isinstance(out, tuple) else [out],
        expected if isinstance(expected, tuple) else [expected],
        strict=True,
    ):
        assert is_fake_cuda(got) and torch.equal(got.host, want)


def test_repeat_interleave_syncs_unless_given_its_output_size(fake_cuda):
    values, counts = fake([1, 2, 3]), fake([2, 0, 1])
    with fake_cuda.counting() as log:
        out = torch.repeat_interleave(values, counts)
    assert len(log) == 1 and out.tolist() == [1, 1, 3]
    with fake_cuda.counting() as log:
        torch.repeat_interleave(values, counts, output_size=3)
    assert log == []


def test_device_to_host_copies_count(fake_cuda):
    x = fake([1.0, 2.0])
    for move in (lambda: x.cpu(), lambda: x.to("cpu"), lambda: x.to(device="cpu")):
        with fake_cuda.counting() as log:
            out = move()
        assert type(out) is torch.Tensor and out.device.type == "cpu" and len(log) == 1
    with fake_cuda.counting() as log:
        x.to("cpu", non_blocking=True)  # does not wait for the device
    assert log == []


def test_host_to_device_copies_count_unless_non_blocking(fake_cuda):
    """A blocking copy from host memory (``.to("cuda")``, ``copy_``, ``torch.tensor(data,
    device="cuda")``, a host index tensor that advanced indexing moves first) ends in
    ``cudaStreamSynchronize`` (ATen's ``memcpy_and_sync``), which CUDA's sync debug mode
    reports: one sync each. A ``non_blocking=True`` copy, an empty one and a factory without
    data (zeros, arange, full) do not wait."""
    x = fake([1.0, 2.0, 3.0])
    host = torch.tensor([4.0, 5.0, 6.0])
    waits = {
        "to": lambda: host.to("cuda"),
        "cuda": lambda: host.cuda(),
        "copy_": lambda: x.copy_(host),
        "tensor": lambda: torch.tensor([1, 2], device="cuda"),
        "as_tensor": lambda: torch.as_tensor(np.arange(3), device="cuda"),
        "host index": lambda: x[torch.tensor([0, 2])],
        "host mask": lambda: x[torch.tensor([True, False, True])],
        "host index put": lambda: x.index_put_((torch.tensor([1]),), fake(9.0)),
    }
    for name, wait in waits.items():
        with fake_cuda.counting() as log:
            wait()
        assert len(log) == 1, (name, log)
    free = {
        "to non_blocking": lambda: host.to("cuda", non_blocking=True),
        "copy_ non_blocking": lambda: x.copy_(host, non_blocking=True),
        "empty": lambda: torch.zeros(0).to("cuda"),
        "zeros": lambda: torch.zeros(3, device="cuda"),
        "arange": lambda: torch.arange(3, device="cuda"),
        "device index": lambda: x[fake([0, 2])],
        "python scalar put": lambda: x.index_put_((fake([1]),), fake(0.0)),
    }
    for name, op in free.items():
        with fake_cuda.counting() as log:
            op()
        assert log == [], (name, log)


def test_the_sync_counter_and_its_log(fake_cuda):
    assert isinstance(fake_cuda, EmulatedCuda)
    fake_cuda.reset()
    x = fake([1.0])
    float(x)
    x.cpu()
    assert fake_cuda.syncs == 2
    assert fake_cuda.sync_log == ["__float__", "device-to-host copy (_to_copy)"]


# ------------------------------------------------------------------------ factories, moves

FACTORIES = {
    "zeros": lambda device: torch.zeros(2, 3, device=device),
    "ones": lambda device: torch.ones(3, device=device, dtype=torch.int64),
    "empty": lambda device: torch.empty(0, device=device),
    "full": lambda device: torch.full((2,), 7.0, device=device),
    "arange": lambda device: torch.arange(5, device=device),
    "tensor": lambda device: torch.tensor([1, 2, 3], device=device),
    "as_tensor": lambda device: torch.as_tensor([1.0, 2.0], device=device),
    "zeros_like": lambda device: torch.zeros_like(torch.ones(2), device=device),
    "new_zeros": lambda device: torch.ones(1).new_zeros(3, device=device),
    "eye": lambda device: torch.eye(3, device=device),
    "linspace": lambda device: torch.linspace(0, 1, 5, device=device),
    "randn": lambda device: torch.randn(
        4, generator=torch.Generator().manual_seed(0), device=device
    ),
    "rand": lambda device: torch.rand(4, generator=torch.Generator().manual_seed(0), device=device),
    "randint": lambda device: torch.randint(
        0, 9, (4,), generator=torch.Generator().manual_seed(0), device=device
    ),
}


@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda"), 0])
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_factories_on_cuda_make_fake_tensors(fake_cuda, name, device):
    out = FACTORIES[name](device)
    assert is_fake_cuda(out) and out.device == CUDA
    expected = FACTORIES[name]("cpu")
    assert out.dtype == expected.dtype and torch.equal(out.host, expected)


def test_moves_onto_the_device(fake_cuda):
    x = torch.tensor([1.0, 2.0])
    for moved in (
        x.to("cuda"),
        x.to(device="cuda"),
        x.cuda(),
        x.to(torch.device("cuda:0")),
        x.to(fake([0])),
        torch.as_tensor(x, device="cuda"),
    ):
        assert is_fake_cuda(moved) and moved.tolist() == [1.0, 2.0]
        assert moved.host is not x  # a copy, not the CPU tensor itself
    y = x.to("cuda")
    assert y.to("cuda") is y and y.cuda() is y and torch.as_tensor(y) is y
    assert y.to("cuda", torch.float64).dtype == torch.float64
    assert y.to("cuda", copy=True) is not y
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        x.to("cuda:1")


def test_cuda_queries_are_patched_while_active_only():
    assert not torch.cuda.is_available()
    with emulated_cuda():
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert torch.cuda.current_device() == 0
        torch.cuda.synchronize()
    assert not torch.cuda.is_available()
    with pytest.raises((AssertionError, RuntimeError)):
        torch.zeros(1, device="cuda")  # the CPU-only build again


def test_the_emulation_does_not_nest(fake_cuda):
    with pytest.raises(RuntimeError, match="already active"), emulated_cuda():
        pass


def test_fake_tensors_work_without_the_emulation_too():
    x = to_fake_cuda(torch.tensor([1.0, 2.0]))
    assert is_fake_cuda(x + 1) and int(x.sum()) == 3 and x[x > 1].tolist() == [2.0]
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        x + torch.ones(2)
    assert to_fake_cuda(x) is x and not is_fake_cuda(x.cpu())


def test_pickle_keeps_the_data_and_the_device():
    x = to_fake_cuda(torch.tensor([1.0, 2.0]))
    y = pickle.loads(pickle.dumps(x))
    assert is_fake_cuda(y) and y.host.tolist() == [1.0, 2.0]


def test_autograd_on_a_fake_tensor_is_a_python_error_not_an_abort(fake_cuda):
    w = torch.ones(2, device="cuda", requires_grad=True)
    with pytest.raises(RuntimeError, match="autograd"):
        w * 2  # a CPU-only torch would abort the process here
    with torch.no_grad():
        assert (w * 2).tolist() == [2.0, 2.0]


def test_modules_and_metrics_move_to_the_device(fake_cuda):
    linear = torch.nn.Linear(3, 2).to("cuda")
    assert is_fake_cuda(linear.weight) and isinstance(linear.weight, torch.nn.Parameter)
    with torch.no_grad():
        assert is_fake_cuda(linear(torch.ones(4, 3, device="cuda")))
    linear.to("cpu")
    assert type(linear.weight) is torch.nn.Parameter and linear.weight.device.type == "cpu"

    mean = torchmetrics.MeanMetric().to("cuda")
    assert mean.device == CUDA
    mean.update(torch.tensor([1.0, 3.0], device="cuda"))
    assert mean.compute().device == CUDA and float(mean.compute()) == 2.0


def test_torchmetrics_sum_on_the_device(fake_cuda):
    metric = torchmetrics.SumMetric().to("cuda")
    assert is_fake_cuda(metric.sum_value)
    metric.update(fake([1.0, 2.0, 3.0]))
    metric.update(fake([4.0]))
    out = metric.compute()
    assert out.device.type == "cuda" and float(out) == 10.0
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torchmetrics.SumMetric().to("cuda").update(torch.ones(3, 2) + fake([1.0, 2.0]))


# ---------------------------------------------------------------------- end to end values


def computation(x, idx, values):
    scores = x @ x.T
    top = torch.topk(scores, 2, dim=1)
    order = torch.sort(scores.flatten(), stable=True)
    csum = torch.cumsum(values, 0)
    pos = torch.searchsorted(csum, values)
    acc = torch.zeros(4, dtype=values.dtype, device=values.device).scatter_add(0, idx, values)
    return {
        "scores": scores,
        "top_values": top.values,
        "top_indices": top.indices,
        "sorted": order.values,
        "order": order.indices,
        "cumsum": csum,
        "searchsorted": pos,
        "scatter_add": acc,
        "index_select": torch.index_select(x, 0, idx),
        "gather": scores.gather(1, top.indices),
        "normalized": torch.nn.functional.normalize(x, dim=1),
    }


def test_a_computation_gives_the_cpu_values_on_the_device(fake_cuda):
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (6, 5), generator=gen).float()
    idx = torch.tensor([0, 3, 3, 1, 2, 0])
    values = torch.rand(6, generator=gen, dtype=torch.float64)
    expected = computation(x, idx, values)
    moved = [t.to("cuda", non_blocking=True) for t in (x, idx, values)]
    with fake_cuda.counting() as log:
        got = computation(*moved)
    assert log == []
    for name, value in got.items():
        assert is_fake_cuda(value), name
        assert torch.equal(value.host, expected[name]), name


# ---------------------------------------------------------------------------- collectives


@pytest.fixture
def gloo_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/init", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_collectives_refuse_host_tensors_and_reduce_device_ones(gloo_group):
    unpatched = dist.all_reduce
    with emulated_cuda():
        with pytest.raises(RuntimeError, match="Tensors must be CUDA and dense"):
            dist.all_reduce(torch.ones(2))
        with pytest.raises(ValueError, match="Tensors must be CUDA and dense"):
            dist.broadcast(torch.ones(2), src=0)  # NCCL's ValueError in recent torch
        x = fake([1.0, 2.0])
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        assert is_fake_cuda(x) and x.tolist() == [1.0, 2.0]  # one process: the sum is itself
        x.mul_(3)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        assert x.tolist() == [3.0, 6.0]
        out = [torch.zeros(2, device="cuda")]
        dist.all_gather(out, fake([4.0, 5.0]))
        assert out[0].tolist() == [4.0, 5.0]
        with pytest.raises(RuntimeError, match="Tensors must be CUDA and dense"):
            dist.all_gather([torch.zeros(2)], fake([4.0, 5.0]))
        flat = torch.zeros(2, device="cuda")
        # all_gather_into_tensor, renamed all_gather_single in torch 2.13
        gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather_single(flat, fake([6.0, 7.0]))
        assert flat.tolist() == [6.0, 7.0]
        assert dist.get_backend() == "nccl"
        objects = [None]
        dist.all_gather_object(objects, {"a": 1})  # objects travel as they do on NCCL
        assert objects == [{"a": 1}]
    assert dist.all_reduce is unpatched and dist.get_backend() == "gloo"
    dist.all_reduce(torch.ones(2))  # gloo's own again


def test_mps_mode_refuses_float64_and_the_half_product_as_mps_does():
    with emulated_cuda(mps=True):
        x = torch.ones(4, device="cuda")
        for make in (
            lambda: x.double(),  # a conversion
            lambda: torch.zeros(2, dtype=torch.float64, device="cuda"),  # a factory
            lambda: torch.ones(2, dtype=torch.float64).to("cuda"),  # a move
            lambda: x.view(torch.uint8).view(torch.float64),  # a view
        ):
            with pytest.raises(TypeError, match="MPS framework doesn't support float64"):
                make()
        half = torch.ones(2, 2, dtype=torch.float16, device="cuda")
        # (native_functions.yaml registers mm.dtype for CUDA and XPU only)
        with pytest.raises(NotImplementedError, match=r"aten::mm\.dtype' with .* 'MPS'"):
            torch.mm(half, half, out_dtype=torch.float32)
        assert (x * 2).sum().item() == 8  # everything else as on CUDA
    with emulated_cuda():
        assert torch.ones(2, dtype=torch.float64).to("cuda").dtype == torch.float64
        half = torch.ones(2, 2, dtype=torch.float16, device="cuda")
        assert torch.mm(half, half, out_dtype=torch.float32).dtype == torch.float32
