"""FX conversion of Inductor's C++ kernels: the CPU part of a graph.

A graph whose main device is a GPU can still compute on CPU tensors (a host-side
mask, a scalar moved to the CPU), and Inductor generates C++ kernels for that
part. The Python wrapper defines each one with ``async_compile.cpp_pybinding``
and calls it with the buffers and the sizes it reads. Upstream's converter
refuses them ("FX conversion only supports Triton kernels").

Here each call becomes one ``fx_unbacked::cpp_kernel`` node: the kernel's key,
its buffers (which it may write: the operator declares them mutated) and its
size arguments. The key names the kernel and hashes its module source, which
this module records (:func:`register_source`), so a stored FX artifact carries
the sources and registers them again when it is loaded. The lowered runner calls
the compiled kernel directly (:func:`kernel_function`), as the Python wrapper does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import sympy
import torch
from torch._inductor.codecache import CodeCacheFuture, PyCodeCache
from torch._inductor.codegen.wrapper import KernelCallLine

from .kernels import KernelSource, converted_kernels

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper_fxir import FxConverter

#: Kernel key -> the module source that defines the kernel. The artifact layer
#: owns the entries of the graphs it hands out, and removes them (``forget``) once
#: no graph names them.
_sources: dict[str, KernelSource] = {}
#: Kernel key -> the compiled kernel, once something called it.
_functions: dict[str, Callable[..., Any]] = {}


def source_key(source: KernelSource) -> str:
    """The key that a C++ kernel's nodes name: its name and a hash of its module."""
    digest = hashlib.sha256(source.module_code.encode()).hexdigest()[:16]
    return f"{source.kernel_name}_{digest}"


def register_source(source: KernelSource) -> str:
    """Record a C++ kernel's module source; return the key that its nodes name."""
    key = source_key(source)
    _sources.setdefault(key, source)
    return key


def forget(key: str) -> None:
    """Drop a kernel that no graph names any more."""
    _sources.pop(key, None)
    _functions.pop(key, None)


def kernel_source(key: str) -> KernelSource:
    try:
        return _sources[key]
    except KeyError:
        raise KeyError(
            f"C++ kernel {key} is unknown in this process: its graph was neither converted "
            "here nor loaded from an FX artifact"
        ) from None


def kernel_function(key: str) -> Callable[..., Any]:
    """The compiled C++ kernel (Inductor's Python binding), compiling it on first use."""
    function = _functions.get(key)
    if function is None:
        source = kernel_source(key)
        function = getattr(PyCodeCache.load(source.module_code), source.kernel_name)
        if isinstance(function, CodeCacheFuture):
            function = function.result()
        _functions[key] = function
    return function


@torch.library.custom_op("fx_unbacked::cpp_kernel", mutates_args=("buffers",))
def cpp_kernel(kernel: str, buffers: list[torch.Tensor], sizes: list[int]) -> None:
    """Run the C++ kernel ``kernel`` on ``buffers`` (data pointers, in the kernel's
    order) and ``sizes``, as the Python wrapper calls it."""
    kernel_function(kernel)(*buffers, *sizes)


@cpp_kernel.register_fake
def _(kernel, buffers, sizes):
    return None


# Conversion.


def define_kernel(self: FxConverter, source: KernelSource) -> None:
    """Record a C++ kernel's module source under its key (``self.kernels`` maps the
    kernel's name to it)."""
    key = register_source(source)
    converted_kernels(self).cpp[key] = source
    # Compiled now, as the Python wrapper's module compiles it when it loads.
    kernel_function(key)
    self.kernels[source.kernel_name] = key


def generate_call(self: FxConverter, line: KernelCallLine) -> None:
    """Convert a C++ kernel call into a ``fx_unbacked::cpp_kernel`` node.

    Inductor's C++ kernels take their pointer arguments (``arg_types`` ending in
    ``*``) first, then their sizes; the call args are the buffers' and the
    symbols' names.
    """
    key = self.kernels[line.kernel_name]
    assert isinstance(key, str), f"{line.kernel_name} is not a C++ kernel"
    buffers: list[Any] = []
    sizes: list[Any] = []
    symbols = {str(expr): expr for expr in self.expr_to_proxy if isinstance(expr, sympy.Symbol)}
    for arg, arg_type in zip(line.call_args, line.arg_types, strict=True):
        if arg_type.endswith("*"):
            if sizes:
                raise NotImplementedError(
                    f"C++ kernel {line.kernel_name}: pointer argument {arg} after a size"
                )
            buffers.append(self.buffer_to_node[arg])
        elif "float" in arg_type or "double" in arg_type:
            raise NotImplementedError(
                f"C++ kernel {line.kernel_name}: floating-point argument {arg} ({arg_type}) "
                "is not supported by FX conversion"
            )
        else:
            sizes.append(self._generate_sym_node(_size_expr(line.kernel_name, arg, symbols)))
    self.gm.graph.call_function(torch.ops.fx_unbacked.cpp_kernel.default, (key, buffers, sizes))


def _size_expr(kernel_name: str, arg: Any, symbols: dict[str, sympy.Symbol]) -> sympy.Expr | int:
    """A size argument, which the call names in the wrapper's own words (``s0``, ``u1``),
    over the graph's ``symbols`` by name."""
    if not isinstance(arg, str):
        return arg
    try:
        expr = sympy.sympify(arg, locals=symbols)
    except (sympy.SympifyError, SyntaxError, TypeError) as e:
        raise NotImplementedError(
            f"C++ kernel {kernel_name}: size argument {arg!r} is not an expression"
        ) from e
    unknown = sorted(str(s) for s in expr.free_symbols if str(s) not in symbols)
    if unknown:
        raise NotImplementedError(
            f"C++ kernel {kernel_name}: size argument {arg!r} uses symbols {unknown} "
            "that the graph does not define"
        )
    return expr
