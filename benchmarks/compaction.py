"""A design probe for P1: a mask's count and compaction in two kernels of our own.

P1 (``torch.nonzero(x > 0) * 2 + 1``) spends its time in ATen's ``nonzero``:
the comparison, cub's count (two reductions and a memset), the copy of the count
to the host and the sync, cub's selection (two kernels), then the pointwise
epilogue. Compiled, Inductor fuses only the epilogue. The probe measures what the
package could emit instead, before building it into the compiler:

1. one kernel counts ``x > 0`` per block (the comparison fused);
2. the counts come to the host (one copy, the sync), where they are added;
3. one kernel writes each kept index, times 2 plus 1, at its place: the block's
   start (the sum of the earlier blocks' counts) plus its rank in the block.

It checks the result against eager's on each input, then times eager,
``ifx.compile``'s direct call and the probe, calls interleaved, each between
device synchronisations, and reports the medians and the median of the paired
ratios over eager.

    python -m benchmarks.compaction --out benchmarks/results/DATE-h200-compaction.md
    python -m benchmarks.compaction --device cpu --quick
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import Any

from benchmarks import harness
from benchmarks.data_dependent import median, setup
from benchmarks.entry_path import interleaved_seconds

#: Elements per program of both kernels.
BLOCK = 4096


@functools.cache
def kernels() -> tuple[Any, Any]:
    """The two kernels, made when first asked for: Triton reads ``TRITON_INTERPRET``
    where a kernel is defined, and the CPU mode sets it in ``main``."""
    import triton
    import triton.language as tl

    @triton.jit
    def count_kept(x_ptr, counts_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offsets = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < n
        x = tl.load(x_ptr + offsets, mask=inside, other=0.0)
        kept = (x > 0) & inside
        tl.store(counts_ptr + pid, tl.sum(kept.to(tl.int32), axis=0))

    @triton.jit
    def compact_kept(x_ptr, counts_ptr, out_ptr, n, BLOCK: tl.constexpr, BLOCKS: tl.constexpr):
        pid = tl.program_id(0)
        earlier = tl.arange(0, BLOCKS)
        start = tl.sum(tl.load(counts_ptr + earlier, mask=earlier < pid, other=0), axis=0)
        offsets = pid * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < n
        x = tl.load(x_ptr + offsets, mask=inside, other=0.0)
        kept = (x > 0) & inside
        rank = tl.cumsum(kept.to(tl.int32), axis=0) - 1
        tl.store(out_ptr + start + rank, offsets.to(tl.int64) * 2 + 1, mask=kept)

    return count_kept, compact_kept


def probe(x: Any) -> Any:
    """P1 in two kernels and one copy to the host."""
    import torch
    import triton

    count_kept, compact_kept = kernels()
    n = x.numel()
    blocks = triton.cdiv(n, BLOCK)
    counts = torch.empty(blocks, dtype=torch.int32, device=x.device)
    count_kept[(blocks,)](x, counts, n, BLOCK=BLOCK)
    kept = int(counts.cpu().sum())
    out = torch.empty((kept, 1), dtype=torch.int64, device=x.device)
    if kept:
        blocks_pow2 = triton.next_power_of_2(blocks)
        compact_kept[(blocks,)](x, counts, out, n, BLOCK=BLOCK, BLOCKS=blocks_pow2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=1000, help="timed calls of each way")
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--quick", action="store_true", help="tiny inputs, no direct call (a smoke run)"
    )
    args = parser.parse_args(argv)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")

    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.demo.programs import BY_NAME

    p1 = BY_NAME["P1"]  # torch.nonzero(x > 0) * 2 + 1, on two inputs that keep different counts
    program = p1.fn
    n, calls = (3 * BLOCK + 5, 3) if args.quick or device == "cpu" else (args.n, args.calls)
    setup()
    report = harness.Report(
        args.out,
        "A design probe for P1: a mask's count and compaction in two kernels",
        harness.environment_lines(device, f"- Inputs of {n} elements."),
    )
    xs = [args_[0] for args_ in p1.inputs(device, n)]
    runs: dict[str, Any] = {"eager": program, "probe": probe}
    if not args.quick:  # the smoke run leaves out the compile
        runs["direct"] = ifx.compile(program, xs[0])
    for x in xs:
        expected = program(x)
        for name, fn in runs.items():
            got = fn(x)
            if not torch.equal(got, expected):
                raise AssertionError(
                    f"{name} differs from eager on an input keeping {len(expected)}"
                )
    report.add(f"- Each way equals eager on inputs keeping {[len(program(x)) for x in xs]} rows.")
    times = interleaved_seconds(runs, (xs[0],), device, calls)
    report.add("", "| way | ms per call (median) | over eager (median of paired ratios) |")
    report.add("|---|---|---|")
    for name, seconds in times.items():
        ratios = [s / e for s, e in zip(seconds, times["eager"])]
        report.add(f"| {name} | {median(seconds) * 1e3:.4f} | {median(ratios):.3f} |")
    print(report.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
