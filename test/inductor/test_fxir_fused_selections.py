"""Selections by a predicate kernel, fused into one pass (``runner/fused_selections.py``).

``nonzero(x > t)`` and ``masked_select(v, pred(...))`` reach the graph as Inductor's
predicate kernel, then the compaction. The runner computes both in one kernel made
from the predicate's: each call must return eager's tensor (values, size, strides,
dtype) for every kept count, from none to all, whatever the values at masked-out
positions, and leave the graph as it is. What it cannot prove equal runs as the
graph says. On CPU the kernels run in Triton's interpreter (``INTERPRETED``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
import triton
import triton.language as tl

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.runner import compaction, fused_selections, lowering, predicate_source
from inductor_fx_unbacked.runner.compaction_kernels import look_back
from inductor_fx_unbacked.runner.tuning import Launch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).resolve().parents[2]
BLOCK = fused_selections.BLOCK
#: The elements of one program: its tiles.
SPAN = fused_selections.BLOCK * fused_selections.TILES
aten = torch.ops.aten


@pytest.fixture(autouse=True, params=[False, True], ids=["two passes", "one pass"])
def kernels_run(request):
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(fused_selections, "ONE_PASS", request.param))
        stack.enter_context(ifx.fx_backend(DEVICE))
        stack.enter_context(mock.patch.object(compaction, "INTERPRETED", True))
        stack.enter_context(mock.patch.object(fused_selections, "ENABLED", True))
        # Every size: the tests' inputs are far below the size where fusing starts.
        stack.enter_context(mock.patch.object(fused_selections, "SMALLEST", 0))
        yield


@contextlib.contextmanager
def counting():
    """The fused selections' calls, and those of them that ran unfused."""
    calls = {"fused": 0, "unfused": 0}
    call, unfused = (
        fused_selections.FusedSelection.__call__,
        fused_selections.FusedSelection._unfused,
    )

    def counted_call(self, *args):
        calls["fused"] += 1
        return call(self, *args)

    def counted_unfused(self, *args):
        calls["unfused"] += 1
        return unfused(self, *args)

    with (
        mock.patch.object(fused_selections.FusedSelection, "__call__", counted_call),
        mock.patch.object(fused_selections.FusedSelection, "_unfused", counted_unfused),
    ):
        yield calls


