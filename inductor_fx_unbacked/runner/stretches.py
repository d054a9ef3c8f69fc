"""A lowered graph with its stretches captured: each one node calling a CUDA graph.

``segments.py`` finds the stretches. Here each becomes one node calling a
:class:`~.cuda_graphs.CapturedStretch` whose body is the stretch as a graph of its own
(compiled like any lowered graph): its arguments are what the stretch reads from
outside, its results the tensors made inside that the rest of the graph reads.
The body reads the current stream itself, which is the capture stream while it
is captured. A result is a whole tensor, never a view: views of it are made again
after the stretch, so copying a result that reaches the graph's output (replayed
results are the graph's own memory) copies everything that aliases it.

Only a stretch whose replay pays is rewritten (:func:`_pays`): a replay, and the
copy of each result that reaches the graph's output, cost about as much as a few
launches (:attr:`~.cuda_graphs.Limits.launches_per_replay`), so a stretch of two or
three launches runs faster as it is.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Node

from ..artifact.facts import VALUE_KIND, value_kind
from ..codegen import views
from . import lowering
from .checks import Check
from .cuda_graphs import LIMITS, MEMORY, CapturedStretch
from .segments import (
    CUDA,
    Capturable,
    Stretch,
    find_stretches,
    is_host_value,
    is_stream,
    is_token,
)
from .tuning import Launch

aten = torch.ops.aten
log = logging.getLogger(__name__)


def capture_stretches(
    lowered: torch.fx.GraphModule,
    compile_body: Callable[[torch.fx.GraphModule], Callable[..., Any]],
    capturable: Capturable = CUDA,
) -> torch.fx.GraphModule:
    """A copy of ``lowered`` whose stretches (and its branches' stretches) are each
    one node calling a :class:`~.cuda_graphs.CapturedStretch`; ``lowered`` itself if it
    has none. ``compile_body`` makes a stretch's body callable
    (``straightline.generate``). The copy's ``meta["cuda_graph_stretches"]`` lists
    them all."""
    return _Rewriter(lowered, compile_body, capturable).run()


STRETCHES = "cuda_graph_stretches"


def compile_with_cuda_graphs(
    lowered: torch.fx.GraphModule,
    generate: Callable[[torch.fx.GraphModule], Callable[..., Any]],
    capturable: Capturable = CUDA,
) -> Callable[..., Any]:
    """``generate(lowered)`` with the stretches captured. Each call of the result is
    one call for :class:`~.cuda_graphs.GraphMemory`, under its lock: nothing it replays is
    evicted or replayed by another thread before it returns. Its ``source`` ends with
    the stretches' bodies, its ``stretches`` are their :class:`~.cuda_graphs.CapturedStretch`
    nodes."""
    module = capture_stretches(lowered, generate, capturable)
    function = generate(module)
    captured = module.meta.get(STRETCHES)
    if not captured:
        return function
    begin_call, lock = MEMORY.begin_call, MEMORY.lock

    def run(*args: Any) -> Any:
        with lock:
            begin_call()
            return function(*args)

    bodies = [f"# {stretch.__name__}, a CUDA graph:\n{stretch.body.source}" for stretch in captured]
    run.source = "\n".join([function.source, *bodies])
    run.lowered = module
    run.stretches = captured
    return run


class _Rewriter:
    def __init__(
        self,
        lowered: torch.fx.GraphModule,
        compile_body: Callable[[torch.fx.GraphModule], Callable[..., Any]],
        capturable: Capturable,
    ) -> None:
        self.lowered = lowered
        self.compile_body = compile_body
        self.capturable = capturable
        self.graph = torch.fx.Graph()
        self.env: dict[Node, Any] = {}
        self.captured: list[CapturedStretch] = []
        self.pending: list[tuple[Node, Stretch, Callable[..., Any], list[Node]]] = []

    def run(self) -> torch.fx.GraphModule:
        # Each stretch whose replay pays, with what the rest of the graph reads of it.
        stretches = []
        for stretch in find_stretches(self.lowered.graph, self.capturable):
            outside = _Outside(stretch)
            if _pays(stretch, outside):
                stretches.append((stretch, outside))
        last = {stretch.nodes[-1]: (stretch, outside) for stretch, outside in stretches}
        self.member_of = {node: stretch for stretch, _ in stretches for node in stretch.nodes}
        streams = []
        for node in self.lowered.graph.nodes:
            if is_stream(node):
                streams.append(node)
            if node in last:
                self.emit_stretch(*last[node], len(self.pending))
            if node in self.member_of:
                continue
            self.env[node] = self.graph.node_copy(node, self.lookup)
            if isinstance(node.target, lowering._Branch):
                self.env[node].target = self.branch(node.target)
        for call, stretch, body, results in self.pending:
            copied = [_reaches_output(result) for result in results]
            call.target = CapturedStretch(
                call.name, body, copied, stretch.launches, self.capturable.device_type, MEMORY
            )
            self.captured.append(call.target)
        if not self.captured:
            return self.lowered
        for node in streams:
            # Read by launches that are now in bodies, which read the stream themselves.
            if not self.env[node].users:
                self.graph.erase_node(self.env[node])
        self.graph.lint()
        name = type(self.lowered).__name__
        module = torch.fx.GraphModule(self.lowered, self.graph, class_name=name)
        module.meta[STRETCHES] = self.captured
        return module

    def lookup(self, node: Node) -> Any:
        if node not in self.env:
            # A check's token made inside, read by a later check: tokens only order
            # checks, and the stretch's checks ran before it returned.
            assert is_token(node), node.format_node()
            self.env[node] = self.graph.call_function(aten._make_dep_token.default)
        return self.env[node]

    def branch(self, target: lowering._Branch) -> lowering._Branch:
        branches = []
        for fn in target.branches:
            module = capture_stretches(fn.__self__, self.compile_body, self.capturable)
            self.captured += module.meta.get(STRETCHES, [])
            branches.append(module.forward)
        return lowering._Branch(target.__name__, tuple(branches))

    def emit_stretch(self, stretch: Stretch, outside: _Outside, index: int) -> None:
        body = self.compile_body(_body_module(stretch, outside.results))
        inputs = tuple(self.lookup(node) for node in stretch.inputs())
        call = self.graph.create_node(
            "call_function", _pending_stretch, inputs, name=f"cuda_graph_{index}"
        )
        results = []
        for position, result in enumerate(outside.results):
            value = self.graph.call_function(operator.getitem, (call, position))
            value.meta = {VALUE_KIND: value_kind(result).value}
            self.env[result] = value
            results.append(value)
        for node in stretch.nodes:
            if node in outside.views:
                self.env[node] = self.graph.node_copy(node, self.lookup)
            elif node in outside.same_as:
                self.env[node] = self.lookup(outside.same_as[node])
        self.pending.append((call, stretch, body, results))


def _pending_stretch(*inputs: Any) -> Any:
    raise AssertionError("a stretch's node is given its CapturedStretch when the rewrite ends")


class _Outside:
    """What the rest of the graph reads of a stretch, as whole tensors made inside
    (``results``): a view of one is made again after the stretch (``views``), and an
    in-place or out= result is its argument (``same_as``). So no two results share
    memory, and copying one result copies everything that aliases it."""

    def __init__(self, stretch: Stretch) -> None:
        members = set(stretch.nodes)
        self.views: set[Node] = set()
        self.same_as: dict[Node, Node] = {}
        needed = list(stretch.escaping())
        roots: set[Node] = set()
        while needed:
            node = needed.pop()
            if node in roots or node in self.views or node in self.same_as:
                continue
            alias = views.returned_alias(node)
            if views.returns_view(node):
                self.views.add(node)
                base = node.args[0]
            elif alias is not None:
                self.same_as[node] = base = alias[1]
            else:
                roots.add(node)
                continue
            if base in members:
                needed.append(base)
        self.results = [node for node in stretch.nodes if node in roots]


def _body_module(stretch: Stretch, results: list[Node]) -> torch.fx.GraphModule:
    """The stretch as a graph of its own: its inputs, its nodes, its results."""
    graph = torch.fx.Graph()
    env: dict[Node, Node] = {}
    for node in stretch.inputs():
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)

    def lookup(node: Node) -> Node:
        if node not in env:
            if is_stream(node):
                # The current stream when the body runs: the capture stream, while capturing.
                env[node] = graph.node_copy(node)
            else:
                assert is_token(node), node.format_node()
                env[node] = graph.call_function(aten._make_dep_token.default)
        return env[node]

    for node in stretch.nodes:
        env[node] = graph.node_copy(node, lookup)
    graph.output(tuple(env[node] for node in results))
    graph.lint()
    return torch.fx.GraphModule(torch.nn.Module(), graph, class_name="CudaGraphStretch")


def _pays(stretch: Stretch, outside: _Outside) -> bool:
    """Whether replaying ``stretch`` saves more than it costs: its launches against a
    replay and a copy of each result that reaches the graph's output (``outside``'s
    results), each counted as :attr:`~.cuda_graphs.Limits.launches_per_replay` launches."""
    copies = sum(_reaches_output(result) for result in outside.results)
    cost = LIMITS.launches_per_replay * (1 + copies)
    if stretch.launches >= cost:
        return True
    log.debug(
        "a stretch of %d launches ending at %s runs without a CUDA graph: a replay "
        "and %d copies cost about %d launches",
        stretch.launches,
        stretch.nodes[-1].name,
        copies,
        cost,
    )
    return False


def _reaches_output(node: Node) -> bool:
    """Whether the graph may return ``node``'s memory: through views, results that
    are their arguments, or nodes that may return what they are given."""
    pending, seen = [node], {node}
    while pending:
        for user in pending.pop().users:
            if user.op == "output":
                return True
            if user not in seen and _may_return_its_arguments(user):
                seen.add(user)
                pending.append(user)
    return False


def _may_return_its_arguments(node: Node) -> bool:
    target = node.target
    if target is _pending_stretch:
        return False  # a stretch returns tensors made inside, never its inputs
    if isinstance(target, (Check, Launch, lowering._InterpretedLaunch)):
        return False
    if isinstance(target, torch._ops.OpOverload):
        return views.returned_alias(node) is not None
    if views.makes_view(node) or target is operator.getitem:
        return True
    return not is_host_value(node) and target is not torch.empty_strided
