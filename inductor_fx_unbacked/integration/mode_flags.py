"""Keep upstream's "inside a dispatch mode" flags true to the compiling thread.

``TorchDispatchMode.__enter__``/``__exit__`` (``torch.utils._python_dispatch``)
keep three module globals beside the per-thread mode stack: whether any mode, a
non-infra mode, or a mode that does not ignore compile internals is active. Each
mode saves the flags on entry and puts the saved values back on exit. The flags
are process-wide and the stacks are per thread, so two threads whose modes
interleave (one compiling under ``FakeTensorMode`` while the other runs a
compiled function under AOTAutograd's ``_AnalyzeCustomOpInputOutputMode``) can
leave a flag set with no mode active anywhere. Dynamo reads the flags to skip
frames that run inside a mode; measured on torch 2.11 (H200), a compile in the
main thread after two threads had compiled at once traced its first frame and
then no other, and handed out no graph (``docs/upstream.md``).

:func:`resync` sets the flags to what the calling thread's mode stack says, the
only value that means anything to the Dynamo frame that reads them in that
thread. ``fx_backend`` calls it where a thread enters and leaves it.
"""

from __future__ import annotations

import logging

import torch
from torch.utils import _python_dispatch

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
    depth = torch._C._len_torch_dispatch_stack()
    stack = [torch._C._get_dispatch_stack_at(i) for i in range(depth)]
    keys = torch._C._TorchDispatchModeKey.__members__.values()
    infra = [torch._C._get_dispatch_mode(key) for key in keys]
    return [mode for mode in (*stack, *infra) if mode is not None]


def flags() -> dict[str, bool]:
    """Upstream's flags as they stand."""
    return {name: getattr(_python_dispatch, name) for name in _FLAGS}


def resync() -> None:
    """Set upstream's flags to the calling thread's modes, where they differ."""
    modes = active_modes()
    wanted = {name: any(says(mode) for mode in modes) for name, says in _FLAGS.items()}
    stale = {name: value for name, value in flags().items() if value != wanted[name]}
    if not stale:
        return
    log.info(
        "dispatch-mode flags %s were left set by another thread's modes (torch keeps them "
        "for the whole process); set to this thread's",
        sorted(stale),
    )
    for name in stale:
        setattr(_python_dispatch, name, wanted[name])
    without_ignore = "_is_in_any_mode_without_ignore_compile_internals"
    if without_ignore in stale:
        # Dynamo's guards keep a copy of this one in C; upstream sets both together.
        torch._C._dynamo.guards.set_is_in_mode_without_ignore_compile_internals(
            wanted[without_ignore]
        )