def assert_same_tensor(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert got.stride() == expected.stride()
    assert torch.equal(got, expected) or torch.allclose(got, expected, equal_nan=True)


def fused_nodes(artifact) -> list[fused_selections.FusedSelection]:
    return [
        v
        for v in artifact._run.__globals__.values()
        if isinstance(v, fused_selections.FusedSelection)
    ]


def nonzero_above(x):
    return torch.nonzero(x > 0.5)


def select_large(g):
    return torch.masked_select(g, g.abs() > 1.5)


def positives_doubled(x):
    return x[x > 0] * 2


def kept(n: int, count: int, seed: int = 0) -> torch.Tensor:
    """``n`` values of which exactly ``count`` are over 2 (the rest below 0.5), at
    random places."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g) * 0.4
    x[torch.randperm(n, generator=g)[:count]] = 2.0 + torch.rand(count, generator=g)
    return x.to(DEVICE)


# Sizes around a tile and a program (the last program with a partial tile, and one
# with tiles past the end), and kept counts from none to all.
CASES = [
    (1, 0),
    (1, 1),
    (BLOCK, 1),
    (BLOCK + 1, BLOCK + 1),
    (SPAN + 1, SPAN + 1),
    (2 * SPAN + BLOCK + 3, 1500),
    (3 * SPAN + 5, 0),
    (3 * SPAN + 5, 2000),
]


@pytest.mark.parametrize("program", [nonzero_above, select_large, positives_doubled])
def test_a_selection_by_a_predicate_is_one_kernel_and_equals_eager(program):
    artifact = ifx.compile(program, kept(3 * BLOCK + 5, 700), dynamic=True)
    # The graph still says the operator; the runner calls the fused selection instead.
    graph = artifact.graph.graph
    operators = {aten.nonzero.default, aten.masked_select.default}
    assert [n for n in graph.nodes if n.target in operators], artifact.graph.code
    (fused,) = fused_nodes(artifact)
    # The predicate is computed, never stored; nothing else is stored. The values
    # that ``masked_select`` takes from the predicate's input are written from the
    # kernel's own load of them.
    assert "tl.store" not in fused.source.source and not fused.source.stores, fused.source
    assert fused.source.loads_values == (program is select_large), fused.source.source
    with counting() as calls:
        for n, count in CASES:
            x = kept(n, count, seed=n + count)
            assert_same_tensor(artifact(x), program(x))
    assert calls == {"fused": len(CASES), "unfused": 0}
    # No element: nothing to launch, the operator's empty result.
    with counting() as calls:
        x = kept(0, 0)
        assert_same_tensor(artifact(x), program(x))
    assert calls == {"fused": 1, "unfused": 1}


def test_values_at_masked_out_positions_never_reach_the_result():
    def finite(v):
        return torch.masked_select(v, torch.isfinite(v))

    def not_nan_rows(v):
        return torch.nonzero(~torch.isnan(v))

    for program in (finite, not_nan_rows):
        v = kept(3 * BLOCK + 5, 900)
        artifact = ifx.compile(program, v, dynamic=True)
        with counting() as calls:
            for n, bad in ((3 * BLOCK + 5, 0.5), (2 * BLOCK, 1.0), (7, 0.0), (9, 1.0)):
                v = torch.randn(n, generator=torch.Generator().manual_seed(n)).to(DEVICE)
                at = torch.rand(n, generator=torch.Generator().manual_seed(n + 1)).to(DEVICE) < bad
                v[at] = float("nan")
                v[at & (torch.arange(n, device=DEVICE) % 2 == 0)] = float("inf")
                assert_same_tensor(artifact(v), program(v))
        assert calls["unfused"] == 0 and calls["fused"] == 4


@pytest.mark.parametrize(
    "dtype",
    [
        torch.bool,
        torch.int8,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float64,
    ],
)
def test_masked_select_of_every_dtype_by_another_tensors_predicate(dtype):
    def select(v, k):
        return torch.masked_select(v, k > 0)

    def inputs(n, seed):
        g = torch.Generator().manual_seed(seed)
        v = (torch.randn(n, generator=g) * 50).to(dtype)
        return v.to(DEVICE), torch.randn(n, generator=g).to(DEVICE)

    artifact = ifx.compile(select, *inputs(3 * BLOCK + 5, 0), dynamic=True)
    with counting() as calls:
        for n, seed in ((3 * BLOCK + 5, 1), (BLOCK - 3, 2), (1, 3)):
            args = inputs(n, seed)
            assert_same_tensor(artifact(*args), select(*args))
    assert calls == {"fused": 3, "unfused": 0}


def test_a_real_module_with_parameters_that_require_grad():
    class Confident(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.score = torch.nn.Linear(16, 1)

        def forward(self, x):
            s = self.score(x).squeeze(-1)
            return torch.nonzero(torch.sigmoid(s) > 0.6), torch.masked_select(s, s < -0.3)

    torch.manual_seed(0)
    model = Confident().to(DEVICE)
    assert all(p.requires_grad for p in model.parameters())
    artifact = ifx.compile(model, torch.randn(3 * BLOCK, 16, device=DEVICE), dynamic=True)
    with counting() as calls:
        for rows in (3 * BLOCK, 5, 1):
            x = torch.randn(rows, 16, device=DEVICE)
            with torch.no_grad():
                expected = model(x)
            got = artifact(x)
            assert_same_tensor(got[0], expected[0])
            torch.testing.assert_close(got[1], expected[1])
    assert calls["unfused"] == 0 and calls["fused"] >= 3


def test_values_that_the_predicate_kernel_computes_too():
    """``y = x * 2 - 1; y.masked_select(y > 0)``: Inductor's kernel stores ``y`` and the
    predicate; the fused kernel still stores ``y``, then reads the kept values of it
    (after a barrier: other threads stored them)."""

    def select_computed(x):
        y = x * 2 - 1
        return y.masked_select(y > 0), y

    artifact = ifx.compile(select_computed, kept(3 * BLOCK + 5, 700), dynamic=True)
    (fused,) = fused_nodes(artifact)
    assert "tl.store" in fused.source.source and fused.source.stores, fused.source.source
    assert not fused.source.loads_values
    with counting() as calls:
        for n, count in CASES:
            x = kept(n, count, seed=n + count)
            for got, expected in zip(artifact(x), select_computed(x)):
                assert_same_tensor(got, expected)
    assert calls == {"fused": len(CASES), "unfused": 0}


def test_a_predicate_of_gathered_values_is_not_fused():
    """PyG's ``subgraph``: a predicate that gathers by indices (Inductor checks their
    bounds in the kernel), read by two selections that share one ``nonzero``. A fused
    kernel would gather each tile twice (``fused_selections``: slower on a GPU), so
    the pair runs as the graph says."""

    def edges_between_kept_nodes(edge_index, edge_weight, node_mask):
        edge_mask = node_mask[edge_index[0]] & node_mask[edge_index[1]]
        return edge_index[:, edge_mask], edge_weight[edge_mask]

    def inputs(nodes, edges, kept, seed):
        g = torch.Generator().manual_seed(seed)
        edge_index = torch.randint(0, nodes, (2, edges), generator=g)
        weight = torch.rand(edges, generator=g)
        return tuple(
            t.to(DEVICE) for t in (edge_index, weight, torch.rand(nodes, generator=g) < kept)
        )

    artifact = ifx.compile(
        edges_between_kept_nodes, *inputs(500, 3 * BLOCK + 5, 0.7, 0), dynamic=True
    )
    assert not fused_nodes(artifact)
    assert any(n.target is aten.nonzero.default for n in artifact.graph.graph.nodes)
    for args in (
        inputs(500, 3 * BLOCK + 5, 0.4, 1),
        inputs(40, 9, 0.0, 2),
        inputs(40, 9, 1.0, 3),
    ):
        got, expected = artifact(*args), edges_between_kept_nodes(*args)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


_GATHERING = """
def kernel(in_ptr0, in_ptr1, out_ptr0, ks0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (ks0 + x0), xmask)
    tmp1 = tmp0 + ks0
    tmp2 = tl.where(tmp0 < 0, tmp1, tmp0)
    tl.device_assert((0 <= tmp2) & (tmp2 < ks0), "index out of bounds: 0 <= tmp2 < ks0")
    tmp3 = tl.load(in_ptr1 + (tmp2), xmask)
    tl.store(out_ptr0 + (x0), tmp3, xmask)
