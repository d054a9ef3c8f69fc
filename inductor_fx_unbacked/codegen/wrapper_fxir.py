"""FX conversion: the graph-level converter entries.

Mirrors ``torch/_inductor/codegen/wrapper_fxir.py``: graph inputs and outputs,
multi-output kernels, and the wrappers of ``generate`` and of the extern-kernel
and fallback conversions. The conversion of single lines lives in sibling
modules: ``fx_symbols`` (unbacked symbol definitions, dynamic select/slice),
``fx_triton`` (Triton kernel definitions, calls, tuning), ``fx_checks``
(runtime checks) and ``fx_control`` (``while_loop``). The ``_generate_*``
functions are methods of ``FxConverter`` once the overlay is enabled (see
``integration/overlay.py``); the rest is plain code.
"""

from __future__ import annotations

import functools
import operator
import warnings
from typing import TYPE_CHECKING, Any

import sympy
import torch
from torch._inductor import config, ir
from torch._inductor.codegen.wrapper import MultiOutputLine
from torch._inductor.utils import convert_to_symint
from torch._inductor.virtualized import V
from torch.utils import _pytree as pytree

from .. import _compat
from .._compat import UPSTREAM_CONVERTS_COMPOUND_GRAPH_INPUTS
from . import views
from .fx_checks import F, _assert_all_finite, _is_floating_tensor
from .fx_symbols import _getitem
from .wrapper import ZeroBufferLine

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper_fxir import FxConverter

aten = torch.ops.aten


def registered_wrapper_is_fx(device_type: str, *, cpp_wrapper: bool, fx_wrapper: bool) -> bool:
    """Whether the wrapper codegen registered for ``device_type``, in the slot that
    ``cpp_wrapper`` and ``fx_wrapper`` select, is an FX one (as inside ``fx_backend``)."""
    from torch._inductor.codegen.common import get_wrapper_codegen_for_device
    from torch._inductor.codegen.wrapper_fxir import WrapperFxCodegen

    codegen = get_wrapper_codegen_for_device(device_type, cpp_wrapper, fx_wrapper)
    return isinstance(codegen, type) and issubclass(codegen, WrapperFxCodegen)


# Graph inputs and outputs.


def deduplicating_graph_inputs(generate_inputs: F) -> F:
    """Wrap ``FxConverter._generate_graph_inputs`` so that no placeholder name repeats.

    A subgraph can receive one symbol twice: duck sizing gives equal dims one
    symbol, and each lifted use of it is an input of its own (``torch.cond``
    branches closing over ``y.shape[0]`` and ``z.shape[0]``). Upstream names
    every symbol placeholder after its symbol, so the generated ``forward`` has
    a duplicate argument. A repeat is renamed after its input, and the first
    placeholder stays the symbol's definition. Compound inputs such as
    ``2*s17`` (a backward graph's saved size) are placeholders for their
    expression where upstream has no conversion for them (see
    ``_compat.UPSTREAM_CONVERTS_COMPOUND_GRAPH_INPUTS``). Everything else is
    upstream's.
    """

    @functools.wraps(generate_inputs)
    def _generate_graph_inputs(self: FxConverter) -> None:
        before = {node for node in self.gm.graph.nodes if node.op == "placeholder"}
        compound = {} if UPSTREAM_CONVERTS_COMPOUND_GRAPH_INPUTS else _compound_inputs(self)
        graph_inputs = self.graph_inputs
        if compound:
            # Upstream makes a placeholder named after the input for a constant.
            self.graph_inputs = {
                name: sympy.Integer(0) if name in compound else ir_node
                for name, ir_node in graph_inputs.items()
            }
        try:
            generate_inputs(self)
        finally:
            self.graph_inputs = graph_inputs
        placeholders = [
            node for node in self.gm.graph.nodes if node.op == "placeholder" and node not in before
        ]
        assert len(placeholders) == len(self.graph_inputs), (placeholders, self.graph_inputs)
        first_of: dict[Any, torch.fx.Node] = {}
        for (name, ir_node), placeholder in zip(self.graph_inputs.items(), placeholders):
            first = first_of.setdefault(placeholder.target, placeholder)
            if first is placeholder:
                continue
            placeholder.target = name
            _compat.rename_node(placeholder, name)
            if isinstance(ir_node, sympy.Symbol):
                self.buffer_to_node[str(ir_node)] = first
                self._generate_size_proxy(first, ir_node)
        for placeholder in placeholders:
            expr = compound.get(placeholder.target)
            if expr is not None:
                placeholder.meta["val"] = convert_to_symint(expr)
                self._generate_size_proxy(placeholder, expr)

    return _generate_graph_inputs


