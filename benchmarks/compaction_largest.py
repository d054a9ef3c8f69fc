"""The runner's ``nonzero`` and ``repeat_interleave`` against ATen's past
``compaction.LARGEST``: which of them should take every size.

Each is called with ``LARGEST`` raised, so that the runner's kernels serve every
size, and checked against ATen's operator first; calls are interleaved between
device synchronisations and timed whole (the launches, the count read to the
host, the allocation).

    python -m benchmarks.compaction_largest --out /tmp/largest.md
    python -m benchmarks.compaction_largest --device cpu --quick   # results only
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

from benchmarks import harness
from benchmarks.entry_path import interleaved_seconds, ranked_rows

SEGMENTS = (1 << 22, 1 << 24, 1 << 26)
ELEMENTS = (1 << 24, 1 << 26, 1 << 28)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)

    device = harness.chosen_device(args.device)
    from inductor_fx_unbacked.runner import compaction

    quick = args.quick or device == "cpu"
    # The kernels in Triton's interpreter on CPU (as the tests run them).
    with (
        mock.patch.object(compaction, "INTERPRETED", device == "cpu"),
        mock.patch.object(compaction, "LARGEST", 1 << 30),
    ):
        report = sweep(args, device, quick)
    print(report.text)
    return 0


def sweep(args: argparse.Namespace, device: str, quick: bool) -> harness.Report:
    import torch

    from inductor_fx_unbacked.runner import compaction

    calls = 2 if quick else args.calls
    report = harness.Report(
        args.out,
        "The runner's nonzero and repeat_interleave against ATen's, past LARGEST",
        harness.environment_lines(
            device, f"- {calls} interleaved calls per way and size; ms: the median call."
        ),
    )
    g = torch.Generator().manual_seed(0)
    cases = []
    for segments in (3 * compaction.BLOCK + 5,) if quick else SEGMENTS:
        for below in (9, 3):  # repeats of mean 4, and of mean 1
            repeats = torch.randint(0, below, (segments,), generator=g).to(device)
            title = f"repeat_interleave, {segments} segments, repeats < {below}"
            cases.append((title, torch.repeat_interleave, compaction.repeat_interleave, repeats))
    for n in (3 * compaction.BLOCK + 5,) if quick else ELEMENTS:
        mask = (torch.rand(n, generator=g) > 0.5).to(device)
        cases.append((f"nonzero, {n} elements", torch.nonzero, compaction.nonzero, mask))
    for title, aten, runner, x in cases:
        expected, got = aten(x), runner(x)
        if not (torch.equal(got, expected) and got.stride() == expected.stride()):
            raise AssertionError(f"{title}: the runner's result differs from ATen's")
        times = interleaved_seconds({"aten": aten, "runner": runner}, (x,), device, calls)
        rows = ranked_rows(times, "aten")[0]
        report.add("", f"## {title}", "", "| way | ms | / aten |", "|---|---|---|", *rows)
    return report


if __name__ == "__main__":
    sys.exit(main())
