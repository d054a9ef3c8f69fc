"""Data-dependent programs (docs/benchmarks.md): steady state with intervals, cold, new sizes.

Backends:

- ``eager``: no compile (the anchor);
- ``python``: Inductor's Python wrapper, default config;
- ``fx``: this package, default config, lowered runner (the default);
- optional: ``dynamo-eager`` and ``aot-eager`` (``torch.compile`` with
  ``backend="eager"`` / ``"aot_eager"``: ATen's kernels behind Dynamo's frame and
  guards, and behind AOTAutograd's runtime wrappers too; the per-call cost that
  every Inductor backend pays before its own code runs, the *floor*);
  ``fx-graph`` (this package running ``gm.forward``) and ``upstream-fx``
  (upstream's FX backend: overlay disabled, the four assert flags off,
  ``compile_threads=1``, which it needs); ``fx+cudagraphs`` (this package with
  ``fx_backend(cuda_graphs=True)``: the stretches between host syncs replay CUDA
  graphs) and ``python-reduce-overhead`` (the Python wrapper under
  ``mode="reduce-overhead"``).

Steady state: one process; every backend compiles its own copy of the program,
then the backends are interleaved call by call (one timed call of each backend
per sample, in an order that rotates every sample), each call between two
device synchronisations. The ratio of two backends is the median of the
per-sample paired ratios, with a 95% bootstrap interval; sampling stops when
every interval is within ``--precision`` of its ratio, or at ``--max-samples``
or ``--seconds``.

Cold: one fresh process (and cache dirs) per (program, backend): compile plus
first call, synchronised. New sizes: in that process, the first call on the
second input, and the Triton compiles during it.

    python -m benchmarks.data_dependent --out benchmarks/results/DATE-h200-data-dependent.md
    python -m benchmarks.data_dependent --device cpu --quick   # a smoke run

``--budget-s`` bounds the whole run: the steady state first (the main result),
then the cold runs; what did not fit is listed as not measured. The report is
written after every program, so a run stopped early keeps what it measured.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import random
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from benchmarks import harness

BACKENDS = (
    "eager",
    "python",
    "upstream-fx",
    "fx-graph",
    "fx",
    "fx+cudagraphs",
    "python-reduce-overhead",
    "dynamo-eager",
    "aot-eager",
    "direct",
    "direct+cudagraphs",
    "aot-module",
)
#: What ``torch.compile`` is given for the floor backends.
FLOOR_BACKENDS = {"dynamo-eager": "eager", "aot-eager": "aot_eager"}
#: The FX configurations; the final fx-over-eager lines take each program's best.
FX_CONFIGURATIONS = ("fx", "fx+cudagraphs")
#: The direct calls of ``ifx.compile``'s artifact; the direct lines take the best.
DIRECT_CONFIGURATIONS = ("direct", "direct+cudagraphs")
#: The programs of the direct-call lines (the fifteen of docs/benchmarks.md).
STANDARD = (
    *("P1", "P2", "P3", "P4a", "P4b", "P4c", "P5", "P6", "P7", "P8"),
    *("H1", "H2", "H3", "H4", "H5"),
)
COMPILED = BACKENDS[1:]
DEFAULT_BACKENDS = ("eager", "python", "fx")
DEFAULT_COLD_BACKENDS = ("python", "fx")
UPSTREAM_CONFIG = {
    "alignment_asserts": False,
    "size_asserts": False,
    "scalar_asserts": False,
    "nan_asserts": False,
    "compile_threads": 1,
}
HEAVY_N = 1 << 26  # 64M elements


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
        elif backend == "fx+cudagraphs":
            stack.enter_context(ifx.fx_backend(device, cuda_graphs=True))
        yield


def compiled_fn(program: Any, backend: str, example: tuple[Any, ...], device: str) -> Any:
    """The program compiled for ``backend`` (on ``example``, for the ahead-of-time
    ones), on a copy of its code object (:func:`code_copy`)."""
    import torch

    import inductor_fx_unbacked as ifx

    if backend == "eager":
        return program.fn
    if backend in DIRECT_CONFIGURATIONS:
        cuda_graphs = backend == "direct+cudagraphs"
        return ifx.compile(
            program.fn, *example, dynamic=bool(program.dynamic), cuda_graphs=cuda_graphs
        )
    if backend == "aot-module":
        return aot_module(program, example, device)
    mode = "reduce-overhead" if backend == "python-reduce-overhead" else None
    return torch.compile(
        code_copy(program.fn),
        fullgraph=True,
        dynamic=program.dynamic,
        mode=mode,
        backend=FLOOR_BACKENDS.get(backend, "inductor"),
    )


def code_copy(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` on a copy of its code object (its globals, defaults and closure shared).

    Dynamo caches compiled code on the code object, so two backends compiling
    one function in one process would share the first one's graph.
    """
    return types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )


