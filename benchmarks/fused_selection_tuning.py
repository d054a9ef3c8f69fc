"""The fused selection's shape (``runner/fused_selections.py``) against eager and the
unfused runner, by size: ``nonzero(x > 0.5)`` and ``masked_select(g, g.abs() > 1.5)``.

Each way is the same ``ifx.compile`` artifact (one with fusion off, one in two passes),
called with the one-pass kernel's tiles per program, elements per tile and warps set
before each call; every
way's result is checked against eager's first. A call is timed whole (the launch,
the count read to the host, the allocation), calls interleaved between device
synchronisations; GB/s counts the input read once and the result written once.

    python -m benchmarks.fused_selection_tuning --out /tmp/fused.md
    python -m benchmarks.fused_selection_tuning --device cpu --quick   # results only
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

from benchmarks import harness
from benchmarks.entry_path import interleaved_seconds, ranked_rows

SIZES = (1 << 22, 1 << 26, 1 << 28)
TILES = (1, 4)
BLOCKS = (1024, 2048, 4096, 8192)
WARPS = (4, 8, 16)


def nonzero_above(x):
    import torch

    return torch.nonzero(x > 0.5)


def select_large(g):
    import torch

    return torch.masked_select(g, g.abs() > 1.5)


def shaped(artifact: Any, tiles: int, block: int, warps: int) -> Any:
    from inductor_fx_unbacked.runner import fused_selections

    def call(*args: Any) -> Any:
        fused_selections.TILES, fused_selections.BLOCK = tiles, block
        fused_selections.NUM_WARPS = warps
        return artifact(*args)

    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--tiles", type=int, nargs="+", default=TILES)
    parser.add_argument("--blocks", type=int, nargs="+", default=BLOCKS)
    parser.add_argument("--warps", type=int, nargs="+", default=WARPS)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)

    device = harness.chosen_device(args.device)
    from inductor_fx_unbacked.runner import compaction, fused_selections

    quick = args.quick or device == "cpu"
    saved = (compaction.INTERPRETED, fused_selections.ENABLED, fused_selections.SMALLEST)
    saved += (fused_selections.ONE_PASS,)
    saved += (fused_selections.TILES, fused_selections.BLOCK, fused_selections.NUM_WARPS)
    # The runner's kernels in Triton's interpreter on CPU (as the tests run them), and
    # the fused kernel at every size measured.
    compaction.INTERPRETED, fused_selections.SMALLEST = device == "cpu", 0
    try:
        report = sweep(args, device, quick)
    finally:
        (compaction.INTERPRETED, fused_selections.ENABLED, fused_selections.SMALLEST) = saved[:3]
        fused_selections.ONE_PASS = saved[3]
        (fused_selections.TILES, fused_selections.BLOCK, fused_selections.NUM_WARPS) = saved[4:]
    print(report.text)
    return 0


def sweep(args: argparse.Namespace, device: str, quick: bool) -> harness.Report:
    import torch

    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.runner import fused_selections

    sizes = (3 * 2048 + 5,) if quick else tuple(args.sizes)
    tiles, blocks, warps = tuple(args.tiles), tuple(args.blocks), tuple(args.warps)
    shapes = list(
        itertools.product(tiles, blocks[:2] if quick else blocks, warps[:1] if quick else warps)
    )
    calls = 2 if quick else args.calls
    report = harness.Report(
        args.out,
        "The fused selection's shape against eager and the unfused runner",
        harness.environment_lines(
            device,
            f"- {calls} interleaved calls per way and size; ms: the median call; / eager: "
            "the median of the paired ratios; GB/s: input bytes plus result bytes over the "
            "median call.",
        ),
    )
    best: list[str] = []
    for n in sizes:
        x = torch.randn(n, generator=torch.Generator().manual_seed(n)).to(device)
        for fn in (nonzero_above, select_large):
            fused_selections.ENABLED = False
            unfused = ifx.compile(fn, x, dynamic=True)
            fused_selections.ENABLED = True
            fused_selections.ONE_PASS = False
            two_passes = ifx.compile(fn, x, dynamic=True)
            fused_selections.ONE_PASS = True
            fused = ifx.compile(fn, x, dynamic=True)
            expected = fn(x)
            ways: dict[str, Any] = {"eager": fn, "unfused": unfused}
            shape = f"{fused_selections.PASS_BLOCK}/{fused_selections.PASS_WARPS}"
            ways[f"two passes {shape}"] = two_passes
            for t, b, w in shapes:
                ways[f"fused {t}x{b}/{w}"] = shaped(fused, t, b, w)
            for name, way in ways.items():
                got = way(x)
                if not (torch.equal(got, expected) and got.stride() == expected.stride()):
                    raise AssertionError(f"{fn.__name__} {name} differs from eager at {n}")
            times = interleaved_seconds(ways, (x,), device, calls)
            moved = x.numel() * x.element_size() + expected.numel() * expected.element_size()
            report.add("", f"## {fn.__name__}, {n} elements ({expected.shape[0]} kept)", "")
            report.add("| way (tiles x block/warps) | ms | / eager |", "|---|---|---|")
            rows, fastest, ratio = ranked_rows(times, "eager")
            report.add(*rows)
            seconds = sorted(times[fastest])[len(times[fastest]) // 2]
            best.append(
                f"best_{fn.__name__}_{n}: {fastest} {ratio:.3f} ({moved / seconds / 1e9:.0f} GB/s)"
            )
            del ways, times, fused, two_passes, unfused, expected
        del x
        if device == "cuda":
            torch.cuda.empty_cache()
    report.add("", "## Summary", "", *best)
    return report


if __name__ == "__main__":
    sys.exit(main())
