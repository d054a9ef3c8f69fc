"""The whole corpus in one long-lived process, as a serving process would see it.

Compiles every program of ``test/corpus/programs.py`` through the FX backend, in
one process, with Inductor's default config (default ``compile_threads`` too),
static and ``dynamic=True``, checks each against eager on its first input, then
runs every compiled program again on all its inputs (new data-dependent sizes)
and checks those too. A program that Inductor's Python wrapper cannot compile
either is counted apart, not as a failure. Writes a markdown report ending with
``stress_programs: <n>`` and ``stress_failures: <n>``.

    python benchmarks/stress.py --out benchmarks/results/DATE-GPU-stress.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import traceback
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "test", "corpus"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import triton
    from programs import CORPUS, fresh_copy
    from programs import run as call

    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.demo.programs import same, synchronize

    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    torch._dynamo.config.cache_size_limit = 64

    compiled: list[tuple[str, Any, Any, list[tuple[Any, ...]]]] = []
    rows, failures, python_limits = [], 0, 0
    start = time.perf_counter()

    # Phase 1: compile everything, first input only.
    for program in CORPUS:
        inputs = program.inputs(device)
        for dynamic in (False, True):
            name = f"{program.name} ({'dynamic' if dynamic else 'static'})"
            try:
                with ifx.fx_backend(device):
                    fn = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=dynamic)
                    got = call(program, fn, inputs[0])
                ok = same(got, call(program, program.fn, inputs[0]), rtol=1e-4, atol=1e-5)
                compiled.append((name, program, fn, inputs))
                rows.append((name, "compile", "pass" if ok else "MISMATCH"))
                failures += not ok
            except Exception as e:  # noqa: BLE001 - reported per program
                python_error = python_wrapper_error(torch, program, inputs, dynamic)
                message = f"{type(e).__name__}: {str(e).splitlines()[0][:140]}"
                if python_error is not None:
                    python_limits += 1
                    rows.append((name, "compile", f"Python wrapper fails too ({python_error})"))
                else:
                    failures += 1
                    traceback.print_exc()
                    rows.append((name, "compile", f"FAIL ({message})"))
    synchronize(device)
    compile_seconds = time.perf_counter() - start

    # Phase 2: every compiled program again, on all of its inputs.
    start = time.perf_counter()
    for name, program, fn, inputs in compiled:
        try:
            with ifx.fx_backend(device):
                ok = all(
                    same(call(program, fn, a), call(program, program.fn, a), rtol=1e-4, atol=1e-5)
                    for a in inputs
                )
            rows.append((name, "rerun", "pass" if ok else "MISMATCH"))
            failures += not ok
        except Exception as e:  # noqa: BLE001 - reported per program
            failures += 1
            traceback.print_exc()
            rows.append(
                (name, "rerun", f"FAIL ({type(e).__name__}: {str(e).splitlines()[0][:140]})")
            )
    synchronize(device)
    rerun_seconds = time.perf_counter() - start

    device_name = torch.cuda.get_device_name() if device == "cuda" else platform.processor()
    lines = [
        "# Stress: the corpus in one long-lived process",
        "",
        f"- Date: {datetime.date.today().isoformat()}; device: {device_name} ({device})",
        f"- torch {torch.__version__}, Triton {triton.__version__}, "
        f"Python {platform.python_version()}",
        "- Default Inductor config (default `compile_threads`), FX backend with the lowered "
        "runner; each program static and `dynamic=True`; compile phase "
        f"{compile_seconds:.0f} s, rerun phase {rerun_seconds:.0f} s.",
        "",
        "| program | phase | result |",
        "|---|---|---|",
        *(f"| {name} | {phase} | {result} |" for name, phase, result in rows),
        "",
        f"{python_limits} (program, mode) pairs that the Python wrapper cannot compile either.",
        "",
        f"stress_programs: {len(CORPUS)}",
        f"stress_failures: {failures}",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 1 if failures else 0


def python_wrapper_error(torch: Any, program: Any, inputs: list[Any], dynamic: bool) -> Any:
    """The Python wrapper's error on the program, or None if it compiles it."""
    from programs import fresh_copy
    from programs import run as call

    try:
        fn = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=dynamic)
        call(program, fn, inputs[0])
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"


if __name__ == "__main__":
    sys.exit(main())
