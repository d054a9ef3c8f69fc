# Owner(s): ["module: inductor"]
"""CUDA graphs in the lowered runner: the stretches of device work between host syncs.

Without a GPU: which nodes of real lowered graphs form stretches and why, what
is hoisted before a stretch and what runs only while it is captured, the rewrite
(each stretch one node, its body a graph of its own) on whole programs, the key,
the admission and memory policies, and the fallback when a capture fails (here,
every capture fails: there is no CUDA). The CPU mode's graphs hold the kernels a
GPU's do, launched through Triton's interpreter on CPU tensors;
:data:`INTERPRETED` declares those launches capturable to read that structure.

On a GPU: every corpus program with ``cuda_graphs=True`` equals eager over inputs
whose data-dependent sizes differ (a size never seen, then an old one again),
replays happen, a violated check raises on the call that violates it, memory
stays within the bound, training steps, reduce-overhead, warm starts, and a
capture that fails. The expert-parallel MoE layer needs two GPUs and is not
tested here.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import operator
import threading

import pytest
import torch
from programs import CORPUS, CorpusProgram, data_dependent_dynamo, fresh_copy, run, values
from torch._higher_order_ops import while_loop
from torch._inductor import config

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.artifact import store
from inductor_fx_unbacked.artifact.facts import VALUE_KIND
from inductor_fx_unbacked.artifact.kernels import owned_kernels
from inductor_fx_unbacked.codegen import views
from inductor_fx_unbacked.demo.programs import BY_NAME, same
from inductor_fx_unbacked.integration import caches
from inductor_fx_unbacked.integration.backend import (
    InterpreterFxWrapperCodegen,
    register_fx_wrapper,
)
from inductor_fx_unbacked.runner import cuda_graphs, lowering, segments, straightline
from inductor_fx_unbacked.runner.checks import SCALAR, Check
from inductor_fx_unbacked.runner.cuda_graphs import (
    Action,
    CapturedStretch,
    Entry,
    GraphMemory,
    limits,
    stretch_key,
)
from inductor_fx_unbacked.runner.segments import CUDA, Capturable, Role
from inductor_fx_unbacked.runner.stretches import compile_with_cuda_graphs
from inductor_fx_unbacked.runner.tuning import Launch

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
aten = torch.ops.aten
#: The CPU mode's launches and allocations, declared capturable.
INTERPRETED = Capturable("cpu", (Launch, lowering._InterpretedLaunch))
CAPTURABLE = CUDA if GPU else INTERPRETED
needs_gpu = pytest.mark.skipif(not GPU, reason="CUDA graphs need a GPU")
cpu_only = pytest.mark.skipif(GPU, reason="on a GPU, captures succeed: the GPU tests cover it")


#: What a replay costs by default (``Limits.launches_per_replay``).
LAUNCHES_PER_REPLAY = cuda_graphs.Limits().launches_per_replay


@pytest.fixture(autouse=True)
def dynamo_config():
    # Every stretch is rewritten, whatever a replay would save, so that the small
    # programs here exercise the rewrite and the captures; the policy's own tests
    # set the default back.
    with data_dependent_dynamo(), limits(launches_per_replay=0):
        yield
    cuda_graphs.release_all()
    ifx.disable()


# Programs.


def normalized_positives(x):
    """A mask (a sync), then reductions of what it kept that do not all fuse:
    column sums (over the kept rows) and a maximum (over each row)."""
    kept = x[x > 0]
    columns = torch.stack([kept, kept * 2], 1)
    return columns / columns.sum(0), kept.amax()


def normalized_positive_pairs(x):
    """A result that is a view of a tensor made after the sync."""
    kept = x[x > 0]
    # Column sums over the pairs: kernels that do not all fuse into one.
    pairs = kept.view(-1, 2)
    return (pairs / pairs.sum(0)).t(), kept.amax()


def top_values(x, n):
    """``.item()`` (a sync), checks of its value, then topk and a kernel."""
    k = n.item()
    torch._check(k >= 1)
    torch._check(k <= 5)
    return torch.topk(x, k).values * 2


def mlp_on_positive_rows(x, w):
    """A mask of rows, then kernels and matmuls on the rows it kept."""
    rows = x[x.sum(1) > 0]
    return ((rows * 2) @ w).relu() @ w


def mlp_if_positive(x, w):
    """The same matmuls in one branch of a ``cond``."""
    return torch.cond(
        x.sum() > 0, lambda x, w: ((x * 2) @ w).relu() @ w, lambda x, w: x - 1, (x, w)
    )


def doubled_while_positive(n, x):
    def body(i, acc):
        return i - 1, (acc * 2).relu() @ acc.t() @ acc

    return while_loop(lambda i, acc: i > 0, body, (n, x))


def signed(*shape, positive=0.5, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(*shape, generator=g) + 0.1
    sign = torch.where(torch.rand(*shape, generator=g) < positive, 1.0, -1.0)
    return (x * sign).to(DEVICE)


def lowered_root(fn, *args, **compile_kwargs):
    """The lowered copy of the graph that ``fn`` compiles to (its root graph)."""
    captured = ifx.capture_fx_graphs(fn, *args, device=DEVICE, fullgraph=True, **compile_kwargs)
    gm = captured.graphs[-1]
    return lowering.lower(gm, owned_kernels(gm))


def kind(node):
    """What a node does, in a word: for reading stretches in tests."""
    target = node.target
    if isinstance(target, (Launch, lowering._InterpretedLaunch)):
        return "launch"
    if target is torch.empty_strided:
        return "empty"
    if isinstance(target, Check):
        return target.name
    if isinstance(target, torch._ops.OpOverload):
        return target.overloadpacket.__name__
    if target is operator.getitem:
        return "getitem"
    return node.op if node.op != "call_function" else getattr(target, "__name__", str(target))


# Which nodes form stretches.


def test_device_work_between_two_syncs_is_one_stretch():
    lowered = lowered_root(normalized_positives, signed(16))
    (stretch,) = segments.find_stretches(lowered.graph, CAPTURABLE)
    kinds = [kind(node) for node in stretch.nodes]
    # Releases fuse the reductions differently: two or three kernels.
    assert {"empty", "launch"} <= set(kinds) <= {"empty", "launch", "_reinterpret_tensor"}
    assert stretch.launches == kinds.count("launch") >= 2
    ended_by, _ = stretch.ended_by
    assert ended_by.op == "output"
    # The mask's nonzero defines u0 (the host learns its size): it comes before.
    (mask,) = [node for node in lowered.graph.nodes if kind(node) in ("index", "nonzero")]
    assert segments.roles(lowered.graph, CAPTURABLE)[mask][0] is Role.BOUNDARY
    assert mask in stretch.inputs()


def test_checks_of_host_values_are_hoisted_and_checks_of_tensors_made_inside_are_capture_only():
    lowered = lowered_root(top_values, signed(16), torch.tensor([3], device=DEVICE))
    (stretch,) = segments.find_stretches(lowered.graph, CAPTURABLE)
    kinds = [kind(node) for node in stretch.nodes]
    assert kinds[:2] == ["topk", "getitem"] and kinds[-1] == "launch"
    # The checks of topk's outputs (their size, on a GPU their alignment, on 2.14+ their
    # dtype): the key (k) fixes them, so they run when the stretch is captured only.
    checks = stretch.capture_only()
    assert {kind(check) for check in checks} <= {
        "assert_size_stride",
        "assert_tensor_metadata",
        "assert_alignment",
    }
    assert all(check.args[0] in stretch.nodes for check in checks)
    assert stretch.nodes[1] in {check.args[0] for check in checks}
    # The launch's grid, computed from k between topk and the launch, runs before.
    assert stretch.hoisted and all(segments.is_host_value(node) for node in stretch.hoisted)
    roles = segments.roles(lowered.graph, CAPTURABLE)
    item = next(node for node in lowered.graph.nodes if kind(node) == "item")
    assert roles[item][0] is Role.BOUNDARY and "u0" in roles[item][1]
    scalar_checks = [node for node in lowered.graph.nodes if node.target is SCALAR]
    assert scalar_checks and all(roles[node][0] is Role.HOST for node in scalar_checks)


def test_extern_kernels_whose_tensors_are_on_the_device_join_a_stretch():
    lowered = lowered_root(mlp_on_positive_rows, signed(8, 4), signed(4, 4, seed=1))
    (stretch,) = segments.find_stretches(lowered.graph, CAPTURABLE)
    kinds = [kind(node) for node in stretch.nodes]
    assert set(kinds) == {"launch", "empty", "mm"} and kinds.count("mm") == 2
    assert stretch.launches == kinds.count("launch") + 2 >= 4


def test_a_host_node_reading_a_tensor_made_inside_ends_the_stretch():
    graph = torch.fx.Graph()
    n = graph.placeholder("n")
    n.meta[VALUE_KIND] = "int"
    launch = lowering._InterpretedLaunch(lambda: None, ["buffer"])
    buffer = graph.call_function(
        torch.empty_strided, ((n,), (1,)), {"dtype": torch.float32, "device": "cpu"}
    )
    first = graph.call_function(launch, ((1, 1, 1), buffer))
    second = graph.call_function(launch, ((1, 1, 1), buffer))
    size = graph.call_function(aten.sym_size.int, (buffer, 0))
    graph.call_function(launch, ((1, 1, 1), buffer, size))
    graph.output(buffer)
    (stretch,) = segments.find_stretches(graph, INTERPRETED)
    assert stretch.nodes == [buffer, first, second]
    assert stretch.ended_by[0] is size


def test_a_stretch_launches_at_least_two_kernels():
    # One kernel between two syncs: a graph would save nothing.
    lowered = lowered_root(lambda x: torch.nonzero(x > 0) * 2 + 1, signed(16))
    assert segments.find_stretches(lowered.graph, CAPTURABLE) == []


@cpu_only
def test_the_cpu_modes_launches_allocations_and_extern_kernels_do_not_capture():
    lowered = lowered_root(mlp_on_positive_rows, signed(8, 4), signed(4, 4, seed=1))
    assert segments.find_stretches(lowered.graph, CUDA) == []
    reasons = {kind(n): why for n, (role, why) in segments.roles(lowered.graph, CUDA).items()}
    assert reasons["empty"] == "allocates on cpu"
    assert reasons["launch"].endswith("does not capture")
    # A CPU tensor would be read once, when captured.
    assert reasons["mm"].endswith("reads a tensor not known to be on the device")


def test_control_flow_and_nan_checks_end_stretches():
    x, w = signed(4, 4), signed(4, 4, seed=1)
    roles = segments.roles(lowered_root(mlp_if_positive, x, w).graph, CAPTURABLE)
    assert [role for node, (role, _) in roles.items() if kind(node) == "cond"] == [Role.BOUNDARY]
    n = torch.tensor(2, device=DEVICE)
    roles = segments.roles(lowered_root(doubled_while_positive, n, x).graph, CAPTURABLE)
    assert [role for node, (role, _) in roles.items() if kind(node) == "while_loop"] == [
        Role.BOUNDARY
    ]
    with config.patch(nan_asserts=True):
        lowered = lowered_root(normalized_positives, signed(16))
    roles = segments.roles(lowered.graph, CAPTURABLE)
    nan_checks = [node for node in lowered.graph.nodes if kind(node) in ("isnan", "isinf")]
    assert nan_checks and all(roles[node][0] is Role.BOUNDARY for node in nan_checks)


def test_branches_get_stretches_of_their_own():
    x, w = signed(4, 4), signed(4, 4, seed=1)
    lowered = lowered_root(mlp_if_positive, x, w)
    assert segments.find_stretches(lowered.graph, CAPTURABLE) == []
    run_it = compile_with_cuda_graphs(lowered, straightline.generate, CAPTURABLE)
    (stretch,) = run_it.stretches
    assert stretch.counts.launches == 4
    assert same(run_it(x, w), mlp_if_positive(x, w))


def test_a_stretch_is_rewritten_only_where_a_replay_pays():
    """By default a replay and each copy of a result cost three launches: the
    stretch of ``normalized_positives`` (a few launches, both results returned)
    runs as it is, P5's (a launch per split, the stacked sums returned) is one
    CUDA graph."""
    p5 = BY_NAME["P5"]
    with limits(launches_per_replay=LAUNCHES_PER_REPLAY):
        lowered = lowered_root(normalized_positives, signed(16))
        (stretch,) = segments.find_stretches(lowered.graph, CAPTURABLE)
        assert stretch.launches < 2 * LAUNCHES_PER_REPLAY
        run_it = compile_with_cuda_graphs(lowered, straightline.generate, CAPTURABLE)
        assert not hasattr(run_it, "stretches")
        assert not any(isinstance(n.target, CapturedStretch) for n in run_it.lowered.graph.nodes)

        lowered = lowered_root(p5.fn, *p5.inputs(DEVICE, 256)[0])
        (stretch,) = segments.find_stretches(lowered.graph, CAPTURABLE)
        assert stretch.launches >= 2 * LAUNCHES_PER_REPLAY
        run_it = compile_with_cuda_graphs(lowered, straightline.generate, CAPTURABLE)
        (captured,) = run_it.stretches
        assert sum(captured.copied) == 1


def test_each_copied_result_counts_as_a_replay():
    """P5's stretch returns one result: it pays where two replays' worth of launches
    fit in its launches, and not one more."""
    p5 = BY_NAME["P5"]
    lowered = lowered_root(p5.fn, *p5.inputs(DEVICE, 256)[0])
    (stretch,) = segments.find_stretches(lowered.graph, CAPTURABLE)
    per_replay = stretch.launches // 2
    for cost, rewritten in ((per_replay, True), (per_replay + 1, False)):
        with limits(launches_per_replay=cost):
            run_it = compile_with_cuda_graphs(lowered, straightline.generate, CAPTURABLE)
        assert hasattr(run_it, "stretches") is rewritten, cost


def test_the_results_that_reach_the_graphs_output_are_the_ones_copied():
    """A replay writes the graph's own memory: a result the graph returns is copied
    out after it; one that later nodes only read is not."""
    x, y = signed(64, 8, seed=1), signed(64, 8, positive=0.3, seed=2)
    w = signed(8, 8, seed=3).requires_grad_()
    captured = ifx.capture_fx_graphs(masked_mlp_loss, x, w, y, device=DEVICE, fullgraph=True)
    forward = captured.graphs[0]
    lowered = lowering.lower(forward, owned_kernels(forward))
    run_it = compile_with_cuda_graphs(lowered, straightline.generate, CAPTURABLE)
    returned = {}
    for call in run_it.lowered.graph.nodes:
        if isinstance(call.target, CapturedStretch):
            for result in call.users:
                copied = call.target.copied[result.args[1]]
                returned[result.name] = (any(u.op == "output" for u in result.users), copied)
    assert sorted(set(returned.values())) == [(False, False), (True, True)], returned


def test_a_view_of_a_tensor_made_inside_is_made_again_after_the_stretch():
    """A stretch returns whole tensors: copying one after a replay copies what its
    views show."""
    x = values(16, 6, seed=0, device=DEVICE)
    lowered = lowered_root(normalized_positive_pairs, x)
    run_it = compile_with_cuda_graphs(lowered, straightline.generate, CAPTURABLE)
    (stretch,) = run_it.stretches
    body_results = stretch.body.lowered.graph.output_node().args[0]
    assert not any(kind(node) in ("as_strided", "_reinterpret_tensor") for node in body_results)
    (call,) = [n for n in run_it.lowered.graph.nodes if n.target is stretch]
    remade = [user for result in call.users for user in result.users if views.makes_view(user)]
    assert remade and all(any(u.op == "output" for u in view.users) for view in remade)
    assert all(stretch.copied[view.args[0].args[1]] for view in remade)
    assert same(tuple(run_it(x)), normalized_positive_pairs(x))


def test_a_warm_start_finds_the_stretches_a_cold_start_does():
    """A graph restored from Inductor's cache has no fake values; the segmentation
    reads the stored facts and the graph's structure, and finds the same nodes."""
    captured = ifx.capture_fx_graphs(
        top_values, signed(16), torch.tensor([3], device=DEVICE), device=DEVICE, fullgraph=True
    )
    cold = captured.graphs[-1]
    warm = store.loads(store.dumps(cold, "lowered"), with_values=False).gm
    intermediate = [n for n in warm.graph.nodes if n.op not in ("placeholder", "get_attr")]
    assert not any("val" in node.meta for node in intermediate)

    def stretches_of(gm):
        lowered = lowering.lower(gm, owned_kernels(gm))
        found = segments.find_stretches(lowered.graph, CAPTURABLE)
        return [([n.name for n in s.nodes], [n.name for n in s.hoisted]) for s in found]

    assert stretches_of(warm) == stretches_of(cold) != []


