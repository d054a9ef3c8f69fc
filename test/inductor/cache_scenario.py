"""One compile of a data-dependent program with Inductor's caches on, as a user runs it.

Run as a script (a fresh process: ``python cache_scenario.py SCENARIO DEVICE
[--uuidless-pass]``) or call :func:`compile_and_run` in the current process. A
scenario compiles a program with ``dynamic=True`` in one of these ways:

- ``fx``: ``fx_backend(device)``;
- ``upstream-fx``: ``fx_backend(device, runner="graph")`` with the overlay
  disabled inside it and Inductor's assert flags off (upstream's converter then
  converts the graph, as ``benchmarks/data_dependent.py`` compiles it);
- ``python``: Inductor's Python wrapper (on CPU with Triton kernels run by
  Triton's interpreter, so that the wrappers compile the same kernels);
- ``python-overlay`` and ``python-upstream``: the Python wrapper with the overlay
  enabled or disabled, on :func:`pairs_program`, whose custom op's fake promises
  an even size: the overlay's wrapper checks that promise (``DivideByKey``),
  upstream's does not.

``--uuidless-pass`` first registers, for the device, a custom backend pass
without a uuid. The scenario calls the compiled program on two inputs whose
data-dependent sizes differ and reports as JSON on stdout: whether the results
match eager, the FX graphs recorded and the unbacked symbols they define, what
a call on :data:`ODD_PAIRS` did, and Inductor's and AOTAutograd's cache counters.

The cache directories come from the environment (``TORCHINDUCTOR_CACHE_DIR``,
``TRITON_CACHE_DIR``); the caller makes them fresh.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

SCENARIOS = ("fx", "upstream-fx", "python", "python-overlay", "python-upstream")

#: Inductor's checks that upstream's converter cannot convert, off for ``upstream-fx``.
UPSTREAM_FX_CONFIG = {
    "alignment_asserts": False,
    "size_asserts": False,
    "scalar_asserts": False,
    "nan_asserts": False,
}


def program(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x > 0) * 2 + 1


def inputs(device: str) -> list[torch.Tensor]:
    # 3 and 6 positive entries: the nonzero count (u0) differs between the calls.
    return [
        torch.tensor([1.0, -1.0, 2.0, -2.0, 3.0, -3.0, -4.0, -5.0], device=device),
        torch.tensor([1.0, 2.0, 3.0, -1.0, 4.0, 5.0, 6.0, -2.0], device=device),
    ]


@torch.library.custom_op("cache_scenario::pairs", mutates_args=())
def pairs(x: torch.Tensor) -> torch.Tensor:
    """Each positive entry of ``x`` twice; and, where ``x[0] < -100``, ``x[0]`` once
    more, which breaks the fake's promise of an even size."""
    positive = x[x > 0]
    extra = x[:1][x[:1] < -100]
    return torch.cat([positive, positive, extra])


@pairs.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(2 * torch.library.get_ctx().new_dynamic_size())


def pairs_program(x: torch.Tensor) -> torch.Tensor:
    return pairs(x) * 2


#: An input on which ``pairs`` returns 7 entries though its fake promised 2 * u0:
#: the overlay's wrapper raises (7 is not divisible by 2); upstream's defines u0 = 3
#: and doubles 6 entries (the 7th is left as the op returned it, or dropped,
#: depending on the release's buffer reuse).
ODD_PAIRS = [-200.0, 1.0, 2.0, -1.0, 3.0]


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


@contextlib.contextmanager
def uuidless_pass(device: str) -> Iterator[None]:
    """A custom backend pass without a uuid registered for ``device``, as a user or
    another backend may have done before ``fx_backend``."""
    from torch._inductor.codegen import common
    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    class NoUuid(CustomGraphModulePass):
        def __call__(self, gm: torch.fx.GraphModule) -> None:
            pass

        def uuid(self) -> None:
            return None

    common.init_backend_registration()
    saved = common.custom_backend_passes.get(device)
    common.custom_backend_passes[device] = NoUuid()
    try:
        yield
    finally:
        common.custom_backend_passes[device] = saved


@contextlib.contextmanager
def overlay_state(enabled: bool) -> Iterator[None]:
    """The overlay enabled or disabled inside, and as it was afterwards."""
    import inductor_fx_unbacked as ifx

    before = ifx.is_enabled()
    (ifx.enable if enabled else ifx.disable)()
    try:
        yield
    finally:
        (ifx.enable if before else ifx.disable)()


