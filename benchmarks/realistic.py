"""What users run: data-dependent programs and real-library code at their sizes, side by side.

In one process (``benchmarks/realistic_cases.py`` says what is measured):

- Programs: twelve data-dependent functions written from real code (losses over
  labelled tokens, detection post-processing, pooling and LayerNorm over kept
  rows, ``unique``, scans and sorts of selections, graph filtering, ``nonzero``
  and ``masked_select``), each at a ``small`` and a ``large`` size.
- Bandwidth: the ``nonzero`` and ``masked_select`` programs (64M and 256M
  elements) in GB/s (their inputs' bytes read plus their outputs' written), against
  the device's copy bandwidth measured in the same run (``copy_`` of 1 GiB, CUDA
  events).
- Real-library cases: ``benchmarks/models.py``'s cases at users' sizes (MoE blocks
  in both of transformers' experts implementations, torchvision's detection
  post-processing, torch_geometric's graph filtering and a GNN).

Backends: ``eager``; ``python`` (``torch.compile``, Inductor's Python wrapper);
``fx`` and ``fx+cudagraphs`` (``torch.compile`` inside ``ifx.fx_backend(device)``,
without and with ``cuda_graphs=True``); ``direct`` and ``direct+cudagraphs``
(``ifx.compile``'s artifact); on request (``--backends``), ``direct-fused``: the
direct call compiled with ``runner.fused_selections.ENABLED``, so that fused
selections are measured against the unfused runner in one process, calls
interleaved (it backs no goal line). Every ``torch.compile`` is ``fullgraph=False,
dynamic=True``, of its own copy of the code, compiled once per program on its
small size's first draw and run on both sizes. Each backend's results are
compared with eager's on two draws per size; one that raises when compiled is
reported as refused, with why, and one that differs as a mismatch, neither timed.

Per case and backend: the median ms of a call, the paired ratio to eager with a
95% bootstrap interval (calls interleaved, the order rotating, each between two
device synchronisations; ``harness.interleaved_times``), the first call's
seconds (the compile, on a program's small size; on its large size, the first
call at new sizes), compiled regions (Dynamo graphs) run per call, host syncs
per call, and the device time of a call (its kernels, profiled) beside the rest.

    python -m benchmarks.realistic --out benchmarks/results/DATE-h200-realistic.md
    python -m benchmarks.realistic --device cpu --quick --out /tmp/r.md   # a smoke run

No case starts past ``--budget-s`` (the programs get ``--programs-share`` of it
when real-library cases follow); the report, rewritten after every case, lists
what was not measured, and ends with the lines of :func:`summary_lines`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from benchmarks import data_dependent, harness, models
from benchmarks.data_dependent import geomean, geomean_interval, median, ratio_text

BACKENDS = ("eager", "python", "fx", "fx+cudagraphs", "direct", "direct+cudagraphs")
GPU_ONLY = ("fx+cudagraphs", "direct+cudagraphs")
FX = ("fx", "fx+cudagraphs")
DIRECT = ("direct", "direct+cudagraphs")
#: Backends that run only when asked for.
EXTRA_BACKENDS = ("direct-fused",)
#: dtype name -> (rtol, atol); atol is scaled by the largest magnitude of eager's result.
TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}
#: The copy that measures the device's bandwidth (a GPU run; a CPU run copies 16 MiB).
COPY_BYTES = 1 << 30


@dataclasses.dataclass
class Cell:
    """One backend on one case: how it went (``ok``, ``refused``, ``mismatch``,
    ``error``, ``GPU only``, ``not measured``) and what was measured."""

    status: str = "ok"
    detail: str = ""
    ms: float | None = None
    ratio: dict[str, Any] | None = None
    first_call_s: float | None = None
    graphs: float | None = None
    syncs: int | None = None
    device_ms: float | None = None

    @property
    def measured(self) -> bool:
        return self.status == "ok" and self.ms is not None


@dataclasses.dataclass
class Case:
    """One program at one size, or one real-library case: its rows of the report."""

    name: str
    size: str
    label: str
    cells: dict[str, Cell] = dataclasses.field(default_factory=dict)
    samples: int = 0
    #: The shapes of eager's results on the two draws (the data-dependent sizes).
    outputs: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)
    #: Why the case was not measured, or "".
    skipped: str = ""
    #: A bandwidth program's, with the bytes it reads and writes (draw 0) once measured.
    bandwidth: bool = False
    moved: int | None = None

    @property
    def key(self) -> str:
        return f"{self.name}_{self.size}" if self.size else self.name


@dataclasses.dataclass
class Subject:
    """What one compile serves: a function, and per size the maker of its draws."""

    name: str
    summary: str
    fn: Callable[..., Any]
    #: (size name, label, the two draws' maker) per size, in order.
    sizes: list[tuple[str, str, Callable[[], list[tuple[Any, ...]]]]]
    rtol: float | None = None
    bandwidth: bool = False
    #: The results computed in float64 (``models.Built.fp64``), or None.
    fp64: Callable[..., Any] | None = None


# Comparing with eager.


def difference(got: Any, expected: Any, rtol: float | None = None) -> str | None:
    """Why ``got`` is not eager's ``expected``, or None: structure, shapes, dtypes
    and values, floats within :data:`TOLERANCES` (``rtol`` at least), others equal."""
    import torch
    from torch.utils import _pytree as pytree

    flat_got, spec_got = pytree.tree_flatten(got)
    flat_expected, spec_expected = pytree.tree_flatten(expected)
    if spec_got != spec_expected:
        return f"another structure: {spec_got} for eager's {spec_expected}"
    for index, (g, e) in enumerate(zip(flat_got, flat_expected)):
        if not isinstance(e, torch.Tensor):
            if g != e:
                return f"output {index}: {g!r}, eager {e!r}"
            continue
        if not isinstance(g, torch.Tensor) or g.shape != e.shape or g.dtype != e.dtype:
            got_as = f"{tuple(g.shape)} {g.dtype}" if isinstance(g, torch.Tensor) else repr(g)
            return f"output {index}: {got_as}, eager {tuple(e.shape)} {e.dtype}"
        if not e.is_floating_point():
            wrong = int((g != e).sum())
        else:
            relative, absolute = TOLERANCES.get(str(e.dtype).split(".")[-1], (1e-4, 1e-4))
            relative = max(relative, rtol or 0.0)
            scale = max(1.0, float(e.abs().max())) if e.numel() else 1.0
            close = torch.isclose(g, e, rtol=relative, atol=absolute * scale, equal_nan=True)
            wrong = int((~close).sum())
        if wrong:
            return f"output {index}: {wrong} of {e.numel()} values differ"
    return None


def shapes(result: Any) -> str:
    """The shapes of a result's tensors (``1311x1, 3354``; ``()`` for a scalar)."""
    import torch
    from torch.utils import _pytree as pytree

    leaves = [leaf for leaf in pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]
    return ", ".join("x".join(map(str, leaf.shape)) or "()" for leaf in leaves)


