"""Run the test suite on every supported torch release and write a markdown report.

    python benchmarks/test_matrix.py --out benchmarks/results/DATE-test-matrix.md

Each release runs in its own nox session (``noxfile.py``): a virtual environment
with that release, the Triton it pins, and this package. The report has one row
per release and ends with ``matrix_releases_failing: <n>``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from noxfile import RELEASES  # noqa: E402


def run_release(torch_release: str, junit: str) -> dict:
    start = time.perf_counter()
    done = subprocess.run(
        ["nox", "-s", f"tests(torch='{torch_release}')", "--", "-q", f"--junitxml={junit}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    output = done.stdout + done.stderr
    versions = re.search(r"torch (\S+) triton (\S+) numpy (\S+)", output)
    row = {
        "release": torch_release,
        "torch": versions.group(1) if versions else "?",
        "triton": versions.group(2) if versions else "?",
        "numpy": versions.group(3) if versions else "?",
        "seconds": elapsed,
        "exit": done.returncode,
    }
    try:
        suite = ElementTree.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    except (OSError, ElementTree.ParseError):
        counts = {"tests": 0, "failures": 0, "errors": 1, "skipped": 0}
        row["note"] = output.strip().splitlines()[-1:] or [""]
    row["failed"] = counts["failures"] + counts["errors"]
    row["skipped"] = counts["skipped"]
    row["passed"] = counts["tests"] - row["failed"] - row["skipped"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--releases", nargs="+", default=list(RELEASES))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for release in args.releases:
            rows.append(run_release(release, os.path.join(tmp, f"junit-{release}.xml")))
            print(rows[-1], flush=True)
    failing = sum(1 for row in rows if row["failed"] or row["exit"])
    lines = [
        "# Test matrix: the test suite on every supported torch release",
        "",
        f"- Date: {datetime.date.today().isoformat()}; machine: {platform.machine()}, "
        f"{os.cpu_count()} CPUs, no GPU (Triton's interpreter); Python {platform.python_version()}",
        "- Command: `python benchmarks/test_matrix.py` (one nox session per release; "
        "`TORCHINDUCTOR_FORCE_DISABLE_CACHES=1`)",
        "",
        "| torch | Triton | NumPy | passed | failed | skipped | time (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['torch']} | {row['triton']} | {row['numpy']} | {row['passed']} | "
            f"{row['failed']} | {row['skipped']} | {row['seconds']:.0f} |"
        )
    lines += ["", f"matrix_releases_failing: {failing}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