def compile_and_run(scenario: str, device: str, *, uuidless: bool = False) -> dict[str, Any]:
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; the scenarios are {SCENARIOS}")
    from torch._dynamo.utils import counters
    from torch._inductor import config

    counters.clear()
    torch._dynamo.reset()
    package_loaded_before = "inductor_fx_unbacked" in sys.modules
    graphs: list[torch.fx.GraphModule] = []
    lowered: list[torch.fx.GraphModule] = []
    triton_cache = os.environ.get("TRITON_CACHE_DIR")
    triton_entries = _entries(triton_cache)
    fn = pairs_program if scenario.startswith("python-") else program
    with contextlib.ExitStack() as stack:
        stack.enter_context(caches_on())
        if uuidless:
            stack.enter_context(uuidless_pass(device))
        if scenario in ("fx", "upstream-fx"):
            import inductor_fx_unbacked as ifx
            from inductor_fx_unbacked.runner import lowering

            if scenario == "upstream-fx":
                stack.enter_context(overlay_state(enabled=False))
                stack.enter_context(config.patch(UPSTREAM_FX_CONFIG))
                stack.enter_context(ifx.fx_backend(device, runner="graph"))
                ifx.disable()
            else:
                stack.enter_context(ifx.fx_backend(device))
            graphs = stack.enter_context(ifx.recording_graphs())
            # Which graphs the lowered runner received.
            lower = lowering.lower
            lowering.lower = lambda gm, *a: lowered.append(gm) or lower(gm, *a)
            stack.callback(setattr, lowering, "lower", lower)
        else:
            if scenario != "python":
                stack.enter_context(overlay_state(enabled=scenario == "python-overlay"))
                # Inductor's output size check would catch the broken promise on
                # either side; the divisibility check is the overlay's difference.
                stack.enter_context(config.patch(size_asserts=False))
            if device == "cpu":
                from inductor_fx_unbacked.integration.reference import python_wrapper_reference

                stack.enter_context(python_wrapper_reference(device))
        compiled = torch.compile(fn, dynamic=True, fullgraph=True)
        matches = [torch.equal(compiled(x), fn(x)) for x in inputs(device)]
        odd_pairs = None
        if fn is pairs_program:
            odd_pairs = _outcome(compiled, torch.tensor(ODD_PAIRS, device=device))
    compiled = _compiled_entries(triton_cache, triton_entries)
    return {
        "scenario": scenario,
        "package_loaded_before": package_loaded_before,
        "matches": matches,
        "odd_pairs": odd_pairs,
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
        "new_triton_cache_entries": len(compiled),
        # What they hold (a kernel's binary, or a launcher's), for a failure's message.
        "new_triton_cache_files": sorted(
            f"{entry}/{name}"
            for entry in compiled
            for name in os.listdir(os.path.join(triton_cache, entry))
        ),
        "counters": {
            name: dict(counters[name]) for name in ("inductor", "aot_autograd") if counters[name]
        },
        "ptxas": _ptxas_seen(device),
        "runner_jit_compiles": _runner_jit_compiles(),
    }


def _runner_jit_compiles() -> int:
    """The runner's own kernels that Triton's JIT compiled, or loaded from Triton's
    cache, in this process: none where the runner's store served them."""
    from inductor_fx_unbacked.runner import compaction

    if "inductor_fx_unbacked.runner.compaction_kernels" not in sys.modules:
        return 0
    return sum(
        len(caches[0])
        for kernel, _ in compaction._kernels().values()
        for caches in getattr(kernel, "device_caches", {}).values()
    )


def _ptxas_seen(device: str) -> dict[str, Any] | None:
    """The ptxas Triton's cache keys hold in this process (its version is read once
    per process), for a failure's message: two processes that saw different
    versions give the same kernel different keys."""
    if device != "cuda":
        return None
    from triton.backends.nvidia import compiler

    major, minor = torch.cuda.get_device_capability()
    return {
        "TRITON_PTXAS_PATH": os.environ.get("TRITON_PTXAS_PATH"),
        "version": compiler.get_ptxas_version(10 * major + minor).strip().splitlines()[-1],
    }


def _outcome(compiled: Any, x: torch.Tensor) -> dict[str, Any]:
    """What a call did: ``{"raised": <message>}`` or ``{"returned": <values>}``."""
    try:
        return {"returned": compiled(x).tolist()}
    except RuntimeError as e:
        return {"raised": str(e).strip().splitlines()[0]}


def _entries(directory: str | None) -> set[str]:
    if not directory or not os.path.isdir(directory):
        return set()
    return set(os.listdir(directory))


# Triton's driver builds its helper module (``cuda_utils``, ``hip_utils``) once per
# process, in the cache dir of the moment: a process whose driver started under
# another cache dir (a pytest worker, after earlier tests) leaves none in this one.
_DRIVER_UTILS = re.compile(r"(cuda|hip)_utils\..*\.(so|pyd)")


def _compiled_entries(directory: str | None, before: set[str]) -> set[str]:
    """The cache entries added since ``before`` that hold what a program compiled:
    kernels and their launchers, not the driver's helper module."""
    return {
        entry
        for entry in _entries(directory) - before
        if not all(
            _DRIVER_UTILS.fullmatch(name) for name in os.listdir(os.path.join(directory, entry))
        )
    }


def run_in_new_process(scenario: str, device: str, *, uuidless: bool = False) -> dict[str, Any]:
    """:func:`compile_and_run` in a fresh Python process, with the cache dirs of this
    one and Inductor's caches on (whatever this process's environment forces)."""
    root = Path(__file__).parents[2]
    env = dict(os.environ)
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    env.pop("TORCH_COMPILE_FORCE_DISABLE_CACHES", None)
    # A user's process starts without it (Inductor sets it where it compiles, and a
    # test worker may have): the package must set it itself, early enough.
    env.pop("TRITON_PTXAS_PATH", None)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    command = [sys.executable, __file__, scenario, device]
    if uuidless:
        command.append("--uuidless-pass")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def cache_hits(report: dict[str, Any]) -> int:
    """Entries served by Inductor's FX graph cache and AOTAutograd's cache."""
    inductor = report["counters"].get("inductor", {})
    aot = report["counters"].get("aot_autograd", {})
    return inductor.get("fxgraph_cache_hit", 0) + aot.get("autograd_cache_hit", 0)


def cache_bypasses(report: dict[str, Any]) -> int:
    """Compiles that bypassed Inductor's FX graph cache or AOTAutograd's cache."""
    inductor = report["counters"].get("inductor", {})
    aot = report["counters"].get("aot_autograd", {})
    return inductor.get("fxgraph_cache_bypass", 0) + aot.get("autograd_cache_bypass", 0)


if __name__ == "__main__":
    scenario, device, *options = sys.argv[1:]
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    print(json.dumps(compile_and_run(scenario, device, uuidless="--uuidless-pass" in options)))
