"""What a node of an FX wrapper graph means for memory, decided in one place.

The converter asks how to write a view; every runner asks which nodes make views
and where they start, which return an argument or memory of one, and which
compute host values only. Each question has one answer here.

Views. ``torch.as_strided(base, size, stride, offset)`` takes ``offset`` in
``base``'s storage, counted from the storage's start; Inductor's views
(``ReinterpretView``) count it from the buffer's first element, as the Python
wrapper's ``reinterpret_tensor`` does. The two agree only where the base starts
its storage: a buffer the graph allocates. A view of any other base (a graph
input, an extern kernel's output, a view) is written with the base's own
storage offset added, ``as_strided(base, size, stride, sym_storage_offset(base)
+ offset)``, so that the graph means what Inductor meant on every input, one
that starts inside its storage (``x = base[4:]``) too. :func:`view_of` reads
either form back as a view relative to its base, which a runner may launch as
``reinterpret_tensor`` without changing what it computes.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx import Node

from .. import _compat

aten = torch.ops.aten

#: Makes a view whose offset counts from its base's first element (the Python
#: wrapper's ``reinterpret_tensor``; None where torch lacks it). Only runners'
#: lowered graphs hold it; handed-out graphs hold ``torch.as_strided``.
REINTERPRET_TENSOR = _compat.reinterpret_tensor()

#: Allocations: their result starts its storage.
ALLOCATIONS = (torch.empty_strided, torch.empty)

#: Targets without side effects that compute host values (sizes, symbolic
#: arithmetic); their nodes can go when nothing uses them.
HOST_TARGETS = frozenset(
    {
        aten.sym_size.int,
        aten.sym_stride.int,
        aten.sym_storage_offset.default,
        aten.sym_numel.default,
        torch.sym_ite,
        torch.sym_min,
        torch.sym_max,
        torch.sym_float,
        torch.sym_int,
        torch.sym_not,
        torch.sym_sum,
    }
)

#: The functions of ``operator`` that have no side effects (not ``setitem``, ``iadd``).
PURE_OPERATORS = frozenset(
    getattr(operator, name)
    for name in (
        *("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul"),
        *("neg", "pos", "abs", "invert", "not_", "truth", "index"),
        *("lshift", "rshift", "and_", "or_", "xor"),
        *("eq", "ne", "lt", "le", "gt", "ge", "getitem"),
    )
)


@dataclasses.dataclass(frozen=True)
class View:
    """A node that makes a view of ``base``: a new tensor over the same memory."""

    base: Node
    size: Any
    stride: Any
    #: Where the view starts, counted from ``base``'s first element (an int or a node);
    #: None where the graph gives it from the storage's start, and ``base`` may not
    #: start its storage.
    offset: Any


def view_of(node: Node) -> View | None:
    """The view ``node`` makes, or None: ``torch.as_strided`` in either of the two
    forms the converter writes (module docstring), or ``reinterpret_tensor``."""
    if node.op != "call_function" or node.kwargs or len(node.args) not in (3, 4):
        return None
    base, size, stride, *rest = node.args
    if not isinstance(base, Node):
        return None
    offset = rest[0] if rest else 0
    if REINTERPRET_TENSOR is not None and node.target is REINTERPRET_TENSOR:
        return View(base, size, stride, offset)
    if node.target is not torch.as_strided:
        return None
    if (
        isinstance(offset, Node)
        and offset.target is operator.add
        and len(offset.args) == 2
        and _is_storage_offset_of(offset.args[0], base)
    ):
        return View(base, size, stride, offset.args[1])
    if _is_storage_offset_of(offset, base):
        return View(base, size, stride, 0)
    return View(base, size, stride, offset if starts_its_storage(base) else None)


def makes_view(node: Node) -> bool:
    return view_of(node) is not None


def starts_its_storage(node: Any) -> bool:
    """Whether ``node``'s tensor starts its storage (storage offset 0): what the graph
    allocates. Anything else may start inside its storage: graph inputs, what an
    extern kernel returns, views."""
    return isinstance(node, Node) and node.op == "call_function" and node.target in ALLOCATIONS


def _is_storage_offset_of(value: Any, base: Node) -> bool:
    return (
        isinstance(value, Node)
        and value.target is aten.sym_storage_offset.default
        and value.args[0] is base
    )


def returned_alias(node: Node) -> tuple[bool, Any] | None:
    """For an operator whose result is memory of an argument: (whether it is the
    argument itself, written in place or out=, the argument); else None."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload):
        return None
    schema = _compat.op_schema(op)
    if len(schema.returns) != 1 or schema.returns[0].alias_info is None:
        return None
    aliased = schema.returns[0].alias_info
    for position, argument in enumerate(schema.arguments):
        info = argument.alias_info
        if info is not None and info.before_set & aliased.before_set:
            if not argument.kwarg_only and position < len(node.args):
                return aliased.is_write, node.args[position]
            return aliased.is_write, node.kwargs.get(argument.name)
    return None


def returns_view(node: Node) -> bool:
    """Whether ``node`` makes a view of an argument (a new tensor, same memory): the
    views above, and operators whose schema says their result aliases an argument
    without being it."""
    if makes_view(node):
        return True
    alias = returned_alias(node)
    return alias is not None and not alias[0]


def is_pure(node: Node) -> bool:
    """Whether ``node`` has no side effect, so that it can go when nothing reads it:
    constants, host values, views, dependency tokens, and the functions of ``math``
    and the pure ones of ``operator``."""
    if node.op == "get_attr":
        return True
    if node.op != "call_function":
        return False
    target = node.target
    return (
        target in HOST_TARGETS
        or target is aten._make_dep_token.default
        or target in PURE_OPERATORS
        or getattr(target, "__module__", None) == "math"
        or makes_view(node)
    )


def is_host_value(node: Node, reads_tensor: Any) -> bool:
    """Whether ``node`` computes on the host only, from what exists before it: a pure
    node that reads no tensor but through the tensor metadata operators (sizes,
    strides), and no view. ``reads_tensor(node)`` says whether a node's arguments
    hold a tensor."""
    if not is_pure(node) or node.op != "call_function" or makes_view(node):
        return False
    target = node.target
    if target in HOST_TARGETS or target is aten._make_dep_token.default:
        return True
    return not reads_tensor(node)
