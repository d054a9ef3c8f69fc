"""One compile of a data-dependent program with Inductor's caches on, as a user runs it.

Run as a script (a fresh process: ``python cache_scenario.py BACKEND DEVICE``) or
call :func:`compile_and_run` in the current process. It compiles
``nonzero(x > 0) * 2 + 1`` with ``dynamic=True``, either with the FX backend
(``fx``) or with Inductor's Python wrapper (``python``; on CPU with Triton
kernels run by Triton's interpreter, so that both backends compile the same
kernels and only the wrapper differs), calls it on two inputs whose nonzero
counts differ, and reports what happened as JSON on stdout: the FX graphs
recorded, the unbacked symbols they define, whether the results match eager,
and Inductor's and AOTAutograd's cache counters.

The cache directories come from the environment (``TORCHINDUCTOR_CACHE_DIR``,
``TRITON_CACHE_DIR``); the caller makes them fresh.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

import torch


def program(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x > 0) * 2 + 1


def inputs(device: str) -> list[torch.Tensor]:
    # 3 and 6 positive entries: the nonzero count (u0) differs between the calls.
    return [
        torch.tensor([1.0, -1.0, 2.0, -2.0, 3.0, -3.0, -4.0, -5.0], device=device),
        torch.tensor([1.0, 2.0, 3.0, -1.0, 4.0, 5.0, 6.0, -2.0], device=device),
    ]


def caches_on() -> contextlib.ExitStack:
    """Inductor's FX graph cache and AOTAutograd's cache on, whatever the environment says."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config

    stack = contextlib.ExitStack()
    # Inductor's force_disable_caches aliases this one (it is read from the
    # TORCHINDUCTOR_FORCE_DISABLE_CACHES environment variable).
    stack.enter_context(torch.compiler.config.patch(force_disable_caches=False))
    stack.enter_context(config.patch(fx_graph_cache=True))
    stack.enter_context(functorch_config.patch(enable_autograd_cache=True))
    return stack


def compile_and_run(backend: str, device: str) -> dict[str, Any]:
    from torch._dynamo.utils import counters

    counters.clear()
    torch._dynamo.reset()
    package_loaded_before = "inductor_fx_unbacked" in sys.modules
    graphs: list[torch.fx.GraphModule] = []
    lowered: list[torch.fx.GraphModule] = []
    triton_cache = os.environ.get("TRITON_CACHE_DIR")
    triton_entries = _entries(triton_cache)
    with contextlib.ExitStack() as stack:
        stack.enter_context(caches_on())
        if backend == "fx":
            import inductor_fx_unbacked as ifx
            from inductor_fx_unbacked.runner import lowering

            stack.enter_context(ifx.fx_backend(device))
            graphs = stack.enter_context(ifx.recording_graphs())
            # Which graphs the lowered runner received.
            lower = lowering.lower
            lowering.lower = lambda gm, *a: lowered.append(gm) or lower(gm, *a)
            stack.callback(setattr, lowering, "lower", lower)
        elif device == "cpu":
            from inductor_fx_unbacked.integration.cpu_mode import python_wrapper_reference

            stack.enter_context(python_wrapper_reference(device))
        compiled = torch.compile(program, dynamic=True, fullgraph=True)
        matches = [torch.equal(compiled(x), program(x)) for x in inputs(device)]
    return {
        "backend": backend,
        "package_loaded_before": package_loaded_before,
        "matches": matches,
        "graphs": len(graphs),
        "unbacked_definitions": [
            str(node.meta["unbacked_symbol"])
            for gm in graphs
            for node in gm.graph.nodes
            if "unbacked_symbol" in node.meta
        ],
        "meta_val_missing": [
            node.name
            for gm in graphs
            for node in gm.graph.nodes
            if node.op != "output" and "val" not in node.meta
        ],
        "lowered": len(lowered),
        "new_triton_cache_entries": len(_entries(triton_cache) - triton_entries),
        "counters": {
            name: dict(counters[name]) for name in ("inductor", "aot_autograd") if counters[name]
        },
    }


def _entries(directory: str | None) -> set[str]:
    if not directory or not os.path.isdir(directory):
        return set()
    return set(os.listdir(directory))


if __name__ == "__main__":
    backend, device = sys.argv[1:3]
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    print(json.dumps(compile_and_run(backend, device)))
