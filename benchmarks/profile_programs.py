"""Where a data-dependent program's time goes, per backend: a diagnosis, not a score.

For each program and backend (``benchmarks/data_dependent.py``'s), after warm-up:

- the device kernels of one call (``torch.profiler``): name, launches, device
  microseconds, summed over ``--calls`` calls and divided by them;
- the wall time per call (synchronised) and the device time per call, whose
  difference is what the host adds (launches, the framework's wrappers, syncs);
- with ``--host-profile``, the Python functions that cost the host most over
  those calls (``cProfile``, own time), for the compiled backends;
- with ``--code DIR``, Inductor's ``output_code`` log of each compile, which
  holds the kernels' sources and, for the FX backend, its graph and runner.

    python -m benchmarks.profile_programs --programs P1 H2 --out /tmp/profile.md

``--realistic`` names programs of ``benchmarks/realistic_cases.py`` (at
``--size``) and real-library cases of its model sweep, run with its backends
(``eager``, ``python``, ``fx``, ``direct``):

    python -m benchmarks.profile_programs --programs --realistic returns_over_valid_steps \
        expanded_scan "qwen3_moe_block[eager]" --backends eager fx direct --out /tmp/p.md
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import logging
import pstats
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks import data_dependent, harness


def kernel_table(fn: Any, inputs: tuple[Any, ...], calls: int) -> tuple[list[tuple], float]:
    """(name, launches per call, device µs per call) rows, slowest first, and the
    device µs per call in all."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*inputs)
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            row = totals[event.name[:90]]
            row[0] += 1
            row[1] += event.device_time
    rows = sorted(
        ((name, count / calls, micros / calls) for name, (count, micros) in totals.items()),
        key=lambda row: -row[2],
    )
    return rows, sum(row[2] for row in rows)


def timeline(
    fn: Any, inputs: tuple[Any, ...], calls: int = 5
) -> list[tuple[float, float, str, str]]:
    """One call as it ran, the last of ``calls``: (start µs from the call's first
    event, µs, ``host`` or ``device``, name) for the host's operators and CUDA
    runtime calls and the device's kernels and copies, by start."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(calls - 1):
        fn(*inputs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.profiler.record_function("ifx_call"):
            fn(*inputs)
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.name != "ifx_call"]
    calls_ = [e for e in prof.events() if e.name == "ifx_call"]
    start = calls_[0].time_range.start if calls_ else min(e.time_range.start for e in events)
    rows = []
    for event in events:
        on_device = event.device_type == torch.autograd.DeviceType.CUDA
        host_kinds = ("aten::", "cuda", "triton", "ifx", "Memcpy")
        if not on_device and not event.name.startswith(host_kinds):
            continue
        if not on_device and event.cpu_parent is not None and event.name.startswith("aten::"):
            continue  # only the outermost operators
        begin = event.time_range.start - start
        rows.append(
            (
                begin,
                event.time_range.elapsed_us(),
                "device" if on_device else "host",
                event.name[:80],
            )
        )
    return sorted(rows)


def wall_per_call(fn: Any, inputs: tuple[Any, ...], calls: int) -> float:
    """Median µs of one synchronised call."""
    import torch

    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn(*inputs)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return data_dependent.median(times) * 1e6


def host_profile(fn: Any, inputs: tuple[Any, ...], calls: int, top: int = 25) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn(*inputs)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def code_log(directory: Path, name: str) -> logging.Handler:
    """Inductor's ``output_code`` log of the compiles that follow, into ``directory/name``."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    torch._logging.set_logs(output_code=True)
    handler = logging.FileHandler(directory / f"{name}.log", mode="w")
    logging.getLogger("torch._inductor").addHandler(handler)
    logging.getLogger("torch._inductor.runtime.triton_heuristics").setLevel(logging.DEBUG)
    return handler


def base_backend(backend: str) -> str:
    return backend.removesuffix("-nosplit").removesuffix("-specialised").removesuffix("-fused")


