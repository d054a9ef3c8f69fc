# Owner(s): ["module: inductor"]
"""The FX backend on Inductor's default config: every check is FX IR that raises.

No assert flag is turned off here. Programs run through ``torch.compile`` with
the FX backend and, where stated, through ``aot_compile(fx_wrapper=True)``.
"""

import contextlib
from unittest import mock

import torch
from test_fxir_backend import FxirTestCase, kernel_calls, symbol_definitions
from torch._higher_order_ops import while_loop
from torch._inductor import config
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.programs import PROGRAMS

aten = torch.ops.aten


@torch.library.custom_op("ifx_test::wrong_stride", mutates_args=())
def wrong_stride(x: torch.Tensor) -> torch.Tensor:
    """Promises a contiguous result, returns every other element of a bigger buffer."""
    out = torch.empty(2 * x.numel(), device=x.device, dtype=x.dtype)[::2]
    return out.copy_(x * 2)


@wrong_stride.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("ifx_test::wrong_size", mutates_args=())
def wrong_size(x: torch.Tensor) -> torch.Tensor:
    """Promises the size of its input, returns one element more."""
    return torch.cat([x, x[:1]]) * 2


@wrong_size.register_fake
def _(x):
    return torch.empty_like(x)


def assert_nodes(graphs):
    return [n for gm in graphs for n in gm.graph.nodes if n.meta.get("runtime_assert")]


def checked_arange(t):
    n = t.item()
    torch._check(n <= 4)
    return torch.arange(n, device=t.device) * 2


class CheckedArange(torch.nn.Module):
    def forward(self, t):
        return checked_arange(t)


def launch_independent_signatures(gm):
    """Each node's (name, target, arguments), leaving out what follows the config a
    kernel launches with: a kernel node's arguments (its block sizes) and grid, and
    the arithmetic that only grids read. Compiles of one kernel in a process share its autotuner,
    and one that an earlier call tuned (on a GPU) launches with the winner."""
    kernel_hop = torch.ops.higher_order.triton_kernel_wrapper_mutation

    def in_grid_only(node, user):
        # A kernel node reads its arguments in ``kwargs``, and its grid.
        if user.target is not kernel_hop:
            return False
        return all(value is not node for value in user.kwargs["kwargs"].values())

    grid_only = set()
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and node.users and node.target is not kernel_hop:
            if all(user in grid_only or in_grid_only(node, user) for user in node.users):
                grid_only.add(node)
    signatures = []
    for node in gm.graph.nodes:
        if node in grid_only:
            continue
        if node.target is kernel_hop:
            signature = (node.name, node.target)
        else:
            signature = (node.name, node.target, str(node.args))
        signatures.append((node, signature))
    return signatures