# Backends.


def compiled(backend: str, fn: Callable[..., Any], example: tuple[Any, ...]) -> Any:
    """``fn`` for ``backend``: ``torch.compile`` of a copy of its code, or the
    artifact of ``ifx.compile`` (``fullgraph=False``: one graph's artifact where the
    program is one graph, else the graphs with Dynamo's glue)."""
    import torch

    import inductor_fx_unbacked as ifx

    if backend == "eager":
        return fn
    if backend in DIRECT:
        options = {"dynamic": True, "cuda_graphs": backend == "direct+cudagraphs"}
        return ifx.compile(fn, *example, fullgraph=False, **options)
    if backend == "direct-fused":
        from unittest import mock

        from inductor_fx_unbacked.runner import fused_selections

        # Read where the artifact's graphs are lowered, at compile time.
        with mock.patch.object(fused_selections, "ENABLED", True):
            return ifx.compile(fn, *example, fullgraph=False, dynamic=True)
    return torch.compile(data_dependent.code_copy(fn), fullgraph=False, dynamic=True)


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """``fn()`` and its seconds, between two synchronisations."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, time.perf_counter() - start


def profiled(
    fn: Callable[..., Any], args: tuple[Any, ...], device: str, calls: int = 5
) -> tuple[float, float | None]:
    """Per call: the compiled regions that ran (Dynamo's ``Torch-Compiled Region``
    events: its graphs), and on a GPU the ms of the call's kernels and copies."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    synchronize(device)
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn(*args)
        synchronize(device)
    events = prof.events()
    regions = sum(event.name.startswith("Torch-Compiled Region") for event in events)
    on_device = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    device_ms = sum(e.device_time for e in on_device) / calls / 1e3 if device == "cuda" else None
    return regions / calls, device_ms


