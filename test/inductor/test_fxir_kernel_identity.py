# Owner(s): ["module: inductor"]
"""A graph handed out runs its own kernels: after other compiles, Dynamo resets,
pickling and in a new process; a graph whose kernel is gone fails loudly.

``torch._dynamo.reset()`` empties the kernel side table and hands its indices out
again (torch 2.13+ does it itself; before, the tests empty the table as later
releases do). The graphs' kernel nodes keep upstream's form
(``triton_kernel_wrapper_mutation`` with a ``kernel_idx``); the index is the
kernel's stable identity (``codegen/kernels.py``), and the graph owns its
kernels (``artifact/kernels.py``).
"""

import gc
import operator
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from test_fxir_backend import FxirTestCase, kernel_calls
from torch._higher_order_ops.triton_kernel_wrap import (
    kernel_side_table,
    triton_kernel_wrapper_mutation,
)
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked import runner
from inductor_fx_unbacked.artifact import store
from inductor_fx_unbacked.artifact.kernels import apply_releases
from inductor_fx_unbacked.codegen.kernels import RELEASED, update_side_table
from inductor_fx_unbacked.runner.lowering import lower

ROOT = Path(__file__).parents[2]


def positives_sin(x):
    return x[x > 0].sin() * 2


def positives_cos(x):
    return x[x > 0].cos() + 5


def reset_dynamo_and_kernel_table() -> None:
    """``torch._dynamo.reset()``, which empties the kernel side table on torch 2.13+;
    on earlier releases the table is emptied here, as those releases' users do."""
    torch._dynamo.reset()
    kernel_side_table.reset_table()


def kernel_indices(graphs):
    return sorted({node.kwargs["kernel_idx"] for node in kernel_calls(graphs)})