def _compound_inputs(self: FxConverter) -> dict[str, sympy.Expr]:
    """The graph inputs that are size expressions other than a symbol or a number."""
    return {
        name: ir_node
        for name, ir_node in self.graph_inputs.items()
        if isinstance(ir_node, sympy.Expr) and not isinstance(ir_node, (sympy.Symbol, sympy.Number))
    }


def checking_outputs(generate_outputs: F) -> F:
    """Wrap ``FxConverter._generate_outputs``: with ``config.nan_asserts``, each float
    tensor output is checked for NaN and Inf before the graph returns it, as the
    Python wrapper does. The outputs themselves are upstream's."""

    @functools.wraps(generate_outputs)
    def _generate_outputs(self: FxConverter) -> Any:
        outputs = generate_outputs(self)
        if config.nan_asserts:
            for output in pytree.tree_leaves(outputs):
                if isinstance(output, torch.fx.Node) and _is_floating_tensor(output):
                    _assert_all_finite(self, output)
        return outputs

    return _generate_outputs


def converting_constant_buffers(generate_buffer: F) -> F:
    """Wrap ``FxConverter._generate_buffer`` so that a ``ShapeAsConstantBuffer`` (a
    graph output that is not a tensor) converts whatever its expression is.

    Its expression is what Inductor's lowering left of a ``SymInt``/``SymBool``/
    ``SymFloat``: a Python ``int`` or ``bool`` (a size that lowering specialized,
    e.g. to a weight's size), a sympy number or boolean atom, or a symbolic
    expression. Upstream interprets every one as a symbolic expression, which
    fails on the constants; the Python wrapper prints the expression, so a
    constant comes back as a Python constant and an expression as the value of
    its symbols (upstream's conversion). An expression over a symbol that no
    line defined (Inductor dropped the definition, as of a ``torch.cond``
    predicate from an ``.item()``) is a ``NameError`` naming it. Every other
    buffer is upstream's.
    """

    @functools.wraps(generate_buffer)
    def _generate_buffer(self: FxConverter, node: ir.IRNode) -> Any:
        if not isinstance(node, ir.ShapeAsConstantBuffer):
            return generate_buffer(self, node)
        expr = node.expr
        if isinstance(expr, (bool, sympy.logic.boolalg.BooleanAtom)):
            return bool(expr)
        if isinstance(expr, (int, sympy.Integer)):
            return int(expr)
        if isinstance(expr, sympy.Float):
            return float(expr)
        if not isinstance(expr, sympy.Basic):
            raise TypeError(
                f"graph output {node!r}: expected an int, a bool or a sympy expression, "
                f"got {type(expr).__name__}"
            )
        try:
            return generate_buffer(self, node)
        except KeyError as e:
            symbol = e.args[0] if e.args else None
            if not isinstance(symbol, sympy.Symbol) or symbol in self.expr_to_proxy:
                raise
            raise NameError(
                f"cannot convert {expr} to FX: no line of the wrapper code defines {symbol} "
                "before this use (where Inductor drops a definition, its Python wrapper "
                f"fails the same way: name '{symbol}' is not defined)"
            ) from e

    return _generate_buffer


# Outputs of multi-output kernels.


