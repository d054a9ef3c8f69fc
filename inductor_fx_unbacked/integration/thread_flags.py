"""Keep upstream's process-wide flags that threads set and restore true to the compiling thread.

Two pieces of upstream state are kept for the whole process although what they
say is about one thread, and each is set and restored around a call in a way
that two threads interleave:

- ``TorchDispatchMode.__enter__``/``__exit__`` (``torch.utils._python_dispatch``)
  keep three module globals beside the per-thread mode stack: whether any mode, a
  non-infra mode, or a mode that does not ignore compile internals is active. A
  mode saves them on entry and puts the saved values back on exit, so two
  threads whose modes interleave (one compiling under ``FakeTensorMode`` while
  the other runs a compiled function's first call under AOTAutograd's
  ``_AnalyzeCustomOpInputOutputMode``) can leave them set with no mode active,
  and Dynamo skips frames while they are set.
- On torch 2.11, each call of a function compiled with ``fullgraph=True`` sets
  Dynamo's eval-frame override (``set_eval_frame_override``) to skip the frames
  its compiled code calls, and restores the value it found; two threads calling
  such functions at once can leave it at "skip". Every compiled frame then skips
  the frames it calls: measured on 2.11 (H200, and on CPU), a compile after two
  threads had called compiled functions traced its first frame and then neither
  its resume function nor any frame it called, and handed out no graph for them
  (``docs/upstream.md``).

:func:`resync` sets both to what the calling thread says: the flags to its mode
stack, the override to none, since a thread entering or leaving ``fx_backend``
runs no compiled function. ``fx_backend`` calls it where a thread enters and
leaves it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.utils import _python_dispatch

from .. import _compat

log = logging.getLogger(__name__)

#: Upstream's flag names, each with what it says of one active mode.
_FLAGS = {
    "_is_in_torch_dispatch_mode": lambda mode: True,
    "_is_in_non_infra_torch_dispatch_mode": lambda mode: not mode.is_infra_mode(),
    "_is_in_any_mode_without_ignore_compile_internals": (
        lambda mode: not mode.ignore_compile_internals()
    ),
}


def active_modes() -> list[object]:
    """The calling thread's dispatch modes: the user stack and the infra slots."""
    stack = _python_dispatch._get_current_dispatch_mode_stack()
    keys = torch._C._TorchDispatchModeKey.__members__.values()
    infra = [torch._C._get_dispatch_mode(key) for key in keys]
    return [*stack, *(mode for mode in infra if mode is not None)]


def dispatch_mode_flags() -> dict[str, bool]:
    """Upstream's dispatch-mode flags as they stand."""
    return {name: getattr(_python_dispatch, name) for name in _FLAGS}


def flags() -> dict[str, Any]:
    """Upstream's flags as they stand: the dispatch-mode flags, and Dynamo's
    eval-frame override where the release has one."""
    state: dict[str, Any] = dispatch_mode_flags()
    override = _compat.eval_frame_override()
    if override is not None:
        state["eval-frame override"] = override
    return state


def resync() -> None:
    """Set upstream's flags to the calling thread's state, where they differ."""
    modes = active_modes()
    wanted = {name: any(says(mode) for mode in modes) for name, says in _FLAGS.items()}
    stale = sorted(name for name in _FLAGS if getattr(_python_dispatch, name) != wanted[name])
    for name in stale:
        setattr(_python_dispatch, name, wanted[name])
    without_ignore = "_is_in_any_mode_without_ignore_compile_internals"
    if without_ignore in stale:
        # Dynamo's guards keep a copy of this one in C; upstream sets both together.
        torch._C._dynamo.guards.set_is_in_mode_without_ignore_compile_internals(
            wanted[without_ignore]
        )
    previous = _compat.clear_eval_frame_override()
    if previous is not None:
        stale.append(f"eval-frame override {previous}")
    if stale:
        log.info(
            "%s left set by another thread's calls (torch keeps them for the whole "
            "process); set to this thread's state",
            ", ".join(stale),
        )
