"""Run generated programs (``fuzz_programs.py``) eager and compiled, and judge them.

Each program runs eager on every input, then in each of :data:`MODES`: through
``torch.compile(backend="inductor")`` inside ``ifx.fx_backend(device,
sync_free=True)`` and ``sync_free=False``, and through ``ifx.compile`` (compiled on
the first input, called on all), with ``dynamic`` False and True; where the last is
refused for a graph break, once more with ``fullgraph=False`` (``direct-breaks``:
the graphs and Dynamo's glue between them). A mode's outcome is one of:

- ``ok``: every result equals eager's (:func:`compare`: shapes and dtypes exact,
  values within ``torch.testing.assert_close``'s tolerance for the dtype, four times
  looser after a reduction or a scan, NaN equal to NaN);
- ``refused``: a clear refusal (:func:`is_refusal`): ``ifx.CompileError`` other than
  the self-check's "differs from eager's", Dynamo's ``Unsupported``/``UserError``
  about a data-dependent guard or control flow, or (CPU mode only) a kernel that
  calls a ``libdevice`` function that the CPU mode does not compute
  (``InterpreterUnsupportedError``);
- ``mismatch``: a result differs from eager's (the self-check's refusal included);
- ``crash``: any other exception, or the worker process dying or hanging
  (a segfault, an illegal memory access, a time limit).

Programs run in worker processes (:class:`Pool`): each worker compiles many
programs, reports each one as a JSON line, and is replaced when it dies, so that a
hard crash costs one program, not the run. ``python fuzz_runner.py --seed N``
runs one program in this process and prints its source and outcome.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import faulthandler
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from fuzz_programs import generate

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODES = ("compile-sync-free", "compile-sync", "direct", "direct-dynamic", "direct-breaks")
#: How ``ifx.compile`` refuses a program Dynamo cannot make one graph of, where
#: ``fullgraph=False`` takes it (``direct-breaks`` runs only after that refusal).
GRAPH_BREAK = "_GraphBreak: "
#: Marks the worker's result lines among whatever else reaches its stdout.
RESULT = "FUZZ-RESULT "
#: Starts the worker's stderr line that names the mode it runs.
MODE_LINE = "fuzz worker: mode "
#: Words of an error that leaves a CUDA context unusable: the worker exits after it.
FATAL_DEVICE_ERRORS = (
    "illegal memory access",
    "device-side assert",
    "CUDA error",
    "unspecified launch",
)


def is_half(dtype) -> bool:
    """Whether ``dtype`` is a half-precision float, which Inductor computes in float32."""
    import torch

    return dtype in (torch.float16, torch.bfloat16)


def tolerance(dtype, reduces: bool, computed_in=None) -> dict:
    """``assert_close``'s tolerances for ``dtype`` (exact for integers and bool), or for
    ``computed_in`` where that is looser (eager rounds every intermediate to the
    inputs' float dtype, Inductor keeps them in float32); four times looser after a
    reduction or a scan, where the summation order may differ."""
    import torch

    if not dtype.is_floating_point:
        return {"rtol": 0, "atol": 0}
    defaults = {
        torch.float16: (1e-3, 1e-5),
        torch.bfloat16: (1.6e-2, 1e-5),
        torch.float32: (1.3e-6, 1e-5),
    }
    rtol, atol = defaults.get(dtype, (1e-7, 1e-7))
    if computed_in is not None and computed_in in defaults:
        rtol, atol = max(rtol, defaults[computed_in][0]), max(atol, defaults[computed_in][1])
    if is_half(dtype) or is_half(computed_in):
        # Low precision: a difference of values of order 1 that cancel (log_softmax near
        # 0) is one rounding of the operands, not of the result.
        atol = max(atol, rtol)
    scale = 4 if reduces else 1
    return {"rtol": rtol * scale, "atol": atol * scale}


def lowest_precision(values) -> object:
    """The float dtype of ``values`` (tensors, modules) with the loosest tolerance, or ``None``."""
    import torch

    order = (torch.bfloat16, torch.float16, torch.float32)
    dtypes = set()
    for value in values:
        if isinstance(value, torch.nn.Module):
            dtypes.update(p.dtype for p in value.parameters())
        elif isinstance(value, torch.Tensor):
            dtypes.add(value.dtype)
    return next((dtype for dtype in order if dtype in dtypes), None)


def in_float32(value):
    """``value`` with its half-precision floats in float32: a tensor converted, a
    module copied and converted; anything else as it is."""
    import torch

    if isinstance(value, torch.Tensor) and is_half(value.dtype):
        return value.float()
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value).float()
    return value


def reference_in_float(fn, cases, expected) -> list | None:
    """Eager's results with half-precision inputs computed in float32 and rounded to
    eager's dtypes, as Inductor computes them (upstream's tests compare half precision
    with such a reference, ``reference_in_float``); ``None`` where eager cannot run so.

    An ill-conditioned chain (``log(log(sqrt(x)))`` near 1) differs by more than the
    dtype's tolerance between eager, which rounds every intermediate, and any kernel
    that keeps them in float32. A result is wrong only where it differs from both."""
    import torch
    from torch.utils import _pytree as pytree

    def rounded_like(value, like):
        if isinstance(value, torch.Tensor) and isinstance(like, torch.Tensor):
            return value.to(like.dtype)
        return value

    try:
        fn32 = in_float32(fn)
        results = [fn32(*(in_float32(t) for t in case)) for case in cases]
        return [
            pytree.tree_map(rounded_like, result, want) for result, want in zip(results, expected)
        ]
    except Exception:  # another structure, or an op without float32: eager's alone
        return None


def compare(expected, actual, reduces: bool, computed_in=None) -> str | None:
    """Why ``actual`` differs from eager's ``expected`` (structure, shape, dtype,
    values), or ``None``."""
    import torch
    from torch.utils import _pytree as pytree

    flat_expected, spec_expected = pytree.tree_flatten(expected)
    flat_actual, spec_actual = pytree.tree_flatten(actual)
    if spec_expected != spec_actual:
        return f"structure {spec_actual} where eager returns {spec_expected}"
    for index, (e, a) in enumerate(zip(flat_expected, flat_actual)):
        if not isinstance(e, torch.Tensor):
            if e != a:
                return f"output {index}: {a!r} where eager returns {e!r}"
            continue
        if not isinstance(a, torch.Tensor):
            return f"output {index}: {type(a).__name__} where eager returns a tensor"
        a, e = a.detach().cpu(), e.detach().cpu()
        try:
            torch.testing.assert_close(
                a, e, equal_nan=True, **tolerance(e.dtype, reduces, computed_in)
            )
        except AssertionError as error:
            summary = " ".join(str(error).split())[:300]
            shown = f"{a.flatten()[:8].tolist()} where eager has {e.flatten()[:8].tolist()}"
            return f"output {index}: {summary}; {shown}"
    return None


#: The direct call's message where Inductor failed, before the error it names.
INDUCTOR_FAILED = "Inductor cannot compile this program: "
#: What the direct call's self-check says where the artifact computed otherwise.
SELF_CHECK_FAILED = "differs from eager"
#: Errors that no program eager runs should meet inside Inductor or the package: a
#: direct call refused with one of them is a crash, as the same error is through
#: ``torch.compile``.
INTERNAL_ERRORS = (
    "AttributeError",
    "AssertionError",
    "IndexError",
    "KeyError",
    "NameError",
    "TypeError",
    "UnboundLocalError",
    "ZeroDivisionError",
)


def is_refusal(error: BaseException) -> bool:
    """A clear refusal: the package's ``CompileError`` (not its self-check finding a
    different result, nor an internal error of Inductor's that it passes on), or
    Dynamo refusing data-dependent Python control flow."""
    import torch._dynamo.exc as dynamo_exc

    import inductor_fx_unbacked as ifx

    text = str(error)
    # CPU mode: a kernel calls a libdevice function the CPU mode does not compute.
    if "InterpreterUnsupportedError" in text:
        return True
    if isinstance(error, ifx.CompileError):
        if SELF_CHECK_FAILED in text:
            return False
        _, failed, cause = text.partition(INDUCTOR_FAILED)
        return not (failed and cause.startswith(tuple(f"{e}:" for e in INTERNAL_ERRORS)))
    if isinstance(error, (dynamo_exc.Unsupported, dynamo_exc.UserError)):
        text = text.lower()
        return "data-dependent" in text or "data dependent" in text
    return False


def _on(device: str, value):
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, torch.nn.Module):
        return value.to(device)
    return value


def _outcome(kind: str, message: str = "") -> dict:
    return {"outcome": kind, "message": message[:2000]}


def run_program(program, device: str) -> dict:
    """Run ``program`` eager and in every mode; a JSON-ready record of what happened."""
    import torch

    import inductor_fx_unbacked as ifx

    started = time.monotonic()
    record = {
        "seed": program.seed,
        "family": program.family,
        "digest": program.digest,
        "sizes": list(program.sizes),
        "modes": {},
    }
    namespace = program.namespace()
    fn = _on(device, namespace["program"])
    cases = [tuple(_on(device, t) for t in case) for case in namespace["INPUTS"]]
    try:
        expected = [fn(*case) for case in cases]
    except Exception as error:  # the generator's fault: the program is not counted
        record["eager_error"] = f"{type(error).__name__}: {error}"[:500]
        return record

    def compiled_with(sync_free: bool):
        torch._dynamo.reset()
        with ifx.fx_backend(device, sync_free=sync_free):
            compiled = torch.compile(fn, backend="inductor")
            return [compiled(*case) for case in cases]

    def direct(dynamic: bool = False, fullgraph: bool = True):
        torch._dynamo.reset()
        artifact = ifx.compile(fn, *cases[0], dynamic=dynamic, fullgraph=fullgraph)
        return [artifact(*case) for case in cases]

    computed_in = lowest_precision([fn, *cases[0]])
    half = is_half(computed_in)
    in_float = reference_in_float(fn, cases, expected) if half else None
    runs = {
        "compile-sync-free": lambda: compiled_with(True),
        "compile-sync": lambda: compiled_with(False),
        "direct": direct,
        "direct-dynamic": lambda: direct(dynamic=True),
        "direct-breaks": lambda: direct(dynamic=True, fullgraph=False),
    }
    for mode in MODES:
        if mode == "direct-breaks" and not record["modes"].get("direct-dynamic", {}).get(
            "message", ""
        ).startswith(GRAPH_BREAK):
            continue
        print(f"{MODE_LINE}{mode}", file=sys.stderr, flush=True)  # names the mode of a hard crash
        mode_started = time.monotonic()
        try:
            results = runs[mode]()
            if device == "cuda":  # a fault of this mode's kernels shows in this mode
                torch.cuda.synchronize()
        except Exception as error:
            text = f"{type(error).__name__}: {error}"
            if is_refusal(error):
                record["modes"][mode] = _outcome("refused", text)
            elif isinstance(error, ifx.CompileError) and SELF_CHECK_FAILED in text:
                record["modes"][mode] = _outcome("mismatch", text)
            else:
                record["modes"][mode] = _outcome(
                    "crash", text + "\n" + traceback.format_exc()[-3000:]
                )
                if any(words in text for words in FATAL_DEVICE_ERRORS):
                    record["worker_exits"] = True
                    break
            continue
        record.setdefault("mode_seconds", {})[mode] = round(time.monotonic() - mode_started, 2)
        for index, (want, got) in enumerate(zip(expected, results)):
            why = compare(want, got, program.reduces, computed_in)
            if why is not None and in_float is not None:
                # Inductor computes half-precision chains in float32 and rounds once.
                if compare(in_float[index], got, program.reduces, computed_in) is None:
                    why = None
                else:
                    why += " (and differs from eager in float32 too)"
            if why is not None:
                record["modes"][mode] = _outcome("mismatch", f"input {index}: {why}")
                break
        else:
            record["modes"][mode] = _outcome("ok")
    torch._dynamo.reset()
    record["seconds"] = round(time.monotonic() - started, 2)
    return record


def verdict(record: dict) -> str:
    """The worst mode's outcome (``crash``, ``mismatch``, ``refused``, ``ok``), or
    ``skipped`` where eager raised."""
    if "eager_error" in record:
        return "skipped"
    outcomes = [mode["outcome"] for mode in record["modes"].values()]
    for kind in ("crash", "mismatch", "refused"):
        if kind in outcomes:
            return kind
    return "ok"


def repro_text(record: dict, source: str) -> str:
    """A failure as a standalone script: the program, its inputs, and what each mode did."""
    lines = [f"# seed {record['seed']} ({record['family']}), selection sizes {record['sizes']}:"]
    for mode, outcome in record["modes"].items():
        first = outcome["message"].splitlines()[0][:300] if outcome["message"] else ""
        lines.append(f"#   {mode}: {outcome['outcome']} {first}".rstrip())
    lines.append(f"# Rerun: python test/fuzz/fuzz_runner.py --seed {record['seed']}")
    alone = record.get("alone")
    if alone is not None:
        lines.append(f"# In a fresh process: {alone}")
        if alone == "ok" and record.get("after"):
            after = record["after"]
            lines.append(
                f"# Its worker ran {len(after)} programs before it; replay them first: "
                f"python test/fuzz/fuzz_runner.py --seed {record['seed']} --after "
                + " ".join(map(str, after))
            )
    return "\n".join(lines) + "\n" + source


#: What a standalone repro runs after the program's source: eager, then one mode.
STANDALONE_MAIN = """