# The rewrite, on whole programs.


class _InterpretedStretches(InterpreterFxWrapperCodegen):
    """The CPU mode's wrapper codegen, its lowered runner rewritten with stretches of
    the interpreter's launches (whose captures fail here: there is no CUDA)."""

    #: The stretches of each graph compiled, in order (a forward before its backward).
    made: list[list[CapturedStretch]] = []

    def compile_graph(self, gm):
        lowered = lowering.lower(gm, owned_kernels(gm))
        compiled = compile_with_cuda_graphs(lowered, straightline.generate, INTERPRETED)
        self.made.append(list(getattr(compiled, "stretches", [])))
        return compiled


@contextlib.contextmanager
def interpreted_stretches():
    """Compile in the CPU mode with :class:`_InterpretedStretches`; yields the stretches
    made, per graph. Inductor's caches would serve graphs compiled without them."""
    _InterpretedStretches.made = []
    with ifx.fx_backend("cpu"), config.patch(force_disable_caches=True):
        register_fx_wrapper("cpu", _InterpretedStretches, runner="lowered", runtime_asserts=True)
        yield _InterpretedStretches.made


REWRITTEN = {
    "normalized_positives": (
        normalized_positives,
        lambda: [(signed(16, positive=p),) for p in (0.3, 0.8, 0.3)],
    ),
    "top_values": (top_values, lambda: [(signed(16), torch.tensor([k])) for k in (3, 5, 3)]),
    "normalized_positive_pairs": (
        normalized_positive_pairs,
        lambda: [(values(16, p, seed=p, device="cpu"),) for p in (6, 10, 6)],
    ),
    "mlp_on_positive_rows": (
        mlp_on_positive_rows,
        lambda: [(signed(8, 4, positive=p), signed(4, 4, seed=1)) for p in (0.3, 0.8, 0.3)],
    ),
    **{
        p.name: (p.fn, lambda p=p: p.inputs("cpu"))
        for p in CORPUS
        if p.name
        in (
            "split_with_sizes_tolist",
            "custom_op_nested_outputs",
            "detection_postprocess",
            "ragged_batch_means",
            "unique_inverse",
            "masked_mse_backward",
            "masked_select_backward",
        )
    },
}


