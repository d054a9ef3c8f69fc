"""Straight-line Python for a lowered FX wrapper graph: what the runner calls.

:func:`inductor_fx_unbacked.runner.lowering.lower` turns the converter's graph into one
whose nodes call what they stand for. Its ``forward`` is FX's own code for that
graph, which still pays, on every call, for what the graph spells as operators:
``aten.item.default`` (an operator dispatch, 20x ``Tensor.item``), the
dependency tokens (``_make_dep_token`` allocates a tensor), one Python call per
check, ``torch.as_strided`` and ``torch.empty_strided`` through the general
argument parser, and duplicate checks (``u0 >= 0`` and ``0 <= u0``).

:func:`compile_lowered` writes one Python function per graph (and per ``cond``
branch) the way Inductor's Python wrapper writes ``call``:

- checks are inlined: ``if not (u0 >= 0): <raise through the graph's operator>``;
  the operator runs only on failure, so exceptions and messages are the graph's;
- a check that repeats an earlier one (the same condition, after merging equal
  symbolic expressions) is not run again: if the first passed, so does the
  repeat; if it failed, it raised first. Tokens are not materialised when only
  checks read them;
- ``item`` is ``Tensor.item``; views that lowering made ``reinterpret_tensor`` and
  allocations use the Python wrapper's own fast entry points (``_reinterpret_tensor``,
  ``_empty_strided_<device>``);
- kernel launches go through the kernel's autotuner on their first call (which
  tunes a kernel of several configs, see ``tuning.Launch``), then call the
  launcher it settled on directly, rebound as a global;
- a ``cond`` is a Python conditional over the branches' own generated functions;
- ``nonzero``, ``masked_select``, ``repeat_interleave`` and ``_unique2`` call the
  runner's own kernels for them (``compaction.py``), which compute the same tensors.

The graph itself is never changed: every check stays an FX node of it. The
generated text is kept as the function's ``source`` attribute.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx.graph import magic_methods

from .. import _compat
from ..artifact.facts import ValueKind, value_kind
from ..artifact.kernels import owned_kernels
from ..codegen import views
from . import compaction, lowering
from .checks import SCALAR, Check
from .items import item_runs
from .stretches import compile_with_cuda_graphs
from .tuning import Launch

aten = torch.ops.aten

_EMPTY_STRIDED = {device: _compat.fast_empty_strided(device) for device in ("cpu", "cuda")}

#: Pure targets whose equal calls may be merged (symbolic arithmetic only).
_MERGEABLE = views.HOST_TARGETS | {
    getattr(operator, name) for name in magic_methods if hasattr(operator, name)
}
#: Operators on a tensor that are its methods (same values, no dispatch).
_TENSOR_METHODS = {
    aten.item.default: "item",
    aten.sym_size.int: "size",
    aten.sym_stride.int: "stride",
    aten.sym_numel.default: "numel",
    aten.sym_storage_offset.default: "storage_offset",
}


def is_symbolic(node: torch.fx.Node) -> bool:
    """Whether ``node`` computes a scalar (an int, a ``SymInt``), not a tensor: what
    the graph says (``artifact.facts``), never a guess."""
    return value_kind(node).is_scalar


def compile_lowered(gm: torch.fx.GraphModule, *, cuda_graphs: bool = False) -> Callable[..., Any]:
    """The callable the FX backend runs for ``gm``: straight-line Python, launching
    the kernels that ``gm`` owns (or, for a graph this package did not hand out,
    what the side table holds now). With ``cuda_graphs``, the stretches between
    host syncs replay CUDA graphs (``stretches.py``)."""
    lowered = lowering.lower(gm, owned_kernels(gm))
    if cuda_graphs:
        return compile_with_cuda_graphs(lowered, generate)
    return generate(lowered)


def generate(lowered: torch.fx.GraphModule) -> Callable[..., Any]:
    """One Python function computing what ``lowered.forward`` computes."""
    return _FunctionWriter(lowered).function()


class _FunctionWriter:
    """Writes one graph as a function. Globals get names ``ifx_<n>``."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        self.module = module
        self.graph = module.graph
        self.namespace: dict[str, Any] = {"__builtins__": __builtins__}
        self.global_names: dict[int, str] = {}
        self.lines: list[str] = []
        self.names: dict[torch.fx.Node, str] = {}
        self.node_names = {node.name for node in self.graph.nodes}
        self.device_checks: dict[int, str] = {}
        #: Local variables assigned so far (parameters included).
        self.defined: set[str] = set()
        #: ``item`` nodes that read their value from one host copy of a run
        #: (``items.py``): (the run's local name, the run, the item's offset).
        self.run_items: dict[torch.fx.Node, tuple[str, Any, int]] = {}
        self.elided: set[torch.fx.Node] = set()

    # Globals.

    def global_(self, value: Any, hint: str = "g") -> str:
        key = id(value)
        if key not in self.global_names:
            hint = "".join(c if c.isalnum() else "_" for c in hint)
            name = f"ifx_{hint}_{len(self.global_names)}"
            assert name not in self.node_names, name
            self.global_names[key] = name
            self.namespace[name] = value
        return self.global_names[key]

    # Arguments.

    def arg(self, value: Any, as_tuple: bool = False) -> str:
        if isinstance(value, torch.fx.Node):
            return self.names[value]
        if isinstance(value, (list, tuple)):
            items = [self.arg(item) for item in value]
            if isinstance(value, list) and not as_tuple:
                return "[" + ", ".join(items) + "]"
            return "(" + "".join(item + ", " for item in items) + ")"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!r}: {self.arg(v)}" for k, v in value.items()) + "}"
        if value is None or isinstance(value, (bool, str)):
            return repr(value)
        if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
            # Parenthesised when negative: ``(-2) ** x`` is not ``-2 ** x``.
            return repr(value) if value >= 0 else f"({value!r})"
        return self.global_(value, "c")

    def call(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        parts = [self.arg(a) for a in args]
        parts += [f"{k}={self.arg(v)}" for k, v in kwargs.items()]
        hint = getattr(target, "__name__", None) or type(target).__name__
        return f"{self.global_(target, hint)}({', '.join(parts)})"

    # The walk.

    def function(self) -> Callable[..., Any]:
        self.merge_equal_expressions()
        self.find_item_runs()
        params = []
        checked: set[torch.fx.Node] = set()
        tokens_materialised = self.tokens_read_by_non_checks()
        last_use = self.last_uses()
        for node in self.graph.nodes:
            self.names[node] = node.name
            if node.op == "placeholder":
                params.append(node.name)
                self.defined.add(node.name)
            elif node.op == "get_attr":
                value = self.module
                for atom in node.target.split("."):
                    value = getattr(value, atom)
                self.emit(f"{node.name} = {self.global_(value, 'attr')}")
                self.defined.add(node.name)
            elif node.op == "output":
                self.emit(f"return {self.arg(node.args[0])}")
            elif node.op == "call_function":
                self.call_function(node, checked, tokens_materialised)
            else:
                raise NotImplementedError(f"lowered graphs have no {node.op} nodes: {node}")
            # Free tensors after their last use, as FX's code and the Python
            # wrapper do, so that the allocator can reuse their memory.
            dead = [n.name for n in last_use.get(node, ()) if n.name in self.defined]
            if dead and node.op != "output":
                self.emit(" = ".join(dead) + " = None")
        name = "lowered_forward"
        head = [f"def {name}({', '.join(params)}):"]
        if self.device_checks:
            # The fast allocators take the current device; elsewhere, run the
            # lowered graph as it is.
            slow = self.global_(self.module.forward, "graph")
            for index, check in self.device_checks.items():
                head.append(f"    if {check}() != {index}:")
                head.append(f"        return {slow}({', '.join(params)})")
        source = "\n".join(head + self.lines) + "\n"
        exec(
            compile(source, f"<inductor_fx_unbacked lowered {id(self.module):x}>", "exec"),
            self.namespace,
        )
        function = self.namespace[name]
        function.source = source
        function.lowered = self.module
        return function

    def find_item_runs(self) -> None:
        for number, run in enumerate(item_runs(self.graph)):
            name = f"ifx_scalars_{number}"
            assert name not in self.node_names, name
            for node, offset in zip(run.items, run.offsets):
                self.run_items[node] = (name, run, offset)
        # The 0-d views that only those items read are not made.
        for node in self.run_items:
            view = node.args[0]
            if all(user in self.run_items for user in view.users):
                self.elided.add(view)

    def read_item(self, node: torch.fx.Node) -> str:
        """A scalar of a run: the first of the run copies the run to the host."""
        name, run, offset = self.run_items[node]
        if name not in self.defined:
            view = self.global_(views.REINTERPRET_TENSOR or torch.as_strided, "view")
            base = self.names[run.base]
            self.emit(f"{name} = {view}({base}, ({run.length},), (1,), {run.low}).tolist()")
            self.defined.add(name)
        return f"{name}[{offset - run.low}]"

    def last_uses(self) -> dict[torch.fx.Node, list[torch.fx.Node]]:
        """The tensors (by their defining node) whose last reader each node is."""
        last: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in self.graph.nodes:
            for used in node.all_input_nodes:
                last[self.alias.get(used, used)] = node
        freed: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for used, node in last.items():
            if not is_symbolic(used):
                freed.setdefault(node, []).append(used)
        return freed

    def emit(self, line: str) -> None:
        self.lines.append("    " + line)

    def merge_equal_expressions(self) -> None:
        """Give equal symbolic expressions one node (in this copy's own walk)."""
        self.alias: dict[torch.fx.Node, torch.fx.Node] = {}
        seen: dict[Any, torch.fx.Node] = {}
        for node in self.graph.nodes:
            if node.op != "call_function" or node.kwargs or node.target not in _MERGEABLE:
                continue
            if not is_symbolic(node):
                continue
            key = (node.target, self.key(node.args))
            try:
                earlier = seen.setdefault(key, node)
            except TypeError:  # an unhashable constant (a slice before 3.12)
                continue
            if earlier is not node:
                self.alias[node] = earlier

    def key(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return ("node", self.alias.get(value, value))
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(self.key(v) for v in value))
        return (type(value).__name__, value)

    def tokens_read_by_non_checks(self) -> bool:
        token_nodes = [
            node
            for node in self.graph.nodes
            if node.op == "call_function"
            and (isinstance(node.target, Check) or node.target is aten._make_dep_token.default)
        ]
        return any(
            user.op != "call_function" or not isinstance(user.target, Check)
            for node in token_nodes
            for user in node.users
        )

    def call_function(
        self, node: torch.fx.Node, checked: set[torch.fx.Node], tokens_materialised: bool
    ) -> None:
        target, args = node.target, node.args
        if node in self.alias:
            self.names[node] = self.names[self.alias[node]]
            return
        if node in self.elided:
            return
        if not tokens_materialised:
            if target is aten._make_dep_token.default:
                return
            if isinstance(target, Check):
                condition = args[0]
                if target is SCALAR and isinstance(condition, torch.fx.Node):
                    condition = self.alias.get(condition, condition)
                    if condition in checked:
                        return
                    checked.add(condition)
                self.emit_check(target, node)
                return
        expression = self.expression(node)
        self.emit(f"{node.name} = {expression}")
        self.defined.add(node.name)

    def expression(self, node: torch.fx.Node) -> str:
        target, args, kwargs = node.target, node.args, node.kwargs
        if node in self.run_items:
            return self.read_item(node)
        method = _TENSOR_METHODS.get(target)
        if method is not None and not kwargs:
            tensor, *rest = (self.arg(a) for a in args)
            return f"{tensor}.{method}({', '.join(rest)})"
        if target is torch.sym_sum and not kwargs and value_kind(node) is ValueKind.INT:
            (terms,) = args
            return "(" + " + ".join(["0", *(self.arg(t) for t in terms)]) + ")"
        if target is views.REINTERPRET_TENSOR and target is not None and not kwargs:
            # Sizes and strides as the tuples its argument parser asks for.
            rest = [self.arg(args[1], as_tuple=True), self.arg(args[2], as_tuple=True)]
            rest += [self.arg(a) for a in args[3:]]
            return f"{self.global_(target, 'view')}({self.arg(args[0])}, {', '.join(rest)})"
        if target is torch.empty_strided:
            fast = self.fast_empty_strided(args, kwargs)
            if fast is not None:
                return fast
        if isinstance(target, Launch):
            stream, *launch_args = args
            launcher = self.global_(target.entry_point(), target.__name__)
            # After its first call, the autotuner's launcher is called directly.
            target.rebind_after_tuning(self.namespace, launcher)
            parts = ", ".join(self.arg(a) for a in launch_args)
            return f"{launcher}({parts}{', ' if parts else ''}stream={self.arg(stream)})"
        if isinstance(target, lowering._Branch):
            selector, *operands = args
            branches = [self.branch(fn) for fn in target.branches]
            operand_text = ", ".join(self.arg(a) for a in operands)
            if target.__name__ == "cond":
                false_fn, true_fn = branches
                return f"({true_fn} if {self.arg(selector)} else {false_fn})({operand_text})"
            table = self.global_(tuple(self.namespace[b] for b in branches), "switch")
            return f"{table}[int({self.arg(selector)})]({operand_text})"
        if getattr(target, "__module__", None) in ("_operator", "operator") and not kwargs:
            pattern = magic_methods.get(target.__name__)
            if pattern is not None and pattern.count("{}") == len(args):
                return pattern.format(*(self.arg(a) for a in args))
        # ATen's compactions through the runner's own kernels (same results).
        target = compaction.REPLACEMENTS.get(target, target)
        return self.call(target, args, kwargs)

    def fast_empty_strided(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        if len(args) != 2 or set(kwargs) - {"dtype", "device"} or "dtype" not in kwargs:
            return None
        device = torch.device(kwargs.get("device", "cpu"))
        allocate = _EMPTY_STRIDED.get(device.type)
        if allocate is None or not isinstance(kwargs["dtype"], torch.dtype):
            return None
        if device.type == "cuda" and device.index is not None:
            self.device_checks[device.index] = self.global_(torch.cuda.current_device, "device")
        size, stride = (self.arg(a, as_tuple=True) for a in args)
        return f"{self.global_(allocate, 'empty')}({size}, {stride}, {self.arg(kwargs['dtype'])})"

    def emit_check(self, check: Check, node: torch.fx.Node) -> None:
        """A check inlined: its cheap condition in place, its ``enforce`` (which raises
        what the graph's operator raises) only where that fails. The token goes."""
        *values, _token = node.args
        texts = [self.arg(value, as_tuple=True) for value in values]
        enforce = self.global_(check.enforce, check.name)
        for line in check.render(texts, enforce):
            self.emit(line)

    def branch(self, fn: Callable[..., Any]) -> str:
        module = getattr(fn, "__self__", None)
        if isinstance(module, torch.fx.GraphModule) and fn.__name__ == "forward":
            fn = generate(module)
        return self.global_(fn, "branch")
