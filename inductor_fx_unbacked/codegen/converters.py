"""The converters the FX backend runs: upstream's ``FxConverter``, defining kernels by source.

Subclasses rather than overlay rows, so that they apply also where the overlay
is disabled inside ``fx_backend`` (upstream's converter then writes the rest of
the graph): every Triton kernel is imported from its source, under its stable
side-table index (``kernels.py``), so the graph can own and store it.

The CPU mode's converter imports kernels that Triton's interpreter runs: with
``TRITON_INTERPRET=1`` nothing is compiled, and a kernel is an
``InterpretedFunction`` that runs on CPU tensors with NumPy. It refuses, when
the graph is compiled, the kernels the interpreter cannot run.
"""

from __future__ import annotations

import re

from torch._inductor.codegen.wrapper import KernelDefinitionLine
from torch._inductor.codegen.wrapper_fxir import FxConverter

from . import interpreted_libdevice
from .fx_triton import define_triton_kernel


class InterpreterUnsupportedError(NotImplementedError):
    """A kernel needs something that Triton's interpreter cannot run."""


_LIBDEVICE_CALL = re.compile(r"\blibdevice\.(\w+)\(")


def check_interpretable(kernel_name: str, kernel_body: str) -> None:
    """Raise :class:`InterpreterUnsupportedError` for a kernel that calls a ``libdevice``
    function that the CPU mode does not compute (``interpreted_libdevice.FUNCTIONS``).

    Run time would fail with an unrelated error inside the interpreter, so the
    kernel is refused when it is compiled.
    """
    called = set(_LIBDEVICE_CALL.findall(kernel_body))
    functions = sorted(called - interpreted_libdevice.FUNCTIONS)
    if functions:
        raise InterpreterUnsupportedError(
            f"Triton kernel {kernel_name} calls libdevice."
            + ", libdevice.".join(functions)
            + ", which Triton's interpreter (the CPU mode) cannot run; run it on a GPU"
        )


class SourcedFxConverter(FxConverter):
    """An ``FxConverter`` whose Triton kernels are defined by their source."""

    #: Whether kernels run in Triton's interpreter.
    interpreted = False

    def _generate_kernel_definition(self, line: KernelDefinitionLine) -> None:
        if not line.gpu:  # a C++ kernel
            super()._generate_kernel_definition(line)
            return
        if self.interpreted:
            check_interpretable(line.kernel_name, line.kernel_body)
        define_triton_kernel(self, line, interpreted=self.interpreted)


class InterpreterFxConverter(SourcedFxConverter):
    """An ``FxConverter`` whose Triton kernels run in Triton's interpreter."""

    interpreted = True
