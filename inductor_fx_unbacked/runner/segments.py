"""The stretches of a lowered graph that CUDA graphs can capture: runs of device work
between the host syncs.

Each node of a lowered graph (``lowering.py``) plays one of four roles:

- DEVICE: work that a CUDA graph replays: launches of precompiled kernels,
  allocations on the device, views of tensors made inside, and the extern kernels
  of ``_EXTERN`` whose tensors are all on the device;
- HOST: host values (symbolic arithmetic, sizes of tensors that exist before the
  stretch, views of those tensors) and checks of them. They run before the
  stretch on every call, so a violated check raises on the call that violates it;
- CAPTURE_ONLY: checks of the sizes, strides and alignment of tensors made
  inside. The stretch's key fixes those, so the checks run when the stretch runs
  eagerly or is captured, and not when it replays;
- BOUNDARY: anything else, which ends a stretch: whatever defines an unbacked
  symbol (it syncs with the host), checks that read data (NaN checks), CPU work,
  control flow, interpreted launches, collectives, RNG.

A stretch is a maximal run of DEVICE and CAPTURE_ONLY nodes that launches at least
two kernels; the HOST nodes between its nodes are hoisted before it, and a HOST
node that reads a tensor made inside ends it. Roles are read off the graph's
structure and its stored facts, never off the fake value of an intermediate
node, which a warm start does not have: a warm start finds the stretches that a
cold start does.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from typing import Any

import torch
from torch.fx import Node

from .. import _compat
from ..artifact.facts import value_kind
from ..codegen import views
from .checks import INPUT_SIZE_STRIDE, SCALAR, Check
from .tuning import Launch

aten = torch.ops.aten


class Role(enum.Enum):
    DEVICE = "device"
    HOST = "host"
    CAPTURE_ONLY = "capture-only"
    BOUNDARY = "boundary"


@dataclasses.dataclass(frozen=True)
class Capturable:
    """What a CUDA graph can replay: launches of these types, and allocations on
    devices of this type."""

    device_type: str = "cuda"
    launch_types: tuple[type, ...] = (Launch,)


CUDA = Capturable()

#: Extern kernels that capture, by overload packet (with all their tensors on the device).
_EXTERN = {
    aten.mm,
    aten.addmm,
    aten.bmm,
    aten.baddbmm,
    aten.convolution,
    aten.copy_,
    aten.fill_,
    aten.zero_,
    aten.cat,
    aten.sort,
    aten.topk,
    aten.gather,
    aten.scatter,
    aten.scatter_,
    aten.index,
}
#: Index dtypes of ``aten.index.Tensor`` that make it a mask, which syncs.
_MASK_DTYPES = (torch.bool, torch.uint8)
_LAUNCH = "launch"
_METADATA = (
    aten.sym_size.int,
    aten.sym_stride.int,
    aten.sym_numel.default,
    aten.sym_storage_offset.default,
)


@dataclasses.dataclass
class Stretch:
    """A run of nodes that one CUDA graph captures."""

    #: DEVICE and CAPTURE_ONLY nodes, in graph order.
    nodes: list[Node] = dataclasses.field(default_factory=list)
    #: HOST nodes between them: run before the stretch, on every call.
    hoisted: list[Node] = dataclasses.field(default_factory=list)
    #: Kernels launched (Triton launches and extern kernels).
    launches: int = 0
    #: The node after the stretch, and why it is not part of it.
    ended_by: tuple[Node, str] | None = None

    def capture_only(self) -> list[Node]:
        return [node for node in self.nodes if isinstance(node.target, Check)]

    def inputs(self) -> list[Node]:
        """The values the stretch reads from outside: its key and its node's arguments
        (not the stream, which its body reads itself, nor dependency tokens)."""
        members = set(self.nodes)
        found: dict[Node, None] = {}
        for node in self.nodes:
            for used in node.all_input_nodes:
                if used not in members and not is_token(used) and not is_stream(used):
                    found[used] = None
        return list(found)

    def escaping(self) -> list[Node]:
        """The stretch's nodes that nodes after it read (tokens aside), in graph order."""
        members = set(self.nodes)
        return [
            node
            for node in self.nodes
            if not is_token(node) and any(user not in members for user in node.users)
        ]


