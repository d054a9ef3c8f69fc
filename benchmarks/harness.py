"""What every benchmark and GPU run shares.

- :func:`environment_lines`: the header of every report (date, device, torch,
  Triton and Python versions, the package measured and its commit, the command).
- :func:`run_child`: a child process with fresh Inductor and Triton cache dirs,
  stopped with its whole process group at its time limit, its output on disk as
  it comes.
- :class:`Report`: a markdown report written to disk at every step, so that a run
  stopped by its time limit keeps what it measured.
- :func:`run_pytest` and :func:`pytest_lines`: a test run as a report section.
- :func:`interleaved_times`: calls of several backends timed in turn, the order
  rotating every sample, each call between two device synchronisations.

Scripts run as modules from the repository root (``python -m benchmarks.<name>``)
and import the package as installed, or from the checkout on ``PYTHONPATH``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import itertools
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: The repository root: children run from here, so that ``-m benchmarks.<name>`` resolves.
ROOT = Path(__file__).resolve().parents[1]


def chosen_device(requested: str | None) -> str:
    """``requested``, or ``cuda`` where there is one, else ``cpu``; on ``cpu``, Triton's
    interpreter (set before anything imports Triton's kernels)."""
    import torch

    device = requested or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return device


def device_name(device: str) -> str:
    """The GPU's name (with how many are visible), or the CPU's."""
    import torch

    if device == "cuda" and torch.cuda.is_available():
        count = torch.cuda.device_count()
        return torch.cuda.get_device_name(0) + (f" (x{count})" if count > 1 else "")
    return f"CPU ({platform.processor() or platform.machine()}), no GPU"


def device_tag(device: str) -> str:
    """A short name of the device for result files: the GPU's model (``h200``), or ``cpu``."""
    import torch

    if device != "cuda" or not torch.cuda.is_available():
        return "cpu"
    return gpu_tag(torch.cuda.get_device_name(0))


def gpu_tag(name: str) -> str:
    """The model in a GPU's name: its first word with a digit (``NVIDIA H200``: ``h200``)."""
    words = re.findall(r"[A-Za-z0-9]+", name)
    return next((word.lower() for word in words if re.search(r"\d", word)), "gpu")


def result_path(directory: str | Path, device: str, part: str) -> Path:
    """Where a run's report goes: ``DIR/YYYY-MM-DD-<device tag>-<part>.md``."""
    return Path(directory) / f"{datetime.date.today().isoformat()}-{device_tag(device)}-{part}.md"


def commit() -> str:
    """The checkout's commit (``-dirty`` with uncommitted changes), or why there is none.

    ``IFX_COMMIT`` names it instead, for a copy of the tree whose git metadata is
    not the tree's own (a working tree sent to a GPU machine with an older ``.git``)."""
    named = os.environ.get("IFX_COMMIT")
    if named:
        return f"{named} (as IFX_COMMIT names it)"
    try:
        head = _git("rev-parse", "--short", "HEAD")
        if head.returncode:
            return "unknown (not a git checkout)"
        changed = _git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (git did not answer)"
    return head.stdout.strip() + ("-dirty" if changed else "")


def _git(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *arguments], cwd=ROOT, capture_output=True, text=True, timeout=20)


