"""The GPU runs in one command: the package's tests on the GPU and the benchmarks.

    python -m benchmarks.gpu --parts tests,caches,data-dependent --budget-s 520 --out DIR
    python -m benchmarks.gpu --parts suite --install-wheels .whl --out DIR   # the whole suite
    python -m benchmarks.gpu --list
    python -m benchmarks.gpu --device cpu --quick --parts tests --out /tmp/smoke

Each selected part runs as a child process with its share of ``--budget-s``
(shares follow the parts' weights, about the minutes each takes on an H200: select
the parts that fit; time a part leaves unused goes to those after it) and writes
its report to ``DIR/YYYY-MM-DD-<gpu>-<part>.md`` as it goes, its output to
``DIR/logs/``: a part stopped at its time limit, or a run killed, keeps what it
measured. Test parts run pytest with Inductor's caches on, as users run
them; ``suite`` runs the whole suite (``--full``) on 8 pytest-xdist workers in an
order shuffled by ``--seed`` (pytest-randomly), and its report ends with
``gpu_suite_passed``, ``gpu_suite_failed``, ``gpu_suite_errors`` and the seed;
``--shard K/N`` runs the K-th of N disjoint parts of it (a report each), for a
suite longer than one call.
With several GPUs the parts run side by side, one GPU each (``--lanes``);
a part that needs two GPUs runs first, on all of them. ``--quick`` runs each
part's smoke version (on CPU: Triton's interpreter). ``--install-wheels DIR``
first pip-installs the wheels in DIR (no index, no dependencies), for a machine
without network that lacks one (``expecttest``). Exits with 1 when a part failed
or was stopped, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from benchmarks import harness

#: Seconds kept back from the budget for writing the last reports.
MARGIN_S = 5.0
#: A part whose share is shorter than this is not started.
MIN_SHARE_S = 3.0


@dataclasses.dataclass(frozen=True)
class Share:
    """What a part is given: the device, whether to smoke-test, its seconds, its files."""

    device: str
    quick: bool
    seconds: float
    report: Path
    log: Path
    #: Benchmarks measure the steady state only (``--steady-only``).
    steady_only: bool = False

    def budget(self, fraction: float = 0.85) -> str:
        """The seconds to tell a benchmark, leaving it time to write its report."""
        return f"{max(1.0, self.seconds * fraction - 10):.0f}"


@dataclasses.dataclass(frozen=True)
class Part:
    """One GPU run: a pytest run (``pytest_args``) or a benchmark (``module``)."""

    name: str
    title: str
    #: The part's share of the budget, relative to the others': about the minutes
    #: it takes on an H200.
    weight: float
    pytest_args: Sequence[str] = ()
    quick_pytest_args: Sequence[str] = ()
    module: str | None = None
    arguments: Callable[[Share], list[str]] | None = None
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: GPUs it needs at once (on CPU it runs anyway).
    gpus: int = 1
    #: Why it cannot run here, or ``None``.
    missing: Callable[[], str | None] = lambda: None
    #: A test part whose order is shuffled (pytest-randomly, the session's seed), and
    #: whose report ends with ``<summary>_passed``, ``_failed``, ``_errors``, ``_seed``.
    summary: str | None = None
    #: pytest-xdist workers of a test part (``--pytest-workers`` overrides it).
    workers: int | None = None

    def command(self, share: Share) -> list[str]:
        assert self.module is not None and self.arguments is not None
        return [sys.executable, "-m", f"benchmarks.{self.module}", *self.arguments(share)]


def _missing_modules(*names: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        absent = [name for name in names if importlib.util.find_spec(name) is None]
        return f"needs {', '.join(absent)}, not installed" if absent else None

    return missing


def _missing_upstream_suite() -> str | None:
    from benchmarks.upstream_suite import TEST_FILE

    if not (harness.ROOT / ".upstream" / TEST_FILE).exists():
        return (
            f".upstream/{TEST_FILE} is missing (benchmarks/upstream_suite.py says how to fetch it)"
        )
    return _missing_modules("expecttest")()


def _data_dependent(share: Share) -> list[str]:
    if share.quick:
        return ["--device", share.device, "--quick", "--out", str(share.report)]
    backends = ["eager", "aot-eager", "python", "fx", "fx+cudagraphs"]
    backends += ["direct", "direct+cudagraphs", "aot-module"]
    steady = ["--skip-cold"] if share.steady_only else []
    arguments = ["--backends", *backends, *steady]
    return [*arguments, "--budget-s", share.budget(), "--out", str(share.report)]


def _realistic(share: Share) -> list[str]:
    if share.quick:
        return ["--device", share.device, "--quick", "--out", str(share.report)]
    # A compile that has started runs to its end (the whole Mixtral model's, tens of s).
    return ["--budget-s", share.budget(0.8), "--out", str(share.report)]


#: The realistic programs whose selections fusion reaches or leaves alone: a
#: ``masked_select`` and a ``nonzero`` past 4M elements, selections at most 4M
#: elements (left unfused at run time) and a predicate that gathers.
FUSED_PROGRAMS = (
    "active_coordinates",
    "compressed_gradient",
    "detection_candidates",
    "sort_kept",
    "edges_between_kept_nodes",
)


def _realistic_fused(share: Share) -> list[str]:
    programs = ["--programs", *FUSED_PROGRAMS, "--cases"]
    backends = ["--backends", "eager", "direct", "direct-fused"]
    if share.quick:
        return [
            "--device",
            share.device,
            "--quick",
            *programs,
            *backends,
            "--out",
            str(share.report),
        ]
    return [*programs, *backends, "--budget-s", share.budget(), "--out", str(share.report)]


def _entry_path(share: Share) -> list[str]:
    if share.quick:
        return ["--device", share.device, "--quick", "--out", str(share.report)]
    return ["--calls", "300", "--out", str(share.report)]


def _warm_start(share: Share) -> list[str]:
    if share.quick:
        return ["--device", share.device, "--quick", "--out", str(share.report)]
    arguments = ["--programs", "P1", "P3", "P5", "P6", "--repeat", "3", "--jobs", "4"]
    return [*arguments, "--budget-s", share.budget(), "--out", str(share.report)]


def _models(share: Share) -> list[str]:
    if share.quick:
        return ["--device", share.device, "--quick", "--out", str(share.report)]
    # A case that has started runs to its end: stop starting them well before the limit.
    return ["--budget", share.budget(0.6), "--out", str(share.report)]


def _stress(share: Share) -> list[str]:
    quick = ["--quick"] if share.quick else []
    return [
        "--device",
        share.device,
        *quick,
        "--budget-s",
        share.budget(0.7),
        "--out",
        str(share.report),
    ]


def _upstream_suite(share: Share) -> list[str]:
    if share.quick:
        runs = ["--device", share.device, "-k", "test_basic", "--runs", "overlay-own"]
    else:
        runs = ["--runs", "overlay-default,overlay-own", "--jobs", "2"]
    return [*runs, "--budget-s", share.budget(), "--out", str(share.report)]


def _ep_moe(share: Share) -> list[str]:
    if share.quick:
        return ["--device", share.device, "--quick", "--out", str(share.report)]
    tests_s, ranks_s = share.seconds * 0.45, share.seconds * 0.35
    return [
        *["--with-tests", "--tests-timeout", f"{tests_s:.0f}", "--timeout", f"{ranks_s:.0f}"],
        # The padded layer too (issue 41: sizes kept on the device).
        *["--capacity-factor", "1.25", "--out", str(share.report)],
    ]


def _fuzz(share: Share) -> list[str]:
    if share.quick:
        smoke = ["--device", share.device, "--programs", "3", "--workers", "1", "--seed-base", "0"]
        return [*smoke, "--out", str(share.report)]
    # New seeds each run; programs still running at the budget are dropped, not counted.
    seeds = ["--programs", "1000000", "--seed-base", str(int(time.time()))]
    return [*seeds, "--budget-s", share.budget(0.8), "--out", str(share.report)]


PARTS = {
    part.name: part
    for part in [
        Part(
            "suite",
            "The whole test suite (its full tier), as users run it, in a shuffled order",
            weight=9,
            pytest_args=("test", "--full"),
            quick_pytest_args=("test/test_compat.py", "-k", "resolves"),
            summary="gpu_suite",
            # 12: each shard of two took 264 and 311 s on an H200 with 16 cores (8: > 555 s).
            workers=12,
            missing=_missing_modules("pytest_randomly", "xdist", "expecttest"),
        ),
        Part(
            "tests",
            "The package's end-to-end tests",
            weight=4,
            pytest_args=(
                "test/inductor",
                "--ignore=test/inductor/test_fxir_caching.py",
                "--ignore=test/inductor/test_fxir_cpp_kernels.py",
                *("test/test_compat.py", "test/test_call_args.py", "test/test_logging.py"),
                *("test/test_misuse.py", "test/test_overlay.py", "test/test_user_kernel_parts.py"),
            ),
            quick_pytest_args=("test/test_compat.py", "-k", "resolves"),
        ),
        Part(
            "trust",
            "A graph runs its own kernels; first-call tuning; threads; caches",
            weight=3,
            pytest_args=(
                "test/inductor/test_fxir_kernel_identity.py",
                "test/inductor/test_fxir_tuning.py",
                "test/inductor/test_fxir_threads.py",
                "test/inductor/test_fxir_caching.py",
                "test/inductor/test_fxir_runner.py",
            ),
            quick_pytest_args=("test/inductor/test_fxir_kernel_identity.py", "-k", "forward"),
        ),
        Part(
            "cuda-graphs",
            "CUDA graphs between host syncs, split reductions, reduce-overhead",
            weight=3,
            pytest_args=(
                "test/inductor/test_fxir_cuda_graphs.py",
                "test/inductor/test_fxir_reductions.py",
                "test/corpus/test_modes.py",
                "-k",
                "cuda_graphs or CudaGraph or reduction or Reduction or reduce-overhead",
            ),
            quick_pytest_args=("test/inductor/test_fxir_reductions.py", "-k", "short_masked"),
        ),
        Part(
            "caches",
            "Inductor's caches and C++ kernels",
            weight=3,
            pytest_args=(
                "test/inductor/test_fxir_caching.py",
                "test/inductor/test_fxir_cpp_kernels.py",
            ),
            quick_pytest_args=(
                "test/inductor/test_fxir_caching.py",
                "-k",
                "uuid_names_the_backend",
            ),
        ),
        Part(
            "corpus-modes",
            "The corpus under Inductor's modes, and user Triton kernels",
            weight=4,
            pytest_args=("test/corpus/test_modes.py", "test/corpus/test_user_kernels.py"),
            quick_pytest_args=("test/corpus/test_modes.py", "-k", "reduce-overhead and nonzero_1d"),
            env={"IFX_MODES_PER_PROGRAM": "2"},
        ),
        Part(
            "upstream-suite",
            "Upstream's test_fxir_backend.py with the overlay",
            weight=5,
            module="upstream_suite",
            arguments=_upstream_suite,
            missing=_missing_upstream_suite,
        ),
        Part(
            "data-dependent",
            "Data-dependent programs: FX backend vs Inductor's Python wrapper",
            weight=9,
            module="data_dependent",
            arguments=_data_dependent,
        ),
        Part(
            "realistic",
            "What users run: data-dependent programs and real-library code at their sizes",
            weight=8,
            module="realistic",
            arguments=_realistic,
        ),
        Part(
            "fused-tests",
            "Fused selections' tests (both ways: one pass and two)",
            weight=1.5,
            pytest_args=("test/inductor/test_fxir_fused_selections.py",),
            quick_pytest_args=(
                "test/inductor/test_fxir_fused_selections.py",
                "-k",
                "does_not_fuse",
            ),
        ),
        Part(
            "realistic-fused",
            "The realistic programs that select, with fused selections against without",
            weight=3,
            module="realistic",
            arguments=_realistic_fused,
        ),
        Part(
            "entry-path",
            "torch.compile's entry path against the direct call, profiled",
            weight=1.5,
            module="entry_path",
            arguments=_entry_path,
        ),
        Part(
            "warm-start",
            "Warm starts from Inductor's caches",
            weight=5,
            module="warm_start",
            arguments=_warm_start,
        ),
        Part(
            "models",
            "The model sweep",
            weight=12,
            module="models",
            arguments=_models,
            missing=_missing_modules("transformers", "torchvision", "torch_geometric"),
        ),
        Part("stress", "The corpus in one process", weight=3, module="stress", arguments=_stress),
        Part(
            "fuzz",
            "Differential fuzzer: generated data-dependent programs against eager",
            weight=9,
            module="fuzz",
            arguments=_fuzz,
        ),
        Part(
            "ep-moe",
            "Expert-parallel MoE on two ranks",
            weight=4,
            module="ep_moe",
            arguments=_ep_moe,
            gpus=2,
        ),
    ]
}


@dataclasses.dataclass
class Outcome:
    part: Part
    report: Path
    status: str
    ok: bool


class Session:
    """The parts of one run, their shares of the time left, and their reports."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.device: str = args.device
        self.quick: bool = args.quick
        self.steady_only: bool = args.steady_only
        self.pytest_workers: int | None = args.pytest_workers
        self.seed: int = args.seed
        self.shard: str | None = args.shard
        self.out = Path(args.out)
        self.deadline = time.monotonic() + args.budget_s - MARGIN_S
        self.stopping = threading.Event()
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()

    def run_lane(self, parts: Sequence[Part], gpus: str | None, weight_after: float = 0.0) -> None:
        """Run ``parts`` one after the other; each gets its weight's share of the time
        left, counting ``weight_after`` for what runs after this lane."""
        for i, part in enumerate(parts):
            left = self.deadline - time.monotonic()
            weights = sum(p.weight for p in parts[i:]) + weight_after
            outcome = self.run_part(part, left * part.weight / weights, gpus)
            with self._lock:
                self.outcomes.append(outcome)
            print(f"{part.name}: {outcome.status} ({outcome.report})", flush=True)

    def run_part(self, part: Part, seconds: float, gpus: str | None) -> Outcome:
        sharded = part.summary is not None and self.shard is not None
        name = part.name
        if part.summary is not None:  # a shuffled test part: its seed and shard name it
            name += f"-seed{self.seed}"
        if sharded:
            name += f"-{self.shard.replace('/', 'of')}"
        report = harness.result_path(self.out, self.device, name)
        share = Share(
            self.device,
            self.quick,
            seconds,
            report,
            self.out / "logs" / f"{name}.log",
            self.steady_only,
        )
        why_not = self._why_not(part, seconds)
        if why_not:
            self._report(part, share).add(f"Not run: {why_not}.")
            return Outcome(part, report, f"not run: {why_not}", ok=True)
        env = self._child_env(part, gpus)
        if part.module is None:
            body = self._report(part, share)
            body.add(
                f"Running since {time.strftime('%H:%M:%S')}; if this line stays, the run was "
                f"stopped before it ended (its output so far: `{share.log}`)."
            )
            arguments = list(part.quick_pytest_args if self.quick else part.pytest_args)
            # Shuffled with the session's seed where the part asks; else in file order.
            shuffle = ["-p", "randomly", f"--randomly-seed={self.seed}"]
            arguments += shuffle if part.summary else ["-p", "no:randomly"]
            if sharded:
                arguments += ["--shard", self.shard]
            result = harness.run_pytest(
                arguments,
                timeout=seconds,
                env=env,
                log=share.log,
                workers=self.pytest_workers or part.workers,
            )
            lines = harness.pytest_lines(result)
            if part.summary:
                lines += ["", *self._summary_lines(part.summary, result)]
            body.replace(lines)
        else:
            result = harness.run_child(
                part.command(share), fresh_caches=True, timeout=seconds, env=env, log=share.log
            )
            self._close_benchmark_report(part, share, result)
        ok = result.returncode == 0 and not result.timed_out and not self.stopping.is_set()
        return Outcome(part, report, result.status, ok)

    def _summary_lines(self, prefix: str, result: harness.ChildResult) -> list[str]:
        counts = harness.pytest_counts(result.output)
        complete = result.returncode in (0, 1) and not result.timed_out
        return [
            f"{prefix}_passed: {counts.get('passed', 0)}",
            f"{prefix}_failed: {counts.get('failed', 0)}",
            f"{prefix}_errors: {counts.get('errors', 0)}",
            f"{prefix}_skipped: {counts.get('skipped', 0)}",
            f"{prefix}_xfailed: {counts.get('xfailed', 0)}",
            f"{prefix}_seed: {self.seed}",
            f"{prefix}_shard: {self.shard or '1/1'}",
            f"{prefix}_complete: {str(complete).lower()}",
        ]

    def _why_not(self, part: Part, seconds: float) -> str | None:
        if self.stopping.is_set():
            return "the run was stopped"
        if seconds < MIN_SHARE_S:
            return f"the budget was spent ({seconds:.0f} s left for it)"
        if self.device == "cuda":
            import torch

            if torch.cuda.device_count() < part.gpus:
                return f"needs {part.gpus} GPUs, {torch.cuda.device_count()} visible"
        return part.missing()

    def _child_env(self, part: Part, gpus: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.endswith("FORCE_DISABLE_CACHES")}
        env.update(part.env, PYTHONUNBUFFERED="1")
        # NVLink multicast stays off for NCCL on these machines.
        env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus
        return env

    def _report(self, part: Part, share: Share) -> harness.Report:
        header = harness.environment_lines(
            self.device,
            f"- Part `{part.name}` of `python -m benchmarks.gpu`, with a time share of "
            f"{share.seconds:.0f} s" + ("; smoke run (`--quick`)" if self.quick else "") + ".",
        )
        if part.module is None:
            header.append("- Inductor's caches on, as users run the tests; fresh cache dirs.")
        return harness.Report(share.report, part.title, header)

    def _close_benchmark_report(
        self, part: Part, share: Share, result: harness.ChildResult
    ) -> None:
        """Say how the benchmark's child ended, below what it wrote itself."""
        lines = ["", "## How the run ended", "", f"`{part.module}`: {result.status}."]
        if result.returncode or result.timed_out:
            lines += ["", "The end of its output:", "", "```", *result.tail(), "```"]
        if share.report.exists():
            with open(share.report, "a") as f:
                f.write("\n".join(lines) + "\n")
        else:
            self._report(part, share).add(*lines[2:])


