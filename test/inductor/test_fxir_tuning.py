# Owner(s): ["module: inductor"]
"""The lowered runner's first call of a kernel is its autotuner's own (``runner/tuning.py``).

Each program is compiled once and called on inputs whose data-dependent sizes
differ. On the first call, every kernel with several configs is tuned by the
autotuner's ``run``: each config benchmarked on clones of the mutated arguments,
``reset_to_zero`` arguments reset before each config and once more after the
last, then the winner launched on the real arguments. Every call must give
eager's result and leave the inputs as eager leaves them. The kernels: a user
``@triton.autotune`` kernel that adds atomically into a ``reset_to_zero``
output, an Inductor kernel that mutates a graph input, and an Inductor kernel
that adds atomically (``index_put_`` with ``accumulate=True``).
``max_autotune_pointwise`` gives Inductor's pointwise kernels several configs.

On a GPU the kernels' own precompiled launchers are tuned. In the CPU mode
Triton's interpreter compiles nothing and the autotuner never tunes, so there
the captured graph's autotuners get, per config, a launcher that runs the
interpreted kernel with that config, as a precompiled launcher runs its binary;
the autotuner that tunes among them, the lowering and the straight-line code are
the real ones.
"""

import collections
import contextlib
import dataclasses
import types
import unittest
import unittest.mock
from typing import Any

import torch
from programs import signs
from test_fxir_backend import FxirTestCase
from torch._inductor import config
from torch._inductor.runtime.triton_heuristics import CachingAutotuner
from torch._inductor.utils import fresh_cache
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize
from user_kernels import autotuned_atomic_sum_over_mask

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked import _compat
from inductor_fx_unbacked.artifact.kernels import owned_kernels
from inductor_fx_unbacked.integration.cpu_mode import interpreter_driver
from inductor_fx_unbacked.runner.straightline import compile_lowered

requires_gpu = unittest.skipUnless(torch.cuda.is_available(), "precompiled launchers need a GPU")
cpu_mode_only = unittest.skipIf(
    torch.cuda.is_available(), "the CPU mode runs on machines without a GPU"
)


def add_one_in_place_then_select(x):
    x.add_(1)
    return x[x > 1.5] * 2


def accumulate_positives_into_bins(x):
    kept = x[x > 0]
    bins = (kept * 8).to(torch.int64) & 7
    return torch.zeros(8, device=x.device).index_put_((bins,), kept, accumulate=True)


def scale_both_selections(x, y):
    return x[x > 0] * 2, y[y < 0] * 2


def two_inputs(device):
    return [(x, y) for (x,), (y,) in zip(signs(5, 40, n=256)(device), signs(90, 7, n=256)(device))]


def launched_twice(kernel):
    return kernel.nodes == 2


#: name: (program, inputs, which of its kernels must be tuned on the first call).
#: Inputs of 256 elements: Inductor gives smaller kernels one config only.
PROGRAMS = {
    "user_kernel_resetting_its_output": (
        autotuned_atomic_sum_over_mask,
        signs(4, 15, 0),
        lambda kernel: kernel.tuner.fn.__name__ == "autotuned_atomic_sum",
    ),
    "kernel_mutating_a_graph_input": (
        add_one_in_place_then_select,
        signs(50, 120, 3, n=256),
        # It reads x as in_ptr0 and writes x + 1 back into it.
        lambda kernel: "in_ptr0" in kernel.tuner.mutated_arg_names,
    ),
    "kernel_adding_atomically": (
        accumulate_positives_into_bins,
        signs(50, 120, 3, n=256),
        lambda kernel: "tl.atomic_add(" in kernel.source,
    ),
}


def clones(args):
    return tuple(arg.clone() for arg in args)


