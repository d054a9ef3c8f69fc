# Owner(s): ["module: inductor"]
"""The lowered runner (``inductor_fx_unbacked.runner``) behaves exactly like ``gm.forward``.

Every program is compiled twice through the FX backend, once per runner
(``runner="graph"`` runs ``gm.forward``; ``runner="lowered"``, the default, runs
the lowered copy), and the two must return the same values and raise the same
exceptions with the same messages. The lowered runner must dispatch no
higher-order operator, and must leave the graph it lowers untouched.
"""

import contextlib

import torch
from test_fxir_backend import FxirTestCase, MismatchedOutputSize, positives_times_four
from test_fxir_runtime_asserts import checked_arange, wrong_size, wrong_stride
from torch._higher_order_ops import while_loop
from torch._inductor import config
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.programs import PROGRAMS
from inductor_fx_unbacked.runner.lowering import lower


@torch.library.custom_op("ifx_test::four_per_positive_plus_one", mutates_args=())
def four_per_positive_plus_one(x: torch.Tensor) -> torch.Tensor:
    """Promises a multiple of 4 elements, returns one more."""
    n = int((x > 0).sum())
    return torch.arange(4 * n + 1, device=x.device, dtype=x.dtype)


@four_per_positive_plus_one.register_fake
def _(x):
    return x.new_empty(4 * torch.library.get_ctx().new_dynamic_size())


def count_down(n, x):
    def cond_fn(i, acc):
        return i > 0

    def body_fn(i, acc):
        return i - 1, acc * 2 + 1

    return while_loop(cond_fn, body_fn, (n, x))


@contextlib.contextmanager
def counting_higher_order_calls():
    """Count every call of a higher-order operator inside."""
    calls = []
    original = torch._ops.HigherOrderOperator.__call__

    def counted(self, *args, **kwargs):
        calls.append(self.name())
        return original(self, *args, **kwargs)

    torch._ops.HigherOrderOperator.__call__ = counted
    try:
        yield calls
    finally:
        torch._ops.HigherOrderOperator.__call__ = original


def outcome(fn, args):
    """The result of ``fn(*args)``, or the type and message of what it raised."""
    try:
        return ("returned", fn(*args))
    except Exception as e:  # noqa: BLE001 - the exception is the outcome
        return ("raised", type(e), str(e))


