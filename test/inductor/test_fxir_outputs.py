# Owner(s): ["module: inductor"]
"""Graph outputs that are not tensors: every form the Python wrapper returns.

Inductor hands a non-tensor graph output to the wrapper as a
``ShapeAsConstantBuffer`` whose expression is a Python ``int`` (a size that
lowering specialized, e.g. to a weight's size), a sympy expression over backed or
unbacked symbols, or a sympy relational (a ``SymBool``); a missing gradient is a
``NoneAsConstantBuffer``. Each program runs through both runners, on inputs whose
data-dependent sizes differ, and must return what eager returns, with the same
Python types.
"""

import torch
from test_fxir_backend import FxirTestCase
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

import inductor_fx_unbacked as ifx

RUNNERS = ("lowered", "graph")


def output_args(gm):
    """The flat arguments of a graph's output node."""
    (output,) = [node for node in gm.graph.nodes if node.op == "output"]
    return torch.utils._pytree.tree_leaves(output.args)


@instantiate_parametrized_tests
class GraphOutputFormsTest(FxirTestCase):
    def compile_and_compare(self, fn, inputs, runner, *, dynamic=True, train=False):
        """Compile ``fn`` as users do (graph breaks allowed), compare with eager on
        every input (values and types; gradients too with ``train``), return the graphs."""
        with ifx.fx_backend(self.device, runner=runner), ifx.recording_graphs() as graphs:
            compiled = torch.compile(fn, dynamic=dynamic)
            for args in inputs:
                if train:
                    args = [a.detach().requires_grad_() for a in args]
                    expected_args = [a.detach().requires_grad_() for a in args]
                    got, expected = compiled(*args), fn(*expected_args)
                    got.backward()
                    expected.backward()
                    self.assertEqual([a.grad for a in args], [a.grad for a in expected_args])
                else:
                    got, expected = compiled(*args), fn(*args)
                self.assertEqual(got, expected)
                self.assertEqual(
                    [type(v) for v in torch.utils._pytree.tree_leaves(got)],
                    [type(v) for v in torch.utils._pytree.tree_leaves(expected)],
                )
        self.assertGreater(len(graphs), 0)
        self.check_meta(graphs)
        return graphs

    def rows(self, n, positive, seed=0):
        """An (n, 4) input whose first column has ``positive`` positive entries."""
        x = torch.randn(n, 4, generator=torch.Generator().manual_seed(seed))
        x[:, 0] = self.signed(n, positive, seed=seed).cpu()
        return x.to(self.device)

    @parametrize("runner", RUNNERS)
    def test_size_specialized_by_a_weight_is_a_python_int(self, runner):
        linear = torch.nn.Linear(4, 3, bias=False, device=self.device)

        def fn(x):
            kept = x[x[:, 0] > 0]
            return linear(kept), kept.shape[-1]

        graphs = self.compile_and_compare(fn, [(self.rows(6, 2),), (self.rows(9, 7),)], runner)
        # The feature size is the weight's, 4: the FX graph returns the constant.
        self.assertIn(4, [arg for arg in output_args(graphs[0]) if type(arg) is int])

    @parametrize("runner", RUNNERS)
    def test_size_expressions_and_constants(self, runner):
        def fn(x):
            return x.nonzero(), x.shape[0] * 2 + 1, x.shape[0] > 3, 64

        graphs = self.compile_and_compare(fn, [(self.signed(5, 2),), (self.signed(8, 6),)], runner)
        # 2*s0 + 1 and s0 > 3 are computed in the graph from the size symbol.
        symbolic = [
            type(arg.meta["val"]).__name__
            for arg in output_args(graphs[0])
            if isinstance(arg, torch.fx.Node) and not isinstance(arg.meta["val"], torch.Tensor)
        ]
        self.assertEqual(symbolic, ["SymInt", "SymBool"])

    @parametrize("runner", RUNNERS)
    @parametrize("dynamic", [False, True])
    def test_unbacked_expressions(self, runner, dynamic):
        def fn(x):
            count = x.nonzero().shape[0]
            return count * 2 + 1, count > 2, x.to(torch.int64).sum().item() - count

        inputs = [(torch.tensor([3, 0, 1, 0, 2]),), (torch.tensor([0, 0, 5, 0, 0, 0]),)]
        inputs = [tuple(a.to(self.device) for a in args) for args in inputs]
        with torch._dynamo.config.patch(capture_scalar_outputs=True):
            graphs = self.compile_and_compare(fn, inputs, runner, dynamic=dynamic)
        outputs = output_args(graphs[0])
        self.assertEqual(len(outputs), 3)
        self.assertTrue(all(isinstance(arg, torch.fx.Node) for arg in outputs), outputs)
        defined = {
            node.meta["unbacked_symbol"]
            for node in graphs[0].graph.nodes
            if node.meta.get("unbacked_symbol") is not None
        }
        self.assertEqual(len(defined), 2, defined)

    @parametrize("runner", RUNNERS)
    def test_none_and_symbol_outputs_of_a_training_step(self, runner):
        linear = torch.nn.Linear(4, 3, device=self.device)

        def fn(x, scale):
            kept = x[x[:, 0] > 0]
            return (linear(kept) * 2).sum() + kept.shape[0]

        scale = torch.ones(1, device=self.device)
        graphs = self.compile_and_compare(
            fn, [(self.rows(6, 2), scale), (self.rows(9, 7), scale)], runner, train=True
        )
        # The forward saves the unbacked row count for the backward, which
        # returns None for the unused ``scale`` and for the saved symbols.
        forward, backward = graphs[0], graphs[1]
        saved = [
            str(arg.meta["val"])
            for arg in output_args(forward)
            if isinstance(arg, torch.fx.Node) and isinstance(arg.meta["val"], torch.SymInt)
        ]
        self.assertTrue(any(name.startswith("u") for name in saved), saved)
        self.assertIn(None, output_args(backward))


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
