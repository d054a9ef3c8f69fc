"""The rests of frames that Dynamo leaves to Python (``direct_breaks.py``): their
callees run as Python for a call, or as Dynamo compiles them, whichever the
example's calls find faster, frame by frame.

Where Dynamo meets a graph break it cannot resume from (one inside a loop over a
tensor's values, as transformers' per-expert loop), it compiles the frame up to
the last point it can resume from and leaves the rest to Python, but still
intercepts every function that rest calls and compiles those it can: each
expert's activation becomes a region of its own, entered once per expert per
call. Inside such a loop a region can cost more than a small function saves
(transformers' MoE blocks: 1.25 of eager with their callees compiled, 1.12 as
Python, on an H100), and a heavy callee compiled saves more than its entry costs:
the artifact times both ways on the example when it compiles, and keeps the
faster. A frame Dynamo gives up on whole (torchvision's per-class NMS loop, where
each class's ``nms`` became a region) is such a rest from its first line.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import types
from collections.abc import Callable, Iterator

import torch

from .._compat import frames


def chosen(
    rests: dict[types.CodeType, bool],
    call: Callable[[dict[types.CodeType, bool]], None],
    device: str,
    budget_s: float = 1.0,
) -> tuple[dict[types.CodeType, bool], dict[str, dict[bool, float]]]:
    """The frames of ``rests`` whose callees run as Python, and the seconds of a call
    each way by frame: for each frame, the last found first (the innermost), the
    faster of ``call`` with it added to those chosen before and without it."""
    as_python: dict[types.CodeType, bool] = {}
    seconds: dict[str, dict[bool, float]] = {}
    for code, runs_graphs in reversed(rests.items()):
        without = dict(as_python)
        with_it = {**without, code: runs_graphs}
        timed = timed_both_ways(
            lambda python, a=with_it, b=without: call(a if python else b), device, budget_s
        )
        seconds[code.co_qualname] = timed
        as_python = with_it if timed[True] <= timed[False] else without
    return as_python, seconds


def timed_both_ways(
    call: Callable[[bool], None], device: str, budget_s: float = 1.0
) -> dict[bool, float]:
    """The median seconds of ``call(as_python)`` for both values, interleaved after
    a warm call each (which compiles the callees intercepted), seven pairs or as
    many as ``budget_s`` allows past three."""
    samples: dict[bool, list[float]] = {True: [], False: []}
    started = time.perf_counter()
    for round_ in range(8):
        for as_python in (True, False):
            _synchronize(device)
            begin = time.perf_counter()
            call(as_python)
            _synchronize(device)
            if round_:  # the first round warms each way
                samples[as_python].append(time.perf_counter() - begin)
        if round_ >= 3 and time.perf_counter() - started > budget_s:
            break
    return {way: statistics.median(times) for way, times in samples.items()}


def _synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def callees_as_python(codes: dict[types.CodeType, bool]) -> Iterator[None]:
    """For the call: the functions that frames of ``codes`` call run as Python runs
    them, not intercepted by Dynamo (each frame itself still runs its graphs where
    its value says so: a rest; a frame Dynamo gave up on runs as Python).

    Set for the call only, so that ``torch.compile`` of the same functions elsewhere
    in the process keeps Dynamo's behaviour, and put back to what Dynamo set after
    it (callees intercepted; the frame's graphs run, or the frame skipped). A frame
    that a recompile in the call adds takes effect from the next call."""
    if not codes:
        yield
        return
    taken = tuple(codes.items())
    for code, runs_graphs in taken:
        frames.set_callees_intercepted(code, False, runs_graphs=runs_graphs)
    try:
        yield
    finally:
        for code, runs_graphs in taken:
            frames.set_callees_intercepted(code, True, runs_graphs=runs_graphs)
