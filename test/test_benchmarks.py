"""The benchmark harness and the GPU entry point, run for real on CPU (``--quick``)."""

import datetime
import json
import os
import re
import subprocess
import sys
import time

import pytest
import torch

from benchmarks import harness

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

REPO = harness.ROOT


def run_gpu_entry_point(*arguments, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--device", "cpu", *arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def report_of(out, part):
    return out / f"{datetime.date.today().isoformat()}-cpu-{part}.md"


@pytest.mark.full
def test_gpu_entry_point_runs_a_test_part_and_writes_its_report(tmp_path):
    done = run_gpu_entry_point("--quick", "--parts", "tests", "--budget-s", "90", "--out", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = report_of(tmp_path, "tests").read_text()
    assert report.startswith("# The package's end-to-end tests\n")
    assert f"- torch {torch.__version__}, Triton " in report
    assert "- Command: `python -m benchmarks.gpu --device cpu --quick --parts tests" in report
    assert re.search(
        r"^Result: \*\*\d+ passed.*\*\* \(exit status 0 after \d+ s\)\.$", report, re.M
    )
    assert "test/test_compat.py" in report
    # The pytest output as it came, beside the report.
    assert " PASSED" in (tmp_path / "logs" / "tests.log").read_text()


@pytest.mark.full
def test_the_fused_selection_parts_run_their_tests_and_compare_fused_with_unfused(tmp_path):
    parts = "fused-tests,realistic-fused"
    done = run_gpu_entry_point("--quick", "--parts", parts, "--budget-s", "300", "--out", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    tests = report_of(tmp_path, "fused-tests").read_text()
    assert re.search(r"^Result: \*\*\d+ passed", tests, re.M), tests
    realistic = report_of(tmp_path, "realistic-fused").read_text()
    for program in ("active_coordinates", "sort_kept", "edges_between_kept_nodes"):
        rows = realistic.split(f"### {program}\n", 1)[1].split("\n#", 1)[0]
        for size in ("small", "large"):
            for backend in ("direct", "direct-fused"):
                assert re.search(rf"^\| {size} \| {backend} \| [\d.]+ \|", rows, re.M), rows


@pytest.mark.full
def test_a_part_past_its_share_is_stopped_and_its_report_keeps_what_ran(tmp_path):
    # The whole corpus under Inductor's modes takes minutes on any machine; the part
    # gets 5 s. (Its quick form, one program, can end inside 5 s on a fast machine.)
    started = time.monotonic()
    done = run_gpu_entry_point("--parts", "corpus-modes", "--budget-s", "10", "--out", tmp_path)
    assert time.monotonic() - started < 60
    assert done.returncode == 1
    assert "failed or stopped: corpus-modes" in done.stdout
    report = report_of(tmp_path, "corpus-modes").read_text()
    assert re.search(r"^Result: \*\*.*\(so far\)\*\* \(stopped at its time limit", report, re.M)
    assert "The end of the output:" in report


def test_unknown_part_is_refused_naming_the_parts(tmp_path):
    done = run_gpu_entry_point("--parts", "tests,warmstart", "--out", tmp_path)
    assert done.returncode == 2
    assert "unknown parts warmstart; the parts are suite, tests, trust, cuda-graphs," in done.stderr
    assert not list(tmp_path.iterdir())


def test_run_child_gives_fresh_cache_dirs_and_stops_the_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import os, subprocess, sys, time\n"
        "print(os.environ['TORCHINDUCTOR_CACHE_DIR'], os.environ['TRITON_CACHE_DIR'], flush=True)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    log = tmp_path / "child.log"
    result = harness.run_child([sys.executable, "-c", script], timeout=3, log=log)
    assert result.timed_out and "stopped at its time limit" in result.status
    inductor_dir, triton_dir = result.output.split()
    assert inductor_dir != os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    assert os.path.dirname(inductor_dir) == os.path.dirname(triton_dir)
    assert not os.path.exists(os.path.dirname(inductor_dir))  # removed afterwards
    assert log.read_text() == result.output
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(grandchild)


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_report_is_on_disk_after_every_step(tmp_path):
    path = tmp_path / "report.md"
    report = harness.Report(path, "A run", ["- header"])
    assert path.read_text() == "# A run\n\n- header\n"
    report.add("| a | 1 |")
    assert path.read_text().endswith("- header\n\n| a | 1 |\n")
    report.replace(["done"])
    assert path.read_text() == "# A run\n\n- header\n\ndone\n"


def test_result_files_are_named_by_the_gpu_model():
    assert harness.gpu_tag("NVIDIA H200") == "h200"
    assert harness.gpu_tag("NVIDIA A100-SXM4-80GB") == "a100"
    assert harness.gpu_tag("NVIDIA GeForce RTX 4090") == "4090"


def test_parts_spread_over_gpus_by_weight_each_lane_in_the_given_order():
    from benchmarks.gpu import PARTS, lanes_for

    parts = [PARTS[name] for name in ("tests", "caches", "data-dependent", "warm-start")]
    # Weights 4, 3, 9, 5: data-dependent, then warm-start and tests beside it, then
    # caches on the lighter lane (9 against 9: the first).
    lanes = lanes_for(parts, 2)
    assert [[p.name for p in lane] for lane in lanes] == [
        ["caches", "data-dependent"],
        ["tests", "warm-start"],
    ]
    assert lanes_for(parts, 1) == [parts]


@pytest.mark.full
def test_data_dependent_measures_every_selected_program_within_its_budget(tmp_path):
    # Each program's sampling stops at --seconds; the run's budget still covers the next.
    # aot-eager (eager's kernels behind Dynamo and AOTAutograd) gives the floor's table.
    report = tmp_path / "report.md"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.data_dependent", "--device", "cpu", "--n", "1000"]
        + ["--skip-cold", "--programs", "P1", "P3", "--backends", "eager", "aot-eager"]
        + ["--seconds", "0.0001", "--min-samples", "3", "--max-samples", "3"]
        + ["--budget-s", "600", "--out", str(report)],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )
    text = report.read_text()
    assert "Not measured" not in text
    assert re.search(r"^\| P1 \|", text, re.M) and re.search(r"^\| P3 \|", text, re.M)
    floor = text.split("## The compiled-call floor")[1]
    assert re.search(r"^\| P1 \| n/a \| \d+\.\d+ \[", floor, re.M), floor
    assert re.search(r"^geomean_steady_aot_eager_over_eager: \d+\.\d+$", floor, re.M), floor


def dynamo_options_put_back():
    """The Dynamo options that a benchmark sets for its programs (``setup``), put back
    when a benchmark run in the test process ends."""
    dynamo = torch._dynamo.config
    options = ("capture_scalar_outputs", "capture_dynamic_output_shape_ops", "cache_size_limit")
    return dynamo.patch({name: getattr(dynamo, name) for name in options})


#: The warm-start benchmark's measurements, in one child process: what each of its
#: processes runs (``--one``), a cold run of each backend and then the warm runs.
WARM_START_RUNS = """
import json, sys
from benchmarks import warm_start
device = sys.argv[1]
cold = {b: warm_start.run_one("P1", b, device, 1000) for b in ("python", "fx")}
warm = {r: warm_start.run_one("P1", r, device, 1000) for r in warm_start.WARM_RUNS}
print(json.dumps({"cold": cold, "warm": warm}))
"""


@pytest.mark.full
def test_warm_start_measures_compiles_the_caches_serve():
    from benchmarks import warm_start

    # Caches on, as the benchmark's processes have them (the variable would win
    # over any config patch), and the interpreter on CPU.
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_FORCE_DISABLE_CACHES"}
    if DEVICE == "cpu":
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", WARM_START_RUNS, DEVICE],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    cold = {("P1", backend): r for backend, r in measured["cold"].items()}
    runs = {("P1", run): [r] for run, r in measured["warm"].items()}
    assert all(r["ok"] and r["hits"] == 0 for r in cold.values()), cold
    assert all(r["ok"] and r["hits"] >= 1 for [r] in runs.values()), runs
    text = "\n".join(warm_start.report(["P1"], cold, runs))
    # Recording: P1's one graph, with its one unbacked definition.
    assert re.search(r"^\| P1 \|( \d+\.\d+ \|){7} hit, 1, 1, \d+ \|$", text, re.M), text
    assert re.search(r"^geomean_warm_fx_over_python_wrapper: \d+\.\d+$", text, re.M), text


@pytest.mark.full
def test_launchers_compares_the_direct_call_with_the_aot_module(tmp_path):
    from benchmarks import launchers

    # In this process, so on the device it has: the CPU mode needs the interpreter
    # that a machine with a GPU does not turn on.
    out = tmp_path / "launchers.md"
    # In this process (a child would import torch again).
    with dynamo_options_put_back():
        assert launchers.main(["--device", DEVICE, "--quick", "--out", str(out)]) == 0
    report = out.read_text()
    assert "## P2: `(x[x > 0] * 2).sum()`" in report
    assert re.search(r"ms per call \(median\): direct [0-9.]+, aot-module [0-9.]+", report)
    # Each artifact's launches are listed (P2 runs a Triton kernel: the mask's count).
    for backend in ("direct", "aot-module"):
        launches = re.search(rf"^- {backend}: (\d+) kernel launches$", report, re.M)
        assert launches and int(launches[1]) >= 1, report
    assert re.search(r"^  - `triton_\w+`: ", report, re.M), report
    for backend in ("direct", "aot-module"):
        assert f"host µs per call by group (cProfile), {backend}: " in report


@pytest.mark.full
def test_the_compaction_benchmark_checks_and_times_each_way(tmp_path):
    from benchmarks import compaction

    out = tmp_path / "compaction.md"
    with dynamo_options_put_back():
        assert compaction.main(["--device", DEVICE, "--quick", "--out", str(out)]) == 0
    report = out.read_text()
    # Each way was checked against ATen's or eager's result before it was timed.
    for operator in ("nonzero", "masked_select", "repeat_interleave", "unique"):
        for way in ("aten", "runner"):
            assert re.search(rf"^\| {operator}: {way} \| [0-9.]+ \| [0-9.]+ \|$", report, re.M)
    for program in compaction.PROGRAMS[:1]:  # the smoke run's
        for way in ("eager", "direct", "direct-aten"):
            assert re.search(rf"^\| {program}: {way} \| [0-9.]+ \| [0-9.]+ \|$", report, re.M)


@pytest.mark.full
def test_the_fused_selection_sweep_checks_each_shape_against_eager(tmp_path):
    from benchmarks import fused_selection_tuning

    out = tmp_path / "fused.md"
    with dynamo_options_put_back():
        assert fused_selection_tuning.main(["--device", DEVICE, "--quick", "--out", str(out)]) == 0
    report = out.read_text()
    for program in ("nonzero_above", "select_large"):
        for way in ("eager", "unfused", "fused 1x1024/4", "fused 4x2048/4"):
            assert re.search(rf"^\| {way} \| [0-9.]+ \| [0-9.]+ \|$", report, re.M), report
        assert re.search(rf"^best_{program}_\d+: .+ [0-9.]+ \(\d+ GB/s\)$", report, re.M), report


def fuzzer_report(path, first, programs, mismatches, commit):
    path.write_text(
        f"# Differential fuzzer\n\n- Code: commit {commit} of this repository.\n\n"
        f"Seeds {first} .. {first + 999999}, 15 workers; {programs + 3} programs in 100 s.\n\n"
        f"fuzz_programs: {programs}\nfuzz_mismatches: {mismatches}\nfuzz_crashes: 0\n"
    )
    return str(path)


def test_fuzzer_runs_add_up_and_a_program_counts_once(tmp_path):
    from benchmarks.fuzz import summed

    first = fuzzer_report(tmp_path / "a.md", 1000, 3000, 0, "abc1234")
    second = fuzzer_report(tmp_path / "b.md", 5000, 2500, 1, "abc1234")
    lines = summed([first, second])
    assert lines[-3:] == ["fuzz_programs: 5500", "fuzz_mismatches: 1", "fuzz_crashes: 0"]
    assert any("| a.md | abc1234 | 1000 .. | 3000 | 0 | 0 |" == line for line in lines)
    overlapping = fuzzer_report(tmp_path / "c.md", 3500, 10, 0, "abc1234")
    with pytest.raises(SystemExit, match="overlap"):
        summed([first, overlapping])
    (tmp_path / "d.md").write_text("# a report that did not finish\n")
    with pytest.raises(SystemExit, match="not a finished fuzzer report"):
        summed([first, str(tmp_path / "d.md")])


def test_the_fuzzer_report_counts_each_refusal_reason():
    from benchmarks.fuzz import refusal_lines

    def record(outcome, message=""):
        return {"modes": {"direct": {"outcome": outcome, "message": message}}}

    records = [
        record("refused", "CompileError: input 0 has 12 rows\nmore"),
        record("refused", "CompileError: input 0 has 7 rows"),
        record("ok"),
        record("refused", "UserError: data-dependent | branch"),
    ]
    lines = refusal_lines(records)
    assert lines[:2] == ["| mode | refusals | reason |", "|---|---|---|"]
    assert "| direct | 2 | CompileError: input N has N rows |" in lines
    assert "| direct | 1 | UserError: data-dependent / branch |" in lines
    assert refusal_lines([record("ok")]) == []


def test_a_report_names_the_commit_that_ifx_commit_names(monkeypatch):
    """A tree sent to a GPU machine may carry an older ``.git``: the caller names the
    commit, and the report says whose word it is."""
    monkeypatch.delenv("IFX_COMMIT", raising=False)
    from_git = harness.commit()
    assert re.fullmatch(r"[0-9a-f]{7,}(-dirty)?|unknown \(.*\)", from_git)
    monkeypatch.setenv("IFX_COMMIT", "abc1234")
    assert harness.commit() == "abc1234 (as IFX_COMMIT names it)"


def test_the_entry_path_profile_counts_the_runners_generated_code_as_the_runner():
    """``package_entry_us_max`` is the package's time outside its runner: the code
    the runner generates for a graph, and the CPU mode's launcher, run the graph (as
    for the direct call), so the profile must not count them as the entry path."""
    import cProfile
    import pstats

    import inductor_fx_unbacked as ifx
    from benchmarks.entry_path import group

    x = torch.randn(300, device=DEVICE)
    with ifx.fx_backend(DEVICE):
        compiled = torch.compile(lambda x: x[x > 0].sin().sum(), fullgraph=True)
        compiled(x)
    profile = cProfile.Profile()
    profile.runcall(compiled, x)
    files = {filename for filename, _, _ in pstats.Stats(profile).stats}  # type: ignore[attr-defined]
    generated = {f for f in files if f.startswith("<inductor_fx_unbacked lowered")}
    assert generated, sorted(files)
    assert {group(f) for f in generated} == {"this package's runner"}
    on_entry = {f for f in files if group(f) == "this package"}
    assert all("/runner/" not in f and "cpu_mode" not in f for f in on_entry), on_entry


def test_ranked_rows_sort_by_the_paired_ratio_and_name_the_fastest_other_way():
    from benchmarks.entry_path import ranked_rows

    times = {"eager": [1.0, 2.0, 1.0], "slow": [3.0, 4.0, 3.0], "fast": [0.5, 1.5, 0.4]}
    rows, fastest, ratio = ranked_rows(times, "eager")
    assert rows == [
        "| fast | 500.0000 | 0.500 |",
        "| eager | 1000.0000 | 1.000 |",
        "| slow | 3000.0000 | 3.000 |",
    ]
    assert (fastest, ratio) == ("fast", 0.5)


@pytest.mark.full
def test_the_compaction_past_largest_checks_each_result_against_atens(tmp_path):
    from benchmarks import compaction_largest

    out = tmp_path / "largest.md"
    assert compaction_largest.main(["--device", DEVICE, "--quick", "--out", str(out)]) == 0
    report = out.read_text()
    assert report.count("## repeat_interleave") == 2 and report.count("## nonzero") == 1, report
    assert len(re.findall(r"^\| (aten|runner) \| [0-9.]+ \| [0-9.]+ \|$", report, re.M)) == 6


@pytest.mark.full
def test_the_selection_designs_check_each_result_against_eager(tmp_path):
    from benchmarks import selection_kernels

    out = tmp_path / "selection.md"
    assert selection_kernels.main(["--device", DEVICE, "--quick", "--out", str(out)]) == 0
    report = out.read_text()
    # A partial last program and programs of several tiles, both ops, both designs;
    # each way's result was compared with eager's (twice) before it was timed.
    for op in ("nonzero", "masked_select", "nonzero_bool"):
        section = report.split(f"## {op},")[1].split("##")[0]
        ways = re.findall(r"^\| ([a-z0-9 /-]+) \| [0-9.]+ \| [0-9.]+ \| \d+ \|$", section, re.M)
        assert sorted(ways) == sorted(
            [
                "eager",
                "package",
                "package unfused",
                "tiles 1 1024/4",
                "tiles 2 1024/4",
                "tiles 3 1024/4",
                "two-pass 1024/4",
            ]
        ), section
    assert re.search(r"^best_masked_select_\d+: .+ \(\d+ GB/s, [0-9.]+ of copy\)$", report, re.M)
