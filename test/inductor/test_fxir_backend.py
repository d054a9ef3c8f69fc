# Owner(s): ["module: inductor"]
"""End-to-end tests of the FX wrapper backend with the overlay, in upstream's style.

Programs are compiled with ``torch.compile`` (and ``aot_compile(fx_wrapper=True)``)
through the FX backend: on CUDA when a GPU is present, otherwise on CPU through
Triton's interpreter. Each is checked against eager on inputs whose
data-dependent sizes differ, and the FX graphs are checked for which node defines
which unbacked symbol.
"""

import contextlib
import logging
import operator

import expected_graphs
import pytest
import torch
from torch._functorch import config as functorch_config
from torch._inductor import config
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.codegen.wrapper_fxir import FxConverter
from torch._inductor.test_case import TestCase as InductorTestCase
from torch._inductor.utils import run_and_get_code
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    subtest,
)

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.codegen import fx_symbols, fx_triton
from inductor_fx_unbacked.codegen import wrapper as ours
from inductor_fx_unbacked.demo.programs import signed
from inductor_fx_unbacked.integration.reference import python_wrapper_reference

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
aten = torch.ops.aten

#: Upstream's FX backend rejects the raw-text asserts; only tests that run
#: upstream's converter turn them off. Everything else uses the default config.
ASSERTS_OFF = {
    "alignment_asserts": False,
    "size_asserts": False,
    "scalar_asserts": False,
    "nan_asserts": False,
}


# Custom ops whose real and fake outputs agree: the size is a multiple of 4, so
# the unbacked binding carries a DivideByKey.
@torch.library.custom_op("ifx_test::four_per_positive", mutates_args=())
def four_per_positive(x: torch.Tensor) -> torch.Tensor:
    n = int((x > 0).sum())
    return torch.arange(4 * n, device=x.device, dtype=x.dtype)


@four_per_positive.register_fake
def _(x):
    n = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty(4 * n)


@torch.library.custom_op("ifx_test::add_one_", mutates_args=("x",))
def add_one_(x: torch.Tensor) -> None:
    x.add_(1)


@add_one_.register_fake
def _(x):
    return None


@contextlib.contextmanager
def pad_mm_finds_padding_faster():
    """pad_mm, run on this device (upstream runs it on GPUs only) with a compile-time
    benchmark that always times the padded mm faster; yields the benchmark's calls."""
    from unittest import mock

    from torch._inductor.fx_passes import pad_mm

    calls = []

    def do_bench():
        def bench(fn):
            calls.append(fn)
            return 1.0 if len(calls) % 2 else 0.01  # the original first, then the padded

        return bench

    with contextlib.ExitStack() as stack:
        for name, value in (
            ("check_device", lambda a, b: True),
            ("has_triton", lambda: True),
            ("is_mm_compute_bound", lambda *args: True),
            ("get_do_bench", do_bench),
        ):
            stack.enter_context(mock.patch.object(pad_mm, name, value))
        yield calls


def kernel_calls(graphs):
    return [
        node
        for gm in graphs
        for node in gm.graph.nodes
        if node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation
    ]


def returns_nothing(node):
    """An op whose schema returns nothing (an in-place custom op): its value is None."""
    return isinstance(node.target, torch._ops.OpOverload) and not node.target._schema.returns


def describe(node):
    """A node as ``target(args)``, with KeyPath steps expanded down to their root."""
    if (
        node.meta.get("unbacked_symbol") is None
        and node.target in (operator.getitem,)
        and node.args[0].op == "placeholder"
    ):
        return node.name
    steps = {
        operator.getitem: "getitem",
        operator.floordiv: "floordiv",
        aten.sym_size.int: "sym_size",
        aten.sym_stride.int: "sym_stride",
        aten.sym_storage_offset.default: "sym_storage_offset",
        aten.item.default: "item",
    }
    if node.op != "call_function" or node.target not in steps:
        return (
            getattr(node.target, "__name__", node.name) if node.op == "call_function" else node.op
        )
    args = [describe(a) if isinstance(a, torch.fx.Node) else repr(a) for a in node.args]
    return f"{steps[node.target]}({', '.join(args)})"


