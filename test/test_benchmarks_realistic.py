"""The realistic benchmark's smoke run on CPU (``--quick``, Triton's interpreter), for real."""

import re
import subprocess
import sys

import pytest

from benchmarks import harness

PROGRAMS = ("unique_ids", "active_coordinates")
SUMMARY = (
    "realistic_geomean_direct_over_eager",
    "realistic_max_direct_over_eager",
    "realistic_max_fx_over_eager",
    "models_max_fx_over_eager",
    "models_geomean_fx_over_eager",
    "copy_bandwidth_gbs",
    "active_coordinates_small_gbs",
    "active_coordinates_large_gbs",
)


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    """The report of a quick CPU run of two programs (the second a bandwidth
    program), without real-library cases."""
    out = tmp_path_factory.mktemp("realistic") / "report.md"
    command = [sys.executable, "-m", "benchmarks.realistic", "--device", "cpu", "--quick"]
    command += ["--programs", *PROGRAMS, "--cases", "--out", str(out)]
    done = subprocess.run(command, cwd=harness.ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out.read_text()


def section(report, program):
    return report.split(f"### {program}\n", 1)[1].split("\n#", 1)[0]


@pytest.mark.full
def test_quick_run_ends_with_every_summary_line(quick_report):
    lines = quick_report.splitlines()
    for name in SUMMARY:
        assert any(line.startswith(f"{name}: ") for line in lines), f"no {name}:\n{quick_report}"
    geomean = r"^realistic_geomean_direct_over_eager: \d+\.\d+ .*; 4 of 4 cases\)$"
    assert re.search(geomean, quick_report, re.M)
    # No real-library case ran: measured nowhere, and the report says why.
    assert "models_max_fx_over_eager: not measured" in lines
    assert "none selected (`--cases` without names)" in quick_report


@pytest.mark.full
def test_quick_run_times_each_compiled_program_only_where_it_equals_eager(quick_report):
    # A row with a time is a backend whose results equalled eager's on both draws.
    for program in PROGRAMS:
        rows = section(quick_report, program)
        for size in ("small", "large"):
            for backend in ("eager", "fx", "direct"):
                timed = rf"^\| {size} \| {backend} \| \d+\.\d+ \|"
                assert re.search(timed, rows, re.M), f"{program} {size} {backend}:\n{rows}"
    assert not re.search(r"\| (refused|mismatch|error)", quick_report)
    assert "Mismatches and errors" not in quick_report


@pytest.mark.full
def test_quick_run_shows_the_data_dependent_sizes_of_both_draws(quick_report):
    # nonzero of 4000 normal values over 0.5: 31% of them, then 40% with twice the spread.
    outputs = r"- large: 4000 elements; outputs (\d+)x1 / (\d+)x1"
    first, second = re.search(outputs, section(quick_report, "active_coordinates")).groups()
    assert 1000 < int(first) < int(second) < 2000
