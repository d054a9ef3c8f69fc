"""inductor-fx-unbacked: unbacked-symbol support for Inductor's FX wrapper backend.

``enable()`` installs the overlay onto upstream Inductor classes; ``fx_backend``
compiles with the FX wrapper backend (on CPU through Triton's interpreter);
``capture_fx_graphs`` returns the FX graphs a compiled call produced.
"""

from ._overlay import (
    SUPPORTED_TORCH,
    UnsupportedTorchVersionError,
    disable,
    enable,
    is_enabled,
)
from .api import CapturedGraphs, capture_fx_graphs, fx_backend, recording_graphs
from .interpreter import InterpreterNotEnabledError

__version__ = "0.1.0"

__all__ = [
    "SUPPORTED_TORCH",
    "CapturedGraphs",
    "InterpreterNotEnabledError",
    "UnsupportedTorchVersionError",
    "capture_fx_graphs",
    "disable",
    "enable",
    "fx_backend",
    "is_enabled",
    "recording_graphs",
]
