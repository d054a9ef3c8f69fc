"""C++ kernels in the FX graph: ``fx_unbacked::cpp_kernel`` nodes.

On a GPU, a graph that also computes on CPU tensors gets C++ kernels for that
part; the FX backend converts them (``codegen/fx_cpp.py``) instead of failing,
which is what a whole transformers model hit (``test_mixed_devices``, CUDA
only). On any machine the same conversion runs with the FX wrapper codegen
registered for the CPU beside Inductor's C++ scheduling (``cpp_kernels``),
where every kernel is a C++ kernel.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.codegen import common

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.artifact.kernels import apply_releases
from inductor_fx_unbacked.codegen import fx_cpp
from inductor_fx_unbacked.integration import backend as api

sys.path.insert(0, str(Path(__file__).parent))
import cache_scenario  # noqa: E402

CPP_KERNEL = torch.ops.fx_unbacked.cpp_kernel.default


@pytest.fixture(autouse=True)
def dynamo_config():
    with torch._dynamo.config.patch(
        capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True
    ):
        torch._dynamo.reset()
        yield
    torch._dynamo.reset()


@contextlib.contextmanager
def cpp_kernels(runner: str = "lowered"):
    """The FX wrapper codegen for the CPU, with Inductor's C++ kernels."""
    common.init_backend_registration()
    with contextlib.ExitStack() as stack:
        if not ifx.is_enabled():
            ifx.enable()
            stack.callback(ifx.disable)
        stack.callback(api._restore_registration("cpu"))
        api.register_fx_wrapper("cpu", api.FxWrapperCodegen, runner=runner, runtime_asserts=True)
        yield stack.enter_context(ifx.recording_graphs())


def nonzero_and_pointwise(x):
    index = torch.nonzero(x > 0)
    return (index * 2 + 1).sum(1), x.sin() * 3


def item_sized(x):
    n = (x > 0).sum().item()
    torch._check(n >= 0)
    return torch.arange(n, device=x.device) * x.sum()


def cpp_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [node for node in gm.graph.nodes if node.target is CPP_KERNEL]


def defined_symbols(gm: torch.fx.GraphModule) -> dict[str, torch.fx.Node]:
    return {
        str(node.meta["unbacked_symbol"]): node
        for node in gm.graph.nodes
        if "unbacked_symbol" in node.meta
    }


def check_against_eager(compiled, fn, inputs) -> None:
    for args in inputs:
        torch.testing.assert_close(compiled(*args), fn(*args))


def signed(n: int, positive: int) -> torch.Tensor:
    """``n`` values, ``positive`` of them positive."""
    values = torch.rand(n) + 0.5
    values[positive:] *= -1
    return values[torch.randperm(n)]


# Each compile builds its C++ kernels with the C++ compiler: two combinations
# cover both runners and both modes.
@pytest.mark.parametrize("dynamic, runner", [(True, "lowered"), (False, "graph")])
def test_nonzero_and_pointwise(dynamic, runner):
    inputs = [(signed(64, 5).reshape(16, 4),), (signed(64, 40).reshape(16, 4),)]
    with cpp_kernels(runner) as graphs:
        compiled = torch.compile(nonzero_and_pointwise, dynamic=dynamic, fullgraph=True)
        check_against_eager(compiled, nonzero_and_pointwise, inputs)
    gm = graphs[0]
    kernels = cpp_nodes(gm)
    assert len(kernels) == 2, gm.code
    for node in kernels:
        key, buffers, sizes = node.args
        assert fx_cpp.kernel_source(key).kernel_name in key
        assert all(isinstance(b, torch.fx.Node) for b in buffers)
        assert node.meta["val"] is None
    # The nonzero count u0 is defined once and sizes the second kernel.
    (u0,) = defined_symbols(gm).values()
    assert u0.target is torch.ops.aten.sym_size.int
    assert u0 in kernels[1].args[2]


def test_item_defines_a_kernel_size():
    inputs = [(signed(50, 7),), (signed(50, 31),)]
    with cpp_kernels() as graphs:
        compiled = torch.compile(item_sized, dynamic=True, fullgraph=True)
        check_against_eager(compiled, item_sized, inputs)
    gm = graphs[0]
    definitions = defined_symbols(gm)
    assert len(definitions) == 1, gm.code
    (u0,) = definitions.values()
    assert u0.target is torch.ops.aten.item.default
    assert any(u0 in node.args[2] for node in cpp_nodes(gm)), gm.code


def test_a_dropped_graph_releases_its_kernel_sources():
    """The graph owns its C++ kernels' sources and compiled functions: once it and
    Dynamo's compiled code are gone, so are they."""
    inputs = [(signed(50, 7),), (signed(50, 31),)]
    with cpp_kernels() as graphs:
        compiled = torch.compile(item_sized, dynamic=True, fullgraph=True)
        check_against_eager(compiled, item_sized, inputs)
    keys = [node.args[0] for node in cpp_nodes(graphs[0])]
    assert keys, graphs[0].code
    assert all(fx_cpp.kernel_function(key) for key in keys)
    del graphs, compiled
    torch._dynamo.reset()
    gc.collect()
    apply_releases()  # what the package does at its next write to the side table
    for key in keys:
        with pytest.raises(KeyError, match=f"C\\+\\+ kernel {key} is unknown in this process"):
            fx_cpp.kernel_function(key)


@pytest.mark.caches_on
def test_warm_start_brings_the_kernel_sources(tmp_path):
    """A stored artifact carries its C++ kernels' sources: a process that never
    compiled them (here: the registry emptied) loads and runs them."""
    from torch._inductor.utils import fresh_cache

    inputs = [(signed(64, 5).reshape(16, 4),), (signed(64, 40).reshape(16, 4),)]
    with fresh_cache(dir=str(tmp_path)), cache_scenario.caches_on():
        with cpp_kernels() as cold:
            compiled = torch.compile(nonzero_and_pointwise, dynamic=True, fullgraph=True)
            check_against_eager(compiled, nonzero_and_pointwise, inputs)
        torch._dynamo.reset()
        fx_cpp._sources.clear()
        fx_cpp._functions.clear()
        counters.clear()
        with cpp_kernels() as warm:
            compiled = torch.compile(nonzero_and_pointwise, dynamic=True, fullgraph=True)
            check_against_eager(compiled, nonzero_and_pointwise, inputs)
    assert counters["aot_autograd"]["autograd_cache_hit"] == 1
    assert [len(cpp_nodes(gm)) for gm in warm] == [len(cpp_nodes(gm)) for gm in cold] == [2]
    assert list(defined_symbols(warm[0])) == list(defined_symbols(cold[0]))


def mixed_devices(x, y):
    return torch.nonzero(x > 0) * 2 + 1, y.sin() * 2 + y.sum()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dynamic", [False, True])
def test_mixed_devices(dynamic):
    """A CUDA graph with a CPU part: Triton kernels and C++ kernels in one FX graph."""
    inputs = [
        (signed(40, 9).cuda(), torch.randn(8)),
        (signed(40, 27).cuda(), torch.randn(8)),
    ]
    with ifx.fx_backend("cuda"), ifx.recording_graphs() as graphs:
        compiled = torch.compile(mixed_devices, dynamic=dynamic, fullgraph=True)
        check_against_eager(compiled, mixed_devices, inputs)
    gm = graphs[0]
    triton = torch.ops.higher_order.triton_kernel_wrapper_mutation
    assert cpp_nodes(gm), gm.code
    assert any(node.target is triton for node in gm.graph.nodes), gm.code
    assert len(defined_symbols(gm)) == 1, gm.code