def writing_views_relative_to_their_base(create_as_strided: F) -> F:
    """Wrap ``FxConverter._create_as_strided``, which writes each view Inductor makes
    (``ReinterpretView``, a buffer's reuse) as ``torch.as_strided(base, size, stride,
    offset)``, with Inductor's offset, counted from the base's first element, where
    ``as_strided`` reads one counted from the storage's start.

    A view of a buffer the graph allocates keeps upstream's node: that base starts its
    storage. A view of any other base (a graph input, an extern kernel's output)
    starts at the base's storage offset plus Inductor's, as the Python wrapper's
    ``reinterpret_tensor`` does: the graph then reads the right elements of an input
    that starts inside its storage (``views.py``).
    """

    @functools.wraps(create_as_strided)
    def _create_as_strided(
        self: FxConverter, input_node: torch.fx.Node, size: Any, stride: Any, offset: Any
    ) -> torch.fx.Node:
        view = create_as_strided(self, input_node, size, stride, offset)
        if views.starts_its_storage(input_node):
            return view
        base, view_size, view_stride, relative = view.args
        graph = self.gm.graph
        with graph.inserting_before(view):
            start = graph.call_function(torch.ops.aten.sym_storage_offset.default, (input_node,))
            if relative != 0:
                start = graph.call_function(operator.add, (start, relative))
        view.args = (base, view_size, view_stride, start)
        _compat.node_metadata_hook(view, fake_mode=V.fake_mode)
        return view

    return _create_as_strided  # type: ignore[return-value]


def _generate_multi_output(self: FxConverter, line: MultiOutputLine) -> None:
    """One output of a multi-output kernel: a ``getitem`` for every index.

    Upstream applies only the first index, so an output nested in a list (a
    custom op returning ``tuple[Tensor, list[Tensor]]``) became the whole list.
    """
    assert isinstance(line, MultiOutputLine), type(line)
    node = self.buffer_to_node[line.arg_name]
    for _, index in line.indices:
        node = _getitem(self.gm.graph, node, index)
    if line.indices:
        node.name = line.result_name
    self.buffer_to_node[line.result_name] = node


# Wrappers of the whole conversion and of the extern-kernel conversions.


def ignoring_fresh_unbacked_symbols(generate: F) -> F:
    """Wrap ``FxConverter.generate`` so that ``meta["val"]`` creates no pending symbols.

    The converter fills ``meta["val"]`` by running each node's op on fake values;
    an ``aten.item`` or a data-dependent op then allocates a fresh unbacked symbol
    in Inductor's ShapeEnv. Nothing binds it, so the next graph compiled on that
    ShapeEnv (the eagerly compiled backward of a training step) fails with
    ``PendingUnbackedSymbolNotFound``, which AOTAutograd prints as a long warning.
    These values only describe the graph; their symbols are not Inductor's.
    """

    @functools.wraps(generate)
    def method(self: FxConverter) -> torch.fx.GraphModule:
        shape_env = getattr(V.fake_mode, "shape_env", None)
        if shape_env is None:
            return generate(self)
        with shape_env.ignore_fresh_unbacked_symbols():
            return generate(self)

    return method


def materializing_symbolic_args(generate: F) -> F:
    """Wrap a converter method that emits extern kernel or fallback nodes, so that
    symbolic values in their arguments become FX nodes.

    Inductor keeps an extern kernel's non-tensor arguments as they were traced,
    so ``torch.topk(x, k.item())`` carries the symbol ``u0`` itself; upstream puts
    it into the node raw, and the generated code fails with ``NameError: name
    'u0' is not defined``. Every SymInt or sympy expression in the new nodes'
    arguments, positional, keyword or nested in lists, is computed from the
    nodes that define its symbols, right before the node that uses it.
    """

    @functools.wraps(generate)
    def method(self: FxConverter, *args: Any, **kwargs: Any) -> Any:
        graph = self.gm.graph
        root = _compat.graph_root(graph)
        last = root.prev
        with warnings.catch_warnings():
            # FX warns about the raw symbols that the loop below replaces.
            warnings.filterwarnings("ignore", message="Raw SymInt value")
            result = generate(self, *args, **kwargs)
        node = last.next
        while node is not root:
            if node.op == "call_function":
                _materialize_symbolic_args(self, node)
            node = node.next
        return result

    return method


