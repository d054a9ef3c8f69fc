# Owner(s): ["module: inductor"]
"""Upstream's way of counting Triton kernels, over a sequence of compiles in one process.

Upstream's ``test_fxir_backend.py`` patches ``FxConverter.generate`` on the class
while it compiles, and counts ``triton_kernel_wrapper_mutation`` nodes over the
graphs that ``generate`` returned. Its tests run one after another in one
process, with Inductor's FX graph cache and AOTAutograd's cache on. These tests
compile upstream's programs in that order, twice over, with the overlay enabled
the ways a process can have it (once for the whole process, as a ``conftest.py``
does, or by ``fx_backend`` around each compile, inside upstream's patch), and
require one ``generate`` per compiled graph and upstream's kernel counts each
time, whatever was compiled before.
"""

import contextlib
import dataclasses
import unittest
from collections.abc import Callable

import torch
from torch._higher_order_ops.triton_kernel_wrap import triton_kernel_wrapper_mutation
from torch._inductor import config
from torch._inductor.codegen import common
from torch._inductor.codegen.triton import TritonScheduling
from torch._inductor.codegen.wrapper_fxir import FxConverter, WrapperFxCodegen
from torch._inductor.runtime.triton_heuristics import CachingAutotuner
from torch._inductor.test_case import TestCase as InductorTestCase

import inductor_fx_unbacked as ifx

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

#: Upstream's ``test_config`` in ``test_fxir_backend.py``.
UPSTREAM_TEST_CONFIG = {
    "compile_threads": 1,
    "alignment_asserts": False,
    "size_asserts": False,
    "scalar_asserts": False,
    "nan_asserts": False,
}


@contextlib.contextmanager
def generated_graphs():
    """Upstream's capture: every graph ``FxConverter.generate`` returns inside."""
    graphs = []
    original = FxConverter.generate

    def generate(self):
        gm = original(self)
        graphs.append(gm)
        return gm

    with unittest.mock.patch.object(FxConverter, "generate", generate):
        yield graphs


def kernel_count(gm):
    return len(gm.graph.find_nodes(op="call_function", target=triton_kernel_wrapper_mutation))


@dataclasses.dataclass
class Compile:
    """One of upstream's compiles: ``run(device)`` compiles and calls it once, and
    returns a check to run afterwards (told whether anything was generated);
    ``kernels`` are the Triton kernels of each graph, by device, in the order
    ``generate`` produces them."""

    name: str
    run: Callable[[str], Callable[[], None]]
    kernels: dict[str, list[int]]


def compile_and_check(fn, args):
    compiled = torch.compile(fn)
    compiled(*args)
    return lambda generated: torch.testing.assert_close(compiled(*args), fn(*args))


def add(device):
    return compile_and_check(torch.add, [torch.randn(8, device=device) for _ in range(2)])


def multiple_kernels(device):
    def foo(x, y):
        return x.sum() + y.sum()

    return compile_and_check(foo, [torch.randn(n, device=device) for n in (517, 1029)])


def autotune_at_compile_time(device):
    # Upstream's test_autotune: its patch of CachingAutotuner.run must see a call.
    original_run = CachingAutotuner.run
    called = []

    def run(*args, **kwargs):
        called.append(True)
        return original_run(*args, **kwargs)

    with (
        config.patch({"triton.autotune_at_compile_time": True}),
        unittest.mock.patch.object(CachingAutotuner, "run", run),
    ):
        check = compile_and_check(torch.mul, [torch.randn(8, device=device) for _ in range(2)])

    def check_tuned(generated):
        # A graph served from the cache was tuned when it was generated.
        assert called or not generated, "compile-time autotuning did not run"
        check(generated)

    return check_tuned


def compile_exported(device):
    # Upstream's test_export_const_placeholder: torch._inductor.compile, no Dynamo.
    class Module(torch.nn.Module):
        def forward(self, x, y):
            return x - y

    args = (torch.randn(8, device=device), 1.5)
    module = torch.export.export(Module(), args).module()
    torch._inductor.compile(module, args)
    return lambda generated: None


def extern(device):
    def foo(x, y):
        return x @ y + y.sum()

    return compile_and_check(foo, [torch.randn(s, device=device) for s in [(129, 129), (129, 1)]])


def backward(device):
    x = torch.ones(5, device=device)
    y = torch.zeros(3, device=device)
    w = torch.randn(5, 3, requires_grad=True, device=device)
    b = torch.randn(3, requires_grad=True, device=device)

    def loss_fn(z, y):
        return torch.nn.functional.binary_cross_entropy_with_logits(z, y)

    def foo(x, y):
        # Upstream's test_backward: backward() inside the compiled function.
        z = torch.matmul(x, w) + b
        loss = loss_fn(z, y)
        loss.backward()
        return w.grad, b.grad

    torch.compile(foo)(x, y)

    def check(generated):
        compiled_grads = [t.grad.clone() for t in (w, b)]
        for t in (w, b):
            t.grad = None
        foo(x, y)
        torch.testing.assert_close(compiled_grads, [w.grad, b.grad])

    return check