class InterpretedLauncher:
    """A launcher of one config that runs the interpreted kernel with that config:
    ``launcher(*launcher_args, stream=...)``, parameters as upstream's interpreter
    path reads them (``_interpret_args_grid``: the signature without the config's
    kwargs, then the extra launcher arguments)."""

    n_spills = n_regs = shared = 0
    cache_hash = None
    store_cubin = False

    def __init__(self, tuner, config, launched):
        self.tuner = tuner
        self.config = config
        self.launched = launched
        names = [name for name in tuner.triton_meta["signature"] if name not in config.kwargs]
        self.def_args = [*names, *tuner.inductor_meta.get("extra_launcher_args", ())]

    def __call__(self, *launcher_args, stream):
        self.launched.append((self.tuner, self.config))
        kernel_args, grid = self.tuner._interpret_args_grid(launcher_args, self.config)
        self.tuner.fn[grid](*kernel_args, **self.config.kwargs)


@contextlib.contextmanager
def interpreted_launchers(tuners):
    """Give each autotuner one compile result per config, whose launcher runs the
    interpreted kernel, and let it tune (``triton_interpret`` runs the first
    config only). Yields the launches, ``(autotuner, config)`` in order; the
    autotuners are restored after."""
    launched = []
    saved = [(t, t.compile_results, t.launchers, t.triton_interpret) for t in tuners]
    for tuner in tuners:
        tuner.compile_results = [
            types.SimpleNamespace(
                config=config,
                make_launcher=lambda t=tuner, c=config: InterpretedLauncher(t, c, launched),
            )
            for config in tuner.configs
        ]
        tuner.launchers = []
        tuner.triton_interpret = False
    try:
        yield launched
    finally:
        for tuner, results, launchers, interpret in saved:
            tuner.compile_results, tuner.launchers, tuner.triton_interpret = (
                results,
                launchers,
                interpret,
            )


@contextlib.contextmanager
def benchmarking():
    """Records each autotuner that benchmarks its configs; the call goes through."""
    with unittest.mock.patch.object(
        CachingAutotuner,
        "benchmark_all_configs",
        autospec=True,
        side_effect=CachingAutotuner.benchmark_all_configs,
    ) as spy:
        yield spy


#: A kernel of a graph: its autotuner, its module's source, how many nodes launch it.
Kernel = collections.namedtuple("Kernel", "tuner source nodes")


def kernels_of(graphs):
    found = {}
    for gm in graphs:
        owned = owned_kernels(gm)
        for node in gm.graph.nodes:
            if node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation:
                entry = owned.triton[node.kwargs["kernel_idx"]]
                nodes = found[id(entry.tuner)].nodes if id(entry.tuner) in found else 0
                found[id(entry.tuner)] = Kernel(entry.tuner, entry.source.module_code, nodes + 1)
    return list(found.values())


@dataclasses.dataclass
class Calls:
    """What calling a compiled program on each of its inputs did."""

    kernels: list[Kernel]
    #: Per call, each autotuner that benchmarked its configs.
    benchmarked: list[list[Any]]
    #: Per call, each launch as (autotuner, config): the CPU mode's launchers only.
    launches: list[list[tuple[Any, Any]]]
    #: The config of the launcher each autotuner settled on, by its id, after the calls.
    winners: dict[int, Any] = dataclasses.field(default_factory=dict)

    def settle(self) -> None:
        for kernel in self.kernels:
            launcher = _compat.sole_launcher(kernel.tuner)
            self.winners[id(kernel.tuner)] = None if launcher is None else launcher.config


