"""What makes an FX artifact, in the keys of Inductor's and AOTAutograd's caches.

Inductor's FX graph cache and AOTAutograd's cache hand back a compiled artifact
whenever their key matches. The key holds Inductor's config, but not which
wrapper codegen ``register_backend_for_device`` installed, so without help a
program compiled once with the Python wrapper is served to ``fx_backend`` (no FX
graph, no checks), and the other way round.

Both keys do hold the uuid of each device's custom backend pass (the
``device_custom_pass`` of ``register_backend_for_device``), which is
the extension point Inductor offers a backend for exactly this. ``fx_backend``
registers :class:`ArtifactIdentity` there: a pass that changes nothing (or runs
the pass that was registered before it) and whose uuid names everything that
changes what the FX backend produces: that it is this package's FX wrapper, the
runner, whether runtime checks stay, the device (``cpu`` is the CPU mode), and
the package itself (its version and a hash of its source).

``config.fx_wrapper`` is not used for this: in a JIT compile it also switches
Inductor to its C++-wrapper config (``get_cpp_wrapper_config``), which would
change the program, not only the key.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch._inductor.custom_graph_pass import get_hash_for_files

from . import _compat, _overlay
from ._compat import CustomBackendPass

log = logging.getLogger(__name__)

#: Bumped whenever the stored form of an FX artifact changes.
ARTIFACT_FORMAT = 2


@functools.cache
def package_hash() -> str:
    """A hash of this package's version and source files."""
    from . import __version__

    root = Path(__file__).parent
    files = tuple(sorted(str(path) for path in root.rglob("*.py")))
    return get_hash_for_files(files, extra=__version__).hex()


class ArtifactIdentity(CustomBackendPass):
    """A device's custom backend pass whose uuid puts the FX backend into cache keys.

    It runs ``wrapped`` (the pass registered for the device before
    ``fx_backend``, if any) and otherwise leaves the graph alone.
    """

    def __init__(self, device: str, runner: str, runtime_asserts: bool, wrapped: Any) -> None:
        self.device = device
        self.runner = runner
        self.runtime_asserts = runtime_asserts
        self.wrapped = wrapped

    def __call__(self, graph: Any) -> None:
        if self.wrapped is not None:
            self.wrapped(graph)

    def uuid(self) -> Any:
        inner = None if self.wrapped is None else self.wrapped.uuid()
        if self.wrapped is not None and inner is None:
            return None  # as Inductor treats the wrapped pass itself
        return (
            "inductor-fx-unbacked",
            package_hash(),
            ARTIFACT_FORMAT,
            self.device,
            os.environ.get("TRITON_INTERPRET", "0") if self.device == "cpu" else None,
            self.runner,
            self.runtime_asserts,
            # Disabled inside fx_backend, upstream's converter writes the graph.
            _overlay.is_enabled(),
            inner,
        )


# Storing FX artifacts.
#
# Inductor stores a compiled graph as the Python source of a module whose
# ``call(args)`` runs it (``CompiledFxGraph.source_code``), and on a hit loads
# that module again. The FX backend's artifact is such a module too: its source
# holds the FX graph (pickled without the fake values that can be recomputed)
# and the source of every Triton kernel the graph launches. Loading it imports
# the kernels (Triton's cache has their binaries, so nothing compiles), puts them
# in the kernel side table under fresh indices, recomputes each node's
# ``meta["val"]``, hands the graphs to ``recording_graphs``, and builds the runner.


class ArtifactNotStored(OSError):
    """An FX artifact that could not be stored; loading it is a cache miss.

    Inductor treats an ``OSError`` while loading a cache entry as a miss and
    compiles again, so an artifact that cannot be stored is never served.
    """


@dataclasses.dataclass(frozen=True)
class KernelSource:
    """What imports one Triton kernel again: its module's code, and its name there."""

    module_code: str
    kernel_name: str
    interpreted: bool


#: The source of each kernel in the side table that this package's converter
#: defined, with the kernel object, so that a reused index never answers for
#: another kernel.
_kernel_sources: dict[int, tuple[Any, KernelSource]] = {}