@contextlib.contextmanager
def context(backend: str) -> Any:
    """``data_dependent``'s backends, ``<backend>-nosplit``: that backend with
    Inductor's ``split_reductions`` off, ``direct-specialised``: the direct call
    traced without ``backed_size_oblivious`` (sizes 0 and 1 specialised), and
    ``<backend>-fused``: that backend with the runner's fused selections on
    (``runner/fused_selections.py``)."""
    from unittest import mock

    from torch._inductor import config

    from inductor_fx_unbacked.integration import direct
    from inductor_fx_unbacked.runner import fused_selections

    base = base_backend(backend)
    with contextlib.ExitStack() as stack:
        if backend.endswith("-nosplit"):
            stack.enter_context(config.patch(split_reductions=False))
        if backend.endswith("-fused"):
            stack.enter_context(mock.patch.object(fused_selections, "ENABLED", True))
        if backend.endswith("-specialised"):
            traced = functools.partial(direct._traced, size_oblivious=False)
            stack.enter_context(mock.patch.object(direct, "_traced", traced))
        stack.enter_context(data_dependent.backend_context(base, "cuda"))
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", nargs="*", default=["P1", "P2", "P5", "P7", "H1", "H2"])
    parser.add_argument(
        "--realistic", nargs="*", default=(), help="realistic programs and model cases by name"
    )
    parser.add_argument("--size", choices=("small", "large"), default="large")
    parser.add_argument("--backends", nargs="+", default=["eager", "python", "fx"])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--host-profile", nargs="*", default=(), help="programs to cProfile")
    parser.add_argument("--timeline", nargs="*", default=(), help="programs to show one call of")
    parser.add_argument("--code", type=Path, help="a folder for the output_code logs")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--heavy-n", type=int, default=data_dependent.HEAVY_N)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    from inductor_fx_unbacked.demo.programs import BY_NAME, HEAVY_PROGRAMS

    by_name = {**BY_NAME, **{p.name: p for p in HEAVY_PROGRAMS}}
    data_dependent.setup()
    report = harness.Report(
        args.out, "Where the time goes, per program and backend", harness.environment_lines("cuda")
    )
    for name in args.programs:
        program = by_name[name]
        size = data_dependent.program_size(name, args.n, args.heavy_n)
        first, second = program.inputs("cuda", size)
        report.add("", f"## {name}: `{program.source}`", "")

        def compile_program(backend: str, program: Any = program, first: Any = first) -> Any:
            return data_dependent.compiled_fn(program, base_backend(backend), first, "cuda")

        profile_backends(report, args, name, compile_program, first, second)
    if args.realistic:
        profile_realistic(report, args)


def profile_realistic(report: Any, args: Any) -> None:
    """The realistic programs and model cases named, as ``benchmarks.realistic``
    runs them: gradients off, the model sweep's Dynamo settings."""
    import torch

    from benchmarks import models, realistic

    with torch.no_grad(), models.sweep_config("cuda"):
        for name, summary, fn, first, second in realistic_subjects(args.realistic, args.size):
            report.add("", f"## {name} ({args.size}): {summary}", "")

            def compile_realistic(backend: str, fn: Any = fn, first: Any = first) -> Any:
                return realistic.compiled(base_backend(backend), fn, first)

            profile_backends(report, args, name, compile_realistic, first, second)


def realistic_subjects(
    names: Any, size: str, device: str = "cuda"
) -> list[tuple[str, str, Any, Any, Any]]:
    """(name, summary, fn, first draw, second draw) of each realistic program or
    real-library case named, at ``size`` (a model case at its one size)."""
    from benchmarks import realistic_cases

    subjects = []
    programs = {program.name: program for program in realistic_cases.PROGRAMS}
    cases = {case.name: (case, sizes) for case, sizes in realistic_cases.model_cases(quick=False)}
    for name in names:
        if name in programs:
            program = programs[name]
            dims = program.sizes[size].dims
            first, second = (program.inputs(device, dims, draw) for draw in (0, 1))
            label = f"{program.sizes[size].label}; {program.summary}"
            subjects.append((name, label, program.fn, first, second))
        else:
            case, sizes = cases[name]
            built = case.build(device)
            inputs = tuple(built.inputs)
            subjects.append((name, sizes, built.fn, inputs[0], inputs[-1]))
    return subjects


def profile_backends(
    report: Any, args: Any, name: str, compile_fn: Any, first: Any, second: Any
) -> None:
    """Each of ``args.backends``' kernels, wall and device time on ``first``."""
    import torch

    for backend in args.backends:
        handler = None
        if args.code is not None and backend != "eager":
            handler = code_log(args.code, f"{name}-{backend}")
        try:
            with context(backend):
                fn = compile_fn(backend)
                for _ in range(3):
                    fn(*second)
                    fn(*first)
                rows, device_us = kernel_table(fn, first, args.calls)
                wall_us = wall_per_call(fn, first, 5 * args.calls)
                host = None
                steps = timeline(fn, first) if name in args.timeline else None
                if name in args.host_profile and backend != "eager":
                    host = host_profile(fn, first, 10 * args.calls)
        except Exception as e:  # noqa: BLE001 - reported per backend
            report.add(f"- {backend}: {harness.error_line(e)}")
            continue
        finally:
            if handler is not None:
                logging.getLogger("torch._inductor").removeHandler(handler)
                handler.close()
                torch._logging.set_logs()
        report.add(
            *[
                f"### {backend}: wall {wall_us:.1f} µs per call, device {device_us:.1f} µs",
                "",
                "| kernel | launches | device µs |",
                "|---|---|---|",
                *(f"| `{k}` | {count:g} | {us:.1f} |" for k, count, us in rows),
                "",
            ]
        )
        if steps is not None:
            report.add("One call (µs from its start):", "", "| start | µs | where | what |")
            report.add("|---|---|---|---|")
            report.add(*(f"| {t:.1f} | {d:.1f} | {w} | `{n}` |" for t, d, w, n in steps), "")
        if host is not None:
            report.add("```", host.strip(), "```", "")


if __name__ == "__main__":
    main()
