"""The runner's compactions (``runner/compaction.py``) against ATen's operators.

Two tables, calls interleaved, each between device synchronisations, medians
and the median of the paired ratios:

1. the operators alone, on one input: ``nonzero(mask)``, ``masked_select(x,
   mask)``, ``repeat_interleave(repeats)`` and ``_unique2(integers)``, ATen's
   against the runner's;
2. the programs that define their sizes with them (P1, P6, P7, P8): eager,
   ``ifx.compile``'s direct call as it runs now (``direct``), and the same
   artifact compiled with the operators left to ATen (``direct-aten``).

Every way is first checked against ATen's or eager's result on both inputs of
the program, whose kept counts differ.

    python -m benchmarks.compaction --out benchmarks/results/DATE-h200-compaction.md
    python -m benchmarks.compaction --device cpu --quick
"""

from __future__ import annotations

import argparse
import sys
from typing import Any
from unittest import mock

from benchmarks import harness
from benchmarks.data_dependent import median, program_size, setup
from benchmarks.entry_path import interleaved_seconds

PROGRAMS = ("P1", "P6", "P7", "P8")


def operator_runs(device: str, n: int) -> list[tuple[str, Any, Any, tuple[Any, ...]]]:
    """(name, ATen's, the runner's, arguments) of each operator."""
    import torch

    from inductor_fx_unbacked.runner import compaction

    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=g).to(device)
    repeats = torch.randint(0, 5, (n // 5,), generator=g).to(device)
    integers = torch.randint(0, 50000, (n,), generator=g).to(device)
    aten = torch.ops.aten
    return [
        ("nonzero", aten.nonzero.default, compaction.nonzero, (x > 0,)),
        ("masked_select", aten.masked_select.default, compaction.masked_select, (x, x > 0.5)),
        (
            "repeat_interleave",
            aten.repeat_interleave.Tensor,
            compaction.repeat_interleave,
            (repeats,),
        ),
        ("unique", aten._unique2.default, compaction.unique, (integers,)),
    ]


def rows(times: dict[str, list[float]], base: str) -> list[str]:
    out = []
    for name, seconds in times.items():
        ratios = [s / b for s, b in zip(seconds, times[base])]
        out.append(f"| {name} | {median(seconds) * 1e3:.4f} | {median(ratios):.3f} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=1000, help="timed calls of each way")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true", help="tiny inputs, P1 alone (a smoke run)")
    args = parser.parse_args(argv)

    import torch
    from torch.utils import _pytree as pytree

    device = harness.chosen_device(args.device)

    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.demo.programs import BY_NAME, same
    from inductor_fx_unbacked.runner import compaction

    n, calls = (
        (3 * compaction.BLOCK + 5, 3) if args.quick or device == "cpu" else (args.n, args.calls)
    )
    setup()
    report = harness.Report(
        args.out,
        "The runner's compactions against ATen's operators",
        harness.environment_lines(device, f"- Inputs of {n} elements (P8, repeats: {n // 5})."),
    )
    # The CPU mode runs the kernels in Triton's interpreter, under its patches.
    with ifx.fx_backend(device), mock.patch.object(compaction, "INTERPRETED", True):
        report.add("", "## The operators", "")
        report.add(
            "| operator: way | ms per call (median) | over ATen's (median of paired ratios) |"
        )
        report.add("|---|---|---|")
        for name, aten_op, ours, inputs in operator_runs(device, n):
            expected, got = aten_op(*inputs), ours(*inputs)
            for a, b in zip(pytree.tree_leaves(got), pytree.tree_leaves(expected)):
                if not (torch.equal(a, b) and a.stride() == b.stride()):
                    raise AssertionError(f"the runner's {name} differs from ATen's")
            times = interleaved_seconds(
                {f"{name}: aten": aten_op, f"{name}: runner": ours}, inputs, device, calls
            )
            report.add(*rows(times, f"{name}: aten"))
        report.add("", "## The programs", "")
        report.add("| program: way | ms per call (median) | over eager (median of paired ratios) |")
        report.add("|---|---|---|")
        for name in PROGRAMS[:1] if args.quick else PROGRAMS:
            program = BY_NAME[name]
            inputs = program.inputs(device, program_size(name, n, n))
            runs: dict[str, Any] = {"eager": program.fn}
            runs["direct"] = ifx.compile(program.fn, *inputs[0])
            with mock.patch.dict(compaction.REPLACEMENTS, clear=True):
                runs["direct-aten"] = ifx.compile(program.fn, *inputs[0])
            for args_ in inputs:
                for way, fn in runs.items():
                    if not same(fn(*args_), program.fn(*args_)):
                        raise AssertionError(f"{name}: {way} differs from eager")
            times = interleaved_seconds(runs, inputs[0], device, calls)
            report.add(*rows({f"{name}: {k}": v for k, v in times.items()}, f"{name}: eager"))
    print(report.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
