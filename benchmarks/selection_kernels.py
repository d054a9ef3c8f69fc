"""Designs of a one-pass selection kernel against eager and the copy bandwidth.

The package's fused selection (``runner/fused_selections.py``) reached a third of
the H100's copy bandwidth at 64M to 256M elements: each program takes one tile of
4096 elements and waits on one look-back, and the kernel's registers allow about
two programs per SM. This sweep measures, on ``nonzero(x > 0.5)`` and
``masked_select(x, |x| > 1.5)`` and outside Inductor (the predicate written into
the kernel):

- ``tiles T B/W``: one look-back per ``T`` tiles of ``B`` elements, ``W`` warps
  (``selection_kernels_triton.tiled_select``); ``tiles 1 4096/4`` is the package's
  design;
- ``two-pass B/W``: a counting pass and a writing pass, each reading the input
  (no look-back; the input read twice);
- ``package`` and ``package unfused``: the same program through ``ifx.compile``
  with the runner's fused selections on (at the package's shape) and off.

A way is timed whole (its launches, the total read to the host, the result's
view), calls interleaved between device synchronisations; every way's result is
checked against eager's first. GB/s counts the input read once and the result
written once; ``copy`` is ``y.copy_(x)`` of the input, its GB/s both.

    python -m benchmarks.selection_kernels --out /tmp/selection.md
    python -m benchmarks.selection_kernels --device cpu --quick   # results only
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

from benchmarks import harness
from benchmarks.entry_path import interleaved_seconds, ranked_rows

SIZES = (1 << 22, 1 << 26, 1 << 28)
TILED = tuple(itertools.product((1, 2, 4, 8), (1024, 2048, 4096), (4, 8)))
TWO_PASS = tuple(itertools.product((2048, 4096, 8192), (4, 8)))
#: (name, the predicate's threshold, its test (``selection_kernels_triton``), values
#: or indices). ``nonzero_bool`` takes the mask ``x > 0.5`` as a bool tensor (as the
#: runner's unfused ``nonzero`` does), the others the floats.
OPS = (
    ("nonzero", 0.5, 0, False),
    ("masked_select", 1.5, 1, True),
    ("nonzero_bool", 0.0, 2, False),
)
WINDOW = 32
CHUNK = 1024


def tiled(tiles: int, block: int, warps: int, thresh: float, test: int, values: bool):
    import torch

    from benchmarks.selection_kernels_triton import tiled_select

    def select(x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        blocks = -(-n // (block * tiles))
        work = torch.zeros(blocks + 2, dtype=torch.int64, device=x.device)
        out = torch.empty(n, dtype=x.dtype if values else torch.int64, device=x.device)
        tiled_select[(blocks,)](
            x, work, out, n, blocks, thresh,
            BLOCK=block, TILES=tiles, VALUES=values, TEST=test, WINDOW=WINDOW,
            num_warps=warps,
        )  # fmt: skip
        return shaped(out, int(work[blocks + 1]), values)

    return select


def two_pass(block: int, warps: int, thresh: float, test: int, values: bool):
    import torch

    from benchmarks.selection_kernels_triton import count_kept, write_kept

    tickets: dict[Any, torch.Tensor] = {}

    def select(x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        blocks = -(-n // block)
        work = torch.empty(blocks + 1, dtype=torch.int64, device=x.device)
        t = tickets.setdefault(x.device, torch.zeros(1, dtype=torch.int64, device=x.device))
        count_kept[(blocks,)](
            x, work, t, n, blocks, thresh, BLOCK=block, TEST=test, CHUNK=CHUNK,
            num_warps=warps,
        )  # fmt: skip
        out = torch.empty(n, dtype=x.dtype if values else torch.int64, device=x.device)
        write_kept[(blocks,)](
            x, work, out, n, thresh, BLOCK=block, VALUES=values, TEST=test, num_warps=warps
        )
        return shaped(out, int(work[blocks]), values)

    return select


def shaped(out: Any, total: int, values: bool) -> Any:
    """The selection's result at the start of ``out``, with the operator's layout."""
    if values:
        return out[:total]
    return out.as_strided((total, 1), (1, max(total, 1)))


def package(eager_fn: Any, example: Any, fused: bool) -> Any:
    """``eager_fn`` through ``ifx.compile``, the runner's fused selections on or off."""
    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.runner import fused_selections

    saved = fused_selections.ENABLED
    fused_selections.ENABLED = fused
    try:
        return ifx.compile(eager_fn, example, dynamic=True)
    finally:
        fused_selections.ENABLED = saved