# Measuring.


@dataclasses.dataclass
class Settings:
    """How the cases are measured: the device, the backends (eager first) and the
    sampling (``harness.interleaved_times``'s bounds and ``--precision``)."""

    device: str
    backends: Sequence[str]
    min_samples: int
    max_samples: int
    seconds: float
    precision: float
    #: Calls profiled per backend and case (device time, graphs per call).
    profile_calls: int = 5


def measure(subject: Subject, settings: Settings, deadline: float) -> Iterator[Case]:
    """The subject's cases, size by size: each backend compiled on the first size's
    first draw (its first call timed), checked against eager on both draws of every
    size, then timed interleaved. No case or compile starts past ``deadline``."""
    device = settings.device
    runners: dict[str, Any] = {}  # backend -> the compiled callable, or why it is refused
    for size, label, make_draws in subject.sizes:
        case = Case(subject.name, size, label, bandwidth=subject.bandwidth)
        if time.monotonic() > deadline:
            case.skipped = "past the time budget"
            yield case
            continue
        draws = make_draws()
        expected = [timed(functools.partial(subject.fn, *draw), device) for draw in draws]
        case.cells["eager"] = Cell(first_call_s=expected[0][1])
        expected = [result for result, _ in expected]
        case.outputs = " / ".join(shapes(result) for result in expected)
        if subject.bandwidth:
            case.moved = bytes_of(draws[0]) + bytes_of(expected[0])
        ready = {"eager": subject.fn}
        # Computed once per draw, for the first backend that needs it.
        fp64 = subject.fp64 and functools.cache(
            lambda index, draws=draws: subject.fp64(*draws[index])
        )
        for backend in settings.backends[1:]:
            case.cells[backend] = cell = Cell()
            why_not = skip_reason(backend, subject, device, runners, deadline)
            if why_not is not None:
                cell.status, cell.detail = why_not
                continue
            fn = first_call(backend, subject, draws, expected, fp64, runners, cell, device)
            if fn is not None:
                ready[backend] = fn
                if cell.detail:  # accepted against float64
                    case.notes.append(f"{backend}: {cell.detail}")
        sample(case, ready, draws[0], settings)
        yield case
    from inductor_fx_unbacked.runner import cuda_graphs

    cuda_graphs.release_all()


def skip_reason(
    backend: str, subject: Subject, device: str, runners: dict[str, Any], deadline: float
) -> tuple[str, str] | None:
    """Why ``backend`` is not run on this case, as (status, detail), or None."""
    if backend in GPU_ONLY and device != "cuda":
        return "GPU only", ""
    if isinstance(runners.get(backend), str):
        return "refused", runners[backend]
    if backend not in runners and time.monotonic() > deadline:
        return "not measured", "past the time budget"
    return None


