"""Run Inductor's FX wrapper backend on a CPU-only machine, through Triton's interpreter.

With ``TRITON_INTERPRET=1``, ``@triton.jit`` kernels become ``InterpretedFunction``
objects that run on CPU tensors with NumPy. Three things stand between that and
the FX backend, and this module supplies them:

1. Triton needs one active driver that reports a target and a device; a CPU-only
   machine has none. :class:`InterpreterDriver` stands in for it.
2. Interpreter mode never precompiles, so a kernel has no compile result to read
   its launch config from. :class:`InterpreterFxConverter` gives it one holding
   the first config, which is the config the interpreter runs.
3. ``wrap_triton`` returns a raw ``InterpretedFunction``, which has no index in
   the kernel side table that ``triton_kernel_wrapper_mutation`` nodes refer to.
   The converter wraps it so that it gets one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import warnings
from collections.abc import Iterator
from typing import Any

import numpy
import torch
from torch._inductor.codegen.wrapper_fxir import FxConverter, TritonKernel

from . import _compat
from .codegen.wrapper_fxir import kernel_source_of, load_kernel

INTERPRET_ENV = "TRITON_INTERPRET"


class InterpreterNotEnabledError(RuntimeError):
    """CPU mode was asked for, but Triton was not started in interpreter mode."""


class InterpreterUnsupportedError(NotImplementedError):
    """A kernel needs something that Triton's interpreter cannot run."""


_LIBDEVICE_CALL = re.compile(r"\blibdevice\.(\w+)\(")


def check_interpretable(kernel_name: str, kernel_body: str) -> None:
    """Raise :class:`InterpreterUnsupportedError` for a kernel that calls ``libdevice``.

    The interpreter has no ``libdevice`` (Inductor uses it for exp, tanh, erf,
    rsqrt, pow, ...); run time would fail with an unrelated ``AttributeError``
    inside the interpreter, so the kernel is refused when it is compiled.
    """
    functions = sorted(set(_LIBDEVICE_CALL.findall(kernel_body)))
    if functions:
        raise InterpreterUnsupportedError(
            f"Triton kernel {kernel_name} calls libdevice."
            + ", libdevice.".join(functions)
            + ", which Triton's interpreter (the CPU mode) cannot run; run it on a GPU, "
            "or keep to operations such as sin, cos, log, sigmoid, where and sums"
        )


def require_interpreter() -> None:
    """Raise unless ``TRITON_INTERPRET=1`` is in the environment; then make sure the
    interpreter runs under the installed NumPy."""
    if os.environ.get(INTERPRET_ENV) != "1":
        raise InterpreterNotEnabledError(
            "the FX backend on CPU runs Triton kernels with Triton's interpreter, "
            f"which needs {INTERPRET_ENV}=1 in the environment before Triton is "
            f"imported; start Python with {INTERPRET_ENV}=1 "
            "(python -m inductor_fx_unbacked demo sets it itself)"
        )
    from ._overlay import fix_interpreter

    fix_interpreter()


def _make_driver() -> Any:
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class InterpreterDriver(DriverBase):
        """A Triton driver for the interpreter: CPU device, a CUDA-shaped target.

        Inductor asks the driver for a target to pick a compiler backend and hash
        its options; the interpreter never compiles, so any installed backend that
        accepts the target will do. Triton wheels ship the NVIDIA one.
        """

        @classmethod
        def is_active(cls) -> bool:
            return True

        def map_python_to_cpp_type(self, ty: str) -> str:
            return ty

        def get_current_target(self) -> Any:
            return GPUTarget("cuda", 80, 32)

        def get_active_torch_device(self) -> torch.device:
            return torch.device("cpu")

        def get_benchmarker(self) -> Any:
            from triton.testing import do_bench

            return do_bench

        def get_device_interface(self) -> Any:
            return torch.cpu

        def get_current_device(self) -> int:
            return 0

        def set_current_device(self, device: int) -> None:
            pass

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

    return InterpreterDriver()


@contextlib.contextmanager
def interpreter_driver() -> Iterator[None]:
    """Make the interpreter driver Triton's active driver, and restore the previous one."""
    from triton.runtime.driver import driver

    previous = _compat.active_triton_driver()
    driver.set_active(_make_driver())
    try:
        with warnings.catch_warnings():
            # Kernel modules warn on import that no CPU backend can compile them;
            # the interpreter never compiles, so the warning only misleads here.
            warnings.filterwarnings("ignore", "Could not find an active CPU backend")
            yield
    finally:
        _compat.restore_triton_driver(previous)


@dataclasses.dataclass(frozen=True)
class InterpretedCompileResult:
    """The compile result of an interpreted kernel: only its config is known."""

    config: Any


def patch_lang_tensor(original: Any) -> Any:
    """Wrap the interpreter's ``_patch_lang_tensor`` so that ``tl.tensor.__index__``
    accepts the one-element arrays that scalars are.

    Triton 3.6 converts with ``int(array)``, which NumPy 2.4 refuses for arrays of
    one dimension (``only 0-dimensional arrays can be converted to Python
    scalars``) on every loop with a runtime bound; Triton 3.7+ squeezes first, as
    this does. The interpreter restores the attribute with the rest of its
    patches after each launch.
    """

    @functools.wraps(original)
    def _patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    return _patch_lang_tensor


def contiguous_operands(original: Any) -> Any:
    """Wrap an ``InterpreterBuilder`` atomic so that its operands are contiguous.

    Triton's semantic layer broadcasts a scalar value to the pointer's shape, which
    in the interpreter is a NumPy view with stride 0; the interpreter's C++ atomics
    read their operands as contiguous arrays, so ``tl.atomic_add(ptrs, scalar)``
    (Inductor's ``index_put`` with accumulation, e.g. the backward of an indexing)
    stored whatever memory followed the scalar. Found by the corpus on Triton 3.6
    to 3.9.
    """
    from triton.runtime.interpreter import TensorHandle

    def contiguous(value: Any) -> Any:
        if isinstance(value, TensorHandle) and not value.data.flags.c_contiguous:
            return TensorHandle(numpy.ascontiguousarray(value.data), value.dtype)
        return value

    @functools.wraps(original)
    def atomic(self: Any, *args: Any) -> Any:
        return original(self, *(contiguous(arg) for arg in args))

    return atomic


def converting_floats(original: Any) -> Any:
    """Wrap the interpreter's ``_implicit_cvt`` so that a float argument becomes a
    scalar tensor, as an int does.

    Triton compiles a Python float argument as an ``fp32`` scalar; the interpreter
    passes it on as a Python float, and a kernel that converts it
    (``ks0.to(tl.float32)``, Inductor's code for a float from ``.item()``) fails
    with ``'float' object has no attribute 'to'``.
    """
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    @functools.wraps(original)
    def _implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, float):
            return tl.tensor(
                TensorHandle(numpy.array([arg], dtype=numpy.float32), tl.float32), tl.float32
            )
        return original(arg)

    return _implicit_cvt


class InterpreterFxConverter(FxConverter):
    """An ``FxConverter`` whose Triton kernels run in Triton's interpreter."""

    def _generate_kernel_definition(self, line: Any) -> None:
        check_interpretable(line.kernel_name, line.kernel_body)
        tuner, wrapped = load_kernel(kernel_source_of(self, line, interpreted=True))
        self.kernels[line.kernel_name] = TritonKernel(tuner, wrapped)
