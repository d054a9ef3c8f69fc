"""How a handed-out FX graph runs: the callable that ``compile_graph`` returns.

``"lowered"`` (the default) runs straight-line Python over a lowered copy of the
graph (``lowering.py``, ``straightline.py``); ``"graph"`` runs the graph's own
``forward``, as upstream does. Either way the graph's kernels are its own
(``artifact/kernels.py``): they are put back into the side table before a call
that needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..artifact import store
from ..artifact.kernels import owned_kernels
from .straightline import compile_lowered

RUNNERS = ("lowered", "graph")


def compile_graph(
    gm: torch.fx.GraphModule, runner: str, *, cuda_graphs: bool = False
) -> Callable[..., Any]:
    """The callable that runs ``gm`` with ``runner``; ``gm`` itself is left as it is.
    ``cuda_graphs`` replays the lowered runner's stretches between host syncs as
    CUDA graphs (``cuda_graphs.py``); the ``"graph"`` runner has none."""
    if runner == "lowered":
        return compile_lowered(gm, cuda_graphs=cuda_graphs)
    if runner != "graph":
        raise ValueError(f"unknown runner {runner!r}; the runners are {RUNNERS}")
    owned = owned_kernels(gm)
    if owned is None:
        return gm.forward

    def run_graph(*args: Any) -> Any:
        # Dynamo's reset empties the side table that the graph's kernel nodes read.
        owned.ensure_placed()
        return gm.forward(*args)

    return run_graph


def unpickle(data: bytes) -> torch.fx.GraphModule:
    """A handed-out graph from its pickle: a pickle names this function, so that a new
    process imports the runners before the graph is restored (``store.unpickle``)."""
    return store.unpickle(data)


# A handed-out graph that a runner serves (an AOT module) runs through the lowered
# runner when called, restored from a pickle too.
store.register_call_runner(lambda gm: compile_graph(gm, "lowered"), unpickle)