def record_kernel_source(kernel_idx: int, kernel: Any, source: KernelSource) -> None:
    _kernel_sources[kernel_idx] = (kernel, source)


def kernel_source(kernel_idx: int) -> KernelSource | None:
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    kernel, source = _kernel_sources.get(kernel_idx, (None, None))
    try:
        current = kernel_side_table.get_kernel(kernel_idx)
    except (AssertionError, KeyError):
        return None
    return source if current is kernel else None


#: Node metadata that an artifact keeps; ``meta["val"]`` is recomputed on load.
_KEPT_META = ("unbacked_symbol", "runtime_assert", "extra_options")


def artifact_source(gm: torch.fx.GraphModule, runner: str) -> str:
    """The source of the module that restores ``gm`` and runs it with ``runner``.

    Raises :class:`ArtifactNotStored`, naming why, when ``gm`` cannot be stored.
    """
    kernels: dict[int, KernelSource] = {}
    constant_args: dict[int, dict[str, Any]] = {}
    cpp_kernels: dict[str, KernelSource] = {}
    storable = _storable_copy(gm, _Stored(kernels, constant_args, cpp_kernels))
    payload = {
        "format": ARTIFACT_FORMAT,
        "runner": runner,
        "graph": storable,
        "kernels": kernels,
        "constant_args": constant_args,
        "cpp_kernels": cpp_kernels,
    }
    try:
        data = _compat.GraphPickler.dumps(payload, _compat.graph_pickler_options())
    except Exception as e:
        raise ArtifactNotStored(f"the FX graph cannot be pickled: {type(e).__name__}: {e}") from e
    encoded = base64.b64encode(data).decode("ascii")
    return (
        "# An FX artifact of inductor-fx-unbacked: the FX graph and its Triton kernels.\n"
        "from inductor_fx_unbacked.caching import load_artifact\n"
        f"call = load_artifact({encoded!r})\n"
    )


def unstorable_artifact_source(reason: str) -> str:
    """The source of a module that, loaded from a cache, is a miss (see ArtifactNotStored)."""
    return (
        "# An FX artifact of inductor-fx-unbacked that could not be stored.\n"
        "from inductor_fx_unbacked.caching import ArtifactNotStored\n"
        f"raise ArtifactNotStored({reason!r})\n"
    )


@dataclasses.dataclass
class _Stored:
    """What an artifact stores beside its graphs: Triton kernels (by side-table
    index), their constant args (by index), C++ kernels (by key)."""

    kernels: dict[int, KernelSource]
    constant_args: dict[int, dict[str, Any]]
    cpp_kernels: dict[str, KernelSource]


