"""The wrapper-IR line that defines unbacked symbols, and its Python/C++ text.

Mirrors ``torch/_inductor/codegen/wrapper.py``. The two ``*_for_outputs``
functions are methods of ``PythonWrapperCodegen`` once the overlay is enabled
(see ``inductor_fx_unbacked._overlay``); nothing here patches anything.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import sympy
from torch._inductor import ir
from torch._inductor.codegen.wrapper import WrapperLine
from torch._inductor.virtualized import V
from torch.fx.experimental.symbolic_shapes import resolve_unbacked_bindings
from torch.utils import _pytree as pytree

from .keypath import CppTextEmitter, PythonTextEmitter, define_symbol

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import FxConverter
    from torch._inductor.utils import IndentedBuffer

UnbackedBindings = dict[sympy.Symbol, pytree.KeyPath]


@dataclasses.dataclass
class UnbackedSymbolDefsLine(WrapperLine):
    """Defines the unbacked symbols that a kernel's outputs carry.

    ``unbacked_bindings`` is already resolved against the ShapeEnv; each KeyPath
    says where its symbol is read from, starting at ``output_name``.
    """

    wrapper: PythonWrapperCodegen
    output_name: str
    outputs: Any
    unbacked_bindings: UnbackedBindings

    def codegen(self, code: IndentedBuffer) -> None:
        self.wrapper._codegen_unbacked_symbol_defs_for_outputs(
            self.output_name, self.outputs, self.unbacked_bindings
        )

    def codegen_fx(self, converter: FxConverter) -> Any:
        return converter._generate_unbacked_symbol_defs


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
    of one tensor), the first key selects it and is consumed. With several
    outputs, the first key must select one.
    """
    if len(outputs) == 1:
        (out,) = outputs
        selects_output = isinstance(out, ir.MultiOutput) and len(out.indices) != 0
        return out.get_name(), keypath[1:] if selects_output else keypath
    first = keypath[0] if keypath else None
    if not isinstance(first, pytree.SequenceKey):
        raise NotImplementedError(
            f"cannot select one of {len(outputs)} outputs with KeyPath {keypath!r}"
        )
    return outputs[first.idx].get_name(), keypath[1:]