def first_call(
    backend: str,
    subject: Subject,
    draws: list[tuple[Any, ...]],
    expected: list[Any],
    fp64: Callable[[int], Any] | None,
    runners: dict[str, Any],
    cell: Cell,
    device: str,
) -> Callable[..., Any] | None:
    """Compile ``backend`` (on the first size) and check it on the draws: the
    callable to time, or None with ``cell`` saying why not. ``fp64(index)``: the
    float64 result of draw ``index``, where the subject has one."""
    compiling = backend not in runners
    try:
        with data_dependent.backend_context(backend, device):

            def first() -> Any:
                if compiling:
                    runners[backend] = compiled(backend, subject.fn, draws[0])
                return runners[backend](*draws[0])

            results, cell.first_call_s = timed(first, device)
            results = [results] + [runners[backend](*draw) for draw in draws[1:]]
    except Exception as error:  # noqa: BLE001 - every failure is a cell of the report
        if compiling:
            runners[backend] = harness.error_line(error)
        cell.status = "refused" if compiling else "error"
        cell.detail = harness.error_line(error)
        return None
    for index, (got, want) in enumerate(zip(results, expected)):
        why = difference(got, want, subject.rtol)
        if why is not None and fp64 is not None and as_close_to_float64(got, want, fp64(index)):
            accepted = f"draw {index}: {why}; as close to float64 as eager (torchbench's check)"
            cell.detail = "; ".join(filter(None, [cell.detail, accepted]))
            continue
        if why is not None:
            cell.status, cell.detail = "mismatch", f"draw {index}: {why}"
            return None
    return runners[backend]


def as_close_to_float64(got: Any, want: Any, fp64: Any) -> bool:
    """Whether ``got`` is as close to the float64 result as eager's ``want`` is, as
    torchbench judges low-precision models (``torch._dynamo.utils.same`` with
    ``fp64_ref``: the root mean square error at most a multiple of eager's, 3 for
    half precision, plus 1e-3)."""
    from torch._dynamo.utils import same

    return bool(same(want, got, fp64_ref=fp64, tol=1e-2, equal_nan=True, log_error=lambda *a: None))


def sample(case: Case, ready: dict[str, Any], args: tuple[Any, ...], settings: Settings) -> None:
    """Time the backends that passed, interleaved; then per backend its graphs and
    device time per call (profiled) and its host syncs per call."""
    device = settings.device
    pairs = {f"{backend}/eager": (backend, "eager") for backend in ready if backend != "eager"}
    for fn in ready.values():
        fn(*args)  # after the first calls on each draw: warm
    graphs_before = data_dependent.dynamo_graphs()
    times = harness.interleaved_times(
        {backend: functools.partial(fn, *args) for backend, fn in ready.items()},
        functools.partial(synchronize, device),
        min_samples=settings.min_samples,
        max_samples=settings.max_samples,
        seconds=settings.seconds,
        settled=lambda times: data_dependent.narrow(
            data_dependent.paired_ratios(times, 400, pairs), settings.precision
        ),
    )
    if data_dependent.dynamo_graphs() != graphs_before:
        case.notes.append("Dynamo compiled during the timed calls")
    case.samples = len(times["eager"])
    ratios = data_dependent.paired_ratios(times, pairs=pairs)
    for backend, fn in ready.items():
        cell = case.cells[backend]
        cell.ms = median(times[backend]) * 1e3
        cell.ratio = ratios.get(f"{backend}/eager")
        regions, cell.device_ms = profiled(fn, args, device, settings.profile_calls)
        if backend != "eager":
            # The direct artifact is one graph, run without Dynamo.
            direct = backend in DIRECT + EXTRA_BACKENDS
            cell.graphs = regions or (1.0 if direct else 0.0)
        cell.syncs = data_dependent.count_host_syncs(fn, args, device)


def bytes_of(value: Any) -> int:
    import torch
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_leaves(value)
    return sum(leaf.nbytes for leaf in leaves if isinstance(leaf, torch.Tensor))


def copy_bandwidth_gbs(device: str, repeats: int = 20) -> float:
    """GB/s of a large ``copy_`` (bytes read plus written), the median of ``repeats``
    copies, each timed with CUDA events (on CPU, with the host's clock)."""
    import torch

    count = (COPY_BYTES if device == "cuda" else 1 << 24) // 4
    source = torch.ones(count, device=device)
    target = torch.empty_like(source)
    for _ in range(3):
        target.copy_(source)
    seconds = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            target.copy_(source)
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)
        else:
            seconds.append(timed(functools.partial(target.copy_, source), device)[1])
    return 2 * source.nbytes / median(seconds) / 1e9


# The subjects.