def find_stretches(graph: torch.fx.Graph, capturable: Capturable = CUDA) -> list[Stretch]:
    """The stretches of ``graph`` (a lowered graph, branches not included)."""
    return _Segmenter(graph, capturable).run()


def roles(graph: torch.fx.Graph, capturable: Capturable = CUDA) -> dict[Node, tuple[Role, str]]:
    """Each node's role in ``graph``, and why: what :func:`find_stretches` reads."""
    segmenter = _Segmenter(graph, capturable)
    segmenter.run()
    return segmenter.roles


class _Segmenter:
    """One walk over a graph in order, one method per kind of node."""

    def __init__(self, graph: torch.fx.Graph, capturable: Capturable) -> None:
        self.graph = graph
        self.capturable = capturable
        self.device_type = capturable.device_type
        self.found: list[Stretch] = []
        self.roles: dict[Node, tuple[Role, str]] = {}
        self.open = Stretch()
        self.inside: set[Node] = set()
        #: Nodes whose value is known to be a tensor on the capturable device.
        self.on_device: set[Node] = set()
        self.sized_by_symbol = _sized_by_symbol(graph)
        self.hoisted_before_last = 0

    def run(self) -> list[Stretch]:
        for node in self.graph.nodes:
            role, reason = self.role(node)
            self.roles[node] = (role, reason)
            self.note_device(node)
            if role is Role.HOST and self.reads_inside(node):
                self.close(node, f"{node.name} reads a tensor made inside")
            if role is Role.BOUNDARY:
                self.close(node, reason)
            elif role is Role.HOST:
                if self.open.nodes:
                    self.open.hoisted.append(node)
            else:
                self.open.nodes.append(node)
                self.inside.add(node)
                self.open.launches += reason == _LAUNCH
                self.hoisted_before_last = len(self.open.hoisted)
        return self.found

    def close(self, node: Node, reason: str) -> None:
        stretch = self.open
        if stretch.launches >= 2:
            # HOST nodes after its last node simply follow it.
            del stretch.hoisted[self.hoisted_before_last :]
            stretch.ended_by = (node, reason)
            self.found.append(stretch)
        self.open, self.inside = Stretch(), set()

    def reads_inside(self, node: Node) -> bool:
        return any(used in self.inside and not is_token(used) for used in node.all_input_nodes)

    def role(self, node: Node) -> tuple[Role, str]:
        """The node's role, and a word on why (:data:`_LAUNCH` for a launched kernel)."""
        if node.op == "placeholder":
            return Role.HOST, "graph input"
        if node.op == "get_attr":
            return Role.HOST, "constant"
        if node.op != "call_function":
            return Role.BOUNDARY, node.op
        symbol = node.meta.get("unbacked_symbol")
        if symbol is not None or node in self.sized_by_symbol:
            return Role.BOUNDARY, f"defines {symbol or 'an unbacked size'}"
        target = node.target
        if isinstance(target, Check):
            return self.check(node, target)
        if isinstance(target, self.capturable.launch_types):
            return Role.DEVICE, _LAUNCH
        if target is torch.empty_strided:
            return self.allocation(node)
        if views.returns_view(node):
            return self.view(node)
        if target is operator.getitem:
            if node.args[0] in self.inside:
                return Role.DEVICE, "output of a kernel inside"
            return Role.HOST, "output of a node outside"
        if isinstance(target, torch._ops.OpOverload) and target.overloadpacket in _EXTERN:
            return self.extern(node, target)
        if is_host_value(node):
            return Role.HOST, "host value"
        return Role.BOUNDARY, f"{getattr(target, '__name__', target)} does not capture"

    def check(self, node: Node, check: Check) -> tuple[Role, str]:
        if check is SCALAR or check is INPUT_SIZE_STRIDE or node.args[0] not in self.inside:
            return Role.HOST, "check of host values"
        return Role.CAPTURE_ONLY, "check of a tensor made inside"

    def allocation(self, node: Node) -> tuple[Role, str]:
        device = torch.device(node.kwargs.get("device", "cpu"))
        if device.type != self.device_type:
            return Role.BOUNDARY, f"allocates on {device}"
        return Role.DEVICE, "allocation"

    def view(self, node: Node) -> tuple[Role, str]:
        if node.args[0] in self.inside:
            return Role.DEVICE, "view of a tensor made inside"
        return Role.HOST, "view of a tensor made before"

    def extern(self, node: Node, op: torch._ops.OpOverload) -> tuple[Role, str]:
        # A CPU tensor would be read once, when captured, and never again.
        if not all(n in self.on_device for n in _tensors(node)):
            return Role.BOUNDARY, f"{op} reads a tensor not known to be on the device"
        # An index of unknown dtype is no mask: a mask's result defines a size.
        if op.overloadpacket is aten.index and any(
            _dtype(index) in _MASK_DTYPES for index in node.args[1] if index is not None
        ):
            return Role.BOUNDARY, f"{op} indexes by a mask"
        return Role.DEVICE, _LAUNCH

    def note_device(self, node: Node) -> None:
        """Note ``node`` as a tensor on the device where the graph says so: inputs,
        allocations, views, what kernels of the device read and write, and the
        results of aten operators whose tensors are all on the device."""
        target, tensors = node.target, _tensors(node)
        if node.op == "placeholder":
            value = node.meta.get("val")
            on_device = isinstance(value, torch.Tensor) and value.device.type == self.device_type
        elif node.op != "call_function":
            on_device = False
        elif isinstance(target, self.capturable.launch_types):
            self.on_device.update(n for n in tensors if not is_stream(n))
            on_device = False
        elif target is torch.empty_strided:
            on_device = torch.device(node.kwargs.get("device", "cpu")).type == self.device_type
        elif views.makes_view(node) or target is operator.getitem:
            on_device = node.args[0] in self.on_device
        else:
            on_device = (
                _keeps_device(target)
                and bool(tensors)
                and all(n in self.on_device for n in tensors)
            )
        if on_device:
            self.on_device.add(node)


