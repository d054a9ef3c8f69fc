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
import datetime
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

ASSERT_FLAGS = ("alignment_asserts", "size_asserts", "scalar_asserts", "nan_asserts")


@dataclass(frozen=True)
class Program:
    name: str
    source: str
    fn: Callable[..., Any]
    inputs: Callable[[str, int], list[tuple[Any, ...]]]
    dynamic: bool | None = None


def signed(n: int, positive_fraction: float, device: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g) + 0.1
    x[int(n * positive_fraction) :] *= -1
    return x[torch.randperm(n, generator=g)].to(device)


def p4a(x):
    return torch.cond(x.sum() > 0, lambda x: x[1:] * 2, lambda x: x[2:] + 1, (x,))


def p4b(x):
    return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, (x,))


def p4c(x):
    return torch.cond(x.sum() > 0, lambda x: x[x > 0], lambda x: x[2:] * 2, (x,))


def p5(x, lengths):
    return torch.stack([c.sum() for c in torch.split(x, lengths.tolist())])


def p6(x):
    return torch.unique(x) + 1


def p7(x):
    y = torch.masked_select(x, x > 0.5) * 2 + 1
    return y, y.sum()


def two_signed(fractions):
    return lambda d, n: [(signed(n, f, d, seed=i),) for i, f in enumerate(fractions)]


def p5_inputs(device, n):
    x = signed(n, 0.5, device, seed=3)
    a = torch.tensor([n // 8] * 8)
    b = torch.tensor([0, n // 4, n // 4, 0, n // 8, n // 8, n // 8, n - 3 * n // 4 - n // 8])
    return [(x, a.to(device)), (x, b.to(device))]


def p6_inputs(device, n):
    g = torch.Generator().manual_seed(6)
    return [
        (torch.randint(0, 1000, (n,), generator=g).to(device),),
        (torch.randint(0, 50000, (n,), generator=g).to(device),),
    ]


def p8_inputs(device, n):
    n = n // 5
    g = torch.Generator().manual_seed(8)
    x = torch.randn(n, generator=g).to(device)
    return [
        (x, torch.randint(0, 3, (n,), generator=g).to(device)),
        (x, torch.randint(0, 5, (n,), generator=g).to(device)),
    ]


PROGRAMS = [
    Program(
        "P1",
        "torch.nonzero(x > 0) * 2 + 1",
        lambda x: torch.nonzero(x > 0) * 2 + 1,
        two_signed([0.3, 0.7]),
    ),
    Program("P2", "(x[x > 0] * 2).sum()", lambda x: (x[x > 0] * 2).sum(), two_signed([0.3, 0.7])),
    Program(
        "P3",
        "torch.arange((x > 0).sum().item()) * 2",
        lambda x: torch.arange((x > 0).sum().item(), device=x.device) * 2,
        two_signed([0.3, 0.7]),
    ),
    Program("P4a", "cond: x[1:] * 2 \\| x[2:] + 1", p4a, two_signed([0.9, 0.1]), dynamic=True),
    Program("P4b", "cond: x * 2 \\| x - 1", p4b, two_signed([0.9, 0.1]), dynamic=True),
    Program("P4c", "cond: x[x > 0] \\| x[2:] * 2", p4c, two_signed([0.9, 0.1]), dynamic=True),
    Program("P5", "split(x, lengths.tolist()), stack of sums", p5, p5_inputs),
    Program("P6", "torch.unique(x_int) + 1", p6, p6_inputs),
    Program("P7", "masked_select(x, x > 0.5) * 2 + 1, and its sum", p7, two_signed([0.3, 0.8])),
    Program(
        "P8",
        "repeat_interleave(x, repeats) * 2",
        lambda x, r: torch.repeat_interleave(x, r) * 2,
        p8_inputs,
    ),
]


def same(a: Any, b: Any) -> bool:
    flat_a, spec_a = torch.utils._pytree.tree_flatten(a)
    flat_b, spec_b = torch.utils._pytree.tree_flatten(b)
    return spec_a == spec_b and all(
        x.shape == y.shape and torch.allclose(x, y, rtol=1e-4, atol=1e-4)
        for x, y in zip(flat_a, flat_b)
    )


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(program: Program, mode: str, device: str, n: int, calls: int) -> dict[str, Any]:
    import inductor_fx_unbacked as ifx

    inputs = program.inputs(device, n)
    torch._dynamo.reset()
    if mode == "eager":
        fn = program.fn
    else:
        fn = torch.compile(program.fn, fullgraph=True, dynamic=program.dynamic)
    context = ifx.fx_backend(device) if mode == "fx" else _nullcontext()
    with context:
        sync(device)
        start = time.perf_counter()
        first = fn(*inputs[0])
        sync(device)
        cold = time.perf_counter() - start
        results = [first, fn(*inputs[1])]
        ok = all(same(r, program.fn(*args)) for r, args in zip(results, inputs))
        times = []
        for _ in range(calls):
            sync(device)
            start = time.perf_counter()
            fn(*inputs[0])
            sync(device)
            times.append(time.perf_counter() - start)
    return {"ok": ok, "cold": cold, "steady_ms": statistics.median(times) * 1e3}


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


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
        lines.append(
            f"| {program.name} | `{program.source}` | {eager_text} | {cell(py)} | "
            f"{cell(fx)} | {ratio} |"
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
