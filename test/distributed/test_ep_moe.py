# Owner(s): ["oncall: distributed"]
"""Expert-parallel MoE through the FX backend: data-dependent collectives.

Two processes, one per rank: on CPU with gloo and Triton's interpreter, and with
NCCL when the machine has two GPUs. Each test spawns its ranks itself, on a free
port, with a process-group timeout, and kills them if they outlive the test's
own deadline, so that a hung collective fails the test instead of hanging it.
"""

from __future__ import annotations

import datetime
import os
import pickle
import time

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._inductor import config
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.ep_moe import ExpertParallelMoE, spawn_ranks

aten = torch.ops.aten

WORLD_SIZE = 2
DIM, HIDDEN, EXPERTS_PER_RANK, TOP_K = 8, 16, 2, 2
TOKENS = (6, 5)  # per rank: the ranks need not agree
STEPS = 4
#: In this step the selection bias steers every token away from rank 1's
#: experts, so that rank 1 receives no tokens at all.
STARVE_RANK_1_STEP = 2
PG_TIMEOUT_S = 120
#: After this, the test kills its ranks and fails (``benchmarks/ep_moe.py`` sets it
#: below its own limit for the test run).
TEST_DEADLINE_S = float(os.environ.get("EP_MOE_TEST_DEADLINE_S", 600))

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(
            torch.cuda.device_count() < WORLD_SIZE, reason=f"needs {WORLD_SIZE} GPUs"
        ),
    ),
]


def init_rank(rank, world_size, init_method, device_type, timeout_s):
    if device_type == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if device_type == "cuda" else "gloo",
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")


@pytest.fixture
def cpu_mode_env(monkeypatch, tmp_path):
    """The spawned ranks inherit the environment: a fresh Inductor cache, and the
    interpreter for the CPU ranks (also on a machine with GPUs)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module", params=DEVICES)
def trained(request, tmp_path_factory):
    """Both ranks' results of ``train_and_compare``: run once per device for the
    tests below, as each run compiles a forward and a backward graph per rank."""
    device_type = request.param
    out_dir = tmp_path_factory.mktemp(f"ep-moe-{device_type}")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TORCHINDUCTOR_CACHE_DIR", str(out_dir / "inductor-cache"))
        if device_type == "cpu":
            env.setenv("TRITON_INTERPRET", "1")
        return run_ranks(train_and_compare, out_dir, device_type)


def train_and_compare(rank, world_size, init_method, device_type, out_dir):
    """One rank: STEPS forward/backward steps, eager and compiled, compared."""
    device = init_rank(rank, world_size, init_method, device_type, PG_TIMEOUT_S)
    try:
        activation = torch.relu if device_type == "cpu" else torch.nn.functional.silu
        moe = ExpertParallelMoE(DIM, HIDDEN, EXPERTS_PER_RANK, TOP_K, activation=activation)
        moe.to(device)
        compiled = torch.compile(moe, fullgraph=True, dynamic=True)
        tokens_per_rank = []
        with (
            torch._dynamo.config.patch(capture_scalar_outputs=True),
            config.patch(compile_threads=1),
            ifx.fx_backend(device_type),
            ifx.recording_graphs() as graphs,
        ):
            for step in range(STEPS):
                generator = torch.Generator().manual_seed(1000 * step + rank)
                x = torch.randn(TOKENS[rank], DIM, generator=generator).to(device)
                bias = torch.zeros(moe.experts, device=device)
                if step == STARVE_RANK_1_STEP:
                    bias[EXPERTS_PER_RANK:] = -1e4
                tokens_per_rank.append(moe.tokens_per_rank(x, bias))
                expected = forward_backward(moe, x, bias)
                close(forward_backward(compiled, x, bias), expected, rank, f"step {step}")
    finally:
        dist.destroy_process_group()
    result = {"tokens_per_rank": tokens_per_rank, "graphs": [summary(gm) for gm in graphs]}
    (out_dir / f"rank{rank}.pkl").write_bytes(pickle.dumps(result))


def close(actual, expected, rank, what):
    """Every result of ``forward_backward`` equal, naming the rank, ``what`` and the result."""
    for name in expected:
        torch.testing.assert_close(
            actual[name],
            expected[name],
            rtol=1e-4,
            atol=1e-5,
            msg=lambda m, name=name: f"rank {rank}, {what}, {name}: {m}",
        )


def forward_backward(module, x, bias):
    x = x.clone().requires_grad_()
    module.zero_grad()
    out = module(x, bias)
    (out * out.detach().sin()).sum().backward()
    grads = {
        f"grad of {name.removeprefix('_orig_mod.')}": p.grad.clone()
        for name, p in module.named_parameters()
    }
    return {"output": out.detach(), "grad of x": x.grad, **grads}


def summary(gm):
    """What the tests check of an FX graph, as plain values.

    ``undefined_births`` lists the nodes at which an unbacked symbol appears in
    ``meta["val"]`` that is neither defined by an earlier node
    (``meta["unbacked_symbol"]``) nor carried by one of the node's inputs (the
    fake values of a definition's own ``meta["val"]`` are fresh symbols): it
    must stay empty.
    """
    defined, placeholders, births, collectives, checks = set(), set(), [], [], []
    symbols_of, known = {}, set()
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        symbols = (
            free_unbacked_symbols(val) if isinstance(val, (torch.Tensor, torch.SymInt)) else set()
        )
        symbols_of[node] = symbols
        inherited = set().union(*(symbols_of.get(n, set()) for n in node.all_input_nodes))
        if node.meta.get("unbacked_symbol") is not None:
            defined.add(str(node.meta["unbacked_symbol"]))
            known.add(node.meta["unbacked_symbol"])
        elif node.op == "placeholder":
            placeholders |= {str(s) for s in symbols}
            known |= symbols
        elif symbols - inherited - known:
            births.append(node.format_node())
        if node.op == "call_function" and getattr(node.target, "namespace", None) == (
            "_c10d_functional"
        ):
            collectives.append(node.target.name())
        if node.meta.get("runtime_assert") and node.target is not aten._make_dep_token.default:
            checks.append((node.target.name(), [rendered(a) for a in node.args[1:-1]]))
    return {
        "defined": defined,
        "symbol_inputs": placeholders,
        "undefined_births": births,
        "collectives": collectives,
        "checks": checks,
    }


def rendered(arg):
    """A check's argument as text: a symbolic size as its value (``u3 + u4``)."""
    if isinstance(arg, (list, tuple)):
        return [rendered(a) for a in arg]
    if isinstance(arg, torch.fx.Node):
        return str(arg.meta.get("val", arg.name))
    return str(arg)


