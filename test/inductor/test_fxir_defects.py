# Owner(s): ["module: inductor"]
"""Issue 13's defects one setting away from the default mode, each on a real program.

Frozen constants under the lowered runner, kernel launchers that outlive a
Dynamo reset, user Triton kernels with a ``tl.constexpr`` before a runtime
argument, the buffer a size check reads, upstream's own line type for symbol
definitions, and NaN checks of multi-kernels.
"""

import operator
import types
import unittest
from unittest import mock

import torch
import triton
import triton.language as tl
from test_fxir_backend import FxirTestCase, four_per_positive, kernel_calls, symbol_definitions
from torch._higher_order_ops.triton_kernel_wrap import (
    kernel_side_table,
    triton_kernel_wrapper_mutation,
)
from torch._inductor import config
from torch._inductor.codegen import wrapper as upstream_wrapper
from torch._inductor.codegen.common import TensorArg
from torch._inductor.codegen.multi_kernel import MultiKernel
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen
from torch._inductor.virtualized import V
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.codegen import wrapper as ours
from inductor_fx_unbacked.codegen.fx_triton import tuner_for_kernel
from inductor_fx_unbacked.runner import lower

requires_cuda = unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")


class FrozenLinear(torch.nn.Module):
    """Rows with a positive first entry (data-dependent count), through a linear layer."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.randn(8, 8, generator=g))
        self.bias = torch.nn.Parameter(torch.randn(8, generator=g))

    def forward(self, x):
        rows = x[x[:, 0] > 0]
        return torch.nn.functional.linear(rows, self.weight, self.bias).sin()


def rows_with_positive_first(n_positive, device):
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(n_positive)).abs() + 0.1
    x[n_positive:, 0] *= -1
    return x.to(device)


#: Freezing, without the CPU's mkldnn weight packing, whose pass guards on an
#: unbacked size on torch 2.10 (GuardOnDataDependentSymNode in pack_linear_weight).
FREEZING = {"freezing": True, "cpp.weight_prepack": False}


@instantiate_parametrized_tests
class FrozenConstantsTest(FxirTestCase):
    @parametrize("runner", ["graph", "lowered"])
    def test_freezing_with_a_data_dependent_program(self, runner):
        model = FrozenLinear().to(self.device).eval()
        with (
            torch.no_grad(),
            config.patch(FREEZING),
            ifx.fx_backend(self.device, runner=runner),
            ifx.recording_graphs() as graphs,
        ):
            compiled = torch.compile(model, fullgraph=True)
            for n_positive in (5, 11):
                x = rows_with_positive_first(n_positive, self.device)
                result = compiled(x)
                self.assertEqual(result.shape[0], n_positive)
                self.assertEqual(result, model(x))
        # The frozen weight is a constant of the FX graph, read by get_attr.
        constants = [n.target for gm in graphs for n in gm.graph.nodes if n.op == "get_attr"]
        self.assertTrue(any(name.startswith("_frozen_param") for name in constants), constants)

    def test_lowered_module_reads_the_identical_constants(self):
        model = FrozenLinear().to(self.device).eval()
        x = rows_with_positive_first(6, self.device)
        with torch.no_grad(), config.patch(FREEZING):
            captured = ifx.capture_fx_graphs(model, x, device=self.device, fullgraph=True)
        gm = captured.graphs[-1]
        lowered = lower(gm)
        names = [n.target for n in lowered.graph.nodes if n.op == "get_attr"]
        self.assertGreater(len(names), 0)
        for name in names:
            self.assertIs(getattr(lowered, name), getattr(gm, name))


@triton.jit
def add_two_kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    """A kernel with the argument names of an Inductor pointwise kernel."""
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offsets < xnumel
    tl.store(out_ptr0 + offsets, tl.load(in_ptr0 + offsets, mask=mask) + 2.0, mask=mask)


def positives_sin(x):
    return x[x > 0].sin()


def positives_cos(x):
    return x[x > 0].cos()


def hand_written_kernel_graph(kernel_idx, xblock):
    """``out = in + 2`` as one ``triton_kernel_wrapper_mutation`` node: what another
    producer of FX graphs (or upstream's converter) hands the runner."""
    graph = torch.fx.Graph()
    x, out, n = graph.placeholder("x"), graph.placeholder("out"), graph.placeholder("n")
    grid = graph.call_function(
        operator.floordiv, (graph.call_function(operator.add, (n, xblock - 1)), xblock)
    )
    graph.call_function(
        triton_kernel_wrapper_mutation,
        kwargs={
            "kernel_idx": kernel_idx,
            "constant_args_idx": kernel_side_table.add_constant_args({"XBLOCK": xblock}),
            "grid": [(grid, 1, 1)],
            "tma_descriptor_metadata": {},
            "kwargs": {"in_ptr0": x, "out_ptr0": out, "xnumel": n},
        },
    )
    graph.output(out)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def kernel_indices(graphs: list[torch.fx.GraphModule]) -> list[int]:
    return [node.kwargs["kernel_idx"] for node in kernel_calls(graphs)]


def reset_dynamo_and_kernel_table() -> None:
    """``torch._dynamo.reset()``, which empties the kernel side table on torch 2.13+;
    on earlier releases the table is emptied here, as users' resets and
    ``torch._dynamo.reset()`` in later releases do, so that indices are reused."""
    torch._dynamo.reset()
    kernel_side_table.reset_table()


class StaleLauncherTest(FxirTestCase):
    """``torch._dynamo.reset()`` empties the kernel side table and hands its indices
    out again; the runner must never launch one kernel with another's launcher."""

    def compiled_kernel_indices(self, fn, inputs):
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            compiled = torch.compile(fn, fullgraph=True)
            for (x,) in inputs:
                self.assertEqual(compiled(x), fn(x))
        return [node.kwargs["kernel_idx"] for node in kernel_calls(graphs)]

    def inputs(self, *counts):
        return [(self.signed(12, n),) for n in counts]

    def test_each_program_runs_its_own_kernel_across_a_reset(self):
        reset_dynamo_and_kernel_table()
        first_idx = min(self.compiled_kernel_indices(positives_sin, self.inputs(3, 7)))
        first_tuner = tuner_for_kernel(first_idx)
        self.assertIsNotNone(first_tuner)

        reset_dynamo_and_kernel_table()
        # Another kernel, with the same argument names, takes the same index.
        kernel_idx = kernel_side_table.add_kernel(add_two_kernel)
        self.assertEqual(kernel_idx, first_idx)
        self.assertIsNone(tuner_for_kernel(kernel_idx))
        lowered = lower(hand_written_kernel_graph(kernel_idx, xblock=16))
        for n in (5, 37):
            x = torch.randn(n, device=self.device)
            out = lowered(x, torch.empty_like(x), n)
            self.assertEqual(out, x + 2)

        # A program compiled after the reset gets its own kernel's tuner.
        reset_dynamo_and_kernel_table()
        second_idx = min(self.compiled_kernel_indices(positives_cos, self.inputs(4, 9)))
        self.assertEqual(second_idx, first_idx)
        second_tuner = tuner_for_kernel(second_idx)
        self.assertIsNotNone(second_tuner)
        self.assertIsNot(second_tuner, first_tuner)
        self.assertIs(second_tuner.fn, kernel_side_table.get_kernel(second_idx))

    def test_registry_forgets_kernels_that_left_the_side_table(self):
        from inductor_fx_unbacked.codegen import fx_triton

        self.compiled_kernel_indices(positives_sin, self.inputs(3))
        torch._dynamo.reset()
        self.compiled_kernel_indices(positives_cos, self.inputs(3))
        live = {id(k) for k in kernel_side_table.id_to_kernel.values()}
        self.assertLessEqual(set(fx_triton._tuners), live)


@triton.jit
def scale_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, n, SCALE: tl.constexpr):
    """A user kernel whose constexprs stand before and after a runtime argument."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * SCALE, mask=mask)


def scaled_positives(x):
    y = x[x > 0]
    out = torch.empty_like(y)
    n = y.numel()
    torch.library.wrap_triton(scale_kernel)[(triton.cdiv(n, 32),)](y, out, 32, n, 3.0)
    return out


class UserKernelConstexprTest(FxirTestCase):
    @requires_cuda
    def test_constexpr_before_a_runtime_argument(self):
        graphs = self.run_fx(scaled_positives, [(self.signed(64, n),) for n in (5, 40)])
        # One launch of the user kernel (Inductor's own kernels for the mask aside).
        names = [
            getattr(getattr(kernel, "fn", kernel), "__name__", "")
            for kernel in map(kernel_side_table.get_kernel, kernel_indices(graphs))
        ]
        self.assertEqual(len([name for name in names if name.startswith("scale_kernel")]), 1)


def recording_wrapper_lines():
    """Every line written to a wrapper inside, as written (and still written)."""
    lines = []
    original = PythonWrapperCodegen.writeline

    def writeline(self, line):
        lines.append(line)
        return original(self, line)

    return lines, mock.patch.object(PythonWrapperCodegen, "writeline", writeline)


class SizeCheckBufferTest(FxirTestCase):
    def test_size_check_reads_the_buffer_upstream_checks(self):
        """The FX check names the buffer that upstream's own line (2.13+) names."""

        def fn(x):
            return four_per_positive(x) + 1

        lines, recording = recording_wrapper_lines()
        with recording:
            self.run_fx(fn, [(self.signed(8, 3),), (self.signed(8, 6),)])
        checks = [line for line in lines if isinstance(line, ours.SizeStrideAssertLine)]
        self.assertGreater(len(checks), 0)
        for check in checks:
            upstream_name = getattr(check.upstream_lines[0], "name", None)
            if upstream_name is not None:  # torch 2.13+
                self.assertEqual(check.name, upstream_name)