@instantiate_parametrized_tests
class GraphKeepsItsKernelsTest(FxirTestCase):
    def capture(self, fn, x):
        captured = ifx.capture_fx_graphs(fn, x, device=self.device, fullgraph=True)
        self.assertEqual(captured.outputs, fn(x))
        return captured.graphs[-1]

    def inputs(self):
        return [self.signed(24, n) for n in (5, 17)]

    @parametrize("how", ["call", "forward", "lowered", "graph"])
    def test_capture_a_capture_b_run_a(self, how):
        first = self.capture(positives_sin, self.inputs()[0])
        second = self.capture(positives_cos, self.inputs()[0])
        # Each capture resets Dynamo: the second program's kernels took the table.
        self.assertFalse(set(kernel_indices([first])) & set(kernel_indices([second])))
        run = {
            "call": first,
            "forward": first.forward,
            "lowered": runner.compile_graph(first, "lowered"),
            "graph": runner.compile_graph(first, "graph"),
        }[how]
        for x in self.inputs():
            self.assertEqual(run(x), positives_sin(x))
            self.assertEqual(second(x), positives_cos(x))

    @parametrize("how", ["call", "lowered", "graph"])
    def test_recorded_graph_after_a_reset(self, how):
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            # Static: the graph's only input is x (the inputs share a size).
            compiled = torch.compile(positives_sin, fullgraph=True, dynamic=False)
            compiled(self.inputs()[0])
        (gm,) = graphs
        run = gm if how == "call" else runner.compile_graph(gm, how)
        reset_dynamo_and_kernel_table()
        # Another program now holds the table's first indices.
        self.capture(positives_cos, self.inputs()[1])
        reset_dynamo_and_kernel_table()
        for x in self.inputs():
            self.assertEqual(run(x), positives_sin(x))

    def test_compiled_function_after_other_compiles_and_a_reset(self):
        with ifx.fx_backend(self.device):
            compiled = torch.compile(positives_sin, fullgraph=True, dynamic=True)
            compiled(self.inputs()[0])
            reset_dynamo_and_kernel_table()
            torch.compile(positives_cos, fullgraph=True, dynamic=True)(self.inputs()[0])
        # Dynamo's reset dropped the compiled code; what it compiles again is right.
        for x in self.inputs():
            self.assertEqual(compiled(x), positives_sin(x))

    def test_aot_module_after_another_compile(self):
        x = self.inputs()[0]

        class Sines(torch.nn.Module):
            def forward(self, x):
                return (x.sin() * 2).cos()

        class Cosines(torch.nn.Module):
            def forward(self, x):
                return x.cos() + 5

        modules = {}
        for name, module in (("sines", Sines()), ("cosines", Cosines())):
            ep = torch.export.export(module, (x,))
            with ifx.fx_backend(self.device):
                modules[name] = torch._inductor.aot_compile(
                    ep.module(), (x,), options={"fx_wrapper": True}
                )
            reset_dynamo_and_kernel_table()
        for x in self.inputs():
            self.assertEqual(modules["sines"](x), Sines()(x))
            self.assertEqual(modules["cosines"](x), Cosines()(x))

    def test_stored_artifact_after_a_reset(self):
        gm = self.capture(positives_sin, self.inputs()[0])
        data = store.dumps(gm, "lowered")
        reset_dynamo_and_kernel_table()
        self.capture(positives_cos, self.inputs()[0])
        loaded = store.loads(data, with_values=True)
        self.assertEqual(kernel_indices([loaded.gm]), kernel_indices([gm]))
        for x in self.inputs():
            self.assertEqual(loaded.gm(x), positives_sin(x))
            self.assertEqual(runner.compile_graph(loaded.gm, "lowered")(x), positives_sin(x))

    def test_stored_artifact_in_a_new_process(self):
        gm = self.capture(positives_sin, self.inputs()[0])
        path = Path(self.enterContext(tempfile.TemporaryDirectory())) / "artifact.fxa"
        path.write_bytes(store.dumps(gm, "lowered"))
        x = self.inputs()[1]
        torch.save(x, str(path) + ".x")
        script = textwrap.dedent(
            f"""
            import os, sys
            os.environ.setdefault("TRITON_INTERPRET", "1" if {self.device!r} == "cpu" else "0")
            import torch
            from inductor_fx_unbacked.artifact import store
            from inductor_fx_unbacked import runner
            loaded = store.loads(open({str(path)!r}, "rb").read(), with_values=False)
            x = torch.load({str(path) + ".x"!r})
            expected = x[x > 0].sin() * 2
            torch.testing.assert_close(loaded.gm(x), expected)
            torch.testing.assert_close(runner.compile_graph(loaded.gm, "lowered")(x), expected)
            print("ok")
            """
        )
        paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        result = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertEqual(result.stdout.split()[-1], "ok")

    def test_a_gone_kernel_fails_instead_of_running_another(self):
        gm = self.capture(positives_sin, self.inputs()[0])
        reset_dynamo_and_kernel_table()
        # Another kernel takes the first position; none can take the graph's index.
        kernel_side_table.add_kernel(add_two_kernel)
        # Upstream's lookup fails ("Kernel index ... not found"; a bare assert on 2.10).
        with self.assertRaises(AssertionError):
            gm.forward(self.inputs()[0])
        # Calling the graph puts its own kernels back.
        self.assertEqual(gm(self.inputs()[0]), positives_sin(self.inputs()[0]))

    def test_a_dropped_graph_releases_its_kernels(self):
        gm = self.capture(positives_sin, self.inputs()[0])
        indices = kernel_indices([gm])
        torch._dynamo.reset()  # Dynamo's caches hold the compiled function
        gm(self.inputs()[0])  # the graph puts its kernels back (2.13+ reset emptied the table)
        self.assertTrue(all(i in kernel_side_table.id_to_kernel for i in indices))
        del gm
        gc.collect()
        # Released at the package's next write to the side table: here, fx_backend.
        with ifx.fx_backend(self.device):
            pass
        released = [kernel_side_table.id_to_kernel.get(i) for i in indices]
        self.assertEqual(released, [RELEASED] * len(indices))

    def test_a_release_leaves_upstreams_next_index_unused(self):
        """Upstream numbers its kernels by the table's length: a release that removed
        an entry would give a kernel in use to the next one added."""
        reset_dynamo_and_kernel_table()
        first = kernel_side_table.add_kernel(add_two_kernel)
        gm = self.capture_without_reset(positives_sin, self.inputs()[0])
        del gm
        gc.collect()
        apply_releases()
        second = kernel_side_table.add_kernel(add_three_kernel)
        self.assertEqual(kernel_side_table.get_kernel(first), add_two_kernel)
        self.assertEqual(kernel_side_table.get_kernel(second), add_three_kernel)

    def test_a_graph_collected_inside_upstreams_walk_of_the_side_table(self):
        """A garbage collection inside Inductor's walk of ``id_to_kernel`` (its repro
        string, on every compile) finds a dropped graph: the walk goes on unharmed."""
        gm = self.capture(positives_sin, self.inputs()[0])
        indices = kernel_indices([gm])
        torch._dynamo.reset()
        gm(self.inputs()[0])  # the graph puts its kernels back
        cycle = [gm]
        cycle.append(cycle)  # only a collection frees it
        del gm, cycle
        walked = []
        for kernel_idx in kernel_side_table.id_to_kernel:
            gc.collect()
            walked.append(kernel_idx)
        self.assertTrue(set(indices) <= set(walked))
        apply_releases()
        self.assertEqual([kernel_side_table.id_to_kernel[i] for i in indices], [RELEASED] * 2)

    def test_placing_kernels_while_another_thread_walks_the_table(self):
        """A graph called after a reset puts its kernels back while another thread walks
        the side table, as a compile in that thread does: the walker never sees a
        dict change under it, and the graph runs its own kernels."""
        gm = self.capture(positives_sin, self.inputs()[0])
        for n in range(64):  # a table worth walking
            kernel_side_table.add_constant_args({"n": n})
            kernel_side_table.add_kernel(_numbered_kernel(n))
        errors: list[BaseException] = []
        stop = threading.Event()

        def walk():
            while not stop.is_set():
                try:
                    for _ in kernel_side_table.id_to_kernel:
                        time.sleep(0)
                    for _ in kernel_side_table.constant_args:
                        time.sleep(0)
                except RuntimeError as e:
                    errors.append(e)
                    return

        walker = threading.Thread(target=walk)
        walker.start()
        try:
            for _ in range(30):
                for kernel_idx in kernel_indices([gm]):
                    update_side_table(released_kernels=[kernel_idx])
                for x in self.inputs():
                    self.assertEqual(gm(x), positives_sin(x))
        finally:
            stop.set()
            walker.join()
        self.assertEqual(errors, [])

    def capture_without_reset(self, fn, x):
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            torch.compile(fn, fullgraph=True)(x)
        return graphs[-1]


