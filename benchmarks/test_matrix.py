"""Run the test suite on every supported torch release and write a markdown report.

    python -m benchmarks.test_matrix --out benchmarks/results/DATE-test-matrix.md
    python -m benchmarks.test_matrix --releases 2.13.0+cpu --pytest-args -q test/test_compat.py

Each release runs in its own nox session (``noxfile.py``): a virtual environment
with that release, the Triton a user's pip installs beside it, and this package.
The report has one row per release, written after each, and ends with
``matrix_releases_failing: <n>``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

from benchmarks import harness
from noxfile import CPU_BUILDS, RELEASES

TITLE = "Test matrix: the test suite on every supported torch release"


def run_release(torch_release: str, junit: str, pytest_args: list[str]) -> dict:
    command = ["nox", "-s", f"tests(torch='{torch_release}')", "--", *pytest_args]
    done = harness.run_child([*command, f"--junitxml={junit}"], fresh_caches=False)
    versions = re.search(r"torch (\S+) triton (\S+) numpy (\S+)", done.output)
    row = {
        "release": torch_release,
        "torch": versions.group(1) if versions else "?",
        "triton": versions.group(2) if versions else "?",
        "numpy": versions.group(3) if versions else "?",
        "seconds": done.seconds,
        "exit": done.returncode,
    }
    try:
        suite = ElementTree.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    except (OSError, ElementTree.ParseError):
        counts = {"tests": 0, "failures": 0, "errors": 1, "skipped": 0}
        row["note"] = done.tail(1)
    row["failed"] = counts["failures"] + counts["errors"]
    row["skipped"] = counts["skipped"]
    row["passed"] = counts["tests"] - row["failed"] - row["skipped"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--releases", nargs="+", default=[*RELEASES, *CPU_BUILDS])
    parser.add_argument(
        "--pytest-args",
        nargs=argparse.REMAINDER,
        default=["-q"],
        help="pytest's arguments in each session (default: -q, the whole suite)",
    )
    args = parser.parse_args()
    out = harness.Report(
        args.out,
        TITLE,
        harness.environment_lines(
            "cpu",
            f"- Machine: {os.cpu_count()} CPUs, no GPU (Triton's interpreter); one nox session "
            "per release, `TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`.",
        ),
    )
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for release in args.releases:
            junit = os.path.join(tmp, f"junit-{release}.xml")
            rows.append(run_release(release, junit, args.pytest_args))
            print(rows[-1], flush=True)
            out.replace(table(rows))
    print(out.text)
    return 1 if failing(rows) else 0


def failing(rows: list[dict]) -> int:
    return sum(1 for row in rows if row["failed"] or row["exit"])


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| torch | Triton | NumPy | passed | failed | skipped | time (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['torch']} | {row['triton']} | {row['numpy']} | {row['passed']} | "
            f"{row['failed']} | {row['skipped']} | {row['seconds']:.0f} |"
        )
    return [*lines, "", f"matrix_releases_failing: {failing(rows)}"]


if __name__ == "__main__":
    sys.exit(main())