def program_subjects(names: Sequence[str] | None, device: str, quick: bool) -> list[Subject]:
    from benchmarks.realistic_cases import PROGRAMS

    subjects = []
    for program in PROGRAMS:
        if names is not None and program.name not in names:
            continue
        chosen = program.quick if quick else program.sizes

        def draws(dims: Any, inputs: Callable[..., Any] = program.inputs) -> list[Any]:
            return [inputs(device, dims, draw) for draw in (0, 1)]

        sizes = [
            (name, size.label, functools.partial(draws, size.dims)) for name, size in chosen.items()
        ]
        subjects.append(
            Subject(
                program.name,
                program.summary,
                program.fn,
                sizes,
                program.rtol,
                program.bandwidth,
            )
        )
    return subjects


def model_subject(case: Any, sizes: str, device: str) -> Subject | str:
    """A real-library case built at its ``sizes``, or why it cannot be."""
    missing = models.missing_libraries([case.library])
    if missing:
        return f"needs {', '.join(missing)}, not installed"
    try:
        built = case.build(device)
    except Exception as error:  # noqa: BLE001 - a case that cannot be built is skipped
        return f"not built: {harness.error_line(error)}"
    label = "; ".join(filter(None, [sizes, built.description]))
    return Subject(
        case.name,
        case.library,
        built.fn,
        [("", label, lambda: list(built.inputs))],
        fp64=built.fp64,
    )


# The report.

TITLE = "What users run: data-dependent programs and real-library code at users' sizes"

TABLE_HEAD = [
    "| size | backend | ms | / eager [95%] | first call s | graphs/call | host syncs/call "
    "| device ms | host ms |",
    "|---|---|---|---|---|---|---|---|---|",
]


def method_lines(args: argparse.Namespace) -> list[str]:
    lines = [
        f"- Backends: {', '.join(f'`{b}`' for b in args.backends)}; every `torch.compile` "
        "with `fullgraph=False, dynamic=True`, compiled once per program (on its small "
        "size's first draw) and run at both sizes; `direct`: `ifx.compile(fn, *draw, "
        "dynamic=True)`.",
        "- Each backend's results compared with eager's on two draws per size (floats: "
        + ", ".join(f"{d} rtol {r:g}" for d, (r, _) in TOLERANCES.items())
        + ", atol the same times the largest magnitude of eager's result); a backend that "
        "raises when compiled is *refused*, one that differs a *mismatch*; neither is timed.",
        "- ms: median of a call, calls interleaved (order rotating, each between two device "
        "synchronisations); / eager: median of the paired ratios [95% bootstrap interval]; "
        f"sampling stopped when every interval was within {args.precision:.0%} of its ratio, "
        f"or at {args.max_samples} samples or {args.seconds} s per case.",
        "- first call s: on a program's small size (and on a real-library case) the compile "
        "and first call; on its large size the first call at new sizes. graphs/call: "
        "compiled regions run per call (Dynamo's `Torch-Compiled Region` events; `direct` "
        "runs one graph without Dynamo). host syncs/call: CUDA's sync debug mode. device ms: "
        "the call's kernels and copies (torch.profiler); host ms: ms minus that.",
    ]
    if args.device == "cpu":
        lines += [
            "",
            "**On CPU the times mean nothing**: the FX backends run Triton kernels in Triton's "
            "interpreter. Only a GPU run measures them.",
        ]
    return lines


def case_rows(case: Case, backends: Sequence[str]) -> list[str]:
    rows = []
    for backend in backends:
        cell = case.cells.get(backend)
        if cell is None:
            continue
        size = case.size or "-"
        if not cell.measured:
            why = f"{cell.status}" + (f": {cell.detail}" if cell.detail else "")
            rows.append(f"| {size} | {backend} | {why} |  |  |  |  |  |  |")
            continue
        host = cell.ms - cell.device_ms if cell.device_ms is not None else None
        cells = [
            f"{cell.ms:.3f}",
            "1" if backend == "eager" else ratio_text(cell.ratio),
            number(cell.first_call_s, "{:.2f}"),
            "-" if backend == "eager" else number(cell.graphs, "{:g}"),
            number(cell.syncs, "{}"),
            number(cell.device_ms, "{:.3f}"),
            number(host, "{:.3f}"),
        ]
        rows.append(f"| {size} | {backend} | " + " | ".join(cells) + " |")
    return rows


