"""conftest.py for running upstream's ``test_fxir_backend.py`` with the overlay.

``benchmarks/upstream_suite.py`` copies this file, as ``conftest.py``, next to
the fetched upstream test file. It is our code; upstream's file is never changed
(the default-config run uses a copy whose ``test_config`` is emptied).

Environment:

- ``FXU_OVERLAY=1`` enables the overlay once, before any test (``0``: upstream
  alone, the baseline).
- ``FXU_RECORD=<path>`` appends one JSON line per ``FxConverter.generate`` call:
  the test, the compile id, forward or backward, the thread, the Triton kernels
  in the graph it returned, and the Inductor settings that change how matrix
  multiplications are lowered. Upstream's tests count kernels over the graphs
  ``generate`` returns, so these lines say whether a wrong count came from a
  graph generated twice or from a graph with other kernels.
- Every test runs with ``shape_padding=False``, in every run (the baseline too):
  see ``_no_shape_padding``.
- ``FXU_CPU=1`` runs the GPU-only file on CPU through Triton's interpreter
  (``GPU_TYPE`` becomes ``"cpu"``, and the FX codegen upstream registers becomes
  this package's interpreter codegen with the ``"graph"`` runner). For checking
  the harness without a GPU; several tests cannot pass on CPU.
"""

from __future__ import annotations

import functools
import json
import os
import threading

import pytest

CPU = os.environ.get("FXU_CPU") == "1"
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

if CPU:
    import torch.testing._internal.inductor_utils as inductor_utils
    import torch.testing._internal.triton_utils as triton_utils

    inductor_utils.GPU_TYPE = "cpu"
    inductor_utils.HAS_GPU = True
    inductor_utils.requires_gpu = lambda *args, **kwargs: lambda fn: fn
    if not hasattr(triton_utils, "add_kernel_2d_autotuned"):
        # Defined only where a GPU is; one AOT test uses it and fails on CPU.
        triton_utils.add_kernel_2d_autotuned = None

from torch._inductor import config  # noqa: E402
from torch._inductor.codegen import common  # noqa: E402
from torch._inductor.codegen.wrapper_fxir import FxConverter, WrapperFxCodegen  # noqa: E402

import inductor_fx_unbacked  # noqa: E402

if os.environ.get("FXU_OVERLAY", "1") == "1":
    inductor_fx_unbacked.enable()

_current_test = {"id": None}
_RECORD = os.environ.get("FXU_RECORD")


def _settings() -> dict:
    """The settings that decide how a matrix multiplication is lowered."""
    names = (
        "max_autotune",
        "max_autotune_gemm",
        "coordinate_descent_tuning",
        "shape_padding",
        "deterministic",
        "fx_graph_cache",
        "compile_threads",
        "triton.autotune_at_compile_time",
        "triton.native_matmul",
    )
    values = config.get_config_copy()
    settings = {name: values.get(name) for name in names if name in values}
    settings["deterministic_algorithms"] = torch.are_deterministic_algorithms_enabled()
    return settings


def _extern_calls(gm: torch.fx.GraphModule) -> list[str]:
    return [
        str(node.target)
        for node in gm.graph.nodes
        if node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and not str(node.target).startswith(("aten.sym_", "aten.empty", "aten.as_strided"))
    ]


def _kernel_names(gm: torch.fx.GraphModule) -> list[str]:
    from torch._higher_order_ops.triton_kernel_wrap import (
        kernel_side_table,
        triton_kernel_wrapper_mutation,
    )

    names = []
    for node in gm.graph.find_nodes(op="call_function", target=triton_kernel_wrapper_mutation):
        try:
            kernel = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])
            names.append(getattr(kernel, "__name__", None) or getattr(kernel.fn, "__name__", "?"))
        except Exception as e:  # noqa: BLE001 - a record, not a check
            names.append(f"<{type(e).__name__}>")
    return names