def eager(thresh: float, test: int, values: bool):
    import torch

    def select(x: torch.Tensor) -> torch.Tensor:
        if test == 2:
            return torch.nonzero(x)
        keep = (x.abs() if test == 1 else x) > thresh
        return torch.masked_select(x, keep) if values else torch.nonzero(keep)

    return select


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--calls", type=int, default=15, help="timed calls of each way and size")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true", help="one small size, a few shapes")
    args = parser.parse_args(argv)

    device = harness.chosen_device(args.device)
    quick = args.quick or device == "cpu"
    sizes = (5 * 1024 + 7,) if quick else tuple(args.sizes)
    tiled_shapes = [(t, b, 4) for t in (1, 2, 3) for b in (1024,)] if quick else TILED
    two_pass_shapes = [(1024, 4)] if quick else TWO_PASS
    calls = 2 if quick else args.calls
    report = harness.Report(
        args.out,
        "One-pass selection designs against eager and the copy bandwidth",
        harness.environment_lines(
            device,
            f"- {calls} interleaved calls per way and size; ms: the median call; / eager: "
            "the median of the paired ratios; GB/s: input bytes plus result bytes over "
            "the median call (for copy, the bytes read and written).",
        ),
    )
    from inductor_fx_unbacked.runner import compaction

    # The runner's kernels in Triton's interpreter on CPU (as the tests run them).
    saved, compaction.INTERPRETED = compaction.INTERPRETED, device == "cpu"
    try:
        summary = sweep(sizes, tiled_shapes, two_pass_shapes, device, calls, report)
    finally:
        compaction.INTERPRETED = saved
    report.add("", "## Summary", "", *summary)
    print(report.text)
    return 0


def sweep(
    sizes: tuple[int, ...],
    tiled_shapes: Any,
    two_pass_shapes: Any,
    device: str,
    calls: int,
    report: harness.Report,
) -> list[str]:
    """Each way at each size, checked then timed, into ``report``; the summary lines."""
    import torch

    summary: list[str] = []
    for n in sizes:
        x = torch.randn(n, generator=torch.Generator().manual_seed(n)).to(device)
        y = torch.empty_like(x)
        copy = interleaved_seconds({"copy": torch.Tensor.copy_}, (y, x), device, calls)["copy"]
        copy_gbs = 2 * x.nbytes / sorted(copy)[len(copy) // 2] / 1e9
        summary.append(f"copy_gbs_{n}: {copy_gbs:.0f}")
        for op, thresh, test, values in OPS:
            ways: dict[str, Any] = {"eager": eager(thresh, test, values)}
            for t, b, w in tiled_shapes:
                ways[f"tiles {t} {b}/{w}"] = tiled(t, b, w, thresh, test, values)
            for b, w in two_pass_shapes:
                ways[f"two-pass {b}/{w}"] = two_pass(b, w, thresh, test, values)
            inputs = (x > 0.5,) if test == 2 else (x,)
            ways["package"] = package(ways["eager"], inputs[0], fused=True)
            ways["package unfused"] = package(ways["eager"], inputs[0], fused=False)
            expected = ways["eager"](*inputs)
            for name, way in ways.items():
                for _ in range(2):  # the second call reuses the first's state (tickets)
                    got = way(*inputs)
                    if not (torch.equal(got, expected) and got.stride() == expected.stride()):
                        raise AssertionError(f"{op}: {name} differs from eager at {n}")
            times = interleaved_seconds(ways, inputs, device, calls)
            moved = inputs[0].nbytes + expected.numel() * expected.element_size()
            report.add("", f"## {op}, {n} elements ({expected.shape[0]} kept)", "")
            report.add("| way | ms | / eager | GB/s |", "|---|---|---|---|")
            rows, fastest, ratio = ranked_rows(times, "eager")
            for row in rows:
                way = row.split(" | ")[0][2:]
                seconds = sorted(times[way])[len(times[way]) // 2]
                report.add(f"{row} {moved / seconds / 1e9:.0f} |")
            seconds = sorted(times[fastest])[len(times[fastest]) // 2]
            gbs = moved / seconds / 1e9
            summary.append(
                f"best_{op}_{n}: {fastest} {ratio:.3f} ({gbs:.0f} GB/s, "
                f"{gbs / copy_gbs:.2f} of copy)"
            )
            del ways, times, expected, inputs
        del x, y
        if device == "cuda":
            torch.cuda.empty_cache()
    return summary


if __name__ == "__main__":
    sys.exit(main())