@cpu_only
@pytest.mark.parametrize("name", sorted(REWRITTEN))
def test_a_program_with_its_stretches_rewritten_equals_eager(name):
    """Each stretch runs its body (every capture fails here), after hoisted host
    work, handing back the tensors the rest of the graph reads."""
    fn, make_inputs = REWRITTEN[name]
    program = next((p for p in CORPUS if p.name == name), None)
    inputs = make_inputs()
    with interpreted_stretches() as made:
        compiled = torch.compile(fresh_copy(fn), fullgraph=True)
        for args in inputs + inputs:
            if program is not None:
                assert same(run(program, compiled, args), run(program, fn, args), rtol=1e-4)
            else:
                assert same(compiled(*args), fn(*args), rtol=1e-4)
    assert any(made), "no stretch found"


def masked_mlp_loss(x, w, y):
    h = (x @ w).relu()
    mask = y > 0
    return ((h[mask] - y[mask]) ** 2).sum()


def training_step(fn, x, w, y):
    w.grad = None
    loss = fn(x, w, y)
    loss.backward()
    return loss.detach(), w.grad


@cpu_only
def test_a_training_steps_forward_and_backward_graphs_both_have_stretches():
    x, y = signed(64, 8, seed=1), signed(64, 8, positive=0.3, seed=2)
    w = signed(8, 8, seed=3).requires_grad_()
    want = training_step(masked_mlp_loss, x, w, y)
    with interpreted_stretches() as made:
        compiled = torch.compile(masked_mlp_loss, fullgraph=True)
        for _ in range(2):
            assert same(training_step(compiled, x, w, y), want, rtol=1e-4, atol=1e-5)
    forward, backward = made
    assert forward and backward


