"""The model sweep (``benchmarks/models.py``, cases in ``docs/models.md``) as tests.

Real data-dependent code from transformers, torchvision and torch_geometric,
compiled as users compile it (``fullgraph=False``), static and dynamic, through
the FX backend, against eager on two inputs whose data-dependent sizes differ.
Each compile must produce FX graphs that define every unbacked symbol they use.
The libraries come from the ``models`` extra; without them the file is skipped.
On CPU every case runs in Triton's interpreter (the CPU mode), whole models with
their RMSNorm (``libdevice.rsqrt``) too.
"""

import pytest
import torch

from benchmarks import models

_missing = models.missing_libraries()
if _missing:
    pytest.skip(
        f"the model sweep needs {', '.join(_missing)} (pip install -e '.[models]')",
        allow_module_level=True,
    )

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


#: One case of each library in the default tier; the rest in the full tier.
DEFAULT_TIER = {
    ("mixtral_moe_block", True),
    ("box_filtering", False),
    ("pyg_subgraph", True),
}


@pytest.mark.parametrize(
    "case, dynamic",
    [
        pytest.param(
            case,
            dynamic,
            id=f"{case.name}-{'dynamic' if dynamic else 'static'}",
            marks=() if (case.name, dynamic) in DEFAULT_TIER else pytest.mark.full,
        )
        for case in models.CASES
        for dynamic in (False, True)
    ],
)
def test_fx_backend_matches_eager(case, dynamic):
    with models.sweep_config(DEVICE):
        built = case.build(DEVICE)
        torch.manual_seed(0)
        expected = [models.call(built, built.fn, args, case.train) for args in built.inputs]
        outcome = models.compile_and_check(case, built, expected, DEVICE, dynamic, "fx")
    assert outcome.status == "pass", f"{case.name}: {outcome.status} ({outcome.detail})"
    assert outcome.fx_graphs > 0


def test_a_moe_models_float64_reference_has_its_weights():
    """The realistic benchmark judges a low-precision model's compiled results against
    this reference (``realistic.as_close_to_float64``); it must be the same model."""
    built = models.moe_forward("mixtral", dtype=torch.bfloat16)(DEVICE)
    (ids,) = built.inputs[0]
    reference = built.fp64(ids)
    assert reference.dtype == torch.float64
    eager = built.fn(ids)
    # bfloat16 logits of order 1: a few of their steps from the float64 ones.
    torch.testing.assert_close(eager.double(), reference, rtol=0.1, atol=0.1)
    other = models.moe_forward("mixtral", config={"hidden_size": 32})(DEVICE)
    assert (other.fp64(ids) - reference).abs().max() > 0.1  # another model's differ
