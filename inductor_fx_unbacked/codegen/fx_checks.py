"""FX conversion of the runtime checks: the token chain and every check that rides on it.

Scalar, size/stride, alignment and NaN/Inf checks of wrapper IR lines, and the
checks of the graph inputs that the Python wrapper writes into its prologue.
This is the lowest of the converter modules: the helpers the others share
(``_add_assert``, ``_is_defined``, the wrapper type ``F``) live here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import sympy
import torch
from torch._inductor import config, ir
from torch._inductor.utils import GPU_ALIGN_BYTES, sympy_product
from torch._inductor.virtualized import V

from . import ops as _ops_module  # noqa: F401  (registers the fx_unbacked:: ops)
from .check_lines import AlignmentAssertLine, NanCheckLine, ScalarAssertLine, SizeStrideAssertLine

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper_fxir import FxConverter

aten = torch.ops.aten
ops = torch.ops.fx_unbacked

#: An upstream converter method that a wrapper keeps the signature of.
F = TypeVar("F", bound=Callable[..., Any])


def _is_defined(self: FxConverter, symbol: sympy.Symbol) -> bool:
    return symbol in self.expr_to_proxy or str(symbol) in self.buffer_to_node


# Runtime checks. Each becomes nodes that raise at run time when violated; the
# node that raises is tagged ``meta["runtime_assert"] = True``.


#: Scalar checks become their functional form, which threads a token.
_FUNCTIONAL_CHECKS = {aten._assert_scalar.default: aten._functional_assert_scalar.default}


def _add_assert(self: FxConverter, target: Any, args: tuple[Any, ...]) -> torch.fx.Node:
    """A check node, threaded on the graph's token chain.

    Each check takes the token that the previous check returned (the first one,
    ``aten._make_dep_token()``) and returns a new one, as Inductor's functional
    asserts do: every check has a value (``meta["val"]`` is the token's fake
    tensor), and a consumer that reorders nodes can keep the checks in order by
    following the chain. The token, like the checks, is tagged
    ``meta["runtime_assert"]``.
    """
    graph = self.gm.graph
    token = getattr(self, "_check_token", None)
    if token is None:
        token = graph.call_function(aten._make_dep_token.default, ())
        token.meta["runtime_assert"] = True
    node = graph.call_function(_FUNCTIONAL_CHECKS.get(target, target), (*args, token))
    node.meta["runtime_assert"] = True
    self._check_token = node
    return node


def _fx_value(self: FxConverter, expr: Any) -> Any:
    """An FX node for a sympy expression or condition, or its value if it is constant."""
    value = self._sympy_interp(expr)
    return value.node if isinstance(value, torch.fx.Proxy) else value


def _generate_scalar_assert(self: FxConverter, line: ScalarAssertLine) -> None:
    """``if not cond: raise RuntimeError(msg)`` as ``aten._assert_scalar(cond, msg)``."""
    assert isinstance(line, ScalarAssertLine), type(line)
    condition = _fx_value(self, line.node.scalar)
    _add_assert(self, aten._assert_scalar.default, (condition, line.node.msg))


def _generate_size_stride_assert(self: FxConverter, line: SizeStrideAssertLine) -> None:
    assert isinstance(line, SizeStrideAssertLine), type(line)
    node = line.node
    _assert_size_stride(
        self,
        self.buffer_to_node[line.name],
        node.get_size(),
        node.get_stride(),
        node.get_op_name(),
        line.dtype,
    )


def _assert_size_stride(
    self: FxConverter,
    tensor: torch.fx.Node,
    size: Any,
    stride: Any,
    op_name: str,
    dtype: torch.dtype | None = None,
) -> None:
    size_nodes, stride_nodes = self._generate_sym_nodes(size), self._generate_sym_nodes(stride)
    if dtype is None:
        target, args = ops.assert_size_stride, (tensor, size_nodes, stride_nodes, op_name)
    else:
        target = ops.assert_tensor_metadata
        args = (tensor, size_nodes, stride_nodes, dtype, op_name)
    _add_assert(self, target.default, args)


def _generate_alignment_assert(self: FxConverter, line: AlignmentAssertLine) -> None:
    assert isinstance(line, AlignmentAssertLine), type(line)
    node = line.node
    _add_assert(
        self,
        ops.assert_alignment.default,
        (self.buffer_to_node[node.get_name()], GPU_ALIGN_BYTES, node.get_op_name()),
    )


def checking_graph_inputs(generate_shapes: F) -> F:
    """Wrap ``FxConverter._generate_graph_input_shapes`` to check the inputs after.

    The Python wrapper checks the size and stride of each tensor input
    (``size_asserts``) and, with ``nan_asserts``, that it holds no NaN or Inf; it
    writes these into its prologue, which FX conversion never sees. The alignment
    of a GPU input that the kernels assume aligned is checked too: Inductor's
    compiled graph realigns such an input before it calls the wrapper.
    """

    @functools.wraps(generate_shapes)
    def _generate_graph_input_shapes(self: FxConverter) -> None:
        generate_shapes(self)
        if not self.is_subgraph:
            _generate_graph_input_asserts(self)

    return _generate_graph_input_shapes


def _generate_graph_input_asserts(self: FxConverter) -> None:
    # The GPU inputs that the kernels assume aligned (upstream's ``inputs_to_check``):
    # Inductor's compiled graph copies such an input where it is not, before the graph
    # runs; a graph called directly says so instead of reading it misaligned. It is an
    # alignment check, so it exists where the user's config keeps them
    # (``alignment_asserts``, which upstream reads before every alignment check it
    # writes): a check that the config turned off never appears.
    aligned = (
        set(getattr(V.graph, "inputs_to_check", None) or ()) if config.alignment_asserts else ()
    )
    for index, ir_node in enumerate(self.graph_inputs.values()):
        if not isinstance(ir_node, ir.TensorBox):
            continue
        placeholder = self.buffer_to_node[self._get_buffer(ir_node).get_name()]
        size, stride = ir_node.get_size(), ir_node.get_stride()
        # A symbol that no input size defines (an unused input's) has no node.
        defined = all(
            _is_defined(self, symbol)
            for expr in (*size, *stride)
            for symbol in sympy.sympify(expr).free_symbols
        )
        if config.size_asserts and defined and sympy_product(size) != 0:
            _add_assert(
                self,
                ops.assert_input_size_stride.default,
                (
                    placeholder,
                    self._generate_sym_nodes(size),
                    self._generate_sym_nodes(stride),
                    f"graph input {index} ({placeholder.name})",
                ),
            )
        if index in aligned:
            _add_assert(
                self,
                ops.assert_alignment.default,
                (placeholder, GPU_ALIGN_BYTES, f"graph input {index} ({placeholder.name})"),
            )
        if config.nan_asserts and _is_floating_tensor(placeholder):
            _assert_all_finite(self, placeholder)


def _generate_nan_check(self: FxConverter, line: NanCheckLine) -> None:
    assert isinstance(line, NanCheckLine), type(line)
    for name in line.names:
        node = self.buffer_to_node[name]
        if _is_floating_tensor(node):
            _assert_all_finite(self, node)


def _is_floating_tensor(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _assert_all_finite(self: FxConverter, tensor: torch.fx.Node) -> None:
    graph = self.gm.graph
    for check, problem in ((aten.isnan.default, "NaN"), (aten.isinf.default, "Inf")):
        found = graph.call_function(aten.any.default, (graph.call_function(check, (tensor,)),))
        ok = graph.call_function(
            aten.item.default, (graph.call_function(aten.logical_not.default, (found,)),)
        )
        _add_assert(self, aten._assert_scalar.default, (ok, f"{tensor.name} has {problem}"))


def strip_runtime_asserts(gm: torch.fx.GraphModule) -> int:
    """Remove the nodes tagged ``meta["runtime_assert"]``; return how many.

    For consumers that verify shapes themselves. Only the tagged nodes go (the
    checks and their token chain); the values they checked stay, as other nodes
    may use them.
    """
    asserts = [node for node in gm.graph.nodes if node.meta.get("runtime_assert")]
    for node in reversed(asserts):
        tokens = [arg for arg in node.args if isinstance(arg, torch.fx.Node) and arg in asserts]
        # A check's users are later checks, through the token: give them its own.
        node.replace_all_uses_with(tokens[-1] if tokens else None)
        gm.graph.erase_node(node)
    if asserts:
        gm.recompile()
    return len(asserts)