# Keys, admission and memory.


def test_a_key_is_the_scalars_and_the_memory_of_the_tensors():
    x = torch.arange(8.0)
    key = stretch_key((x, 3), device=0)
    assert key == stretch_key((x.view(8), 3), 0), "the same memory, another tensor"
    assert key != stretch_key((x, 4), 0)
    assert key != stretch_key((x[1:], 3), 0)
    assert key != stretch_key((x[:4], 3), 0)
    assert stretch_key((x.view(2, 4), 3), 0) != stretch_key((x.view(4, 2).t(), 3), 0)
    assert key != stretch_key((x.view(torch.int32), 3), 0)
    assert key != stretch_key((x, 3), 1)


def test_a_float_is_keyed_by_its_bits():
    """``-0.0 == 0.0``, yet a kernel that divides by it tells them apart; a NaN never
    equals itself, yet a stretch called with NaN again must find its capture."""
    assert stretch_key((-0.0,), 0) != stretch_key((0.0,), 0)
    assert stretch_key((float("nan"),), 0) == stretch_key((float("nan"),), 0)
    assert stretch_key((1.5,), 0) == stretch_key((1.5,), 0)
    assert stretch_key((1.5,), 0) != stretch_key((1.5000000001,), 0)


def cpu_stretch(memory):
    return CapturedStretch("doubling", lambda x: (x * 2,), [True], 2, "cpu", memory)


