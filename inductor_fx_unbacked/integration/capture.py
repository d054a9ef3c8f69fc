"""``capture_fx_graphs``: compile a function with the FX backend and return its graphs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .backend import default_device, device_type, fx_backend
from .graph_breaks import warning_when_breaks_leave_no_symbol
from .recording import recording_graphs


@dataclasses.dataclass
class CapturedGraphs:
    """The result of one compiled call, and every FX graph compiled for it."""

    outputs: Any
    graphs: list[torch.fx.GraphModule]


def capture_fx_graphs(
    fn: Callable[..., Any], *args: Any, device: str | None = None, **compile_kwargs: Any
) -> CapturedGraphs:
    """Compile ``fn`` with the FX backend, call it on ``args``, and return the graphs.

    ``graphs`` holds every ``GraphModule`` the FX converter produced for the call,
    in the order it produced them: subgraphs (such as ``torch.cond`` branches)
    before the graph that uses them, forward before backward. ``compile_kwargs``
    go to ``torch.compile``. The caller's Inductor config is used as it is. To
    make sure the call compiles afresh, Dynamo's caches are reset first.
    """
    if not callable(fn):
        raise TypeError(f"capture_fx_graphs needs a function or module to compile, not {fn!r}")
    device = device_type(device or default_device())
    name = getattr(fn, "__name__", type(fn).__name__)
    # Inside fx_backend's own block, so that the warning is the capture's.
    with (
        fx_backend(device),
        warning_when_breaks_leave_no_symbol(f"capture_fx_graphs({name})"),
        recording_graphs() as graphs,
    ):
        torch._dynamo.reset()
        outputs = torch.compile(fn, **compile_kwargs)(*args)
    if not graphs:
        raise RuntimeError(_why_no_graph(fn, args, device, compile_kwargs))
    return CapturedGraphs(outputs, graphs)


def _why_no_graph(fn: Any, args: tuple[Any, ...], device: str, compile_kwargs: dict) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    devices = sorted(
        {
            str(leaf.device.type)
            for leaf in pytree.tree_leaves(args)
            if isinstance(leaf, torch.Tensor)
        }
    )
    if not devices:
        reason = "its arguments hold no tensor, so there was nothing for Inductor to compile"
    elif device not in devices:
        reason = (
            f"its tensors are on {', '.join(devices)}, not {device}, so Inductor compiled "
            f"them with another backend (pass device={devices[0]!r})"
        )
    elif compile_kwargs.get("fullgraph"):
        reason = "Dynamo compiled it, but no graph reached Inductor (it computes nothing)"
    else:
        reason = "Dynamo ran it eagerly (pass fullgraph=True to see why)"
    return f"compiling {name!r} for {device} produced no FX graph: {reason}"