def _sized_by_symbol(graph: torch.fx.Graph) -> set[Node]:
    """The nodes whose output sizes define unbacked symbols: they synced to know them."""
    found = set()
    for node in graph.nodes:
        if node.meta.get("unbacked_symbol") is None or node.target not in _METADATA:
            continue
        for used in node.all_input_nodes:
            found.add(used)
            if used.target is operator.getitem:
                found.add(used.args[0])
    return found


def _tensors(node: Node) -> list[Node]:
    return [n for n in node.all_input_nodes if not value_kind(n).is_scalar]


def _keeps_device(target: Any) -> bool:
    """Whether an operator's results are on its tensors' device: aten's operators
    that take no device argument."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return False
    return all(argument.name != "device" for argument in _compat.op_schema(target).arguments)


def _dtype(node: Any) -> torch.dtype | None:
    """The dtype of a tensor, where the graph states it: allocations, inputs, views."""
    while isinstance(node, Node):
        if node.op == "placeholder":
            value = node.meta.get("val")
            return value.dtype if isinstance(value, torch.Tensor) else None
        if node.target is torch.empty_strided:
            return node.kwargs.get("dtype")
        view = views.view_of(node)
        if view is None:
            return None
        node = view.base
    return None


def is_token(node: Node) -> bool:
    return isinstance(node.target, Check) or node.target is aten._make_dep_token.default


def is_stream(node: Node) -> bool:
    """Whether ``node`` is the stream that launches read (their first argument)."""
    return any(isinstance(user.target, Launch) and user.args[0] is node for user in node.users)


def is_host_value(node: Node) -> bool:
    """Whether ``node`` computes on the host only (``views.is_host_value``), or is the
    stream that launches read."""
    return views.is_host_value(node, lambda n: bool(_tensors(n))) or is_stream(node)
