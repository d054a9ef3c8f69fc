"""What changes an artifact is in both cache keys: nothing is served to a compile it
does not belong to, and a warm start behaves like a cold one.

Inductor's FX graph cache and AOTAutograd's cache key an entry by the uuids of
the custom backend passes. ``fx_backend`` puts the FX artifact's identity there
(``integration/caches.py``), and the overlay, while enabled, an entry of its own
(``integration/overlay.py``): it changes the Python wrapper's text too. Each
pair below compiles the same program both ways, in both orders, in one process
and across processes (``cache_scenario.py``), with fresh cache dirs per test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor import config

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.artifact.identity import package_hash
from inductor_fx_unbacked.artifact.kernels import owned_kernels
from inductor_fx_unbacked.integration import caches

sys.path.insert(0, str(Path(__file__).parent))
import cache_scenario  # noqa: E402
from cache_scenario import cache_bypasses, cache_hits  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.caches_on

#: Across processes: in CI on the oldest release (the newest runs test_fxir_caching's).
WHERE = pytest.mark.parametrize(
    "where",
    ["same_process", pytest.param("new_process", marks=pytest.mark.full)],
)


def compile_each(where: str, scenarios: tuple[str, ...], **options) -> list[dict]:
    """Compile each scenario in turn, all in this process (``same_process``), or the
    first here and each later one in a new process (``new_process``), so that each
    later one starts on what other processes stored."""
    reports = [cache_scenario.compile_and_run(scenarios[0], DEVICE, **options)]
    for scenario in scenarios[1:]:
        if where == "same_process":
            reports.append(cache_scenario.compile_and_run(scenario, DEVICE, **options))
        else:
            reports.append(cache_scenario.run_in_new_process(scenario, DEVICE, **options))
    return reports


def assert_fx_graph_recorded(report: dict) -> None:
    assert report["matches"] == [True, True]
    assert report["graphs"] == 1
    assert report["unbacked_definitions"] == ["u0"]


class TestPassWithoutUuid:
    """A custom backend pass without a uuid, registered for the device before
    ``fx_backend``: the artifact's identity is unknown, so both caches are bypassed
    (Inductor's own rule for such passes), and the FX backend compiles every time."""

    def test_uuid_raises_bypass_instead_of_returning_none(self):
        from torch._inductor.codecache import BypassFxGraphCache

        class NoUuid:
            def __call__(self, graph):
                pass

            def uuid(self):
                return None

        identity = caches.FxArtifactIdentity(DEVICE, "lowered", True, NoUuid())
        with pytest.raises(BypassFxGraphCache, match="has no uuid"):
            identity.uuid()

    @WHERE
    @pytest.mark.parametrize("order", [("python", "fx"), ("fx", "python")], ids="-then-".join)
    def test_fx_backend_compiles_and_bypasses(self, where, order):
        reports = dict(zip(order, compile_each(where, order, uuidless=True)))
        fx, python = reports["fx"], reports["python"]
        assert_fx_graph_recorded(fx)
        assert cache_hits(fx) == 0
        assert fx["counters"]["inductor"]["fxgraph_cache_bypass"] == 1
        assert fx["counters"]["aot_autograd"]["autograd_cache_bypass"] == 1
        assert python["matches"] == [True, True] and python["graphs"] == 0
        assert cache_hits(python) == 0 and cache_bypasses(python) == 0


def assert_runs_its_own_code(scenario: str, report: dict) -> None:
    """What the Python wrapper's code did on ``cache_scenario.ODD_PAIRS``, whose custom
    op returned 7 entries where its fake promised ``2 * u0``: the overlay's code
    checks that promise; upstream's takes u0 = 3 and doubles 6 entries."""
    outcome = report["odd_pairs"]
    if scenario == "python-overlay":
        assert outcome == {"raised": "u0: buf0.size(0) is not divisible by 2"}
    else:
        assert "raised" not in outcome, outcome
        assert outcome["returned"][:6] == [2.0, 4.0, 6.0, 2.0, 4.0, 6.0]
        assert outcome["returned"] != [2.0, 4.0, 6.0, 2.0, 4.0, 6.0, -400.0]  # eager's


class TestOverlayInTheKey:
    """The overlay changes the Python wrapper's text (it checks the divisibility of a
    ``DivideByKey``), so a process with it enabled is never served upstream's code,
    nor the other way round; each is served its own."""

    @WHERE
    def test_each_side_runs_its_own_code(self, where):
        # Each side after the other misses, and each side again is served its own
        # entry while the other side's is there too.
        order = ("python-overlay", "python-upstream", "python-overlay", "python-upstream")
        reports = compile_each(where, order)
        for scenario, report in zip(order, reports):
            assert report["matches"] == [True, True], scenario
            assert_runs_its_own_code(scenario, report)
        assert [cache_hits(report) for report in reports[:2]] == [0, 0]
        assert all(cache_hits(report) >= 1 for report in reports[2:])

    def test_identity_entry_follows_the_overlay(self):
        from torch._inductor.codegen import common

        from inductor_fx_unbacked.integration.overlay import IDENTITY_KEY

        with cache_scenario.overlay_state(enabled=True):
            uuid = common.custom_backend_passes[IDENTITY_KEY].uuid()
            assert package_hash() in uuid
            with cache_scenario.overlay_state(enabled=False):
                assert IDENTITY_KEY not in common.custom_backend_passes
            assert common.custom_backend_passes[IDENTITY_KEY].uuid() == uuid


class TestUpstreamConverter:
    """``fx_backend`` with the overlay disabled inside it (upstream's converter, the
    ``upstream-fx`` configuration of ``benchmarks/data_dependent.py``)."""

    @WHERE
    def test_warm_start(self, where):
        cold, warm = compile_each(where, ("upstream-fx", "upstream-fx"))
        for report in (cold, warm):
            assert report["matches"] == [True, True]
            assert report["graphs"] == 1 and report["lowered"] == 0
            # Upstream's converter tags no definition.
            assert report["unbacked_definitions"] == []
        counters = {"cold": cold["counters"], "warm": warm["counters"]}
        assert cache_hits(cold) == 0 and cache_hits(warm) >= 1, counters

    @WHERE
    @pytest.mark.parametrize(
        "order", [("fx", "upstream-fx"), ("upstream-fx", "fx")], ids="-then-".join
    )
    def test_never_served_the_overlays_artifact(self, where, order):
        reports = dict(zip(order, compile_each(where, order)))
        assert_fx_graph_recorded(reports["fx"])
        assert reports["upstream-fx"]["unbacked_definitions"] == []
        assert reports["upstream-fx"]["matches"] == [True, True]
        assert all(cache_hits(report) == 0 for report in reports.values())


def autotuners(graphs: list[torch.fx.GraphModule]) -> set[int]:
    """The ids of the autotuners of the graphs' kernels (the graphs keep them alive)."""
    hop = torch.ops.higher_order.triton_kernel_wrapper_mutation
    return {
        id(owned_kernels(gm).tuner(node.kwargs["kernel_idx"]))
        for gm in graphs
        for node in gm.graph.nodes
        if node.target is hop
    }


def test_compiled_graph_pickles_after_its_kernels_ran_in_a_graph():
    """Inductor pickles each compiled graph into its cache, with the autotuners of
    its kernels. The same program compiles twice with the same kernels (a miss: the
    runner differs); in between, the first graph ran them through ``gm.forward``,
    which compiles them with Triton's JIT. Nothing of that run reaches what
    Inductor pickles the second time. (Compiled in this process: kernels that
    compile workers load come back as new autotuners, which share nothing.)"""
    x = torch.tensor([1.0, -1.0, 2.0, -2.0, 3.0, 4.0], device=DEVICE)
    program = cache_scenario.program
    counters.clear()
    graphs = []
    with cache_scenario.caches_on(), config.patch(compile_threads=1):
        for runner in ("graph", "lowered"):
            with ifx.fx_backend(DEVICE, runner=runner), ifx.recording_graphs() as recorded:
                torch._dynamo.reset()
                compiled = torch.compile(program, dynamic=True, fullgraph=True)
                torch.testing.assert_close(compiled(x), program(x))
            graphs.append(recorded)
    assert autotuners(graphs[0]) == autotuners(graphs[1]) != set()
    assert counters["inductor"]["fxgraph_cache_miss"] == 2
    assert counters["inductor"]["fxgraph_cache_pickle_error"] == 0
