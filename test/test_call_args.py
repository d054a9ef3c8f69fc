"""The Triton call-argument reconciliation, on plain values."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inductor_fx_unbacked.codegen.triton_args import reconcile_triton_call_args

REDUCTION_SIGNATURE = ["in_ptr0", "out_ptr0", "xnumel", "r0_numel", "XBLOCK", "R0_BLOCK"]


def test_constant_that_is_also_passed_keeps_later_args_in_place():
    # A dynamic y.sum(): xnumel == 1 is both a call arg and a triton_meta constant.
    # Torch 2.9's cursor skipped the constant without consuming its call arg, so
    # r0_numel got 1 and the real numel fell onto XBLOCK.
    reconciled = reconcile_triton_call_args(
        signature=REDUCTION_SIGNATURE,
        constants={"xnumel": 1},
        call_args=["arg0", "buf0", 1, "s17*s94"],
        config_kwargs={"XBLOCK": 1, "R0_BLOCK": 1024},
    )
    assert reconciled.kernel_kwargs == {
        "in_ptr0": "arg0",
        "out_ptr0": "buf0",
        "xnumel": 1,
        "r0_numel": "s17*s94",
    }
    assert reconciled.launcher_kwargs == {}


def test_constants_win_over_passed_values():
    reconciled = reconcile_triton_call_args(
        signature=["in_ptr0", "xnumel", "XBLOCK"],
        constants={"xnumel": 1},
        call_args=["arg0", "u0"],
        config_kwargs={"XBLOCK": 8},
    )
    assert reconciled.kernel_kwargs == {"in_ptr0": "arg0", "xnumel": 1}


def test_constant_not_passed_is_filled_in():
    reconciled = reconcile_triton_call_args(
        signature=["in_ptr0", "out_ptr0", "n", "XBLOCK"],
        constants={"n": 4},
        call_args=["arg0", "buf0"],
        config_kwargs={"XBLOCK": 8},
    )
    assert reconciled.kernel_kwargs == {"in_ptr0": "arg0", "out_ptr0": "buf0", "n": 4}


def test_config_kwarg_in_the_middle_of_the_signature_is_skipped():
    # A user kernel whose autotuned BLOCK precedes a runtime argument.
    reconciled = reconcile_triton_call_args(
        signature=["x_ptr", "BLOCK", "n"],
        constants={},
        call_args=["arg0", 10],
        config_kwargs={"BLOCK": 64},
    )
    assert reconciled.kernel_kwargs == {"x_ptr": "arg0", "n": 10}


def test_only_declared_extra_launcher_args_are_appended():
    reconciled = reconcile_triton_call_args(
        signature=["in_ptr0", "xnumel", "XBLOCK"],
        constants={},
        call_args=["arg0", 100, 7, 1, 1],
        config_kwargs={"XBLOCK": 32},
        extra_launcher_args=["_grid_0", "_grid_1", "_grid_2"],
    )
    assert reconciled.kernel_kwargs == {"in_ptr0": "arg0", "xnumel": 100}
    assert reconciled.launcher_kwargs == {"_grid_0": 7, "_grid_1": 1, "_grid_2": 1}


def test_positional_value_landing_on_a_config_kwarg_asserts():
    with pytest.raises(
        AssertionError, match=r"value 1024 would land on a constexpr or config kwarg"
    ):
        reconcile_triton_call_args(
            signature=["in_ptr0", "xnumel", "XBLOCK"],
            constants={},
            call_args=["arg0", 100, 1024],
            config_kwargs={"XBLOCK": 32},
        )


def test_parameter_without_value_asserts():
    with pytest.raises(AssertionError, match=r"no call arg or constant for parameters \['n'\]"):
        reconcile_triton_call_args(
            signature=["in_ptr0", "n", "XBLOCK"],
            constants={},
            call_args=["arg0"],
            config_kwargs={"XBLOCK": 32},
        )


@given(
    n_params=st.integers(1, 6),
    n_config=st.integers(0, 3),
    constant_mask=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_every_parameter_gets_its_own_value_or_its_constant(n_params, n_config, constant_mask):
    params = [f"p{i}" for i in range(n_params)]
    config_kwargs = {f"BLOCK{i}": 2**i for i in range(n_config)}
    constants = {p: ("const", p) for p, is_const in zip(params, constant_mask) if is_const}
    reconciled = reconcile_triton_call_args(
        signature=params + list(config_kwargs),
        constants=constants,
        call_args=[("arg", p) for p in params],
        config_kwargs=config_kwargs,
    )
    assert list(reconciled.kernel_kwargs) == params
    for p in params:
        assert reconciled.kernel_kwargs[p] == constants.get(p, ("arg", p))


def test_user_kernel_constexpr_before_a_runtime_argument():
    # Inductor drops a user kernel's tl.constexpr parameters from the call args,
    # wherever they stand; the value comes from triton_meta's constants.
    reconciled = reconcile_triton_call_args(
        signature=["x_ptr", "BLOCK", "n"],
        constants={"BLOCK": 64},
        call_args=["arg0", 10],
        config_kwargs={},
        constexprs=["BLOCK"],
    )
    assert reconciled.kernel_kwargs == {"x_ptr": "arg0", "BLOCK": 64, "n": 10}


def test_user_kernel_constexpr_without_a_value_is_left_to_its_default():
    reconciled = reconcile_triton_call_args(
        signature=["x_ptr", "BLOCK", "n", "SCALE"],
        constants={"BLOCK": 64},
        call_args=["arg0", 10],
        config_kwargs={},
        constexprs=["BLOCK", "SCALE"],
    )
    assert reconciled.kernel_kwargs == {"x_ptr": "arg0", "BLOCK": 64, "n": 10}


def test_user_kernel_equal_to_one_argument_is_passed_and_constant():
    # An int argument equal to 1 is specialized: passed and in the constants.
    reconciled = reconcile_triton_call_args(
        signature=["x_ptr", "BLOCK", "stride", "n"],
        constants={"BLOCK": 64, "stride": 1},
        call_args=["arg0", 1, 10],
        config_kwargs={},
        constexprs=["BLOCK"],
    )
    assert reconciled.kernel_kwargs == {"x_ptr": "arg0", "BLOCK": 64, "stride": 1, "n": 10}


def test_value_landing_on_a_constexpr_asserts():
    with pytest.raises(
        AssertionError, match=r"3 positional call args for 2 non-constexpr parameters"
    ):
        reconcile_triton_call_args(
            signature=["x_ptr", "BLOCK", "n"],
            constants={"BLOCK": 64},
            call_args=["arg0", 64, 10],
            config_kwargs={},
            constexprs=["BLOCK"],
        )


def test_declared_constexprs_of_jit_and_interpreted_kernels():
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    from inductor_fx_unbacked.codegen.triton_args import declared_constexprs

    def kernel(x_ptr, BLOCK: tl.constexpr, n, SCALE: "tl.constexpr" = 2):
        pass

    assert declared_constexprs(triton.runtime.jit.JITFunction(kernel)) == ["BLOCK", "SCALE"]
    assert declared_constexprs(InterpretedFunction(kernel)) == ["BLOCK", "SCALE"]


@given(
    kinds=st.lists(st.sampled_from(["runtime", "constexpr", "config", "one"]), max_size=8),
    with_extra=st.booleans(),
)
def test_constexprs_anywhere_in_the_signature(kinds, with_extra):
    # Build a signature with parameters of every kind, in any order, and the call
    # args that Inductor passes for it: one per runtime or equal-to-1 parameter.
    signature = [f"{kind}{i}" for i, kind in enumerate(kinds)]
    constexprs = [p for p in signature if p.startswith("constexpr")]
    config_kwargs = {p: 16 for p in signature if p.startswith("config")}
    constants = {p: ("const", p) for p in constexprs} | {
        p: 1 for p in signature if p.startswith("one")
    }
    passed = [p for p in signature if p.startswith(("runtime", "one"))]
    extra = ["_grid_0"] if with_extra else []
    reconciled = reconcile_triton_call_args(
        signature=signature,
        constants=constants,
        call_args=[1 if p.startswith("one") else ("arg", p) for p in passed] + [7] * len(extra),
        config_kwargs=config_kwargs,
        extra_launcher_args=extra,
        constexprs=constexprs,
    )
    assert list(reconciled.kernel_kwargs) == [p for p in signature if p not in config_kwargs]
    for p, value in reconciled.kernel_kwargs.items():
        assert value == constants.get(p, ("arg", p))
    assert reconciled.launcher_kwargs == dict.fromkeys(extra, 7)