def symbol_definitions(graphs):
    """Which node defines which unbacked symbol, over all graphs."""
    return {
        str(node.meta["unbacked_symbol"]): describe(node)
        for gm in graphs
        for node in gm.graph.nodes
        if node.meta.get("unbacked_symbol") is not None
    }


class FxirTestCase(InductorTestCase):
    device = DEVICE

    def setUp(self):
        super().setUp()
        torch._dynamo.reset()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(
            torch._dynamo.config.patch(
                capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
            )
        )

    def tearDown(self):
        self._stack.close()
        super().tearDown()

    def wrapper_code(self, fn, args, overlay, tolerance=None, **patches):
        """The code Inductor's text wrapper (Python, or C++ with ``cpp_wrapper=True``)
        writes for ``fn``, with the overlay enabled or not; the result is checked
        against eager (within ``tolerance``, ``assertEqual``'s keywords)."""
        torch._dynamo.reset()
        # Without shape padding, as in ``run_fx``: a padded mm writes a buffer that
        # no later kernel may update in place, whichever wrapper writes the code.
        patches.setdefault("shape_padding", False)
        (ifx.enable if overlay else ifx.disable)()
        # The Python wrapper's kernels are the reference's (on CPU, Triton kernels in
        # the interpreter: no C++ compiler runs); the C++ wrapper needs C++ kernels.
        kernels = (
            contextlib.nullcontext()
            if patches.get("cpp_wrapper")
            else python_wrapper_reference(self.device)
        )
        try:
            with kernels, config.patch(force_disable_caches=True, **patches):
                result, codes = run_and_get_code(torch.compile(fn, fullgraph=True), *args)
        finally:
            ifx.disable()
        self.assertEqual(result, fn(*args), **(tolerance or {}))
        return "\n".join(codes)

    def run_fx(self, fn, inputs, **compile_kwargs):
        """Compile ``fn`` once, check it against eager on every input, return the graphs.

        Without shape padding: pad_mm decides by benchmarking at compile time, and
        under load on a GPU a small mm can come out faster padded, which adds two
        ``constant_pad_nd`` kernels to a graph whose kernels a test counts.
        """
        with (
            config.patch(shape_padding=False),
            ifx.fx_backend(self.device),
            ifx.recording_graphs() as graphs,
        ):
            compiled = torch.compile(fn, fullgraph=True, **compile_kwargs)
            for args in inputs:
                self.assertEqual(compiled(*args), fn(*args))
        self.assertGreater(len(graphs), 0)
        self.check_meta(graphs)
        return graphs

    def check_meta(self, graphs):
        for gm in graphs:
            for node in gm.graph.nodes:
                if node.op != "call_function":
                    continue
                if node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation:
                    continue
                # Upstream's contract for downstream compilers, checks included.
                self.assertIn("val", node.meta, node.format_node())
                if not returns_nothing(node):
                    self.assertIsNotNone(node.meta["val"], node.format_node())

    def signed(self, n, positive, seed=0):
        """``n`` values, ``positive`` of them positive, in shuffled order."""
        return signed(n, positive, self.device, seed + 97 * positive)


