"""FX definitions of unbacked symbols.

The KeyPath emitter (one FX node per step of ``codegen.keypath``'s walk), the
definitions of ``UnbackedSymbolDefsLine`` and ``.item()`` (``DynamicScalarLine``),
and of the symbols of a dynamic select index and a dynamic slice size.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import sympy
import torch
from torch._inductor.codegen.wrapper import DynamicScalarLine
from torch._inductor.codegen.wrapper_fxir import SymbolBuffer

from .fx_checks import _add_assert, _is_defined
from .keypath import INDEXED_METHODS, UnsupportedStep, define_symbol
from .wrapper import DynamicSelectIndexLine, DynamicSliceSizeLine, UnbackedSymbolDefsLine

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper_fxir import FxConverter

aten = torch.ops.aten


#: FX targets of the method calls that a KeyPath can contain, by (method, indexed).
_METHOD_TARGETS = {
    ("size", True): aten.sym_size.int,
    ("stride", True): aten.sym_stride.int,
    ("storage_offset", False): aten.sym_storage_offset.default,
    ("numel", False): aten.sym_numel.default,
    ("item", False): aten.item.default,
}
assert {m for m, indexed in _METHOD_TARGETS if indexed} == set(INDEXED_METHODS)


class FxKeyPathEmitter:
    """Renders each KeyPath step as one FX node in the converter's graph."""

    def __init__(self, converter: FxConverter, symbol: sympy.Symbol) -> None:
        self.converter = converter
        self.graph = converter.gm.graph
        self.symbol = symbol

    def method_call(self, value: torch.fx.Node, method: str, index: int | None) -> torch.fx.Node:
        target = _METHOD_TARGETS.get((method, index is not None))
        if target is None:
            called = f"{method}()" if index is None else f"{method}({index})"
            raise UnsupportedStep(f"no FX operator for the method call .{called}")
        args = (value,) if index is None else (value, index)
        return self.graph.call_function(target, args)

    def sequence_item(self, value: torch.fx.Node, index: int) -> torch.fx.Node:
        return _getitem(self.graph, value, index)

    def floor_divide(self, value: torch.fx.Node, divisor: Any) -> torch.fx.Node:
        divisor_arg = self.converter._generate_sym_node(_as_sympy(divisor))
        if divisor != 1:
            remainder = self.graph.call_function(operator.mod, (value, divisor_arg))
            divisible = self.graph.call_function(operator.eq, (remainder, 0))
            message = f"{self.symbol}: {value.name} is not divisible by {divisor}"
            _add_assert(self.converter, aten._assert_scalar.default, (divisible, message))
        return self.graph.call_function(operator.floordiv, (value, divisor_arg))

    def convert_int(self, value: torch.fx.Node) -> torch.fx.Node:
        return self.graph.call_function(torch.sym_ite, (value, 1, 0))

    def inner_tensor(self, value: torch.fx.Node, attr: str) -> torch.fx.Node:
        return self.graph.call_function(getattr, (value, attr))


def _as_sympy(value: Any) -> Any:
    return value.node.expr if isinstance(value, torch.SymInt) else value


def _generate_unbacked_symbol_defs(self: FxConverter, line: UnbackedSymbolDefsLine) -> None:
    """Define each unbacked symbol of the line with FX nodes and register it.

    Every node that defines a symbol carries ``meta["unbacked_symbol"]``, and the
    symbol is registered so that later allocations, views, grids and kernel
    arguments use that node. A symbol that is already defined is left alone, and
    the root buffer is looked up only when there is something to define.
    """
    assert isinstance(line, UnbackedSymbolDefsLine), type(line)
    for symbol, keypath in line.unbacked_bindings.items():
        if not _is_defined(self, symbol):
            root_node = self.buffer_to_node[line.output_name]
            emitter = FxKeyPathEmitter(self, symbol)
            _register_symbol(self, symbol, define_symbol(symbol, keypath, root_node, emitter))


def _generate_dynamic_scalar(self: FxConverter, line: DynamicScalarLine) -> None:
    """Define the symbol of ``.item()`` (``ir.DynamicScalar``) on the same KeyPath walk.

    The scalar is read with ``aten.item``; the node's KeyPath (empty, a
    ``ConvertIntKey`` for bools, or a ``DivideByKey``) then applies to it.
    """
    assert isinstance(line, DynamicScalarLine), type(line)
    ir_node = line.node
    if _is_defined(self, ir_node.sym):
        return
    (data,) = ir_node.inputs
    scalar = self.gm.graph.call_function(aten.item.default, (self._generate_buffer(data),))
    emitter = FxKeyPathEmitter(self, ir_node.sym)
    node = define_symbol(ir_node.sym, ir_node.keypath, scalar, emitter)
    _register_symbol(self, ir_node.sym, node)


