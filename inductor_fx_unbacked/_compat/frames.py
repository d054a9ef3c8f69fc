"""Dynamo's frames: which code a backend's graph comes from, whether Dynamo leaves
the rest of that frame to Python, and the execution strategy of a code's frames.

Where Dynamo meets a graph break that it cannot resume from (one inside a loop),
it compiles the frame up to the last point it can resume from and leaves the rest
of the frame's bytecode to Python, under its callback: each function that rest
calls is a frame Dynamo intercepts, and may compile, on every call. The graph of
such a frame says so by its reason (``step_unsupported``, 2.10 to 2.15), and the
code of the frame being compiled is its root translator's.
"""

from __future__ import annotations

import types

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


def set_callees_intercepted(code: types.CodeType, intercepted: bool) -> None:
    """Frames of ``code`` run their cached graphs (or compile) as Dynamo decides;
    the functions they call are intercepted by Dynamo where ``intercepted``, run as
    plain Python otherwise (Dynamo's recursive action ``SKIP``)."""
    eval_frame = torch._C._dynamo.eval_frame
    action = eval_frame._FrameAction
    strategy = eval_frame._FrameExecStrategy(
        action.DEFAULT, action.DEFAULT if intercepted else action.SKIP
    )
    eval_frame.set_code_exec_strategy(code, strategy)