def entry(stretch, key, nbytes):
    return Entry(stretch, key, graph=None, outputs=(), nbytes=nbytes)


def test_a_key_captures_on_its_third_call_and_replays_after():
    memory = GraphMemory()
    stretch = cpu_stretch(memory)
    assert [stretch.plan(("a",)) for _ in range(3)] == [Action.EAGER, Action.EAGER, Action.CAPTURE]
    assert stretch.plan(("b",)) is Action.EAGER
    assert memory.add(entry(stretch, ("a",), 10), max_entries=4, max_bytes=100)
    assert stretch.plan(("a",)) is Action.REPLAY
    assert stretch.plan(("b",)) is Action.EAGER


def test_a_stretch_keeps_at_most_keys_per_stretch_captures():
    memory = GraphMemory()
    stretch = cpu_stretch(memory)
    with limits(capture_after=1, keys_per_stretch=2):
        for key in ("a", "b"):
            assert stretch.plan((key,)) is Action.CAPTURE
            memory.add(entry(stretch, (key,), 1), max_entries=8, max_bytes=100)
        assert stretch.plan(("c",)) is Action.EAGER


def test_the_calls_counted_per_key_are_bounded():
    stretch = cpu_stretch(GraphMemory())
    with limits(counted_keys=2):
        for key in ("a", "b", "a", "c"):
            stretch.plan((key,))
        assert list(stretch.calls_by_key) == [("a",), ("c",)]


def test_memory_evicts_the_least_recently_used_entry():
    memory = GraphMemory()
    stretch = cpu_stretch(memory)
    old, new = entry(stretch, ("old",), 40), entry(stretch, ("new",), 40)
    memory.add(old, max_entries=8, max_bytes=100)
    memory.add(new, max_entries=8, max_bytes=100)
    memory.begin_call()
    memory.use(old)
    memory.begin_call()
    assert memory.make_room(40, max_entries=8, max_bytes=100)
    assert list(stretch.entries) == [("old",)]
    assert stretch.counts.evictions == 1
    assert stretch.plan(("new",)) is not Action.REPLAY


def test_memory_never_evicts_an_entry_used_in_the_current_call():
    memory = GraphMemory()
    stretch = cpu_stretch(memory)
    used = entry(stretch, ("used",), 60)
    memory.add(used, max_entries=8, max_bytes=100)
    memory.begin_call()
    memory.use(used)
    assert not memory.make_room(60, max_entries=8, max_bytes=100)
    assert not memory.add(entry(stretch, ("next",), 60), max_entries=8, max_bytes=100)
    assert list(stretch.entries) == [("used",)]
    memory.begin_call()
    assert memory.add(entry(stretch, ("next",), 60), max_entries=8, max_bytes=100)
    assert list(stretch.entries) == [("next",)] and memory.total_bytes == 60


def test_memory_keeps_at_most_max_entries():
    memory = GraphMemory()
    stretch = cpu_stretch(memory)
    for key in range(5):
        memory.begin_call()
        assert memory.add(entry(stretch, (key,), 1), max_entries=2, max_bytes=100)
    assert list(stretch.entries) == [(3,), (4,)]


