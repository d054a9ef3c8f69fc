"""Inductor modes and user Triton kernels on the GPU: one pytest run, one report.

Runs ``test/corpus/test_modes.py`` (every program of the corpus third under two
modes, ``IFX_MODES_PER_PROGRAM=2``; set it to 5 for every pair) and
``test/corpus/test_user_kernels.py`` (each user-kernel program static and
dynamic, lowered runner and ``gm.forward``, against eager and the Python
wrapper) with caches disabled, and writes a markdown report: date, GPU, torch
and Triton versions, counts by outcome, wall time, and each test's result.
Exits with pytest's status.

    python benchmarks/gpu_modes_user_kernels.py --out benchmarks/results/DATE-modes.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = ["test/corpus/test_modes.py", "test/corpus/test_user_kernels.py"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="markdown report to write")
    args = parser.parse_args()

    import torch
    import triton

    env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    env.setdefault("IFX_MODES_PER_PROGRAM", "2")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    output = completed.stdout + completed.stderr
    results = [
        line
        for line in output.splitlines()
        if re.match(r"^(PASSED|FAILED|XFAIL|XPASS|SKIPPED|ERROR) ", line)
    ]
    summary = next(
        (line for line in reversed(output.splitlines()) if re.search(r"\d+ (passed|failed)", line)),
        "(no pytest summary)",
    )
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    lines = [
        "# Inductor modes and user Triton kernels through the FX backend",
        "",
        f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"- device: {device} (x{torch.cuda.device_count()})",
        f"- torch {torch.__version__}, Triton {triton.__version__}",
        f"- IFX_MODES_PER_PROGRAM={env['IFX_MODES_PER_PROGRAM']}, caches disabled",
        f"- wall time: {seconds:.0f} s",
        f"- pytest: {summary.strip('= ')} (exit status {completed.returncode})",
        "",
        "## Results",
        "",
        *[f"- {line}" for line in results],
    ]
    if completed.returncode:
        lines += ["", "## Output (last 200 lines)", "", "```", *output.splitlines()[-200:], "```"]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(summary)
    return completed.returncode


if __name__ == "__main__":
    sys.exit(main())