@instantiate_parametrized_tests
class FxBackendBasicsTest(FxirTestCase):
    """Programs without unbacked symbols: the FX backend itself, in CPU mode too."""

    def rand(self, *shape, seed=0):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(*shape, generator=g).to(self.device)

    @parametrize("dynamic", [False, True])
    def test_pointwise(self, dynamic):
        graphs = self.run_fx(
            lambda x, y: (x + y).sin(),
            [(self.rand(8), self.rand(8, seed=1)), (self.rand(13), self.rand(13, seed=2))],
            dynamic=dynamic,
        )
        self.assertEqual(len(kernel_calls(graphs)), 1 if dynamic else 2)

    @parametrize("dynamic", [False, True])
    def test_sum_reduction(self, dynamic):
        graphs = self.run_fx(
            lambda x: x.sum(), [(self.rand(8, 5),), (self.rand(3, 5, seed=1),)], dynamic=dynamic
        )
        self.assertEqual(len(kernel_calls(graphs)), 1 if dynamic else 2)

    @parametrize("dynamic", [False, True])
    def test_cat(self, dynamic):
        graphs = self.run_fx(
            lambda x, y: torch.cat([x.sin(), y.cos()]),
            [
                (self.rand(4, 3), self.rand(2, 3, seed=1)),
                (self.rand(5, 3), self.rand(6, 3, seed=2)),
            ],
            dynamic=dynamic,
        )
        # On GPUs Inductor fuses a small cat into one pointwise kernel; on CPU
        # (Triton in the interpreter) each input gets a kernel writing a view.
        kernels_per_graph = 1 if self.device == "cuda" else 2
        self.assertEqual(len(graphs), 1 if dynamic else 2)
        self.assertEqual(len(kernel_calls(graphs)), kernels_per_graph * len(graphs))

    @parametrize("dynamic", [False, True])
    def test_extern_mm(self, dynamic):
        graphs = self.run_fx(
            lambda x, y: (x @ y).sigmoid(),
            [
                (self.rand(4, 6), self.rand(6, 3, seed=1)),
                (self.rand(5, 6), self.rand(6, 3, seed=2)),
            ],
            dynamic=dynamic,
        )
        self.assertEqual(len(graphs), 1 if dynamic else 2)
        mm_nodes = [n for gm in graphs for n in gm.graph.nodes if n.target is aten.mm.out]
        self.assertEqual(len(mm_nodes), len(graphs))
        self.assertEqual(len(kernel_calls(graphs)), len(graphs))

    def test_kernel_counts_do_not_depend_on_pad_mm_benchmarks(self):
        """``run_fx`` compiles without shape padding: pad_mm never benchmarks, so a
        benchmark that finds padding faster (as a noisy one may) adds no kernel."""
        with pad_mm_finds_padding_faster() as benchmarks:
            graphs = self.run_fx(
                lambda x, y: (x @ y).sigmoid(),
                [(self.rand(4, 6), self.rand(6, 3, seed=1)), (self.rand(5, 6), self.rand(6, 3))],
                dynamic=False,
            )
        self.assertEqual(benchmarks, [])
        self.assertEqual(len(kernel_calls(graphs)), len(graphs))

    def test_pad_mm_adds_kernels_where_shape_padding_is_on(self):
        """What ``run_fx`` rules out: padding the mm's operands costs kernels of its own."""
        fn = lambda x, y: (x @ y).sigmoid()  # noqa: E731
        x, y = self.rand(5, 6), self.rand(6, 3, seed=1)
        with (
            pad_mm_finds_padding_faster(),
            config.patch(shape_padding=True, force_shape_pad=True),
            ifx.fx_backend(self.device),
            ifx.recording_graphs() as graphs,
        ):
            self.assertEqual(torch.compile(fn, fullgraph=True)(x, y), fn(x, y))
        self.assertGreater(len(kernel_calls(graphs)), len(graphs), [gm.code for gm in graphs])

    @parametrize("dynamic", [False, True])
    def test_aten_fallback(self, dynamic):
        graphs = self.run_fx(
            lambda x: torch.topk(x.cos(), 3).values * 2,
            [(self.rand(10),), (self.rand(12, seed=1),)],
            dynamic=dynamic,
        )
        topk = [n for gm in graphs for n in gm.graph.nodes if n.target is aten.topk.default]
        self.assertEqual(len(topk), 1 if dynamic else 2)

    @parametrize("dynamic", [False, True])
    def test_backward_of_scalar_loss(self, dynamic):
        def loss_fn(x, w):
            return ((x * w).sin() + x).sum()

        for seed, n in enumerate([6, 9]):
            x = self.rand(n, seed=seed).requires_grad_()
            w = self.rand(n, seed=seed + 10).requires_grad_()
            ref_x, ref_w = (t.detach().clone().requires_grad_() for t in (x, w))
            loss_fn(ref_x, ref_w).backward()
            # The backward compiles with the forward, in this thread: left to
            # AOTAutograd's lazy lowering, on a GPU it compiles in the autograd
            # engine's device thread, whose graphs no recording of this one sees.
            with (
                ifx.fx_backend(self.device),
                functorch_config.patch(force_non_lazy_backward_lowering=True),
                ifx.recording_graphs() as graphs,
            ):
                loss = torch.compile(loss_fn, dynamic=dynamic)(x, w)
                recorded_by_the_forward = len(graphs)
                loss.backward()
            self.assertEqual(x.grad, ref_x.grad)
            self.assertEqual(w.grad, ref_w.grad)
            if seed == 0 or not dynamic:
                # A forward and a backward graph, one kernel each.
                self.assertEqual(recorded_by_the_forward, 2)
                self.assertEqual(len(graphs), 2)
                self.assertEqual(len(kernel_calls(graphs)), 2)

    @parametrize("dynamic", [False, True])
    def test_python_scalar_argument_is_passed_by_value(self, dynamic):
        graphs = self.run_fx(
            lambda x, scale: (x * scale).cos(),
            [(self.rand(6), 0.5), (self.rand(6, seed=1), 3.0)],
            dynamic=dynamic,
        )
        item_nodes = [n for gm in graphs for n in gm.graph.nodes if n.target is aten.item.default]
        self.assertEqual(len(item_nodes), len(kernel_calls(graphs)) if dynamic else 0)

    def test_capture_returns_cond_branch_subgraphs(self):
        def fn(x):
            return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))

        x = self.rand(8)
        captured = ifx.capture_fx_graphs(fn, x, device=self.device, fullgraph=True)
        self.assertEqual(captured.outputs, fn(x))
        self.assertEqual(len(captured.graphs), 3)
        *branches, main = captured.graphs
        cond = next(n for n in main.graph.nodes if n.target is torch.ops.higher_order.cond)
        true_branch, false_branch = (getattr(main, a.target) for a in cond.args[1:3])
        generated_first = false_branch if expected_graphs.COND_FALSE_BRANCH_FIRST else true_branch
        self.assertIs(branches[0], generated_first)
        self.assertEqual({id(g) for g in branches}, {id(true_branch), id(false_branch)})

    def test_aot_compile_fx_wrapper(self):
        class Model(torch.nn.Module):
            def forward(self, x, y):
                return (x * y).sin() + x.sum()

        args = (self.rand(6, 4), self.rand(6, 4, seed=1))
        ep = torch.export.export(Model(), args)
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            gm = torch._inductor.aot_compile(ep.module(), args, options={"fx_wrapper": True})
        self.assertIsInstance(gm, torch.fx.GraphModule)
        self.assertIs(graphs[-1], gm)
        self.assertEqual(gm(*args), Model()(*args))
        self.assertGreater(len(kernel_calls(graphs)), 0)


