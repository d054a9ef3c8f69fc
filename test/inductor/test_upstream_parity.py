# Owner(s): ["module: inductor"]
"""The overlay never makes upstream worse, on whichever torch release is installed.

Each test is differential: it runs upstream (overlay disabled) and the overlay on
the same program and release, and checks that what upstream does still happens.
The Python and C++ wrappers must write the same text with and without the
overlay (it hands them upstream's own methods); the FX backend must accept every
program that upstream's FX backend accepts, and check what the Python wrapper
checks. Inductor's caches are disabled throughout, so that nothing passes on a
cache hit.
"""

import re

import pytest
import torch
from programs import split_by_sign
from test_fxir_backend import FxirTestCase, kernel_calls, symbol_definitions
from torch._inductor import config
from torch._inductor.utils import run_and_get_code
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    subtest,
)

import inductor_fx_unbacked as ifx

aten = torch.ops.aten

ASSERTS_OFF = {
    "alignment_asserts": False,
    "size_asserts": False,
    "scalar_asserts": False,
    "nan_asserts": False,
    "compile_threads": 1,
}


@torch.library.custom_op("ifx_test::wrong_dtype", mutates_args=())
def wrong_dtype(x: torch.Tensor) -> torch.Tensor:
    """Promises its input's dtype, returns float64."""
    return (x * 2).double()


@wrong_dtype.register_fake
def _(x):
    return torch.empty_like(x)


def nonzero_program(x):
    return torch.nonzero(x > 0) * 2 + 1


def unique_program(x):
    values, counts = torch.unique(x, return_counts=True)
    return values + 1, counts * 2


def nested_outputs_program(x):
    doubled, (positive, negative) = split_by_sign(x)
    return doubled.sum() + 1, positive * 3, negative.cos()


def checked_arange(t):
    n = t.item()
    torch._check(n <= 4)
    return torch.arange(n, device=t.device) * 2


def mismatched_cond(x):
    return torch.cond(x.sum() > 0, lambda x: x[1:] * 2, lambda x: x[2:] + 1, (x,))


def compound_closure_cond(x):
    """The branches close over ``2*s0 + 1``, which reaches them as one input."""
    n = 2 * x.shape[0] + 1
    return torch.cond(x.sum() > 0, lambda x: x * n, lambda x: x - n, (x,))


def normalized(code):
    """Wrapper code without what differs between two compiles of one program: the
    AOT ID, and paths into the (fresh, since caches are off) cache directory."""
    lines = [
        line for line in code.splitlines() if not re.match(r"\s*(#|//) (AOT ID|kernel path):", line)
    ]
    code = re.sub(r"/tmp[\w/.\-]*", "<tmp>", "\n".join(lines))
    # The C++ wrapper on a GPU tunes kernels at compile time by timing them, so
    # two compiles can pick different block sizes; launch geometry is not the
    # overlay's. Numbers in grid and launch lines are compared as N.
    return re.sub(
        r"^.*\b(grid_\d|launchKernel|loadKernel|num_warps|shared_mem)\b.*$",
        lambda m: re.sub(r"\d+", "N", m.group(0)),
        code,
        flags=re.M,
    )


#: The C++ wrapper's text of most programs in the full tier: each compiles C++.
CPP_WRAPPER_IN_THE_FULL_TIER = subtest(True, name="cpp_wrapper_True", decorators=[pytest.mark.full])


