"""Install and remove the overlay: the only module that touches upstream objects.

The overlay is a table of (upstream owner, attribute, our implementation).
``enable()`` saves each original from the owner's own ``__dict__`` and sets ours;
``disable()`` puts the identical original objects back. Everything else in the
package is ordinary code that can be read and tested without patching anything.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import torch
from torch.torch_version import Version

#: Inclusive lower bound and exclusive upper bound of the supported torch releases.
SUPPORTED_TORCH = ("2.11", "2.14")


class UnsupportedTorchVersionError(RuntimeError):
    """The installed torch is outside the range the overlay was written against."""


@dataclasses.dataclass(frozen=True)
class Patch:
    owner: type
    name: str
    replacement: Any


_MISSING = object()
_lock = threading.Lock()
_saved: dict[tuple[type, str], Any] = {}


def check_torch_version(version: str | None = None) -> None:
    """Raise :class:`UnsupportedTorchVersionError` unless torch is in the supported range."""
    version = torch.__version__ if version is None else version
    low, high = SUPPORTED_TORCH
    # Compare the release only, so that 2.14.0a0 nightlies count as 2.14.
    release = Version(Version(version).base_version)
    if not Version(low) <= release < Version(high):
        raise UnsupportedTorchVersionError(
            f"inductor-fx-unbacked supports torch>={low},<{high}; the installed torch is {version}"
        )


def patches() -> list[Patch]:
    """The overlay, declaratively: which upstream attribute each of ours replaces."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import FxConverter

    from .codegen import wrapper, wrapper_fxir

    return [
        Patch(
            PythonWrapperCodegen,
            "codegen_unbacked_symbol_defs_for_outputs",
            wrapper.codegen_unbacked_symbol_defs_for_outputs,
        ),
        Patch(
            PythonWrapperCodegen,
            "_codegen_unbacked_symbol_defs_for_outputs",
            wrapper._codegen_unbacked_symbol_defs_for_outputs,
        ),
        Patch(
            FxConverter,
            "_generate_unbacked_symbol_defs",
            wrapper_fxir._generate_unbacked_symbol_defs,
        ),
        Patch(FxConverter, "_generate_graph_inputs", wrapper_fxir._generate_graph_inputs),
        Patch(FxConverter, "_generate_dynamic_scalar", wrapper_fxir._generate_dynamic_scalar),
        Patch(
            FxConverter,
            "_generate_kernel_definition",
            wrapper_fxir._generate_kernel_definition,
        ),
        Patch(FxConverter, "_generate_triton_call", wrapper_fxir._generate_triton_call),
    ]


def is_enabled() -> bool:
    """Whether the overlay is installed."""
    return bool(_saved)


def enable() -> None:
    """Install the overlay onto upstream Inductor. Idempotent."""
    check_torch_version()
    with _lock:
        if _saved:
            return
        for patch in patches():
            _saved[(patch.owner, patch.name)] = patch.owner.__dict__.get(patch.name, _MISSING)
            setattr(patch.owner, patch.name, patch.replacement)


def disable() -> None:
    """Restore every upstream attribute the overlay replaced, as the identical object."""
    with _lock:
        for (owner, name), original in reversed(list(_saved.items())):
            if original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        _saved.clear()
