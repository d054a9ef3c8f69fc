"""Dynamo's frames: which code a backend's graph comes from, whether Dynamo leaves
the rest of that frame to Python, which frames it gives up on, and the execution
strategy of a code's frames.

Where Dynamo meets a graph break that it cannot resume from (one inside a loop),
it compiles the frame up to the last point it can resume from and leaves the rest
of the frame's bytecode to Python, under its callback: each function that rest
calls is a frame Dynamo intercepts, and may compile, on every call. The graph of
such a frame says so by its reason (``step_unsupported``, 2.10 to 2.15), and the
code of the frame being compiled is its root translator's. Where the conversion of
a frame fails softly (``Unsupported``, or ``UserError`` on 2.15, which is not one:
a graph break in a loop at the frame's start, a data-dependent guard), Dynamo
gives the whole frame up: it runs as Python, Dynamo's strategy for its code is to
skip it and still intercept its callees (2.10 to 2.15).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch


def dynamo_frame_code() -> types.CodeType | None:
    """The code of the frame whose graph Dynamo is compiling (in a backend's call)."""
    from torch._dynamo.symbolic_convert import InstructionTranslator

    tx = InstructionTranslator.current_tx()
    return getattr(tx, "f_code", None)


def leaves_rest_to_python(gm: torch.fx.GraphModule) -> bool:
    """Whether Dynamo compiled ``gm`` up to a graph break it cannot resume from, and
    runs the rest of its frame as Python."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    return getattr(reason, "reason", None) == "step_unsupported"


@contextlib.contextmanager
def recording_given_up(record: Callable[[types.CodeType], None]) -> Iterator[None]:
    """Calls ``record(code)`` for each frame that Dynamo gives up on while the block
    runs (its conversion fails softly, so that Dynamo runs it as Python), and for
    each frame that Dynamo gave up on before (in this block, or earlier in the
    process: it is never converted again) and that calls a function Dynamo
    converts in the block. Such a caller runs its own code, not Dynamo's, and Dynamo
    has seen that code before: it skipped it and intercepts its callees."""
    from torch._dynamo import convert_frame, exc

    soft = (exc.Unsupported, exc.UserError)
    converter = convert_frame.ConvertFrameAssert
    convert = converter.__call__

    @functools.wraps(convert)
    def converting(self: Any, frame: Any, *args: Any, **kwargs: Any) -> Any:
        here = inspect.currentframe()
        caller = _caller_code(here.f_back if here is not None else None)
        if (
            caller is not None
            and caller in convert_frame.input_codes
            and caller not in convert_frame.output_codes
        ):
            record(caller)
        try:
            return convert(self, frame, *args, **kwargs)
        except soft:
            record(frame.f_code)
            raise

    converter.__call__ = converting
    try:
        yield
    finally:
        converter.__call__ = convert


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def _caller_code(frame: types.FrameType | None) -> types.CodeType | None:
    """The code of the first frame from ``frame`` up that is not torch's: the one
    that called the function Dynamo is converting (through ``Module.__call__`` and
    the like)."""
    while frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR):
        frame = frame.f_back
    return None if frame is None else frame.f_code


def set_callees_intercepted(
    code: types.CodeType, intercepted: bool, *, runs_graphs: bool = True
) -> None:
    """Frames of ``code`` run their cached graphs (or compile) as Dynamo decides
    where ``runs_graphs``, else as Python (a frame Dynamo gave up on); the functions
    they call are intercepted by Dynamo where ``intercepted``, run as plain Python
    otherwise (Dynamo's recursive action ``SKIP``)."""
    eval_frame = torch._C._dynamo.eval_frame
    action = eval_frame._FrameAction
    strategy = eval_frame._FrameExecStrategy(
        action.DEFAULT if runs_graphs else action.SKIP,
        action.DEFAULT if intercepted else action.SKIP,
    )
    eval_frame.set_code_exec_strategy(code, strategy)
