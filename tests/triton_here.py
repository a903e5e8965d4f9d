"""Where the tests can run the Triton kernels (``engine/triton_count``, ``engine/triton_pairs``):
compiled on a CUDA GPU, else by Triton's interpreter on the CPU (conftest.py sets
``TRITON_INTERPRET=1`` where no CUDA GPU is, before anything imports triton).

Triton's interpreter before 3.7 cannot take a loop bound that is a kernel argument (it turns
the argument into a one-element array, which NumPy 2 refuses to read as an int); the fused
count loops over its rows' bins up to one. Triton 3.6 is the one torch 2.11's CUDA build pins,
so a contributor with that build and no GPU has it: there the interpreted tests skip, saying
so, and ``test_the_fused_kernel_compiles_for_an_h200`` still compiles the kernels as a GPU runs
them. A compiled kernel takes such a bound on every version.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import pytest

__all__ = [
    "INTERPRETED", "KERNEL_DEVICE", "kernels_cannot_run", "needs_triton", "needs_triton_package",
]

#: whether the kernels run in Triton's interpreter (no CUDA GPU here)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
#: where a kernel's tensors live: the host's memory for the interpreter, else the GPU's
KERNEL_DEVICE = "cpu" if INTERPRETED else "cuda"
_NO_PACKAGE = "needs the triton package (its interpreter runs on the CPU)"


@functools.cache
def kernels_cannot_run() -> str | None:
    """Why the kernels cannot run here, or None where they can."""
    if importlib.util.find_spec("triton") is None:
        return _NO_PACKAGE
    if not INTERPRETED:
        return None
    import torch
    import triton
    import triton.language as tl

    def count_to(out_ptr, n):
        total = 0
        for _ in range(0, n + 1):
            total += 1
        tl.store(out_ptr, total)

    out = torch.zeros(1, dtype=torch.int32)
    try:
        triton.jit(count_to)[(1,)](out, 4)
    except Exception as error:
        return (f"Triton {triton.__version__}'s interpreter cannot take a loop bound that is a "
                f"kernel argument ({type(error).__name__}); 3.7 and later can")
    if int(out) != 5:
        return f"Triton {triton.__version__}'s interpreter counted a loop wrongly"
    return None


#: a test that runs a kernel: compiled on a GPU, interpreted on the CPU
needs_triton = pytest.mark.skipif(kernels_cannot_run() is not None,
                                  reason=kernels_cannot_run() or "")
#: a test that needs only the package: compiling a kernel for a GPU (which needs no GPU), or
#: running one with no loop bound taken from an argument
needs_triton_package = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                          reason=_NO_PACKAGE)