def number(value: float | None, form: str) -> str:
    return "n/a" if value is None else form.format(value)


def section_lines(
    subjects: list[tuple[str, str, list[Case]]], backends: Sequence[str]
) -> list[str]:
    """Per subject: what it is written from, its cases' sizes and outputs, and a row
    per size and backend."""
    lines: list[str] = []
    for name, summary, cases in subjects:
        lines += ["", f"### {name}", "", summary, ""]
        for case in cases:
            detail = f"{case.size}: " if case.size else ""
            facts = [case.label] if case.label else []
            facts += [f"not measured: {case.skipped}"] if case.skipped else []
            facts += [f"outputs {case.outputs}"] if case.outputs else []
            facts += [f"{case.samples} samples"] if case.samples else []
            lines.append(f"- {detail}" + "; ".join(facts + case.notes) + ".")
        lines += ["", *TABLE_HEAD]
        for case in cases:
            lines += case_rows(case, backends)
    return lines


def best(case: Case, backends: Sequence[str]) -> dict[str, Any] | None:
    """The ratio over eager of the case's fastest backend among ``backends``."""
    ratios = [case.cells[b].ratio for b in backends if b in case.cells and case.cells[b].ratio]
    return min(ratios, key=lambda r: r["ratio"], default=None)


def bandwidth_lines(cases: list[Case], copy_gbs: float, backends: Sequence[str]) -> list[str]:
    rows = [c for c in cases if c.moved is not None]
    if not rows:
        return []
    lines = [
        "",
        "## Bandwidth",
        "",
        "GB/s: the bytes of the program's inputs read plus its outputs written (draw 0), "
        f"over its median time; the device's copy: {copy_gbs:.1f} GB/s.",
        "",
        "| case | size | elements | outputs | MB moved | "
        + " | ".join(f"{b} GB/s" for b in backends)
        + " | best direct / copy |",
        "|---" * (len(backends) + 6) + "|",
    ]
    for case in rows:
        speeds = [gbs(case, b) for b in backends]
        direct = best_direct_gbs(case)
        share = f"{direct / copy_gbs:.2f}" if direct is not None else "n/a"
        facts = [case.name, case.size, case.label, case.outputs, f"{case.moved / 1e6:.1f}"]
        cells = facts + [number(speed, "{:.1f}") for speed in speeds] + [share]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def gbs(case: Case, backend: str) -> float | None:
    cell = case.cells.get(backend)
    if case.moved is None or cell is None or not cell.measured:
        return None
    return case.moved / (cell.ms / 1e3) / 1e9


def best_direct_gbs(case: Case) -> float | None:
    speeds = [s for s in (gbs(case, b) for b in DIRECT) if s is not None]
    return max(speeds, default=None)