def run_ranks(worker, out_dir, *args):
    spawn_ranks(worker, WORLD_SIZE, (*args, out_dir), timeout=TEST_DEADLINE_S)
    return [pickle.loads((out_dir / f"rank{r}.pkl").read_bytes()) for r in range(WORLD_SIZE)]


def test_moe_forward_and_backward_match_eager_on_every_rank(trained):
    """Every rank's outputs and gradients equal eager's (checked in the ranks) over
    steps whose split sizes change, rank 1 receiving nothing in one of them, with
    one compile of each graph."""
    received = [
        [sum(r["tokens_per_rank"][step][dst] for r in trained) for dst in range(WORLD_SIZE)]
        for step in range(STEPS)
    ]
    assert len({tuple(per_step) for per_step in received}) > 1, received  # splits change
    assert received[STARVE_RANK_1_STEP][1] == 0, received
    for result in trained:
        assert len(result["graphs"]) == 2, "one forward and one backward graph, no recompile"


def test_moe_graphs_carry_collectives_symbols_and_checks(trained):
    experts = EXPERTS_PER_RANK * WORLD_SIZE
    for result in trained:
        forward, backward = result["graphs"]
        # Forward: the counts exchange, the dispatch and the combine, each waited
        # for; backward: the dispatch's and the combine's.
        for graph, count in ((forward, 3), (backward, 2)):
            collectives = graph["collectives"]
            assert collectives.count("_c10d_functional::all_to_all_single") == count, collectives
            assert collectives.count("_c10d_functional::wait_tensor") >= count, collectives
            assert set(collectives) == {
                "_c10d_functional::all_to_all_single",
                "_c10d_functional::wait_tensor",
            }, collectives
        # All but one send count (implied by the others), and every received count.
        assert len(forward["defined"]) == (experts - 1) + experts, forward["defined"]
        # Every data-dependent size is a symbol the graph defines (forward) or
        # receives (backward: the forward's, as inputs).
        for graph in (forward, backward):
            assert graph["undefined_births"] == [], graph["undefined_births"]
        assert not backward["defined"] and backward["symbol_inputs"]
        # The value-range checks of the counts, and size checks of the collectives'
        # outputs, the dispatch's a sum of received counts.
        messages = [args[0] for op, args in forward["checks"] if "assert_scalar" in op]
        assert any(message.endswith(">= 0") for message in messages), messages
        # (assert_tensor_metadata where upstream also checks the dtype, 2.14+)
        sizes = [
            args[0]
            for op, args in forward["checks"]
            if op.endswith(("assert_size_stride", "assert_tensor_metadata"))
            and "all_to_all_single" in args[-1]
        ]
        assert len(sizes) == 3, forward["checks"]
        assert any("+" in size[0] for size in sizes), sizes


# Failure: a check fails on one rank only.

CAP = 4
FAILURE_PG_TIMEOUT_S = 10


def capped_exchange(x):
    """Exchange ``x`` times its number of positives, which must be at most CAP."""
    positives = (x > 0).sum().item()
    torch._check(positives <= CAP)
    return funcol.all_to_all_single(x * positives, None, None, dist.group.WORLD)


