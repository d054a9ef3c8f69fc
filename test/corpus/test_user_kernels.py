# Owner(s): ["module: inductor"]
"""User-written Triton kernels in data-dependent programs, through the FX backend.

Each program of ``user_kernels.py`` runs static and with ``dynamic=True``
against eager on inputs whose data-dependent sizes differ, through the lowered
runner (the default) and ``gm.forward``; each FX graph must launch the user
kernel. On a GPU the Python wrapper is compared too. In the CPU mode the kernels
run in Triton's interpreter; Inductor's Python wrapper has no such mode, so there
the comparison is with eager only.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from programs import fresh_copy
from user_kernels import EAGER_WRAP_TRITON, USER_KERNELS, XFAIL

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked import _compat
from inductor_fx_unbacked.demo.programs import same
from inductor_fx_unbacked.integration.cpu_mode import interpreter_driver

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


#: Whether this torch's ``wrap_triton`` takes an interpreted kernel, by kind.
WRAP_TRITON_TAKES = {
    "kernel": _compat.WRAP_TRITON_TAKES_INTERPRETED,
    "autotuner": _compat.WRAP_TRITON_TAKES_INTERPRETED_AUTOTUNER,
}


def marks(name):
    if XFAIL[name]:
        yield pytest.mark.xfail(strict=True, reason=XFAIL[name])
    if DEVICE == "cpu" and _compat.USER_KERNEL_OPTIONS_NEED_A_DEVICE_BACKEND:
        yield pytest.mark.skip(
            reason=f"torch {torch.__version__} checks a user kernel's launch options against "
            "the device's Triton backend, which Triton has none of for CPU; covered on the GPU"
        )
    kind = EAGER_WRAP_TRITON[name]
    if DEVICE == "cpu" and kind and not WRAP_TRITON_TAKES[kind]:
        yield pytest.mark.skip(
            reason=f"torch {torch.__version__}'s wrap_triton refuses an interpreted {kind}, "
            "in eager too; covered on the GPU"
        )


def params():
    return [pytest.param(p, marks=list(marks(p.name)), id=p.name) for p in USER_KERNELS]


def driver_for_eager():
    """Eager autotuning benchmarks through Triton's active driver, which a CPU-only
    machine has only inside the CPU mode."""
    if DEVICE == "cpu":
        return interpreter_driver()
    return contextlib.nullcontext()


def kernel_names(graphs):
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    names = set()
    for gm in graphs:
        for node in gm.graph.nodes:
            if node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation:
                kernel = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])
                names.add(getattr(kernel, "__name__", None) or kernel.fn.__name__)
    return names


@pytest.mark.parametrize("runner", ["lowered", "graph"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("program", params())
def test_user_kernel_matches_eager(program, dynamic, runner):
    inputs = program.inputs(DEVICE)
    with driver_for_eager():
        expected = [program.fn(*args) for args in inputs]
    if DEVICE == "cuda":
        torch._dynamo.reset()
        fn = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=dynamic)
        python = [fn(*args) for args in inputs]
    else:
        python = expected
    torch._dynamo.reset()
    with ifx.fx_backend(DEVICE, runner=runner), ifx.recording_graphs() as graphs:
        fn = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=dynamic)
        actual = [fn(*args) for args in inputs]
    # First, so that a kernel dropped from the graph is named as such, not as wrong values.
    user_kernel_names = {
        name for name in kernel_names(graphs) if not name.startswith(("triton_", "Runner"))
    }
    assert user_kernel_names, f"no user kernel in the FX graphs: {kernel_names(graphs)}"
    for args, got, want, from_python in zip(inputs, actual, expected, python):
        assert same(got, want, rtol=1e-4, atol=1e-5), (args, got, want)
        assert same(got, from_python, rtol=1e-4, atol=1e-5), (args, got, from_python)
