"""The wrapper-IR line that defines unbacked symbols, and its Python/C++ text.

Mirrors ``torch/_inductor/codegen/wrapper.py``. The two ``*_for_outputs``
functions are methods of ``PythonWrapperCodegen`` once the overlay is enabled
(``integration/overlay.py``); nothing here patches anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import sympy
from torch._inductor import ir
from torch._inductor.codegen import wrapper as _upstream_wrapper
from torch._inductor.codegen.wrapper import WrapperLine
from torch._inductor.virtualized import V
from torch.fx.experimental.symbolic_shapes import resolve_unbacked_bindings
from torch.utils import _pytree as pytree

from .keypath import CppTextEmitter, PythonTextEmitter, define_symbol

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper import FxConversionFunc, PythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import FxConverter
    from torch._inductor.utils import IndentedBuffer

UnbackedBindings = dict[sympy.Symbol, pytree.KeyPath]


@dataclasses.dataclass
class UnbackedSymbolDefsLine(_upstream_wrapper.UnbackedSymbolDefsLine):
    """Defines the unbacked symbols that a kernel's outputs carry.

    Upstream's line type (so that upstream's ``isinstance`` checks see it), with
    ``unbacked_bindings`` already resolved against the ShapeEnv; each KeyPath
    says where its symbol is read from, starting at ``output_name``. Its text
    and FX conversion are upstream's methods, which the overlay replaces.
    """

    wrapper: PythonWrapperCodegen
    output_name: str
    outputs: Any
    unbacked_bindings: UnbackedBindings


def codegen_unbacked_symbol_defs_for_outputs(
    self: PythonWrapperCodegen,
    output_name: str,
    outputs: Any,
    unbacked_bindings: UnbackedBindings | None,
) -> None:
    """Emit an :class:`UnbackedSymbolDefsLine` for the symbols bound by a kernel.

    Bindings are resolved now, at IR-codegen time, because later renames in the
    ShapeEnv must not change which symbol a line defines. A kernel that binds
    nothing (the usual case, and the aliased result of an in-place op) emits no
    line at all.
    """
    resolved = resolve_unbacked_bindings(V.graph.sizevars.shape_env, unbacked_bindings)
    if resolved:
        self.writeline(UnbackedSymbolDefsLine(self, output_name, outputs, resolved))


def _codegen_unbacked_symbol_defs_for_outputs(
    self: PythonWrapperCodegen,
    output_name: str,
    outputs: Any,
    unbacked_bindings: UnbackedBindings | None,
) -> None:
    """Write ``u0 = buf0.size(0)`` (Python) or ``auto u0 = buf1.size(0);`` (C++).

    A ``DivideByKey`` step is preceded by a runtime check that the value divides
    evenly: the fake kernel promised a multiple, and a real kernel that breaks the
    promise must not produce a silently truncated size.
    """
    for symbol, keypath in (unbacked_bindings or {}).items():
        if V.graph.cpp_wrapper:
            emitter: PythonTextEmitter | CppTextEmitter = CppTextEmitter()
            root, keypath = _cpp_root(outputs, keypath)
        else:
            emitter = PythonTextEmitter()
            root = output_name
        value = define_symbol(symbol, keypath, root, emitter)
        for dividend, divisor in emitter.divisibility_checks:
            self.writeline(emitter.divisibility_check(symbol, dividend, divisor))
        decl = self.codegen_unbacked_symbol_decl(symbol)
        self.writeline(f"{decl} = {value}{self.ending}")


def _cpp_root(outputs: Any, keypath: pytree.KeyPath) -> tuple[str, pytree.KeyPath]:
    """The C++ wrapper never binds the kernel's own name, only its output buffers.

    A single output is the root; if it is a ``MultiOutput`` with indices (a list
    of one tensor), the first key selects it and is consumed. Otherwise leading
    ``SequenceKey`` entries select an output, through nested lists of outputs
    (a custom op returning ``list[list[Tensor]]``) down to one buffer.
    """
    if len(outputs) == 1 and isinstance(outputs[0], ir.IRNode):
        (out,) = outputs
        selects_output = isinstance(out, ir.MultiOutput) and len(out.indices) != 0
        return out.get_name(), keypath[1:] if selects_output else keypath
    value, rest = outputs, tuple(keypath)
    while isinstance(value, (list, tuple)):
        first = rest[0] if rest else None
        if not isinstance(first, pytree.SequenceKey) or not 0 <= first.idx < len(value):
            raise NotImplementedError(
                f"cannot select one of {len(value)} outputs with KeyPath {tuple(keypath)!r}"
            )
        value, rest = value[first.idx], rest[1:]
    return value.get_name(), rest


# Runtime checks as wrapper IR, for the FX wrapper only. Each overlay entry below
# wraps upstream's method: the Python and C++ wrappers get upstream's own method,
# unchanged, so the text they write is upstream's on every release. The FX
# wrapper gets a line whose ``codegen_fx()`` turns the check into FX nodes that
# raise at run time, tagged ``meta["runtime_assert"]``; whether a check is made,
# and with which dtype, is still upstream's decision, read off what it writes.


def is_fx_wrapper(wrapper: Any) -> bool:
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    return isinstance(wrapper, WrapperFxCodegen)


@contextlib.contextmanager
def captured_lines(wrapper: PythonWrapperCodegen) -> Iterator[list[Any]]:
    """Collect what ``wrapper.writeline`` receives inside, instead of writing it."""
    lines: list[Any] = []
    had_own = "writeline" in wrapper.__dict__
    previous = wrapper.__dict__.get("writeline")
    wrapper.writeline = lines.append  # type: ignore[method-assign]
    try:
        yield lines
    finally:
        if had_own:
            wrapper.writeline = previous  # type: ignore[method-assign]
        else:
            del wrapper.writeline


def _replay(wrapper: PythonWrapperCodegen, code: IndentedBuffer, lines: list[Any]) -> None:
    for line in lines:
        if isinstance(line, WrapperLine):
            line.codegen(code)
        else:
            wrapper.writeline(line)


# The remaining raw-text definitions of unbacked symbols, as wrapper IR.


@dataclasses.dataclass
class DynamicSelectIndexLine(WrapperLine):
    """Defines the storage offset of ``x.select(dim, u)`` for an unbacked index."""

    wrapper: PythonWrapperCodegen
    node: ir.DynamicSelectStorageOffset
    clamp: bool

    def codegen(self, code: IndentedBuffer) -> None:
        node = self.node
        index = f"{node.index} + {node.size} if {node.index} < 0 else {node.index}"
        if self.clamp:
            index = f"max(0, min({node.size}, {index}))"
        self.wrapper.writeline(
            f"{node.unbacked_offset_symbol} = "
            f"{node.base_offset} + {node.base_dim_stride} * ({index})"
        )

    def codegen_fx(self, converter: FxConverter) -> FxConversionFunc:
        return converter._generate_dynamic_select_index


def codegen_dynamic_select_index(original: Callable[..., None]) -> Callable[..., None]:
    """``codegen_dynamic_select_index``: a :class:`DynamicSelectIndexLine` for the FX wrapper."""

    @functools.wraps(original)
    def codegen_dynamic_select_index(
        self: PythonWrapperCodegen, node: ir.DynamicSelectStorageOffset, clamp: bool
    ) -> None:
        if not is_fx_wrapper(self):
            return original(self, node, clamp)
        self.writeline(DynamicSelectIndexLine(self, node, clamp))
        # The line defines the symbol; later uses must not declare it again.
        self.unbacked_symbol_decls.add(str(node.unbacked_offset_symbol))

    return codegen_dynamic_select_index


@dataclasses.dataclass
class DynamicSliceSizeLine(WrapperLine):
    """Defines the length of ``x[start:end:step]`` for unbacked bounds."""

    wrapper: PythonWrapperCodegen
    node: ir.DynamicSliceSize

    def codegen(self, code: IndentedBuffer) -> None:
        node, sizevar = self.node, self.wrapper.codegen_sizevar

        def clamped(x: Any) -> str:
            positive = sizevar(sympy.Max(0, sympy.Min(x, node.size)))
            negative = sizevar(sympy.Max(0, sympy.Min(x + node.size, node.size)))
            return f"{positive} if {sizevar(x)} >= 0 else {negative}"

        symbol = node.unbacked_size_symbol
        self.wrapper.writeline(f"{symbol}_start = {clamped(node.start)}")
        self.wrapper.writeline(f"{symbol}_end = {clamped(node.end)}")
        length = f"{symbol}_end - {symbol}_start"
        if node.step != 1:
            step = sizevar(node.step)
            length = f"({length} + {step} - 1) // {step}"
        self.wrapper.writeline(f"{symbol} = max(0, {length})")

    def codegen_fx(self, converter: FxConverter) -> FxConversionFunc:
        return converter._generate_dynamic_slice_size


def codegen_dynamic_slice_size(original: Callable[..., None]) -> Callable[..., None]:
    """``codegen_dynamic_slice_size``: a :class:`DynamicSliceSizeLine` for the FX wrapper."""

    @functools.wraps(original)
    def codegen_dynamic_slice_size(self: PythonWrapperCodegen, node: ir.DynamicSliceSize) -> None:
        if not is_fx_wrapper(self):
            return original(self, node)
        self.writeline(DynamicSliceSizeLine(self, node))
        self.unbacked_symbol_decls.add(str(node.unbacked_size_symbol))

    return codegen_dynamic_slice_size


@dataclasses.dataclass
class WhileLoopLine(WrapperLine):
    """A whole ``while_loop`` for the FX backend, whose subgraphs are converted apart."""

    wrapper: PythonWrapperCodegen
    node: ir.WhileLoop
    stack_output: bool

    def codegen(self, code: IndentedBuffer) -> None:
        raise NotImplementedError("WhileLoopLine is only converted to FX")

    def codegen_fx(self, converter: FxConverter) -> FxConversionFunc:
        return converter._generate_while_loop


def codegen_while_loop_fx(self: Any, while_loop: ir.WhileLoop, stack_output: bool) -> None:
    """``WrapperFxCodegen.codegen_while_loop``: one line, then the two subgraphs."""
    self.writeline(WhileLoopLine(self, while_loop, stack_output))
    for subgraph in (while_loop.cond_subgraph, while_loop.body_subgraph):
        self.codegen_subgraph_common(subgraph)


@dataclasses.dataclass
class ZeroBufferLine(WrapperLine):
    """A workspace zeroed before the kernel that needs it (the split scan's
    look-back flags), where upstream writes ``name.zero_()`` as text."""

    wrapper: PythonWrapperCodegen
    name: str

    def codegen(self, code: IndentedBuffer) -> None:
        python = _upstream_wrapper.PythonWrapperCodegen
        code.writeline(python.make_zero_buffer(self.wrapper, self.name))

    def codegen_fx(self, converter: FxConverter) -> FxConversionFunc:
        return converter._generate_zero_buffer


def make_zero_buffer_fx(self: Any, name: str) -> ZeroBufferLine:
    """``WrapperFxCodegen.make_zero_buffer``: a :class:`ZeroBufferLine`."""
    return ZeroBufferLine(self, name)


def dropping_trailing_workspace_frees(plan: Callable[..., None]) -> Callable[..., None]:
    """Wrap ``WrapperFxCodegen.memory_plan_reuse``: frees at the end of the graph are
    dropped before upstream's pass looks at them, workspaces' included.

    Upstream's pass first drops the trailing frees of buffers that are not graph
    outputs (they would run just before the function returns), naming each line's
    buffer ``line.node.name``. A workspace (``WorkspaceArg``: the split scan's
    look-back flags) has no ``name``, only ``get_name()``, so a graph that ends with
    a scan over an unbacked length, whose workspace is freed last, raised
    ``AttributeError`` there. A workspace is never a graph output, so dropping its
    trailing free is what upstream does for any buffer that is not one; a line
    without a node stops the drop, as it would stop upstream's."""

    @functools.wraps(plan)
    def wrapper(self: Any) -> None:
        outputs = V.graph._get_output_names(self.get_graph_outputs())
        while self.lines and isinstance(self.lines[-1], _upstream_wrapper.MemoryPlanningLine):
            node = getattr(self.lines[-1], "node", None)
            if node is None or node.get_name() in outputs:
                break
            self.lines.pop()
        plan(self)

    return wrapper
