"""The KeyPath grammar and its text emitters, including a differential test of
the Python text against upstream's emitter on the installed torch."""

import pytest
import sympy
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch._inductor.codegen.wrapper import PythonWrapperCodegen
from torch._inductor.graph import GraphLowering
from torch._inductor.virtualized import V
from torch.fx.experimental.symbolic_shapes import (
    CallMethodKey,
    ConvertIntKey,
    DivideByKey,
    InnerTensorKey,
)
from torch.utils._pytree import GetAttrKey, MappingKey, SequenceKey

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.codegen import wrapper as ours
from inductor_fx_unbacked.codegen.keypath import (
    CppTextEmitter,
    PythonTextEmitter,
    UnsupportedKeyPathError,
    define_symbol,
)

u0 = sympy.Symbol("u0", integer=True)


def python_text(keypath, root="buf0"):
    return define_symbol(u0, keypath, root, PythonTextEmitter())


def cpp_text(keypath, root="buf1"):
    return define_symbol(u0, keypath, root, CppTextEmitter())


def test_method_with_index_consumes_the_pair():
    keypath = (SequenceKey(0), CallMethodKey("size"), SequenceKey(1))
    assert python_text(keypath) == "buf0[0].size(1)"
    assert cpp_text(keypath) == "std::get<0>(buf1).size(1)"


def test_divide_after_size_is_kept():
    # Upstream's FX recursion dropped the entry after a (method, index) pair.
    keypath = (CallMethodKey("size"), SequenceKey(0), DivideByKey(4))
    assert python_text(keypath) == "buf0.size(0).__floordiv__(4)"
    assert cpp_text(keypath) == "(buf1.size(0) / 4)"


def test_divide_records_a_divisibility_check_unless_by_one():
    emitter = PythonTextEmitter()
    define_symbol(u0, (CallMethodKey("size"), SequenceKey(0), DivideByKey(4)), "buf0", emitter)
    define_symbol(u0, (CallMethodKey("size"), SequenceKey(0), DivideByKey(1)), "buf0", emitter)
    assert emitter.divisibility_checks == [("buf0.size(0)", 4)]
    assert PythonTextEmitter.divisibility_check(u0, "buf0.size(0)", 4) == (
        "if buf0.size(0) % 4 != 0: raise RuntimeError('u0: buf0.size(0) is not divisible by 4')"
    )
    assert CppTextEmitter.divisibility_check(u0, "buf1.size(0)", 4) == (
        "if (buf1.size(0) % 4 != 0) "
        '{ throw std::runtime_error("u0: buf1.size(0) is not divisible by 4"); }'
    )


def test_storage_offset_and_convert_int():
    assert python_text((CallMethodKey("storage_offset"),)) == "buf0.storage_offset()"
    assert cpp_text((CallMethodKey("storage_offset"),)) == "buf1.storage_offset()"
    assert python_text((ConvertIntKey(),)) == "(1 if buf0 else 0)"
    assert cpp_text((ConvertIntKey(),)) == "(buf1 ? 1 : 0)"


def test_inner_tensor_is_python_only():
    assert python_text((InnerTensorKey("a"), CallMethodKey("size"), SequenceKey(0))) == (
        "buf0.a.size(0)"
    )
    with pytest.raises(UnsupportedKeyPathError, match=r"cannot define u0 from KeyPath"):
        cpp_text((InnerTensorKey("a"),))


@pytest.mark.parametrize("entry", [MappingKey("k"), GetAttrKey("a")])
def test_unsupported_entry_names_symbol_and_whole_keypath(entry):
    keypath = (SequenceKey(0), entry)
    with pytest.raises(UnsupportedKeyPathError) as info:
        python_text(keypath)
    message = str(info.value)
    assert message.startswith(f"cannot define u0 from KeyPath {keypath!r}")
    assert f"unsupported KeyPath entry {entry!r}" in message
    assert isinstance(info.value, NotImplementedError)


# Paths built from the entries upstream's Python emitter supports.
supported_steps = st.one_of(
    st.builds(lambda i: (SequenceKey(i),), st.integers(0, 3)),
    st.builds(
        lambda m, i: (CallMethodKey(m), SequenceKey(i)),
        st.sampled_from(["size", "stride"]),
        st.integers(0, 3),
    ),
    st.just((CallMethodKey("storage_offset"),)),
    st.builds(lambda d: (DivideByKey(d),), st.integers(1, 8)),
)
supported_keypaths = st.lists(supported_steps, max_size=4).map(
    lambda steps: tuple(entry for step in steps for entry in step)
)


@pytest.fixture(scope="module")
def graph_handler():
    with V.set_graph_handler(GraphLowering(torch.fx.symbolic_trace(lambda x: -x))):
        yield


def emitted_lines(emit, bindings):
    wrapper = PythonWrapperCodegen()
    emit(wrapper, "buf0", [], bindings)
    return wrapper.lines


@given(keypaths=st.lists(supported_keypaths, min_size=1, max_size=3))
def test_python_definitions_match_upstream(graph_handler, keypaths):
    """Our definition lines are upstream's; DivideByKey adds a check line before."""
    assert not ifx.is_enabled()
    upstream = PythonWrapperCodegen.__dict__["_codegen_unbacked_symbol_defs_for_outputs"]
    bindings = {sympy.Symbol(f"u{i}", integer=True): kp for i, kp in enumerate(keypaths)}
    ours_lines = emitted_lines(ours._codegen_unbacked_symbol_defs_for_outputs, bindings)
    definitions = [line for line in ours_lines if not line.startswith("if ")]
    assert definitions == emitted_lines(upstream, bindings)
    checks = len(ours_lines) - len(definitions)
    assert checks == sum(
        isinstance(e, DivideByKey) and e.divisor != 1 for kp in keypaths for e in kp
    )
