"""The differential fuzzer at scale: as many generated programs as fit the budget.

    python -m benchmarks.fuzz --programs 20000 --budget-s 500 --seed-base $(date +%s) \\
        --out benchmarks/results/DATE-h200-fuzz.md
    python -m benchmarks.fuzz --device cpu --programs 4 --workers 1   # a smoke run
    python -m benchmarks.fuzz --sum RUN1.md RUN2.md --out TOTAL.md     # runs added up

Programs ``seed-base .. seed-base + programs - 1`` (``test/fuzz/fuzz_programs.py``)
run in ``--workers`` worker processes (default: three per four CPU cores, at most 16,
all on one GPU), each compiling program after program eager, through ``torch.compile``
with ``fx_backend`` (``sync_free`` on and off) and through ``ifx.compile``
(``test/fuzz/fuzz_runner.py``). No program starts after ``--budget-s``; one still
running a minute later is dropped, not counted. The markdown report is rewritten
after every program: counts per family and per mode, then every failure as a
standalone script (its program, inputs and outcomes), and ends with
``fuzz_programs``, ``fuzz_mismatches``, ``fuzz_crashes`` (programs with at least one
mode so judged). Exits with 1 when a program failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
import time
from pathlib import Path

from benchmarks import harness

FUZZ_DIR = harness.ROOT / "test" / "fuzz"
TITLE = "Differential fuzzer: generated data-dependent programs against eager"
#: Failures shown whole in the report; the rest by seed only.
SHOWN_FAILURES = 25


def default_workers() -> int:
    """Three workers per four CPU cores (12 on a 16-core H200 host): compiling is
    CPU-bound, one core each, and the GPU has room for every worker's context."""
    return max(1, min(16, (os.cpu_count() or 2) * 3 // 4))


def mean_seconds(records: list[dict]) -> dict[str, float]:
    """Mean seconds per program of each mode that ran, and of whole programs (``all``)."""
    from fuzz_runner import MODES

    times = {
        mode: [r["mode_seconds"][mode] for r in records if mode in r.get("mode_seconds", {})]
        for mode in MODES
    }
    times["all"] = [r["seconds"] for r in records if "seconds" in r]
    return {mode: statistics.fmean(values) for mode, values in times.items() if values}


def report_lines(records: list[dict], sources: dict[int, str], args, seconds: float) -> list[str]:
    from fuzz_runner import MODES, repro_text, verdict

    verdicts = collections.Counter(verdict(record) for record in records)
    families = collections.Counter(record["family"] for record in records)
    per_mode = {mode: collections.Counter() for mode in MODES}
    for record in records:
        for mode, outcome in record["modes"].items():
            per_mode.setdefault(mode, collections.Counter())[outcome["outcome"]] += 1
    failures = [r for r in records if verdict(r) in ("crash", "mismatch")]
    counted = [r for r in records if verdict(r) != "skipped"]
    lines = [
        f"Seeds {args.seed_base} .. {args.seed_base + args.programs - 1}, {args.workers} workers; "
        f"{len(records)} programs in {seconds:.0f} s.",
        "",
        "| verdict | programs |",
        "|---|---|",
        *(
            f"| {kind} | {verdicts[kind]} |"
            for kind in ("ok", "refused", "mismatch", "crash", "skipped")
        ),
        "",
        "| mode | " + " | ".join(("ok", "refused", "mismatch", "crash")) + " |",
        "|---|---|---|---|---|",
        *(
            f"| {mode} | "
            + " | ".join(str(c[k]) for k in ("ok", "refused", "mismatch", "crash"))
            + " |"
            for mode, c in per_mode.items()
        ),
        "",
        "Mean seconds per program, by mode (compile and calls, programs that compiled): "
        + ", ".join(f"{mode} {seconds:.2f}" for mode, seconds in mean_seconds(records).items())
        + ".",
        "",
        "Families: " + ", ".join(f"{name} {n}" for name, n in sorted(families.items())) + ".",
        "",
        "A program is a *mismatch* or a *crash* when one of its modes is (a crash wins);",
        "*refused*: a clear refusal (`ifx.CompileError` that names no internal error,",
        "Dynamo refusing a data-dependent guard); *skipped*: eager raised (the",
        "generator's fault).",
        "",
        *refusal_lines(records),
    ]
    if failures:
        lines += ["## Failures", ""]
        for record in failures[:SHOWN_FAILURES]:
            lines += ["```python", repro_text(record, sources[record["seed"]]).rstrip(), "```", ""]
        rest = [str(r["seed"]) for r in failures[SHOWN_FAILURES:]]
        if rest:
            lines += [f"More failing seeds: {', '.join(rest)}.", ""]
    lines += [
        f"fuzz_programs: {len(counted)}",
        f"fuzz_mismatches: {sum(1 for r in counted if verdict(r) == 'mismatch')}",
        f"fuzz_crashes: {sum(1 for r in counted if verdict(r) == 'crash')}",
    ]
    return lines


def refusal_lines(records: list[dict]) -> list[str]:
    """How often each reason for a refusal came, by mode: a table, so that a reader
    sees what the refusals were (each reason's first line, numbers as ``N``)."""
    reasons: collections.Counter = collections.Counter()
    for record in records:
        for mode, outcome in record["modes"].items():
            if outcome["outcome"] == "refused":
                first = outcome["message"].splitlines()[0] if outcome["message"] else ""
                reasons[mode, re.sub(r"\d+", "N", first)[:160]] += 1
    if not reasons:
        return []
    rows = [
        f"| {mode} | {n} | {why.replace('|', '/')} |" for (mode, why), n in reasons.most_common()
    ]
    return ["| mode | refusals | reason |", "|---|---|---|", *rows, ""]


#: The summary lines a report ends with, and the header line naming its seeds.
_TOTALS = ("fuzz_programs", "fuzz_mismatches", "fuzz_crashes")
_SEEDS = re.compile(r"^Seeds (\d+) \.\. \d+, (\d+) workers; (\d+) programs in (\d+) s\.$")


def summed(paths: list[str]) -> list[str]:
    """One report over several runs' reports (each a GPU call, with its own new
    seeds): a row per run (its seeds, programs, commit) and the totals. Runs whose
    seed ranges overlap are refused: a program counts once."""
    rows, totals, ranges = [], dict.fromkeys(_TOTALS, 0), []
    for path in paths:
        text = Path(path).read_text()
        values = {
            key: int(m[1]) for key in _TOTALS if (m := re.search(rf"^{key}: (\d+)$", text, re.M))
        }
        seeds = next((m for line in text.splitlines() if (m := _SEEDS.match(line))), None)
        if set(values) != set(_TOTALS) or seeds is None:
            raise SystemExit(f"{path} is not a finished fuzzer report (no seeds or totals)")
        first, count = int(seeds[1]), int(seeds[3])
        if any(first < end and start < first + count for start, end in ranges):
            raise SystemExit(f"{path}: its seeds overlap another report's")
        ranges.append((first, first + count))
        commit = re.search(r"^- Code: commit (\w+)", text, re.M)
        rows.append(
            f"| {Path(path).name} | {commit[1] if commit else '?'} | {first} .. | "
            + " | ".join(str(values[key]) for key in _TOTALS)
            + " |"
        )
        for key in _TOTALS:
            totals[key] += values[key]
    return [
        "| report | commit | first seed | programs | mismatches | crashes |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        *(f"{key}: {totals[key]}" for key in _TOTALS),
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sum", nargs="+", metavar="REPORT", help="write one report over these runs' reports"
    )
    parser.add_argument("--programs", type=int, default=1000, help="seeds to run at most")
    parser.add_argument("--budget-s", type=float, default=500.0, help="no program starts past it")
    parser.add_argument(
        "--seed-base", type=int, default=None, help="default: the time, new each run"
    )
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--program-timeout-s", type=float, default=240.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.sum:
        lines = summed(args.sum)
        harness.Report(args.out, TITLE + ", several runs", []).replace(lines)
        print("\n".join(lines[-3:]))
        return 0

    import torch

    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.workers = args.workers or default_workers()
    if args.seed_base is None:
        args.seed_base = int(time.time())
    sys.path.insert(0, str(FUZZ_DIR))
    from fuzz_programs import generate
    from fuzz_runner import Pool, verdict

    started = time.monotonic()
    report = harness.Report(
        args.out,
        TITLE,
        harness.environment_lines(
            args.device,
            f"- Seeds from {args.seed_base}; a program's source: `python -c \"import sys; "
            "sys.path.insert(0, 'test/fuzz'); from fuzz_programs import generate; "
            'print(generate(SEED).source)"`.',
        ),
    )
    pool = Pool(
        args.device,
        workers=args.workers,
        program_timeout_s=args.program_timeout_s,
        deadline=started + args.budget_s,
        rerun_failures=True,
    )
    records: list[dict] = []
    sources: dict[int, str] = {}
    last_write = 0.0
    seeds = range(args.seed_base, args.seed_base + args.programs)
    for record in pool.run(seeds):
        records.append(record)
        if verdict(record) in ("crash", "mismatch"):
            sources[record["seed"]] = generate(record["seed"]).source
            print(f"seed {record['seed']}: {verdict(record)}", flush=True)
        if time.monotonic() - last_write > 5:
            report.replace(report_lines(records, sources, args, time.monotonic() - started))
            last_write = time.monotonic()
    lines = report_lines(records, sources, args, time.monotonic() - started)
    report.replace(lines)
    print("\n".join(lines[-3:]))
    return 1 if any(verdict(r) in ("crash", "mismatch") for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