def summary_lines(
    programs: list[Case], model_cases: list[Case], copy_gbs: float | None
) -> list[str]:
    """The closing lines: over the programs (both sizes), direct (the faster of
    ``direct`` and ``direct+cudagraphs``) and fx (of ``fx`` and ``fx+cudagraphs``)
    over eager; over the real-library cases the faster of those four; the copy
    bandwidth and each bandwidth case's GB/s (the faster direct call)."""

    def ratios(cases: list[Case], backends: Sequence[str]) -> list[tuple[Case, dict]]:
        found = [(case, best(case, backends)) for case in cases]
        return [(case, r) for case, r in found if r is not None]

    def geomean_line(name: str, found: list[tuple[Case, dict]], total: int) -> str:
        if not found:
            return f"{name}: not measured"
        entries = [r for _, r in found]
        low, high = geomean_interval(entries)
        value = geomean([r["ratio"] for r in entries])
        cases = f"{len(found)} of {total} cases"
        return f"{name}: {value:.3f}  (95% interval [{low:.3f}, {high:.3f}]; {cases})"

    def max_line(name: str, found: list[tuple[Case, dict]]) -> str:
        if not found:
            return f"{name}: not measured"
        case, worst = max(found, key=lambda pair: pair[1]["ratio"])
        return (
            f"{name}: {worst['ratio']:.3f}  (95% interval [{worst['low']:.3f}, "
            f"{worst['high']:.3f}]; {case.key})"
        )

    direct = ratios(programs, DIRECT)
    fx = ratios(programs, FX)
    package = ratios(model_cases, FX + DIRECT)
    lines = [
        geomean_line("realistic_geomean_direct_over_eager", direct, len(programs)),
        max_line("realistic_max_direct_over_eager", direct),
        max_line("realistic_max_fx_over_eager", fx),
        max_line("models_max_fx_over_eager", package),
        geomean_line("models_geomean_fx_over_eager", package, len(model_cases)),
        f"copy_bandwidth_gbs: {copy_gbs:.1f}"
        if copy_gbs is not None
        else "copy_bandwidth_gbs: not measured",
    ]
    lines.append(direct_accepted_line(model_cases))
    lines.append(bandwidth_fraction_line(programs, copy_gbs))
    for case in programs:
        if case.bandwidth:
            speed = best_direct_gbs(case)
            value = f"{speed:.1f}" if speed is not None else "not measured"
            lines.append(f"{case.key}_gbs: {value}")
    return lines


#: The share of eager's time at or under which a real-library case's direct call
#: counts toward ``models_direct_accepted`` (issue 40's goal).
ACCEPTED_AT = 0.80


def direct_accepted_line(model_cases: list[Case]) -> str:
    """``models_direct_accepted: K/N``: of the N real-library cases, the K whose
    direct call (the faster of ``direct`` and ``direct+cudagraphs``) equals eager
    and takes at most :data:`ACCEPTED_AT` of eager's time."""
    if not model_cases:
        return "models_direct_accepted: not measured"
    found = [best(case, DIRECT) for case in model_cases]
    accepted = [r for r in found if r is not None]
    fast = [r for r in accepted if r["ratio"] <= ACCEPTED_AT]
    return (
        f"models_direct_accepted: {len(fast)}/{len(model_cases)}  "
        f"(at most {ACCEPTED_AT:.2f} of eager's time; {len(accepted)} accepted at any time)"
    )


def bandwidth_fraction_line(programs: list[Case], copy_gbs: float | None) -> str:
    """``compaction_bandwidth_fraction``: the least, over the bandwidth programs at
    both sizes, of the faster direct call's GB/s over the copy's."""
    shares = [
        (speed / copy_gbs, case.key)
        for case in programs
        if case.bandwidth and copy_gbs and (speed := best_direct_gbs(case)) is not None
    ]
    if not shares:
        return "compaction_bandwidth_fraction: not measured"
    share, key = min(shares)
    return f"compaction_bandwidth_fraction: {share:.2f}  ({key}; {len(shares)} cases)"


