"""The CPU mode's ``libdevice``: the interpreter fixes that let Inductor's kernels call
it (``interpreter_patches`` in ``overlay.py`` installs them).

Inductor's kernels name ``libdevice`` as ``torch._inductor.runtime.triton_compat``
resolves it; on a machine without a GPU that is Triton's module of stubs, whose
functions return ``None``. Two wrappers make the calls compute:

- :func:`binding_libdevice` wraps the interpreter's ``_patch_lang``, which patches
  ``triton.language`` for a launch or a device function's call and undoes that
  after it: in the same scope, each function of
  ``codegen.interpreted_libdevice.FUNCTIONS`` in the kernels' ``libdevice`` becomes
  Triton's CUDA libdevice function with the interpreter's semantic, which picks
  the symbol and the result's dtype as compiled code does;
- :func:`computing_externs` gives the interpreter's builder the external call it
  lacks, computed by that module's table.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from ..codegen import interpreted_libdevice

F = TypeVar("F")


def binding_libdevice(original: F) -> F:
    """Wrap the interpreter's ``_patch_lang`` so that the scope it returns also binds
    the kernels' ``libdevice`` functions (the module's docstring says how)."""
    import triton.language as tl
    from torch._inductor.runtime import triton_compat
    from triton.language.extra.cuda import libdevice as cuda_libdevice
    from triton.runtime import interpreter

    # Where Inductor found no libdevice it names ``tl.math``, whose functions are the
    # interpreter's own already.
    seen = None if triton_compat.libdevice is tl.math else triton_compat.libdevice
    functions = {
        name: getattr(cuda_libdevice, name)
        for name in sorted(interpreted_libdevice.FUNCTIONS)
        if hasattr(cuda_libdevice, name)
    }

    def bound(function: Any) -> Any:
        def call(*args: Any) -> Any:
            return function(*args, _semantic=interpreter.interpreter_semantic)

        return call

    bindings = {name: bound(function) for name, function in functions.items()}

    @functools.wraps(original)  # type: ignore[arg-type]
    def _patch_lang(fn: Any) -> Any:
        scope = original(fn)  # type: ignore[operator]
        if seen is not None:
            for name, binding in bindings.items():
                scope.set_attr(seen, name, binding)
        return scope

    return _patch_lang  # type: ignore[return-value]


def computing_externs(original: F) -> F:
    """Replace ``InterpreterBuilder.create_extern_elementwise`` (which raises) with the
    table's computation of the symbol, on the operands' arrays."""
    from triton.runtime import interpreter

    from .. import _compat

    np_dtype = _compat.interpreter_np_dtype()

    @functools.wraps(original)  # type: ignore[arg-type]
    def create_extern_elementwise(
        self: Any,
        lib_name: str,
        lib_path: str,
        symbol: str,
        arg_list: list[Any],
        ret_type: Any,
        is_pure: bool,
    ) -> Any:
        values = interpreted_libdevice.compute(symbol, *(arg.data for arg in arg_list))
        dtype = ret_type.scalar
        return interpreter.TensorHandle(values.astype(np_dtype(dtype), copy=False), dtype)

    return create_extern_elementwise  # type: ignore[return-value]
