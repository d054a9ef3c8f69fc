"""``python -m inductor_fx_unbacked demo [--device cpu|cuda]``.

Compiles built-in data-dependent programs through the FX wrapper backend, prints
each FX graph with the nodes that define unbacked symbols marked, checks the
results against eager on two inputs with different data-dependent sizes, and ends
with a table of compile and per-call times. Exits non-zero on any mismatch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

#: The demo's programs, from docs/benchmarks.md: cond with branches of different lengths,
#: nonzero, an ``.item()``-sized output, and unique.
DEMO_PROGRAMS = ("P4a", "P1", "P3", "P6")
DEMO_SIZE = 64


def format_graph(gm: torch.fx.GraphModule) -> str:
    """The graph, one node a line, with symbol definitions and runtime checks marked."""
    lines = []
    for node in gm.graph.nodes:
        symbol = node.meta.get("unbacked_symbol")
        mark = f"  <-- defines {symbol}" if symbol is not None else ""
        if node.meta.get("runtime_assert"):
            mark = "  <-- runtime check"
        lines.append(f"    {node.format_node()}{mark}")
    return "\n".join(lines)


def run_demo(device: str, calls: int) -> int:
    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.demo.programs import BY_NAME, same, synchronize

    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    rows = []
    failures = 0
    programs = [BY_NAME[name] for name in DEMO_PROGRAMS]
    for program in programs:
        first, second = program.inputs(device, DEMO_SIZE)
        print(f"=== {program.name}: {program.source} ({device}) ===")
        with ifx.fx_backend(device):
            torch._dynamo.reset()
            compiled = torch.compile(program.fn, fullgraph=True, dynamic=program.dynamic)
            with ifx.recording_graphs() as graphs:
                start = time.perf_counter()
                results = [compiled(*first)]
                synchronize(device)
                cold = time.perf_counter() - start
            results.append(compiled(*second))
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                compiled(*second)
                synchronize(device)
                times.append(time.perf_counter() - start)
        for i, gm in enumerate(graphs):
            print(f"--- FX graph {i + 1} of {len(graphs)} ---")
            print(format_graph(gm))
        for args, result in zip((first, second), results, strict=True):
            expected = program.fn(*args)
            ok = same(result, expected)
            failures += not ok
            sizes = [tuple(t.shape) for t in torch.utils._pytree.tree_leaves(expected)]
            print(f"eager output sizes {sizes}: {'match' if ok else 'MISMATCH'}")
        rows.append((f"{program.name} {program.source}", cold, statistics.median(times) * 1e3))
        print()
    width = max(len(name) for name, _, _ in rows)
    print(f"{'program':<{width}} {'compile + 1st call (s)':>22} {'per call (ms)':>14}")
    for name, cold, steady in rows:
        print(f"{name:<{width}} {cold:>22.2f} {steady:>14.3f}")
    print(f"\n{len(programs)} programs, {failures} mismatching results")
    return 1 if failures else 0


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inductor_fx_unbacked")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile data-dependent programs via FX")
    demo.add_argument("--device", choices=["cpu", "cuda"], default=None)
    demo.add_argument("--calls", type=positive_int, default=10, help="timed calls per program")
    args = parser.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        demo.error("--device cuda: this machine has no CUDA device; use --device cpu")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and "triton" not in sys.modules:
        # CPU mode runs kernels in Triton's interpreter, which reads this on import.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return run_demo(device, args.calls)
