"""The ten data-dependent programs (docs/benchmarks.md): cold, new sizes, steady state.

Backends, all measured in one run on one machine:

- ``eager``: no compile;
- ``python``: Inductor's Python wrapper, default config;
- ``upstream-fx``: upstream's FX backend (overlay disabled, the four assert
  flags off, ``compile_threads=1``, which it needs to run at all);
- ``fx-graph``: this package, default config, running ``gm.forward``
  (``fx_backend(..., runner="graph")``, the package's behaviour before the runner);
- ``fx``: this package, default config, with its lowered runner (the default).

Measurements:

- cold: one fresh process per (program, backend), with fresh
  ``TORCHINDUCTOR_CACHE_DIR`` and ``TRITON_CACHE_DIR``: time to the end of the
  first call, synchronized, compile included;
- new sizes: in that process, the first call on a second input whose
  data-dependent sizes differ, and the Triton compiles during it;
- steady state: one process, every backend compiled, then rounds in which the
  backends take turns; each round is the median of ``--calls`` synchronized
  calls per backend; rounds repeat until every backend's spread (max/min of its
  round medians) is under ``--spread`` or ``--max-rounds`` is reached.

    python benchmarks/data_dependent.py --out benchmarks/results/DATE-h200-runner.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

BACKENDS = ("eager", "python", "upstream-fx", "fx-graph", "fx")
COMPILED = BACKENDS[1:]
UPSTREAM_CONFIG = {
    "alignment_asserts": False,
    "size_asserts": False,
    "scalar_asserts": False,
    "nan_asserts": False,
    "compile_threads": 1,
}


def setup() -> None:
    import torch

    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    torch._dynamo.config.cache_size_limit = 64


@contextlib.contextmanager
def backend_context(backend: str, device: str):
    """What a backend compiles and runs inside (upstream's: overlay off, asserts off)."""
    from torch._inductor import config

    import inductor_fx_unbacked as ifx

    with contextlib.ExitStack() as stack:
        if backend == "upstream-fx":
            stack.enter_context(config.patch(UPSTREAM_CONFIG))
            stack.enter_context(ifx.fx_backend(device, runner="graph"))
            ifx.disable()
        elif backend == "fx-graph":
            stack.enter_context(ifx.fx_backend(device, runner="graph"))
        elif backend == "fx":
            stack.enter_context(ifx.fx_backend(device))
        yield


def compiled_fn(program: Any, backend: str) -> Any:
    """The program compiled for ``backend``, on a copy of its code object.

    Dynamo caches compiled code on the code object, so two backends compiling
    one function in one process would share the first one's graph.
    """
    import torch

    if backend == "eager":
        return program.fn
    fn = program.fn
    copy = types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    return torch.compile(copy, fullgraph=True, dynamic=program.dynamic)


class TritonCompileCounter:
    """Counts Triton compiles: JIT compiles and direct ``triton.compile`` calls."""

    def __init__(self) -> None:
        import triton
        from triton.runtime.jit import JITFunction

        self.count = 0
        do_compile, compile_fn = JITFunction._do_compile, triton.compile

        def counted_do_compile(jit_self: Any, *args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return do_compile(jit_self, *args, **kwargs)

        def counted_compile(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return compile_fn(*args, **kwargs)

        JITFunction._do_compile = counted_do_compile
        triton.compile = counted_compile


def run_cold(name: str, backend: str, device: str, n: int) -> dict[str, Any]:
    """In this (fresh) process: the first call, then the first call on new sizes."""
    import torch

    from inductor_fx_unbacked._programs import BY_NAME, same, synchronize

    setup()
    program = BY_NAME[name]
    first, second = program.inputs(device, n)
    counter = TritonCompileCounter()
    with backend_context(backend, device):
        fn = compiled_fn(program, backend)
        synchronize(device)
        start = time.perf_counter()
        result = fn(*first)
        synchronize(device)
        cold = time.perf_counter() - start
        before = counter.count
        start = time.perf_counter()
        second_result = fn(*second)
        synchronize(device)
        new_sizes = time.perf_counter() - start
    ok = same(result, program.fn(*first), rtol=1e-4, atol=1e-4) and same(
        second_result, program.fn(*second), rtol=1e-4, atol=1e-4
    )
    del torch
    return {
        "ok": ok,
        "cold_s": cold,
        "new_sizes_ms": new_sizes * 1e3,
        "new_sizes_compiles": counter.count - before,
    }


def cold_in_fresh_process(name: str, backend: str, device: str, n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(
            os.environ,
            TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
            TRITON_CACHE_DIR=os.path.join(cache, "triton"),
        )
        command = [sys.executable, __file__, "--cold-one", name, backend, "--device", device]
        command += ["--n", str(n)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"ok": False, "error": tail[0][:160]}


def steady_state(
    device: str,
    n: int,
    calls: int,
    spread: float,
    max_rounds: int,
    backends: list[str],
    programs: list[str] | None = None,
) -> dict:
    """Per program and backend: the median of the round medians (ms) and their spread."""
    from inductor_fx_unbacked._programs import PROGRAMS, same, synchronize

    setup()
    results: dict[str, dict[str, Any]] = {}
    for program in PROGRAMS:
        if programs and program.name not in programs:
            continue
        first, _ = program.inputs(device, n)
        runners = {}
        for backend in backends:
            try:
                with backend_context(backend, device):
                    fn = compiled_fn(program, backend)
                    ok = same(fn(*first), program.fn(*first), rtol=1e-4, atol=1e-4)
                runners[backend] = (fn, ok)
            except Exception as e:  # noqa: BLE001 - reported per backend
                results.setdefault(program.name, {})[backend] = {"error": str(e).splitlines()[0]}
        rounds: dict[str, list[float]] = {b: [] for b in runners}
        for round_index in range(max_rounds):
            for backend, (fn, _) in runners.items():
                with backend_context(backend, device):
                    for _ in range(3):  # warm
                        fn(*first)
                    times = []
                    for _ in range(calls):
                        synchronize(device)
                        start = time.perf_counter()
                        fn(*first)
                        synchronize(device)
                        times.append(time.perf_counter() - start)
                rounds[backend].append(statistics.median(times) * 1e3)
            if round_index >= 2 and all(max(r) / min(r) - 1 < spread for r in rounds.values()):
                break
        for backend, medians in rounds.items():
            results.setdefault(program.name, {})[backend] = {
                "ok": runners[backend][1],
                "steady_ms": statistics.median(medians),
                "spread": max(medians) / min(medians) - 1,
                "rounds": len(medians),
            }
        print(program.name, json.dumps(results[program.name]), flush=True)
    return results


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def report(args: argparse.Namespace, cold: dict, steady: dict) -> str:
    import torch
    import triton

    from inductor_fx_unbacked._programs import PROGRAMS

    device_name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor()
    lines = [
        "# Data-dependent programs: FX backend vs Inductor's Python wrapper",
        "",
        f"- Date: {datetime.date.today().isoformat()}; device: {device_name} ({args.device})",
        f"- torch {torch.__version__}, Triton {triton.__version__}, "
        f"Python {platform.python_version()}",
        f"- Inputs of {args.n} elements (P8: {args.n // 5}). Backends: `eager`; `python` "
        "(Inductor's Python wrapper, default config); `upstream-fx` (upstream's FX backend, "
        "overlay disabled, asserts off, `compile_threads=1`); `fx-graph` (this package, "
        "default config, running `gm.forward`: the behaviour before the runner); `fx` "
        "(this package, default config, lowered runner: the default).",
        "- Cold: fresh process and cache dirs per (program, backend), first call including "
        "compile, synchronized (s). New sizes: first call on the second input in that "
        "process (ms), and Triton compiles during it. Steady: backends interleaved in rounds; "
        f"each round the median of {args.calls} synchronized calls; median of the rounds "
        f"(ms), spread = max/min of the rounds - 1.",
        "",
        "## Steady state (ms per call)",
        "",
        "| prog | " + " | ".join(BACKENDS) + " | fx / python | fx-graph / python |",
        "|---" * (len(BACKENDS) + 3) + "|",
    ]
    ratios, failures = [], 0
    cold_backends = [b for b in COMPILED if any(b in row for row in cold.values())]

    def steady_cell(entry: dict | None) -> str:
        nonlocal failures
        if not entry or "error" in entry:
            failures += 1
            return f"FAIL ({(entry or {}).get('error', 'missing')[:60]})"
        failures += not entry["ok"]
        flag = "" if entry["ok"] else " MISMATCH"
        return f"{entry['steady_ms']:.3f} ±{entry['spread'] * 100:.0f}%{flag}"

    for program in PROGRAMS:
        row = steady.get(program.name, {})
        cells = [steady_cell(row.get(b)) for b in BACKENDS]
        py, fx, fxg = (row.get(b, {}).get("steady_ms") for b in ("python", "fx", "fx-graph"))
        ratio = fx / py if fx and py else None
        if ratio:
            ratios.append(ratio)
        graph_ratio = f"{fxg / py:.2f}x" if fxg and py else "n/a"
        lines.append(
            f"| {program.name} | " + " | ".join(cells) + f" | "
            f"{f'{ratio:.2f}x' if ratio else 'n/a'} | {graph_ratio} |"
        )
    lines += [
        "",
        "## Cold (s) and new sizes (ms, Triton compiles)",
        "",
        "| prog | "
        + " | ".join(f"{b} cold" for b in cold_backends)
        + " | "
        + " | ".join(f"{b} new sizes" for b in cold_backends)
        + " |",
        "|---" * (1 + 2 * len(cold_backends)) + "|",
    ]
    cold_ratios, new_ratios, runtime_compiles = [], [], 0
    for program in PROGRAMS:
        row = cold.get(program.name, {})

        def cold_cell(entry: dict | None) -> str:
            nonlocal failures
            if not entry or "error" in entry:
                failures += 1
                return f"FAIL ({(entry or {}).get('error', 'missing')[:60]})"
            failures += not entry["ok"]
            return f"{entry['cold_s']:.2f}" + ("" if entry["ok"] else " MISMATCH")

        def new_cell(entry: dict | None) -> str:
            if not entry or "error" in entry:
                return "FAIL"
            return f"{entry['new_sizes_ms']:.1f} ({entry['new_sizes_compiles']})"

        lines.append(
            f"| {program.name} | "
            + " | ".join(cold_cell(row.get(b)) for b in cold_backends)
            + " | "
            + " | ".join(new_cell(row.get(b)) for b in cold_backends)
            + " |"
        )
        py, fx = row.get("python", {}), row.get("fx", {})
        if "cold_s" in py and "cold_s" in fx:
            cold_ratios.append(fx["cold_s"] / py["cold_s"])
            new_ratios.append(fx["new_sizes_ms"] / py["new_sizes_ms"])
            runtime_compiles += fx["new_sizes_compiles"]
    lines += [
        "",
        f"{failures} failing or mismatching (program, backend) measurements.",
        "",
        f"geomean_steady_fx_over_python_wrapper: {geomean(ratios):.3f}",
        f"max_steady_fx_over_python_wrapper: {max(ratios, default=float('nan')):.3f}",
        f"geomean_cold_fx_over_python_wrapper: {geomean(cold_ratios):.3f}",
        f"geomean_new_sizes_fx_over_python_wrapper: {geomean(new_ratios):.3f}",
        f"runtime_triton_compiles: {runtime_compiles}",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--spread", type=float, default=0.05)
    parser.add_argument("--max-rounds", type=int, default=7)
    parser.add_argument("--skip-cold", action="store_true", help="read cold results instead")
    parser.add_argument("--cold-only", action="store_true")
    parser.add_argument("--cold-json", default=None, help="cold results: written, or read")
    parser.add_argument("--cold-backends", nargs="+", default=list(COMPILED), choices=COMPILED)
    parser.add_argument("--programs", nargs="+", default=None, help="default: all ten")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--out", default=None)
    parser.add_argument("--cold-one", nargs=2, metavar=("PROGRAM", "BACKEND"))
    args = parser.parse_args()
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")

    if args.cold_one:
        print(json.dumps(run_cold(*args.cold_one, args.device, args.n)))
        return 0

    from inductor_fx_unbacked._programs import PROGRAMS

    cold: dict[str, dict[str, Any]] = {}
    if not args.skip_cold:
        for program in PROGRAMS:
            if args.programs and program.name not in args.programs:
                continue
            for backend in args.cold_backends:
                entry = cold_in_fresh_process(program.name, backend, args.device, args.n)
                cold.setdefault(program.name, {})[backend] = entry
            print(program.name, json.dumps(cold[program.name]), flush=True)
        if args.cold_json:
            with open(args.cold_json, "w") as f:
                json.dump(cold, f)
        if args.cold_only:
            return 0
    elif args.cold_json:
        with open(args.cold_json) as f:
            cold = json.load(f)
    steady = steady_state(
        args.device, args.n, args.calls, args.spread, args.max_rounds, args.backends, args.programs
    )
    text = report(args, cold, steady)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