"""


@pytest.mark.parametrize(
    "change, gathers",
    [
        (None, True),
        # The bounds check's operand, not a load's address: no gather.
        (("in_ptr1 + (tmp2)", "in_ptr1 + (x0)"), False),
        # An address from a parameter and the element's index: no gather.
        (("in_ptr1 + (tmp2)", "in_ptr1 + (2 * ks0 + x0)"), False),
    ],
)
def test_a_load_at_an_address_computed_from_loaded_values_is_a_gather(change, gathers):
    source = _GATHERING if change is None else _GATHERING.replace(*change)
    fused = predicate_source.fused_source(source, "out_ptr0", ["ks0", "xnumel"])
    assert fused is not None and fused.gathers is gathers


def test_small_selections_run_unfused_and_larger_ones_fused(monkeypatch):
    """Up to ``SMALLEST`` elements a call runs as the graph says (host time dominates
    there), past it fused; both equal eager."""
    monkeypatch.setattr(fused_selections, "SMALLEST", SPAN)
    for program in (nonzero_above, select_large):
        artifact = ifx.compile(program, kept(3 * SPAN, 700), dynamic=True)
        assert len(fused_nodes(artifact)) == 1
        with counting() as calls:
            for n, count in ((SPAN, 3), (SPAN + 1, 5), (3, 1), (2 * SPAN + 7, 0)):
                x = kept(n, count, seed=n)
                assert_same_tensor(artifact(x), program(x))
        assert calls == {"fused": 4, "unfused": 2}


def test_a_call_it_does_not_fuse_launches_the_predicate_kernel_as_the_graph_does(monkeypatch):
    """Unfused, the predicate kernel launches as lowering launches any kernel: on a
    GPU through its precompiled launcher, never Triton's JIT (tens of µs of host time
    a call, where unfused calls are the small ones), in Triton's interpreter as the
    graph does."""
    monkeypatch.setattr(fused_selections, "SMALLEST", 1 << 40)
    jit_runs = []
    run = triton.runtime.jit.JITFunction.run

    def counted_run(self, *args, **kwargs):
        jit_runs.append(self)
        return run(self, *args, **kwargs)

    for program in (nonzero_above, select_large):
        artifact = ifx.compile(program, kept(3 * SPAN, 700), dynamic=True)
        (fused,) = fused_nodes(artifact)
        assert isinstance(fused.unfused, lowering.KernelCall)
        precompiled = fused.unfused.tuner is not None
        assert isinstance(fused.unfused.launch, Launch) is precompiled
        assert precompiled is (DEVICE == "cuda")
        with (
            counting() as calls,
            mock.patch.object(triton.runtime.jit.JITFunction, "run", counted_run),
        ):
            for n, count in ((SPAN, 3), (2 * SPAN + 7, 0), (3, 3)):
                x = kept(n, count, seed=n)
                assert_same_tensor(artifact(x), program(x))
        assert calls == {"fused": 3, "unfused": 3}
        if precompiled:
            assert not [k for k in jit_runs if "poi" in k.__name__]


def test_what_it_cannot_prove_equal_runs_as_the_graph_does():
    def mask_read_twice(x):
        m = x > 0.5
        return torch.nonzero(m), m.sum()

    def rows_of_a_matrix(x):
        return torch.nonzero(x > 0.5)

    def broadcast_values(v, k):
        return torch.masked_select(v, k > 0)

    x = kept(3 * BLOCK + 5, 800)
    for program, args in (
        (mask_read_twice, (x,)),
        (rows_of_a_matrix, (x[: 3 * BLOCK].view(3, BLOCK),)),
    ):
        artifact = ifx.compile(program, *args, dynamic=True)
        assert not fused_nodes(artifact)
        for other in (args, tuple(a[..., :7].contiguous() for a in args)):
            got, expected = artifact(*other), program(*other)
            torch.testing.assert_close(got, expected)
    # Values broadcast against the predicate: fused when lowered, unfused at run time.
    v, k = torch.randn(BLOCK, device=DEVICE), torch.randn(3, BLOCK, device=DEVICE)
    artifact = ifx.compile(broadcast_values, v, k, dynamic=True)
    with counting() as calls:
        for args in ((v, k), (v[:5], k[:, :5].contiguous()), (v[:1], k[:, :1].contiguous())):
            assert_same_tensor(artifact(*args), broadcast_values(*args))
    assert calls["fused"] == 3


def test_through_torch_compile_and_after_a_warm_start():
    def program(x):
        return torch.nonzero(x > 0.5) * 2 + 1

    with counting() as calls:
        for _ in range(2):  # the second compile is served by Inductor's caches
            torch._dynamo.reset()
            compiled = torch.compile(program, dynamic=True, fullgraph=True)
            for n, count in ((3 * BLOCK + 5, 600), (40, 3)):
                x = kept(n, count, seed=count)
                # Inductor's own layout for the product's column of one (as unfused).
                torch.testing.assert_close(compiled(x), program(x), rtol=0, atol=0)
    assert calls == {"fused": 4, "unfused": 0}


def test_a_predicate_kernel_that_writes_an_input_fuses_in_one_pass_only():
    """``out.copy_(x * 2 - 1)`` beside ``nonzero(x > 0.5)``: Inductor's predicate kernel
    stores into the graph's input too. Two passes store it in the count and compute
    the predicate again in the write, which they do only where the buffers stored are
    the graph's own (what the kernel reads is then what it read before); one pass
    computes each element once."""

    def doubled_into(x, out):
        out.copy_(x * 2 - 1)
        return torch.nonzero(x > 0.5)

    torch._dynamo.reset()
    compiled = torch.compile(doubled_into, dynamic=True, fullgraph=True)
    with counting() as calls:
        for n, count in ((3 * BLOCK + 5, 600), (40, 3)):
            x = kept(n, count, seed=count)
            out, expected_out = torch.empty(n, device=DEVICE), torch.empty(n, device=DEVICE)
            assert_same_tensor(compiled(x, out), doubled_into(x, expected_out))
            assert torch.equal(out, expected_out)
    assert calls == {"fused": 2 if fused_selections.ONE_PASS else 0, "unfused": 0}


_IN_PLACE = """
def kernel(in_out_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_out_ptr0 + (x0), xmask)
    tmp1 = tmp0 * 2.0
    tmp2 = tmp1 > 0.5
    tl.store(in_out_ptr0 + (x0), tmp1, xmask)
    tl.store(out_ptr0 + (x0), tmp2, xmask)