@instantiate_parametrized_tests
class WrapperTextParityTest(FxirTestCase):
    """The Python and C++ wrappers write upstream's text with the overlay enabled."""

    def assert_same_text(self, fn, args, **patches):
        ours = normalized(self.wrapper_code(fn, args, True, **patches))
        upstream = normalized(self.wrapper_code(fn, args, False, **patches))
        self.assertEqual(ours, upstream)
        return ours

    @parametrize("cpp_wrapper", [False, True])
    def test_nonzero(self, cpp_wrapper):
        code = self.assert_same_text(
            nonzero_program, (self.signed(16, 5),), cpp_wrapper=cpp_wrapper
        )
        self.assertIn("u0 = buf", code)
        self.assertIn("assert_size_stride" if not cpp_wrapper else "u0", code)

    def test_unique(self):
        args = (torch.tensor([3, 1, 3, 2], device=self.device),)
        self.assert_same_text(unique_program, args)

    @parametrize("cpp_wrapper", [False, CPP_WRAPPER_IN_THE_FULL_TIER])
    def test_nested_outputs(self, cpp_wrapper):
        args = (self.signed(12, 5),)
        try:
            self.wrapper_code(nested_outputs_program, args, False, cpp_wrapper=cpp_wrapper)
        except Exception as upstream_error:  # noqa: BLE001 - any upstream failure
            # Where upstream cannot compile the program (the C++ wrapper's
            # custom-op fallback returns tensors only), the overlay may not
            # either, but it must fail the same way, not differently.
            try:
                self.wrapper_code(nested_outputs_program, args, True, cpp_wrapper=cpp_wrapper)
            except Exception as ours:  # noqa: BLE001
                self.assertEqual(type(ours), type(upstream_error))
                self.assertEqual(str(ours).splitlines()[0], str(upstream_error).splitlines()[0])
            return
        code = self.assert_same_text(nested_outputs_program, args, cpp_wrapper=cpp_wrapper)
        self.assertRegex(code, r"u\d+ = ")

    @parametrize("cpp_wrapper", [False, CPP_WRAPPER_IN_THE_FULL_TIER])
    def test_scalar_asserts(self, cpp_wrapper):
        code = self.assert_same_text(
            checked_arange, (torch.tensor(3, device=self.device),), cpp_wrapper=cpp_wrapper
        )
        self.assertRegex(code, r"u\d+ <= 4")

    def test_cond_with_mismatched_branches(self):
        code = self.assert_same_text(mismatched_cond, (self.signed(10, 8),))
        self.assertRegex(code, r"u0 = ")

    def test_unsafe_skip_scalar_range_asserts(self):
        if not hasattr(config, "unsafe_skip_scalar_range_asserts"):
            pytest.skip("this torch has no config.unsafe_skip_scalar_range_asserts")
        code = self.assert_same_text(
            checked_arange,
            (torch.tensor(3, device=self.device),),
            unsafe_skip_scalar_range_asserts=True,
        )
        self.assertNotRegex(code, r"u\d+ <= 4")


def scalar_checks(graphs):
    return [
        n
        for gm in graphs
        for n in gm.graph.nodes
        if n.meta.get("runtime_assert") and n.target is aten._functional_assert_scalar.default
    ]


