"""What ``fx_backend`` changes for the whole process, shared by the threads inside it.

The overlay, a device's wrapper codegen registration and Triton's active driver
are process-wide, and on some torch releases Inductor's config is too
(``_compat.INDUCTOR_CONFIG_IS_PER_THREAD``). ``fx_backend`` holds them by
reference count: the first entrant for a device applies them, later entrants
with the same options share what it applied, and the last one to leave restores
it, so that one thread leaving never pulls the backend from under another that
is still compiling. A registration serves every thread, so a thread asking for
other options while another thread holds the device is refused
(:class:`FxBackendConflictError`); one thread may nest other options over its
own, as a stack that is restored in order.

Where a thread enters and leaves, upstream's process-wide flags that calls in
other threads set and restore (the dispatch-mode flags; Dynamo's eval-frame
override on torch 2.11) are set to that thread's state (:mod:`.thread_flags`):
two threads' calls can leave them set, and Dynamo then skips frames.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterator

from . import overlay, thread_flags


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """What one ``fx_backend`` entry asks for: the device type and its options."""

    device: str
    runner: str
    runtime_asserts: bool
    cuda_graphs: bool | None = None
    sync_free: bool = True

    def __str__(self) -> str:
        cuda_graphs = "" if self.cuda_graphs is None else f", cuda_graphs={self.cuda_graphs}"
        sync_free = "" if self.sync_free else ", sync_free=False"
        return (
            f"fx_backend({self.device!r}, runner={self.runner!r}, "
            f"runtime_asserts={self.runtime_asserts}{cuda_graphs}{sync_free})"
        )


class FxBackendConflictError(RuntimeError):
    """``fx_backend`` was entered with other options than another thread holds for the
    same device."""


#: Applies the process-wide state of some options, registering its undo on the stack.
Apply = Callable[[BackendOptions, contextlib.ExitStack], None]


@dataclasses.dataclass(eq=False)
class _Layer:
    """One set of options applied for a device, and the threads inside it."""

    options: BackendOptions
    undo: contextlib.ExitStack
    #: Thread ident -> how many ``fx_backend`` entries of that thread hold the layer.
    holders: Counter[int] = dataclasses.field(default_factory=Counter)
    thread_names: dict[int, str] = dataclasses.field(default_factory=dict)


_lock = threading.Lock()
#: Device type -> its layers, the one in force last.
_layers: dict[str, list[_Layer]] = {}
#: How many layers (of every device) hold the overlay, and whether they enabled it.
_overlay_holds = 0
_overlay_enabled_here = False


@contextlib.contextmanager
def holding(options: BackendOptions, apply: Apply) -> Iterator[None]:
    """Hold the process-wide state of ``options`` for the body.

    ``apply(options, undo)`` runs only where no layer with these options is in
    force for the device; the undo stack closes when the last holder leaves.
    Raises :class:`FxBackendConflictError` when another thread holds the device
    with other options.
    """
    thread_flags.resync()  # what another thread's calls left set would skip this compile
    layer = _enter(options, apply)
    try:
        yield
    finally:
        _leave(layer)
        thread_flags.resync()  # and the compiles that come after


def _enter(options: BackendOptions, apply: Apply) -> _Layer:
    thread = threading.current_thread()
    with _lock:
        layers = _layers.setdefault(options.device, [])
        top = layers[-1] if layers else None
        if top is None or top.options != options:
            if top is not None and set(top.holders) - {thread.ident}:
                raise FxBackendConflictError(_conflict(options, thread, top))
            top = _Layer(options, _apply(options, apply))
            layers.append(top)
        elif not overlay.is_enabled():
            # Disabled by hand inside another entry: this entry compiles with it again.
            _enable_overlay()
        top.holders[thread.ident] += 1
        top.thread_names[thread.ident] = thread.name
        return top


def _apply(options: BackendOptions, apply: Apply) -> contextlib.ExitStack:
    global _overlay_holds
    undo = contextlib.ExitStack()
    try:
        _enable_overlay()
        _overlay_holds += 1
        undo.callback(_release_overlay)
        apply(options, undo)
    except BaseException:
        undo.close()
        raise
    return undo


def _leave(layer: _Layer) -> None:
    ident = threading.get_ident()
    with _lock:
        if not layer.holders[ident]:
            raise RuntimeError(
                f"{layer.options} is left in thread {threading.current_thread().name!r}, "
                "which did not enter it: enter and leave fx_backend in the same thread"
            )
        layer.holders[ident] -= 1
        if not layer.holders[ident]:
            del layer.holders[ident], layer.thread_names[ident]
        layers = _layers[layer.options.device]
        # A layer left while another was in force above it is undone after that one.
        while layers and not layers[-1].holders:
            layers.pop().undo.close()
        if not layers:
            del _layers[layer.options.device]


def _enable_overlay() -> None:
    global _overlay_enabled_here
    if not overlay.is_enabled():
        overlay.enable()
        _overlay_enabled_here = True


def _release_overlay() -> None:
    """Disable the overlay with the last layer, where ``fx_backend`` enabled it."""
    global _overlay_holds, _overlay_enabled_here
    _overlay_holds -= 1
    if not _overlay_holds and _overlay_enabled_here:
        _overlay_enabled_here = False
        overlay.disable()


def _conflict(options: BackendOptions, thread: threading.Thread, top: _Layer) -> str:
    names = [repr(name) for name in top.thread_names.values()]
    holders = f"thread {names[0]} is" if len(names) == 1 else f"threads {', '.join(names)} are"
    return (
        f"{options} in thread {thread.name!r}: {holders} inside {top.options}, "
        f"and a device's wrapper codegen is registered for the whole process; enter "
        f"fx_backend({options.device!r}) with the same options in every thread that "
        "compiles for it at the same time, or one after the other"
    )
