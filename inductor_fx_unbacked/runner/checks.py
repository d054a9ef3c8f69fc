"""The runtime checks as the runner runs them: each defined once, rendered twice.

A check node of the graph (``aten._functional_assert_scalar`` or one of the
``fx_unbacked::assert_*`` operators) becomes a :class:`Check`: the function that
raises exactly what the graph's operator raises (:attr:`Check.enforce`), and,
where one exists, a cheap condition that says the check passes
(:attr:`Check.passes`, a Python expression over the arguments). The lowered
graph calls the :class:`Check` itself; straight-line code (``straightline.py``)
inlines ``if not <passes>: <enforce>(...)``. Both come from the same two
definitions, and the operator runs only when the check fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._C._dynamo import guards

from .. import _compat
from ..codegen.ops import check_input_size_stride

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class Check:
    """One kind of runtime check.

    ``enforce(*values)`` raises when the check fails and returns otherwise;
    ``passes`` is a Python expression over ``{0}``, ``{1}``, ... (the values, with
    sequences as tuples) that is true only if ``enforce`` would not raise.
    Called as a lowered node's target, with the graph's arguments and token, it
    runs the check and passes the token through.
    """

    name: str
    enforce: Callable[..., None]
    passes: str | None = None
    #: ``passes`` as a function of the values: the same text, compiled.
    passes_fn: Callable[..., bool] | None = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        passes_fn = None
        if self.passes is not None:
            condition = self.passes.format(*(f"v[{i}]" for i in range(8)))
            passes_fn = eval(f"lambda *v: {condition}")
        object.__setattr__(self, "passes_fn", passes_fn)

    @property
    def __name__(self) -> str:
        return self.name

    def __call__(self, *args: Any) -> Any:
        *values, token = (tuple(a) if isinstance(a, list) else a for a in args)
        if self.passes_fn is None or not self.passes_fn(*values):
            self.enforce(*values)
        return token

    def render(self, values: Sequence[str], enforce_name: str) -> list[str]:
        """Straight-line lines for this check over argument texts ``values``."""
        call = f"{enforce_name}({', '.join(values)})"
        if self.passes is None:
            return [call]
        return [f"if not ({self.passes.format(*values)}):", f"    {call}"]

    def __repr__(self) -> str:
        return f"check({self.name})"


def _fail_scalar(condition: Any, message: str) -> None:
    """Raise what the graph's ``_functional_assert_scalar`` raises for a false condition."""
    aten._functional_assert_scalar.default(condition, message, aten._make_dep_token.default())
    raise AssertionError(f"{message} failed, but the graph's check did not raise")


def _size_stride(tensor: torch.Tensor, size: Any, stride: Any, op_name: str) -> None:
    guards.assert_size_stride(tensor, tuple(size), tuple(stride), op_name)


def _tensor_metadata(
    tensor: torch.Tensor, size: Any, stride: Any, dtype: torch.dtype, op_name: str
) -> None:
    _compat.assert_tensor_metadata(tensor, tuple(size), tuple(stride), dtype, op_name)


SCALAR = Check("assert_scalar", _fail_scalar, passes="{0}")
#: Equal sizes and strides always pass; anything else gets the full check, which
#: accepts other strides of size-1 dimensions and raises otherwise.
INPUT_SIZE_STRIDE = Check(
    "assert_input_size_stride",
    check_input_size_stride,
    passes="{0}.size() == {1} and {0}.stride() == {2}",
)
#: Equal sizes and strides (and the dtype, for the metadata check) pass; anything
#: else gets upstream's check.
SIZE_STRIDE = Check(
    "assert_size_stride", _size_stride, passes="{0}.size() == {1} and {0}.stride() == {2}"
)
TENSOR_METADATA = Check(
    "assert_tensor_metadata",
    _tensor_metadata,
    passes="{0} is None or ({0}.dtype == {3} and {0}.size() == {1} and {0}.stride() == {2})",
)
#: Upstream's check: the start's byte offset in the storage is a multiple of the
#: alignment (``storage_offset * itemsize``), and the alignment is not 0.
ALIGNMENT = Check(
    "assert_alignment",
    guards.assert_alignment,
    passes="{1} != 0 and {0}.storage_offset() * {0}.element_size() % {1} == 0",
)


def checks_by_operator() -> dict[Any, Check]:
    """The :class:`Check` that each check operator of the graph stands for."""
    from ..codegen import ops  # noqa: F401  (registers the fx_unbacked:: ops)

    fx_unbacked = torch.ops.fx_unbacked
    return {
        aten._functional_assert_scalar.default: SCALAR,
        fx_unbacked.assert_input_size_stride.default: INPUT_SIZE_STRIDE,
        fx_unbacked.assert_size_stride.default: SIZE_STRIDE,
        fx_unbacked.assert_tensor_metadata.default: TENSOR_METADATA,
        fx_unbacked.assert_alignment.default: ALIGNMENT,
    }
