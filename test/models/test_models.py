"""The model sweep (``benchmarks/models.py``, cases in ``docs/models.md``) as tests.

Real data-dependent code from transformers, torchvision and torch_geometric,
compiled as users compile it (``fullgraph=False``), static and dynamic, through
the FX backend, against eager on two inputs whose data-dependent sizes differ.
Each compile must produce FX graphs that define every unbacked symbol they use.
The libraries come from the ``models`` extra; without them the file is skipped.
On CPU, a case whose kernels need ``libdevice`` (which Triton's interpreter
lacks) is skipped naming it; the GPU run of the benchmark covers it.
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
    if DEVICE == "cpu" and case.cpu_limit:
        pytest.skip(f"{case.name} needs a GPU on CPU-only machines ({case.cpu_limit})")
    with models.sweep_config(DEVICE):
        built = case.build(DEVICE)
        torch.manual_seed(0)
        expected = [models.call(built, built.fn, args, case.train) for args in built.inputs]
        outcome = models.compile_and_check(case, built, expected, DEVICE, dynamic, "fx")
    if outcome.status == "needs GPU":
        pytest.skip(f"{case.name}: {outcome.detail}")
    assert outcome.status == "pass", f"{case.name}: {outcome.status} ({outcome.detail})"
    assert outcome.fx_graphs > 0


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU mode's limit")
def test_the_cpu_limit_of_whole_models_is_rmsnorm():
    """Whole models are skipped on CPU for their RMSNorm: check that this is the reason."""
    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.codegen.converters import InterpreterUnsupportedError

    model = models.tiny_moe_model("mixtral", DEVICE)
    norm = model.model.norm
    with models.sweep_config(DEVICE), ifx.fx_backend(DEVICE):
        with pytest.raises(Exception, match=r"libdevice\.rsqrt") as raised:
            torch.compile(norm)(torch.randn(1, 5, 16))
    chain = [raised.value, raised.value.__cause__, raised.value.__context__]
    assert any(isinstance(error, InterpreterUnsupportedError) for error in chain)
    assert models.RMSNORM_LIMIT.endswith("libdevice.rsqrt")


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
