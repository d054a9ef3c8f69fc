# Owner(s): ["module: inductor"]
"""Symbolic arguments of extern kernels and fallbacks become FX nodes.

Inductor keeps the non-tensor arguments of an extern kernel as traced, so an
unbacked symbol from ``.item()`` reaches the FX node itself; it must be the node
that defines the symbol (or an expression computed from it) instead.
"""

import warnings

import torch
from test_fxir_backend import FxirTestCase
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

import inductor_fx_unbacked as ifx

aten = torch.ops.aten


@torch.library.custom_op("ifx_test::first_rows", mutates_args=())
def first_rows(x: torch.Tensor, bounds: list[int]) -> torch.Tensor:
    """``x[:bounds[0] + bounds[1]]``: a fallback whose list argument holds symbols."""
    return x[: bounds[0] + bounds[1]].clone()


@first_rows.register_fake
def _(x, bounds):
    return x.new_empty(bounds[0] + bounds[1], *x.shape[1:])


def symbolic_leaves(node):
    return [
        leaf
        for leaf in torch.utils._pytree.tree_leaves((node.args, node.kwargs))
        if isinstance(leaf, (torch.SymInt, torch.SymBool)) or hasattr(leaf, "free_symbols")
    ]


@instantiate_parametrized_tests
class ExternKernelSymbolicArgsTest(FxirTestCase):
    def assert_no_raw_symbols(self, graphs, target):
        nodes = [n for gm in graphs for n in gm.graph.nodes if n.target is target]
        self.assertGreater(len(nodes), 0)
        for node in nodes:
            self.assertEqual(symbolic_leaves(node), [], node.format_node())
        return nodes

    @parametrize("op", ["topk", "kthvalue"])
    def test_item_as_extern_kernel_argument(self, op):
        def fn(x, k):
            n = k.item()
            torch._check(n >= 1)
            torch._check(n <= x.shape[0])
            if op == "topk":
                return torch.topk(x, n).values * 2
            return torch.kthvalue(x, n).values * 2

        inputs = [
            (self.signed(10, 5), torch.tensor([3], device=self.device)),
            (self.signed(10, 7, seed=1), torch.tensor([7], device=self.device)),
        ]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            graphs = self.run_fx(fn, inputs)
        self.assertEqual([str(w.message) for w in caught if "Raw SymInt" in str(w.message)], [])
        (node,) = self.assert_no_raw_symbols(
            graphs, aten.topk.default if op == "topk" else aten.kthvalue.default
        )
        k_node = node.args[1]
        self.assertEqual(str(k_node.meta["unbacked_symbol"]), "u0")

    def test_expression_in_a_list_argument(self):
        def fn(x, a, b):
            return first_rows(x, [a.item(), b.item() * 2]) + 1

        x = self.signed(12, 6).reshape(6, 2)
        inputs = [
            (x, torch.tensor([1], device=self.device), torch.tensor([1], device=self.device)),
            (x, torch.tensor([2], device=self.device), torch.tensor([2], device=self.device)),
        ]
        graphs = self.run_fx(fn, inputs)
        (node,) = self.assert_no_raw_symbols(graphs, torch.ops.ifx_test.first_rows.default)
        first, second = node.args[1]
        self.assertEqual(str(first.meta["unbacked_symbol"]), "u0")
        self.assertIsInstance(second, torch.fx.Node)  # 2*u1, computed from u1's node

    @parametrize("runner", ["lowered", "graph"])
    def test_symbolic_keyword_argument(self, runner):
        """``output_size`` is keyword-only: its symbol becomes the node that defines it
        before the kernel's node is made (FX runs the operator on fake values then)."""

        def fn(repeats):
            return torch.repeat_interleave(repeats, output_size=repeats.sum().item()) * 2

        inputs = [
            (torch.tensor([1, 0, 2, 3], device=self.device),),
            (torch.tensor([4, 4, 0, 1, 2, 5], device=self.device),),
        ]
        with ifx.fx_backend(self.device, runner=runner), ifx.recording_graphs() as graphs:
            compiled = torch.compile(fn, fullgraph=True)
            for args in inputs:
                self.assertEqual(compiled(*args), fn(*args))
        for node in self.assert_no_raw_symbols(graphs, aten.repeat_interleave.Tensor):
            output_size = node.kwargs["output_size"]
            self.assertIsInstance(output_size, torch.fx.Node)
            self.assertIsNotNone(output_size.meta.get("unbacked_symbol"), node.format_node())


@instantiate_parametrized_tests
class FallbackKeywordArgsTest(FxirTestCase):
    @parametrize("dynamic", [False, True])
    def test_keyword_only_argument_of_a_fallback(self, dynamic):
        def fn(x):
            values, order = torch.sort(x[x > 0], stable=True)
            return values * 2, order

        # Inductor sorts in a Triton kernel only sizes provably below the int16
        # maximum; 40000 elements take the aten.sort.stable fallback. Values rounded
        # to one decimal tie, so only a stable sort gives eager's order.
        inputs = [(self.signed(40000, n, seed=n).round(decimals=1),) for n in (1500, 30000)]
        graphs = self.run_fx(fn, inputs, dynamic=dynamic)
        (node,) = [n for gm in graphs for n in gm.graph.nodes if n.target is aten.sort.stable]
        self.assertIs(node.kwargs["stable"], True, node.format_node())
