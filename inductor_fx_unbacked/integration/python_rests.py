"""The rests of frames that Dynamo leaves to Python (``direct_breaks.py``): their
callees run as Python for a call, or as Dynamo compiles them, whichever the
example's calls find faster.

Where Dynamo meets a graph break it cannot resume from (one inside a loop over a
tensor's values, as transformers' per-expert loop), it compiles the frame up to
the last point it can resume from and leaves the rest to Python, but still
intercepts every function that rest calls and compiles those it can: each
expert's activation becomes a region of its own, entered once per expert per
call. Inside such a loop a region can cost more than a small function saves
(transformers' MoE blocks: 1.25 of eager with their callees compiled, 1.12 as
Python, on an H100), and a heavy callee compiled saves more than its entry costs:
the artifact times both ways on the example when it compiles, and keeps the
faster.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import types
from collections.abc import Callable, Iterator

import torch

from .._compat import frames


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
def callees_as_python(codes: dict[types.CodeType, None]) -> Iterator[None]:
    """For the call: the functions that frames of ``codes`` call run as Python runs
    them, not intercepted by Dynamo (the frames themselves still run their graphs).

    Set for the call only, so that ``torch.compile`` of the same functions elsewhere
    in the process keeps Dynamo's behaviour, and put back to Dynamo's default
    (what Dynamo sets on a frame it compiled) after it. A frame that a recompile in
    the call adds takes effect from the next call."""
    if not codes:
        yield
        return
    taken = tuple(codes)
    for code in taken:
        frames.set_callees_intercepted(code, False)
    try:
        yield
    finally:
        for code in taken:
            frames.set_callees_intercepted(code, True)