"""


def test_two_passes_leave_alone_a_kernel_that_updates_what_it_loads():
    """Inductor's in-place buffer (``in_out_ptr``): the count pass would double it, then
    the write pass would compute the predicate of the doubled values."""
    fused = predicate_source.fused_source(_IN_PLACE, "out_ptr0", ["xnumel"])
    assert fused is not None and fused.stored == fused.loaded == {"in_out_ptr0"}
    graph = torch.fx.Graph()
    allocation = graph.call_function(torch.empty_strided, ((8,), (1,)))
    assert not fused_selections._stores_only_new_buffers(fused, {"in_out_ptr0": allocation})
    other = fused._replace(loaded=frozenset())
    assert fused_selections._stores_only_new_buffers(other, {"in_out_ptr0": allocation})
    placeholder = graph.placeholder("x")
    assert not fused_selections._stores_only_new_buffers(other, {"in_out_ptr0": placeholder})


KERNEL = """
def triton_poi_fused_gt_0(in_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), xmask)
    tmp2 = tmp0 > 0.5
    tl.store(out_ptr0 + (x0), tmp2, xmask)
"""


@pytest.mark.parametrize(
    "change",
    [
        ("tl.store(out_ptr0 + (x0), tmp2, xmask)", "tl.store(out_ptr0 + (2 * x0), tmp2, xmask)"),
        ("tl.store(out_ptr0 + (x0), tmp2, xmask)", "tl.store(out_ptr0 + (x0), tmp2, tmp0 > 0)"),
        (
            "    tmp2 = tmp0 > 0.5\n",
            "    tmp2 = tmp0 > 0.5\n    tl.store(out_ptr0 + (x0), tmp0, xmask)\n",
        ),
        (
            "    tmp2 = tmp0 > 0.5\n",
            "    tmp2 = tmp0 > 0.5\n    tl.atomic_add(in_ptr0 + (x0), tmp0, xmask)\n",
        ),
        ("tl.program_id(0) * XBLOCK", "tl.program_id(1) * XBLOCK"),
        (
            "xindex = xoffset + tl.arange(0, XBLOCK)[:]",
            "xindex = 2 * xoffset + tl.arange(0, XBLOCK)[:]",
        ),
        ("tmp2 = tmp0 > 0.5", "tmp2 = tmp0 > threshold"),
        ("    x0 = xindex\n", "    x0 = xindex\n    for i in range(2):\n        x0 = x0\n"),
    ],
    ids=[
        "strided store",
        "another mask",
        "second store",
        "atomic",
        "program_id(1)",
        "other offsets",
        "free name",
        "loop",
    ],
)
def test_a_kernel_it_cannot_prove_is_not_fused(change):
    assert predicate_source.fused_source(KERNEL, "out_ptr0", ["xnumel"]) is not None
    old, new = change
    assert old in KERNEL
    assert predicate_source.fused_source(KERNEL.replace(old, new), "out_ptr0", ["xnumel"]) is None


SELECTING_KERNEL = """
def triton_poi_fused_abs_gt_0(in_ptr0, in_out_ptr0, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0), xmask, eviction_policy='evict_last')
    tmp1 = tl.load(in_out_ptr0 + (x0), xmask)
    tmp2 = tl_math.abs(tmp0) > 1.5
    tmp3 = tmp1 + tmp0
    tl.store(in_out_ptr0 + (x0), tmp3, xmask)
    tl.store(out_ptr0 + (x0), tmp2, xmask)