@instantiate_parametrized_tests
class DefaultConfigTest(FxirTestCase):
    def int_tensor(self, *values):
        return torch.tensor(values, device=self.device)

    @parametrize("name", [p.name for p in PROGRAMS])
    def test_baseline_program(self, name):
        program = next(p for p in PROGRAMS if p.name == name)
        graphs = self.run_fx(program.fn, program.inputs(self.device, 256), dynamic=program.dynamic)
        if symbol_definitions(graphs):
            # Every unbacked symbol carries at least its value-range checks.
            scalar_checks = [
                n
                for n in assert_nodes(graphs)
                if n.target is aten._functional_assert_scalar.default
            ]
            self.assertGreater(len(scalar_checks), 0)

    def test_violated_torch_check_raises_compiled(self):
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            compiled = torch.compile(checked_arange, fullgraph=True)
            self.assertEqual(compiled(self.int_tensor(3)), checked_arange(self.int_tensor(3)))
            with self.assertRaisesRegex(RuntimeError, r"u\d+ <= 4"):
                compiled(self.int_tensor(9))
        messages = [
            n.args[1]
            for n in assert_nodes(graphs)
            if n.target is aten._functional_assert_scalar.default
        ]
        self.assertTrue(any(m.endswith("<= 4") for m in messages), messages)

    def test_violated_torch_check_raises_aot(self):
        t = self.int_tensor(3)
        ep = torch.export.export(CheckedArange(), (t,), strict=False)
        with ifx.fx_backend(self.device):
            gm = torch._inductor.aot_compile(ep.module(), (t,), options={"fx_wrapper": True})
        self.assertEqual(gm(self.int_tensor(2)), checked_arange(self.int_tensor(2)))
        with self.assertRaisesRegex(RuntimeError, r"u\d+ <= 4"):
            gm(self.int_tensor(9))

    def test_wrong_input_layout_raises_aot(self):
        """Without Dynamo's guards, the graph checks its inputs as the Python wrapper does."""

        class Model(torch.nn.Module):
            def forward(self, x):
                return x.sin() * 2

        x = torch.randn(8, 4, device=self.device)
        ep = torch.export.export(Model(), (x,))
        with ifx.fx_backend(self.device):
            gm = torch._inductor.aot_compile(ep.module(), (x,), options={"fx_wrapper": True})
        self.assertEqual(gm(x), Model()(x))
        # The message names the input and both layouts, and blames no custom op.
        wrong_size = (
            r"^graph input 0 \(arg0_1\): expected size \(8, 4\) and stride \(4, 1\), "
            r"got size \(8, 5\) and stride \(5, 1\)$"
        )
        with self.assertRaisesRegex(AssertionError, wrong_size):
            gm(torch.randn(8, 5, device=self.device))
        wrong_stride = r"^graph input 0 \(arg0_1\): .* got size \(8, 4\) and stride \(1, 8\)$"
        with self.assertRaisesRegex(AssertionError, wrong_stride):
            gm(torch.randn(4, 8, device=self.device).t())

    @parametrize("op", ["wrong_stride", "wrong_size"])
    def test_fake_and_real_outputs_disagree(self, op):
        custom_op = {"wrong_stride": wrong_stride, "wrong_size": wrong_size}[op]
        x = torch.arange(6.0, device=self.device)
        with ifx.fx_backend(self.device):
            compiled = torch.compile(lambda x: custom_op(x) + 1, fullgraph=True)
            with self.assertRaisesRegex(AssertionError, r"expected size|expected stride|stride"):
                compiled(x)

    def test_nan_asserts_check_outputs_when_enabled(self):
        from torch._inductor import config

        x = torch.rand(8, device=self.device) + 0.5
        with config.patch(nan_asserts=True), ifx.fx_backend(self.device):
            compiled = torch.compile(lambda x: x.log() * 2, fullgraph=True)
            self.assertEqual(compiled(x), x.log() * 2)
            with self.assertRaisesRegex(RuntimeError, r"has NaN"):
                compiled(-x)

    def test_strip_runtime_asserts_removes_exactly_the_tagged_nodes(self):
        inputs = [(self.signed(32, 5),), (self.signed(32, 20),)]

        def fn(x):
            return torch.nonzero(x > 0) * 2 + 1

        full = self.run_fx(fn, inputs)
        torch._dynamo.reset()
        with ifx.fx_backend(self.device, runtime_asserts=False), ifx.recording_graphs() as stripped:
            compiled = torch.compile(fn, fullgraph=True)
            for args in inputs:
                self.assertEqual(compiled(*args), fn(*args))
        (full_gm,), (stripped_gm,) = full, stripped
        self.assertGreater(len(assert_nodes(full)), 0)
        self.assertEqual(assert_nodes(stripped), [])

        kept = [
            signature
            for node, signature in launch_independent_signatures(full_gm)
            if not node.meta.get("runtime_assert")
        ]
        stripped_signatures = launch_independent_signatures(stripped_gm)
        self.assertEqual([signature for _, signature in stripped_signatures], kept)

    def test_while_loop_with_data_dependent_output(self):
        def fn(x, bound):
            def cond_fn(i, acc):
                return i < bound

            def body_fn(i, acc):
                return i + 1, acc + x

            start = torch.zeros((), dtype=torch.int64, device=x.device)
            i, acc = while_loop(cond_fn, body_fn, (start, torch.zeros_like(x)))
            return acc, torch.arange(i.item(), device=x.device) * 2

        x = self.signed(8, 4)
        graphs = self.run_fx(fn, [(x, self.int_tensor(3)[0]), (x, self.int_tensor(6)[0])])
        loops = [
            n
            for gm in graphs
            for n in gm.graph.nodes
            if n.target is torch.ops.higher_order.while_loop
        ]
        self.assertEqual(len(loops), 1)
        self.assertEqual(
            list(symbol_definitions(graphs).values()), ["item(getitem(while_loop, 0))"]
        )

    def test_dynamic_slice_with_bounds_from_item(self):
        def fn(x, bounds):
            start, end = bounds.tolist()
            return x[start:end] * 2

        x = self.signed(10, 4)
        graphs = self.run_fx(fn, [(x, self.int_tensor(2, 7)), (x, self.int_tensor(-6, -1))])
        sizes = [
            n
            for gm in graphs
            for n in gm.graph.nodes
            if n.meta.get("unbacked_symbol") is not None and n.target is torch.sym_max
        ]
        self.assertEqual(len(sizes), 1)  # the slice length, max(0, end - start)

    def test_dynamic_select_with_index_from_item(self):
        x = torch.randn(5, 3, device=self.device)
        graphs = self.run_fx(
            lambda x, i: x[i.item()] * 2, [(x, self.int_tensor(1)), (x, self.int_tensor(-2))]
        )
        offsets = [
            n
            for gm in graphs
            for n in gm.graph.nodes
            if n.meta.get("unbacked_symbol") is not None and n.target is not aten.item.default
        ]
        self.assertEqual(len(offsets), 1)  # the storage offset of the selected row
        self.assertEqual(len(kernel_calls(graphs)), 1)

    def test_symbolic_min_in_sizes(self):
        """A slice whose length is the min of two sizes (upstream #190671)."""

        def fn(x, y):
            return x[: min(x.shape[0], y.shape[0])] * 2

        graphs = self.run_fx(
            fn,
            [
                (torch.randn(8, device=self.device), torch.randn(5, device=self.device)),
                (torch.randn(4, device=self.device), torch.randn(9, device=self.device)),
            ],
            dynamic=True,
        )
        self.assertEqual(len(graphs), 1)
        mins = [n for gm in graphs for n in gm.graph.nodes if n.target is torch.sym_min]
        self.assertEqual(len(mins), 1)
        self.assertEqual(len(kernel_calls(graphs)), 1)