if __name__ == "__main__":
    import os, sys, warnings
    device = sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu")
    mode = sys.argv[2] if len(sys.argv) > 2 else MODE
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import inductor_fx_unbacked as ifx
    warnings.simplefilter("ignore")
    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    fn = program.to(device) if isinstance(program, torch.nn.Module) else program
    cases = [tuple(t.to(device) for t in case) for case in INPUTS]
    expected = [fn(*case) for case in cases]
    if mode.startswith("direct"):
        artifact = ifx.compile(
            fn, *cases[0], dynamic=mode != "direct", fullgraph=mode != "direct-breaks"
        )
        actual = [artifact(*case) for case in cases]
    else:
        with ifx.fx_backend(device, sync_free=mode == "compile-sync-free"):
            compiled = torch.compile(fn, backend="inductor")
            actual = [compiled(*case) for case in cases]
    for index, (want, got) in enumerate(zip(expected, actual)):
        print(f"input {index}: eager {want}, {mode} {got}")
        torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-4)
    print("same as eager")
"""


def standalone(source: str, mode: str, comment: str) -> str:
    """A failure as a script that runs alone from the repository root (``PYTHONPATH=.``):
    ``comment`` on top, the program, then eager and ``mode`` (``python FILE [device] [mode]``)."""
    top = "".join(f"# {line}".rstrip() + "\n" for line in comment.strip().splitlines())
    return top + source + f"\nMODE = {mode!r}\n" + STANDALONE_MAIN


# -- worker processes -----------------------------------------------------------------


def use_runner_kernels() -> None:
    """The runner's own kernels where the tests run them: its compactions in Triton's
    interpreter too (``compaction.INTERPRETED``), and the fused selections, off by
    default (``fused_selections.ENABLED``), at every size (the fuzzer's are below
    ``fused_selections.SMALLEST``)."""
    from inductor_fx_unbacked.runner import compaction, fused_selections

    compaction.INTERPRETED = True
    fused_selections.ENABLED = True
    fused_selections.SMALLEST = 0


def worker(device: str) -> None:
    """Read seeds from stdin, one per line; print one result line per seed."""
    import torch

    faulthandler.enable()  # a segfault's Python stack goes to the worker's stderr
    warnings.simplefilter("ignore")
    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    before: list[int] = []
    for line in sys.stdin:
        seed = int(line)
        print(f"fuzz worker: seed {seed}", file=sys.stderr, flush=True)
        try:
            record = run_program(generate(seed), device)
        except Exception:
            record = {
                "seed": seed,
                "family": "?",
                "sizes": [],
                "modes": {"runner": _outcome("crash", traceback.format_exc()[-3000:])},
            }
        # What this process compiled and ran first: a failure that a fresh process
        # does not show comes from one of them (``--after``).
        record["after"] = list(before)
        before.append(seed)
        print(RESULT + json.dumps(record), flush=True)
        if record.get("worker_exits"):
            return


@dataclasses.dataclass
class Pool:
    """``workers`` worker processes running seeds, each replaced when it dies or hangs."""

    device: str
    workers: int = 1
    #: A program running longer than this is recorded as a crash (a hang).
    program_timeout_s: float = 300.0
    #: Programs not finished by then are dropped (not counted); none start after it.
    deadline: float | None = None
    #: Run each failing program again in a fresh worker, and record its verdict
    #: there as ``alone``: a failure that only a worker which compiled other
    #: programs first shows is state that one compile leaves to another.
    rerun_failures: bool = False
    #: Workers run with the runner's own kernels where the tests run them: the
    #: compactions in Triton's interpreter on CPU, and fused selections
    #: (``use_runner_kernels``).
    runner_kernels: bool = False

    def _alone(self, seed: int) -> str:
        fresh = _Worker(self.device, self.runner_kernels)
        try:
            record = fresh.run(seed, self.program_timeout_s, None)
        finally:
            fresh.stop()
        return verdict(record) if record is not None else "no result"

    def run(self, seeds: Iterable[int]) -> Iterator[dict]:
        """Each seed's record, in the order they finish."""
        seeds_left = iter(seeds)
        lock = threading.Lock()
        records: queue.Queue = queue.Queue()

        def next_seed() -> int | None:
            with lock:
                if self.deadline is not None and time.monotonic() > self.deadline:
                    return None
                return next(seeds_left, None)

        def lane() -> None:
            process = None
            try:
                while (seed := next_seed()) is not None:
                    if process is None:
                        process = _Worker(self.device, self.runner_kernels)
                    record = process.run(seed, self.program_timeout_s, self.deadline)
                    if record is None:  # the deadline passed mid-program: not counted
                        break
                    if not process.alive or record.get("worker_exits"):
                        process.stop()
                        process = None
                    if self.rerun_failures and verdict(record) in ("mismatch", "crash"):
                        record["alone"] = self._alone(seed)
                    records.put(record)
            finally:
                if process is not None:
                    process.stop()
                records.put(None)

        threads = [threading.Thread(target=lane, daemon=True) for _ in range(self.workers)]
        for thread in threads:
            thread.start()
        finished = 0
        while finished < len(threads):
            record = records.get()
            if record is None:
                finished += 1
            else:
                yield record


