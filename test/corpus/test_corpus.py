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
"""

from __future__ import annotations

import contextlib
import re

import pytest
import torch
from programs import CORPUS, expect_inductor_limit, fresh_copy, one_line, run
from torch._inductor.codegen.wrapper_fxir import FxConverter

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.programs import same
from inductor_fx_unbacked.integration.cpu_mode import python_wrapper_reference

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
    [pytest.param(False, marks=pytest.mark.corpus_static, id="static"), True],
    ids=["static", "dynamic"],
)
@pytest.mark.parametrize("program", CORPUS, ids=[p.name for p in CORPUS])
def test_fx_backend_matches_eager_and_the_python_wrapper(program, dynamic):
    inputs = program.inputs(DEVICE)
    expected = results(program, program.fn, inputs)
    python = python_wrapper(program, inputs, dynamic)
    python_error = python if isinstance(python, Exception) else None
    torch._dynamo.reset()
    try:
        with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
            with recording_definitions() as definitions:
                fn = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=dynamic)
                actual = results(program, fn, inputs)
    except Exception as fx_error:
        expect_inductor_limit(program, "the FX path", fx_error, python_error)
        raise
    assert graphs, "nothing was compiled through the FX backend"
    for args, got, want in zip(inputs, actual, expected):
        assert same(got, want, rtol=1e-4, atol=1e-5), (args, got, want)
    for symbol, node in definitions:
        assert str(node.meta.get("unbacked_symbol")) == symbol, node.format_node()
    if python_error is not None:
        pytest.xfail(
            "the FX path matches eager; the reference, Inductor's Python wrapper, fails: "
            f"{one_line(python_error)}"
        )
    for args, got, from_python in zip(inputs, actual, python):
        assert same(got, from_python, rtol=1e-4, atol=1e-5), (args, got, from_python)


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
        torch._inductor.aot_compile(module, example_inputs)
    except Exception as e:  # noqa: BLE001 - the reference's own failure, reported by name
        return e
    return None


@pytest.mark.parametrize("program", [p for p in CORPUS if not p.backward], ids=lambda p: p.name)
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
        # Only where the program declares a limit: Inductor's AOT path compiles C++.
        if program.inductor_limit is not None:
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
