"""The CPU mode's comparisons: their values tagged ``int1``, as their tensors are.

Triton's interpreter computes a comparison with the builder's ``binary_op``, which
tags the result's NumPy data (booleans) with the dtype of the operands, while the
semantic layer types the tensor ``int1``. Operations that read the tag then
compute on the wrong dtype: broadcasting a one-element comparison (``create_splat``)
makes float32 zeros and ones, and ``mask | (a != a)`` then fails with "ufunc
'bitwise_or' not supported". Inductor's ``triton_helpers.minimum`` and ``maximum``
do exactly that when their first operand is a constant (Inductor 2.10's
``binary_cross_entropy_with_logits``: ``minimum(0.0, x)``). The wrapper below tags
every comparison ``int1``.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import numpy

F = TypeVar("F")

_COMPARISONS = frozenset(
    {
        numpy.less,
        numpy.less_equal,
        numpy.greater,
        numpy.greater_equal,
        numpy.equal,
        numpy.not_equal,
    }
)


def comparing_as_int1(original: F) -> F:
    """Wrap ``InterpreterBuilder.binary_op`` so that a comparison's value is ``int1``."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    @functools.wraps(original)  # type: ignore[arg-type]
    def binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        result = original(self, lhs, rhs, op)  # type: ignore[operator]
        if op in _COMPARISONS:
            return TensorHandle(result.data.astype(numpy.bool_, copy=False), tl.int1)
        return result

    return binary_op  # type: ignore[return-value]
