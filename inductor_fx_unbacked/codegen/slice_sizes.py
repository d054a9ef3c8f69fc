"""The length of a slice that Dynamo gave an unbacked symbol, defined by Inductor.

Slicing a tensor of unbacked length (``x[m][:1]``) can make the fake tensor's
slice allocate a new unbacked symbol for the result's length (``u1``), bound on
the FX node (its ``unbacked_bindings``). Inductor's ``slice`` lowering must then
define that symbol, or ``GraphLowering.run_node`` fails its check that Inductor
defines every symbol the FX graph binds ("failed OrderedSet([]) >= OrderedSet([u1])
(inductor >= fx)"). On torch 2.10 and 2.11 the lowering returns the input
unchanged where it proves the slice a no-op (``x[m][:1]`` with ``m`` of one
element: the selection's length is at most 1) and defines nothing: every
compile of such a program fails, with Inductor's Python wrapper as with the FX
one. Later releases define the symbol there with a ``DynamicSliceSize``.

:func:`defining_slice_sizes` does the same after any ``aten.slice.Tensor``
lowering that left its length symbol undefined: a ``DynamicSliceSize`` computes
it from the node's bounds with Python's clamping, which is what the slice's
length is whichever way the lowering went. Where the lowering defines it (later
releases, and its own path for unbacked bounds) nothing is added.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import CallMethodKey, resolve_unbacked_bindings
from torch.utils import _pytree as pytree

_SLICE = torch.ops.aten.slice.Tensor


def defining_slice_sizes(call_function: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``GraphLowering.call_function``: a slice node's unbacked length is defined."""

    @functools.wraps(call_function)
    def call(self: Any, target: Any, args: Any, kwargs: Any) -> Any:
        if target is not _SLICE:
            return call_function(self, target, args, kwargs)
        operations = len(self.operations)
        result = call_function(self, target, args, kwargs)
        _define_length(self, args, kwargs, operations)
        return result

    return call


def _define_length(graph: Any, args: Any, kwargs: Any, operations: int) -> None:
    from torch._inductor import ir

    node = graph.current_node
    if node is None or not node.meta.get("unbacked_bindings"):
        return
    x, dim, start, end, step = _slice_arguments(args, kwargs)
    if not isinstance(x, ir.TensorBox):
        return
    sizes = x.get_size()
    if not sizes:
        return
    dim = dim % len(sizes)
    bindings = resolve_unbacked_bindings(graph.sizevars.shape_env, node.meta["unbacked_bindings"])
    length = next(
        (
            symbol
            for symbol, keypath in (bindings or {}).items()
            if keypath == (CallMethodKey("size"), pytree.SequenceKey(dim))
        ),
        None,
    )
    if length is None:
        return
    defined = set()
    for operation in graph.operations[operations:]:
        defined |= set(operation.get_unbacked_symbol_defs())
    if length in defined:
        return
    size = ir.DynamicSliceSize(length, start, end, step, sizes[dim])
    size.name = graph.register_buffer(size)
    graph.register_operation(size)


def _slice_arguments(args: Any, kwargs: Any) -> tuple[Any, int, Any, Any, Any]:
    """``aten.slice.Tensor``'s (self, dim, start, end, step), its defaults filled in."""
    names = ("self", "dim", "start", "end", "step")
    defaults = (None, 0, 0, sys.maxsize, 1)
    values = dict(zip(names, defaults))
    values.update(zip(names, args))
    values.update(kwargs)
    if values["start"] is None:
        values["start"] = 0
    if values["end"] is None:
        values["end"] = sys.maxsize
    return values["self"], values["dim"], values["start"], values["end"], values["step"]
