"""Receiving the FX graphs: ``recording_graphs``.

Every graph the FX backend produces, compiled or restored from Inductor's
caches, is handed to the ``recording_graphs`` blocks open in the thread that
compiles it, once the graph owns its kernels (``artifact/kernels.py``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import torch

#: Per thread, the lists that receive every GraphModule produced while recording.
_sinks = threading.local()


def _thread_sinks() -> list[list[torch.fx.GraphModule]]:
    sinks = getattr(_sinks, "lists", None)
    if sinks is None:
        sinks = _sinks.lists = []
    return sinks


def recording() -> bool:
    """Whether a ``recording_graphs`` (or ``capture_fx_graphs``) is open in this thread."""
    return bool(_thread_sinks())


def _thread_observers() -> list[Callable[[list[torch.fx.GraphModule]], None]]:
    observers = getattr(_sinks, "observers", None)
    if observers is None:
        observers = _sinks.observers = []
    return observers


def record_graphs(graphs: list[torch.fx.GraphModule]) -> None:
    """Hand graphs to every ``recording_graphs`` and observer open in this thread."""
    for sink in _thread_sinks():
        sink.extend(graphs)
    for observer in _thread_observers():
        observer(graphs)


@contextlib.contextmanager
def observing_graphs(observer: Callable[[list[torch.fx.GraphModule]], None]) -> Iterator[None]:
    """Show ``observer`` every graph produced inside, in this thread, without recording
    it: a warm start restores no fake values for an observer (see :func:`recording`)."""
    observers = _thread_observers()
    observers.append(observer)
    try:
        yield
    finally:
        observers.remove(observer)


@contextlib.contextmanager
def recording_graphs() -> Iterator[list[torch.fx.GraphModule]]:
    """Collect every GraphModule that the FX backends of this package produce inside,
    in this thread (another thread's compiles go to that thread's blocks)."""
    graphs: list[torch.fx.GraphModule] = []
    sinks = _thread_sinks()
    sinks.append(graphs)
    try:
        yield graphs
    finally:
        sinks.remove(graphs)
