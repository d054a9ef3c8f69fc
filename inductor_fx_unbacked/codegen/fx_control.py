"""FX conversion of control flow: ``while_loop`` over converted subgraphs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sympy
import torch

from .wrapper import WhileLoopLine

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper_fxir import FxConverter


def _generate_while_loop(self: FxConverter, line: WhileLoopLine) -> None:
    """A ``while_loop`` HOP node over the converted cond and body subgraphs."""
    assert isinstance(line, WhileLoopLine), type(line)
    node = line.node
    # Subgraphs return a list of outputs; the HOP wants the predicate itself from
    # the cond subgraph and a tuple from the body.
    _set_output_form(self.subgms[node.cond_subgraph.graph.name], single=True)
    _set_output_form(self.subgms[node.body_subgraph.graph.name], single=False)
    target = (
        torch.ops.higher_order.while_loop_stack_output
        if line.stack_output
        else torch.ops.higher_order.while_loop
    )
    operands = [
        tuple(_operand(self, x) for x in inputs)
        for inputs in (node.carried_inputs, node.additional_inputs)
    ]
    fx_node = self.gm.graph.call_function(
        target,
        (
            self._get_subgm_attr(node.cond_subgraph),
            self._get_subgm_attr(node.body_subgraph),
            *operands,
        ),
    )
    self._record_allocation(node, fx_node)


def _operand(self: FxConverter, value: Any) -> Any:
    if isinstance(value, sympy.Expr):
        return self._generate_sym_node(value)
    return self._generate_buffer(value)


def _set_output_form(gm: torch.fx.GraphModule, single: bool) -> None:
    output = gm.graph.output_node()
    (values,) = output.args
    if isinstance(values, list):
        if single:
            (values,) = values
        output.args = (values if single else tuple(values),)
        gm.recompile()