@triton.jit
def add_two_kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    """A kernel with the argument names of an Inductor pointwise kernel."""
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offsets < xnumel
    tl.store(out_ptr0 + offsets, tl.load(in_ptr0 + offsets, mask=mask) + 2.0, mask=mask)


@triton.jit
def add_three_kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    offsets = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    mask = offsets < xnumel
    tl.store(out_ptr0 + offsets, tl.load(in_ptr0 + offsets, mask=mask) + 3.0, mask=mask)


class _NumberedKernel:
    """A distinct, hashable object for the side table to hold."""

    def __init__(self, n):
        self.n = n


def _numbered_kernel(n):
    return _NumberedKernel(n)


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


class ForeignGraphTest(FxirTestCase):
    def test_a_graph_this_package_did_not_hand_out_runs_what_the_table_holds(self):
        """Another producer's graph names positions in the side table: the runner
        launches what the table holds there, as ``gm.forward`` does."""
        self.capture_something()
        reset_dynamo_and_kernel_table()
        kernel_idx = kernel_side_table.add_kernel(add_two_kernel)
        lowered = lower(hand_written_kernel_graph(kernel_idx, xblock=16))
        for n in (5, 37):
            x = torch.randn(n, device=self.device)
            self.assertEqual(lowered(x, torch.empty_like(x), n), x + 2)

    def capture_something(self):
        x = self.signed(24, 5)
        ifx.capture_fx_graphs(positives_sin, x, device=self.device, fullgraph=True)
