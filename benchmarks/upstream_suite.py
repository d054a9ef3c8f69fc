"""Upstream's own FX-backend tests, run with the overlay enabled.

Runs upstream's ``test/inductor/test_fxir_backend.py`` (torch 2.11 era, 74
tests) under pytest, with the overlay enabled by a ``conftest.py``, under the
file's own config and under Inductor's default config, and writes a markdown
report: passed/failed/skipped per run, every failure with its message, and for
each failing test (and always for ``test_backward`` and ``test_extern``) every
``FxConverter.generate`` call the test made, with the Triton kernels of the
graph it returned.

Upstream's code is never part of this repository. Fetch it into an ignored
folder first (``.upstream/`` is listed in ``.git/info/exclude``)::

    mkdir -p .upstream && echo .upstream/ >> .git/info/exclude
    # test/inductor/test_fxir_backend.py of pytorch/pytorch at the v2.11.0 tag:
    curl -L -o .upstream/test_fxir_backend.py \\
      https://raw.githubusercontent.com/pytorch/pytorch/v2.11.0/test/inductor/test_fxir_backend.py
    # It imports CondModels from test/inductor/test_control_flow.py at the same tag;
    # the whole file works, or only its ``class CondModels`` (the test uses
    # ``CondModels.MismatchedOutputSize``).
    curl -L -o .upstream/test_control_flow.py \\
      https://raw.githubusercontent.com/pytorch/pytorch/v2.11.0/test/inductor/test_control_flow.py

The file imports ``torch.testing._internal``, which needs ``expecttest``.

    python -m benchmarks.upstream_suite --out benchmarks/results/DATE-h200-upstream-suite.md
    python -m benchmarks.upstream_suite --device cpu -k test_basic --runs overlay-own --out r.md

Runs (``--runs``; a name may repeat; all at once unless ``--jobs`` says
otherwise, one GPU each where there are several, all within ``--budget-s``):
``overlay-own`` (the overlay, the file's own config), ``overlay-default`` (the
overlay, ``test_config`` reduced to ``{"compile_threads": 1}``, so the assert
flags are Inductor's defaults), ``upstream-own`` (no overlay, the baseline).
The default runs ``overlay-own`` twice, as its two counting failures were
intermittent.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import shutil
import sys
import tempfile
import time

from benchmarks import harness

CONFTEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "upstream_suite_conftest.py")
TEST_FILE = "test_fxir_backend.py"
DEFAULT_CONFIG_FILE = "test_fxir_backend_default_config.py"
RUNS = {
    "overlay-own": (True, TEST_FILE),
    "overlay-default": (True, DEFAULT_CONFIG_FILE),
    "upstream-own": (False, TEST_FILE),
}
#: Tests whose generate calls the report always lists (issue 12, part 3).
WATCHED = ("test_backward", "test_extern")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite-dir", default=str(harness.ROOT / ".upstream"))
    parser.add_argument("--out", required=True, help="markdown report to write")
    parser.add_argument(
        "--runs",
        default="overlay-own,overlay-own,overlay-default,upstream-own",
        help=f"comma-separated, from {sorted(RUNS)}; a name may repeat",
    )
    parser.add_argument("--budget-s", type=float, default=225.0, help="all runs together")
    parser.add_argument("--jobs", type=int, default=0, help="runs at a time (default: all at once)")
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: the same file through Triton's interpreter (FXU_CPU=1), to check the harness",
    )
    parser.add_argument("-k", default=None, help="pytest -k expression, for a subset")
    args = parser.parse_args()

    suite_dir = os.path.abspath(args.suite_dir)
    source = os.path.join(suite_dir, TEST_FILE)
    if not os.path.exists(source):
        parser.error(f"{source} is missing; see this script's docstring for how to fetch it")
    runs = [name.strip() for name in args.runs.split(",") if name.strip()]
    unknown = [name for name in runs if name not in RUNS]
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {sorted(RUNS)}")
    shutil.copyfile(CONFTEST, os.path.join(suite_dir, "conftest.py"))
    write_default_config_copy(source, os.path.join(suite_dir, DEFAULT_CONFIG_FILE))

    deadline = time.monotonic() + args.budget_s
    gpus = gpu_count()

    labels = [
        name if runs.count(name) == 1 else f"{name}-{runs[: i + 1].count(name)}"
        for i, name in enumerate(runs)
    ]

    def launch(index: int, name: str) -> dict:
        left = deadline - time.monotonic()
        if left < 20:
            return {"name": labels[index], "skipped": f"budget spent ({args.budget_s:.0f} s)"}
        cpu = args.device == "cpu"
        gpu = str(index % gpus) if gpus > 1 and not cpu else None
        result = run_suite(name, suite_dir, left, cpu, args.k, gpu)
        return result | {"name": labels[index]}

    out = harness.Report(
        args.out, TITLE, harness.environment_lines(args.device, *method_lines(args))
    )
    jobs = args.jobs or len(runs)
    finished: dict[int, dict] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(launch, i, name): i for i, name in enumerate(runs)}
        for future in concurrent.futures.as_completed(futures):
            finished[futures[future]] = future.result()
            out.replace(render([finished[i] for i in sorted(finished)]))
    print(out.text)
    return 0


def write_default_config_copy(source: str, target: str) -> None:
    """The test file with ``test_config`` emptied (but one compile thread)."""
    with open(source) as f:
        text = f.read()
    pattern = re.compile(r"^test_config = \{.*?^\}", re.MULTILINE | re.DOTALL)
    if len(pattern.findall(text)) != 1:
        raise SystemExit(f"{source}: expected one top-level `test_config = {{...}}` block")
    text = pattern.sub('test_config = {"compile_threads": 1}', text)
    with open(target, "w") as f:
        f.write(text)


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_suite(
    name: str, suite_dir: str, timeout: float, cpu: bool, keyword: str | None, gpu: str | None
) -> dict:
    overlay, test_file = RUNS[name]
    work = tempfile.mkdtemp(prefix=f"upstream-suite-{name}-")
    results = os.path.join(work, "results.jsonl")
    record = os.path.join(work, "generate.jsonl")
    env = dict(os.environ)
    env.update(
        FXU_OVERLAY="1" if overlay else "0",
        FXU_RECORD=record,
        FXU_RESULTS=results,
        FXU_CPU="1" if cpu else "0",
    )
    if not cpu:
        env.pop("TRITON_INTERPRET", None)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", test_file]
    if keyword:
        command += ["-k", keyword]
    child = harness.run_child(command, cwd=suite_dir, env=env, timeout=timeout)
    return {
        "name": name,
        "gpu": gpu,
        "overlay": overlay,
        "file": test_file,
        "seconds": child.seconds,
        "timed_out": child.timed_out,
        "cases": read_outcomes(results),
        "calls": read_jsonl(record),
        "tail": "\n".join(child.tail(15)),
    }


def read_jsonl(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_outcomes(path: str) -> list[dict]:
    """Per test: error (setup or teardown failed), failed, skipped or passed."""
    cases: dict[str, dict] = {}
    for entry in read_jsonl(path):
        test_id = entry["id"].split("::", 1)[-1]
        case = cases.setdefault(test_id, {"id": test_id, "outcome": "passed", "message": ""})
        if entry["outcome"] == "failed":
            outcome = "failed" if entry["when"] == "call" else "error"
            if case["outcome"] != "error":
                case.update(outcome=outcome, message=entry["message"])
        elif entry["outcome"] == "skipped" and case["outcome"] == "passed":
            case.update(outcome="skipped", message=entry["message"])
    return list(cases.values())


TITLE = "Upstream's test_fxir_backend.py with the overlay"


def method_lines(args: argparse.Namespace) -> list[str]:
    return [
        f"- Suite: `{os.path.join(args.suite_dir, TEST_FILE)}`"
        + (f", `-k {args.k}`" if args.k else "")
        + (" on CPU (Triton's interpreter, to check the harness)" if args.device == "cpu" else "")
        + ".",
        "- Caches on (upstream's `InductorTestCase`: FX graph cache and AOTAutograd cache, "
        "a fresh cache dir per test).",
    ]


def render(results: list[dict]) -> list[str]:
    """The table of the runs finished so far, then each run's failures and generate calls."""
    lines = [
        "| run | overlay | config | passed | failed | errors | skipped | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        if "skipped" in result and isinstance(result["skipped"], str):
            lines.append(f"| {result['name']} | | | not run: {result['skipped']} | | | | |")
            continue
        counts = collections.Counter(case["outcome"] for case in result["cases"])
        config_name = "own" if result["file"] == TEST_FILE else "default"
        timed_out = " (timed out)" if result["timed_out"] else ""
        lines.append(
            f"| {result['name']} | {'on' if result['overlay'] else 'off'} | {config_name} "
            f"| {counts['passed']} | {counts['failed']} | {counts['error']} "
            f"| {counts['skipped']} | {result['seconds']:.0f}{timed_out} |"
        )
    for result in results:
        if "cases" not in result:
            continue
        lines += ["", f"## {result['name']}", ""]
        if not result["cases"] or result["timed_out"]:
            lines += ["The end of pytest's output:", ""]
            lines += ["```", result["tail"], "```", ""]
        bad = [case for case in result["cases"] if case["outcome"] in ("failed", "error")]
        lines += [f"- {case['id']}: **{case['outcome']}**: {case['message']}" for case in bad]
        if result["cases"] and not bad:
            lines.append("No failures.")
        by_test = collections.defaultdict(list)
        for call in result["calls"]:
            by_test[call["test"]].append(call)
        shown = [
            test
            for test in by_test
            if test
            and (
                any(test.endswith(f"::{w}") for w in WATCHED)
                or any(test.endswith(case["id"].split("::")[-1]) for case in bad)
            )
        ]
        for test in shown:
            lines += ["", f"`FxConverter.generate` calls of `{test}`:", ""]
            lines += ["| compile id | graph | thread | Triton kernels | other ops | settings |"]
            lines += ["|---|---|---|---|---|---|"]
            for call in by_test[test]:
                kind = (
                    "backward"
                    if call["backward"]
                    else "subgraph"
                    if call["subgraph"]
                    else ("inference" if call["inference"] else "forward")
                )
                settings = ", ".join(f"{k}={v}" for k, v in call["settings"].items())
                lines.append(
                    f"| {call['compile_id']} | {kind} | {call['thread']} "
                    f"| {len(call['kernels'])}: {', '.join(call['kernels'])} "
                    f"| {', '.join(call.get('extern', []))} | {settings} |"
                )
    lines.append("")
    for result in results:
        if "cases" in result:
            counts = collections.Counter(case["outcome"] for case in result["cases"])
            key = result["name"].replace("-", "_")
            lines.append(f"upstream_suite_{key}_passed: {counts['passed']}")
            lines.append(f"upstream_suite_{key}_failed: {counts['failed'] + counts['error']}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