class CheckTokenTest(FxirTestCase):
    """Checks have values: a token chain, as Inductor's functional asserts have."""

    def test_every_node_of_the_aot_graph_has_a_value(self):
        """Upstream's AOT contract: every call_function node but the kernel HOP has
        a non-None ``meta["val"]``, with every check of the default config."""
        t = torch.tensor([3], device=self.device)
        ep = torch.export.export(CheckedArange(), (t,))
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            gm = torch._inductor.aot_compile(ep.module(), (t,), options={"fx_wrapper": True})
        self.assertEqual(gm(t), checked_arange(t))
        checks = assert_nodes(graphs)
        self.assertGreater(len(checks), 2)
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is not kernel_hop:
                self.assertIsNotNone(node.meta.get("val"), node.format_node())
        # One chain: each check takes the token that the one before it returned.
        tokens = [n for n in checks if n.target is aten._make_dep_token.default]
        self.assertEqual(len(tokens), 1)
        chain = [n for n in checks if n is not tokens[0]]
        for before, after in zip([tokens[0], *chain], chain):
            self.assertIs(after.args[-1], before)

    def test_stripping_removes_the_chain(self):
        t = torch.tensor([3], device=self.device)
        captured = ifx.capture_fx_graphs(checked_arange, t, device=self.device, fullgraph=True)
        (gm,) = captured.graphs
        removed = ifx.strip_runtime_asserts(gm)
        self.assertGreater(removed, 2)
        self.assertEqual(assert_nodes([gm]), [])
        gm.graph.lint()


