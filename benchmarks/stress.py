"""The whole corpus in one long-lived process, as a serving process would see it.

Compiles every program of ``test/corpus/programs.py`` through the FX backend, in
one process, with Inductor's default config (default ``compile_threads`` too),
static and ``dynamic=True``, checks each against eager on its first input, then
runs every compiled program again on all its inputs (new data-dependent sizes)
and checks those too. A program that Inductor's Python wrapper cannot compile
either is counted apart, not as a failure. Writes a markdown report ending with
``stress_programs: <n>`` and ``stress_failures: <n>``.

    python -m benchmarks.stress --out benchmarks/results/DATE-h200-stress.md
    python -m benchmarks.stress --device cpu --quick   # a smoke run: three programs

``--budget-s`` bounds the compile phase (no program starts past it); the report
is written after every program.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
import traceback
from types import ModuleType
from typing import Any

from benchmarks import harness

TITLE = "Stress: the corpus in one long-lived process"


def load_corpus() -> ModuleType:
    """``test/corpus/programs.py``: the corpus is a test fixture, not part of a package."""
    path = harness.ROOT / "test" / "corpus" / "programs.py"
    spec = importlib.util.spec_from_file_location("programs", path)
    assert spec is not None and spec.loader is not None, path
    corpus = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = corpus  # its dataclasses look their module up
    spec.loader.exec_module(corpus)
    return corpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--budget-s", type=float, default=None, help="no compile starts past it")
    parser.add_argument("--quick", action="store_true", help="a smoke run: three programs")
    args = parser.parse_args()

    import torch

    device = harness.chosen_device(args.device)
    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.demo.programs import same, synchronize

    corpus = load_corpus()
    programs = corpus.CORPUS[:3] if args.quick else corpus.CORPUS
    deadline = time.monotonic() + (args.budget_s if args.budget_s is not None else math.inf)
    torch._dynamo.config.capture_scalar_outputs = True
    torch._dynamo.config.capture_dynamic_output_shape_ops = True
    torch._dynamo.config.cache_size_limit = 64

    out = harness.Report(
        args.out,
        TITLE,
        harness.environment_lines(
            device,
            "- Default Inductor config (default `compile_threads`), FX backend with the lowered "
            "runner; each program static and `dynamic=True`.",
        ),
    )
    compiled: list[tuple[str, Any, Any, list[tuple[Any, ...]]]] = []
    rows: list[tuple[str, str, str]] = []
    failures, python_limits, not_run = 0, 0, []
    seconds = {"compile": 0.0, "rerun": 0.0}

    def write() -> None:
        out.replace(
            [
                f"Compile phase {seconds['compile']:.0f} s, rerun phase {seconds['rerun']:.0f} s.",
                "",
                "| program | phase | result |",
                "|---|---|---|",
                *(f"| {name} | {phase} | {result} |" for name, phase, result in rows),
                "",
                f"{python_limits} (program, mode) pairs that the Python wrapper cannot compile "
                "either.",
                *([f"Not run (past the time budget): {', '.join(not_run)}."] if not_run else []),
                "",
                f"stress_programs: {len(programs) - len(not_run)}",
                f"stress_failures: {failures}",
            ]
        )

    # Phase 1: compile everything, first input only.
    start = time.perf_counter()
    for program in programs:
        if time.monotonic() > deadline:
            not_run.append(program.name)
            continue
        inputs = program.inputs(device)
        for dynamic in (False, True):
            name = f"{program.name} ({'dynamic' if dynamic else 'static'})"
            try:
                with ifx.fx_backend(device):
                    fn = torch.compile(
                        corpus.fresh_copy(program.fn), fullgraph=True, dynamic=dynamic
                    )
                    got = corpus.run(program, fn, inputs[0])
                expected = corpus.run(program, program.fn, inputs[0])
                ok = same(got, expected, rtol=1e-4, atol=1e-5)
                compiled.append((name, program, fn, inputs))
                rows.append((name, "compile", "pass" if ok else "MISMATCH"))
                failures += not ok
            except Exception as e:  # noqa: BLE001 - reported per program
                python_error = python_wrapper_error(torch, corpus, program, inputs, dynamic)
                message = harness.error_line(e)
                if python_error is not None:
                    python_limits += 1
                    rows.append((name, "compile", f"Python wrapper fails too ({python_error})"))
                else:
                    failures += 1
                    traceback.print_exc()
                    rows.append((name, "compile", f"FAIL ({message})"))
        seconds["compile"] = time.perf_counter() - start
        write()
    synchronize(device)

    # Phase 2: every compiled program again, on all of its inputs.
    start = time.perf_counter()
    for name, program, fn, inputs in compiled:
        try:
            with ifx.fx_backend(device):
                ok = all(
                    same(
                        corpus.run(program, fn, a),
                        corpus.run(program, program.fn, a),
                        rtol=1e-4,
                        atol=1e-5,
                    )
                    for a in inputs
                )
            rows.append((name, "rerun", "pass" if ok else "MISMATCH"))
            failures += not ok
        except Exception as e:  # noqa: BLE001 - reported per program
            failures += 1
            traceback.print_exc()
            rows.append((name, "rerun", f"FAIL ({harness.error_line(e)})"))
    synchronize(device)
    seconds["rerun"] = time.perf_counter() - start
    write()
    print(out.text)
    return 1 if failures else 0


def python_wrapper_error(
    torch: Any, corpus: ModuleType, program: Any, inputs: list[Any], dynamic: bool
) -> Any:
    """The Python wrapper's error on the program, or None if it compiles it."""
    try:
        fn = torch.compile(corpus.fresh_copy(program.fn), fullgraph=True, dynamic=dynamic)
        corpus.run(program, fn, inputs[0])
        return None
    except Exception as e:  # noqa: BLE001
        return harness.error_line(e, 100)


if __name__ == "__main__":
    sys.exit(main())