@instantiate_parametrized_tests
class FxParityTest(FxirTestCase):
    """The FX backend with the overlay accepts what upstream's accepts, and checks
    what the Python wrapper checks."""

    def upstream_fx(self, fn, args, **compile_kwargs):
        """Upstream's FX backend (overlay disabled, its asserts off): graphs, or the error."""
        with (
            config.patch(force_disable_caches=True, **ASSERTS_OFF),
            ifx.fx_backend(self.device),
            ifx.recording_graphs() as graphs,
        ):
            ifx.disable()
            torch._dynamo.reset()
            try:
                result = torch.compile(fn, fullgraph=True, **compile_kwargs)(*args)
            except Exception as e:  # noqa: BLE001 - upstream's failure is the result
                return e
        self.assertEqual(result, fn(*args))
        return graphs

    def test_compound_symbolic_subgraph_input(self):
        """Torch 2.10 to 2.13 reject a compound input; the overlay converts it on
        every release."""
        inputs = [(self.signed(6, 5),), (self.signed(9, 2),)]
        graphs = self.run_fx(compound_closure_cond, inputs, dynamic=True)
        compound = [
            node
            for gm in graphs
            for node in gm.graph.nodes
            if node.op == "placeholder"
            and isinstance(node.meta.get("val"), torch.SymInt)
            and not node.meta["val"].node.expr.is_symbol
        ]
        self.assertTrue(compound)
        for node in compound:
            self.assertRegex(str(node.meta["val"]), r"^2\*s\d+ \+ 1$")

    def test_dtype_of_extern_output_is_checked_as_the_python_wrapper_does(self):
        def fn(x):
            return wrong_dtype(x).float() + 1

        x = self.signed(8, 3)
        torch._dynamo.reset()
        try:
            python_result = torch.compile(fn, fullgraph=True)(x)
            python_error = None
        except RuntimeError as e:
            python_error = str(e)
        torch._dynamo.reset()
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            compiled = torch.compile(fn, fullgraph=True)
            if python_error is None:
                # Torch 2.10 to 2.13 check sizes and strides only; both wrappers
                # then read the float64 buffer as the float32 promised (garbage).
                self.assertEqual(compiled(x).shape, python_result.shape)
            else:
                self.assertIn("expected dtype torch.float32 but got torch.float64", python_error)
                with self.assertRaisesRegex(RuntimeError, re.escape(python_error.split("\n")[0])):
                    compiled(x)
        dtype_checks = [
            n
            for gm in graphs
            for n in gm.graph.nodes
            if n.target is torch.ops.fx_unbacked.assert_tensor_metadata.default
        ]
        self.assertEqual(len(dtype_checks), 0 if python_error is None else 1)

    @parametrize("skip_ranges", [False, True])
    def test_scalar_checks_match_the_python_wrapper(self, skip_ranges):
        """One compile of one program: as many scalar checks as the Python wrapper's."""
        if skip_ranges and not hasattr(config, "unsafe_skip_scalar_range_asserts"):
            pytest.skip("this torch has no config.unsafe_skip_scalar_range_asserts")
        patches = {"unsafe_skip_scalar_range_asserts": True} if skip_ranges else {}
        args = (torch.tensor(3, device=self.device),)
        with config.patch(force_disable_caches=True, **patches):
            torch._dynamo.reset()
            _, codes = run_and_get_code(torch.compile(checked_arange, fullgraph=True), *args)
            python_checks = "\n".join(codes).count("raise RuntimeError(")
            torch._dynamo.reset()
            (graph,) = self.run_fx(checked_arange, [args])
        # With range checks skipped, both have none: every check here is a range bound.
        self.assertEqual(len(scalar_checks([graph])), python_checks)
        if not skip_ranges:
            self.assertGreater(python_checks, 1)

    def test_nested_outputs(self):
        """Upstream's FX backend takes only the first index of a nested output."""
        graphs = self.run_fx(nested_outputs_program, [(self.signed(12, 5),), (self.signed(12, 9),)])
        self.assertEqual(
            sorted(symbol_definitions(graphs).values()),
            [
                "sym_size(getitem(getitem(split_by_sign.default, 1), 0), 0)",
                "sym_size(getitem(getitem(split_by_sign.default, 1), 1), 0)",
            ],
        )

    def test_launch_options_reach_the_kernel_node(self):
        from inductor_fx_unbacked import _compat

        if not _compat.HOP_LAUNCH_KWARGS:
            pytest.skip("this torch's kernel HOP takes no launch options")
        if self.device != "cuda":
            pytest.skip("backend options are chosen for a GPU target")
        import triton
        import triton.language as tl

        @triton.jit
        def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

        def fn(x):
            out = torch.empty_like(x)
            add_one[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64, num_warps=2)
            return out

        x = self.signed(100, 50)
        upstream = self.upstream_fx(fn, (x,))
        torch._dynamo.reset()
        ours = self.run_fx(fn, [(x,)])
        self.assertNotIsInstance(upstream, Exception)
        self.assertEqual(
            [n.kwargs.get("launch_kwargs") for n in kernel_calls(ours)],
            [n.kwargs.get("launch_kwargs") for n in kernel_calls(upstream)],
        )
