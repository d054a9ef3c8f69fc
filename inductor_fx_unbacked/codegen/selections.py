"""Masked selections in an ATen graph: the nodes that select the elements (or rows)
of a tensor where a mask is true (``x[mask]``, ``masked_select``, and ``x[mask]``
decomposed into ``nonzero``'s columns), with the unbacked symbol their length binds.
``masked_reductions`` rewrites reductions over them."""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols, statically_known_true

aten = torch.ops.aten
prims = torch.ops.prims

#: Pointwise operations that carry no ``pointwise`` tag.
_ALSO_POINTWISE = {prims.convert_element_type.default, aten.clone.default}


@dataclasses.dataclass
class Selection:
    """A node that selects the elements (or rows) of ``base`` where ``mask`` is true:
    ``mask`` covers the first ``mask_dims`` dimensions of ``base``."""

    node: Node
    base: Node
    mask: Node
    mask_dims: int
    symbol: Any
    #: The nodes that only exist to make it (``nonzero``, its columns).
    makers: list[Node]
    #: Why the mask is not known to cover ``base``'s first dimensions exactly, or None.
    mismatch: str | None = None

    def __post_init__(self) -> None:
        self.mismatch = _mismatch(self.mask, self.base, self.mask_dims)

    def same_mask(self, other: Selection) -> bool:
        """Whether ``other`` selects by the same mask: the same node, or one that
        computes the same from the same values (``x > 0`` written twice)."""
        return self.mask_dims == other.mask_dims and _same_value(self.mask, other.mask)


def _same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if not (isinstance(a, Node) and isinstance(b, Node)) or a.op != "call_function":
        return a == b if not isinstance(a, Node) and not isinstance(b, Node) else False
    if a.target is not b.target or not is_pointwise(a) or a.kwargs != b.kwargs:
        return False
    if len(a.args) != len(b.args):
        return False
    return all(_same_value(x, y) for x, y in zip(a.args, b.args))


def _mismatch(mask: Node, base: Node, mask_dims: int) -> str | None:
    """Why ``mask`` is not known to have exactly the shape of ``base``'s first
    ``mask_dims`` dimensions (``y[torch.where(m)]`` indexes ``y`` by ``m``'s
    positions, whatever their shapes), or None where it is, symbolically."""
    sizes, leading = shape(mask), shape(base)[:mask_dims]
    if len(sizes) == mask_dims == len(leading) and all(
        statically_known_true(a == b) for a, b in zip(sizes, leading)
    ):
        return None
    return (
        f"its mask {mask.name} of shape {list(sizes)} is not known to cover the "
        f"leading dimensions {list(leading)} of {base.name} exactly"
    )


def masked_selections(graph: torch.fx.Graph) -> list[Selection]:
    return [s for s in map(_selection, graph.nodes) if s is not None and s.symbol is not None]


def _selection(node: Node) -> Selection | None:
    if node.op != "call_function":
        return None
    if node.target is aten.masked_select.default:
        base, mask = node.args
        # A mask that broadcasts against the base fails the cover check.
        return Selection(node, base, mask, len(shape(base)), _bound_symbol(node), [])
    if node.target is not aten.index.Tensor:
        return None
    base, indices = node.args
    if len(indices) == 1 and dtype(indices[0]) == torch.bool:
        mask = indices[0]
        return Selection(node, base, mask, len(shape(mask)), _bound_symbol(node), [])
    # nonzero(mask)'s columns, each indexing its dimension (``x[mask]`` decomposed).
    columns = [index for index in indices if isinstance(index, Node)]
    if len(columns) != len(indices) or not all(c.target is operator.getitem for c in columns):
        return None
    unbind = columns[0].args[0]
    if not all(c.args == (unbind, i) for i, c in enumerate(columns)):
        return None
    if unbind.target is not aten.unbind.int or unbind.args[1:] != (1,):
        return None
    nonzero = unbind.args[0]
    if nonzero.target is not aten.nonzero.default or len(columns) != len(shape(nonzero.args[0])):
        return None
    makers = [nonzero, unbind, *columns]
    return Selection(node, base, nonzero.args[0], len(columns), _bound_symbol(nonzero), makers)


def _bound_symbol(node: Node) -> Any:
    """The unbacked symbol of ``node``'s first dimension's size: the one it binds, or,
    where it binds none (fake tensors memoise ``nonzero`` of one mask), the one
    its value's size is."""
    for symbol, keypath in (node.meta.get("unbacked_bindings") or {}).items():
        if [getattr(key, "name", getattr(key, "idx", None)) for key in keypath] == ["size", 0]:
            return symbol
    sizes = shape(node)
    symbols = free_unbacked_symbols(sizes[0]) if sizes else set()
    return next(iter(symbols)) if len(symbols) == 1 else None


def shape(node: Any) -> tuple[Any, ...]:
    value = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


def dtype(node: Any) -> torch.dtype | None:
    value = node.meta.get("val") if isinstance(node, Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None


def is_pointwise(node: Node) -> bool:
    target = node.target
    if target in _ALSO_POINTWISE:
        return True
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags
