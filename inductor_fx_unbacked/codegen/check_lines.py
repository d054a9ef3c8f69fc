"""The wrapper-IR lines of runtime checks, and their Python text.

Scalar (value ranges, ``torch._check``), size/stride, alignment and NaN/Inf checks
that upstream writes as raw text become lines for the FX wrapper; the Python and
C++ wrappers keep upstream's text. ``fx_checks.py`` converts them to FX nodes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch._inductor import config, ir
from torch._inductor.codegen.common import TensorArg
from torch._inductor.codegen.wrapper import WrapperLine
from torch._inductor.virtualized import V

from .._compat import assert_name, is_alignment_assert, skips_scalar_assert
from .wrapper import _replay, captured_lines, is_fx_wrapper

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper import FxConversionFunc, PythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import FxConverter
    from torch._inductor.utils import IndentedBuffer


@dataclasses.dataclass
class ScalarAssertLine(WrapperLine):
    """``ir.AssertScalar``: a value range of an unbacked symbol, or a deferred
    ``torch._check`` condition, once all of its symbols are defined."""

    wrapper: PythonWrapperCodegen
    node: ir.AssertScalar

    def codegen(self, code: IndentedBuffer) -> None:
        condition = self.wrapper.codegen_python_sizevar(self.node.scalar, simplify=False)
        self.wrapper.writeline(f"if not ({condition}):")
        self.wrapper.writeline(f"    raise RuntimeError({self.node.msg!r})")
        self.wrapper.writeline(f"{self.node.get_name()} = None")

    def codegen_fx(self, converter: FxConverter) -> FxConversionFunc:
        return converter._generate_scalar_assert


def codegen_scalar_assert(original: Callable[..., None]) -> Callable[..., None]:
    """``ir.AssertScalar.codegen``: the FX wrapper gets a :class:`ScalarAssertLine`.

    Upstream writes raw text there (a ``torch.compile`` FX backend then fails to
    convert it) or, under ``fx_wrapper``, nothing (a TODO), so a violated
    ``torch._check`` ran silently on the AOT path.
    """

    @functools.wraps(original)
    def codegen(self: ir.AssertScalar, wrapper: PythonWrapperCodegen) -> None:
        if not is_fx_wrapper(wrapper):
            return original(self, wrapper)
        if config.scalar_asserts and not skips_scalar_assert(self):
            wrapper.writeline(ScalarAssertLine(wrapper, self))

    return codegen


@dataclasses.dataclass
class SizeStrideAssertLine(WrapperLine):
    """The size, stride and (where upstream checks it) dtype an extern kernel's
    output must have. ``upstream_lines`` is what upstream wrote for it."""

    wrapper: PythonWrapperCodegen
    node: ir.ExternKernel
    name: str
    dtype: torch.dtype | None
    upstream_lines: list[Any]

    def codegen(self, code: IndentedBuffer) -> None:
        _replay(self.wrapper, code, self.upstream_lines)

    def codegen_fx(self, converter: FxConverter) -> FxConversionFunc:
        return converter._generate_size_stride_assert


def codegen_size_asserts(original: Callable[..., None]) -> Callable[..., None]:
    """``ir.ExternKernel.codegen_size_asserts``: the FX wrapper gets a
    :class:`SizeStrideAssertLine` wherever upstream writes a check."""

    @functools.wraps(original)
    def codegen_size_asserts(self: ir.ExternKernel, wrapper: PythonWrapperCodegen) -> None:
        if not is_fx_wrapper(wrapper):
            return original(self, wrapper)
        with captured_lines(wrapper) as written:
            original(self, wrapper)
        if written:
            # Newer releases' lines name the buffer upstream checks, and lines where upstream
            # checks the dtype too carry it.
            name = getattr(written[0], "name", None) or assert_name(self)
            dtype = getattr(written[0], "dtype", None)
            wrapper.writeline(SizeStrideAssertLine(wrapper, self, name, dtype, written))

    return codegen_size_asserts


@dataclasses.dataclass
class AlignmentAssertLine(WrapperLine):
    """An extern kernel's output must be aligned as Inductor's kernels assume."""

    wrapper: PythonWrapperCodegen
    node: ir.ExternKernel
    upstream_lines: list[Any]

    def codegen(self, code: IndentedBuffer) -> None:
        _replay(self.wrapper, code, self.upstream_lines)

    def codegen_fx(self, converter: FxConverter) -> FxConversionFunc:
        return converter._generate_alignment_assert


def codegen_alignment_asserts(original: Callable[..., None]) -> Callable[..., None]:
    """``ir.ExternKernel.codegen_alignment_asserts``: the FX wrapper gets an
    :class:`AlignmentAssertLine` wherever upstream writes a check (not for a
    buffer upstream only comments on as unaligned)."""

    @functools.wraps(original)
    def codegen_alignment_asserts(self: ir.ExternKernel, wrapper: PythonWrapperCodegen) -> None:
        if not is_fx_wrapper(wrapper):
            return original(self, wrapper)
        with captured_lines(wrapper) as written:
            original(self, wrapper)
        if any(is_alignment_assert(line) for line in written):
            wrapper.writeline(AlignmentAssertLine(wrapper, self, written))

    return codegen_alignment_asserts


@dataclasses.dataclass
class NanCheckLine(WrapperLine):
    """With ``config.nan_asserts``: a kernel's tensor arguments hold no NaN or Inf."""

    wrapper: PythonWrapperCodegen
    names: list[str]

    def codegen(self, code: IndentedBuffer) -> None:
        for name in self.names:
            self.wrapper.writeline(f"assert not {name}.isnan().any().item()")
            self.wrapper.writeline(f"assert not {name}.isinf().any().item()")

    def codegen_fx(self, converter: FxConverter) -> FxConversionFunc:
        return converter._generate_nan_check


def codegen_nan_check(original: Callable[..., None]) -> Callable[..., None]:
    """``TritonKernel.codegen_nan_check``: a :class:`NanCheckLine` for the FX wrapper."""

    @functools.wraps(original)
    def codegen_nan_check(self: Any) -> None:
        wrapper = V.graph.wrapper_code
        if not is_fx_wrapper(wrapper):
            return original(self)
        _, call_args, arg_signatures, _ = self.args.python_argdefs()
        names = [
            arg
            for arg, signature in zip(call_args, arg_signatures)
            if isinstance(signature, TensorArg)
        ]
        wrapper.writeline(NanCheckLine(wrapper, names))

    return codegen_nan_check


def codegen_multi_kernel_nan_check(original: Callable[..., None]) -> Callable[..., None]:
    """``MultiKernel.codegen_nan_check``: one :class:`NanCheckLine` for the FX wrapper,
    over the tensor arguments of all sub-kernels, each once."""

    @functools.wraps(original)
    def codegen_nan_check(self: Any) -> None:
        wrapper = V.graph.wrapper_code
        if not is_fx_wrapper(wrapper):
            return original(self)
        names: dict[str, None] = {}
        for kernel in self.kernels:
            _, call_args, arg_signatures, _ = kernel.args.python_argdefs()
            for arg, signature in zip(call_args, arg_signatures):
                if isinstance(signature, TensorArg):
                    names.setdefault(arg)
        wrapper.writeline(NanCheckLine(wrapper, list(names)))

    return codegen_nan_check