def test_an_entry_larger_than_the_bound_is_not_kept():
    memory = GraphMemory()
    stretch = cpu_stretch(memory)
    assert not memory.add(entry(stretch, ("huge",), 101), max_entries=8, max_bytes=100)
    assert not stretch.entries and memory.total_bytes == 0


@contextlib.contextmanager
def graph_log():
    """The records of ``runner/cuda_graphs.py``'s logger."""
    records = logging.handlers.BufferingHandler(capacity=1000)
    cuda_graphs.log.addHandler(records)
    try:
        yield records.buffer
    finally:
        cuda_graphs.log.removeHandler(records)


@cpu_only
def test_a_stretch_whose_capture_fails_runs_eagerly_from_then_on():
    x = signed(16)
    lowered = lowered_root(normalized_positives, x)
    run_it = compile_with_cuda_graphs(lowered, straightline.generate, INTERPRETED)
    (stretch,) = run_it.stretches
    with limits(capture_after=1), graph_log() as records:
        for _ in range(3):
            # The graph returns a list where the program returns a tuple.
            assert same(tuple(run_it(x)), normalized_positives(x))
    warnings = [r.getMessage() for r in records if "cannot be captured" in r.getMessage()]
    assert len(warnings) == 1 and stretch.__name__ in warnings[0]
    assert stretch.uncapturable and stretch.counts.failures == 1
    assert stretch.counts.eager_runs == 3 and not stretch.entries


# When CUDA graphs are on.


def test_cuda_graphs_follow_reduce_overhead_unless_set():
    assert not cuda_graphs.wanted(None)
    with config.patch({"triton.cudagraphs": True}):
        assert cuda_graphs.wanted(None) and not cuda_graphs.wanted(False)
    assert cuda_graphs.wanted(True)


def test_cuda_graphs_are_in_the_artifacts_identity():
    def uuid(device, cuda_graphs):
        return caches.FxArtifactIdentity(device, "lowered", True, None, cuda_graphs).uuid()

    assert uuid("cuda", True) != uuid("cuda", False) == uuid("cuda", None)
    with config.patch({"triton.cudagraphs": True}):
        assert uuid("cuda", None) == uuid("cuda", True)
        assert uuid("cpu", None) == uuid("cpu", False), "the CPU mode never captures"


def test_cuda_graphs_need_the_lowered_runner():
    with pytest.raises(ValueError, match="needs runner='lowered'"):
        with ifx.fx_backend(DEVICE, runner="graph", cuda_graphs=True):
            pass


# On a GPU. Keys hold the addresses of the tensors a stretch reads, so each test
# keeps the same tensors alive at the start of every call (expected values are
# computed before, results dropped after): the caching allocator then hands out
# the same addresses, as it does in a steady loop.


def calls(inputs, repeat=5):
    """Each input ``repeat`` times (a key captures on its third call and replays
    after), then the first input again: each input after the first has sizes never
    seen before it, and the last calls repeat old ones."""
    return [args for args in inputs for _ in range(repeat)] + [inputs[0]] * 2


def fails_without_cuda_graphs(program, inputs):
    """The error of ``program`` compiled without CUDA graphs, or None."""
    torch._dynamo.reset()
    try:
        with ifx.fx_backend(DEVICE, cuda_graphs=False):
            compiled = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=True)
            for args in inputs:
                run(program, compiled, args)
    except Exception as e:  # noqa: BLE001 - the FX backend's own limit, not CUDA graphs'
        return e
    return None


#: The corpus, and the benchmark's programs that have stretches (small inputs).
GPU_PROGRAMS = [
    *CORPUS,
    *(
        CorpusProgram(name, BY_NAME[name].fn, lambda d, name=name: BY_NAME[name].inputs(d, 1 << 14))
        for name in ("P5", "P7", "H5")
    ),
]


@needs_gpu
@pytest.mark.parametrize("program", GPU_PROGRAMS, ids=lambda p: p.name)
def test_program_with_cuda_graphs_equals_eager(program):
    inputs = program.inputs(DEVICE)
    expected = [run(program, program.fn, args) for args in calls(inputs)]
    since = cuda_graphs.next_serial()
    try:
        with ifx.fx_backend(DEVICE, cuda_graphs=True):
            compiled = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=True)
            for args, want in zip(calls(inputs), expected):
                got = run(program, compiled, args)
                assert same(got, want, rtol=1e-4, atol=1e-5), args
                del got
    except AssertionError:
        raise
    except Exception as e:
        if fails_without_cuda_graphs(program, inputs) is None:
            raise
        pytest.xfail(f"fails without CUDA graphs too: {type(e).__name__}")
    for stretch in cuda_graphs.stats(since):
        # Every stretch the segmentation finds captures; one captured on a key's
        # third call replays on the calls with that key after it.
        assert stretch.failures == 0, stretch
        assert stretch.captures == 0 or stretch.replays > 0, stretch


