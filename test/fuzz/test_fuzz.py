"""The differential fuzzer on fixed seeds: generated data-dependent programs compile
to what eager computes, or are refused clearly.

The programs (``fuzz_programs.py``) and the runner (``fuzz_runner.py``) are those of
the GPU command ``python -m benchmarks.fuzz`` (``docs/fuzzing.md``); here a fixed
list of seeds runs on the device in one worker process, which is replaced when a
program kills it. A failing seed prints its program as a standalone script, the
regression test to keep.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from fuzz_programs import FAMILIES, digest, generate
from fuzz_runner import Pool, compare, is_refusal, reference_in_float, repro_text, verdict

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
#: About 2 s a program on CPU (Triton's interpreter), one core: 64 s with the
#: worker's start.
CI_SEEDS = range(30)
#: Seeds whose programs failed on the H200 or on CPU (``benchmarks/results/``), kept as
#: regression tests: the direct call's self-check refused float16 intermediates
#: that eager rounds (seven), and ``torch.unique(..., return_counts=True)`` of int32
#: values counted wrong on the GPU (2026-12-03, two); a float32 sum over selected rows
#: of ``pow(0.5)`` off by 0.07 in one column with ``sync_free=False`` and the direct
#: call, in a worker that had compiled about 110 programs first (2026-12-03, undiagnosed:
#: right on CPU and right there with the sync-free rewrite; the column's sum is exactly
#: eager's with its last element's square root taken twice); and a 2-D kernel over the
#: rows of an empty selection, whose grid divided by zero with ``dynamic=True``
#: (2026-12-03, two of six seeds; GPU only, where Inductor tiles it); and
#: ``log(log(sqrt(x)))`` of float16 near 1, where every mode kept the chain in float32
#: and eager rounds each step (2026-12-03; the oracle's fault: it now also accepts
#: eager in float32); and three column sums over the rows of a selection, wrong on an
#: input that selects more rows than the first (2026-12-04, GPU only, static shapes;
#: not yet diagnosed); a split scan that ends its graph, whose workspace upstream's
#: pass that drops the trailing frees could not name (2026-12-04, CPU); a float16
#: product of 22 square roots, which the direct call's self-check refused (it
#: compared with eager alone, whose roundings compound; 2026-12-04, H200 and CPU); a
#: slice ``[:1]`` of a selection of a one-element tensor, whose length symbol Inductor
#: 2.10 and 2.11 left undefined (2026-12-05, H100 and CPU on 2.10).
FOUND_SEEDS = (
    1796310348,
    1796310482,
    1796310596,
    1796310713,
    1796310881,
    1796310960,
    1796310977,
    1796311109,
    1796311117,
    1796320308,
    1796337366,
    1796337387,
    1796341134,
    1796352046,
    1796352438,
    1796353418,
    1796353589,
    1799402445,
    1850002178,
)
#: ``digest(range(300))``: the generator's text for these seeds. It does not depend
#: on torch (every value is a literal drawn from Python's ``random``); change it
#: only with the generator.
GENERATOR_DIGEST = "ed53ac0d498ecf54"


def test_the_same_seeds_give_the_same_programs_on_every_release():
    assert digest(range(300)) == GENERATOR_DIGEST
    assert generate(7).source == generate(7).source


def test_the_seeds_cover_every_family_and_selection_sizes_that_differ():
    programs = [generate(seed) for seed in range(300)]
    assert {p.family for p in programs} == set(FAMILIES)
    assert all(len(set(p.sizes)) >= 2 for p in programs)
    assert any(0 in p.sizes for p in programs) and any(1 in p.sizes for p in programs)


def test_every_generated_program_runs_eagerly():
    for seed in range(300):
        program = generate(seed)
        namespace = program.namespace()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for case in namespace["INPUTS"]:
                namespace["program"](*case)


def test_half_precision_is_judged_against_eager_in_float32_too():
    # log(log(sqrt(x))) near 1 amplifies each float16 rounding of eager's steps some
    # 200 times: a kernel that keeps the chain in float32 and rounds once is right.
    x = torch.tensor([1.01, 1.05, 2.0, 0.5, -1.0], dtype=torch.float16)

    def chain(x):
        return x.sqrt().log().log()

    eager = chain(x)
    rounded_once = chain(x.float()).half()
    assert compare(eager, rounded_once, False, torch.float16) is not None
    (in_float,) = reference_in_float(chain, [(x,)], [eager])
    assert in_float.dtype == torch.float16
    assert compare(in_float, rounded_once, False, torch.float16) is None
    # A wrong value differs from both.
    wrong = rounded_once.clone()
    wrong[2] += 0.01
    assert compare(eager, wrong, False, torch.float16) is not None
    assert compare(in_float, wrong, False, torch.float16) is not None


def test_a_direct_call_refused_for_an_internal_error_is_a_crash():
    import inductor_fx_unbacked as ifx

    failed = "Inductor cannot compile this program: "
    internal = ifx.CompileError(failed + "AttributeError: 'WorkspaceArg' object has no attribute")
    assert not is_refusal(internal)
    assert not is_refusal(ifx.CompileError("the result differs from eager's: ..."))
    assert is_refusal(ifx.CompileError(failed + "InterpreterUnsupportedError: libdevice.exp"))
    assert is_refusal(ifx.CompileError("graph input w is read from G['w'], not an argument"))
    assert not is_refusal(AttributeError("'WorkspaceArg' object has no attribute 'name'"))


def test_fixed_seeds_compile_to_what_eager_computes_or_are_refused():
    failures = []
    pool = Pool(
        DEVICE,
        workers=1,
        program_timeout_s=float(os.environ.get("IFX_FUZZ_TIMEOUT_S", 300)),
        rerun_failures=True,
    )
    seeds = [*CI_SEEDS, *FOUND_SEEDS]
    for record in pool.run(seeds):
        if verdict(record) in ("crash", "mismatch", "skipped"):
            failures.append(repro_text(record, generate(record["seed"]).source))
    if failures:
        pytest.fail(
            f"{len(failures)} of {len(seeds)} programs failed:\n\n" + "\n\n".join(failures),
            pytrace=False,
        )


#: A seed of each family whose program reaches a fused selection (found with fusion on,
#: 2026-12-07, CPU): run with the runner's own kernels, which a GPU runs anyway. The
#: fuzzer's inputs fit one block; test_fxir_fused_selections covers several.
FUSED_SEEDS = (52016, 52022, 52029, 52000, 52002, 52007, 52121, 52004)


@pytest.mark.full
def test_seeds_that_reach_fused_selections_run_through_the_runners_kernels():
    pool = Pool(DEVICE, workers=1, program_timeout_s=300, runner_kernels=True)
    failures = [
        repro_text(record, generate(record["seed"]).source)
        for record in pool.run(FUSED_SEEDS)
        if verdict(record) in ("crash", "mismatch", "skipped")
    ]
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)


def test_a_record_names_the_programs_its_worker_ran_before_and_a_rerun_runs_alone():
    """What a failure that only shows after other compiles needs to be replayed."""
    pool = Pool(DEVICE, workers=1, program_timeout_s=300)
    records = {record["seed"]: record for record in pool.run([3, 4])}
    assert records[3]["after"] == [] and records[4]["after"] == [3]
    assert pool._alone(4) == verdict(records[4])