class _Worker:
    """One worker process, its result lines read by a thread into a queue."""

    def __init__(self, device: str, runner_kernels: bool = False) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        self.log = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "fuzz_runner.py"),
                "--worker",
                "--device",
                device,
                *(["--runner-kernels"] if runner_kernels else []),
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith(RESULT):
                self.lines.put(json.loads(line[len(RESULT) :]))
        self.lines.put(None)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, seed: int, timeout_s: float, deadline: float | None) -> dict | None:
        try:
            self.process.stdin.write(f"{seed}\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        limit = time.monotonic() + timeout_s
        cut = deadline is not None and deadline + 60 < limit
        try:
            record = self.lines.get(
                timeout=max(1.0, min(limit, deadline + 60) - time.monotonic() if cut else timeout_s)
            )
        except queue.Empty:
            self.stop()
            if cut:
                return None
            return self._died(
                seed, f"no result after {timeout_s:.0f} s (a hang); the worker was stopped"
            )
        if record is None:
            self.process.wait()
            return self._died(seed, f"the worker died (exit status {self.process.returncode})")
        return record

    def _died(self, seed: int, why: str) -> dict:
        """A crash record for ``seed``, under the mode the worker said it was running."""
        self.log.seek(0)
        lines = self.log.read().splitlines()
        modes = [line[len(MODE_LINE) :].strip() for line in lines if line.startswith(MODE_LINE)]
        tail = "\n".join(lines[-30:])
        program = generate(seed)
        return {
            "seed": seed,
            "family": program.family,
            "sizes": list(program.sizes),
            "modes": {modes[-1] if modes else "process": _outcome("crash", f"{why}\n{tail}")},
        }

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", action="store_true", help="read seeds from stdin")
    parser.add_argument("--seed", type=int, help="run one program here and print it")
    parser.add_argument(
        "--after",
        type=int,
        nargs="*",
        default=(),
        help="with --seed: run these programs first, in this process (a worker's history)",
    )
    parser.add_argument("--device", default=None)
    parser.add_argument(
        "--runner-kernels",
        action="store_true",
        help="the runner's own kernels (use_runner_kernels)",
    )
    args = parser.parse_args()
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(ROOT))
    if args.runner_kernels:
        use_runner_kernels()
    if args.worker:
        worker(device)
        return

    warnings.simplefilter("ignore")
    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    for seed in args.after:
        print(f"seed {seed} first: {verdict(run_program(generate(seed), device))}", flush=True)
    program = generate(args.seed)
    record = run_program(program, device)
    print(repro_text(record, program.source))
    for mode, outcome in record["modes"].items():
        if outcome["outcome"] != "ok":
            print(f"--- {mode}: {outcome['outcome']}\n{outcome['message']}")


if __name__ == "__main__":
    main()
