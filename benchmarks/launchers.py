"""Which launcher each kernel of an artifact runs with: ``ifx.compile``'s and the AOT module's.

For each program, in one process: the program compiled by ``ifx.compile``
(``direct``) and by ``aot_compile(..., fx_wrapper=True)`` inside ``fx_backend``
(``aot-module``), each called a few times, then per kernel launch of the
lowered runner: the launcher it settled on (Inductor's static CUDA launcher or
Triton's), whether the kernel stores its cubin, and how many launchers and compile
results its autotuner kept. Then the median time per call of each, calls
interleaved, each between device synchronisations, and a profile of the host
time per call (own time of each function, grouped by where it is defined).

    python -m benchmarks.launchers --out benchmarks/results/DATE-h200-launchers.md
    python -m benchmarks.launchers --device cpu --quick
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

from benchmarks import harness
from benchmarks.data_dependent import aot_module, median, setup
from benchmarks.entry_path import host_profile_us, interleaved_seconds


def live_launches() -> dict[int, Any]:
    """Every launch object of the lowered runner alive in the process, by id: through
    the autotuner's launchers, or through Triton's ``kernel[grid](...)``."""
    import gc

    from inductor_fx_unbacked.runner import lowering, tuning

    kinds = (tuning.Launch, lowering._InterpretedLaunch)
    # ``type(o)``, not ``isinstance``: a dead weak proxy among the objects raises.
    return {id(o): o for o in gc.get_objects() if type(o) in kinds}


def compiled_with_launches(
    build: Any, args: tuple[Any, ...], calls: int = 3
) -> tuple[Any, list[Any]]:
    """An artifact built by ``build()``, and the launches that its compile and first
    calls made (``ifx.compile`` lowers its graphs when it compiles; the AOT module,
    when it is first called)."""
    before = live_launches()
    call = build()
    for _ in range(calls):
        call(*args)
    return call, [launch for key, launch in live_launches().items() if key not in before]


def describe(launch: Any) -> str:
    from inductor_fx_unbacked import _compat

    tuner = getattr(launch, "tuner", None)
    if tuner is None:
        kernel = type(launch.kernel).__name__
        return f"`{launch.__name__}`: Triton's `kernel[grid](...)` ({kernel}), no autotuner"
    launcher = launch.launcher
    kind = (
        "none" if launcher is None else getattr(launcher, "__qualname__", type(launcher).__name__)
    )
    results = [type(r).__name__ for r in _compat.compile_results(tuner)]
    store_cubin = tuner.inductor_meta.get("store_cubin")
    return (
        f"`{launch.__name__}`: launcher {kind}; store_cubin {store_cubin}; "
        f"{len(getattr(tuner, 'launchers', []))} launchers; compile results {results}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--programs", nargs="*", default=["P2", "P3", "P5"])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=500, help="timed calls of each way")
    parser.add_argument("--out", default=None)
    parser.add_argument("--quick", action="store_true", help="P2 on tiny inputs (a smoke run)")
    args = parser.parse_args(argv)
    timed_calls, profiled_calls = args.calls, 200
    if args.quick:
        args.programs, args.n, timed_calls, profiled_calls = ["P2"], 1000, 5, 10

    import torch

    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.demo.programs import BY_NAME

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    n = args.n if device == "cuda" else min(args.n, 4096)
    setup()
    report = harness.Report(
        args.out,
        "Launchers of ifx.compile's artifact and of the AOT module",
        harness.environment_lines(device, f"- Inputs of {n} elements."),
    )
    for name in args.programs:
        program = BY_NAME[name]
        example = program.inputs(device, n)[0]
        builds = {
            "direct": functools.partial(ifx.compile, program.fn, *example),
            "aot-module": functools.partial(aot_module, program, example, device),
        }
        report.add("", f"## {name}: `{program.source}`", "")
        calls = {}
        for backend, build in builds.items():
            calls[backend], launches = compiled_with_launches(build, example)
            report.add(f"- {backend}: {len(launches)} kernel launches")
            report.add(*(f"  - {describe(launch)}" for launch in launches))
        times = interleaved_seconds(calls, example, device, timed_calls)
        ms = {name: median(values) * 1e3 for name, values in times.items()}
        report.add("- ms per call (median): " + ", ".join(f"{k} {v:.4f}" for k, v in ms.items()))
        for backend, call in calls.items():
            profile = dict(
                sorted(
                    host_profile_us(call, example, device, profiled_calls).items(),
                    key=lambda item: -item[1],
                )
            )
            shown = ", ".join(f"{k} {v:.1f}" for k, v in profile.items())
            report.add(f"- host µs per call by group (cProfile), {backend}: {shown}")
    print(report.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