class MismatchedOutputSize(torch.nn.Module):
    """The model of upstream's ``CondModels.MismatchedOutputSize``: the branches
    return different numbers of rows, so the cond output binds an unbacked symbol."""

    def forward(self, p, x, y, z):
        a = y.shape[0]
        b = z.shape[0]

        def true_fn(x):
            return (x + a)[2:].sin()

        def false_fn(x):
            return (x + b * z)[:2].cos()

        return y.sum() - torch.cond(x.sum() > 0, true_fn, false_fn, (x,))


ALIGNMENT_CHECK = torch.ops.fx_unbacked.assert_alignment.default


def aligned_outputs(graphs):
    """The operators whose outputs the graphs check for alignment (the outline leaves
    those checks out: on a GPU, Inductor checks the inputs too)."""
    return {
        node.args[2]
        for gm in graphs
        for node in gm.graph.find_nodes(op="call_function", target=ALIGNMENT_CHECK)
        if node.args[0].op != "placeholder"
    }


def grid_only_nodes(gm):
    """Nodes that only compute launch grids, which differ between devices."""
    grid_nodes = set()
    for node in reversed(gm.graph.nodes):
        users = list(node.users)
        if users and all(
            u in grid_nodes
            or (
                u.target is torch.ops.higher_order.triton_kernel_wrapper_mutation
                and node not in u.kwargs["kwargs"].values()
            )
            for u in users
        ):
            grid_nodes.add(node)
    return grid_nodes


