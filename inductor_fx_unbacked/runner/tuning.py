"""Kernel launches in the lowered runner: the autotuner's first call, then its launcher.

A Triton kernel of the graph runs through the launchers that Inductor's
autotuner (``CachingAutotuner``) precompiled, the ones the Python wrapper calls.
The Python wrapper calls the autotuner's ``run`` every time; its first call is
where tuning happens, and all of it is the autotuner's: benchmarking every
config on that call's arguments (mutated arguments cloned, ``reset_to_zero``
arguments reset before each config and once more after the last), keeping the
winner, and whatever else the installed release does then (closing the losing
launchers, pruning the compile results, writing the autotune cache, coordinate
descent where enabled). So the first call of a launch here is ``run`` too; once
the autotuner has settled on one launcher, later calls go to that launcher
directly, without the bookkeeping that ``run`` repeats on every call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .. import _compat


class Launch:
    """Launches one kernel node: ``launch(*launcher_args, stream=stream)``.

    ``launcher_args`` are what a precompiled launcher takes, and so what the
    autotuner's ``run`` takes: the kernel's arguments that are not
    ``tl.constexpr``, then its extra launcher arguments (a user kernel's grid).
    Nodes of one kernel share its autotuner, so it tunes once: the first call of
    any of them tunes, the others' first calls find one launcher.
    """

    __module__ = __name__

    def __init__(self, tuner: Any, kernel_name: str) -> None:
        self.tuner = tuner
        #: The autotuner's launcher once it has settled on one; None before.
        self.launcher: Any = None
        self.__name__ = kernel_name
        self._bindings: list[tuple[dict[str, Any], str]] = []

    def __call__(self, stream: int, *args: Any) -> None:
        self.launch(*args, stream=stream)

    def launch(self, *args: Any, stream: int) -> None:
        if self.launcher is not None:
            self.launcher(*args, stream=stream)
            return
        self.tuner.run(*args, stream=stream)
        # None where the release's plugins kept several launchers: then every
        # call goes through ``run``, as in the Python wrapper.
        self.launcher = _compat.sole_launcher(self.tuner)
        if self.launcher is not None:
            for namespace, name in self._bindings:
                namespace[name] = self.launcher
            self._bindings.clear()

    def entry_point(self) -> Callable[..., Any]:
        """What generated code calls: the launcher, or ``launch`` until there is one."""
        return self.launcher if self.launcher is not None else self.launch

    def rebind_after_tuning(self, namespace: dict[str, Any], name: str) -> None:
        """Once the autotuner has settled on a launcher, make ``namespace[name]`` it."""
        if self.launcher is None:
            self._bindings.append((namespace, name))

    def __repr__(self) -> str:
        return f"launch({self.__name__})"


def launcher_arg_names(launcher: Any) -> list[str]:
    """The parameters of a launcher, ``launcher(<args>, stream)``: Triton's own
    launchers record them as ``def_args``; Inductor's static launcher does not."""
    names = getattr(launcher, "def_args", None)
    if names is None:
        names = [name for name in inspect.signature(launcher).parameters if name != "stream"]
    return list(names)
