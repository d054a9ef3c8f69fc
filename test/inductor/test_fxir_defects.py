# Owner(s): ["module: inductor"]
"""Issue 13's defects one setting away from the default mode, each on a real program.

Frozen constants under the lowered runner, user Triton kernels with a
``tl.constexpr`` before a runtime argument, the buffer a size check reads,
upstream's own line type for symbol definitions, and NaN checks of multi-kernels.
"""

import types
import unittest
from unittest import mock

import torch
import triton
import triton.language as tl
from test_fxir_backend import FxirTestCase, four_per_positive, kernel_calls, symbol_definitions
from torch._higher_order_ops.triton_kernel_wrap import (
    kernel_side_table,
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
from inductor_fx_unbacked.codegen import check_lines
from inductor_fx_unbacked.codegen import wrapper as ours
from inductor_fx_unbacked.runner.lowering import lower

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


def kernel_indices(graphs: list[torch.fx.GraphModule]) -> list[int]:
    return [node.kwargs["kernel_idx"] for node in kernel_calls(graphs)]


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
        checks = [line for line in lines if isinstance(line, check_lines.SizeStrideAssertLine)]
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
                self.assertIsInstance(lines[0], check_lines.NanCheckLine)
                self.assertEqual(lines[0].names, ["in_ptr0", "out_ptr0"])
            else:
                self.assertTrue(all(isinstance(line, str) for line in lines))
                self.assertEqual(len(lines), 4)


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