@instantiate_parametrized_tests
class LoweredRunnerTest(FxirTestCase):
    def assert_same_outcomes(self, fn, inputs, dynamic=None):
        outcomes = {}
        for runner in ("graph", "lowered"):
            torch._dynamo.reset()
            with ifx.fx_backend(self.device, runner=runner):
                compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic)
                outcomes[runner] = [outcome(compiled, args) for args in inputs]
        for graph_outcome, lowered_outcome in zip(outcomes["graph"], outcomes["lowered"]):
            self.assertEqual(graph_outcome[0], lowered_outcome[0])
            if graph_outcome[0] == "returned":
                self.assertEqual(lowered_outcome[1], graph_outcome[1])
            else:
                self.assertIs(lowered_outcome[1], graph_outcome[1])
                self.assertEqual(lowered_outcome[2], graph_outcome[2])
        return outcomes["lowered"]

    @parametrize("name", [p.name for p in PROGRAMS])
    def test_baseline_program_matches_the_graph(self, name):
        program = next(p for p in PROGRAMS if p.name == name)
        inputs = program.inputs(self.device, 64)
        outcomes = self.assert_same_outcomes(program.fn, inputs, dynamic=program.dynamic)
        for (kind, value, *_), args in zip(outcomes, inputs):
            self.assertEqual(kind, "returned")
            self.assertEqual(value, program.fn(*args))

    def test_cond_over_duck_sized_inputs(self):
        g = torch.Generator().manual_seed(0)
        inputs = [
            tuple(torch.randn(rows, 20, generator=g).to(self.device) + shift for _ in range(3))
            for rows, shift in ((10, 1), (12, -1))
        ]
        model = MismatchedOutputSize()
        inputs = [(torch.tensor([True], device=self.device), *xs) for xs in inputs]
        self.assert_same_outcomes(model, inputs, dynamic=True)

    def test_while_loop(self):
        inputs = [
            (torch.tensor(3, device=self.device), self.signed(4, 2)),
            (torch.tensor(0, device=self.device), self.signed(4, 3)),
        ]
        self.assert_same_outcomes(count_down, inputs)

    def test_violated_torch_check_raises_the_same(self):
        inputs = [
            (torch.tensor([3], device=self.device),),
            (torch.tensor([9], device=self.device),),
        ]
        outcomes = self.assert_same_outcomes(checked_arange, inputs)
        self.assertEqual([o[0] for o in outcomes], ["returned", "raised"])
        self.assertRegex(outcomes[1][2], r"u\d+ <= 4")

    def test_divide_by_key_violation_raises_the_same(self):
        def fn(x):
            return four_per_positive_plus_one(x) + 1

        (result,) = self.assert_same_outcomes(fn, [(self.signed(8, 3),)])
        self.assertEqual(result[:2], ("raised", RuntimeError))
        self.assertIn("is not divisible by 4", result[2])

    def test_divide_by_key_holds(self):
        self.assert_same_outcomes(
            positives_times_four, [(self.signed(8, 3),), (self.signed(8, 6),)]
        )

    def test_size_and_stride_violations_raise_the_same(self):
        for op in (wrong_stride, wrong_size):
            (result,) = self.assert_same_outcomes(
                lambda x, op=op: op(x) + 1, [(self.signed(6, 3),)]
            )
            self.assertEqual(result[:2], ("raised", AssertionError))

    def test_nan_check_raises_the_same(self):
        def fn(x):
            return (x.log() * 2).sin()

        with config.patch(nan_asserts=True):
            outcomes = self.assert_same_outcomes(fn, [(self.signed(8, 8),), (self.signed(8, 4),)])
        self.assertEqual([o[0] for o in outcomes], ["returned", "raised"])
        self.assertIn("has NaN", outcomes[1][2])

    def test_no_higher_order_operator_is_dispatched(self):
        for fn, args, dynamic in (
            (
                MismatchedOutputSize(),
                (
                    torch.tensor([True], device=self.device),
                    *(torch.randn(10, 20, device=self.device) + 1 for _ in range(3)),
                ),
                True,
            ),
            (count_down, (torch.tensor(3, device=self.device), self.signed(4, 2)), None),
            (PROGRAMS[0].fn, PROGRAMS[0].inputs(self.device, 64)[0], None),
        ):
            dispatched = {}
            for runner in ("graph", "lowered"):
                torch._dynamo.reset()
                with ifx.fx_backend(self.device, runner=runner):
                    compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic)
                    compiled(*args)  # compile outside the count
                    with counting_higher_order_calls() as calls:
                        compiled(*args)
                dispatched[runner] = calls
            self.assertGreater(len(dispatched["graph"]), 0)
            self.assertEqual(dispatched["lowered"], [])

    def test_lowering_leaves_the_graph_untouched(self):
        captured = ifx.capture_fx_graphs(
            MismatchedOutputSize(),
            torch.tensor([True], device=self.device),
            *(torch.randn(10, 20, device=self.device) + 1 for _ in range(3)),
            device=self.device,
            fullgraph=True,
            dynamic=True,
        )
        main = captured.graphs[-1]
        before = [gm.code for gm in captured.graphs]
        lowered = lower(main)
        self.assertEqual([gm.code for gm in captured.graphs], before)
        self.assertIn("cond", main.code)
        self.assertNotIn("triton_kernel_wrapper_mutation", lowered.code)
        self.assertNotIn("torch.ops.higher_order", lowered.code)
        # Kernel launches are named after their kernels.
        self.assertRegex(lowered.code, r"triton_(poi|red|per)_fused_\w+ = ")


def _hand_built_check_graph():
    """``x`` checked against size (1, 4), stride (1, 1), as a lowered graph has it."""
    from inductor_fx_unbacked.runner import checks

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(checks.INPUT_SIZE_STRIDE, (x, [1, 4], [1, 1], "graph input 0 (x)", None))
    graph.output(x)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