def converting_extern_kernel_args(generate_common: F) -> F:
    """Wrap ``FxConverter._generate_extern_kernel_common``: a fallback's node gets
    every keyword argument of its call, and symbolic values in its arguments become
    nodes (:func:`materializing_symbolic_args`).

    Upstream takes the positional half of ``kernel.unflatten_args(...)`` and the
    keyword arguments from ``kernel.kwargs``; where Inductor left ``kernel.kwargs``
    empty for a fallback (``FallbackKernel.create`` without ``kwargs=``), a
    keyword-only argument such as ``aten.sort.stable``'s ``stable`` was lost and
    the node failed when it ran ("missing value for argument 'stable'"). The
    missing ones are taken from ``unflatten_args`` for the conversion.

    A keyword argument that is a sympy expression over symbols
    (``repeat_interleave(r, output_size=u0)``) becomes its node before upstream
    creates the kernel's node: FX's metadata hook runs the operator on the
    arguments' fake values as the node is created, and a raw ``Symbol`` is no
    ``SymInt`` ("Expected a value of type 'Optional[int]' ... found type
    'Symbol'"), so replacing it afterwards would be too late.
    """
    materializing = materializing_symbolic_args(generate_common)

    @functools.wraps(generate_common)
    def _generate_extern_kernel_common(
        self: FxConverter, kernel: ir.ExternKernel, out_ir_node: ir.IRNode
    ) -> None:
        missing = _missing_keyword_args(kernel)
        symbolic = _symbolic_keys(kernel.kwargs)
        if not missing and not symbolic:
            return materializing(self, kernel, out_ir_node)
        saved = kernel.kwargs
        kernel.kwargs = {
            **pytree.tree_map(lambda v: _as_node(self, v), missing),
            **saved,
            **{name: _symbolic_as_node(self, saved[name]) for name in symbolic},
        }
        try:
            return materializing(self, kernel, out_ir_node)
        finally:
            kernel.kwargs = saved

    return _generate_extern_kernel_common  # type: ignore[return-value]


def _is_symbolic(value: Any) -> bool:
    """Whether ``value`` is a SymInt, SymBool or sympy expression over symbols."""
    if isinstance(value, (torch.SymInt, torch.SymBool)):
        value = value.node.expr
    return isinstance(value, sympy.Basic) and bool(value.free_symbols)


def _symbolic_keys(kwargs: dict[str, Any]) -> list[str]:
    """The keyword arguments with a symbolic value anywhere inside them."""
    return [
        name for name, value in kwargs.items() if any(map(_is_symbolic, pytree.tree_leaves(value)))
    ]


def _symbolic_as_node(self: FxConverter, value: Any) -> Any:
    """``value`` with each symbolic leaf replaced by the node that computes it."""

    def to_node(leaf: Any) -> Any:
        if not _is_symbolic(leaf):
            return leaf
        if isinstance(leaf, (torch.SymInt, torch.SymBool)):
            leaf = leaf.node.expr
        return self._generate_sym_node(leaf)

    return pytree.tree_map(to_node, value)


def _missing_keyword_args(kernel: ir.ExternKernel) -> dict[str, Any]:
    """The keyword arguments of a fallback's call that ``kernel.kwargs`` lacks."""
    if not isinstance(kernel, ir.FallbackKernel) or not hasattr(kernel, "unflatten_args"):
        return {}
    _, kwargs = kernel.unflatten_args(kernel.inputs, kernel.constant_args)
    return {name: value for name, value in kwargs.items() if name not in kernel.kwargs}


def _as_node(self: FxConverter, value: Any) -> Any:
    return self._generate_buffer(value) if isinstance(value, ir.IRNode) else value


def _materialize_symbolic_args(self: FxConverter, node: torch.fx.Node) -> None:
    def to_node(value: Any) -> Any:
        if isinstance(value, (torch.SymInt, torch.SymBool)):
            value = value.node.expr
        if isinstance(value, sympy.Basic) and value.free_symbols:
            with self.gm.graph.inserting_before(node):
                return self._generate_sym_node(value)
        return value

    if not any(
        isinstance(leaf, (torch.SymInt, torch.SymBool, sympy.Basic))
        for leaf in pytree.tree_leaves((node.args, node.kwargs))
    ):
        return
    node.args = pytree.tree_map(to_node, node.args)
    node.kwargs = pytree.tree_map(to_node, node.kwargs)


def _generate_zero_buffer(self: FxConverter, line: ZeroBufferLine) -> None:
    """Zero a workspace in place: ``aten.zero_`` of its allocation's node."""
    assert isinstance(line, ZeroBufferLine), type(line)
    self.gm.graph.call_function(aten.zero_.default, (self.buffer_to_node[line.name],))