@instantiate_parametrized_tests
class FirstCallTuningTest(FxirTestCase):
    def setUp(self):
        super().setUp()
        # A kernel tuned before (in memory, or in the autotune cache on disk) would
        # come with its winner only.
        self._stack.enter_context(fresh_cache())
        self._stack.enter_context(
            config.patch(max_autotune_pointwise=True, coordinate_descent_tuning=False)
        )

    @cpu_mode_only
    @parametrize("name", list(PROGRAMS))
    def test_first_call_tunes_and_every_call_equals_eager_cpu_mode(self, name):
        fn, inputs, is_target = PROGRAMS[name]
        self.check_first_call_tuning(fn, inputs, is_target)

    @requires_gpu
    @parametrize("name", list(PROGRAMS))
    def test_first_call_tunes_and_every_call_equals_eager_gpu(self, name):
        self.check_first_call_tuning(*PROGRAMS[name])

    @cpu_mode_only
    def test_a_kernel_launched_twice_tunes_once_and_both_launches_use_the_winner_cpu_mode(self):
        self.check_first_call_tuning(scale_both_selections, two_inputs, launched_twice)

    @requires_gpu
    def test_a_kernel_launched_twice_tunes_once_gpu(self):
        self.check_first_call_tuning(scale_both_selections, two_inputs, launched_twice)

    def check_first_call_tuning(self, fn, inputs, is_target):
        """``fn`` on each of ``inputs(device)`` equals eager, and its kernels that
        ``is_target`` picks are tuned on the first call only; in the CPU mode, later
        calls launch the winners only."""
        if self.device == "cpu":
            calls = self.calls_in_cpu_mode(fn, inputs(self.device))
        else:
            calls = self.calls_on_gpu(fn, inputs(self.device))
        self.assert_tuned_on_the_first_call_only(calls, is_target)
        if calls.launches:
            self.assert_later_calls_launch_the_winner(calls)

    # Running.

    def call_and_compare(self, fn, args, compiled):
        eager_args, compiled_args = clones(args), clones(args)
        # Eager autotuning of a user kernel benchmarks through Triton's driver.
        with interpreter_driver() if self.device == "cpu" else contextlib.nullcontext():
            expected = fn(*eager_args)
        self.assertEqual(compiled(*compiled_args), expected)
        self.assertEqual(compiled_args, eager_args)

    def calls_in_cpu_mode(self, fn, inputs):
        """The lowered runner of ``fn``'s graph, with interpreted launchers for the
        autotuners of several configs, called on every input."""
        captured = ifx.capture_fx_graphs(fn, *clones(inputs[0]), device="cpu", fullgraph=True)
        (gm,) = captured.graphs
        calls = Calls(kernels_of([gm]), [], [])
        several = [kernel.tuner for kernel in calls.kernels if len(kernel.tuner.configs) > 1]
        with interpreted_launchers(several) as launched, benchmarking() as spy:
            run = compile_lowered(gm)
            for args in inputs:
                spy.reset_mock()
                launched.clear()
                self.call_and_compare(fn, args, run)
                calls.benchmarked.append([call.args[0] for call in spy.call_args_list])
                calls.launches.append(list(launched))
            calls.settle()
        return calls

    def calls_on_gpu(self, fn, inputs):
        """``fn`` compiled by the FX backend, called on every input."""
        benchmarked = []
        with ifx.fx_backend("cuda"), ifx.recording_graphs() as graphs, benchmarking() as spy:
            compiled = torch.compile(fn, fullgraph=True)
            for args in inputs:
                spy.reset_mock()
                self.call_and_compare(fn, args, compiled)
                benchmarked.append([call.args[0] for call in spy.call_args_list])
        calls = Calls(kernels_of(graphs), benchmarked, [])
        calls.settle()
        return calls

    # What must hold.

    def assert_tuned_on_the_first_call_only(self, calls, is_target):
        """The target kernels benchmarked on the first call; no autotuner twice, none
        later, and each that did settled on one launcher."""
        first, *later = calls.benchmarked
        targets = [kernel.tuner for kernel in calls.kernels if is_target(kernel)]
        self.assertTrue(targets, f"no such kernel among {calls.kernels}")
        for tuner in targets:
            self.assertIn(tuner, first, f"{tuner.fn.__name__} was not tuned on the first call")
        self.assertEqual(len({id(tuner) for tuner in first}), len(first))
        self.assertEqual(later, [[] for _ in later])
        for tuner in first:
            self.assertIsNotNone(calls.winners[id(tuner)])

    def assert_later_calls_launch_the_winner(self, calls):
        """Every config ran on the first call; later calls launch the winner only, once
        per node."""
        for kernel in calls.kernels:
            if kernel.tuner not in calls.benchmarked[0]:
                continue
            launched_first = {id(c) for t, c in calls.launches[0] if t is kernel.tuner}
            self.assertEqual(launched_first, {id(c) for c in kernel.tuner.configs})
            winner = calls.winners[id(kernel.tuner)]
            for launches in calls.launches[1:]:
                configs = [c for t, c in launches if t is kernel.tuner]
                self.assertEqual(configs, [winner] * kernel.nodes)

    @requires_gpu
    def test_a_call_with_new_sizes_compiles_nothing_gpu(self):
        """A reduction over an unbacked number of rows: tuned among its precompiled
        configs on the first call; a call with another number of rows launches the
        winner, compiling and tuning nothing."""
        import triton
        from triton.runtime.jit import JITFunction

        def fn(x):
            return x[x[:, 0] > 0].sum(dim=0)

        x = torch.randn(4096, 512, device="cuda")
        with (
            ifx.fx_backend("cuda"),
            benchmarking() as tuned,
            unittest.mock.patch.object(
                JITFunction, "_do_compile", autospec=True, side_effect=JITFunction._do_compile
            ) as jit_compiles,
            unittest.mock.patch.object(triton, "compile", side_effect=triton.compile) as compiles,
        ):
            compiled = torch.compile(fn, fullgraph=True)
            compiled(x)
            self.assertGreater(tuned.call_count, 0)
            for spy in (tuned, jit_compiles, compiles):
                spy.reset_mock()
            result = compiled(-x)
        self.assertEqual(result, fn(-x), atol=1e-3, rtol=1e-4)
        self.assertEqual(
            (tuned.call_count, jit_compiles.call_count, compiles.call_count), (0, 0, 0)
        )

    @requires_gpu
    def test_compile_time_tuning_winner_is_the_config_in_the_graph_gpu(self):
        """The kernel node's block sizes are those of the launcher that compile-time
        tuning kept, which the runner then calls. (Kernels over an unbacked size are
        not tuned at compile time, so these have none.)"""

        def fn(x):
            return x.sin() * 2, (x > 0).sum().item()

        x = torch.randn(1 << 16, device="cuda")
        with config.patch({"triton.autotune_at_compile_time": True}):
            graphs = self.run_fx(fn, [(x,), (-x,)])
        checked = 0
        for gm in graphs:
            owned = owned_kernels(gm)
            for node in gm.graph.nodes:
                if node.target is not torch.ops.higher_order.triton_kernel_wrapper_mutation:
                    continue
                launcher = _compat.sole_launcher(owned.tuner(node.kwargs["kernel_idx"]))
                call_kwargs = node.kwargs["kwargs"]
                for name, value in launcher.config.kwargs.items():
                    self.assertEqual(call_kwargs[name], value, name)
                checked += 1
        self.assertGreater(checked, 0)


class ChosenConfigTest(unittest.TestCase):
    """``_compat.chosen_config``: the config a graph records for a kernel."""

    @staticmethod
    def tuner(results, launchers):
        return types.SimpleNamespace(
            compile_results=[types.SimpleNamespace(config=c) for c in results],
            launchers=[types.SimpleNamespace(config=c) for c in launchers],
        )

    def test_after_tuning_the_kept_launchers_config(self):
        # Tuning on torch 2.10 keeps every compile result.
        self.assertEqual(_compat.chosen_config(self.tuner(["a", "b"], ["b"])), "b")
        # Coordinate descent keeps a launcher of a config no compile result has.
        self.assertEqual(_compat.chosen_config(self.tuner(["a"], ["a, descended"])), "a, descended")

    def test_before_tuning_the_first_compile_results_config(self):
        self.assertEqual(_compat.chosen_config(self.tuner(["a", "b"], ["a", "b"])), "a")
        self.assertEqual(_compat.chosen_config(self.tuner(["a", "b"], [])), "a")
