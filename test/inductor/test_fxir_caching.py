"""The FX backend with Inductor's caches on, as users run it: fresh cache dirs per test.

Inductor's FX graph cache and AOTAutograd's cache must never hand the Python
wrapper's artifact to the FX backend or the other way round, and an FX artifact
stored by one process must start the next one warm: served from the cache, its
FX graphs recorded again, run by the lowered runner. Each direction is tested in
one process and across processes (``cache_scenario.py`` run as a script).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import time
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.artifact import kernels as artifact_kernels
from inductor_fx_unbacked.artifact.identity import package_hash
from inductor_fx_unbacked.integration import caches

sys.path.insert(0, str(Path(__file__).parent))
import cache_scenario  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.caches_on


@pytest.fixture
def cache_dirs(tmp_path):
    """Fresh Inductor and Triton cache dirs, for this process and the ones it starts.

    Inductor's ``fresh_cache`` also clears the in-memory caches that remember the
    cache dir (torch 2.10 keeps it after the environment changes).
    """
    from torch._inductor.utils import fresh_cache

    with fresh_cache(dir=str(tmp_path)):
        yield
    torch._dynamo.reset()


def run_in_new_process(scenario: str) -> dict:
    return cache_scenario.run_in_new_process(scenario, DEVICE)


hits = cache_scenario.cache_hits


def assert_compiled_fx(report: dict) -> None:
    """The FX backend compiled the program: its graph defines u0 and it ran right."""
    assert report["matches"] == [True, True]
    assert report["graphs"] == 1
    assert report["unbacked_definitions"] == ["u0"]
    assert report["meta_val_missing"] == []
    assert report["lowered"] == 1


class TestPythonWrapperThenFx:
    """The Python wrapper's artifact is never served to the FX backend."""

    def test_same_process(self, cache_dirs):
        first = cache_scenario.compile_and_run("python", DEVICE)
        assert first["matches"] == [True, True] and first["graphs"] == 0
        second = cache_scenario.compile_and_run("fx", DEVICE)
        assert_compiled_fx(second)
        assert hits(second) == 0

    @pytest.mark.full
    def test_new_process(self, cache_dirs):
        # The first compile here, the second in a new process that starts on its entries.
        first = cache_scenario.compile_and_run("python", DEVICE)
        assert first["matches"] == [True, True] and first["graphs"] == 0
        second = run_in_new_process("fx")
        assert_compiled_fx(second)
        assert hits(second) == 0


class TestFxThenPythonWrapper:
    """The FX artifact is never served to the Python wrapper."""

    def test_same_process(self, cache_dirs):
        assert_compiled_fx(cache_scenario.compile_and_run("fx", DEVICE))
        second = cache_scenario.compile_and_run("python", DEVICE)
        assert second["matches"] == [True, True] and second["graphs"] == 0
        assert hits(second) == 0

    @pytest.mark.full
    def test_new_process(self, cache_dirs):
        assert_compiled_fx(cache_scenario.compile_and_run("fx", DEVICE))
        second = run_in_new_process("python")
        assert second["matches"] == [True, True]
        assert hits(second) == 0
        if DEVICE == "cuda":
            # On CPU the Python wrapper needs the package's interpreter driver.
            assert not second["package_loaded_before"]


