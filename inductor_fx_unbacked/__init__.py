"""inductor-fx-unbacked: unbacked-symbol support for Inductor's FX wrapper backend.

``enable()`` installs the overlay onto upstream Inductor classes; ``fx_backend``
compiles with the FX wrapper backend (on CPU through Triton's interpreter);
``capture_fx_graphs`` returns the FX graphs a compiled call produced.

Importing the package does not import Triton, so that a program (and
``python -m inductor_fx_unbacked``) can still set ``TRITON_INTERPRET=1`` first;
the names that need Inductor's codegen load on first use.
"""

import importlib
from typing import Any

from .integration.logs import register_log as _register_log
from .integration.overlay import (
    SUPPORTED_TORCH,
    UnsupportedTorchVersionError,
    disable,
    enable,
    is_enabled,
)

__version__ = "0.1.0"

_register_log()

_LAZY = {
    "CapturedGraphs": "integration.capture",
    "capture_fx_graphs": "integration.capture",
    "NoUnbackedSymbolWarning": "integration.graph_breaks",
    "fx_backend": "integration.backend",
    "FxBackendConflictError": "integration.sharing",
    "recording_graphs": "integration.recording",
    "strip_runtime_asserts": "codegen.fx_checks",
    "InterpreterNotEnabledError": "integration.cpu_mode",
    "InterpreterUnsupportedError": "codegen.converters",
    "KernelGoneError": "artifact.kernels",
    "compile": "integration.direct",
    "CompiledArtifact": "integration.compiled",
    "CompiledWithBreaks": "integration.direct_breaks",
    "CompileError": "integration.compiled",
    "InputError": "integration.compiled",
    "save": "integration.saving",
    "load": "integration.saving",
    "LoadError": "integration.saving",
}

__all__ = [
    "SUPPORTED_TORCH",
    "UnsupportedTorchVersionError",
    "disable",
    "enable",
    "is_enabled",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
