"""Host microseconds of each step of the runner's ``nonzero`` and of its ways to
launch a compiled Triton kernel, against ATen's ``nonzero`` (a diagnosis).

    python -m benchmarks.compaction_steps --out /tmp/steps.md
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from benchmarks import harness
from benchmarks.data_dependent import median


def host_us(fn: Any, calls: int, sync: bool = True) -> float:
    import torch

    times = []
    for _ in range(calls):
        if sync:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return median(times) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch

    from inductor_fx_unbacked.runner import compaction as c

    report = harness.Report(
        args.out, "Host steps of the runner's nonzero", harness.environment_lines("cuda")
    )
    x = torch.randn(args.n, device="cuda") > 0
    c.nonzero(x)  # compiles
    n = x.numel()
    blocks = -(-n // c.BLOCK)
    call = c._Call(x)
    work = call.empty((blocks + 1,), (1,), torch.int64)
    ticket = torch.zeros(1, dtype=torch.int64, device="cuda")
    kernel, constexprs = c._kernels()["count_nonzero"]
    launch = c._COMPILED[(kernel, call.key, *constexprs.values())]
    static = launch.__closure__ is not None and any(
        "Static" in type(cell.cell_contents).__name__ for cell in launch.__closure__
    )
    report.add(f"- The count's launcher is Inductor's static launcher: {static}.")
    stream = call.stream
    steps = {
        "aten nonzero": lambda: torch.ops.aten.nonzero.default(x),
        "runner nonzero": lambda: c.nonzero(x),
        "_covered(x)": lambda: c._covered(x),
        "_Call(x)": lambda: c._Call(x),
        "torch.empty(work)": lambda: torch.empty(blocks + 1, dtype=torch.int64, device="cuda"),
        "call.empty(work)": lambda: call.empty((blocks + 1,), (1,), torch.int64),
        "work.zero_() (the fill a per-call ticket would cost)": work.zero_,
        "_count(call) (the stream's ticket, the launch)": lambda: c._count(
            call, "count_nonzero", blocks, x, work
        ),
        "the count's launcher": lambda: launch(blocks, stream, (x, work, ticket, n, blocks)),
        "the total's view and item()": lambda: c._VIEW(work, (), (), blocks).item(),
        "work[blocks].item()": lambda: work[blocks].item(),
    }
    import inductor_fx_unbacked as ifx
    from benchmarks.data_dependent import setup
    from inductor_fx_unbacked.demo.programs import BY_NAME

    setup()
    p1 = BY_NAME["P1"]
    (xf,) = p1.inputs("cuda", args.n)[0]
    artifact = ifx.compile(p1.fn, xf)
    inner = artifact._run
    steps["P1 eager"] = lambda: p1.fn(xf)
    steps["P1 artifact(x)"] = lambda: artifact(xf)
    steps["P1 artifact._run(x)"] = lambda: inner(xf)
    steps["P1 artifact._check"] = lambda: artifact._check((xf,), ())
    report.add("", "| step | host µs (median) |", "|---|---|")
    for name, fn in steps.items():
        report.add(f"| {name} | {host_us(fn, args.calls):.2f} |")
    print(report.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