def fx_outline(gm):
    """The graph as code, without launch geometry (grids, block sizes) or devices, nor
    the checks of inputs' alignment, which Inductor writes for GPU inputs only."""
    skip = grid_only_nodes(gm)
    # An alignment check passes its token on: its users are shown reading that token.
    passes_on = {
        node: node.args[-1]
        for node in gm.graph.find_nodes(op="call_function", target=ALIGNMENT_CHECK)
    }
    skip.update(passes_on)

    def fmt(a):
        while isinstance(a, torch.fx.Node) and a in passes_on:
            a = passes_on[a]
        if isinstance(a, torch.fx.Node):
            return a.name
        if isinstance(a, (list, tuple)):
            inner = ", ".join(fmt(x) for x in a)
            return f"[{inner}]" if isinstance(a, list) else f"({inner})"
        return repr(a)

    lines = []
    for node in gm.graph.nodes:
        if node in skip:
            continue
        if node.op == "placeholder":
            lines.append(f"{node.name} = placeholder")
        elif node.op == "get_attr":
            lines.append(f"{node.name} = self.{node.target}")
        elif node.op == "output":
            lines.append(f"return {fmt(node.args[0])}")
        elif node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation:
            tensors = {
                k: v for k, v in node.kwargs["kwargs"].items() if isinstance(v, torch.fx.Node)
            }
            lines.append(f"triton_kernel({', '.join(f'{k}={v}' for k, v in tensors.items())})")
        else:
            target = getattr(node.target, "__name__", str(node.target))
            if isinstance(node.target, torch._ops.OpOverload):
                target = str(node.target)
            args = [fmt(a) for a in node.args]
            args += [f"{k}={fmt(v)}" for k, v in node.kwargs.items() if k != "device"]
            mark = ""
            if (symbol := node.meta.get("unbacked_symbol")) is not None:
                mark = f"  # defines {symbol}"
            lines.append(f"{node.name} = {target}({', '.join(args)}){mark}")
    return "\n".join(lines)


