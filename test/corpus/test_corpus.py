# Owner(s): ["module: inductor"]
"""The differential corpus: every program through the FX backend, against eager
and against Inductor's Python wrapper.

Each program of ``programs.py`` runs static and with ``dynamic=True`` on every
input (data-dependent sizes differ between them), and on the AOT path
(``aot_compile(fx_wrapper=True)``) where ``torch.export`` accepts it. A program
that the Python wrapper cannot compile either is Inductor's limitation and is an
expected failure only where the program declares that limit
(``programs.InductorLimit``), the FX path fails with it and Inductor's own
wrapper fails too; the FX path's own errors always fail the test, and where only
the reference fails, the FX path is still checked against eager and the expected
failure names the reference. Every unbacked symbol the converter defines must be
defined by a node tagged ``meta["unbacked_symbol"]``.

The same compile is stored and restored (``check_stored_artifacts``) as a warm
start restores it from Inductor's caches; with the caches on, Inductor pickles
what it compiled, and nothing of it may fail to pickle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any

import pytest
import tiers
import torch
from programs import CORPUS, expect_inductor_limit, fresh_copy, one_line, run
from torch._dynamo.utils import counters
from torch._inductor.codegen.wrapper_fxir import FxConverter

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked import runner
from inductor_fx_unbacked.artifact import store
from inductor_fx_unbacked.demo.programs import same
from inductor_fx_unbacked.integration.reference import python_wrapper_reference

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
UNBACKED = re.compile(r"^(u|zuf|zub)\d+$")


def results(program, fn, inputs):
    return [run(program, fn, args) for args in inputs]


@contextlib.contextmanager
def recording_definitions():
    """Every (symbol, defining node) the FX converter ends up with, per graph."""
    definitions: list[tuple[str, torch.fx.Node]] = []
    generate = FxConverter.generate

    def recording(self):
        gm = generate(self)
        for expr, proxy in self.expr_to_proxy.items():
            if UNBACKED.match(str(expr)) and proxy.node.op != "placeholder":
                definitions.append((str(expr), proxy.node))
        return gm

    FxConverter.generate = recording
    try:
        yield definitions
    finally:
        FxConverter.generate = generate


@dataclasses.dataclass
class BuiltRunner:
    """A callable that a runner built for a graph, and the arguments of its first call."""

    gm: torch.fx.GraphModule
    runner: str
    run: Callable[..., Any]
    args: list[Any] | None = None


@contextlib.contextmanager
def recording_runners():
    """Every callable that ``runner.compile_graph`` builds for the FX backend's graphs,
    with a copy of the arguments of its first call."""
    built: list[BuiltRunner] = []
    compile_graph = runner.compile_graph

    def recording(gm, runner_name, **options):
        record = BuiltRunner(gm, runner_name, compile_graph(gm, runner_name, **options))
        built.append(record)

        @functools.wraps(record.run)
        def run(*args):
            if record.args is None:
                record.args = copies(args)
            return record.run(*args)

        return run

    runner.compile_graph = recording
    try:
        yield built
    finally:
        runner.compile_graph = compile_graph


def copies(args):
    """Copies of the tensors among ``args``, with their strides."""
    return [
        torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a)
        if isinstance(a, torch.Tensor)
        else a
        for a in args
    ]


def one_call(run, args):
    """``run``'s result on copies of ``args``, and on CUDA the peak memory the call
    allocated beyond what was allocated before it."""
    args = copies(args)
    if DEVICE != "cuda":
        return run(*args), None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = run(*args)
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() - before


def check_stored_artifacts(built: list[BuiltRunner]) -> None:
    """Each graph compiled and run, stored and restored as a warm start restores it
    for no one but the runner (``integration/caches.load_artifact``: no fake
    values): the same graph and straight-line code, the same results and, on CUDA,
    the same peak memory."""
    called = [record for record in built if record.args is not None]
    assert called, "no graph of the FX backend was called"
    for record in called:
        loaded = store.loads(store.dumps(record.gm, record.runner), with_values=False)
        assert loaded.gm.code == record.gm.code
        warm = runner.compile_graph(loaded.gm, loaded.runner)
        assert warm.source == record.run.source
        cold_result, cold_peak = one_call(record.run, record.args)
        one_call(warm, record.args)  # a first call may tune
        warm_result, warm_peak = one_call(warm, record.args)
        assert same(warm_result, cold_result), record.gm.code
        assert warm_peak == cold_peak


def python_wrapper(program, inputs, dynamic):
    """The Python wrapper's results, or its error; on CPU with the CPU mode's
    Triton kernels, so that only the wrapper differs."""
    torch._dynamo.reset()
    fn = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=dynamic)
    try:
        with python_wrapper_reference(DEVICE):
            return results(program, fn, inputs)
    except Exception as e:  # noqa: BLE001 - the reference's own failure, reported by name
        return e


@pytest.mark.parametrize(
    "dynamic",
    [False, True],
    ids=["static", "dynamic"],
)
@pytest.mark.parametrize("program", tiers.programs(CORPUS))
def test_fx_backend_matches_eager_and_the_python_wrapper(program, dynamic):
    inputs = program.inputs(DEVICE)
    expected = results(program, program.fn, inputs)
    python = python_wrapper(program, inputs, dynamic)
    python_error = python if isinstance(python, Exception) else None
    torch._dynamo.reset()
    before = cache_counters()
    try:
        with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
            with recording_definitions() as definitions, recording_runners() as built:
                fn = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=dynamic)
                actual = results(program, fn, inputs)
    except Exception as fx_error:
        expect_inductor_limit(program, "the FX path", fx_error, python_error)
        raise
    assert graphs, "nothing was compiled through the FX backend"
    # Compiled, not served: no earlier compile in this test's cache dir is the FX backend's.
    new = {name: count - before.get(name, 0) for name, count in cache_counters().items()}
    assert new.get("fxgraph_cache_hit", 0) == new.get("autograd_cache_hit", 0) == 0, new
    assert new.get("fxgraph_cache_pickle_error", 0) == 0, "Inductor could not pickle a graph"
    for args, got, want in zip(inputs, actual, expected):
        assert same(got, want, rtol=1e-4, atol=1e-5), (args, got, want)
    for symbol, node in definitions:
        assert str(node.meta.get("unbacked_symbol")) == symbol, node.format_node()
    check_stored_artifacts(built)
    if python_error is not None:
        pytest.xfail(
            "the FX path matches eager; the reference, Inductor's Python wrapper, fails: "
            f"{one_line(python_error)}"
        )
    for args, got, from_python in zip(inputs, actual, python):
        assert same(got, from_python, rtol=1e-4, atol=1e-5), (args, got, from_python)


def cache_counters():
    return {**counters["inductor"], **counters["aot_autograd"]}


def as_module(fn):
    class Program(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)

    return Program()


def inductor_aot_error(module, example_inputs):
    """The error of Inductor's own AOT path (the C++ wrapper; on CPU with C++
    kernels, outside the CPU mode), or None where it compiles."""
    torch._dynamo.reset()
    try:
        # Inductor's AOT build writes the device's description into the config's
        # metadata dict in place; give it a dict of its own, not the process's.
        with torch._inductor.config.patch({"aot_inductor.metadata": {}}):
            torch._inductor.aot_compile(module, example_inputs)
    except Exception as e:  # noqa: BLE001 - the reference's own failure, reported by name
        return e
    return None


@pytest.mark.parametrize("program", tiers.programs(p for p in CORPUS if not p.backward))
def test_aot_path(program):
    inputs = program.inputs(DEVICE)
    first = inputs[0]
    module = as_module(program.fn)
    try:
        with torch.no_grad():
            exported = torch.export.export(module, first, strict=False)
    except Exception as e:  # noqa: BLE001 - export's refusal is not the FX backend's
        pytest.skip(f"torch.export rejects it: {one_line(e)}")
    try:
        with ifx.fx_backend(DEVICE), ifx.recording_graphs():
            gm = torch._inductor.aot_compile(exported.module(), first, options={"fx_wrapper": True})
    except Exception as fx_error:
        # Only where the program declares a limit. On a GPU the reference is Inductor's
        # own AOT path; on CPU its C++ build takes 20 to 40 s (gcc), so
        # there the Python wrapper shows the same limit of Inductor's wrapper codegen.
        if program.inductor_limit is not None:
            if DEVICE == "cpu":
                reference = python_wrapper(program, [first], dynamic=False)
                reference_error = reference if isinstance(reference, Exception) else None
            else:
                reference_error = inductor_aot_error(exported.module(), first)
            expect_inductor_limit(program, "the FX path (AOT)", fx_error, reference_error)
        raise
    # The exported program is specialized to the first input's shapes; other
    # inputs of the same shapes differ in their data-dependent sizes.
    shapes = [tuple(a.shape) for a in first if isinstance(a, torch.Tensor)]
    for args in inputs:
        if [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)] != shapes:
            continue
        # The AOT module returns a list where the program returns a tuple.
        got = torch.utils._pytree.tree_leaves(gm(*args))
        want = torch.utils._pytree.tree_leaves(program.fn(*args))
        assert same(got, want, rtol=1e-4, atol=1e-5), args
