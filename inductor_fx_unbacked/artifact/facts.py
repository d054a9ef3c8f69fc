"""What the runner knows about each node of a graph, kept with the artifact.

The lowered runner frees a tensor after its last use, merges equal symbolic
expressions and inlines integer sums; for each it must know whether a node
computes a tensor or a scalar, and which scalar. A converted graph says so in
each node's ``meta["val"]``. A graph restored from Inductor's cache for no one
but the runner has no fake values (recomputing them is most of a load), so the
stored graph keeps the fact itself (:data:`VALUE_KIND`), and the runner reads
the same answer on a warm start as on a cold one.
"""

from __future__ import annotations

import enum

import torch

#: Node metadata of a stored graph: the :class:`ValueKind` of the node's value.
VALUE_KIND = "inductor_fx_unbacked_value_kind"


class ValueKind(str, enum.Enum):
    TENSOR = "tensor"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    #: No value (a kernel launch, the output node), or one the runner does not use.
    OTHER = "other"
    #: A node of a graph this package did not produce, without ``meta["val"]``.
    UNKNOWN = "unknown"

    @property
    def is_scalar(self) -> bool:
        return self in (ValueKind.INT, ValueKind.FLOAT, ValueKind.BOOL)


def kind_of_value(value: object) -> ValueKind:
    if isinstance(value, torch.Tensor):
        return ValueKind.TENSOR
    # bool before int: a bool is an int.
    if isinstance(value, (bool, torch.SymBool)):
        return ValueKind.BOOL
    if isinstance(value, (int, torch.SymInt)):
        return ValueKind.INT
    if isinstance(value, (float, torch.SymFloat)):
        return ValueKind.FLOAT
    return ValueKind.OTHER


def value_kind(node: torch.fx.Node) -> ValueKind:
    """What ``node`` computes: from ``meta["val"]``, or from the stored fact."""
    if "val" in node.meta:
        return kind_of_value(node.meta["val"])
    stored = node.meta.get(VALUE_KIND)
    return ValueKind(stored) if stored is not None else ValueKind.UNKNOWN


def record_value_kinds(graph: torch.fx.Graph) -> None:
    """Store each node's :func:`value_kind` in its meta, for when ``meta["val"]`` is gone."""
    for node in graph.nodes:
        node.meta[VALUE_KIND] = value_kind(node).value