class TestWarmStart:
    """An FX artifact stored by one compile serves the next: graphs, runner, results."""

    def test_same_process(self, cache_dirs):
        first = cache_scenario.compile_and_run("fx", DEVICE)
        assert_compiled_fx(first)
        assert hits(first) == 0
        second = cache_scenario.compile_and_run("fx", DEVICE)
        assert_compiled_fx(second)
        assert hits(second) >= 1

    @pytest.mark.skipif(DEVICE != "cuda", reason="statically launchable kernels need a GPU")
    def test_same_process_with_compile_workers_ready(self, cache_dirs, caplog):
        # Once Inductor's compile workers are up (a process that has compiled for a
        # while), a cache hit leaves each statically launchable kernel in memory as
        # a future, and the restore's import of the kernel gets that future.
        from torch._inductor.async_compile import AsyncCompile

        if not AsyncCompile.use_process_pool() and torch._inductor.config.compile_threads <= 1:
            pytest.skip("Inductor compiles in this process only (compile_threads is 1)")
        deadline = time.monotonic() + 120
        while not AsyncCompile.use_process_pool():
            assert time.monotonic() < deadline, "Inductor's compile workers did not start"
            time.sleep(0.1)
        assert_compiled_fx(cache_scenario.compile_and_run("fx", DEVICE))
        with caplog.at_level(logging.WARNING, logger="inductor_fx_unbacked"):
            second = cache_scenario.compile_and_run("fx", DEVICE)
        assert_compiled_fx(second)
        assert hits(second) >= 1
        assert "Could not restore" not in caplog.text

    def test_new_process(self, cache_dirs):
        # On a GPU both in new processes, as users run them: a test worker's
        # earlier tests leave Triton state (compiled kernels, the ptxas version
        # its keys hold) that a user's first process does not have. The
        # interpreter compiles nothing.
        first = (
            run_in_new_process("fx")
            if DEVICE == "cuda"
            else cache_scenario.compile_and_run("fx", DEVICE)
        )
        assert_compiled_fx(first)
        assert hits(first) == 0
        second = run_in_new_process("fx")
        assert_compiled_fx(second)
        assert hits(second) >= 1
        # The kernels' binaries came from Triton's cache: nothing compiled.
        assert second["new_triton_cache_entries"] == 0, (
            second["new_triton_cache_files"],
            first["ptxas"],
            second["ptxas"],
        )
        if DEVICE == "cuda":
            # The runner's own kernels: compiled and stored by the first, loaded
            # from the runner's store by the second, without Triton's JIT.
            assert first["runner_jit_compiles"] == 2
            assert second["runner_jit_compiles"] == 0

    def test_capture_fx_graphs_on_a_warm_cache(self, cache_dirs):
        x = cache_scenario.inputs(DEVICE)[0]
        with cache_scenario.caches_on():
            cold = ifx.capture_fx_graphs(
                cache_scenario.program, x, device=DEVICE, dynamic=True, fullgraph=True
            )
            counters.clear()
            warm = ifx.capture_fx_graphs(
                cache_scenario.program, x, device=DEVICE, dynamic=True, fullgraph=True
            )
        assert counters["aot_autograd"]["autograd_cache_hit"] == 1
        assert torch.equal(warm.outputs, cold.outputs)
        assert [without_table_indices(gm.code) for gm in warm.graphs] == [
            without_table_indices(gm.code) for gm in cold.graphs
        ]


def fx_graphs(device: str, **options) -> tuple[list[torch.fx.GraphModule], int]:
    """Compile the scenario's program with ``fx_backend(device, **options)``, caches on."""
    counters.clear()
    torch._dynamo.reset()
    with (
        cache_scenario.caches_on(),
        ifx.fx_backend(device, **options),
        ifx.recording_graphs() as graphs,
    ):
        compiled = torch.compile(cache_scenario.program, dynamic=True, fullgraph=True)
        for x in cache_scenario.inputs(device):
            torch.testing.assert_close(compiled(x), cache_scenario.program(x))
    return graphs, counters["aot_autograd"]["autograd_cache_hit"]


def count_asserts(graphs: list[torch.fx.GraphModule]) -> int:
    return sum(1 for gm in graphs for n in gm.graph.nodes if n.meta.get("runtime_assert"))


class TestArtifactIdentity:
    """What changes the artifact is in the key: the runner and the checks."""

    def test_runtime_asserts_and_runner_are_in_the_key(self, cache_dirs):
        checked, hit = fx_graphs(DEVICE)
        assert count_asserts(checked) > 0 and hit == 0
        unchecked, hit = fx_graphs(DEVICE, runtime_asserts=False)
        assert count_asserts(unchecked) == 0 and hit == 0
        _, hit = fx_graphs(DEVICE, runner="graph")
        assert hit == 0
        again, hit = fx_graphs(DEVICE, runtime_asserts=False)
        assert count_asserts(again) == 0 and hit == 1

    def test_uuid_names_the_backend(self):
        a = caches.FxArtifactIdentity("cpu", "lowered", True, None).uuid()
        assert a != caches.FxArtifactIdentity("cpu", "graph", True, None).uuid()
        assert a != caches.FxArtifactIdentity("cpu", "lowered", False, None).uuid()
        assert a != caches.FxArtifactIdentity("cuda", "lowered", True, None).uuid()
        assert package_hash() in a

    def test_registered_pass_still_runs(self, cache_dirs):
        from torch._inductor.codegen import common

        common.init_backend_registration()
        seen = []

        class Pass(caches.CustomBackendPass):
            def __call__(self, graph):
                seen.append(graph)

            def uuid(self):
                return "user pass"

        saved = common.custom_backend_passes.get(DEVICE)
        common.custom_backend_passes[DEVICE] = Pass()
        try:
            fx_graphs(DEVICE)
        finally:
            common.custom_backend_passes[DEVICE] = saved
        assert seen


class TestUnstorableArtifact:
    """An artifact that cannot be stored is a cache miss, never served."""

    def test_loading_it_is_an_os_error(self):
        source = caches.unstorable_artifact_source("kernel 3 has no recorded source")
        with pytest.raises(OSError, match="kernel 3 has no recorded source"):
            exec(compile(source, "<artifact>", "exec"), {})

    def test_kernels_without_a_source_are_not_stored(self, cache_dirs, monkeypatch):
        # A kernel that reaches the side table by a path that records no source
        # (upstream's converter, with the overlay disabled inside fx_backend on
        # CUDA) makes the artifact unstorable: each compile converts again.
        monkeypatch.setattr(
            artifact_kernels.OwnedKernels, "unstorable", "kernels [3] have no source"
        )
        for _ in range(2):
            graphs, hit = fx_graphs(DEVICE)
            assert len(graphs) == 1 and hit == 0
            assert counters["inductor"]["fxgraph_cache_hit"] == 0


