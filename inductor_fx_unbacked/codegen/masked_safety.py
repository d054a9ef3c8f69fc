"""What an operation does where the sync-free rewrite runs it and eager does not.

``masked_reductions`` computes ``f(x[mask]).sum()`` as ``where(mask, f(x), 0).sum()``:
every operation of ``f`` now also runs at the masked-out positions, on the values
users keep there (padding labels, zero divisors, NaN, negative values under a
log). ``where`` discards the results there; what it cannot undo is a trap (an
integer division by zero, a read out of bounds) or a check that sees them. So an
operation joins a rewritten chain only if it is

- **total**: no trap for any value of its operands, its result discarded at
  masked-out positions (``TOTAL``, with why for each); or
- **guarded**: the operand that can trap is replaced where the mask is false by a
  value that cannot (``gather(x, d, where(mask, index, 0))``,
  ``a // where(mask, b, 1)``): at selected positions the operand, and so the
  result, is eager's.

Any other operation keeps the selection (``verdict`` says why). So does
``config.nan_asserts`` (or Triton's in-kernel NaN checks): they check every
kernel's buffers, masked-out positions included, where a log of a negative padding
value is NaN though eager never computes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .selections import dtype as dtype_of
from .selections import shape as shape_of

aten = torch.ops.aten
prims = torch.ops.prims

_ARITHMETIC = "integer overflow gives some value and float arithmetic NaN or Inf at worst: no trap"
_FLOAT_MATH = "a float function outside its domain gives NaN or Inf: no trap, no check"
_LOGIC = "compares, tests or combines values; defined for every value"
_SELECTS = "chooses or bounds values, reading no memory by them"
_CASTS = (
    "a conversion of a value out of the target's range gives an unspecified value "
    "(no trap on the CPUs and GPUs Inductor targets); an index or divisor made of it "
    "is guarded where it is used"
)
_ALONG_ROWS = (
    "reduces, scans or reshapes each selected row on its own, by arithmetic only: no "
    "trap for any value"
)


def _packets(names: str, why: str) -> dict[Any, str]:
    """``name -> why`` for the ATen (or ``prims.``) operators named, those this torch has."""
    table = {}
    for name in names.split():
        namespace, _, op = name.rpartition(".")
        packet = getattr(prims if namespace == "prims" else aten, op, None)
        if packet is not None:
            table[packet] = why
    return table


#: Operators that cannot trap at masked-out positions whatever their operands, and why.
TOTAL: dict[Any, str] = {
    **_packets(
        "add sub rsub mul neg abs sign sgn square lerp addcmul addcdiv div true_divide",
        _ARITHMETIC,
    ),
    **_packets(
        "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal sin cos tan asin acos"
        " atan atan2 sinh cosh tanh asinh acosh atanh sigmoid logit erf erfc erfinv lgamma"
        " digamma floor ceil round trunc frac relu gelu silu mish elu softplus hardtanh"
        " leaky_relu hardsigmoid hardswish nan_to_num xlogy hypot copysign",
        _FLOAT_MATH,
    ),
    **_packets(
        "eq ne lt le gt ge logical_and logical_or logical_xor logical_not bitwise_and"
        " bitwise_or bitwise_xor bitwise_not isnan isinf isfinite isposinf isneginf signbit",
        _LOGIC,
    ),
    **_packets("where masked_fill clamp clamp_min clamp_max minimum maximum fmin fmax", _SELECTS),
    **_packets("prims.convert_element_type _to_copy clone", _CASTS),
    **_packets(
        "sum mean amax amin prod any all logsumexp _softmax _log_softmax cumsum squeeze unsqueeze",
        _ALONG_ROWS,
    ),
}
#: Float only, or integers to a constant power that is not negative: ``pow`` of
#: integers by a masked-out negative exponent is not defined for every operand.
FLOAT_ONLY: dict[Any, str] = _packets("pow float_power", _FLOAT_MATH)
#: Integer division and remainder: the divisor (argument 1) is guarded with 1 where
#: the result is an integer (``a // 0`` and ``INT_MIN // -1`` trap); float division
#: by zero is total.
DIVISIONS = _packets("floor_divide remainder fmod", "")
_DIVIDES = (
    "an integer division, guarded: its divisor is 1 where the mask is false "
    "(an integer division by 0 or INT_MIN by -1 traps), the divisor itself where true"
)
#: Operations that look up rows of a table by an index: (table, index) positions.
TABLES = {aten.embedding.default: (0, 1)}
_LOOKS_UP = (
    "looks up a table's rows by an index, guarded: the index is 0 where the mask is "
    "false (in bounds: the table is not empty), the index itself where true"
)
_GATHERS = (
    "reads by an index, guarded: the index is 0 where the mask is false (in bounds: "
    "the dimension it reads is not empty), the index itself where true"
)


@dataclasses.dataclass(frozen=True)
class Guard:
    """Argument ``position`` of an operation takes ``safe`` where the mask is false,
    then (where ``dtype`` is set) is converted to the dtype the operation computes in."""

    position: int
    safe: int
    dtype: torch.dtype | None = None


@dataclasses.dataclass(frozen=True)
class Verdict:
    """An operation's place in a rewritten chain: why it is safe at masked-out
    positions and the guards that make it so, or why it keeps the selection."""

    why: str
    guards: tuple[Guard, ...] = ()
    safe: bool = True
    #: Argument positions of tables read by index (not broadcast against the selection).
    tables: tuple[int, ...] = ()


def _refuse(why: str) -> Verdict:
    return Verdict(why, safe=False)


def checks_every_buffer() -> str | None:
    """Why no selection is rewritten under the config's NaN checks, or None."""
    from torch._inductor import config

    for option in ("nan_asserts", "runtime_triton_nan_asserts"):
        if getattr(config, option, False):
            return (
                f"config.{option} checks every buffer for NaN and Inf, masked-out "
                "positions too, where the rewrite computes on values eager never reads"
            )
    return None


