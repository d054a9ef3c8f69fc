"""The realistic benchmark's smoke run on CPU (``--quick``, Triton's interpreter), for real."""

import re
import subprocess
import sys

import pytest
import torch

from benchmarks import harness, models, realistic

PROGRAMS = ("unique_ids", "active_coordinates")
SUMMARY = (
    "realistic_geomean_direct_over_eager",
    "realistic_max_direct_over_eager",
    "realistic_max_fx_over_eager",
    "models_max_fx_over_eager",
    "models_geomean_fx_over_eager",
    "copy_bandwidth_gbs",
    "models_direct_accepted",
    "compaction_bandwidth_fraction",
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
    assert "models_direct_accepted: not measured" in lines
    fraction = r"^compaction_bandwidth_fraction: \d+\.\d+  \(active_coordinates_\w+; 2 cases\)$"
    assert re.search(fraction, quick_report, re.M)
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


def test_batched_nms_boxes_are_exact_under_the_coordinate_trick():
    """On a GPU, torchvision's batched_nms offsets each class's boxes by
    ``class * (max + 1)``; a compiled kernel rounds that product and sum once, eager
    twice. With whole-pixel boxes neither rounds, so both keep the same boxes."""
    g = torch.Generator().manual_seed(3)
    for whole_pixels, exact in ((True, True), (False, False)):
        boxes = models.random_boxes(20_000, 800, g, whole_pixels=whole_pixels)
        classes = torch.randint(0, 80, (20_000,), generator=g).float()
        offsets = classes * (boxes.max() + 1)
        twice = boxes + offsets[:, None]
        once = (boxes.double() + classes.double()[:, None] * (boxes.max().double() + 1)).float()
        assert torch.equal(twice, once) == exact


def test_a_result_is_judged_against_float64_as_torchbench_does():
    g = torch.Generator().manual_seed(0)
    fp64 = torch.randn(4096, generator=g, dtype=torch.float64)
    eager = fp64.bfloat16()
    flipped = eager.clone()
    flipped[:8] = flipped[8:16]  # a few routing flips: large, rare differences
    assert realistic.difference(flipped, eager) is not None
    eager_flipped = eager.clone()
    eager_flipped[16:24] = eager[24:32]  # eager's own flips elsewhere
    assert realistic.as_close_to_float64(flipped, eager_flipped, fp64)
    wrong = eager * 1.1
    assert not realistic.as_close_to_float64(wrong, eager_flipped, fp64)


def test_models_direct_accepted_counts_the_direct_calls_at_most_080_of_eager():
    def case(name, **ratios):
        cells = {
            backend: realistic.Cell(ratio={"ratio": r, "low": r, "high": r})
            for backend, r in ratios.items()
        }
        cells["direct+cudagraphs"] = cells.pop("direct_cudagraphs", realistic.Cell("refused"))
        return realistic.Case(name, "", "", cells=cells)

    cases = [
        case("fast", direct=0.9, direct_cudagraphs=0.5),  # the faster direct call counts
        case("slow", direct=0.81),
        case("at the goal", direct=0.80),
        case("refused", fx=0.3),  # torch.compile's fx is not the direct call
    ]
    assert realistic.direct_accepted_line(cases) == (
        "models_direct_accepted: 2/4  (at most 0.80 of eager's time; 3 accepted at any time)"
    )


def test_direct_fused_is_the_direct_call_compiled_with_fused_selections():
    """``direct-fused`` lowers the selection after its predicate kernel into a fused
    call; ``direct`` (fusion off by default) keeps the graph's pair; both equal eager
    on two kept counts."""
    from inductor_fx_unbacked.runner import fused_selections

    def program(x):
        return torch.masked_select(x, x > 0.5)

    x = torch.rand(5000)
    found = {}
    for backend in ("direct", "direct-fused"):
        artifact = realistic.compiled(backend, program, (x,))
        found[backend] = [
            v
            for v in artifact._run.__globals__.values()
            if isinstance(v, fused_selections.FusedSelection)
        ]
        for other in (x, torch.rand(3000) * 0.6):
            torch.testing.assert_close(artifact(other), program(other))
    assert not found["direct"] and len(found["direct-fused"]) == 1
    assert not fused_selections.ENABLED
