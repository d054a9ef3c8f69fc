"""The ten data-dependent programs of BASELINE.md: correctness and timings.

For each program, compiles it with Inductor's Python wrapper and with the FX
wrapper backend (this package's overlay enabled), checks both against eager on
two inputs whose data-dependent sizes differ, and times the first call (compile
included) and the steady state (median of synchronized calls). All ratios come
from one run on one machine. Writes a markdown report.

    python benchmarks/data_dependent.py --config asserts-off --out results.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import statistics
import sys
import time
import traceback
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

ASSERT_FLAGS = ("alignment_asserts", "size_asserts", "scalar_asserts", "nan_asserts")


from inductor_fx_unbacked._programs import (  # noqa: E402
    PROGRAMS,
    Program,
    same,
    synchronize,
)


def measure(program: Program, mode: str, device: str, n: int, calls: int) -> dict[str, Any]:
    import inductor_fx_unbacked as ifx

    inputs = program.inputs(device, n)
    torch._dynamo.reset()
    if mode == "eager":
        fn = program.fn
    else:
        fn = torch.compile(program.fn, fullgraph=True, dynamic=program.dynamic)
    context = ifx.fx_backend(device) if mode == "fx" else contextlib.nullcontext()
    with context:
        synchronize(device)
        start = time.perf_counter()
        first = fn(*inputs[0])
        synchronize(device)
        cold = time.perf_counter() - start
        results = [first, fn(*inputs[1])]
        ok = all(
            same(r, program.fn(*args), rtol=1e-4, atol=1e-4) for r, args in zip(results, inputs)
        )
        times = []
        for _ in range(calls):
            synchronize(device)
            start = time.perf_counter()
            fn(*inputs[0])
            synchronize(device)
            times.append(time.perf_counter() - start)
    return {"ok": ok, "cold": cold, "steady_ms": statistics.median(times) * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", choices=["asserts-off", "default"], default="default")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import triton
    from torch._inductor import config

    import inductor_fx_unbacked as ifx

    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    patches = {flag: False for flag in ASSERT_FLAGS} if args.config == "asserts-off" else {}
    ifx.enable()

    rows = []
    failures = 0
    with config.patch(patches):
        for program in PROGRAMS:
            row = {"program": program}
            for mode in ("eager", "python", "fx"):
                try:
                    row[mode] = measure(program, mode, args.device, args.n, args.calls)
                except Exception as e:  # noqa: BLE001 - reported per program
                    traceback.print_exc()
                    message = str(e).strip().splitlines()[0][:120]
                    row[mode] = {"ok": False, "error": f"{type(e).__name__}: {message}"}
                failures += not row[mode]["ok"]
            rows.append(row)
            print(program.name, {m: row[m] for m in ("eager", "python", "fx")}, flush=True)

    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor()
    lines = [
        f"# Data-dependent programs, FX backend vs Python wrapper ({args.config} config)",
        "",
        f"- Date: {datetime.date.today().isoformat()}",
        f"- Device: {device_name} ({args.device})",
        f"- torch {torch.__version__}, Triton {triton.__version__}, "
        f"Python {platform.python_version()}",
        f"- Inductor config: {'the four assert flags off' if patches else 'default'}; "
        "Dynamo `capture_scalar_outputs` and `capture_dynamic_output_shape_ops` on; "
        "`fullgraph=True`",
        f"- Inputs of {args.n} elements (P8: {args.n // 5}); correctness against eager on two "
        "inputs with different data-dependent sizes",
        f"- Cold = first call including compile (s); steady = median of {args.calls} "
        "synchronized calls (ms). All numbers from this one run.",
        "",
        "| prog | program | eager steady | Python wrapper: ok, cold / steady | "
        "FX backend: ok, cold / steady | FX / Python (steady) |",
        "|---|---|---|---|---|---|",
    ]

    def cell(r):
        if "error" in r:
            return f"FAIL ({r['error']})"
        return f"{'pass' if r['ok'] else 'MISMATCH'}, {r['cold']:.2f} / {r['steady_ms']:.3f}"

    for row in rows:
        program, py, fx = row["program"], row["python"], row["fx"]
        ratio = (
            f"{fx['steady_ms'] / py['steady_ms']:.2f}x"
            if "steady_ms" in fx and "steady_ms" in py
            else "n/a"
        )
        eager = row["eager"].get("steady_ms")
        eager_text = f"{eager:.3f}" if eager is not None else "FAIL"
        source = program.source.replace("|", "\\|")  # a pipe inside a markdown cell
        lines.append(
            f"| {program.name} | `{source}` | {eager_text} | {cell(py)} | {cell(fx)} | {ratio} |"
        )
    lines.append("")
    lines.append(f"{failures} failing or mismatching (program, mode) pairs.")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