class UpstreamLineTypeTest(FxirTestCase):
    def test_symbol_definitions_are_upstreams_line_type(self):
        lines, recording = recording_wrapper_lines()
        with recording:
            graphs = self.run_fx(
                lambda x: x.nonzero().float() + 1, [(self.signed(8, 3),), (self.signed(8, 5),)]
            )
        self.assertGreater(len(symbol_definitions(graphs)), 0)
        defs = [line for line in lines if isinstance(line, ours.UnbackedSymbolDefsLine)]
        self.assertGreater(len(defs), 0)
        for line in defs:
            self.assertIsInstance(line, upstream_wrapper.UnbackedSymbolDefsLine)


class MultiKernelNanCheckTest(FxirTestCase):
    def test_multi_kernel_nan_check_is_a_line_for_the_fx_wrapper(self):
        """Every tensor argument of the sub-kernels is checked once, as wrapper IR.

        Upstream's FX converter cannot call a multi-kernel at all (``KeyError:
        'multi_kernel_0'``), so this checks what the method writes, on an FX
        wrapper and on the Python wrapper.
        """

        def sub_kernel(args):
            signatures = [TensorArg(a, a, torch.float32) if a != "xnumel" else None for a in args]
            argdefs = (list(args), list(args), signatures, [])
            return types.SimpleNamespace(args=types.SimpleNamespace(python_argdefs=lambda: argdefs))

        multi = object.__new__(MultiKernel)
        multi.kernels = [
            sub_kernel(["in_ptr0", "out_ptr0", "xnumel"]),
            sub_kernel(["in_ptr0", "out_ptr0", "xnumel"]),
        ]
        for wrapper_class in (WrapperFxCodegen, PythonWrapperCodegen):
            wrapper = object.__new__(wrapper_class)
            graph = types.SimpleNamespace(wrapper_code=wrapper, cpp_wrapper=False)
            with (
                ifx.fx_backend(self.device),
                V.set_graph_handler(graph),
                ours.captured_lines(wrapper) as lines,
            ):
                multi.codegen_nan_check()
            if wrapper_class is WrapperFxCodegen:
                self.assertEqual(len(lines), 1)
                self.assertIsInstance(lines[0], ours.NanCheckLine)
                self.assertEqual(lines[0].names, ["in_ptr0", "out_ptr0"])
            else:
                self.assertTrue(all(isinstance(line, str) for line in lines))
                self.assertEqual(len(lines), 4)


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
