# Owner(s): ["module: inductor"]
"""Kernels that call ``libdevice`` (rsqrt, erf, tanh, pow, signbit, ...) through the FX
backend: on a GPU libdevice's own, on CPU the CPU mode's
(``codegen/interpreted_libdevice.py``). Each program is compiled once and run on
selections of two lengths whose values include NaN, inf, zeros and negatives; its
kernels must call the function named, and its results equal eager's.
"""

from __future__ import annotations

import inspect
import os
import re

import pytest
import torch
import torch.nn.functional as F
import triton
from programs import data_dependent_dynamo

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.artifact.kernels import owned_kernels
from inductor_fx_unbacked.codegen import interpreted_libdevice
from inductor_fx_unbacked.codegen.converters import InterpreterUnsupportedError, check_interpretable

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
full = pytest.mark.full


@pytest.fixture(autouse=True)
def dynamo_config():
    with data_dependent_dynamo():
        yield


def _bound(x):
    return x / 4 - x.floor() / 4


def _frexp_product(x):
    mantissa, exponent = torch.frexp(x)
    return mantissa * exponent


#: name -> (the libdevice functions its kernels call, the program over a selection).
PROGRAMS = {
    "rsqrt": ({"rsqrt"}, lambda s: torch.rsqrt(s)),
    "layer_norm": ({"rsqrt"}, lambda s: F.layer_norm(torch.stack([s, -2 * s, s + 1], 1), (3,))),
    # Clamped: eager's CPU kernel gives NaN for gelu(inf), the formula (and a GPU) inf.
    "gelu": ({"erf"}, lambda s: F.gelu(s.clamp(max=1e3))),
    "remainder": ({"signbit"}, lambda s: torch.remainder(s * 7, 1.5)),
    "mish": ({"exp", "log1p", "tanh"}, lambda s: F.mish(s)),
    # Inductor 2.10 writes minimum(0.0, x): a comparison of a constant, broadcast
    # (``integration/cpu_comparisons.py``).
    "bce_with_logits": (
        {"exp", "log1p"},
        lambda s: F.binary_cross_entropy_with_logits(s - 2, torch.sigmoid(s), reduction="none"),
    ),
    "pow": ({"pow"}, lambda s: torch.pow(s.abs(), s - 0.5)),
    "atan2": ({"atan2"}, lambda s: torch.atan2(s, s - 1)),
    "fmod": ({"fmod"}, lambda s: torch.fmod(s * 7, 1.5)),
    "hypot": ({"hypot"}, lambda s: torch.hypot(s, s - 2)),
    "copysign": ({"copysign"}, lambda s: torch.copysign(s, s - 1)),
    "rounding": (
        {"trunc", "floor", "ceil", "nearbyint"},
        lambda s: torch.trunc(s * 3) + torch.floor(s * 5) + torch.ceil(s * 7) + torch.round(s * 9),
    ),
    "logs": ({"log2", "log10", "log1p"}, lambda s: torch.log2(s) + torch.log10(s) + s.log1p()),
    "exps": ({"exp2", "expm1"}, lambda s: torch.exp2(s) + torch.expm1(s)),
    "hyperbolic": (
        {"sinh", "cosh", "asinh", "acosh", "atanh"},
        lambda s: s.sinh() + s.cosh() + s.asinh() + (s + 1).acosh() + _bound(s).atanh(),
    ),
    "trigonometric": (
        {"tan", "asin", "acos", "atan"},
        lambda s: s.tan() + _bound(s).asin() + _bound(s).acos() + s.atan(),
    ),
    "error_functions": (
        {"erfc", "erfinv", "erfcx"},
        lambda s: s.erfc() + _bound(s).erfinv() + torch.special.erfcx(s),
    ),
    # Finite: CUDA's cyl_bessel_i1(inf) is NaN, ATen's inf.
    "gamma_and_bessel": (
        {"lgamma", "cyl_bessel_i0", "cyl_bessel_i1"},
        lambda s: (
            torch.lgamma(s) + torch.special.i0(s.clamp(max=50)) + torch.special.i1(s.clamp(max=50))
        ),
    ),
    # Through triton_helpers (frexp, nextafter), or as Inductor's release writes it
    # (ldexp; floor division also calls isnan and isinf on 2.15); Inductor before
    # 2.15 gives inf for frexp and floor division of inf where eager gives NaN, so
    # those two take finite values, and the divisor is a power of two (on a GPU,
    # Inductor's floor(30 / 0.3) is 100, eager's 99).
    "ldexp": (set(), lambda s: torch.ldexp(s, torch.tensor(3, device=s.device))),
    "frexp": (set(), lambda s: _frexp_product(s.clamp(max=1e30))),
    "nextafter": (set(), lambda s: torch.nextafter(s, s - 1)),
    "floor_divide": ({"floor"}, lambda s: s.clamp(max=1e30) // 0.25),
    "float64": ({"exp", "tanh"}, lambda s: s.double().exp() + s.double().tanh()),
}
#: The default tier's: normalisation, exact GELU, remainder and a helper's.
DEFAULT_TIER = {"layer_norm", "gelu", "remainder", "frexp"}


def _selections(counts, n=24):
    """Inputs whose positives (the selection) number ``counts``, with NaN, inf, -inf,
    zero and large values around them."""
    inputs = []
    for count in counts:
        x = -torch.rand(n, dtype=torch.float32) - 0.5
        x[:count] = torch.rand(count) * 4 + 1e-3
        if count >= 4:
            x[:4] = torch.tensor([float("inf"), 1e-30, 30.0, 2.5])
        x[n - 3 :] = torch.tensor([float("nan"), float("-inf"), 0.0])
        inputs.append(x.to(DEVICE))
    return inputs


def _libdevice_calls(graphs):
    calls = set()
    for gm in graphs:
        for entry in owned_kernels(gm).triton.values():
            calls |= set(re.findall(r"\blibdevice\.(\w+)\(", entry.source.module_code))
    return calls


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=() if name in DEFAULT_TIER else full) for name in PROGRAMS],
)
def test_a_kernel_that_calls_libdevice_matches_eager(name):
    functions, program = PROGRAMS[name]

    def fn(x):
        return program(x[x > 0])

    with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
        compiled = torch.compile(fn, fullgraph=True, dynamic=True)
        for x in _selections((9, 2)):
            torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)
    assert graphs, "the program did not compile through the FX backend"
    assert functions <= _libdevice_calls(graphs)


