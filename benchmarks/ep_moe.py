"""Expert-parallel MoE on 2 GPUs: tokens per second, eager vs Python wrapper vs FX backend.

One command spawns the ranks itself (NCCL, one process per GPU), and writes
markdown to ``--out``:

    python -m benchmarks.ep_moe --out benchmarks/results/DATE-h200-ep-moe.md --with-tests
    python -m benchmarks.ep_moe --device cpu --quick --out /tmp/ep-moe.md   # a smoke run

``--with-tests`` first runs the correctness tests on the GPUs
(``pytest test/distributed/test_ep_moe.py -k cuda``) and puts their result in
the report. The layer is ``inductor_fx_unbacked.demo.ep_moe.ExpertParallelMoE``
(router, counts exchange, dispatch ``all_to_all`` with ``.tolist()`` split
sizes, local experts, combine ``all_to_all``). A step is one forward and one
backward of the layer, on inputs that cycle through ``--inputs`` token batches
whose split sizes differ. Backends:

- ``eager``: no compile;
- ``python``: ``torch.compile(fullgraph=True, dynamic=True)``, Inductor's Python wrapper;
- ``fx``: the same inside ``inductor_fx_unbacked.fx_backend("cuda")`` (lowered runner);
- with ``--capacity-factor F``, also ``eager-padded`` and ``fx-padded``: the layer
  with a capacity (``ExpertParallelMoE(capacity=...)``) of ``F`` times an even
  share (``ceil(F * tokens * k / experts)`` rows per expert and rank), whose
  exchanges have equal splits and no size on the host; assignments past the
  capacity are dropped, and the report counts them.

Each compiled backend compiles on a copy of the step's code object (Dynamo
caches compiled code per code object). The backends take turns in rounds of
``--iters`` synchronized steps; a step's time is the slower rank's; the report
gives each backend's median over ``--rounds`` rounds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

from benchmarks import harness

BACKENDS = ("eager", "python", "fx")
PADDED_BACKENDS = ("eager-padded", "fx-padded")
WORLD_SIZE = 2


def forward(module, x, bias):
    return module(x, bias)


def forward_for(backend):
    """``forward`` for ``backend``: compiled backends get a code object of their own."""
    import torch

    if backend.startswith("eager"):
        return forward
    copy = types.FunctionType(forward.__code__.replace(), forward.__globals__, f"fw_{backend}")
    return torch.compile(copy, fullgraph=True, dynamic=True)


def rank_main(rank, world_size, init_method, options, out_dir):
    import contextlib

    import torch
    import torch.distributed as dist

    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.demo.ep_moe import ExpertParallelMoE

    device_type = options["device"]
    cuda = device_type == "cuda"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=300),
    )
    torch._dynamo.config.capture_scalar_outputs = True
    backends = BACKENDS + (PADDED_BACKENDS if options["capacity"] else ())

    def layer(capacity):
        return ExpertParallelMoE(
            options["dim"],
            options["hidden"],
            options["experts_per_rank"],
            options["top_k"],
            # silu on GPUs; the CPU smoke run keeps to relu, cheap in Triton's interpreter.
            activation=torch.nn.functional.silu if cuda else torch.relu,
            capacity=capacity,
        ).to(device)

    moe = layer(None)
    padded = layer(options["capacity"]) if options["capacity"] else None
    layer_of = {backend: padded if backend.endswith("padded") else moe for backend in backends}

    def synchronize():
        if cuda:
            torch.cuda.synchronize()

    generator = torch.Generator().manual_seed(rank)
    inputs = [
        (
            torch.randn(options["tokens"], options["dim"], generator=generator)
            .to(device)
            .requires_grad_(),
            torch.randn(moe.experts, generator=generator).to(device),
            torch.randn(options["tokens"], options["dim"], generator=generator).to(device),
        )
        for _ in range(options["inputs"])
    ]
    received, dropped = [], []
    for x, bias, _ in inputs:
        counts = torch.tensor(moe.tokens_per_rank(x, bias), device=device)
        dist.all_reduce(counts)
        received.append(counts.tolist())
        if padded is not None:
            lost = (~padded.slots(x, bias)["kept"]).sum()
            dist.all_reduce(lost)
            dropped.append(lost.item())

    fx_graphs = []

    @contextlib.contextmanager
    def context(backend):
        if not backend.startswith("fx"):
            yield
            return
        with ifx.fx_backend(device_type), ifx.recording_graphs() as graphs:
            yield
        fx_graphs.extend(graphs)

    def run(fn, x, bias, grad_out, module=moe):
        """One step: forward and backward."""
        module.zero_grad(set_to_none=True)
        x.grad = None
        out = fn(module, x, bias)
        out.backward(grad_out)
        return out

    fns, compile_s, max_error = {}, {}, {}
    # Each backend against eager of its own layer (the padded one drops assignments).
    # (In one order on every rank: each call's collectives pair up across ranks.)
    layers = [moe] if padded is None else [moe, padded]
    expected = {m: run(forward, *inputs[0], module=m).detach() for m in layers}
    for backend in backends:
        module = layer_of[backend]
        fns[backend] = forward_for(backend)
        synchronize()
        dist.barrier()
        with context(backend):
            started = time.perf_counter()
            out = run(fns[backend], *inputs[0], module=module)
            synchronize()
            compile_s[backend] = time.perf_counter() - started
            max_error[backend] = (out.detach() - expected[module]).abs().max().item()
            for args in inputs[1:]:
                run(fns[backend], *args, module=module)  # every split size once: no recompile
    rounds = {backend: [] for backend in backends}
    for _ in range(options["rounds"]):
        for backend in backends:
            synchronize()
            dist.barrier()
            with context(backend):
                started = time.perf_counter()
                for i in range(options["iters"]):
                    run(fns[backend], *inputs[i % len(inputs)], module=layer_of[backend])
                synchronize()
                elapsed = time.perf_counter() - started
            per_step = torch.tensor(elapsed / options["iters"], device=device)
            dist.all_reduce(per_step, op=dist.ReduceOp.MAX)  # the slower rank's
            rounds[backend].append(per_step.item())
    dist.destroy_process_group()
    if rank == 0:
        result = {
            "rounds": rounds,
            "compile_s": compile_s,
            "max_error": max_error,
            "received": received,
            "dropped": dropped,
            # A forward and a backward per layer; more would be recompiles.
            "fx_graphs": len(fx_graphs),
        }
        (out_dir / "result.json").write_text(json.dumps(result))


def report_lines(options: dict, result: dict) -> list[str]:
    """The measurement: the layer, the exchange, per-backend step times and errors."""
    tokens = WORLD_SIZE * options["tokens"]
    median = {b: statistics.median(rounds) for b, rounds in result["rounds"].items()}
    capacity = options["capacity"]
    lines = [
        "## Steps",
        "",
        f"- Layer: `ExpertParallelMoE`, {options['tokens']} tokens per rank, dim "
        f"{options['dim']}, hidden {options['hidden']}, {options['experts_per_rank']} experts "
        f"per rank, top-{options['top_k']}, float32, "
        f"{'silu' if options['device'] == 'cuda' else 'relu'}; one step = forward + backward; "
        f"{options['inputs']} inputs whose split sizes differ, in turn.",
        f"- Tokens received per rank, per input: {result['received']}; FX graphs "
        f"compiled: {result['fx_graphs']} (a forward and a backward per layer; more would "
        "be recompiles).",
        *(
            [
                f"- Padded layer: capacity {capacity} rows per expert and rank; assignments "
                f"dropped per input (both ranks): {result['dropped']} of "
                f"{tokens * options['top_k']}; its error is against eager of the padded layer.",
            ]
            if capacity
            else []
        ),
        f"- Each backend: {options['rounds']} rounds of {options['iters']} synchronized steps, "
        "time per step = the slower rank's; median over rounds.",
        "",
        "| backend | time per step (ms) | tokens/s | rounds (ms) | first call (s) | "
        "max abs error vs eager |",
        "|---|---|---|---|---|---|",
    ]
    for backend in result["rounds"]:
        rounds = ", ".join(f"{t * 1e3:.2f}" for t in result["rounds"][backend])
        lines.append(
            f"| {backend} | {median[backend] * 1e3:.3f} | {tokens / median[backend]:,.0f} | "
            f"{rounds} | {result['compile_s'][backend]:.1f} | "
            f"{result['max_error'][backend]:.2e} |"
        )
    return [
        *lines,
        "",
        f"ep_moe_fx_over_python_wrapper: {median['fx'] / median['python']:.2f}",
        f"ep_moe_ranks: {WORLD_SIZE}",
        f"ep_moe_fx_over_eager: {median['fx'] / median['eager']:.2f}",
        *(
            [f"ep_moe_fx_padded_over_fx: {median['fx-padded'] / median['fx']:.2f}"]
            if capacity
            else []
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="markdown file to write")
    parser.add_argument("--with-tests", action="store_true", help="run the GPU tests first")
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke run (gloo)"
    )
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per rank")
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--experts-per-rank", type=int, default=4)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--inputs", type=int, default=4)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=240, help="seconds for the ranks")
    parser.add_argument("--tests-timeout", type=float, default=200, help="seconds for pytest")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny layer, 2 steps")
    parser.add_argument(
        "--capacity-factor",
        type=float,
        default=None,
        help="also measure the padded layer, with this many times an even share per expert",
    )
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.dim, args.hidden, args.inputs = 64, 16, 32, 2
        args.iters, args.rounds = 2, 1

    import torch

    from inductor_fx_unbacked.demo.ep_moe import spawn_ranks

    if args.device == "cuda" and torch.cuda.device_count() < WORLD_SIZE:
        print(f"needs {WORLD_SIZE} GPUs, found {torch.cuda.device_count()}", file=sys.stderr)
        return 2
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # for the spawned ranks
    gpus = f"{torch.cuda.device_count()} GPUs" if args.device == "cuda" else "CPU, gloo"
    out = harness.Report(
        args.out,
        f"Expert-parallel MoE, {WORLD_SIZE} ranks: eager vs Python wrapper vs FX backend",
        harness.environment_lines(args.device, f"- Ranks: {WORLD_SIZE} ({gpus})."),
    )
    tests_ok = True
    if args.with_tests:
        # The test kills its ranks first, so that none outlives pytest.
        deadline = str(max(30.0, args.tests_timeout - 30))
        tests = harness.run_pytest(
            ["test/distributed/test_ep_moe.py", "-k", args.device],
            timeout=args.tests_timeout,
            env={**os.environ, "EP_MOE_TEST_DEADLINE_S": deadline},
        )
        tests_ok = tests.returncode == 0 and not tests.timed_out
        out.add(f"## Correctness tests ({'NCCL' if args.device == 'cuda' else 'gloo'})", "")
        out.add(*harness.pytest_lines(tests), "")
        print(harness.pytest_summary(tests.output), flush=True)
    options = {
        name: getattr(args, name)
        for name in ("tokens", "dim", "hidden", "experts_per_rank", "top_k", "inputs", "device")
    }
    experts = WORLD_SIZE * args.experts_per_rank
    capacity = None
    if args.capacity_factor is not None:
        capacity = math.ceil(args.capacity_factor * args.tokens * args.top_k / experts)
    options.update(iters=args.iters, rounds=args.rounds, capacity=capacity)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tmp, "inductor-cache"))
        spawn_ranks(rank_main, WORLD_SIZE, (options, Path(tmp)), timeout=args.timeout)
        result = json.loads((Path(tmp) / "result.json").read_text())
    out.add(*report_lines(options, result))
    print(out.text)
    return 0 if tests_ok else 1


if __name__ == "__main__":
    sys.exit(main())