def fail_on_one_rank(rank, world_size, init_method, out_dir):
    """Both ranks compile and run ``capped_exchange`` once; in the second call
    rank 1 has too many positives: its compiled graph raises before the
    collective, while rank 0 waits in it. Rank 1 stays alive (as a rank that
    catches the error would), so only the process group's timeout ends rank 0's wait."""
    init_rank(rank, world_size, init_method, "cpu", FAILURE_PG_TIMEOUT_S)
    within_cap = torch.tensor([1.0, -1.0, -2.0, -3.0, 2.0, -1.0, -2.0, -3.0])
    over_cap = torch.arange(1.0, 9.0)
    with (
        torch._dynamo.config.patch(capture_scalar_outputs=True),
        config.patch(compile_threads=1),
        ifx.fx_backend("cpu"),
    ):
        compiled = torch.compile(capped_exchange, fullgraph=True, dynamic=True)
        torch.testing.assert_close(compiled(within_cap), capped_exchange(within_cap))
        dist.barrier()
        started = time.monotonic()
        try:
            compiled(over_cap if rank == 1 else within_cap)
            error = None
        except Exception as e:  # noqa: BLE001 - the error is the result
            error = f"{type(e).__name__}: {e}"
        elapsed = time.monotonic() - started
    (out_dir / f"rank{rank}.pkl").write_bytes(pickle.dumps({"error": error, "s": elapsed}))
    if rank == 1:
        peer = out_dir / "rank0.pkl"
        deadline = time.monotonic() + 6 * FAILURE_PG_TIMEOUT_S
        while not peer.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    dist.destroy_process_group()


@pytest.mark.full
def test_check_failing_on_one_rank_ends_the_other_ranks_wait(tmp_path, cpu_mode_env):
    failing, waiting = reversed(run_ranks(fail_on_one_rank, tmp_path))
    assert failing["error"] is not None and f"u0 <= {CAP}" in failing["error"], failing
    assert waiting["error"] is not None, waiting
    assert "timed out" in waiting["error"].lower() or "timeout" in waiting["error"].lower()
    # The graph was compiled before: the wait ends at the timeout, not before.
    assert FAILURE_PG_TIMEOUT_S * 0.9 < waiting["s"] < FAILURE_PG_TIMEOUT_S + 30, waiting


# The padded dispatch: capacity rows per expert, no size on the host.


def padded_and_exact(rank, world_size, init_method, out_dir):
    """One rank: the padded layer against the exact one (eager), and compiled against
    itself eager, forward and backward, with capacities that keep every assignment
    and one that drops some; the compiled graphs are summarised."""
    device = init_rank(rank, world_size, init_method, "cpu", PG_TIMEOUT_S)
    results = {"dropped": [], "graphs": []}
    try:
        exact = ExpertParallelMoE(DIM, HIDDEN, EXPERTS_PER_RANK, TOP_K)
        full = max(TOKENS) * TOP_K
        for capacity in (full, 1):
            padded = ExpertParallelMoE(DIM, HIDDEN, EXPERTS_PER_RANK, TOP_K, capacity=capacity)
            compiled = torch.compile(padded, fullgraph=True, dynamic=True)
            with (
                config.patch(compile_threads=1),
                ifx.fx_backend("cpu"),
                ifx.recording_graphs() as graphs,
            ):
                for step in range(2):
                    generator = torch.Generator().manual_seed(1000 * step + rank)
                    x = torch.randn(TOKENS[rank] - step, DIM, generator=generator).to(device)
                    bias = torch.zeros(padded.experts, device=device)
                    expected = forward_backward(padded, x, bias)
                    if capacity == full:
                        close(expected, forward_backward(exact, x, bias), rank, "against exact")
                    else:
                        dropped = int((~padded.slots(x, bias)["kept"]).sum())
                        results["dropped"].append(dropped)
                    close(forward_backward(compiled, x, bias), expected, rank, "compiled")
            results["graphs"] += [summary(gm) for gm in graphs]
    finally:
        dist.destroy_process_group()
    (out_dir / f"rank{rank}.pkl").write_bytes(pickle.dumps(results))


def test_padded_dispatch_keeps_every_size_on_the_device(tmp_path, cpu_mode_env):
    """With a capacity of T * k the padded layer equals the exact one; with a
    capacity of one it drops assignments, as capacity-limited MoE does, and compiled
    it equals itself eager. Its graphs, one forward and one backward per capacity
    (the token counts differ between the two steps: no recompile), exchange with
    equal splits and define no unbacked symbol."""
    for result in run_ranks(padded_and_exact, tmp_path):
        assert any(result["dropped"]), result["dropped"]
        assert len(result["graphs"]) == 4, "a forward and a backward per capacity"
        for graph in result["graphs"]:
            assert not graph["defined"] and not graph["symbol_inputs"], graph
            assert "_c10d_functional::all_to_all_single" in graph["collectives"]