def _recording(generate):
    @functools.wraps(generate)
    def recorded(self):
        gm = generate(self)
        from torch._guards import CompileContext
        from torch._inductor.virtualized import V

        graph = V.graph if V.graph is not None else None
        compile_id = CompileContext.current_compile_id()
        entry = {
            "test": _current_test["id"],
            "compile_id": str(compile_id) if compile_id is not None else None,
            "backward": bool(getattr(graph, "is_backward", False)),
            "inference": bool(getattr(graph, "is_inference", False)),
            "subgraph": bool(getattr(self, "is_subgraph", False)),
            "thread": threading.current_thread().name,
            "gm_id": id(gm),
            "kernels": _kernel_names(gm),
            "extern": _extern_calls(gm),
            "settings": _settings(),
        }
        with open(_RECORD, "a") as f:
            f.write(json.dumps(entry) + "\n")
        return gm

    return recorded


if _RECORD:
    # Below the tests' own patch (they read FxConverter.generate when they patch),
    # above the overlay's wrapper: one record per call of generate.
    FxConverter.generate = _recording(vars(FxConverter)["generate"])


if CPU:
    from inductor_fx_unbacked.integration.backend import InterpreterFxWrapperCodegen
    from inductor_fx_unbacked.integration.cpu_mode import interpreter_driver, require_interpreter

    require_interpreter()

    class CpuFxWrapperCodegen(InterpreterFxWrapperCodegen):
        runner = "graph"

    _register = common.register_backend_for_device

    def _register_for_cpu(device, scheduling, wrapper, *args, **kwargs):
        if device == "cpu" and wrapper is WrapperFxCodegen:
            wrapper = CpuFxWrapperCodegen
        return _register(device, scheduling, wrapper, *args, **kwargs)

    common.register_backend_for_device = _register_for_cpu

    @pytest.fixture(scope="session", autouse=True)
    def _interpreter():
        # The fx_wrapper slot too, for the AOT tests' aot_compile(fx_wrapper=True).
        common.init_backend_registration()
        previous = common.device_codegens["cpu"]
        common.register_backend_for_device(
            "cpu",
            previous.scheduling,
            CpuFxWrapperCodegen,
            previous.cpp_wrapper_codegen,
            CpuFxWrapperCodegen,
        )
        with config.patch(cpu_backend="triton"), interpreter_driver():
            yield
        common.device_codegens["cpu"] = previous


@pytest.fixture(autouse=True)
def _no_shape_padding():
    """Every run (the baseline too) without shape padding: pad_mm benchmarks at compile
    time, and where a small mm comes out faster padded (on an H200, whose FLOPS
    Inductor misreads, every small mm is benchmarked; under load the result is
    noise), the graph gets two ``constant_pad_nd`` kernels more than the counts
    that ``test_backward`` and ``test_extern`` assert."""
    with config.patch(shape_padding=False):
        yield


@pytest.fixture(autouse=True)
def _name_the_test(request):
    _current_test["id"] = request.node.nodeid
    yield
    _current_test["id"] = None


_RESULTS = os.environ.get("FXU_RESULTS")


def pytest_runtest_logreport(report):
    """One JSON line per test phase, written as it ends, so that a run cut short
    by its time limit still reports the tests it finished."""
    if not _RESULTS or (report.when != "call" and report.outcome == "passed"):
        return
    message = ""
    if report.outcome != "passed":
        longrepr = report.longrepr
        if isinstance(longrepr, tuple):  # a skip: (file, line, reason)
            message = str(longrepr[-1])
        else:
            message = getattr(longrepr, "reprcrash", None) and longrepr.reprcrash.message
            message = message or str(longrepr).strip().splitlines()[-1:][0]
    entry = {"id": report.nodeid, "when": report.when, "outcome": report.outcome}
    entry["message"] = " ".join(str(message).split())[:300]
    with open(_RESULTS, "a") as f:
        f.write(json.dumps(entry) + "\n")
