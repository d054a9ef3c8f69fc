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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Program:
    name: str
    fn: Callable[..., Any]
    inputs: Callable[[str], list[tuple[Any, ...]]]
    compile_kwargs: dict[str, Any]


def _cond_mismatched(x: torch.Tensor) -> torch.Tensor:
    return torch.cond(x.sum() > 0, lambda x: x[1:] * 2, lambda x: x[2:] + 1, (x,))


def _nonzero(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x > 0) * 2 + 1


def _item_sized(x: torch.Tensor) -> torch.Tensor:
    return torch.arange((x > 0).sum().item(), device=x.device) * 2


def _unique_counts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    values, counts = torch.unique(x, return_counts=True)
    return values + 1, counts * 2


def _signed(n: int, positive: int, device: str) -> torch.Tensor:
    """``n`` values of which the first ``positive`` are positive, shuffled."""
    g = torch.Generator().manual_seed(n * 31 + positive)
    x = torch.rand(n, generator=g) + 0.1
    x[positive:] *= -1
    return x[torch.randperm(n, generator=g)].to(device)


PROGRAMS = [
    Program(
        "cond, branches of different lengths",
        _cond_mismatched,
        lambda d: [(_signed(64, 50, d),), (_signed(64, 10, d),)],
        {"dynamic": True},
    ),
    Program(
        "nonzero",
        _nonzero,
        lambda d: [(_signed(64, 20, d),), (_signed(64, 41, d),)],
        {},
    ),
    Program(
        ".item()-sized arange",
        _item_sized,
        lambda d: [(_signed(64, 7, d),), (_signed(64, 33, d),)],
        {},
    ),
    Program(
        "unique(return_counts=True)",
        _unique_counts,
        lambda d: [
            (torch.tensor([3, 1, 3, 2, 2, 2], device=d),),
            (torch.tensor([5, 4, 5, 7, 1, 9, 9, 0], device=d),),
        ],
        {},
    ),
]

#: Until runtime asserts become FX IR, the FX backend needs these off.
ASSERTS_OFF = {
    "alignment_asserts": False,
    "size_asserts": False,
    "scalar_asserts": False,
    "nan_asserts": False,
}


def format_graph(gm: torch.fx.GraphModule) -> str:
    """The graph, one node a line, with the nodes that define unbacked symbols marked."""
    lines = []
    for node in gm.graph.nodes:
        symbol = node.meta.get("unbacked_symbol")
        mark = f"  <-- defines {symbol}" if symbol is not None else ""
        lines.append(f"    {node.format_node()}{mark}")
    return "\n".join(lines)


def _same(a: Any, b: Any) -> bool:
    flat_a, spec_a = torch.utils._pytree.tree_flatten(a)
    flat_b, spec_b = torch.utils._pytree.tree_flatten(b)
    if spec_a != spec_b:
        return False
    return all(
        x.shape == y.shape and torch.allclose(x, y) if isinstance(x, torch.Tensor) else x == y
        for x, y in zip(flat_a, flat_b)
    )


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_demo(device: str, calls: int) -> int:
    from torch._inductor import config

    import inductor_fx_unbacked as ifx

    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    rows = []
    failures = 0
    for program in PROGRAMS:
        first, second = program.inputs(device)
        print(f"=== {program.name} ({device}) ===")
        with config.patch(ASSERTS_OFF), ifx.fx_backend(device):
            torch._dynamo.reset()
            compiled = torch.compile(program.fn, fullgraph=True, **program.compile_kwargs)
            with ifx.recording_graphs() as graphs:
                start = time.perf_counter()
                results = [compiled(*first)]
                _sync(device)
                cold = time.perf_counter() - start
            results.append(compiled(*second))
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                compiled(*second)
                _sync(device)
                times.append(time.perf_counter() - start)
        for i, gm in enumerate(graphs):
            print(f"--- FX graph {i + 1} of {len(graphs)} ---")
            print(format_graph(gm))
        for args, result in zip((first, second), results):
            expected = program.fn(*args)
            ok = _same(result, expected)
            failures += not ok
            sizes = [tuple(t.shape) for t in torch.utils._pytree.tree_leaves(expected)]
            print(f"eager output sizes {sizes}: {'match' if ok else 'MISMATCH'}")
        rows.append((program.name, cold, statistics.median(times) * 1e3))
        print()
    print(f"{'program':<38} {'compile + 1st call (s)':>22} {'per call (ms)':>14}")
    for name, cold, steady in rows:
        print(f"{name:<38} {cold:>22.2f} {steady:>14.3f}")
    print(f"\n{len(PROGRAMS)} programs, {failures} mismatching results")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inductor_fx_unbacked")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile data-dependent programs via FX")
    demo.add_argument("--device", choices=["cpu", "cuda"], default=None)
    demo.add_argument("--calls", type=int, default=10, help="timed calls per program")
    args = parser.parse_args(argv)

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu" and "triton" not in sys.modules:
        # CPU mode runs kernels in Triton's interpreter, which reads this on import.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return run_demo(device, args.calls)


if __name__ == "__main__":
    sys.exit(main())
