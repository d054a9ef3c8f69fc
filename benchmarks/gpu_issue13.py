"""Issue 13's defect tests on a GPU: one command, results as markdown.

    python benchmarks/gpu_issue13.py RESULTS.md

Runs ``test/inductor/test_fxir_defects.py`` (frozen constants under both
runners, launchers across a Dynamo reset with precompiled launchers, a user
Triton kernel with a ``tl.constexpr`` before a runtime argument, upstream's line
type, multi-kernel NaN checks), ``test/test_call_args.py`` and
``test/test_compat.py`` (every private upstream name resolves, including the
CUDA-only ones), with caches off, and writes the date, GPU, versions, counts
and the failures to RESULTS.md.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import re
import subprocess
import sys

TESTS = ["test/inductor/test_fxir_defects.py", "test/test_call_args.py", "test/test_compat.py"]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    return run_tests("Issue 13 defect tests on the GPU", TESTS, pathlib.Path(sys.argv[1]))


def run_tests(
    title: str,
    tests: list[str],
    out: pathlib.Path,
    force_disable_caches: bool = True,
    limit_s: float | None = None,
) -> int:
    """Run ``tests`` on the GPU (caches off unless told) and write the results to ``out``.

    ``limit_s`` (default: ``IFX_TEST_LIMIT_S``, else 480) stops the tests in time
    for the report to be written with what ran, inside a caller's own limit.
    """
    limit_s = limit_s or float(os.environ.get("IFX_TEST_LIMIT_S", 480))
    import torch
    import triton

    env = dict(os.environ)
    if force_disable_caches:
        env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    env.pop("TRITON_INTERPRET", None)
    command = [sys.executable, "-m", "pytest", "-v", "-rfEs", "-p", "no:cacheprovider", *tests]
    started = datetime.datetime.now()
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=limit_s)
        log, returncode = proc.stdout + proc.stderr, proc.returncode
        status = f"exit status {returncode}"
    except subprocess.TimeoutExpired as e:  # the report keeps what ran
        log = "".join(
            out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
            for out in (e.stdout, e.stderr)
        )
        status, returncode = f"stopped after {limit_s} s", 124
    seconds = (datetime.datetime.now() - started).total_seconds()
    summary = (re.findall(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s", log, re.M) or [""])[-1]
    if not summary:  # stopped: count the verbose lines of the tests that finished
        outcomes = re.findall(r"::\S+ (PASSED|FAILED|ERROR|SKIPPED|XFAIL)", log)
        counts = {o: outcomes.count(o) for o in dict.fromkeys(outcomes)}
        summary = ", ".join(f"{n} {o.lower()}" for o, n in counts.items()) + " (so far)"
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    lines = [
        f"# {title}",
        "",
        f"- Date: {started:%Y-%m-%d %H:%M}. Device: {gpu} ({torch.cuda.device_count()} visible).",
        f"- torch {torch.__version__}, Triton {triton.__version__}, "
        f"Python {sys.version.split()[0]}.",
        f"- Command: `{' '.join(command[1:])}`"
        + (" with `TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`." if force_disable_caches else "."),
        "",
        f"Result: **{summary}** in {seconds:.0f} s ({status}).",
        "",
        "Failures, errors and skips:",
        "",
        "```",
        *[ln for ln in log.splitlines() if ln.startswith(("FAILED", "ERROR", "SKIPPED"))],
        "```",
        "",
        "Last lines of the log:",
        "",
        "```",
        *log.splitlines()[-40:],
        "```",
    ]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:8]))
    return returncode


if __name__ == "__main__":
    sys.exit(main())