def _getitem(graph: torch.fx.Graph, value: torch.fx.Node, index: int) -> torch.fx.Node:
    """``value[index]``, reusing the node that reads it if there is one: a symbol
    defined from an output (``u0 = cond[0].size(0)``) and the output itself read
    the same item."""
    for user in value.users:
        if user.target is operator.getitem and user.args == (value, index):
            return user
    return graph.call_function(operator.getitem, (value, index))


def _register_symbol(self: FxConverter, symbol: sympy.Symbol, node: torch.fx.Node) -> None:
    """Make ``node`` the definition that later lines use for ``symbol``."""
    node.meta["unbacked_symbol"] = symbol
    self._record_allocation(SymbolBuffer(symbol), node)
    self._generate_size_proxy(node, symbol)


# The remaining definitions of unbacked symbols.


def _generate_dynamic_select_index(self: FxConverter, line: DynamicSelectIndexLine) -> None:
    """``u = base_offset + stride * (index + size if index < 0 else index)``."""
    assert isinstance(line, DynamicSelectIndexLine), type(line)
    node = line.node
    if _is_defined(self, node.unbacked_offset_symbol):
        return
    sym = _SymBuilder(self)
    index, size = sym.value(node.index), sym.value(node.size)
    index = sym.ite(sym.call(operator.lt, index, 0), sym.call(operator.add, index, size), index)
    if line.clamp:
        index = sym.max(0, sym.min(size, index))
    offset = sym.call(
        operator.add,
        sym.value(node.base_offset),
        sym.call(operator.mul, sym.value(node.base_dim_stride), index),
    )
    _register_symbol(self, node.unbacked_offset_symbol, offset)


def _generate_dynamic_slice_size(self: FxConverter, line: DynamicSliceSizeLine) -> None:
    """The length of ``x[start:end:step]``, with Python's clamping of the bounds."""
    assert isinstance(line, DynamicSliceSizeLine), type(line)
    node = line.node
    if _is_defined(self, node.unbacked_size_symbol):
        return
    sym = _SymBuilder(self)
    size = sym.value(node.size)

    def clamped(bound: Any) -> Any:
        bound = sym.value(bound)
        positive = sym.max(0, sym.min(bound, size))
        negative = sym.max(0, sym.min(sym.call(operator.add, bound, size), size))
        return sym.ite(sym.call(operator.ge, bound, 0), positive, negative)

    length = sym.call(operator.sub, clamped(node.end), clamped(node.start))
    if node.step != 1:
        step = sym.value(node.step)
        length = sym.call(
            operator.floordiv, sym.call(operator.add, length, sym.call(operator.sub, step, 1)), step
        )
    _register_symbol(self, node.unbacked_size_symbol, sym.node(sym.max(0, length)))


class _SymBuilder:
    """Integer arithmetic on FX nodes and Python ints, one node per operation.

    Operations on constants fold in Python; any other creates a ``call_function``
    node (``operator.*``, ``torch.sym_ite``/``sym_min``/``sym_max``), whose
    ``meta["val"]`` the converter's metadata hook fills in.
    """

    def __init__(self, converter: FxConverter) -> None:
        self.converter = converter
        self.graph = converter.gm.graph

    def value(self, expr: Any) -> Any:
        return self.converter._generate_sym_node(expr)

    def call(self, target: Any, *args: Any) -> Any:
        if not any(isinstance(a, torch.fx.Node) for a in args):
            return target(*args)
        return self.graph.call_function(target, args)

    def ite(self, condition: Any, if_true: Any, if_false: Any) -> Any:
        if not isinstance(condition, torch.fx.Node):
            return if_true if condition else if_false
        return self.graph.call_function(torch.sym_ite, (condition, if_true, if_false))

    def min(self, a: Any, b: Any) -> Any:
        return self.call(torch.sym_min if _any_node(a, b) else min, a, b)

    def max(self, a: Any, b: Any) -> Any:
        return self.call(torch.sym_max if _any_node(a, b) else max, a, b)

    def node(self, value: Any) -> torch.fx.Node:
        """Symbols are defined by nodes, so a constant result still gets one."""
        if isinstance(value, torch.fx.Node):
            return value
        return self.graph.call_function(operator.add, (value, 0))


def _any_node(*args: Any) -> bool:
    return any(isinstance(a, torch.fx.Node) for a in args)
