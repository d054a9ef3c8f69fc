"""Hand-written adversarial programs (``adversarial_programs.py``) in every mode of the
fuzzer: each computes what eager computes, or is refused clearly where Dynamo
cannot trace it into one graph; never a wrong value, never a crash."""

from __future__ import annotations

import textwrap

import pytest
import tiers
import torch
from adversarial_programs import P
from fuzz_programs import Program
from fuzz_runner import repro_text, run_program, verdict

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

#: Programs that Dynamo refuses to make one graph of for the direct call on some
#: releases: a log-sum-exp of a selection that may be empty guards on its length
#: being 0; ``take_along_dim`` of a selection needs its length as an integer (2.15).
#: ``fullgraph=False`` (the fuzzer's ``direct-breaks``) must then run them.
MAY_BE_REFUSED = {
    "logsumexp_empty",
    "take_along_dim_labels",
    # Dynamo breaks these on every release (the last programs of the file).
    "moe_loop_over_routed_experts",
    "branch_on_selected_count",
    "split_by_counts_to_host",
}
#: In the default tier: an out-of-range id, label and index each, a module with
#: parameters that require grad, and integer division by kept divisors.
DEFAULT_TIER = {
    "embedding_padding_ids",
    "cross_entropy_weight_smoothing",
    "negative_valid_indices",
    "module_layernorm_linear",
    "int_div_rows_counts",
}


def program(name: str) -> Program:
    source, reduces = P[name]
    index = list(P).index(name)
    return Program(
        seed=910_000 + index,
        family=f"adversarial {name}",
        source="import torch\n" + textwrap.dedent(source),
        sizes=(0, 1, 2),
        reduces=reduces,
    )


@pytest.mark.parametrize("name", tiers.tiered(P, DEFAULT_TIER.__contains__, str))
def test_adversarial_program_equals_eager_or_is_refused(name):
    adversarial = program(name)
    record = run_program(adversarial, DEVICE)
    outcome = verdict(record)
    allowed = ("ok", "refused") if name in MAY_BE_REFUSED else ("ok",)
    assert outcome in allowed, repro_text(record, adversarial.source)
    for mode in record["modes"].values():
        if mode["outcome"] == "refused":
            assert "data-dependent" in mode["message"], mode["message"]
    # What Dynamo cannot make one graph of, ifx.compile takes with fullgraph=False.
    breaks = record["modes"].get("direct-breaks")
    assert breaks is None or breaks["outcome"] == "ok", repro_text(record, adversarial.source)


@pytest.mark.parametrize("name", list(P))
def test_a_program_makes_its_tensors_on_its_inputs_device(name):
    """The runner moves a program's inputs and its module to the device, nothing else:
    a tensor or module at the source's top level, or one the program creates without
    naming a device, would be on the CPU, and eager would fail on a GPU (the program
    then counts as the generator's fault, which the test above refuses)."""
    namespace = program(name).namespace()
    fn = namespace["program"]
    code = type(fn).forward.__code__ if isinstance(fn, torch.nn.Module) else fn.__code__
    beside = {
        key
        for key, value in namespace.items()
        if isinstance(value, (torch.Tensor, torch.nn.Module)) and key != "program"
    }
    assert not beside & set(code.co_names), f"{name} reads {beside & set(code.co_names)}"
    # A tensor it creates names its device: under a default device of "meta", one
    # that does not meets the CPU inputs, which most operators refuse (not all:
    # scatter_reduce into a meta tensor takes CPU indices and sources).
    with torch.device("meta"):
        for case in namespace["INPUTS"]:
            fn(*case)
