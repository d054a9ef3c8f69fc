"""One host copy for the scalars that a graph reads from one tensor in a row.

``lengths.tolist()`` in a program becomes, in Inductor's wrapper, one ``.item()``
per element, each of a 0-d view of the tensor at its offset: each is a copy to
the host and a sync, eight of them for eight lengths where eager copies once.
The runner reads such a run of scalars with one copy: where ``item`` nodes read
0-d views of one tensor at constant offsets, with nothing between the first and
the last of them that could write memory (only views, other such reads, checks
and scalar arithmetic), the first reads the storage from the lowest offset to
the highest as one list, and each takes its element. The values are those the
separate reads would give: nothing wrote the tensor in between.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.fx import Node

from ..codegen import views
from .checks import Check

aten = torch.ops.aten


@dataclasses.dataclass
class ItemRun:
    """Scalars read from ``base`` at storage ``offsets`` (one per ``item`` node)."""

    base: Node
    items: list[Node] = dataclasses.field(default_factory=list)
    offsets: list[int] = dataclasses.field(default_factory=list)

    @property
    def low(self) -> int:
        return min(self.offsets)

    @property
    def length(self) -> int:
        return max(self.offsets) - self.low + 1


def item_runs(graph: torch.fx.Graph) -> list[ItemRun]:
    """The runs of two or more ``item`` reads of 0-d views of one tensor in ``graph``
    that may share one copy; their offsets count from the tensor's first element."""
    runs: list[ItemRun] = []
    open_runs: dict[Node, ItemRun] = {}
    for node in graph.nodes:
        if node.op != "call_function":
            if node.op == "output":
                break
            continue
        if node.target is aten.item.default:
            # A read: of a 0-d view, it joins the run of its base.
            view = node.args[0]
            found = _scalar_view(view) if isinstance(view, Node) else None
            if found is not None:
                base, offset = found
                run = open_runs.setdefault(base, ItemRun(base))
                run.items.append(node)
                run.offsets.append(offset)
            continue
        if _reads_only(node):
            continue
        # Anything else may write memory: the runs so far end here.
        runs.extend(open_runs.values())
        open_runs.clear()
    runs.extend(open_runs.values())
    return [run for run in runs if len(run.items) > 1]


def _scalar_view(node: Node) -> tuple[Node, int] | None:
    """(base, offset from its first element) where ``node`` is a 0-d view of a tensor
    at a constant offset."""
    view = views.view_of(node)
    if view is None or tuple(view.size) or tuple(view.stride) or type(view.offset) is not int:
        return None
    return view.base, view.offset


def _reads_only(node: Node) -> bool:
    """Pure nodes (``views.is_pure``: the tensor metadata operators, views, scalar
    arithmetic) and checks write no memory."""
    return isinstance(node.target, Check) or views.is_pure(node)
