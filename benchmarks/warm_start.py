"""Warm starts: compile time in a fresh process whose cache dirs an earlier process filled.

For each program of ``inductor_fx_unbacked/_programs.py`` and each backend (the
Python wrapper and the FX backend), one process compiles and runs the program
with fresh ``TORCHINDUCTOR_CACHE_DIR``/``TRITON_CACHE_DIR`` (cold, which fills
them), then fresh processes do the same with those dirs (warm). A warm process reports
the time of compile plus first call, whether Inductor's caches served it, and
how many new entries Triton's cache got (0: nothing compiled). The FX backend's
warm start is timed twice: as users run it, and under ``recording_graphs()``,
which also reports the FX graphs (and pays for their fake values). Cold
processes run a few at a time; warm ones run one at a time, so that their
timings do not share the machine, ``--repeat`` times each (the backends taking
turns), and the median counts.

    python -m benchmarks.warm_start --out benchmarks/results/DATE-h200-warm-start.md
    python -m benchmarks.warm_start --device cpu --quick   # a smoke run

``--budget-s`` bounds the run: no warm process starts past it, and the report,
written after every process, says over how many warm processes each median is.

The report ends with ``geomean_warm_fx_recording_over_python_wrapper: <y>`` and
``geomean_warm_fx_over_python_wrapper: <x>``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from typing import Any

from benchmarks import harness
from benchmarks.data_dependent import backend_context, compiled_fn, setup

BACKENDS = ("python", "fx")
#: Warm runs: the two backends as users run them (nothing records the FX graphs),
#: and the FX backend under ``recording_graphs`` (graphs with their fake values).
WARM_RUNS = ("python", "fx", "fx-recording")


def run_one(name: str, backend: str, device: str, n: int) -> dict[str, Any]:
    """In this process: compile and call once with the caches as the environment has them."""
    import torch
    from torch._dynamo.utils import counters

    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.demo.programs import BY_NAME, same, synchronize

    setup()
    # Inductor's modules and the package's are imported before the clock starts,
    # for every backend alike (fx_backend imports them on entry; the Python
    # wrapper would import them inside its first compile).
    import torch._inductor.compile_fx  # noqa: F401

    import inductor_fx_unbacked.integration.backend  # noqa: F401

    program = BY_NAME[name]
    first, _ = program.inputs(device, n)
    synchronize(device)
    triton_dir = os.environ["TRITON_CACHE_DIR"]
    before = set(os.listdir(triton_dir)) if os.path.isdir(triton_dir) else set()
    record = backend == "fx-recording"
    backend = "fx" if record else backend
    recording = ifx.recording_graphs() if record else contextlib.nullcontext([])
    with recording as graphs, backend_context(backend, device):
        start = time.perf_counter()
        result = compiled_fn(program, backend, first, device)(*first)
        synchronize(device)
        seconds = time.perf_counter() - start
    after = set(os.listdir(triton_dir)) if os.path.isdir(triton_dir) else set()
    return {
        "ok": bool(same(result, program.fn(*first), rtol=1e-4, atol=1e-4)),
        "seconds": seconds,
        "hits": counters["inductor"]["fxgraph_cache_hit"]
        + counters["aot_autograd"]["autograd_cache_hit"],
        "graphs": len(graphs),
        "unbacked": sum(
            1 for gm in graphs for node in gm.graph.nodes if "unbacked_symbol" in node.meta
        ),
        "new_triton_cache_entries": len(after - before),
        "torch": torch.__version__,
    }


def in_process(
    name: str, backend: str, device: str, n: int, cache: str, timeout: float = 300
) -> dict[str, Any]:
    """One process with the cache dirs under ``cache`` (warm when an earlier one filled them)."""
    env = dict(
        os.environ,
        TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
        TRITON_CACHE_DIR=os.path.join(cache, "triton"),
    )
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    # As in a user's shell: Inductor sets it only in processes that compile.
    env.pop("TRITON_PTXAS_PATH", None)
    command = [sys.executable, "-m", "benchmarks.warm_start", "--one", name, backend]
    command += ["--device", device, "--n", str(n)]
    child = harness.run_child(command, fresh_caches=False, timeout=timeout, env=env)
    result = harness.last_json(child)
    print(f"{name} {backend}: {result.get('seconds', 0):.2f} s", file=sys.stderr, flush=True)
    return result


def median_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median time; a failed run, if any run failed."""
    failed = [r for r in results if not r.get("ok")]
    if failed:
        return failed[0]
    ordered = sorted(results, key=lambda r: r["seconds"])
    return ordered[(len(ordered) - 1) // 2]


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    parser.add_argument("--n", type=int, default=100_000, help="input elements")
    parser.add_argument("--programs", nargs="*", help="program names (default: all ten)")
    parser.add_argument("--jobs", type=int, default=4, help="cold processes at a time")
    parser.add_argument("--repeat", type=int, default=3, help="warm processes per pair")
    parser.add_argument("--out", help="write the markdown report to this file")
    parser.add_argument(
        "--budget-s", type=float, default=None, help="no warm process starts past this many s"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: P1 (unless --programs), once, tiny"
    )
    parser.add_argument("--one", nargs=2, metavar=("PROGRAM", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    args.device = harness.chosen_device(args.device)
    if args.quick:
        args.programs, args.repeat, args.n = args.programs or ["P1"], 1, 1000
    if args.one:
        print(json.dumps(run_one(*args.one, args.device, args.n)))
        return 0

    from inductor_fx_unbacked.demo.programs import PROGRAMS

    deadline = time.monotonic() + (args.budget_s if args.budget_s is not None else math.inf)
    names = [p.name for p in PROGRAMS if not args.programs or p.name in args.programs]
    pairs = [(name, backend) for name in names for backend in BACKENDS]
    out = harness.Report(
        args.out, TITLE, harness.environment_lines(args.device, *method_lines(args))
    )
    with tempfile.TemporaryDirectory() as root:
        caches = {pair: os.path.join(root, "-".join(pair)) for pair in pairs}
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            cold = dict(
                zip(
                    pairs,
                    pool.map(lambda p: in_process(*p, args.device, args.n, caches[p]), pairs),
                )
            )
        warm_runs = [(name, run) for name in names for run in WARM_RUNS]
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in warm_runs}
        for _ in range(args.repeat):
            for name, run in warm_runs:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                cache = caches[(name, run.split("-")[0])]
                result = in_process(name, run, args.device, args.n, cache, min(300, left))
                runs[(name, run)].append(result)
                out.replace(report(names, cold, runs))
    out.replace(report(names, cold, runs))
    print(out.text)
    # A run that failed (not one stopped by the budget) fails the benchmark.
    results = [*cold.values(), *(r for results in runs.values() for r in results)]
    return 0 if all(result.get("ok") for result in results) else 1


TITLE = "Warm starts: compile and first call in a fresh process with warm cache dirs"


def method_lines(args: argparse.Namespace) -> list[str]:
    lines = [
        f"- n = {args.n}; each (program, backend): one cold process fills fresh cache dirs, "
        "then warm processes with those dirs are timed (compile plus first call, "
        "synchronized); the table shows the median warm run of each.",
        "- FX warm: as users run it, nothing recording the FX graphs; FX warm recording: "
        'under `recording_graphs()`, which also recomputes every node\'s `meta["val"]`; '
        "the served / graphs / unbacked definitions / new Triton cache entries columns "
        "are the recording run's (served and new entries: also the plain run's).",
    ]
    if args.device == "cpu":
        lines.append(
            "- **CPU: kernels run in Triton's interpreter; the times say nothing about a GPU.**"
        )
    return lines


def report(
    names: list[str],
    cold: dict[tuple[str, str], dict[str, Any]],
    runs: dict[tuple[str, str], list[dict[str, Any]]],
) -> list[str]:
    """The table over the warm runs so far (the median of each); a run stopped early
    shows in how many warm processes each median is over."""
    warm = {key: median_run(results) for key, results in runs.items() if results}
    done = min(len(results) for results in runs.values())
    lines = [
        f"Warm processes per (program, run): {done} at least.",
        "",
        "| program | Python wrapper cold s | warm s | FX cold s | warm s | FX warm recording s "
        "| FX warm / Python warm | FX warm recording / Python warm "
        "| FX warm recording: served, graphs, unbacked defs, new Triton cache entries |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def seconds(result: dict[str, Any]) -> str:
        ok = result.get("ok")
        return f"{result['seconds']:.2f}" if ok else f"FAIL {result.get('error', '')}"

    ratios, recording_ratios = [], []
    failures = 0
    for name in names:
        py, fx, rec = (warm.get((name, run), {"error": "not run"}) for run in WARM_RUNS)
        row = [name, seconds(cold[(name, "python")]), seconds(py)]
        row += [seconds(cold[(name, "fx")]), seconds(fx), seconds(rec)]
        if py.get("ok") and fx.get("ok") and rec.get("ok"):
            ratios.append(fx["seconds"] / py["seconds"])
            recording_ratios.append(rec["seconds"] / py["seconds"])
            row += [f"{ratios[-1]:.2f}", f"{recording_ratios[-1]:.2f}"]
            row.append(
                f"{'hit' if rec['hits'] else 'MISS'}, {rec['graphs']}, {rec['unbacked']}, "
                f"{rec['new_triton_cache_entries']}"
            )
            failures += not (fx["hits"] and rec["hits"] and rec["graphs"])
            failures += fx["new_triton_cache_entries"] + rec["new_triton_cache_entries"] > 0
        else:
            failures += 1
            row += ["-", "-", "-"]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        f"warm_programs: {len(names)}",
        f"warm_fx_not_served_or_failed: {failures}",
        f"geomean_warm_fx_recording_over_python_wrapper: {geomean(recording_ratios):.3f}",
        f"geomean_warm_fx_over_python_wrapper: {geomean(ratios):.3f}",
    ]
    return lines


if __name__ == "__main__":
    sys.exit(main())
