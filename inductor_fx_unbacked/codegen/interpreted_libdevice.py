"""What libdevice's functions compute when Triton's interpreter runs a kernel (the
CPU mode), keyed by libdevice symbol.

Inductor's kernels call ``libdevice.rsqrt``, ``libdevice.erf``, ``libdevice.tanh``
and others (normalisation, exact GELU, ``pow``, ``atan2``, ``signbit``). Under
Triton's interpreter ``libdevice`` is a module of stubs, and the interpreter's
builder has no external calls. The CPU mode binds each stub to Triton's CUDA
libdevice function, which picks the symbol and the result's dtype from the
operands' dtypes as it does for a GPU, and gives the builder's external call the
function of this table for that symbol, computed with NumPy (or torch's CPU
kernels where NumPy has none) in the operands' dtype.

The values are IEEE's, as eager's on a CPU: subnormals are kept where CUDA's
libdevice flushes them, and an error of an ulp or two is within what Inductor's
kernels already differ from eager by. The converter refuses a kernel that calls a
function not in this table, when the graph is compiled.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy
import torch

Compute = Callable[..., numpy.ndarray]


def _by_torch(op: Callable[..., torch.Tensor]) -> Compute:
    """``op`` of torch's CPU kernels, on arrays: for what NumPy lacks (erf, lgamma, ...)."""

    def compute(*operands: numpy.ndarray) -> numpy.ndarray:
        tensors = [torch.from_numpy(numpy.ascontiguousarray(x)) for x in operands]
        return op(*tensors).numpy()

    return compute


def _ilogb(x: numpy.ndarray) -> numpy.ndarray:
    # C's ilogb: the unbiased exponent; FP_ILOGB0 (INT_MIN) for 0 and NaN, INT_MAX for inf.
    exponent = (numpy.frexp(x)[1] - 1).astype(numpy.int32)
    exponent = numpy.where((x == 0) | numpy.isnan(x), numpy.iinfo(numpy.int32).min, exponent)
    return numpy.where(numpy.isinf(x), numpy.iinfo(numpy.int32).max, exponent)


def _fma(a: numpy.ndarray, b: numpy.ndarray, c: numpy.ndarray) -> numpy.ndarray:
    # float32: the product is exact in float64, so one float64 sum rounds (nearly) once.
    if a.dtype == numpy.float32:
        return (a.astype(numpy.float64) * b + c).astype(numpy.float32)
    return a * b + c


def _flag(test: Compute) -> Compute:
    return lambda x: test(x).astype(numpy.int32)


#: Functions of one or more floats, as named by libdevice without ``__nv_`` and the
#: ``f`` of the float32 variant.
_FLOAT_FUNCTIONS: dict[str, Compute] = {
    "acos": numpy.arccos,
    "acosh": numpy.arccosh,
    "asin": numpy.arcsin,
    "asinh": numpy.arcsinh,
    "atan": numpy.arctan,
    "atan2": numpy.arctan2,
    "atanh": numpy.arctanh,
    "ceil": numpy.ceil,
    "copysign": numpy.copysign,
    "cos": numpy.cos,
    "cosh": numpy.cosh,
    "cyl_bessel_i0": _by_torch(torch.special.i0),
    "cyl_bessel_i1": _by_torch(torch.special.i1),
    "erf": _by_torch(torch.special.erf),
    "erfc": _by_torch(torch.special.erfc),
    "erfcx": _by_torch(torch.special.erfcx),
    "erfinv": _by_torch(torch.special.erfinv),
    "exp": numpy.exp,
    "exp2": numpy.exp2,
    "expm1": numpy.expm1,
    "floor": numpy.floor,
    "fma": _fma,
    "fmod": numpy.fmod,
    "hypot": numpy.hypot,
    "lgamma": _by_torch(torch.lgamma),
    "log": numpy.log,
    "log10": numpy.log10,
    "log1p": numpy.log1p,
    "log2": numpy.log2,
    "nearbyint": numpy.rint,
    "nextafter": numpy.nextafter,
    "pow": numpy.power,
    "rsqrt": lambda x: numpy.reciprocal(numpy.sqrt(x)),
    "sin": numpy.sin,
    "sinh": numpy.sinh,
    "sqrt": numpy.sqrt,
    "tan": numpy.tan,
    "tanh": numpy.tanh,
    "trunc": numpy.trunc,
}

#: The symbols whose name does not follow that rule, and those with integer
#: operands or results.
_OTHER_SYMBOLS: dict[str, Compute] = {
    "__nv_fmul_rn": numpy.multiply,
    "__nv_dmul_rn": numpy.multiply,
    "__nv_powif": lambda x, n: numpy.power(x, n.astype(x.dtype)),
    "__nv_powi": lambda x, n: numpy.power(x, n.astype(x.dtype)),
    "__nv_ldexpf": lambda x, n: numpy.ldexp(x, n),
    "__nv_ldexp": lambda x, n: numpy.ldexp(x, n),
    "__nv_ilogbf": _ilogb,
    "__nv_ilogb": _ilogb,
    "__nv_llrintf": lambda x: numpy.rint(x).astype(numpy.int64),
    "__nv_llrint": lambda x: numpy.rint(x).astype(numpy.int64),
    "__nv_isnanf": _flag(numpy.isnan),
    "__nv_isnand": _flag(numpy.isnan),
    "__nv_isinff": _flag(numpy.isinf),
    "__nv_isinfd": _flag(numpy.isinf),
    "__nv_signbitf": _flag(numpy.signbit),
    "__nv_signbitd": _flag(numpy.signbit),
}

#: libdevice symbol -> what it computes, on NumPy arrays of its operands.
SYMBOLS: dict[str, Compute] = {
    **{f"__nv_{name}f": compute for name, compute in _FLOAT_FUNCTIONS.items()},
    **{f"__nv_{name}": compute for name, compute in _FLOAT_FUNCTIONS.items()},
    **_OTHER_SYMBOLS,
}

#: The names of ``libdevice`` (as kernels call them) that the CPU mode runs.
FUNCTIONS: frozenset[str] = frozenset(
    {*_FLOAT_FUNCTIONS, "mul_rn", "ldexp", "ilogb", "llrint", "isnan", "isinf", "signbit"}
)


def compute(symbol: str, *operands: numpy.ndarray) -> numpy.ndarray:
    """What ``symbol`` gives on ``operands`` (arrays of one shape), with floating-point
    exceptions (NaN, inf, division by zero) quiet, as on a GPU."""
    function = SYMBOLS.get(symbol)
    if function is None:
        raise NotImplementedError(
            f"libdevice's {symbol} has no implementation in Triton's interpreter (the CPU mode)"
        )
    with numpy.errstate(all="ignore"):
        return numpy.asarray(function(*operands))