def lanes_for(parts: Sequence[Part], lanes: int) -> list[list[Part]]:
    """The one-GPU parts spread over ``lanes``, heaviest first onto the lightest lane;
    each lane runs its parts in the order given."""
    spread: list[list[Part]] = [[] for _ in range(lanes)]
    for part in sorted(parts, key=lambda p: -p.weight):
        min(spread, key=lambda lane: sum(p.weight for p in lane)).append(part)
    return [sorted(lane, key=list(parts).index) for lane in spread if lane]


def visible_gpus(device: str) -> list[str]:
    if device != "cuda":
        return []
    import torch

    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = listed.split(",") if listed else [str(i) for i in range(torch.cuda.device_count())]
    return names[: torch.cuda.device_count()]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="parts (weight):\n" + "\n".join(describe(p) for p in PARTS.values()),
    )
    parser.add_argument(
        "--parts", default="all", help="comma-separated parts (default: all); see below"
    )
    parser.add_argument("--budget-s", type=float, default=520.0, help="seconds for all parts")
    parser.add_argument("--out", default=None, help="folder for the reports (required)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None)
    parser.add_argument("--quick", action="store_true", help="each part's smoke version")
    parser.add_argument(
        "--lanes", type=int, default=None, help="parts side by side (default: GPUs)"
    )
    parser.add_argument("--list", action="store_true", help="list the parts and exit")
    parser.add_argument(
        "--steady-only", action="store_true", help="benchmarks skip their cold compiles"
    )
    parser.add_argument(
        "--pytest-workers", type=int, default=None, help="pytest-xdist workers per test part"
    )
    parser.add_argument(
        "--install-wheels", default=None, metavar="DIR", help="pip-install DIR/*.whl first"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the shuffled test order's seed (pytest-randomly; default: a random one)",
    )
    parser.add_argument(
        "--shard",
        default=None,
        metavar="K/N",
        help="the shuffled test parts run the K-th of N disjoint parts of their tests "
        "(test/conftest.py), for a suite longer than one call",
    )
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(describe(p) for p in PARTS.values()))
        sys.exit(0)
    names = list(PARTS) if args.parts == "all" else [n.strip() for n in args.parts.split(",")]
    unknown = [name for name in names if name not in PARTS]
    if unknown:
        parser.error(f"unknown parts {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    args.parts = [PARTS[name] for name in dict.fromkeys(names)]
    if args.out is None:
        parser.error("--out is required: the folder for the reports")
    if args.budget_s <= MARGIN_S + MIN_SHARE_S:
        parser.error(f"--budget-s must be more than {MARGIN_S + MIN_SHARE_S:.0f}")
    if args.lanes is not None and args.lanes < 1:
        parser.error("--lanes must be at least 1")
    if args.seed is None:
        args.seed = random.randrange(1 << 31)
    if args.shard is not None:
        k, _, n = args.shard.partition("/")
        if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
            parser.error(f"--shard takes K/N with 1 <= K <= N, not {args.shard!r}")
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return args


def describe(part: Part) -> str:
    return f"  {part.name:15} ({part.weight:g}) {part.title}"


def install_wheels(folder: str) -> None:
    """pip-install every wheel in ``folder`` into this environment, offline."""
    import importlib

    wheels = sorted(str(path) for path in Path(folder).glob("*.whl"))
    if not wheels:
        raise SystemExit(f"--install-wheels {folder}: no wheel there")
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", *wheels]
    done = harness.run_child(command, fresh_caches=False, timeout=300)
    if done.returncode:
        raise SystemExit(f"installing {', '.join(wheels)} failed:\n{done.output}")
    importlib.invalidate_caches()  # the parts' checks look for the modules installed now


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if args.install_wheels:
        install_wheels(args.install_wheels)
    session = Session(args)

    def stop(signum: int, frame: object) -> None:
        session.stopping.set()
        harness.stop_children()

    signal.signal(signal.SIGTERM, stop)
    gpus = visible_gpus(args.device)
    wide = [part for part in args.parts if part.gpus > 1]
    narrow = [part for part in args.parts if part.gpus == 1]
    lanes = lanes_for(narrow, min(args.lanes or len(gpus) or 1, max(len(gpus), 1)))
    # The parts that need several GPUs first, on all of them; then the lanes side by side.
    per_lane = max((sum(p.weight for p in lane) for lane in lanes), default=0.0)
    session.run_lane(wide, None, weight_after=per_lane)
    threads = [
        threading.Thread(target=session.run_lane, args=(lane, gpus[i] if len(lanes) > 1 else None))
        for i, lane in enumerate(lanes)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [o.part.name for o in session.outcomes if not o.ok]
    print(f"{len(session.outcomes)} parts; failed or stopped: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