@needs_gpu
def test_two_threads_calling_programs_with_stretches_each_get_their_own_results():
    """A replay's results are the captured graph's memory until the call returns:
    calls from two threads at once take turns, and each gets its own input's result."""
    p5 = BY_NAME["P5"]
    program = CorpusProgram("P5", p5.fn, lambda d: p5.inputs(d, 1 << 12))
    inputs = program.inputs(DEVICE)
    torch._dynamo.reset()
    since = cuda_graphs.next_serial()
    with ifx.fx_backend(DEVICE, cuda_graphs=True), limits(capture_after=1000):
        # Neither ``dynamic=True`` nor ``fullgraph=True``: around each call they set
        # process-wide state (Dynamo's config where it is process-wide; the eval-frame
        # override on 2.11) that two threads' calls can leave changed, upstream's race
        # (docs/upstream.md). The second size recompiles; P5 has no graph break.
        compiled = torch.compile(fresh_copy(program.fn))
        for args in inputs:
            run(program, compiled, args)  # compiled for both inputs' sizes, nothing captured
    errors = []

    def call_many(args):
        want = run(program, program.fn, args)
        try:
            for _ in range(50):
                assert same(run(program, compiled, args), want, rtol=1e-4, atol=1e-5)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=call_many, args=(args,)) for args in inputs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # The threads captured (each its input's key) and replayed.
    assert sum(stretch.replays for stretch in cuda_graphs.stats(since)) > 0


@needs_gpu
def test_replayed_results_that_the_graph_returns_are_copies():
    """Results that reach the graph's output are copied after a replay; the others
    are the graph's own memory, which the next replay writes again."""
    x = signed(64)
    returned = CapturedStretch("returned", lambda x: (x * 2 + 1,), [True], 2)
    read_later = CapturedStretch("read later", lambda x: (x * 2 + 1,), [False], 2)
    with limits(capture_after=1):
        returned(x), read_later(x)  # each captures
        before = x * 2 + 1
        (kept,), (shared,) = returned(x), read_later(x)
        x.mul_(2)  # the same memory and sizes: the same key
        after = x * 2 + 1
        (kept_after,), (shared_after,) = returned(x), read_later(x)
    assert returned.counts.replays == read_later.counts.replays == 2
    assert same(kept, before) and same(kept_after, after)
    assert shared.data_ptr() == shared_after.data_ptr() and same(shared, after)


@needs_gpu
def test_a_violated_check_raises_on_the_call_that_violates_it():
    x = signed(16)
    ok, violating = torch.tensor([3], device=DEVICE), torch.tensor([7], device=DEVICE)
    want = top_values(x, ok)
    with ifx.fx_backend(DEVICE, cuda_graphs=False):
        plain = torch.compile(fresh_copy(top_values), fullgraph=True)
        with pytest.raises(Exception) as expected:
            plain(x, violating)
    since = cuda_graphs.next_serial()
    with ifx.fx_backend(DEVICE, cuda_graphs=True):
        compiled = torch.compile(fresh_copy(top_values), fullgraph=True)
        for _ in range(4):
            assert same(compiled(x, ok), want)
        with pytest.raises(expected.type) as raised:
            compiled(x, violating)
        assert str(raised.value) == str(expected.value)
        assert same(compiled(x, ok), want)
    (stretch,) = cuda_graphs.stats(since)
    assert stretch.captures == 1 and stretch.replays == 2


def rows_kept(kept, rows=64, seed=0):
    """``rows`` rows of 4, the first ``kept`` of them with a positive sum."""
    x = signed(rows, 4, seed=seed).abs()
    x[kept:] *= -1
    return x


def run_kept(compiled, w, kept, times):
    """``times`` calls of ``compiled`` on ``kept`` positive rows, each checked, and
    each followed by a yield for the caller's own checks."""
    x = rows_kept(kept)
    want = mlp_on_positive_rows(x, w)
    for _ in range(times):
        assert same(compiled(x, w), want)
        yield


@needs_gpu
def test_captures_stay_within_max_entries():
    w = signed(4, 4, seed=1)
    since = cuda_graphs.next_serial()
    with limits(max_entries=2), ifx.fx_backend(DEVICE, cuda_graphs=True):
        compiled = torch.compile(mlp_on_positive_rows, fullgraph=True)
        for kept in (8, 16, 24, 32, 40):
            for _ in run_kept(compiled, w, kept, times=4):
                assert len(cuda_graphs.MEMORY.entries) <= 2
    (stretch,) = cuda_graphs.stats(since)
    assert stretch.captures == 5 and stretch.replays == 5 and stretch.evictions == 3


@needs_gpu
def test_captures_stay_within_max_bytes():
    w = signed(4, 4, seed=1)
    since = cuda_graphs.next_serial()
    with ifx.fx_backend(DEVICE, cuda_graphs=True):
        compiled = torch.compile(mlp_on_positive_rows, fullgraph=True)
        for _ in run_kept(compiled, w, 8, times=4):
            pass
        (stretch,) = cuda_graphs.stats(since)
        one_entry = stretch.bytes
        assert stretch.captures == 1 and stretch.replays == 1 and one_entry > 0
        with limits(max_bytes=one_entry):
            for kept in (16, 24, 32):
                for _ in run_kept(compiled, w, kept, times=4):
                    assert cuda_graphs.MEMORY.total_bytes <= one_entry
    (stretch,) = cuda_graphs.stats(since)
    assert stretch.evictions >= 1