def aot_module(program: Any, example: tuple[Any, ...], device: str) -> Any:
    """``aot_compile(..., fx_wrapper=True)`` of the exported program inside
    ``fx_backend``: the AOT module, called as it is (it returns a list of the
    outputs, put back into the program's structure)."""
    import torch
    from torch.utils import _pytree as pytree

    import inductor_fx_unbacked as ifx

    class Module(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            return program.fn(*args)

    spec = pytree.tree_structure(program.fn(*example))
    exported = torch.export.export(Module(), example, strict=False)
    with ifx.fx_backend(device):
        module = torch._inductor.aot_compile(
            exported.module(), example, options={"fx_wrapper": True}
        )
    unflatten = pytree.tree_unflatten

    def call(*args: Any) -> Any:
        outputs = module(*args)
        return unflatten(list(outputs) if isinstance(outputs, (list, tuple)) else [outputs], spec)

    return call


def count_host_syncs(fn: Any, args: tuple[Any, ...], device: str) -> int | None:
    """The device-to-host synchronisations of one call (CUDA's sync debug mode)."""
    if device != "cuda":
        return None
    import warnings

    import torch

    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn(*args)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return sum("synchroniz" in str(w.message) for w in caught)


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


def program_size(name: str, n: int, heavy_n: int) -> int:
    return heavy_n if name.startswith("H") else n


def selected_programs(args: argparse.Namespace) -> list[Any]:
    """The programs of this run, in report order (heavy ones on GPUs only)."""
    from inductor_fx_unbacked.demo.programs import HEAVY_PROGRAMS, PROGRAMS, SYNC_FREE_PROGRAMS

    gpu_only = [*HEAVY_PROGRAMS, *SYNC_FREE_PROGRAMS] if args.device == "cuda" else []
    programs = list(PROGRAMS) + gpu_only
    if args.programs:
        known = {p.name for p in PROGRAMS + HEAVY_PROGRAMS + SYNC_FREE_PROGRAMS}
        unknown = sorted(set(args.programs) - known)
        if unknown:
            raise SystemExit(f"unknown programs {unknown}; known: {sorted(known)}")
        programs = [p for p in programs if p.name in args.programs]
    return programs


# Cold and new sizes.


def run_cold(name: str, backend: str, device: str, n: int) -> dict[str, Any]:
    """In this (fresh) process: the first call, then the first call on new sizes."""
    from inductor_fx_unbacked.demo.programs import BY_NAME, same, synchronize

    setup()
    program = BY_NAME[name]
    first, second = program.inputs(device, n)
    synchronize(device)
    counter = TritonCompileCounter()
    with backend_context(backend, device):
        start = time.perf_counter()
        fn = compiled_fn(program, backend, first, device)
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
    return {
        "ok": ok,
        "cold_s": cold,
        "new_sizes_ms": new_sizes * 1e3,
        "new_sizes_compiles": counter.count - before,
    }


def cold_in_fresh_process(
    name: str, backend: str, device: str, n: int, timeout: float = 300
) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.data_dependent", "--cold-one", name, backend]
    command += ["--device", device, "--n", str(n)]
    return harness.last_json(harness.run_child(command, fresh_caches=True, timeout=timeout))


# Statistics.


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def bootstrap_medians(ratios: list[float], resamples: int, seed: int) -> list[float]:
    """Medians of ``resamples`` resamples (with replacement) of ``ratios``."""
    try:
        import numpy as np
    except ImportError:
        rng = random.Random(seed)
        return [median(rng.choices(ratios, k=len(ratios))) for _ in range(resamples)]
    rng = np.random.default_rng(seed)
    values = np.asarray(ratios)
    picks = rng.integers(0, len(values), size=(resamples, len(values)))
    return np.median(values[picks], axis=1).tolist()


def interval(replicates: list[float]) -> tuple[float, float]:
    ordered = sorted(replicates)
    return ordered[int(0.025 * len(ordered))], ordered[int(0.975 * len(ordered)) - 1]


def ratio_with_interval(ratios: list[float], resamples: int = 1000) -> dict[str, Any]:
    """Median of the paired ratios, 95% percentile-bootstrap interval, and replicates."""
    replicates = bootstrap_medians(ratios, resamples, seed=len(ratios))
    low, high = interval(replicates)
    return {"ratio": median(ratios), "low": low, "high": high, "replicates": replicates}


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def geomean_interval(entries: list[dict[str, Any]]) -> tuple[float, float] | None:
    """95% interval of the geometric mean: programs' replicates combined index by
    index (resamples are independent between programs)."""
    if not entries:
        return None
    combined = [geomean(list(values)) for values in zip(*(e["replicates"] for e in entries))]
    return interval(combined)


# Steady state.


def steady_state(
    args: argparse.Namespace,
    programs: list[Any],
    deadline: float,
    measured: Callable[[dict, int], None],
) -> tuple[dict, int]:
    """Per program: medians (ms) per backend and paired ratios with intervals.

    No program starts after ``deadline`` (``time.monotonic()``); ``measured`` gets
    the results so far after each program.
    """
    from inductor_fx_unbacked.demo.programs import same, synchronize
    from inductor_fx_unbacked.runner import cuda_graphs

    setup()
    results: dict[str, dict[str, Any]] = {}
    counter = TritonCompileCounter()
    runtime_compiles = 0
    for program in programs:
        if time.monotonic() > deadline:
            break
        first, second = program.inputs(
            args.device, program_size(program.name, args.n, args.heavy_n)
        )
        entry: dict[str, Any] = {"backends": {}, "ratios": {}}
        results[program.name] = entry
        runners = {}
        graphs_since = cuda_graphs.next_serial()
        for backend in args.backends:
            try:
                with backend_context(backend, args.device):
                    fn = compiled_fn(program, backend, first, args.device)
                    ok = same(fn(*first), program.fn(*first), rtol=1e-4, atol=1e-4)
                    ok = ok and same(fn(*second), program.fn(*second), rtol=1e-4, atol=1e-4)
                runners[backend] = fn
                entry["backends"][backend] = {"ok": ok}
            except Exception as e:  # noqa: BLE001 - reported per backend
                entry["backends"][backend] = {"error": harness.error_line(e)}
        for backend, fn in list(runners.items()):
            try:
                with backend_context(backend, args.device):
                    for _ in range(3):
                        fn(*first)
            except Exception as e:  # noqa: BLE001 - a backend failing on a repeated call
                entry["backends"][backend] = {"error": f"call 3-5: {harness.error_line(e)}"}
                del runners[backend]
        synchronize(args.device)
        before = counter.count
        graphs_before = dynamo_graphs()
        # Outside the backends' contexts (entering one takes milliseconds): a
        # recompile here would use the default compiler, so any counts as a
        # failure below.
        times = harness.interleaved_times(
            {backend: functools.partial(fn, *first) for backend, fn in runners.items()},
            functools.partial(synchronize, args.device),
            min_samples=args.min_samples,
            max_samples=args.max_samples,
            seconds=args.seconds,
            settled=lambda times: narrow(paired_ratios(times, resamples=400), args.precision),
        )
        samples = max((len(values) for values in times.values()), default=0)
        if "fx" in runners:
            runtime_compiles += counter.count - before
        if dynamo_graphs() != graphs_before:
            for cell in entry["backends"].values():
                cell.setdefault("error", "recompiled during the timed calls")
        for backend, values in times.items():
            entry["backends"][backend]["ms"] = median(values) * 1e3
        entry["ratios"] = paired_ratios(times)
        if "fx" in times and "direct" in times:
            # What torch.compile's entry path adds to the same artifact's call.
            entry["entry_us"] = median([a - b for a, b in zip(times["fx"], times["direct"])]) * 1e6
        entry["host_syncs"] = {
            backend: count_host_syncs(fn, first, args.device) for backend, fn in runners.items()
        }
        entry["samples"] = samples
        if "fx+cudagraphs" in runners:
            entry["cuda_graphs"] = [dataclasses.asdict(s) for s in cuda_graphs.stats(graphs_since)]
        cuda_graphs.release_all()
        summary = {
            name: f"{r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
            for name, r in entry["ratios"].items()
        }
        print(program.name, samples, json.dumps(summary), flush=True)
        measured(results, runtime_compiles)
    return results, runtime_compiles


def dynamo_graphs() -> int:
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def narrow(ratios: dict[str, dict[str, Any]], precision: float) -> bool:
    """Whether every ratio's 95% interval lies within ``precision`` of it."""
    return all(
        r["high"] / r["ratio"] - 1 < precision and 1 - r["low"] / r["ratio"] < precision
        for r in ratios.values()
    )


#: The ratios of the report: name -> (backend, anchor).
PAIRS = {
    "fx/python": ("fx", "python"),
    "fx/eager": ("fx", "eager"),
    "python/eager": ("python", "eager"),
    "fx-graph/python": ("fx-graph", "python"),
    "upstream-fx/python": ("upstream-fx", "python"),
    "fx+cudagraphs/eager": ("fx+cudagraphs", "eager"),
    "fx+cudagraphs/python": ("fx+cudagraphs", "python"),
    "python-reduce-overhead/eager": ("python-reduce-overhead", "eager"),
    "dynamo-eager/eager": ("dynamo-eager", "eager"),
    "aot-eager/eager": ("aot-eager", "eager"),
    "fx/aot-eager": ("fx", "aot-eager"),
    "python/aot-eager": ("python", "aot-eager"),
    "direct/eager": ("direct", "eager"),
    "direct+cudagraphs/eager": ("direct+cudagraphs", "eager"),
    "aot-module/direct": ("aot-module", "direct"),
    "aot-module/eager": ("aot-module", "eager"),
    "fx/direct": ("fx", "direct"),
}


def paired_ratios(
    times: dict[str, list[float]],
    resamples: int = 2000,
    pairs: dict[str, tuple[str, str]] = PAIRS,
) -> dict[str, dict[str, Any]]:
    """The paired ratios of ``pairs`` (name -> (backend, anchor)) whose two backends
    ``times`` has: the median of the per-sample ratios, with a 95% interval."""
    result = {}
    for name, (a, b) in pairs.items():
        if a in times and b in times and times[a]:
            ratios = [x / y for x, y in zip(times[a], times[b])]
            result[name] = ratio_with_interval(ratios, resamples)
    return result


# The report.


TITLE = "Data-dependent programs: FX backend vs Inductor's Python wrapper"


def method_lines(args: argparse.Namespace) -> list[str]:
    """What the report's numbers are: inputs, backends, how the steady state is sampled."""
    backends = list(args.backends)
    lines = [
        f"- Inputs of {args.n} elements (P8: {args.n // 5}); heavy programs {args.heavy_n}.",
        "- Backends: `eager`; `python` (Inductor's Python wrapper, default config); `fx` "
        "(this package, default config, lowered runner)"
        + ("; `fx-graph` (this package running `gm.forward`)" if "fx-graph" in backends else "")
        + (
            "; `upstream-fx` (upstream's FX backend, overlay disabled, asserts off, "
            "`compile_threads=1`)"
            if "upstream-fx" in backends
            else ""
        )
        + ("; `fx+cudagraphs` (`cuda_graphs=True`)" if "fx+cudagraphs" in backends else "")
        + (
            '; `python-reduce-overhead` (`mode="reduce-overhead"`)'
            if "python-reduce-overhead" in backends
            else ""
        )
        + (
            '; `dynamo-eager` and `aot-eager` (`torch.compile` with `backend="eager"` and '
            '`"aot_eager"`: ATen\'s kernels behind Dynamo, and behind AOTAutograd too)'
            if "aot-eager" in backends or "dynamo-eager" in backends
            else ""
        )
        + ". The fx-over-eager lines take each program's faster FX configuration, over "
        "every program (the heavy ones too); the fx-over-python lines, `fx` alone.",
        "- Steady: backends interleaved call by call (order rotating), each call between two "
        "device synchronisations; ms = median per backend; ratio = median of the paired "
        "per-sample ratios, [95% bootstrap interval]; sampling stopped when every interval "
        f"was within {args.precision:.0%} of its ratio, or at {args.max_samples} samples or "
        f"{args.seconds} s per program.",
    ]
    if args.device == "cpu":
        lines += [
            "",
            "**On CPU the ratios mean nothing**: the FX backends run Triton kernels in Triton's "
            "interpreter, the Python wrapper runs C++ kernels. Only a GPU run compares them.",
        ]
    return lines


def report(args: argparse.Namespace, cold: dict, steady: dict, steady_compiles: int) -> list[str]:
    """The report's tables and closing lines over the programs measured so far."""
    selected = selected_programs(args)
    programs = [p for p in selected if p.name in steady or p.name in cold]
    not_measured = [p.name for p in selected if p not in programs]
    light = [p for p in programs if not p.name.startswith("H")]
    heavy = [p for p in programs if p.name.startswith("H")]
    backends = list(args.backends)
    lines = []
    if not_measured:
        lines += [f"Not measured (past the time budget): {', '.join(not_measured)}.", ""]
    failures = 0

    def steady_table(selection: list[Any]) -> tuple[list[str], list[dict], list[dict]]:
        nonlocal failures
        table = [
            "| prog | "
            + " | ".join(f"{b} (ms)" for b in backends)
            + " | fx / python | fx / eager | python / eager | samples |",
            "|---" * (len(backends) + 5) + "|",
        ]
        over_python, over_eager = [], []
        for program in selection:
            entry = steady.get(program.name, {"backends": {}, "ratios": {}})
            cells = []
            for backend in backends:
                cell = entry["backends"].get(backend, {"error": "not measured"})
                if "error" in cell:
                    failures += 1
                    cells.append(f"FAIL ({cell['error'][:60]})")
                    continue
                failures += not cell["ok"]
                flag = "" if cell["ok"] else " MISMATCH"
                cells.append(f"{cell['ms']:.3f}{flag}" if "ms" in cell else f"n/a{flag}")
            ratio_cells = []
            for name, sink in (("fx/python", over_python), ("fx/eager", [])):
                r = entry["ratios"].get(name)
                if r:
                    sink.append(r)
                ratio_cells.append(ratio_text(r))
            best = best_fx_over_eager(entry["ratios"])
            if best:
                over_eager.append(best)
            ratio_cells.append(ratio_text(entry["ratios"].get("python/eager")))
            table.append(
                f"| {program.name} | "
                + " | ".join(cells + ratio_cells)
                + f" | {entry.get('samples', 0)} |"
            )
        return table, over_python, over_eager

    light_table, light_over_python, light_over_eager = steady_table(
        [p for p in light if p.name in steady]
    )
    lines += ["", "## Steady state", "", *light_table]
    heavy_over_python: list[dict] = []
    heavy_over_eager: list[dict] = []
    if heavy:
        heavy_table, heavy_over_python, heavy_over_eager = steady_table(
            [p for p in heavy if p.name in steady]
        )
        lines += [
            "",
            "## Heavy programs, steady state",
            "",
            *(f"- {p.name}: `{p.source}`" for p in heavy),
            "",
            *heavy_table,
        ]
    elif args.device == "cpu":
        lines += ["", "Heavy programs (H1-H5) run on GPUs only."]

    cold_ratios, new_ratios, cold_compiles = [], [], 0
    if cold:
        cold_backends = [b for b in COMPILED if any(b in row for row in cold.values())]
        lines += [
            "",
            "## Cold (s) and new sizes (ms, Triton compiles)",
            "",
            "Cold: compile and first call, fresh process and cache dirs; both backends tune "
            "their kernels on the first call. New sizes: the first call on the second input.",
            "",
            "| prog | "
            + " | ".join(f"{b} cold" for b in cold_backends)
            + " | "
            + " | ".join(f"{b} new sizes" for b in cold_backends)
            + " | fx / python cold |",
            "|---" * (2 + 2 * len(cold_backends)) + "|",
        ]
        for program in programs:
            row = cold.get(program.name)
            if row is None:
                continue

            def cold_cell(entry: dict | None) -> str:
                nonlocal failures
                if not entry or "error" in entry:
                    failures += 1
                    return f"FAIL ({(entry or {}).get('error', 'not measured')[:60]})"
                failures += not entry["ok"]
                return f"{entry['cold_s']:.2f}" + ("" if entry["ok"] else " MISMATCH")

            def new_cell(entry: dict | None) -> str:
                if not entry or "error" in entry:
                    return "FAIL"
                return f"{entry['new_sizes_ms']:.2f} ({entry['new_sizes_compiles']})"

            py, fx = row.get("python", {}), row.get("fx", {})
            ratio = "n/a"
            if "cold_s" in py and "cold_s" in fx:
                cold_ratios.append(fx["cold_s"] / py["cold_s"])
                new_ratios.append(fx["new_sizes_ms"] / py["new_sizes_ms"])
                ratio = f"{cold_ratios[-1]:.2f}"
            if "new_sizes_compiles" in fx:
                cold_compiles += fx["new_sizes_compiles"]
            lines.append(
                f"| {program.name} | "
                + " | ".join(cold_cell(row.get(b)) for b in cold_backends)
                + " | "
                + " | ".join(new_cell(row.get(b)) for b in cold_backends)
                + f" | {ratio} |"
            )
    else:
        lines += ["", "Cold and new sizes: not measured in this run (`--skip-cold`)."]
    lines += cuda_graph_lines(programs, steady)
    lines += floor_lines(programs, steady)
    lines += direct_lines(programs, steady)

    def geomean_line(name: str, entries: list[dict]) -> str:
        value = geomean([e["ratio"] for e in entries])
        bounds = geomean_interval(entries)
        suffix = f"  (95% interval [{bounds[0]:.3f}, {bounds[1]:.3f}])" if bounds else ""
        return f"{name}: {value:.3f}{suffix}"

    def plain(name: str, values: list[float]) -> str:
        return f"{name}: {geomean(values):.3f}" if values else f"{name}: not measured"

    lines += [
        "",
        f"{failures} failing or mismatching (program, backend) measurements.",
        f"Triton compiles during the fx backend's timed calls: {steady_compiles}; "
        f"during its first calls on new sizes: {cold_compiles if cold else 'not measured'}.",
        "",
        geomean_line("geomean_steady_fx_over_python_wrapper", light_over_python),
        max_line("max_steady_fx_over_python_wrapper", light_over_python),
        geomean_line("geomean_heavy_fx_over_python_wrapper", heavy_over_python)
        if heavy_over_python
        else "geomean_heavy_fx_over_python_wrapper: not measured",
        plain("geomean_cold_fx_over_python_wrapper", cold_ratios),
        plain("geomean_new_sizes_fx_over_python_wrapper", new_ratios),
        # Users compare with eager on every program, the heavy ones included.
        geomean_line("geomean_steady_fx_over_eager", light_over_eager + heavy_over_eager),
        max_line("max_steady_fx_over_eager", light_over_eager + heavy_over_eager),
        f"runtime_triton_compiles: {steady_compiles + cold_compiles}",
    ]
    return lines


def best_fx_over_eager(ratios: dict[str, Any]) -> dict[str, Any] | None:
    """The paired ratio over eager of the program's fastest FX configuration."""
    measured = [ratios[f"{fx}/eager"] for fx in FX_CONFIGURATIONS if f"{fx}/eager" in ratios]
    return min(measured, key=lambda r: r["ratio"], default=None)


def max_line(name: str, entries: list[dict]) -> str:
    worst = max(entries, key=lambda e: e["ratio"], default=None)
    if worst is None:
        return f"{name}: not measured"
    return f"{name}: {worst['ratio']:.3f}  (95% interval [{worst['low']:.3f}, {worst['high']:.3f}])"


def cuda_graph_lines(programs: list[Any], steady: dict) -> list[str]:
    """Per program, what the ``fx+cudagraphs`` backend's stretches did in steady state."""
    rows = [
        (p.name, steady[p.name]["cuda_graphs"])
        for p in programs
        if "cuda_graphs" in steady.get(p.name, {})
    ]
    if not rows:
        return []
    lines = [
        "",
        "## CUDA graphs (`fx+cudagraphs`)",
        "",
        "Stretches of device work between host syncs, and what they did over the whole "
        "run: captures, replays, eager runs (calls before a key's capture, keys not "
        "captured), failed captures, and the memory their captures held at the end.",
        "",
        "| prog | stretches | launches | captures | replays | eager runs | failures | MiB held |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, stretches in rows:
        total = {
            key: sum(s[key] for s in stretches)
            for key in ("launches", "captures", "replays", "eager_runs", "failures", "bytes")
        }
        lines.append(
            f"| {name} | {len(stretches)} | {total['launches']} | {total['captures']} | "
            f"{total['replays']} | {total['eager_runs']} | {total['failures']} | "
            f"{total['bytes'] / 2**20:.1f} |"
        )
    return lines


FLOOR_COLUMNS = (
    "dynamo-eager/eager",
    "aot-eager/eager",
    "python/aot-eager",
    "fx/aot-eager",
    "fx/eager",
)


def floor_lines(programs: list[Any], steady: dict) -> list[str]:
    """Per program, eager's kernels behind ``torch.compile``'s entry path against eager
    and against the compiled backends; with the geomeans over the programs measured."""
    rows = [
        (p.name, steady[p.name]["ratios"])
        for p in programs
        if "aot-eager/eager" in steady.get(p.name, {}).get("ratios", {})
    ]
    if not rows:
        return []
    lines = [
        "",
        "## The compiled-call floor",
        "",
        "Every compiled backend runs behind Dynamo's frame evaluation and guards and "
        "AOTAutograd's runtime wrappers. `aot-eager` runs eager's own ATen kernels behind "
        "both: its time over eager is what a compiled call costs before the backend's code "
        "runs, and fx over aot-eager is what Inductor and this package do with the rest.",
        "",
        "| prog | " + " | ".join(FLOOR_COLUMNS) + " |",
        "|---" * (len(FLOOR_COLUMNS) + 1) + "|",
    ]
    for name, ratios in rows:
        lines.append(
            f"| {name} | " + " | ".join(ratio_text(ratios.get(c)) for c in FLOOR_COLUMNS) + " |"
        )
    lines.append("")
    for column in ("aot-eager/eager", "fx/aot-eager"):
        values = [ratios[column]["ratio"] for _, ratios in rows if column in ratios]
        if values:
            label = column.replace("-", "_").replace("/", "_over_")
            lines.append(f"geomean_steady_{label}: {geomean(values):.3f}")
    return lines


DIRECT_COLUMNS = (
    "direct/eager",
    "direct+cudagraphs/eager",
    "aot-module/direct",
    "fx/direct",
    "fx/eager",
)


def best_direct_over_eager(ratios: dict[str, Any]) -> dict[str, Any] | None:
    measured = [ratios[f"{d}/eager"] for d in DIRECT_CONFIGURATIONS if f"{d}/eager" in ratios]
    return min(measured, key=lambda r: r["ratio"], default=None)


def direct_lines(programs: list[Any], steady: dict) -> list[str]:
    """``ifx.compile``'s artifact called directly, the AOT module, the cost of
    ``torch.compile``'s entry path, and the host syncs of one call, per program;
    with the closing lines over the fifteen and over the sync-free set."""
    from inductor_fx_unbacked.demo.programs import SYNC_FREE

    rows = [
        (p.name, steady[p.name])
        for p in programs
        if "direct/eager" in steady.get(p.name, {}).get("ratios", {})
    ]
    if not rows:
        return []
    syncing = sorted({b for _, entry in rows for b in entry.get("host_syncs", {})})
    lines = [
        "",
        "## Direct calls",
        "",
        "`direct`: `ifx.compile`'s artifact called directly (no Dynamo frame or guards, no "
        "AOTAutograd wrapper), `direct+cudagraphs` with `cuda_graphs=True`; `aot-module`: "
        "`aot_compile(..., fx_wrapper=True)`'s module, called. Entry µs: `fx` (the same "
        "compiled graph behind `torch.compile`) minus `direct`, median per call. Host syncs: "
        "device-to-host synchronisations of one call (CUDA's sync debug mode).",
        "",
        "| prog | "
        + " | ".join(DIRECT_COLUMNS)
        + " | entry µs | "
        + " | ".join(f"syncs {b}" for b in syncing)
        + " |",
        "|---" * (len(DIRECT_COLUMNS) + 2 + len(syncing)) + "|",
    ]
    for name, entry in rows:
        ratios, syncs = entry["ratios"], entry.get("host_syncs", {})
        entry_us = entry.get("entry_us")
        cells = [ratio_text(ratios.get(c)) for c in DIRECT_COLUMNS]
        cells.append(f"{entry_us:.1f}" if entry_us is not None else "n/a")
        cells += [str(syncs[b]) if syncs.get(b) is not None else "n/a" for b in syncing]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    standard = {name: entry for name, entry in rows if name in STANDARD}
    best = {name: best_direct_over_eager(entry["ratios"]) for name, entry in standard.items()}
    best = {name: r for name, r in best.items() if r is not None}
    lines.append("")
    but_p6 = [r for name, r in best.items() if name != "P6"]
    lines.append(max_line("max_direct_fx_over_eager", but_p6))
    lines.append(
        f"direct_fx_over_eager_P6: {best['P6']['ratio']:.3f}"
        if "P6" in best
        else "direct_fx_over_eager_P6: not measured"
    )
    lines.append(
        f"geomean_direct_fx_over_eager: {geomean([r['ratio'] for r in best.values()]):.3f}"
        f"  (over {len(best)} of the fifteen)"
    )
    aot = [
        entry["ratios"]["aot-module/direct"]
        for _, entry in rows
        if "aot-module/direct" in entry["ratios"]
    ]
    lines.append(max_line("max_aot_module_over_direct", aot))
    for name, entry in rows:
        if entry.get("entry_us") is not None:
            lines.append(f"median_entry_us_{name}: {entry['entry_us']:.1f}")
    sync_free = [(name, entry) for name, entry in rows if name in SYNC_FREE]
    if sync_free:
        lines.append("")
        direct = [best_direct_over_eager(entry["ratios"]) for _, entry in sync_free]
        compiled = [best_fx_over_eager(entry["ratios"]) for _, entry in sync_free]
        lines.append(max_line("max_syncfree_fx_over_eager", [r for r in direct if r]))
        lines.append(
            max_line("max_syncfree_torch_compile_fx_over_eager", [r for r in compiled if r])
        )
        for name, entry in sync_free:
            for backend in ("eager", "fx", "direct"):
                count = entry.get("host_syncs", {}).get(backend)
                if count is not None:
                    lines.append(f"host_syncs_{backend}_{name}: {count}")
    return lines


def ratio_text(r: dict | None) -> str:
    return f"{r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}]" if r else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--n", type=int, default=1_000_000, help="input elements (P8: n/5)")
    parser.add_argument(
        "--heavy-n",
        type=int,
        default=HEAVY_N,
        help="input elements of the heavy programs H1-H5 (GPU only; default 64M)",
    )
    parser.add_argument(
        "--min-samples", type=int, default=300, help="steady-state samples at least"
    )
    parser.add_argument(
        "--max-samples", type=int, default=5000, help="steady-state samples at most"
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=8.0,
        help="steady-state sampling time per program at most (after --min-samples)",
    )
    parser.add_argument(
        "--precision",
        type=float,
        default=0.01,
        help="stop sampling when every 95%% interval is within this fraction of its ratio",
    )
    parser.add_argument(
        "--skip-cold",
        action="store_true",
        help="no cold runs; with --cold-json, read their results from that file",
    )
    parser.add_argument(
        "--cold-only", action="store_true", help="only the cold runs (write them with --cold-json)"
    )
    parser.add_argument(
        "--cold-json",
        default=None,
        help="file for the cold results: written by a run with cold runs, read with --skip-cold",
    )
    parser.add_argument(
        "--cold-backends",
        nargs="+",
        default=list(DEFAULT_COLD_BACKENDS),
        choices=COMPILED,
        help="compiled backends measured cold (default: python fx)",
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        default=list(DEFAULT_BACKENDS),
        choices=BACKENDS,
        help="backends measured in steady state (default: eager python fx)",
    )
    parser.add_argument(
        "--programs",
        nargs="+",
        default=None,
        help="programs to run, e.g. P1 P5 H2 (default: P1-P8, and H1-H5 on GPUs)",
    )
    parser.add_argument("--out", default=None, help="write the markdown report to this file")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds for the whole run: the steady state gets 60%% when cold runs follow; "
        "no program starts past its share",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: P1 (unless --programs), tiny sizes"
    )
    parser.add_argument(
        "--cold-one",
        nargs=2,
        metavar=("PROGRAM", "BACKEND"),
        help="internal: one cold measurement in this process, printed as JSON",
    )
    args = parser.parse_args()
    args.device = harness.chosen_device(args.device)
    if args.quick:
        args.programs = args.programs or ["P1"]
        args.n, args.heavy_n = 1000, 1 << 16
        args.min_samples, args.max_samples, args.seconds = 5, 20, 1.0

    if args.cold_one:
        name, backend = args.cold_one
        print(json.dumps(run_cold(name, backend, args.device, args.n)))
        return 0

    started = time.monotonic()
    deadline = started + (args.budget_s if args.budget_s is not None else math.inf)
    programs = selected_programs(args)
    cold: dict[str, dict[str, Any]] = {}
    steady: dict[str, dict[str, Any]] = {}
    steady_compiles = 0
    out = harness.Report(
        args.out, TITLE, harness.environment_lines(args.device, *method_lines(args))
    )

    def measured(steady_so_far: dict, compiles: int) -> None:
        out.replace(report(args, cold, steady_so_far, compiles))

    if args.skip_cold and args.cold_json:
        with open(args.cold_json) as f:
            selected = {p.name for p in programs}
            cold.update((name, row) for name, row in json.load(f).items() if name in selected)
    if not args.cold_only:
        cold_follows = not args.skip_cold
        steady_deadline = started + (deadline - started) * (0.6 if cold_follows else 1.0)
        steady, steady_compiles = steady_state(args, programs, steady_deadline, measured)
    if not args.skip_cold:
        for program in programs:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            size = program_size(program.name, args.n, args.heavy_n)
            for backend in args.cold_backends:
                entry = cold_in_fresh_process(
                    program.name, backend, args.device, size, timeout=min(300, max(left, 1))
                )
                cold.setdefault(program.name, {})[backend] = entry
            print(program.name, json.dumps(cold[program.name]), flush=True)
            measured(steady, steady_compiles)
            # After every program: a run stopped at its time limit keeps what it measured.
            if args.cold_json:
                with open(args.cold_json, "w") as f:
                    json.dump(cold, f)
    measured(steady, steady_compiles)
    print(out.text)
    print(f"took {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