def without_table_indices(code: str) -> str:
    """Graph code without kernel side-table indices, which differ between loads."""
    return re.sub(r"(kernel_idx|constant_args_idx) = \d+", r"\1 = N", code)


def compile_program(name: str, sizes: tuple[int, ...], record: bool = True):
    """Compile one of the package's programs inside ``fx_backend`` with the caches on,
    check it against eager on inputs of each size, and return the graphs recorded
    (None without recording) and the number of cache hits."""
    from inductor_fx_unbacked.demo.programs import BY_NAME, same

    program = BY_NAME[name]
    counters.clear()
    torch._dynamo.reset()
    with (
        cache_scenario.caches_on(),
        torch._dynamo.config.patch(
            capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
        ),
        ifx.fx_backend(DEVICE),
        ifx.recording_graphs() if record else contextlib.nullcontext() as graphs,
    ):
        compiled = torch.compile(program.fn, fullgraph=True, dynamic=program.dynamic)
        for n in sizes:
            for args in program.inputs(DEVICE, n):
                assert same(compiled(*args), program.fn(*args))
    served = (
        counters["aot_autograd"]["autograd_cache_hit"] + counters["inductor"]["fxgraph_cache_hit"]
    )
    return graphs, served


@pytest.mark.parametrize("name", ["P3", "P5", "P6", "P7"])
def test_warm_start_of_program(cache_dirs, name):
    """`.item()` sizes, splits from `.tolist()`, unique and masked_select: the second
    compile is served, with the same graphs and results. (Graphs with ``torch.cond``
    are never cached: Inductor bypasses its caches for them, whatever the wrapper.)"""
    runs = []
    for _ in range(2):
        graphs, served = compile_program(name, (64,))
        runs.append(([without_table_indices(gm.code) for gm in graphs], served))
    (cold_code, cold_hits), (warm_code, warm_hits) = runs
    assert cold_hits == 0 and warm_hits >= 1
    assert warm_code == cold_code


def scaled_selection(x, scale):
    return x[x > 0] * scale


def test_warm_start_of_a_graph_that_reads_a_0d_cpu_tensor(cache_dirs, caplog):
    """Inductor reads a 0-d CPU tensor input with ``.item()`` inside the graph. With
    Dynamo's defaults (no capture flags: the selection runs eagerly, the product is a
    graph), the stored ShapeEnv refuses scalar outputs; a warm start that records the
    graphs still recomputes that node's value, and is served, not compiled again."""
    scale = torch.tensor(2.5)
    draws = [torch.randn(64, device=DEVICE), torch.randn(64, device=DEVICE) + 0.5]
    codes = []
    with (
        cache_scenario.caches_on(),
        torch._dynamo.config.patch(
            capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False
        ),
        caplog.at_level(logging.WARNING),
        pytest.warns(ifx.NoUnbackedSymbolWarning),
    ):
        for x in draws:  # the second compile, served, selects another number of values
            counters.clear()
            captured = ifx.capture_fx_graphs(
                scaled_selection, x, scale, device=DEVICE, dynamic=True
            )
            torch.testing.assert_close(captured.outputs, scaled_selection(x, scale))
            gm = captured.graphs[-1]
            assert any(node.target is torch.ops.aten.item.default for node in gm.graph.nodes)
            codes.append(without_table_indices(gm.code))
    assert counters["aot_autograd"]["autograd_cache_hit"] == len(captured.graphs)
    assert codes[0] == codes[1]
    assert "Could not restore" not in caplog.text


@pytest.mark.parametrize("name", ["P1", "P3"])
def test_warm_start_without_recording_skips_fake_values(cache_dirs, monkeypatch, name):
    """Recomputing ``meta["val"]`` is most of a load, and only those who receive the
    graphs see it: a warm start that nobody records runs without it, and right."""
    from inductor_fx_unbacked import _compat

    hook = _compat.node_metadata_hook
    calls = []
    monkeypatch.setattr(
        _compat, "node_metadata_hook", lambda *a, **k: calls.append(1) or hook(*a, **k)
    )
    # Data-dependent sizes differ between the inputs of each size.
    assert compile_program(name, (64, 200))[1] == 0
    calls.clear()
    assert compile_program(name, (64, 200), record=False)[1] >= 1
    assert calls == []
    graphs, served = compile_program(name, (64, 200))
    assert served >= 1 and calls
    assert all("val" in n.meta for gm in graphs for n in gm.graph.nodes if n.op != "output")