"""


@pytest.mark.parametrize(
    "values, change, loads",
    [
        ("in_ptr0", None, True),
        # The kernel stores new values there after loading them: the selection takes
        # the stored ones.
        ("in_out_ptr0", None, False),
        # Loaded at another element than the tile's own.
        ("in_ptr0", ("in_ptr0 + (x0)", "in_ptr0 + (x0 // 2)"), False),
        ("in_ptr0", ("in_ptr0 + (x0)", "in_ptr0 + (xnumel - 1 - x0)"), False),
        (None, None, False),
    ],
    ids=["its input", "a buffer it stores", "halved index", "reversed index", "nonzero"],
)
def test_values_are_taken_from_the_kernels_load_only_at_their_own_elements(values, change, loads):
    """``masked_select(v, pred)`` writes ``v`` from the kernel's registers only where the
    kernel loads ``v`` at each element of the tile, and stores nothing there."""
    source = SELECTING_KERNEL if change is None else SELECTING_KERNEL.replace(*change)
    assert change is None or source != SELECTING_KERNEL
    fused = predicate_source.fused_source(source, "out_ptr0", ["xnumel"], values)
    assert fused is not None and fused.stores
    assert fused.loads_values is loads
    assert ("ifx_keep, tmp0" in fused.source) is loads, fused.source


_COMPILE_FOR_A_GPU = """
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