def report_lines(
    args: argparse.Namespace,
    programs: list[tuple[str, str, list[Case]]],
    model_cases: list[tuple[str, str, list[Case]]],
    skipped: list[str],
    copy_gbs: float | None,
) -> list[str]:
    program_cases = [case for _, _, cases in programs for case in cases]
    library_cases = [case for _, _, cases in model_cases for case in cases]
    not_measured = [case.key for case in program_cases + library_cases if case.skipped]
    lines = []
    if not_measured:
        lines += [f"Not measured (past the time budget): {', '.join(not_measured)}.", ""]
    lines += ["## Programs", *section_lines(programs, args.backends)]
    lines += bandwidth_lines(program_cases, copy_gbs or float("nan"), args.backends)
    lines += ["", "## Real-library cases"]
    if skipped:
        lines += ["", *(f"- {line}" for line in skipped)]
    lines += section_lines(model_cases, args.backends)
    failing = [
        f"{case.key} {backend}: {cell.status}"
        for case in program_cases + library_cases
        for backend, cell in case.cells.items()
        if cell.status in ("mismatch", "error")
    ]
    lines += ["", "## Summary", ""]
    if failing:
        lines += [f"Mismatches and errors: {'; '.join(failing)}.", ""]
    lines += summary_lines(program_cases, library_cases, copy_gbs)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    parser.add_argument("--out", default=None, help="write the markdown report to this file")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes")
    parser.add_argument(
        "--programs", nargs="*", default=None, help="programs (default: all; none: skip)"
    )
    parser.add_argument(
        "--cases", nargs="*", default=None, help="real-library cases (default: all; none: skip)"
    )
    parser.add_argument("--backends", nargs="+", default=None, choices=BACKENDS + EXTRA_BACKENDS)
    parser.add_argument("--budget-s", type=float, default=480.0, help="no case starts past it")
    parser.add_argument(
        "--programs-share",
        type=float,
        default=0.6,
        help="the programs' share of the budget when real-library cases follow",
    )
    parser.add_argument("--min-samples", type=int, default=15)
    parser.add_argument("--max-samples", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=1.0, help="sampling time per case")
    parser.add_argument("--precision", type=float, default=0.02)
    args = parser.parse_args()
    args.device = harness.chosen_device(args.device)
    if args.backends is None and args.device == "cpu":
        # CUDA graphs need a GPU; the Python wrapper compiles C++, minutes for a smoke run.
        left_out = GPU_ONLY + (("python",) if args.quick else ())
        args.backends = [b for b in BACKENDS if b not in left_out]
    args.backends = args.backends or list(BACKENDS)
    args.backends = ["eager", *(b for b in args.backends if b != "eager")]
    if args.quick:
        args.min_samples, args.max_samples, args.seconds = 2, 3, 0.1
    return run(args)


def run(args: argparse.Namespace) -> int:
    import torch

    from benchmarks.realistic_cases import model_cases

    started = time.monotonic()
    cases = model_cases(args.quick)
    cases = [
        (case, sizes) for case, sizes in cases if args.cases is None or case.name in args.cases
    ]
    subjects = program_subjects(args.programs, args.device, args.quick)
    share = args.programs_share if cases and subjects else 1.0
    program_deadline = started + args.budget_s * share
    deadline = started + args.budget_s
    settings = Settings(
        args.device,
        args.backends,
        args.min_samples,
        args.max_samples,
        args.seconds,
        args.precision,
        profile_calls=1 if args.quick else 5,
    )
    header = harness.environment_lines(args.device, *models.library_lines(), *method_lines(args))
    out = harness.Report(args.out, TITLE, header)
    programs: list[tuple[str, str, list[Case]]] = []
    libraries: list[tuple[str, str, list[Case]]] = []
    skipped = ["none selected (`--cases` without names)"] if args.cases == [] else []
    copy_gbs = copy_bandwidth_gbs(args.device)

    def write() -> None:
        out.replace(report_lines(args, programs, libraries, skipped, copy_gbs))

    with torch.no_grad(), models.sweep_config(args.device):
        for subject in subjects:
            measured: list[Case] = []
            programs.append((subject.name, subject.summary, measured))
            for case in measure(subject, settings, program_deadline):
                measured.append(case)
                print(case.key, progress(case), flush=True)
                write()
        for library_case, sizes in cases:
            if time.monotonic() > deadline:
                unmeasured = Case(library_case.name, "", sizes, skipped="past the time budget")
                libraries.append((library_case.name, library_case.library, [unmeasured]))
                continue
            subject = model_subject(library_case, sizes, args.device)
            if isinstance(subject, str):
                skipped.append(f"{library_case.name}: {subject}")
                continue
            measured = list(measure(subject, settings, deadline))
            libraries.append((subject.name, library_case.library, measured))
            print(subject.name, progress(measured[0]), flush=True)
            write()
    write()
    print(out.text)
    print(f"took {time.monotonic() - started:.0f} s", flush=True)
    return 0


def progress(case: Case) -> str:
    return " ".join(
        f"{backend}={cell.ms:.3f}ms" if cell.measured else f"{backend}={cell.status}"
        for backend, cell in case.cells.items()
    )


if __name__ == "__main__":
    sys.exit(main())
