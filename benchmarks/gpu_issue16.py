"""Issue 16's changes on a GPU: one command, results as markdown.

    python benchmarks/gpu_issue16.py RESULTS.md

Runs ``test/test_logging.py`` (each graph's code in ``TORCH_LOGS=output_code``,
the file it names, the ``TORCH_TRACE`` artifact, the package's logger) and the
end-to-end tests of ``test/inductor/test_fxir_backend.py`` (the graphs with one
``getitem`` per cond output), on CUDA with caches off, and writes the date, GPU,
versions, counts and the failures to RESULTS.md.
"""

from __future__ import annotations

import pathlib
import sys

from gpu_issue13 import run_tests

TESTS = ["test/test_logging.py", "test/inductor/test_fxir_backend.py"]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    return run_tests("Issue 16 tests on the GPU", TESTS, pathlib.Path(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