def _storable_copy(gm: torch.fx.GraphModule, stored: _Stored) -> torch.fx.GraphModule:
    """A copy of ``gm`` (and of its subgraphs) that keeps only what cannot be recomputed."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    from .codegen import fx_cpp

    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    root = torch.nn.Module()
    for node in graph.nodes:
        meta = {key: node.meta[key] for key in _KEPT_META if key in node.meta}
        if node.op == "placeholder" and "val" in node.meta:
            meta["val"] = node.meta["val"]
        node.meta = meta
        if node.op == "get_attr":
            value = _fetch_attr(gm, node.target)
            if not isinstance(value, torch.fx.GraphModule):
                raise ArtifactNotStored(f"the graph holds a constant ({node.target})")
            root.add_module(node.target, _storable_copy(value, stored))
        elif node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation:
            kernel_idx = node.kwargs["kernel_idx"]
            source = kernel_source(kernel_idx)
            if source is None:
                raise ArtifactNotStored(f"kernel {kernel_idx} has no recorded source")
            stored.kernels[kernel_idx] = source
            index = node.kwargs["constant_args_idx"]
            stored.constant_args[index] = kernel_side_table.get_constant_args(index)
        elif node.target is torch.ops.fx_unbacked.cpp_kernel.default:
            key = node.args[0]
            stored.cpp_kernels[key] = fx_cpp.kernel_source(key)
        elif node.op == "call_function" and not _is_storable_target(node.target):
            raise ArtifactNotStored(f"node {node.name} calls {node.target!r}")
    return torch.fx.GraphModule(root, graph, class_name=type(gm).__name__)


def _is_storable_target(target: Any) -> bool:
    if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return True
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in ("torch", "_operator", "operator", "builtins", "math")


def load_artifact(encoded: str) -> Any:
    """Restore an FX artifact (``artifact_source``) and return its ``call(args)``.

    An artifact that cannot be restored is a cache miss (``ArtifactNotStored``),
    with a warning: the program compiles again instead of failing.
    """
    try:
        return _load_artifact(encoded)
    except ArtifactNotStored:
        raise
    except Exception as e:
        log.warning(
            "Could not restore an FX artifact from Inductor's cache (%s: %s); compiling again.",
            type(e).__name__,
            e,
        )
        raise ArtifactNotStored(f"the FX artifact could not be restored: {e}") from e


def _load_artifact(encoded: str) -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from . import api
    from .codegen import fx_cpp  # defines the operator that C++ kernel nodes call

    fake_mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    payload = _compat.GraphPickler.loads(base64.b64decode(encoded), fake_mode)
    if payload.get("format") != ARTIFACT_FORMAT:
        raise ArtifactNotStored(
            f"FX artifact format {payload.get('format')}, not {ARTIFACT_FORMAT}"
        )
    for key, source in payload["cpp_kernels"].items():
        if fx_cpp.register_source(source) != key:
            raise ArtifactNotStored(f"C++ kernel {key}: its stored source has another key")
    kernel_indices = {old: _load_kernel(source) for old, source in payload["kernels"].items()}
    constant_indices = {
        old: _add_constant_args(args) for old, args in payload["constant_args"].items()
    }
    gm: torch.fx.GraphModule = payload["graph"]
    graphs: list[torch.fx.GraphModule] = []
    # Fake values cost most of a load; only those who receive the graphs see them.
    with_values = api.recording()
    _restore(gm, kernel_indices, constant_indices, fake_mode if with_values else None, graphs)
    api.record_graphs(graphs)
    run = api.compile_graph_with(payload["runner"], gm)

    def call(args: list[Any]) -> Any:
        return run(*args)

    return call


def _load_kernel(source: KernelSource) -> int:
    from .codegen.fx_triton import load_kernel

    _, wrapped = load_kernel(source)
    return wrapped.kernel_idx


def _add_constant_args(args: dict[str, Any]) -> int:
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    return kernel_side_table.add_constant_args(args)


def _restore(
    gm: torch.fx.GraphModule,
    kernel_indices: dict[int, int],
    constant_indices: dict[int, int],
    fake_mode: Any,
    graphs: list[torch.fx.GraphModule],
) -> None:
    """Point kernel nodes at the reloaded kernels and, with a ``fake_mode``,
    recompute ``meta["val"]``; subgraphs first, in the order the converter
    produced them. Without one, the graph is the runner's only: placeholders keep
    their stored values, and the runner reads the rest off the targets
    (``straightline.is_symbolic``)."""
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _fetch_attr(gm, node.target)
            if isinstance(value, torch.fx.GraphModule):
                _restore(value, kernel_indices, constant_indices, fake_mode, graphs)
            node.meta["val"] = value
        elif node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation:
            node.kwargs = {
                **node.kwargs,
                "kernel_idx": kernel_indices[node.kwargs["kernel_idx"]],
                "constant_args_idx": constant_indices[node.kwargs["constant_args_idx"]],
            }
        if node.op == "call_function" and fake_mode is not None:
            with fake_mode.shape_env.ignore_fresh_unbacked_symbols():
                _compat.node_metadata_hook(node, fake_mode=fake_mode)
    gm.recompile()
    graphs.append(gm)


def _fetch_attr(gm: torch.nn.Module, target: str) -> Any:
    return functools.reduce(getattr, target.split("."), gm)