@instantiate_parametrized_tests
class UnbackedSymbolDefsTest(FxirTestCase):
    """Programs whose output sizes depend on data: unbacked symbol definitions."""

    def mismatched_inputs(self, pred, rows=10):
        g = torch.Generator().manual_seed(rows + pred)
        x, y, z = (
            (torch.randn(rows, 20, generator=g) + (1 if pred else -1)).to(self.device)
            for _ in range(3)
        )
        return (torch.tensor([pred], device=self.device), x, y, z)

    def test_mismatched_branch_output_size_compiled(self):
        model = MismatchedOutputSize()
        graphs = self.run_fx(
            model,
            [
                self.mismatched_inputs(True),
                self.mismatched_inputs(False),
                self.mismatched_inputs(True, rows=13),
            ],
            dynamic=True,
        )
        self.assertEqual(len(graphs), 3)  # two branches, then the main graph
        self.assertEqual(symbol_definitions(graphs), {"u0": "sym_size(getitem(cond, 0), 0)"})

    @parametrize("pred", [False, True])
    def test_mismatched_branch_dynamic(self, pred):
        """Upstream's PR test: export, then ``aot_compile(fx_wrapper=True)``."""
        model = MismatchedOutputSize()
        inputs = self.mismatched_inputs(pred)
        s0 = torch.export.Dim("s0", min=4, max=1024)
        s1 = torch.export.Dim("s1", min=4, max=1024)
        dynamic_shapes = {
            "p": {},
            "x": {0: s0, 1: None},
            "y": {0: s1, 1: None},
            "z": {0: s0, 1: None},
        }
        with torch.no_grad():
            ep = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes, strict=False)
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            gm = torch._inductor.aot_compile(
                ep.module(),
                inputs,
                options={"fx_wrapper": True},
            )
        for args in (inputs, self.mismatched_inputs(not pred, rows=12)):
            self.assertEqual(gm(*args), model(*args))
        self.check_meta(graphs)
        self.assertEqual(symbol_definitions(graphs), {"u0": "sym_size(getitem(cond, 0), 0)"})

    def test_nonzero(self):
        graphs = self.run_fx(
            lambda x: torch.nonzero(x > 0) * 2 + 1,
            [(self.signed(32, 5),), (self.signed(32, 20),)],
        )
        self.assertEqual(symbol_definitions(graphs), {"u0": "sym_size(nonzero.default, 0)"})

    def test_boolean_mask(self):
        graphs = self.run_fx(
            lambda x: x[x > 0] * 2, [(self.signed(32, 3),), (self.signed(32, 17),)]
        )
        # The overlay writes x[mask] as nonzero and a gather (codegen/indexing.py).
        self.assertEqual(symbol_definitions(graphs), {"u0": "sym_size(nonzero.default, 0)"})

    def test_unique_return_counts(self):
        def fn(x):
            values, counts = torch.unique(x, return_counts=True)
            return values + 1, counts * 2

        graphs = self.run_fx(
            fn,
            [
                (torch.tensor([3, 1, 3, 2, 2, 2], device=self.device),),
                (torch.tensor([5, 4, 5, 7, 1, 9, 9, 0], device=self.device),),
            ],
        )
        self.assertEqual(
            symbol_definitions(graphs), {"u0": "sym_size(getitem(_unique2.default, 0), 0)"}
        )

    def test_masked_select(self):
        graphs = self.run_fx(
            lambda x: torch.masked_select(x, x > 0.5) * 2 + 1,
            [(self.signed(32, 9),), (self.signed(32, 25),)],
        )
        self.assertEqual(symbol_definitions(graphs), {"u0": "sym_size(masked_select.default, 0)"})

    def test_repeat_interleave_with_repeats_tensor(self):
        graphs = self.run_fx(
            lambda x, repeats: torch.repeat_interleave(x, repeats) * 2,
            [
                (self.signed(5, 5), torch.tensor([1, 0, 2, 3, 1], device=self.device)),
                (self.signed(5, 5), torch.tensor([4, 4, 0, 1, 2], device=self.device)),
            ],
        )
        (definition,) = symbol_definitions(graphs).values()
        self.assertRegex(definition, r"^sym_size\(repeat_interleave\.Tensor, 0\)$")

    def test_split_sizes_from_tolist(self):
        def fn(x, lengths):
            chunks = torch.split(x, lengths.tolist())
            return torch.stack([chunk.sum() for chunk in chunks])

        x = self.signed(16, 8)
        graphs = self.run_fx(
            fn,
            [
                (x, torch.tensor([2, 0, 5, 1, 3, 2, 2, 1], device=self.device)),
                (x, torch.tensor([0, 4, 4, 0, 1, 1, 3, 3], device=self.device)),
            ],
        )
        definitions = symbol_definitions(graphs)
        self.assertEqual(len(definitions), 8)
        for definition in definitions.values():
            self.assertRegex(definition, r"^item\(")

    def test_divide_by_key_custom_op(self):
        """A fake size of ``4*u0``: the size is read, then divided by 4."""

        def fn(x):
            return four_per_positive(x) + 1

        inputs = [(self.signed(8, 3),), (self.signed(8, 6),)]
        graphs = self.run_fx(fn, inputs)
        self.assertEqual(
            symbol_definitions(graphs),
            {"u0": "floordiv(sym_size(four_per_positive.default, 0), 4)"},
        )
        checks = [
            n
            for gm in graphs
            for n in gm.graph.nodes
            if n.meta.get("runtime_assert") and "is not divisible by 4" in str(n.args)
        ]
        self.assertEqual(len(checks), 1)
        # The Python wrapper agrees with the FX backend and with eager.
        compiled = torch.compile(fn, fullgraph=True)
        for args in inputs:
            self.assertEqual(compiled(*args), fn(*args))

    def test_in_place_custom_op_binds_nothing(self):
        def fn(x):
            y = x.clone()
            add_one_(y)
            return torch.nonzero(y > 1)

        graphs = self.run_fx(fn, [(self.signed(16, 4) + 0.5,), (self.signed(16, 11) + 0.5,)])
        self.assertEqual(symbol_definitions(graphs), {"u0": "sym_size(nonzero.default, 0)"})

    def test_expected_fx_code_nonzero(self):
        (gm,) = self.run_fx(
            lambda x: torch.nonzero(x > 0) * 2 + 1, [(self.signed(32, 5),), (self.signed(32, 9),)]
        )
        self.assertEqual(fx_outline(gm), expected_graphs.for_this_release("nonzero"))
        self.assertIn("torch.ops.aten.nonzero.default", aligned_outputs([gm]))

    def test_expected_fx_code_cond(self):
        graphs = self.run_fx(
            MismatchedOutputSize(),
            [self.mismatched_inputs(True), self.mismatched_inputs(False)],
            dynamic=True,
        )
        self.assertEqual(
            "\n\n".join(fx_outline(gm) for gm in graphs),
            expected_graphs.for_this_release("cond"),
        )
        self.assertIn("torch.ops.cond", aligned_outputs(graphs))


