"""Issue 12's cache tests on a GPU: one command, results as markdown.

    python benchmarks/gpu_issue12.py RESULTS.md

Runs ``test/inductor/test_fxir_caching.py`` (the Python wrapper's artifact never
served to the FX backend and the other way round, in one process and across
processes; warm starts served from the cache with their FX graphs, the lowered
runner and no new Triton cache entries) and ``test/inductor/test_fxir_cpp_kernels.py``
(C++ kernels of a CUDA graph's CPU part, stored and restored with the artifact),
and writes the date, GPU, versions,
counts and failures to RESULTS.md. ``TORCHINDUCTOR_FORCE_DISABLE_CACHES`` is not
set (under it, torch 2.10 to 2.12 run each test in a child process, which costs
time); the tests turn the caches on themselves, each with fresh cache dirs.
"""

from __future__ import annotations

import pathlib
import sys

from gpu_issue13 import run_tests

TESTS = ["test/inductor/test_fxir_caching.py", "test/inductor/test_fxir_cpp_kernels.py"]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    return run_tests(
        "Issue 12 cache and C++-kernel tests on the GPU",
        TESTS,
        pathlib.Path(sys.argv[1]),
        force_disable_caches=False,
    )


if __name__ == "__main__":
    sys.exit(main())