def verdict(node: Node) -> Verdict:
    """Whether ``node``, an element-wise or row-wise operation on values computed
    over a selection, may run at masked-out positions, and with which guards."""
    target = node.target
    packet = getattr(target, "overloadpacket", None)
    result = dtype_of(node)
    integral = result is not None and not (result.is_floating_point or result.is_complex)
    if target is aten.gather.default:
        return _gather(node)
    if target in TABLES:
        return _lookup(node, *TABLES[target])
    if target in (aten.div.Tensor_mode, aten.div.Scalar_mode) or packet in DIVISIONS:
        rounding = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
        if integral and (packet in DIVISIONS or rounding is not None):
            return _division(node, result)
        return Verdict(_ARITHMETIC)
    if packet in FLOAT_ONLY:
        if not integral:
            return Verdict(FLOAT_ONLY[packet])
        exponent = node.args[1] if len(node.args) > 1 else None
        if target is aten.pow.Tensor_Scalar and isinstance(exponent, int) and exponent >= 0:
            return Verdict("an integer to a constant power that is not negative: products")
        return _refuse(f"{node.name} ({target}) raises integers to masked-out exponents")
    if packet is aten._to_copy and _device(node) != _device(node.args[0]):
        return _refuse(f"{node.name} moves it to another device than its mask's")
    if packet in TOTAL:
        return Verdict(TOTAL[packet])
    return _refuse(
        f"{node.name} ({target}) is not known to be safe at the masked-out positions "
        "the rewrite would compute it at"
    )


def _division(node: Node, result: torch.dtype | None) -> Verdict:
    divisor = node.args[1] if len(node.args) > 1 else node.kwargs.get("other")
    if isinstance(divisor, Node):
        return Verdict(_DIVIDES, (Guard(1, 1, result),))
    if isinstance(divisor, (int, float)) and divisor not in (0, -1):
        return Verdict("divides by a constant other than 0 and -1: no trap for any dividend")
    return _refuse(f"{node.name} divides integers by {divisor!r} wherever it runs")


def _gather(node: Node) -> Verdict:
    source, dim = node.args[0], node.args[1]
    sizes = shape_of(source)
    extent = sizes[dim % len(sizes)] if sizes else 0
    if not statically_known_true(extent >= 1):
        return _refuse(
            f"{node.name} gathers along a dimension of size {extent}, which may be empty: "
            "no index is in bounds at masked-out positions"
        )
    return Verdict(_GATHERS, (Guard(2, 0),))


def _lookup(node: Node, table: int, index: int) -> Verdict:
    sizes = shape_of(node.args[table])
    if not (sizes and statically_known_true(sizes[0] >= 1)):
        return _refuse(f"{node.name} looks up in a table that may be empty: no index is in bounds")
    return Verdict(_LOOKS_UP, (Guard(index, 0),), tables=(table,))


def _device(node: Any) -> torch.device | None:
    value = node.meta.get("val") if isinstance(node, Node) else None
    return value.device if isinstance(value, torch.Tensor) else None
