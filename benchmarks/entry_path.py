"""torch.compile's entry path: what a call of a compiled program costs before its graph runs.

For each program, in one process: the median time per call of eager, of
``torch.compile`` inside ``fx_backend`` (``fx``), of the same under
``torch.compiler.set_stance(skip_guard_eval_unsafe=True)`` (guards checked only
where a recompile could follow), and of ``ifx.compile``'s artifact called directly
(``direct``); calls interleaved, each between device synchronisations. Then a
profile of ``fx``'s calls: the time spent in the functions of Dynamo, AOTAutograd,
Inductor, this package and the rest (own time of each function, grouped by where
it is defined), per call.

    python -m benchmarks.entry_path --out benchmarks/results/DATE-h200-entry-path.md
    python -m benchmarks.entry_path --device cpu --quick
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from typing import Any

from benchmarks import harness
from benchmarks.data_dependent import median, setup

#: Where a function is defined -> the group its time counts for.
GROUPS = (
    ("torch/_dynamo", "Dynamo"),
    ("torch/_functorch", "AOTAutograd"),
    ("torch/_inductor", "Inductor"),
    # The runner runs the graph, as it does for the direct call: its modules, the
    # code it generates (named ``<inductor_fx_unbacked lowered ...>``) and, on CPU,
    # the CPU mode's kernel launcher and its interpreter patches. The programs are
    # the user's code (the time in their frame is Dynamo's frame evaluation). The
    # rest of the package is on the entry path (the backend's wrappers, the checks
    # per call).
    ("inductor_fx_unbacked/runner", "this package's runner"),
    ("<inductor_fx_unbacked lowered", "this package's runner"),
    ("inductor_fx_unbacked/integration/cpu_", "this package's runner"),
    ("inductor_fx_unbacked/demo", "the rest (kernels, ATen, Python)"),
    ("inductor_fx_unbacked", "this package"),
)


def group(filename: str) -> str:
    for marker, name in GROUPS:
        if marker in filename:
            return name
    return "the rest (kernels, ATen, Python)"


def measure(program: Any, device: str, n: int, calls: int) -> dict[str, Any]:
    import torch

    import inductor_fx_unbacked as ifx

    first, _ = program.inputs(device, n)
    with ifx.fx_backend(device):
        compiled = torch.compile(program.fn, fullgraph=True, dynamic=program.dynamic)
        compiled(*first)
    direct = ifx.compile(program.fn, *first, dynamic=bool(program.dynamic))

    def stanced(*args: Any) -> Any:
        with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
            return compiled(*args)

    runs = {"eager": program.fn, "fx": compiled, "fx, guards skipped": stanced, "direct": direct}
    for fn in runs.values():
        for _ in range(3):
            fn(*first)
    times = interleaved_seconds(runs, first, device, calls)
    return {
        "us": {name: median(values) * 1e6 for name, values in times.items()},
        "entry_us": median([a - b for a, b in zip(times["fx"], times["direct"])]) * 1e6,
        "profile_us": host_profile_us(compiled, first, device, calls),
    }


def interleaved_seconds(
    runs: dict[str, Any], args: tuple[Any, ...], device: str, calls: int
) -> dict[str, list[float]]:
    """Seconds per call of each run, calls interleaved, each between device syncs."""
    from inductor_fx_unbacked.demo.programs import synchronize

    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(calls):
        for name, fn in runs.items():
            synchronize(device)
            start = time.perf_counter()
            fn(*args)
            synchronize(device)
            times[name].append(time.perf_counter() - start)
    return times


def ranked_rows(times: dict[str, list[float]], base: str) -> tuple[list[str], str, float]:
    """Table rows ``| way | ms | / base |`` of ``times`` (seconds per call of each way,
    as :func:`interleaved_seconds` returns them), fastest first by the median of the
    paired ratios to ``base``; and the fastest way other than ``base``, with its ratio."""
    ratios = {
        way: median([s / b for s, b in zip(seconds, times[base])]) for way, seconds in times.items()
    }
    rows = [
        f"| {way} | {median(seconds) * 1e3:.4f} | {ratios[way]:.3f} |"
        for way, seconds in sorted(times.items(), key=lambda item: ratios[item[0]])
    ]
    fastest = min((way for way in ratios if way != base), key=ratios.__getitem__)
    return rows, fastest, ratios[fastest]


def host_profile_us(fn: Any, args: tuple[Any, ...], device: str, calls: int) -> dict[str, float]:
    """Host µs per call of ``fn`` by where the functions are defined (cProfile's own
    time of each function, grouped by ``group``)."""
    from inductor_fx_unbacked.demo.programs import synchronize

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        fn(*args)
    synchronize(device)
    profile.disable()
    spent: dict[str, float] = {}
    for (filename, _, _), row in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        spent[group(filename)] = spent.get(group(filename), 0.0) + row[2]
    return {name: seconds / calls * 1e6 for name, seconds in spent.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--programs", nargs="+", default=["P1", "P2", "P3", "P5", "P7", "H4"])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="a smoke run: P2, tiny")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.quick:
        args.programs, args.n, args.calls = ["P2"], 1000, 5
    from inductor_fx_unbacked.demo.programs import BY_NAME

    setup()
    report = harness.Report(
        args.out,
        "torch.compile's entry path",
        harness.environment_lines(
            args.device,
            f"- {args.calls} calls per program and way, interleaved; inputs of {args.n} "
            "elements (H4: rows of 64); medians in µs.",
        ),
    )
    rows: list[tuple[str, dict[str, Any]]] = []
    for name in args.programs:
        program = BY_NAME[name]
        size = args.n * 64 if name.startswith("H") else args.n
        rows.append((name, measure(program, args.device, size, args.calls)))
        report.replace(lines(rows))
    print(report.text)
    return 0


def lines(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    ways = list(rows[0][1]["us"])
    groups = sorted({g for _, row in rows for g in row["profile_us"]})
    table = [
        "| prog | " + " | ".join(f"{w} µs" for w in ways) + " | entry µs (fx - direct) |",
        "|---" * (len(ways) + 2) + "|",
    ]
    for name, row in rows:
        cells = [f"{row['us'][w]:.1f}" for w in ways] + [f"{row['entry_us']:.1f}"]
        table.append(f"| {name} | " + " | ".join(cells) + " |")
    profile = [
        "",
        "## Where `fx`'s calls spend their time (profiled; own time per function, µs per call)",
        "",
        "| prog | " + " | ".join(groups) + " |",
        "|---" * (len(groups) + 1) + "|",
    ]
    for name, row in rows:
        profile.append(
            f"| {name} | " + " | ".join(f"{row['profile_us'].get(g, 0):.1f}" for g in groups) + " |"
        )
    closing = ["", *(f"median_entry_us_{name}: {row['entry_us']:.1f}" for name, row in rows)]
    # The package's own time per call of a compiled graph (each of these programs is
    # one graph), profiled: in all, and on the entry path (outside its runner; issue
    # 40's line, goal at most 10 µs).
    entry = {name: row["profile_us"].get("this package", 0.0) for name, row in rows}
    package = {
        name: entry[name] + row["profile_us"].get("this package's runner", 0.0)
        for name, row in rows
    }
    worst = max(package, key=package.get)
    closing.append(f"max_package_us_per_graph: {package[worst]:.1f}  ({worst})")
    worst = max(entry, key=entry.get)
    closing.append(f"package_entry_us_max: {entry[worst]:.1f}  ({worst})")
    return [*table, *profile, *closing]


if __name__ == "__main__":
    sys.exit(main())
