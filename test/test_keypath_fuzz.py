"""Fuzzing the KeyPath grammar: three renderings of one path must agree.

Hypothesis builds nested outputs (tuples and lists of tensors with random sizes,
strides and storage offsets, ints, and objects holding an inner tensor) and a
KeyPath into each, using every entry the grammar supports, ``DivideByKey`` after
a size step included. The value the path defines is computed three ways:

1. the Python text (``PythonTextEmitter``), evaluated on the real outputs, with
   its divisibility checks;
2. the FX nodes (``FxKeyPathEmitter``), run as a graph;
3. a direct walk of the real outputs, written here from the KeyPath semantics.

All three must give the same value, or all three must refuse a division that is
not exact.
"""

import types

import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch._inductor.codegen.wrapper_fxir import FxConverter
from torch.fx.experimental.symbolic_shapes import (
    CallMethodKey,
    ConvertIntKey,
    DivideByKey,
    InnerTensorKey,
)
from torch.utils._pytree import SequenceKey

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.codegen.fx_symbols import FxKeyPathEmitter
from inductor_fx_unbacked.codegen.keypath import PythonTextEmitter, define_symbol

u0 = sympy.Symbol("u0", integer=True)


class NotDivisible(Exception):
    pass


@st.composite
def tensors(draw):
    """A strided view into a bigger buffer: random size, stride and storage offset."""
    ndim = draw(st.integers(1, 3))
    size = [draw(st.integers(1, 5)) for _ in range(ndim)]
    stride = [draw(st.integers(1, 7)) for _ in range(ndim)]
    offset = draw(st.integers(0, 9))
    extent = offset + sum((s - 1) * t for s, t in zip(size, stride)) + 1
    base = torch.arange(extent, dtype=torch.int64)
    return torch.as_strided(base, size, stride, offset)


def leaves():
    return st.one_of(
        tensors(),
        st.integers(-20, 20),
        st.booleans().map(lambda b: torch.tensor([b])),
        tensors().map(lambda t: types.SimpleNamespace(inner=t)),
    )


outputs = st.recursive(
    leaves(),
    lambda children: st.one_of(
        st.lists(children, min_size=1, max_size=3),
        st.lists(children, min_size=1, max_size=3).map(tuple),
    ),
    max_leaves=6,
)


@st.composite
def paths(draw):
    """An output and a KeyPath into it that ends on an int."""
    value = draw(outputs)
    root, keypath = value, []
    while True:
        if isinstance(value, (list, tuple)):
            index = draw(st.integers(0, len(value) - 1))
            keypath.append(SequenceKey(index))
            value = value[index]
        elif isinstance(value, types.SimpleNamespace):
            keypath.append(InnerTensorKey("inner"))
            value = value.inner
        elif isinstance(value, torch.Tensor):
            if value.dtype == torch.bool:
                keypath += [CallMethodKey("item"), ConvertIntKey()]
                return root, tuple(keypath)
            step = draw(st.sampled_from(["size", "stride", "storage_offset", "numel"]))
            if step in ("size", "stride"):
                dim = draw(st.integers(0, value.dim() - 1))
                keypath += [CallMethodKey(step), SequenceKey(dim)]
                value = getattr(value, step)(dim)
            else:
                keypath.append(CallMethodKey(step))
                value = getattr(value, step)()
        else:
            if draw(st.booleans()):
                # Exact divisors mostly; sometimes one that does not divide.
                divisors = [d for d in range(1, 6) if value % d == 0]
                divisor = draw(st.sampled_from(divisors) | st.integers(2, 5))
                keypath.append(DivideByKey(divisor))
            return root, tuple(keypath)


def walk(value, keypath):
    """The reference: KeyPath semantics applied to real values, entry by entry."""
    keypath = list(keypath)
    while keypath:
        entry = keypath.pop(0)
        if isinstance(entry, SequenceKey):
            value = value[entry.idx]
        elif isinstance(entry, InnerTensorKey):
            value = getattr(value, entry.inner_name)
        elif isinstance(entry, CallMethodKey):
            if keypath and isinstance(keypath[0], SequenceKey):
                value = getattr(value, entry.name)(keypath.pop(0).idx)
            else:
                value = getattr(value, entry.name)()
        elif isinstance(entry, DivideByKey):
            if value % entry.divisor != 0:
                raise NotDivisible
            value = value // entry.divisor
        elif isinstance(entry, ConvertIntKey):
            value = 1 if value else 0
    return value


def python_text(value, keypath):
    emitter = PythonTextEmitter()
    text = define_symbol(u0, keypath, "root", emitter)
    scope = {"root": value}
    for dividend, divisor in emitter.divisibility_checks:
        if eval(dividend, scope) % divisor != 0:
            raise NotDivisible
    return eval(text, scope)


def fx_graph(value, keypath):
    converter = FxConverter(
        lines=[], prologue="", graph_inputs={}, graph_outputs=[], subgms={}, is_subgraph=False
    )
    graph = converter.gm.graph
    root = graph.placeholder("root")
    graph.output(define_symbol(u0, keypath, root, FxKeyPathEmitter(converter, u0)))
    gm = torch.fx.GraphModule({}, graph)
    try:
        return gm(value)
    except RuntimeError as e:
        if "is not divisible by" in str(e):
            raise NotDivisible from None
        raise


def outcome(fn, value, keypath):
    try:
        return fn(value, keypath)
    except NotDivisible:
        return "not divisible"


@settings(
    max_examples=1000,
    derandomize=True,
    # No example database: derandomized runs replay nothing, and pytest-xdist
    # workers would share the directory.
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(paths())
def test_python_text_fx_nodes_and_direct_walk_agree(case):
    value, keypath = case
    expected = outcome(walk, value, keypath)
    ifx.enable()
    try:
        assert outcome(python_text, value, keypath) == expected, keypath
        assert outcome(fx_graph, value, keypath) == expected, keypath
    finally:
        ifx.disable()


def test_the_strategy_reaches_every_entry():
    """The fuzzer is only as good as what it generates: every entry kind appears."""
    seen = set()

    @settings(max_examples=300, derandomize=True, deadline=None, database=None)
    @given(paths())
    def collect(case):
        _, keypath = case
        for entry in keypath:
            seen.add(entry.name if isinstance(entry, CallMethodKey) else type(entry).__name__)

    collect()
    assert seen >= {
        "SequenceKey",
        "InnerTensorKey",
        "DivideByKey",
        "ConvertIntKey",
        "size",
        "stride",
        "storage_offset",
        "numel",
        "item",
    }, seen
