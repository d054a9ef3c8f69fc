"""Kernel launches in the lowered runner, and their tuning on the first call.

A Triton kernel of the graph runs through one of Inductor's precompiled
launchers (the ones the Python wrapper calls). Where the kernel has several
precompiled configs, the first call tunes among them, as the Python wrapper's
autotuner does on its first call.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

from .. import _compat

log = logging.getLogger(__name__)


class Launch:
    """Calls a precompiled Inductor launcher: ``launcher(*args, stream=stream)``.

    With one candidate it is the launcher of the config the graph chose. With
    several (the kernel's precompiled configs, the graph's first), the first
    call benchmarks each on that call's arguments with the autotuner's own
    ``bench``, as the Python wrapper's ``CachingAutotuner.run`` does, and every
    later call uses the fastest. The configs are one kernel with other block
    sizes, so the values are the same up to the order of floating-point
    reductions, as between the Python wrapper's configs. Nothing compiles: the
    candidates are launchers of binaries compiled before the graph ran.
    """

    __module__ = __name__

    def __init__(self, tuner: Any, candidates: Sequence[Any], kernel_name: str) -> None:
        self.tuner = tuner
        self.candidates = tuple(candidates)
        #: The launcher every call uses; None until the first call has tuned.
        self.launcher = self.candidates[0] if len(self.candidates) == 1 else None
        self.timings: dict[Any, float] = {}
        self.__name__ = kernel_name
        self._bindings: list[tuple[dict[str, Any], str]] = []

    def __call__(self, stream: int, *args: Any) -> None:
        self.launch(*args, stream=stream)

    def launch(self, *args: Any, stream: int) -> None:
        if self.launcher is None:
            self.launcher = self._tune(args)
        self.launcher(*args, stream=stream)

    def entry_point(self) -> Callable[..., Any]:
        """What generated code calls: the launcher, or ``launch`` until tuned."""
        return self.launcher if self.launcher is not None else self.launch

    def rebind_after_tuning(self, namespace: dict[str, Any], name: str) -> None:
        """Once tuned, make ``namespace[name]`` the winning launcher itself."""
        if self.launcher is None:
            self._bindings.append((namespace, name))

    def _tune(self, args: tuple[Any, ...]) -> Any:
        self.timings = {launcher: self.tuner.bench(launcher, *args) for launcher in self.candidates}
        # The graph's own config wins ties.
        best = min(self.candidates, key=self.timings.__getitem__)
        log.debug("%s: config %s of %s", self.__name__, best.config, self.timings)
        for namespace, name in self._bindings:
            namespace[name] = best
        self._bindings.clear()
        return best

    def __repr__(self) -> str:
        return f"launch({self.__name__})"


def tuning_candidates(tuner: Any, chosen: Any, arg_names: Sequence[str]) -> tuple[Any, ...]:
    """The launchers the first call chooses among: the graph's own first, then the
    tuner's other precompiled configs of the same kernel (same parameters, other
    block sizes, warps and stages)."""
    others = [
        launcher
        for launcher in _compat.launchers(tuner)
        if launcher is not chosen and launcher_arg_names(launcher) == list(arg_names)
    ]
    return (chosen, *others)


def launcher_arg_names(launcher: Any) -> list[str]:
    """The parameters of a launcher, ``launcher(<args>, stream)``: Triton's own
    launchers record them as ``def_args``; Inductor's static launcher does not."""
    names = getattr(launcher, "def_args", None)
    if names is None:
        names = [name for name in inspect.signature(launcher).parameters if name != "stream"]
    return list(names)
