"""The one KeyPath grammar: how an unbacked symbol is read out of a kernel's outputs.

Inductor describes where an unbacked symbol comes from with a pytree KeyPath, for
example ``(SequenceKey(0), CallMethodKey("size"), SequenceKey(0))`` for
``outs[0].size(0)``. Python text, C++ text and FX nodes are three renderings of the
same path, so the path is walked here, once, by recursive descent; an emitter says
what each step produces. Every step consumes one entry, except a method call
followed by an index (``size``/``stride``), which consumes the pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

import sympy
from torch.fx.experimental.symbolic_shapes import (
    CallMethodKey,
    ConvertIntKey,
    DivideByKey,
    InnerTensorKey,
)
from torch.utils import _pytree as pytree

T = TypeVar("T")

#: Methods whose KeyPath entry is followed by the dimension they take.
INDEXED_METHODS = ("size", "stride")


class UnsupportedKeyPathError(NotImplementedError):
    """A KeyPath entry that an emitter cannot express."""

    def __init__(self, symbol: sympy.Symbol, keypath: pytree.KeyPath, reason: str):
        self.symbol = symbol
        self.keypath = tuple(keypath)
        self.reason = reason
        super().__init__(f"cannot define {symbol} from KeyPath {self.keypath!r}: {reason}")


class UnsupportedStep(Exception):
    """Raised by an emitter for a step it has no rendering of; the walk adds context."""


class KeyPathEmitter(Protocol, Generic[T]):
    """What each step of a KeyPath becomes, given the value built so far."""

    def method_call(self, value: T, method: str, index: int | None) -> T: ...

    def sequence_item(self, value: T, index: int) -> T: ...

    def floor_divide(self, value: T, divisor: Any) -> T: ...

    def convert_int(self, value: T) -> T: ...

    def inner_tensor(self, value: T, attr: str) -> T: ...


def define_symbol(
    symbol: sympy.Symbol,
    keypath: pytree.KeyPath,
    root: T,
    emitter: KeyPathEmitter[T],
) -> T:
    """Walk ``keypath`` from ``root`` and return the value that defines ``symbol``.

    Raises :class:`UnsupportedKeyPathError`, naming the symbol and the whole path,
    for an entry that is not part of the grammar or that the emitter cannot express.
    """
    try:
        return _descend(root, tuple(keypath), emitter)
    except UnsupportedStep as e:
        raise UnsupportedKeyPathError(symbol, keypath, str(e)) from None


def _descend(value: T, keypath: Sequence[Any], emitter: KeyPathEmitter[T]) -> T:
    if not keypath:
        return value
    entry, rest = keypath[0], keypath[1:]
    if isinstance(entry, CallMethodKey):
        if rest and isinstance(rest[0], pytree.SequenceKey):
            step = emitter.method_call(value, entry.name, rest[0].idx)
            return _descend(step, rest[1:], emitter)
        return _descend(emitter.method_call(value, entry.name, None), rest, emitter)
    if isinstance(entry, pytree.SequenceKey):
        return _descend(emitter.sequence_item(value, entry.idx), rest, emitter)
    if isinstance(entry, DivideByKey):
        return _descend(emitter.floor_divide(value, entry.divisor), rest, emitter)
    if isinstance(entry, ConvertIntKey):
        return _descend(emitter.convert_int(value), rest, emitter)
    if isinstance(entry, InnerTensorKey):
        return _descend(emitter.inner_tensor(value, entry.inner_name), rest, emitter)
    raise UnsupportedStep(f"unsupported KeyPath entry {entry!r}")


class _TextEmitter:
    """Shared part of the Python and C++ text emitters.

    A ``DivideByKey`` step records the dividend so that the caller can emit a
    runtime divisibility check before the definition.
    """

    def __init__(self) -> None:
        self.divisibility_checks: list[tuple[str, Any]] = []

    def floor_divide(self, value: str, divisor: Any) -> str:
        if divisor != 1:
            self.divisibility_checks.append((value, divisor))
        return self._divide(value, divisor)

    def _divide(self, value: str, divisor: Any) -> str:
        raise NotImplementedError


class PythonTextEmitter(_TextEmitter):
    """Renders a KeyPath as a Python expression, exactly as upstream Inductor does."""

    def method_call(self, value: str, method: str, index: int | None) -> str:
        return f"{value}.{method}()" if index is None else f"{value}.{method}({index})"

    def sequence_item(self, value: str, index: int) -> str:
        return f"{value}[{index}]"

    def _divide(self, value: str, divisor: Any) -> str:
        return f"{value}.__floordiv__({divisor})"

    def convert_int(self, value: str) -> str:
        return f"(1 if {value} else 0)"

    def inner_tensor(self, value: str, attr: str) -> str:
        return f"{value}.{attr}"

    @staticmethod
    def divisibility_check(symbol: sympy.Symbol, dividend: str, divisor: Any) -> str:
        message = f"{symbol}: {dividend} is not divisible by {divisor}"
        return f"if {dividend} % {divisor} != 0: raise RuntimeError({message!r})"


class CppTextEmitter(_TextEmitter):
    """Renders a KeyPath as a C++ expression over ``RAIIAtenTensorHandle`` outputs."""

    def method_call(self, value: str, method: str, index: int | None) -> str:
        if index is not None and method in INDEXED_METHODS:
            return f"{value}.{method}({index})"
        if index is None and method == "storage_offset":
            return f"{value}.storage_offset()"
        called = method if index is None else f"{method}({index})"
        raise UnsupportedStep(f"C++ tensor handles have no method {called}")

    def sequence_item(self, value: str, index: int) -> str:
        return f"std::get<{index}>({value})"

    def _divide(self, value: str, divisor: Any) -> str:
        return f"({value} / {divisor})"

    def convert_int(self, value: str) -> str:
        return f"({value} ? 1 : 0)"

    def inner_tensor(self, value: str, attr: str) -> str:
        raise UnsupportedStep(
            f"InnerTensorKey({attr!r}) has no C++ form: tensor subclasses are "
            "desugared before C++ wrapper codegen"
        )

    @staticmethod
    def divisibility_check(symbol: sympy.Symbol, dividend: str, divisor: Any) -> str:
        message = f"{symbol}: {dividend} is not divisible by {divisor}"
        return f'if ({dividend} % {divisor} != 0) {{ throw std::runtime_error("{message}"); }}'
