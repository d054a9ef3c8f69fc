"""How the runner's compaction kernels should be shaped, against ATen's, by size.

``runner/compaction.py`` counts and writes in blocks of ``BLOCK`` elements with
Triton's default four warps and an int64 rank inside each block; at 64M elements
and more its ``nonzero`` took 1.9 times ATen's device time
(``results/2026-12-03-h200-realistic-39f8f68.md``), so inputs over 4M elements go
to ATen's. This sweep measures the two passes of ``nonzero`` and
``masked_select`` with other shapes: elements per block, warps per block, and the
in-block rank in int32 (a block never holds 2**31 elements), at sizes from 1M to
256M, against ATen's operator, each way's result checked against ATen's first.

A call is timed whole (both launches, the count read to the host, the
allocation), calls interleaved between device synchronisations
(``entry_path.interleaved_seconds``); at these sizes a call is almost all device
time.

    python -m benchmarks.compaction_tuning --out benchmarks/results/DATE-GPU-compaction-tuning.md
    python -m benchmarks.compaction_tuning --device cpu --quick   # the kernels' results only
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

from benchmarks import harness
from benchmarks.entry_path import interleaved_seconds, ranked_rows

SIZES = (1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28)
BLOCKS = (2048, 4096, 8192, 16384)
WARPS = (4, 8, 16)
RANKS = ("int64", "int32")


def shaped(block: int, warps: int, rank: str):
    """``nonzero`` and ``masked_select`` through the kernels of that shape, launched
    through Triton's JIT (its launch costs microseconds, nothing at these sizes)."""
    import torch
    import triton.language as tl

    from benchmarks.compaction_tuning_kernels import count, indices, values

    chunk = 1024
    rank_dtype = getattr(tl, rank)
    ticket: dict[Any, torch.Tensor] = {}

    def starts(flags: torch.Tensor) -> tuple[torch.Tensor, int, int]:
        n = flags.numel()
        blocks = -(-n // block)
        work = torch.empty(blocks + 1, dtype=torch.int64, device=flags.device)
        t = ticket.setdefault(flags.device, torch.zeros(1, dtype=torch.int64, device=flags.device))
        count[(blocks,)](flags, work, t, n, blocks, BLOCK=block, CHUNK=chunk, num_warps=warps)
        return work, blocks, int(work[blocks])

    def nonzero(x: torch.Tensor) -> torch.Tensor:
        work, blocks, total = starts(x)
        out = torch.empty_strided(
            (total, 1), (1, max(total, 1)), dtype=torch.int64, device=x.device
        )
        indices[(blocks,)](x, work, out, x.numel(), BLOCK=block, RANK=rank_dtype, num_warps=warps)
        return out

    def masked_select(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        work, blocks, total = starts(mask)
        out = torch.empty(total, dtype=x.dtype, device=x.device)
        values[(blocks,)](
            x, mask, work, out, x.numel(), BLOCK=block, RANK=rank_dtype, num_warps=warps
        )
        return out

    return nonzero, masked_select


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--calls", type=int, default=40, help="timed calls of each way and size")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true", help="one small size, a few shapes")
    args = parser.parse_args(argv)

    import torch

    device = harness.chosen_device(args.device)
    from inductor_fx_unbacked.runner import compaction

    quick = args.quick or device == "cpu"
    sizes = (3 * 2048 + 5,) if quick else tuple(args.sizes)
    shapes = list(
        itertools.product(BLOCKS[:2] if quick else BLOCKS, WARPS[:1] if quick else WARPS, RANKS)
    )
    calls = 2 if quick else args.calls
    report = harness.Report(
        args.out,
        "The compaction kernels' shape against ATen's operators",
        harness.environment_lines(
            device,
            f"- {calls} interleaved calls per way and size; ms: the median call; "
            "/ ATen: the median of the paired ratios.",
            f"- The package's shape: BLOCK {compaction.BLOCK}, 4 warps, int64 ranks; "
            f"it takes inputs of at most {compaction.LARGEST} elements.",
        ),
    )
    aten = torch.ops.aten
    best: list[str] = []
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        x = torch.randn(n, generator=g).to(device)
        flags, mask = x > 0, x > 0.5
        for op, ours_at, inputs in (
            ("nonzero", 0, (flags,)),
            ("masked_select", 1, (x, mask)),
        ):
            reference = getattr(aten, op).default
            expected = reference(*inputs)
            ways = {"aten": reference}
            for block, warps, rank in shapes:
                fn = shaped(block, warps, rank)[ours_at]
                got = fn(*inputs)
                if not (torch.equal(got, expected) and got.stride() == expected.stride()):
                    raise AssertionError(f"{op} with {block}/{warps}/{rank} differs from ATen's")
                ways[f"{block}/{warps}/{rank}"] = fn
            times = interleaved_seconds(ways, inputs, device, calls)
            report.add("", f"## {op}, {n} elements", "")
            report.add("| way (block/warps/rank) | ms | / ATen |", "|---|---|---|")
            rows, fastest, ratio = ranked_rows(times, "aten")
            report.add(*rows)
            best.append(f"best_{op}_{n}: {fastest} {ratio:.3f}")
            del ways, times
        del x, flags, mask
        if device == "cuda":
            torch.cuda.empty_cache()
    report.add("", "## Summary", "", *best)
    print(report.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
