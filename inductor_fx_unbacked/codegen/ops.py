"""Runtime checks as operators, for the checks that aten has no operator for.

Scalar conditions become ``aten._assert_scalar``; the Python wrapper's tensor
checks have no aten equivalent with the same semantics (``_assert_tensor_metadata``
also compares the strides of size-1 dimensions), so they are custom ops, which
call the very functions the Python wrapper calls. Like Inductor's functional
asserts (``aten._functional_assert_scalar``), each takes a dependency token and
returns one, so that every check node has a value and the checks form a chain.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch._C._dynamo import guards

from .. import _compat


@torch.library.custom_op("fx_unbacked::assert_size_stride", mutates_args=())
def assert_size_stride(
    tensor: torch.Tensor, size: list[int], stride: list[int], op_name: str, dep_token: torch.Tensor
) -> torch.Tensor:
    """Raise ``AssertionError`` unless ``tensor`` has this size and stride."""
    guards.assert_size_stride(tensor, tuple(size), tuple(stride), op_name)
    return new_token(dep_token)


@assert_size_stride.register_fake
def _(tensor, size, stride, op_name, dep_token):
    return new_token(dep_token)


def new_token(dep_token: torch.Tensor) -> torch.Tensor:
    """The token a check returns: like ``aten._functional_assert_scalar``'s, an empty
    tensor that orders the checks after it."""
    return dep_token.new_empty(0)


def check_input_size_stride(
    tensor: torch.Tensor, size: Sequence[int], stride: Sequence[int], name: str
) -> None:
    """The Python wrapper's check of a graph input, with a message about the input.

    ``assert_size_stride``'s own message blames "an incorrect fake (aka meta)
    kernel for a custom op", which misleads when the caller passed a tensor of
    the wrong shape.
    """
    try:
        guards.assert_size_stride(tensor, tuple(size), tuple(stride), "input")
    except AssertionError:
        raise AssertionError(
            f"{name}: expected size {tuple(size)} and stride {tuple(stride)}, "
            f"got size {tuple(tensor.shape)} and stride {tensor.stride()}"
        ) from None


@torch.library.custom_op("fx_unbacked::assert_input_size_stride", mutates_args=())
def assert_input_size_stride(
    tensor: torch.Tensor, size: list[int], stride: list[int], name: str, dep_token: torch.Tensor
) -> torch.Tensor:
    """Raise ``AssertionError`` naming the graph input unless it has this size and stride."""
    check_input_size_stride(tensor, size, stride, name)
    return new_token(dep_token)


@assert_input_size_stride.register_fake
def _(tensor, size, stride, name, dep_token):
    return new_token(dep_token)


@torch.library.custom_op("fx_unbacked::assert_tensor_metadata", mutates_args=())
def assert_tensor_metadata(
    tensor: torch.Tensor,
    size: list[int],
    stride: list[int],
    dtype: torch.dtype,
    op_name: str,
    dep_token: torch.Tensor,
) -> torch.Tensor:
    """Raise unless ``tensor`` has this dtype, size and stride, as the Python wrapper
    checks an extern kernel's output where upstream checks its dtype too."""
    _compat.assert_tensor_metadata(tensor, tuple(size), tuple(stride), dtype, op_name)
    return new_token(dep_token)


@assert_tensor_metadata.register_fake
def _(tensor, size, stride, dtype, op_name, dep_token):
    return new_token(dep_token)


@torch.library.custom_op("fx_unbacked::assert_alignment", mutates_args=())
def assert_alignment(
    tensor: torch.Tensor, alignment: int, op_name: str, dep_token: torch.Tensor
) -> torch.Tensor:
    """Raise ``AssertionError`` unless ``tensor``'s data pointer is ``alignment``-aligned."""
    guards.assert_alignment(tensor, alignment, op_name)
    return new_token(dep_token)


@assert_alignment.register_fake
def _(tensor, alignment, op_name, dep_token):
    return new_token(dep_token)