def positives_times_four(x):
    return four_per_positive(x) + 1


def nonzero_program(x):
    return torch.nonzero(x > 0) * 2 + 1


@instantiate_parametrized_tests
class OverlayProvenanceTest(FxirTestCase):
    """Which implementation runs, and the text wrappers next to the FX backend."""

    def test_fx_definitions_come_from_the_overlay(self):
        x = self.signed(16, 5)
        # Upstream's kernel definitions on torch 2.11 cannot run kernels compiled
        # in worker processes (docs/upstream.md); compile in-process for that half.
        with (
            config.patch(compile_threads=1, **ASSERTS_OFF),
            ifx.fx_backend(self.device),
            ifx.recording_graphs() as graphs,
        ):
            ifx.disable()  # upstream's converter methods
            torch.compile(nonzero_program, fullgraph=True)(x)
            torch._dynamo.reset()
            ifx.enable()  # ours
            torch.compile(nonzero_program, fullgraph=True)(x)
        upstream_graph, overlay_graph = graphs
        self.assertEqual(symbol_definitions([upstream_graph]), {})
        self.assertEqual(
            symbol_definitions([overlay_graph]), {"u0": "sym_size(nonzero.default, 0)"}
        )

    def test_lines_and_methods_in_use(self):
        ifx.enable()
        try:
            self.assertIs(
                PythonWrapperCodegen._codegen_unbacked_symbol_defs_for_outputs,
                ours._codegen_unbacked_symbol_defs_for_outputs,
            )
            self.assertIs(
                FxConverter._generate_unbacked_symbol_defs,
                fx_symbols._generate_unbacked_symbol_defs,
            )
            self.assertIs(FxConverter._generate_triton_call, fx_triton._generate_triton_call)
        finally:
            ifx.disable()
        self.assertIsNot(
            PythonWrapperCodegen._codegen_unbacked_symbol_defs_for_outputs,
            ours._codegen_unbacked_symbol_defs_for_outputs,
        )
        self.assertIsNot(FxConverter._generate_triton_call, fx_triton._generate_triton_call)

    @parametrize(
        "cpp_wrapper",
        [False, subtest(True, name="cpp_wrapper_True", decorators=[pytest.mark.full])],
    )
    def test_divide_by_key_text_checks_divisibility(self, cpp_wrapper):
        """Upstream's definition, plus a divisibility check (the documented addition).

        Upstream's C++ text for a ``DivideByKey`` is not C++ before torch 2.13, so
        only the Python text is compared with upstream's.
        """
        args = (self.signed(8, 3),)
        ours_code = self.wrapper_code(positives_times_four, args, True, cpp_wrapper=cpp_wrapper)
        if cpp_wrapper:
            self.assertRegex(ours_code, r"auto u0 = \(buf\d+\.size\(0\) / 4\);")
            self.assertRegex(
                ours_code, r'if \(buf\d+\.size\(0\) % 4 != 0\) \{ throw std::runtime_error\("u0: '
            )
        else:
            upstream_code = self.wrapper_code(positives_times_four, args, False)
            definition = next(line for line in upstream_code.splitlines() if "u0 = " in line)
            self.assertIn(definition, ours_code)
            self.assertRegex(ours_code, r"if buf\d+\.size\(0\) % 4 != 0: raise RuntimeError\('u0: ")
        self.assertEqual(ours_code.replace("\n", "").count("is not divisible by 4"), 1)