def command_line() -> str:
    """This process's command as it was typed (``python -m benchmarks.<name> ...``)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    program = ["-m", spec.name] if spec is not None else [sys.argv[0]]
    return " ".join(["python", *program, *sys.argv[1:]])


def versions_lines(device: str) -> list[str]:
    """Where and with what a run ran: the device, the versions, the package measured."""
    import torch

    import inductor_fx_unbacked as ifx

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    return [
        f"- Device: {device_name(device)}.",
        f"- torch {torch.__version__}, Triton {triton_version}, "
        f"Python {platform.python_version()}.",
        f"- inductor-fx-unbacked from `{Path(ifx.__file__).parent}`, commit {commit()}.",
    ]


def environment_lines(device: str, *extra: str) -> list[str]:
    """The header of a report: when, where, with what, and how it ran."""
    return [
        f"- Date: {datetime.datetime.now():%Y-%m-%d %H:%M}.",
        *versions_lines(device),
        f"- Command: `{command_line()}`.",
        *extra,
    ]


class Report:
    """A markdown report on disk, written at every step.

    The title and the header are written when the report is made; ``add``
    appends lines and ``replace`` rewrites everything below the header, each
    time to disk (replacing the file whole), so that a run stopped by its time
    limit keeps what it measured. Without a path it only keeps the text.
    """

    def __init__(self, path: str | Path | None, title: str, header: Sequence[str]) -> None:
        self.path = Path(path) if path else None
        self.head = [f"# {title}", "", *header]
        self.body: list[str] = []
        self._write()

    @property
    def text(self) -> str:
        body = list(itertools.dropwhile(lambda line: not line, self.body))
        return "\n".join([*self.head, "", *body]).rstrip("\n") + "\n"

    def add(self, *lines: str) -> None:
        self.body.extend(lines)
        self._write()

    def replace(self, lines: Iterable[str]) -> None:
        self.body = list(lines)
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_text(self.text)
        os.replace(partial, self.path)


@dataclasses.dataclass
class ChildResult:
    """How a child process ended, and everything it printed."""

    command: list[str]
    returncode: int
    output: str
    seconds: float
    timed_out: bool

    @property
    def status(self) -> str:
        if self.timed_out:
            return f"stopped at its time limit after {self.seconds:.0f} s"
        return f"exit status {self.returncode} after {self.seconds:.0f} s"

    def tail(self, lines: int = 40) -> list[str]:
        return self.output.splitlines()[-lines:]


#: The children running now, so that a stopped parent can stop them too.
_running: set[subprocess.Popen] = set()


def error_line(error: BaseException, width: int = 140) -> str:
    """An error in one line for a report: its type, and the first ``width``
    characters of its message's first line."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:width] if lines else ''}"


def run_child(
    command: Sequence[str],
    *,
    fresh_caches: bool = True,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path = ROOT,
    log: str | Path | None = None,
) -> ChildResult:
    """Run ``command`` to its end or to ``timeout`` seconds and return what it printed.

    ``fresh_caches`` gives the child empty ``TORCHINDUCTOR_CACHE_DIR`` and
    ``TRITON_CACHE_DIR`` (removed afterwards), as on a cold start. Its output
    (stdout and stderr) goes to ``log`` as it comes, so that it survives this
    process being killed. At the time limit its whole process group is stopped
    (a pytest run's or a benchmark's own children too).
    """
    child_env = dict(os.environ if env is None else env)
    with contextlib.ExitStack() as stack:
        if fresh_caches:
            caches = stack.enter_context(tempfile.TemporaryDirectory(prefix="benchmark-caches-"))
            child_env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(caches, "inductor")
            child_env["TRITON_CACHE_DIR"] = os.path.join(caches, "triton")
        if log is None:
            out = stack.enter_context(tempfile.TemporaryFile("w+"))
        else:
            Path(log).parent.mkdir(parents=True, exist_ok=True)
            out = stack.enter_context(open(log, "w+"))
        started = time.monotonic()
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        _running.add(process)
        timed_out = False
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _stop(process)
            _running.discard(process)
        seconds = time.monotonic() - started
        out.seek(0)
        output = out.read()
    return ChildResult(list(command), process.returncode, output, seconds, timed_out)


