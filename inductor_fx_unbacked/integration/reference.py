"""Inductor's Python wrapper as the reference that the FX backend is compared with.

On a GPU that is the Python wrapper as it is. On CPU it gets the CPU mode's
kernels: Triton kernels (``cpu_backend="triton"``) run by Triton's interpreter,
with the CPU mode's fixes to the interpreter (``overlay.interpreter_patches``),
so that the two compiles differ only in the wrapper and no C++ compiler runs.
Without those fixes, an interpreted reduction helper (``tl.sum``) leaves
``triton.language.core`` patched for the process, and a user kernel launched
later in the process computes wrong values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import overlay
from .cpu_mode import interpreter_driver, require_interpreter


@contextlib.contextmanager
def python_wrapper_reference(device: str) -> Iterator[None]:
    """Compile and run inside this for Inductor's Python wrapper as the reference."""
    if device != "cpu":
        yield
        return
    from torch._inductor import config

    require_interpreter()
    overlay.fix_interpreter()
    with interpreter_driver(), config.patch(cpu_backend="triton"):
        yield
