"""``NoUnbackedSymbolWarning``: Dynamo's graph breaks left the FX backend no unbacked symbol.

Without ``fullgraph=True``, Dynamo splits a function at a data-dependent
operation whose capture is off and runs that operation eagerly, so the graphs
that reach the FX backend define no unbacked symbol, and nothing says why.
``capture_fx_graphs`` and each ``fx_backend`` block warn once in that case.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import threading
import warnings
from collections.abc import Iterator

import torch
from torch._dynamo.utils import counters

from .recording import observing_graphs

#: The Dynamo flags that put data-dependent operations into the graph. Dynamo names
#: one of them in the reason of every graph break at such an operation, and only there.
CAPTURE_FLAGS = ("capture_dynamic_output_shape_ops", "capture_scalar_outputs")


class NoUnbackedSymbolWarning(UserWarning):
    """Graphs define no unbacked symbol because Dynamo split the function."""


@dataclasses.dataclass(eq=False)  # each block's own, found by identity
class _Watch:
    """What one block saw: its graphs, whether one defined a symbol, whether it warned."""

    graphs: int = 0
    symbols: bool = False
    warned: bool = False

    def see(self, graphs: list[torch.fx.GraphModule]) -> None:
        self.graphs += len(graphs)
        self.symbols = self.symbols or any(defines_symbol(gm) for gm in graphs)


#: Per thread, the watches of the blocks open now, outermost first.
_open = threading.local()


def _open_watches() -> list[_Watch]:
    watches = getattr(_open, "watches", None)
    if watches is None:
        watches = _open.watches = []
    return watches


@contextlib.contextmanager
def warning_when_breaks_leave_no_symbol(subject: str) -> Iterator[None]:
    """Warn once on leaving, if inside Dynamo broke a graph at a data-dependent
    operation, and the FX backend produced graphs in this thread, none of which
    defines an unbacked symbol. ``subject`` says what defines none.

    Blocks nest; the innermost that warns is the only one that does, so that a
    ``capture_fx_graphs`` inside an ``fx_backend`` block warns once, as itself.
    Nothing is said when the body raises.
    """
    breaks_before = dict(counters["graph_break"])
    watch = _Watch()
    watches = _open_watches()
    watches.append(watch)
    try:
        with observing_graphs(watch.see):
            yield
    finally:
        watches.remove(watch)
    if watch.warned or not watch.graphs or watch.symbols:
        return
    breaks = [
        reason
        for reason, count in counters["graph_break"].items()
        if count > breaks_before.get(reason, 0) and any(flag in reason for flag in CAPTURE_FLAGS)
    ]
    if breaks:
        for outer in watches:
            outer.warned = True
        _warn(why_no_symbol(subject, breaks))


def defines_symbol(gm: torch.fx.GraphModule) -> bool:
    return any(node.meta.get("unbacked_symbol") is not None for node in gm.graph.nodes)


def why_no_symbol(subject: str, breaks: list[str]) -> str:
    reasons = "; ".join(sorted({reason.strip().splitlines()[0] for reason in breaks}))
    return (
        f"{subject} defines no unbacked symbol: Dynamo split the function at a graph break "
        f"({reasons}), so the data-dependent operation ran eagerly. Pass fullgraph=True to "
        "see the error at the break; for nonzero, boolean masks and unique, set "
        "torch._dynamo.config.capture_dynamic_output_shape_ops = True, and for .item(), "
        "torch._dynamo.config.capture_scalar_outputs = True."
    )


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _warn(message: str) -> None:
    """Warn at the first caller outside this package and ``contextlib``: the user's
    ``with`` line or call."""
    frame, stacklevel = inspect.currentframe(), 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(_PACKAGE)
        or frame.f_code.co_filename == contextlib.__file__
    ):
        frame, stacklevel = frame.f_back, stacklevel + 1
    warnings.warn(NoUnbackedSymbolWarning(message), stacklevel=stacklevel)
