"""How many elements a block of the split scan should take, by dtype and size.

A scan over an unbacked length runs as Inductor's split scan under the FX
wrapper: each block scans its elements, publishes its sum, and looks back over
its predecessors' sums for its prefix (decoupled look-back). Inductor's block is
the reduction heuristic's (2048 elements) raised to at least
``config.triton.min_split_scan_rblock`` (256), so a 64M-element scan runs 32k
blocks whose look-backs chain. The profile of
``results/2026-12-06-h100-realistic-f438f28.md``'s ``expanded_scan`` (64M int64)
has the fused gather-and-scan kernel at 1844 µs, where eager's gather and CUB's
scan take 452 + 465 µs; the float32 scan of ``returns_over_valid_steps`` (53M
elements) took 360 µs, eager's 276 + 126. A 64-bit scan's look-back keeps value
and flag apart, with a fence between them, where a 32-bit one packs both into one
atomic word.

This sweep compiles the realistic scans with ``ifx.compile(dynamic=True)`` under
several ``min_split_scan_rblock`` values and times them, calls interleaved
with eager's, each way's result checked against eager's first.

    python -m benchmarks.scan_tuning --out benchmarks/results/DATE-GPU-scan-tuning.md
    python -m benchmarks.scan_tuning --device cpu --quick   # the results only
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import sys
from collections.abc import Iterator
from typing import Any

from benchmarks import harness
from benchmarks.entry_path import interleaved_seconds, ranked_rows

SIZES = (1 << 22, 1 << 26)
BLOCKS = (256, 2048, 4096, 8192, 16384)


def programs(device: str, n: int) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """The realistic scans at ``n`` elements, and a 64-bit scan of a selection."""
    from benchmarks import realistic_cases as cases

    rewards, valid = cases.valid_steps_inputs(device, {"n": n}, 0)
    values, repeats = cases.segments_inputs(device, {"segments": max(n // 4, 1)}, 0)
    return {
        "returns_over_valid_steps (float32)": (cases.returns_over_valid_steps, (rewards, valid)),
        "returns_over_valid_steps (int64)": (
            cases.returns_over_valid_steps,
            ((rewards * 100).long(), valid),
        ),
        "expanded_scan (int64)": (cases.expanded_scan, (values, repeats)),
    }


@contextlib.contextmanager
def split_scan_warps(warps: int | None) -> Iterator[None]:
    """Split scans compiled inside get ``warps`` warps (None: the heuristic's). The
    heuristic runs where the kernel's module loads: compile threads are kept to
    this process."""
    import torch
    from torch._inductor.runtime import triton_heuristics as heuristics

    if warps is None:
        yield
        return
    cached_autotune = heuristics.cached_autotune

    def warped(size_hints: Any, configs: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("heuristic_type") == heuristics.HeuristicType.SPLIT_SCAN:
            for config in configs:
                config.num_warps = warps
        return cached_autotune(size_hints, configs, *args, **kwargs)

    heuristics.cached_autotune = warped
    try:
        with torch._inductor.config.patch(compile_threads=1):
            yield
    finally:
        heuristics.cached_autotune = cached_autotune


def compiled(fn: Any, inputs: tuple[Any, ...], block: int, warps: int | None) -> Any:
    import torch

    import inductor_fx_unbacked as ifx

    with torch._inductor.config.patch({"triton.min_split_scan_rblock": block}):
        with split_scan_warps(warps):
            return ifx.compile(fn, *inputs, dynamic=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--blocks", type=int, nargs="+", default=BLOCKS)
    parser.add_argument(
        "--warps",
        type=int,
        nargs="+",
        default=None,
        help="the split scan's warps (default: the heuristic's)",
    )
    parser.add_argument("--calls", type=int, default=30, help="timed calls of each way and size")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true", help="one small size, two blocks")
    args = parser.parse_args(argv)

    import torch

    device = harness.chosen_device(args.device)
    quick = args.quick or device == "cpu"
    sizes = (3 * 2048 + 5,) if quick else tuple(args.sizes)
    blocks = tuple(args.blocks[:2]) if quick else tuple(args.blocks)
    shapes = list(itertools.product(blocks, args.warps or [None]))
    calls = 2 if quick else args.calls
    report = harness.Report(
        args.out,
        "The split scan's block against eager's scan",
        harness.environment_lines(
            device,
            f"- {calls} interleaved calls per way and size; ms: the median call; "
            "/ eager: the median of the paired ratios. A way is `ifx.compile(fn, "
            "dynamic=True)` under `config.triton.min_split_scan_rblock` = the block.",
        ),
    )
    best: list[str] = []
    for n in sizes:
        for name, (fn, inputs) in programs(device, n).items():
            expected = fn(*inputs)
            ways: dict[str, Any] = {"eager": fn}
            for block, warps in shapes:
                artifact = compiled(fn, inputs, block, warps)
                torch.testing.assert_close(artifact(*inputs), expected, rtol=1e-4, atol=1e-2)
                ways[f"min block {block}" + (f", {warps} warps" if warps else "")] = artifact
            times = interleaved_seconds(ways, inputs, device, calls)
            rows, fastest, ratio = ranked_rows(times, "eager")
            report.add("", f"## {name}, {n} elements", "")
            report.add("| way | ms | / eager |", "|---|---|---|", *rows)
            tag = name.replace(" (", "_").rstrip(")")
            best.append(f"best_{tag}_{n}: {fastest} {ratio:.3f}")
            del ways, times, expected, inputs
            if device == "cuda":
                torch.cuda.empty_cache()
    report.add("", "## Summary", "", *best)
    print(report.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