def test_the_table_covers_every_symbol_of_the_functions_it_binds():
    """The CPU mode binds each name of ``FUNCTIONS`` to Triton's CUDA libdevice
    function, which may pick any of its symbols: each must be computed."""
    from triton.language.extra.cuda import libdevice as cuda_libdevice

    for name in sorted(interpreted_libdevice.FUNCTIONS):
        function = getattr(cuda_libdevice, name)
        symbols = re.findall(r'"(__nv_\w+)"', inspect.getsource(function))
        assert symbols, name
        missing = [s for s in symbols if s not in interpreted_libdevice.SYMBOLS]
        assert not missing, f"libdevice.{name}: {missing} not computed"


_VALUES = [0.0, -0.0, 1e-40, -2.5, 0.5, 3.0, 100.0, float("inf"), float("-inf"), float("nan")]
_UNARY = {
    "__nv_rsqrt": torch.rsqrt,
    "__nv_erf": torch.erf,
    "__nv_erfinv": torch.erfinv,
    "__nv_lgamma": torch.lgamma,
    "__nv_tanh": torch.tanh,
    "__nv_expm1": torch.expm1,
    "__nv_log1p": torch.log1p,
    "__nv_nearbyint": torch.round,
    "__nv_cyl_bessel_i1": torch.special.i1,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("symbol", sorted(_UNARY))
def test_the_table_computes_as_torch_in_the_operands_dtype(symbol, dtype):
    x = torch.tensor(_VALUES, dtype=dtype)
    suffix = "f" if dtype == torch.float32 else ""
    computed = interpreted_libdevice.compute(symbol + suffix, x.numpy())
    assert computed.dtype == x.numpy().dtype
    torch.testing.assert_close(torch.from_numpy(computed), _UNARY[symbol](x), equal_nan=True)


def numpy_of(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype).numpy()


def test_the_integer_results_of_the_table():
    x = numpy_of([0.0, -0.0, 1e-40, 0.75, -6.0, float("inf"), float("nan")])
    signbit = interpreted_libdevice.compute("__nv_signbitf", x)
    assert signbit.dtype.name == "int32" and signbit.tolist() == [0, 1, 0, 0, 1, 0, 0]
    ilogb = interpreted_libdevice.compute("__nv_ilogbf", x).tolist()
    int_min, int_max = -(2**31), 2**31 - 1
    assert ilogb == [int_min, int_min, -133, -1, 2, int_max, int_min]
    powi = interpreted_libdevice.compute("__nv_powif", x, numpy_of([3] * 7, torch.int32))
    assert powi.dtype.name == "float32" and powi[4] == -216.0


def test_a_libdevice_function_the_cpu_mode_lacks_is_refused_naming_it():
    computed = "tmp1 = libdevice.rsqrt(tmp0)\ntmp2 = libdevice.erf(tmp1)\n"
    check_interpretable("k", computed)
    with pytest.raises(InterpreterUnsupportedError, match=r"calls libdevice\.fast_dividef, which"):
        check_interpretable("k", computed + "tmp3 = libdevice.fast_dividef(tmp1, tmp2)")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the CPU mode's binding")
def test_the_binding_ends_with_the_launch():
    """Triton's stubs are what other code sees between launches."""
    from torch._inductor.runtime import triton_compat

    stubs = triton_compat.libdevice
    stub = stubs.rsqrt
    assert "return" not in inspect.getsource(stub)  # a stub: ``...``
    with ifx.fx_backend(DEVICE):
        compiled = torch.compile(lambda x: torch.rsqrt(x[x > 0]), fullgraph=True)
        x = _selections((5,))[0]
        torch.testing.assert_close(compiled(x), torch.rsqrt(x[x > 0]))
    assert stubs.rsqrt is stub
    assert triton.language.extra.libdevice.erf.__module__ == "triton.language.extra.libdevice"