compiled = []
shape = json.loads(sys.argv[2])
for index, (path, values_type) in enumerate(json.loads(sys.argv[1])):
    spec = importlib.util.spec_from_file_location(f"fused_{index}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stores = "tl.store" in open(path).read()
    one_pass = {"XBLOCK": shape["SINGLE_BLOCK" if stores else "BLOCK"], "WINDOW": shape["WINDOW"]}
    one_pass["TILES"] = 1 if stores else shape["TILES"]
    one_pass["VALUES"] = values_type != "*i64"
    count = {"XBLOCK": shape["PASS_BLOCK"], "CHUNK": shape["CHUNK"]}
    write = {"XBLOCK": shape["PASS_BLOCK"], "VALUES": values_type != "*i64"}
    for prefix, constants, warps in (
        ("ifx_fused_", one_pass, shape["NUM_WARPS"]),
        ("ifx_count_pass_", count, shape["PASS_WARPS"]),
        ("ifx_write_pass_", write, shape["PASS_WARPS"]),
    ):
        (fn,) = (v for k, v in vars(module).items() if k.startswith(prefix))
        signature = {}
        for name in fn.arg_names:
            if name in constants:
                signature[name] = "constexpr"
            elif name in ("ifx_values", "ifx_out"):
                signature[name] = values_type
            elif name in ("ifx_work", "ifx_ticket"):
                signature[name] = "*i64"
            elif "ptr" in name:
                signature[name] = "*fp32"
            else:
                signature[name] = "i32"
        source = ASTSource(fn, signature, constexprs=constants)
        target = GPUTarget("cuda", 90, 32)
        kernel = triton.compile(source, target=target, options={"num_warps": warps})
        compiled.append(sorted(kernel.asm))
print(json.dumps(compiled))
"""


@pytest.mark.full
@pytest.mark.skipif(DEVICE == "cuda", reason="a GPU runs the kernels themselves")
def test_the_fused_kernels_compile_for_a_gpu(tmp_path):
    """CI has no GPU, and Triton's interpreter checks no types: Triton's compiler
    (with its ptxas) compiles each form of the fused kernels (one pass; the count and
    the write of two) for an H100 here, in a process without the interpreter."""
    pytest.importorskip("triton.backends.nvidia")

    def select_computed(x):
        y = x * 2 - 1
        return y.masked_select(y > 0), y

    forms = []
    for program, values_type in (
        (nonzero_above, "*i64"),
        (select_large, "*fp32"),
        (select_computed, "*fp32"),
    ):
        (fused,) = fused_nodes(ifx.compile(program, kept(3 * BLOCK + 5, 700), dynamic=True))
        path = tmp_path / f"{program.__name__}.py"
        path.write_text(fused.source.source)
        forms.append((str(path), values_type))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    # The shape the runner launches them with.
    shape = {
        name: getattr(fused_selections, name)
        for name in (
            *("BLOCK", "TILES", "SINGLE_BLOCK", "WINDOW", "NUM_WARPS", "PASS_BLOCK"),
            "PASS_WARPS",
        )
    }
    shape["CHUNK"] = compaction.CHUNK
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE_FOR_A_GPU, json.dumps(forms), json.dumps(shape)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = json.loads(done.stdout.splitlines()[-1])
    assert len(compiled) == 9 and all("cubin" in asm for asm in compiled), compiled


@triton.jit
def look_back_of(work_ptr, blocks_ptr, out_ptr, WINDOW: tl.constexpr):
    """What ``look_back`` sums for each block of ``blocks``."""
    block = tl.load(blocks_ptr + tl.program_id(0))
    tl.store(out_ptr + tl.program_id(0), look_back(work_ptr, block, WINDOW))


@pytest.mark.parametrize("seed", range(4))
def test_the_look_back_sums_counts_up_to_the_nearest_prefix(seed):
    """On a GPU a block looks back at blocks still running: some have published only
    their count (an aggregate), some their inclusive prefix, some nothing yet. The
    interpreter runs blocks one after another, so every block finds its predecessor's
    prefix there; this runs ``look_back`` on status words written as a GPU can leave
    them, for each block whose look-back can end (no empty word before the nearest
    prefix), and checks the sum of the counts before it."""
    g = torch.Generator().manual_seed(seed)
    n = 300
    counts = torch.randint(0, 5000, (n,), generator=g)
    inclusive = counts.cumsum(0)
    kind = torch.multinomial(torch.tensor([0.02, 0.88, 0.1]), n, replacement=True, generator=g)
    kind[0] = 2  # block 0 always publishes its prefix at once
    kind[149], kind[150:260] = 2, 1  # a prefix, then more aggregates than three windows
    words = torch.where(kind == 2, inclusive, torch.where(kind == 1, counts, 0)) | (kind << 60)
    ending, expected = [], []
    for block in range(1, n):
        before = block - 1
        while kind[before] == 1:
            before -= 1
        if kind[before] == 2:
            ending.append(block)
            expected.append(int(inclusive[block - 1]))
    assert len(ending) > 50 and any(b > 262 for b in ending)
    blocks = torch.tensor(ending, dtype=torch.int64).to(DEVICE)
    out = torch.zeros(len(ending), dtype=torch.int64, device=DEVICE)
    look_back_of[(len(ending),)](words.to(DEVICE), blocks, out, WINDOW=fused_selections.WINDOW)
    assert out.tolist() == expected


@pytest.mark.skipif(DEVICE != "cuda", reason="concurrent blocks need a GPU")
def test_thousands_of_concurrent_blocks_place_every_element():
    """On a GPU, blocks run at once and in any order: each waits on the status words
    of blocks that started before it. Sizes of up to 32k blocks, kept fractions from
    about none to all, and repeated calls (a race shows only sometimes) must each
    return eager's tensor."""
    artifact = ifx.compile(nonzero_above, kept(3 * BLOCK + 5, 700), dynamic=True)
    masked = ifx.compile(select_large, kept(3 * BLOCK + 5, 700), dynamic=True)
    g = torch.Generator(device=DEVICE).manual_seed(0)
    with counting() as calls:
        for n in (BLOCK * 2048 + 17, 1 << 26):
            for keep in (1 / n, 0.01, 0.5, 0.999, 1.0):
                x = torch.rand(n, generator=g, device=DEVICE) + (keep - 0.5)
                for _ in range(3):
                    assert_same_tensor(artifact(x), nonzero_above(x))
                    g2 = (x - 0.5) * 4
                    assert_same_tensor(masked(g2), select_large(g2))
    assert calls == {"fused": 60, "unfused": 0}


def test_the_graphs_cuda_device_is_the_current_one(monkeypatch):
    """The graph allocates on ``device="cuda"``, no index: the current device, as the
    allocation takes it. Compared with a tensor's ``cuda:0`` as it is, no call ever
    fused on a GPU (the GPU tests above count fused calls; CI has no GPU, so this
    checks the device the call asks about)."""
    asked = []
    monkeypatch.setattr(compaction, "runs_kernels", lambda device: not asked.append(device))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    names = ("in_ptr0", "out_ptr0")
    cuda = torch.device("cuda")
    fused = fused_selections.FusedSelection("", False, True, None, names, cuda)

    def values(index):
        return SimpleNamespace(
            shape=(10,),
            dtype=torch.float32,
            device=torch.device("cuda", index),
            is_contiguous=lambda: True,
        )

    assert fused._covered((10,), values(3), 10)
    assert not fused._covered((10,), values(0), 10)
    assert asked == [torch.device("cuda", 3)] * 2