kernel_hop = torch.ops.higher_order.triton_kernel_wrapper_mutation


ALIGNMENT_CHECK = torch.ops.fx_unbacked.assert_alignment.default


def input_alignment_checks(gm):
    """The placeholders that ``gm`` checks for alignment."""
    checks = gm.graph.find_nodes(op="call_function", target=ALIGNMENT_CHECK)
    return [n.args[0].name for n in checks if n.args[0].op == "placeholder"]


def assumed_aligned():
    """Upstream's decision of which inputs the kernels assume aligned, as it makes it:
    on a GPU, the tensor inputs whose examples are aligned; on CPU it assumes none, so
    there every tensor input is taken as assumed aligned, as a GPU compile takes it."""
    if torch.cuda.is_available():
        return contextlib.nullcontext()
    from torch._inductor import compile_fx

    def every_tensor(inputs, static_input_idxs=()):
        return [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]

    return mock.patch.object(compile_fx, "get_input_idxs_to_check", every_tensor)


class PairOfBranches(torch.nn.Module):
    """Upstream's ``test_cond_multi_inputs_and_outputs`` program (with ``sigmoid`` for
    its ``tanh``, which Triton's interpreter cannot run)."""

    def forward(self, pred, x, y):
        def true_fn(x, y):
            return torch.sigmoid(x), torch.relu(y)

        def false_fn(x, y):
            return tuple(t / 2 for t in true_fn(x, y))

        return torch.cond(pred, true_fn, false_fn, (x, y))


@instantiate_parametrized_tests
class InputAlignmentChecksTest(FxirTestCase):
    """A graph checks the inputs its kernels assume aligned, unless the user's config
    turns alignment checks off (``alignment_asserts=False``): then no such node."""

    @parametrize("alignment_asserts", [True, False])
    def test_aot_graph_checks_its_inputs_as_the_config_says(self, alignment_asserts):
        inputs = [torch.randn(8, device=self.device) for _ in range(2)]
        for pred in (True, False):
            args = (torch.tensor([pred], device=self.device), *inputs)
            ep = torch.export.export(PairOfBranches(), args)
            options = {"fx_wrapper": True, "alignment_asserts": alignment_asserts}
            with torch.no_grad(), assumed_aligned(), ifx.fx_backend(self.device):
                gm = torch._inductor.aot_compile(ep.module(), args, options=options)
            self.assertEqual(gm(*args), PairOfBranches()(*args))
            expected = ["arg0_1", "arg1_1", "arg2_1"] if alignment_asserts else []
            self.assertEqual(sorted(input_alignment_checks(gm)), expected, gm.code)

    @parametrize("alignment_asserts", [True, False])
    def test_compiled_graph_checks_its_inputs_as_the_config_says(self, alignment_asserts):
        def fn(x, y):
            return x[x > 0] * 2, y + 1

        inputs = [
            (self.signed(32, 5), self.signed(8, 3)),
            (self.signed(32, 20), self.signed(8, 6)),
        ]
        with assumed_aligned(), config.patch(alignment_asserts=alignment_asserts):
            graphs = self.run_fx(fn, inputs)
        for gm in graphs:
            tensors = [
                n.name
                for n in gm.graph.find_nodes(op="placeholder")
                if isinstance(n.meta.get("val"), torch.Tensor)
            ]
            expected = sorted(tensors) if alignment_asserts else []
            self.assertEqual(sorted(input_alignment_checks(gm)), expected, gm.code)