def stop_children() -> None:
    """Stop every child that :func:`run_child` is waiting for (on a signal to this process)."""
    for process in list(_running):
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """Stop the child's process group: SIGTERM, then SIGKILL after 10 s."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=grace)
            # The leader is gone; its group may not be.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue


def run_pytest(
    tests: Sequence[str],
    *,
    keyword: str | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    log: str | Path | None = None,
    workers: int | None = None,
) -> ChildResult:
    """pytest on ``tests`` with Inductor's caches as the environment has them (on, as
    users run them, unless it forces them off), each test's outcome on its own line;
    with ``workers``, that many pytest-xdist workers."""
    command = [sys.executable, "-m", "pytest", "-v", "-rfEs", "-p", "no:cacheprovider"]
    command += [*(["-n", str(workers)] if workers else []), *tests]
    command += ["-k", keyword] if keyword else []
    return run_child(command, fresh_caches=True, timeout=timeout, env=env, log=log)


#: pytest's outcome words, as ``-v`` prints them after each test.
_OUTCOMES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")


def pytest_summary(output: str) -> str:
    """pytest's closing counts (``12 passed, 1 skipped``); for a run stopped before it
    closed, the outcomes it printed so far."""
    closing = re.findall(
        r"^=+ (.*?\d+ (?:passed|failed|error|skipped).*?) in [\d.]+s", output, re.M
    )
    if closing:
        return closing[-1]
    outcomes = re.findall(rf"::\S+ ({'|'.join(_OUTCOMES)})\b", output)
    counts = {outcome: outcomes.count(outcome) for outcome in dict.fromkeys(outcomes)}
    so_far = ", ".join(f"{n} {outcome.lower()}" for outcome, n in counts.items())
    return f"{so_far or 'no test finished'} (so far)"


def pytest_counts(output: str) -> dict[str, int]:
    """The count of each outcome (``passed``, ``failed``, ``errors``, ``skipped``,
    ``xfailed``, ``xpassed``, ``deselected``) in pytest's closing line; for a run stopped
    before it closed, of the outcomes printed so far (``-v``, with or without xdist)."""
    closing = re.findall(r"^=+ (.*?\d+ (?:passed|failed|error).*?) in [\d.]+s", output, re.M)
    if closing:
        found = re.findall(r"(\d+) (\w+)", closing[-1])
        counts = {word: int(n) for n, word in found}
        counts["errors"] = counts.pop("error", 0) + counts.get("errors", 0)
        return counts
    words = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped"}
    words.update(XFAIL="xfailed", XPASS="xpassed")
    printed = re.findall(rf"(?:::\S+ |\] )({'|'.join(_OUTCOMES)})\b", output)
    return {word: printed.count(outcome) for outcome, word in words.items()}


def pytest_lines(result: ChildResult) -> list[str]:
    """A test run as report lines: its counts and status, its failures, errors and
    skips, and the end of its output."""
    listed = [line for line in result.output.splitlines() if line.startswith(_OUTCOMES)]
    lines = [
        f"Result: **{pytest_summary(result.output)}** ({result.status}).",
        "",
        f"Command: `{shlex.join(['python', *result.command[1:]])}`",
    ]
    if listed:
        lines += ["", "Failures, errors and skips:", "", "```", *listed, "```"]
    if result.returncode or result.timed_out:
        lines += ["", "The end of the output:", "", "```", *result.tail(), "```"]
    return lines


def last_json(result: ChildResult) -> dict[str, Any]:
    """The last JSON object the child printed on a line of its own; else ``ok: False``
    and why (its time limit, or its last line)."""
    for line in reversed(result.output.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    last = result.status if result.timed_out else (result.tail(1) or ["no output"])[0]
    return {"ok": False, "error": last[:160]}


def interleaved_times(
    calls: Mapping[str, Callable[[], object]],
    synchronize: Callable[[], None],
    *,
    min_samples: int,
    max_samples: int,
    seconds: float,
    settled: Callable[[dict[str, list[float]]], bool] = lambda times: False,
) -> dict[str, list[float]]:
    """Seconds of each of ``calls``, sampled interleaved: a sample is one call of each,
    in an order that rotates every sample, each call between two device
    synchronisations, so that a call's time holds its own kernels and no other's and
    a drift of the machine reaches every backend alike (paired ratios, sample by sample).

    Sampling stops at ``max_samples``; from ``min_samples`` on it is checked at each
    1.5-fold count of samples, and stops there once ``seconds`` have passed or
    ``settled(times)`` (the intervals are narrow enough).
    """
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    until = time.perf_counter() + seconds
    samples, next_check = 0, min_samples
    while samples < max_samples:
        for name in order:
            synchronize()
            start = time.perf_counter()
            calls[name]()
            synchronize()
            times[name].append(time.perf_counter() - start)
        order = order[1:] + order[:1]
        samples += 1
        if samples >= next_check:
            next_check = int(samples * 1.5)
            if time.perf_counter() > until or settled(times):
                break
    return times