class AutotuneGuardTest(FxirTestCase):
    logger = "inductor_fx_unbacked.codegen.wrapper_fxir"

    def test_warns_once_per_kernel_with_unbacked_symbols(self):
        with config.patch({"triton.autotune_at_compile_time": True}):
            with self.assertLogs(self.logger, logging.WARNING) as logs:
                graphs = self.run_fx(
                    nonzero_program, [(self.signed(16, 5),), (self.signed(16, 9),)]
                )
        self.assertEqual(len(kernel_calls(graphs)), 2)
        (record,) = logs.records
        self.assertEqual(record.levelno, logging.WARNING)
        self.assertRegex(record.getMessage(), r"^Not autotuning Triton kernel triton_\w+ .*\(u0\)")

    def test_no_warning_without_unbacked_symbols(self):
        with config.patch({"triton.autotune_at_compile_time": True}):
            with self.assertNoLogs(self.logger, logging.WARNING):
                self.run_fx(lambda x: (x * 2).sin(), [(self.signed(16, 5),), (self.signed(16, 9),)])


class UnsupportedKeyPathTest(InductorTestCase):
    def test_unsupported_entry_is_an_error_naming_symbol_and_keypath(self):
        import sympy
        from torch.utils._pytree import MappingKey, SequenceKey

        u3 = sympy.Symbol("u3", integer=True)
        converter = FxConverter(
            lines=[], prologue="", graph_inputs={}, graph_outputs=[], subgms={}, is_subgraph=False
        )
        converter.buffer_to_node["buf0"] = converter.gm.graph.placeholder("buf0")
        keypath = (SequenceKey(0), MappingKey("k"))
        line = ours.UnbackedSymbolDefsLine(None, "buf0", [], {u3: keypath})
        ifx.enable()
        try:
            with self.assertRaises(NotImplementedError) as e:
                line.codegen_fx(converter)(line)
        finally:
            ifx.disable()
        self.assertEqual(
            str(e.exception),
            f"cannot define u3 from KeyPath {keypath!r}: "
            f"unsupported KeyPath entry {MappingKey('k')!r}",
        )

    def test_empty_bindings_never_touch_the_root(self):
        converter = FxConverter(
            lines=[], prologue="", graph_inputs={}, graph_outputs=[], subgms={}, is_subgraph=False
        )
        line = ours.UnbackedSymbolDefsLine(None, "buf_never_allocated", [], {})
        ifx.enable()
        try:
            line.codegen_fx(converter)(line)
        finally:
            ifx.disable()
        self.assertEqual(len(converter.gm.graph.nodes), 0)