@needs_gpu
def test_a_training_step_with_cuda_graphs_equals_eager():
    """Every step equals eager, and the forward and the backward each replay a stretch.

    A stretch's key holds the addresses it reads: the backward's inputs are the
    forward's results, which move while the forward's stretches start replaying
    (a replay returns copies), so the backward's keys settle only after some
    steps (6 or 7 on an H200, where one of its stretches captured a key its
    inputs left). Twelve steps leave room for that; not every capture replays."""
    x, y = signed(64, 8, seed=1), signed(64, 8, positive=0.3, seed=2)
    w = signed(8, 8, seed=3).requires_grad_()
    want = tuple(t.clone() for t in training_step(masked_mlp_loss, x, w, y))
    since = cuda_graphs.next_serial()
    with ifx.fx_backend(DEVICE, cuda_graphs=True), ifx.recording_graphs() as recorded:
        compiled = torch.compile(masked_mlp_loss, fullgraph=True)
        for _ in range(12):
            assert same(training_step(compiled, x, w, y), want, rtol=1e-4, atol=1e-5)
    forward, backward = recorded
    found = []
    for gm in (forward, backward):
        lowered = lowering.lower(gm, owned_kernels(gm))
        found.append(len(segments.find_stretches(lowered.graph)))
        assert found[-1], gm.code
    # The forward compiles before the backward: its stretches have the first serials.
    made = cuda_graphs.stats(since)
    assert len(made) == sum(found), (found, made)
    forward_made, backward_made = made[: found[0]], made[found[0] :]
    assert any(s.replays for s in forward_made) and any(s.replays for s in backward_made), made


@needs_gpu
def test_reduce_overhead_turns_cuda_graphs_on():
    """``mode="reduce-overhead"`` sets ``triton.cudagraphs``; Inductor's own CUDA
    graphs leave graphs with data-dependent operators alone (graph partitions,
    which would split them, are off under the FX wrapper)."""
    options = {"triton.cudagraphs": True, "graph_partition": False}
    w = signed(4, 4, seed=1)
    made = []
    for setting in (None, False):
        torch._dynamo.reset()
        since = cuda_graphs.next_serial()
        with ifx.fx_backend(DEVICE, cuda_graphs=setting):
            compiled = torch.compile(fresh_copy(mlp_on_positive_rows), options=options)
            for _ in run_kept(compiled, w, 8, times=5):
                pass
        made.append(cuda_graphs.stats(since))
    with_default, switched_off = made
    assert [s.replays > 0 for s in with_default] == [True]
    assert switched_off == []


@needs_gpu
def test_a_stretch_never_captures_inside_a_callers_capture():
    """The caller's CUDA graph holds the stretch's kernels instead."""
    w = signed(4, 4, seed=1)

    def no_sync(x):
        return ((x * 2) @ w).relu() @ w

    x = signed(4, 4)
    since = cuda_graphs.next_serial()
    with ifx.fx_backend(DEVICE, cuda_graphs=True):
        compiled = torch.compile(no_sync, fullgraph=True)
        compiled(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = compiled(x)
    x.mul_(-1)
    graph.replay()
    assert same(out, no_sync(x))
    (stretch,) = cuda_graphs.stats(since)
    assert stretch.captures == 0 and stretch.eager_runs == 2


@needs_gpu
def test_a_capture_that_fails_falls_back_and_leaves_cuda_usable():
    def syncing(x):
        # .item() waits for the device: no CUDA graph can hold it.
        return (x * x.sum().item(),)

    x = signed(64)
    bad = CapturedStretch("syncs", syncing, [True], 2)
    good = CapturedStretch("doubles", lambda x: (x * 2 + 1,), [True], 2)
    with limits(capture_after=1), graph_log() as records:
        for _ in range(2):
            assert same(bad(x), syncing(x))
        for _ in range(3):
            assert same(good(x), (x * 2 + 1,))
    assert bad.uncapturable and bad.counts.failures == 1 and bad.counts.eager_runs == 2
    assert len([r for r in records if "cannot be captured" in r.getMessage()]) == 1
    assert good.counts.captures == 1 and good.counts.replays == 2


@needs_gpu
@pytest.mark.caches_on
def test_a_warm_start_replays_cuda_graphs(tmp_path):
    from torch._dynamo.utils import counters
    from torch._inductor.utils import fresh_cache

    w = signed(4, 4, seed=1)
    runs = []
    with fresh_cache(dir=str(tmp_path)):
        for _ in range(2):
            torch._dynamo.reset()
            counters.clear()
            since = cuda_graphs.next_serial()
            with ifx.fx_backend(DEVICE, cuda_graphs=True):
                compiled = torch.compile(mlp_on_positive_rows, fullgraph=True)
                for _ in run_kept(compiled, w, 8, times=5):
                    pass
            served = (
                counters["aot_autograd"]["autograd_cache_hit"]
                + counters["inductor"]["fxgraph_cache_hit"]
            )
            runs.append((served, cuda_graphs.stats(since)))
    (cold_served, cold), (warm_served, warm) = runs
    assert cold_served == 0 and warm_served >= 1
    assert [s.replays > 0 for s in warm] == [s.replays > 0 for s in cold] == [True]
