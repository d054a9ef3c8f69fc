"""Differences between the supported torch releases, by feature, in one place."""

from __future__ import annotations

from typing import Any


def ensure_kernel_loaded(tuner: Any) -> None:
    """Make sure a kernel compiled in a worker process has its Python function.

    Parallel compile workers strip ``JITFunction.fn`` before pickling the
    autotuner back; a kernel stored in the Triton side table in that state fails
    at run time inside ``JITFunction.run``. Torch 2.13 reloads it with
    ``CachingAutotuner._ensure_kernel_loaded``; torch 2.11 has only the stashed
    ``_reload_kernel`` callback.
    """
    if hasattr(tuner, "_ensure_kernel_loaded"):
        tuner._ensure_kernel_loaded()
    elif getattr(tuner.fn, "fn", True) is None:
        tuner.fn = tuner._reload_kernel().fn


def _has_size_stride_assert_line() -> bool:
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    return hasattr(PythonWrapperCodegen, "_codegen_assert_size_stride")


#: Torch 2.13 checks extern kernel outputs in the C++ wrapper too, through the
#: overridable ``_codegen_assert_size_stride``; torch 2.11 checks them in Python only.
CPP_SIZE_ASSERTS = _has_size_stride_assert_line()


def write_size_stride_assert(
    wrapper: Any, code: Any, name: str, size: str, stride: str, op_name: str
) -> None:
    """Write the size/stride check of a buffer as the installed torch writes it."""
    if CPP_SIZE_ASSERTS:
        wrapper._codegen_assert_size_stride(code, name, size, stride, op_name)
    else:
        code.writeline(f"assert_size_stride({name}, {size}, {stride}, {op_name!r})")