#: Upstream's order (unittest sorts by name): autotune before backward, export
#: before extern. Kernels per graph are upstream's expectations on the GPU (torch
#: 2.11: the backward's forward graph has 2, its backward graph 1); on CPU, the
#: counts the same programs have when compiled alone.
SEQUENCE = [
    Compile("add", add, {"cuda": [1], "cpu": [1]}),
    Compile("multiple_kernels", multiple_kernels, {"cuda": [2], "cpu": [2]}),
    Compile("autotune_at_compile_time", autotune_at_compile_time, {"cuda": [1], "cpu": [1]}),
    Compile("backward", backward, {"cuda": [2, 1], "cpu": [1, 2]}),
    Compile("compile_exported", compile_exported, {"cuda": [1], "cpu": [1]}),
    Compile("extern", extern, {"cuda": [1], "cpu": [1]}),
]


class GenerateCountTest(InductorTestCase):
    """Caches on (``InductorTestCase``: FX graph cache, AOTAutograd cache, a
    fresh cache dir per test), Dynamo reset before each compile, as between
    upstream's tests."""

    device = DEVICE

    def setUp(self):
        super().setUp()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(config.patch(UPSTREAM_TEST_CONFIG))
        # Not under test: pad_mm decides by benchmarking at compile time, and on a
        # loaded GPU a small mm can come out faster padded, which adds two
        # constant_pad_nd kernels to the graphs of the programs with a matmul
        # (backward's forward graph 4 instead of 2, extern's 3 instead of 1).
        self._stack.enter_context(config.patch(shape_padding=False))
        was_enabled = ifx.is_enabled()
        self._stack.callback(ifx.enable if was_enabled else ifx.disable)

    def tearDown(self):
        self._stack.close()
        super().tearDown()

    def backend(self):
        """The FX backend for the device, as upstream registers it: upstream's own
        codegen on the GPU, this package's interpreter codegen on CPU."""
        if self.device == "cuda":
            stack = contextlib.ExitStack()
            common.init_backend_registration()
            saved = common.device_codegens.get("cuda")
            common.register_backend_for_device("cuda", TritonScheduling, WrapperFxCodegen)
            stack.callback(common.device_codegens.__setitem__, "cuda", saved)
            return stack
        return ifx.fx_backend(self.device, runner="graph")

    def run_sequence(self, compile_one):
        """Every step twice, in one cache dir. The first time each graph is
        generated once, with upstream's kernel counts. The second time the cache
        may serve it (this package's codegen stores FX artifacts): then nothing is
        generated, and the graphs handed to ``recording_graphs`` still have those
        counts; never is a graph generated twice or with other kernels."""
        expected_by_step = {step.name: step.kernels[self.device] for step in SEQUENCE}
        for round_ in (1, 2):
            for step in SEQUENCE:
                torch._dynamo.reset()
                with ifx.recording_graphs() as recorded, generated_graphs() as generated:
                    check = compile_one(step)
                expected = expected_by_step[step.name]
                where = f"round {round_}, {step.name}"
                counts = [kernel_count(gm) for gm in generated]
                if round_ == 1 or counts or not recorded:
                    self.assertEqual(counts, expected, f"{where}: kernels per generated graph")
                if recorded:
                    recorded_counts = [kernel_count(gm) for gm in recorded]
                    self.assertEqual(recorded_counts, expected, f"{where}: recorded graphs")
                check(generated=bool(generated))

    def test_overlay_enabled_for_the_process(self):
        """As a conftest enables it: once, before every compile."""
        ifx.enable()
        with self.backend():
            self.run_sequence(lambda step: step.run(self.device))

    def test_overlay_enabled_by_fx_backend_inside_the_patch(self):
        """``fx_backend`` enables the overlay around each compile, inside upstream's
        patch of ``generate``, and disables it again on exit."""
        if self.device == "cuda":
            self.skipTest("fx_backend registers this package's codegen, not upstream's")
        ifx.disable()

        def compile_one(step):
            with ifx.fx_backend(self.device, runner="graph"):
                return step.run(self.device)

        self.run_sequence(compile_one)
        self.assertFalse(ifx.is_enabled())
        self.assertIs(vars(FxConverter)["generate"], self.upstream[FxConverter, "generate"])

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        was_enabled = ifx.is_enabled()
        ifx.disable()
        cls.upstream = {(FxConverter, "generate"): vars(FxConverter)["generate"]}
        if was_enabled:
            ifx.enable()


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
