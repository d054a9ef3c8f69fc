"""Storing and loading an FX artifact: the graph and everything it needs to run anywhere.

An artifact is the converter's FX graph (with its subgraphs) and the kernels it
owns (``artifact/kernels.py``). Stored, it is plain data that pickles: the graph
without the fake values that can be recomputed (each node keeps its symbol,
check and runner facts), the source of every Triton and C++ kernel, the constant
arguments, and the runner's name. Never a compiled object. Loading imports the
kernels under the same stable indices (Triton's cache has their binaries, so
nothing compiles), and, for those who receive the graphs, recomputes each
node's ``meta["val"]``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from .. import _compat
from ..codegen import fx_cpp  # noqa: F401  (defines the operator of C++ kernel nodes)
from .facts import VALUE_KIND, record_value_kinds
from .identity import ARTIFACT_FORMAT
from .kernels import OwnedKernels, _from_sources, hand_out, own_kernels

#: Node metadata that a stored graph keeps; ``meta["val"]`` is recomputed on load.
KEPT_META = ("unbacked_symbol", "runtime_assert", "extra_options")

_KERNEL_HOP = torch.ops.higher_order.triton_kernel_wrapper_mutation


class ArtifactNotStored(OSError):
    """An FX artifact that could not be stored or restored; loading it is a cache miss.

    Inductor treats an ``OSError`` while loading a cache entry as a miss and
    compiles again, so an artifact that cannot be stored is never served.
    """


@dataclasses.dataclass
class LoadedArtifact:
    """A restored artifact: the root graph, and every graph in the order the
    converter produced them (subgraphs before the graph that uses them)."""

    gm: torch.fx.GraphModule
    graphs: list[torch.fx.GraphModule]
    runner: str


def dumps(gm: torch.fx.GraphModule, runner: str) -> bytes:
    """The stored form of a handed-out graph ``gm`` that runs with ``runner``.

    Raises :class:`ArtifactNotStored`, naming why, when ``gm`` cannot be stored.
    """
    owned = own_kernels(gm)
    if owned.unstorable:
        raise ArtifactNotStored(owned.unstorable)
    payload = {
        "format": ARTIFACT_FORMAT,
        "runner": runner,
        "graph": _storable_copy(gm),
        "kernels": owned.sources(),
        "constant_args": owned.constant_args,
        "cpp_kernels": owned.cpp,
    }
    try:
        return _compat.GraphPickler.dumps(payload, _compat.graph_pickler_options())
    except Exception as e:
        raise ArtifactNotStored(f"the FX graph cannot be pickled: {type(e).__name__}: {e}") from e


def _storable_copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` (and of its subgraphs) keeping only what cannot be recomputed."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    record_value_kinds(graph)
    root = torch.nn.Module()
    for node in graph.nodes:
        kept = (*KEPT_META, VALUE_KIND, *(("val",) if node.op == "placeholder" else ()))
        node.meta = {key: node.meta[key] for key in kept if key in node.meta}
        if node.op == "get_attr":
            value = _fetch_attr(gm, node.target)
            if not isinstance(value, torch.fx.GraphModule):
                raise ArtifactNotStored(f"the graph holds a constant ({node.target})")
            root.add_module(node.target, _storable_copy(value))
        elif node.op == "call_function" and not _is_storable_target(node.target):
            raise ArtifactNotStored(f"node {node.name} calls {node.target!r}")
    return torch.fx.GraphModule(root, graph, class_name=type(gm).__name__)


def _is_storable_target(target: Any) -> bool:
    if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return True
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in ("torch", "_operator", "operator", "builtins", "math")


def loads(data: bytes, *, with_values: bool) -> LoadedArtifact:
    """Restore an artifact stored by :func:`dumps`, its kernels back in the side table.

    ``with_values`` recomputes each node's ``meta["val"]`` (for those who receive
    the graphs); without it, the runner reads the stored facts instead.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    fake_mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    payload = _compat.GraphPickler.loads(data, fake_mode)
    if payload.get("format") != ARTIFACT_FORMAT:
        raise ArtifactNotStored(
            f"FX artifact format {payload.get('format')}, not {ARTIFACT_FORMAT}"
        )
    owned: OwnedKernels = _from_sources(
        payload["kernels"], payload["constant_args"], payload["cpp_kernels"]
    )
    gm: torch.fx.GraphModule = payload["graph"]
    graphs: list[torch.fx.GraphModule] = []
    _restore(gm, fake_mode if with_values else None, graphs)
    hand_out(gm, owned)
    return LoadedArtifact(gm, graphs, payload["runner"])


def _restore(gm: torch.fx.GraphModule, fake_mode: Any, graphs: list[torch.fx.GraphModule]) -> None:
    """With a ``fake_mode``, recompute ``meta["val"]``; subgraphs first, in the order
    the converter produced them."""
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _fetch_attr(gm, node.target)
            if isinstance(value, torch.fx.GraphModule):
                _restore(value, fake_mode, graphs)
            node.meta["val"] = value
        if node.op == "call_function" and fake_mode is not None:
            with fake_mode.shape_env.ignore_fresh_unbacked_symbols():
                _compat.node_metadata_hook(node, fake_mode=fake_mode)
    gm.recompile()
    graphs.append(gm)


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    return functools.reduce(getattr, target.split("."), gm)