class StraightLineTest(FxirTestCase):
    """The straight-line code the runner calls (``inductor_fx_unbacked.runner.straightline``)."""

    def test_repeated_checks_run_once_and_stay_in_the_graph(self):
        from inductor_fx_unbacked.runner.straightline import compile_lowered

        program = next(p for p in PROGRAMS if p.name == "P5")
        inputs = program.inputs(self.device, 64)
        captured = ifx.capture_fx_graphs(program.fn, *inputs[0], device=self.device, fullgraph=True)
        gm = captured.graphs[-1]
        source = compile_lowered(gm).source
        for symbol in range(8):
            self.assertIn(f"'u{symbol} >= 0'", gm.code)
            self.assertIn(f"'0 <= u{symbol}'", gm.code)
            self.assertIn(f"'u{symbol} >= 0'", source)
            self.assertNotIn(f"'0 <= u{symbol}'", source)
        self.assertIn("Eq(u0 + u1 + u2 + u3 + u4 + u5 + u6 + u7, 64)", source)
        # No dependency tokens, no operator dispatch for item().
        self.assertNotIn("_make_dep_token", source)
        # The lengths are Tensor methods, not operator dispatches: one copy of the
        # run of them (runner/items.py).
        self.assertNotIn("ifx_item", source)
        self.assertIn(".tolist()", source)

    def test_input_check_fast_path_defers_to_the_full_check(self):
        from inductor_fx_unbacked.runner.straightline import generate

        gm = _hand_built_check_graph()
        fn = generate(gm)
        # Size-1 dimensions may have any stride: the full check accepts it.
        ok = torch.randn(4, 4)[:1]
        self.assertEqual(ok.stride(), (4, 1))
        self.assertIs(fn(ok), ok)
        self.assertIs(gm.forward(ok), ok)
        wrong = torch.randn(2, 4)
        self.assertEqual(outcome(fn, (wrong,)), outcome(gm.forward, (wrong,)))
        self.assertEqual(outcome(fn, (wrong,))[:2], ("raised", AssertionError))
        self.assertIn("graph input 0 (x): expected size (1, 4)", outcome(fn, (wrong,))[2])

    def test_each_checks_fast_path_holds_only_where_the_check_passes(self):
        """The inlined condition of a check is true only where its operator would not
        raise, so that skipping the operator changes nothing; where it is false, the
        operator decides."""
        from inductor_fx_unbacked.runner import checks

        base = torch.randn(64, device=self.device)
        layouts = [
            (base[:16].view(4, 4), (4, 4), (4, 1)),
            (base[:16].view(4, 4).t(), (4, 4), (4, 1)),
            (base[:16].view(1, 16), (1, 16), (32, 1)),  # size 1: any stride passes
            (base[:12].view(3, 4), (4, 4), (4, 1)),
        ]
        cases = [(checks.SIZE_STRIDE, (*layout, "op")) for layout in layouts]
        if _writes_metadata_checks():
            cases += [
                (checks.TENSOR_METADATA, (*layout, dtype, "op"))
                for layout in layouts
                for dtype in (torch.float32, torch.float64)
            ]
            cases.append((checks.TENSOR_METADATA, (None, (1,), (1,), torch.float32, "op")))
        cases += [
            (checks.ALIGNMENT, (base[start:], alignment, "op"))
            for start in (0, 1, 4, 8)
            for alignment in (16, 4, 0)
        ]
        seen = set()
        for check, args in cases:
            enforced = outcome(check.enforce, args)
            fast = check.passes_fn(*args)
            if fast:
                self.assertEqual(enforced[0], "returned", (check, args))
            # Called as the lowered graph calls it: raises what the operator raises.
            expected = enforced if enforced[0] == "raised" else ("returned", "token")
            self.assertEqual(outcome(check, (*args, "token")), expected, (check, args))
            seen.add((check.name, fast, enforced[0]))
        # Each check is seen passing fast, and raising.
        for name in {check.name for check, _ in cases}:
            self.assertIn((name, True, "returned"), seen)
            self.assertIn((name, False, "raised"), seen)


def _writes_metadata_checks():
    """Torch 2.14+ check an extern output's dtype too (2.10 to 2.13 never write it)."""
    from inductor_fx_unbacked import _compat

    return hasattr(_compat.runtime_utils, "assert_tensor_metadata")
