"""A handed-out graph, and how it leaves a process and comes back: by value.

:func:`hand_out` makes a converted graph self-contained before anyone sees it:
it owns its kernels (``kernels.py``) and it pickles by value
(:class:`HandedOutGraphModule`). ``GraphModule``'s own pickling re-traces
``forward`` with the symbolic tracer on load, which runs every call whose
arguments are not graph inputs (allocations, ``nonzero`` of a fresh buffer,
tokens) once, for real, and bakes its result in as a constant: another graph.

The stored form (:func:`dumps`) is plain data: the graph and its subgraphs
without the fake values that can be recomputed (each node keeps its symbol,
check and runner facts), the source of every Triton and C++ kernel, the constant
arguments, the versions that made it; never a compiled object. Inductor's caches
store it without the graph's tensor constants (``constants=False``), pickling
keeps them. :func:`loads` checks the versions, imports the kernels under the same
stable indices (Triton's cache has their binaries, so nothing compiles) and, for
those who receive the graphs, recomputes each node's ``meta["val"]``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections.abc import Callable
from typing import Any

import torch

from .. import _compat
from ..codegen import fx_cpp  # noqa: F401  (defines the operator of C++ kernel nodes)
from .facts import VALUE_KIND, record_value_kinds
from .identity import ARTIFACT_FORMAT
from .kernels import OWNED_KERNELS, OwnedKernels, _from_sources, own_kernels, owned_kernels

#: Node metadata that a stored graph keeps; ``meta["val"]`` is recomputed on load.
KEPT_META = ("unbacked_symbol", "runtime_assert", "extra_options")


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


def versions() -> dict[str, str]:
    """What an artifact is only valid with: the versions of this package's artifact
    format, of torch and of Triton."""
    import triton

    return {
        "format": str(ARTIFACT_FORMAT),
        "torch": torch.__version__,
        "triton": triton.__version__,
    }


def dumps(gm: torch.fx.GraphModule, runner: str, *, constants: bool = False) -> bytes:
    """The stored form of a handed-out graph ``gm`` that runs with ``runner``;
    ``constants`` keeps the graph's tensor constants (frozen parameters).

    Raises :class:`ArtifactNotStored`, naming why, when ``gm`` cannot be stored.
    """
    owned = own_kernels(gm)
    if owned.unstorable:
        raise ArtifactNotStored(owned.unstorable)
    payload = {
        "format": ARTIFACT_FORMAT,
        "versions": versions(),
        "runner": runner,
        "calls_runner": "_ifx_call" in gm.__dict__,
        "graph": _storable_copy(gm, constants),
        "kernels": owned.sources(),
        "constant_args": owned.constant_args,
        "cpp_kernels": owned.cpp,
    }
    try:
        return _compat.GraphPickler.dumps(payload, _compat.graph_pickler_options())
    except Exception as e:
        raise ArtifactNotStored(f"the FX graph cannot be pickled: {type(e).__name__}: {e}") from e


def _storable_copy(gm: torch.fx.GraphModule, constants: bool) -> torch.fx.GraphModule:
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
            if isinstance(value, torch.fx.GraphModule):
                _assign_attr(root, node.target, _storable_copy(value, constants))
            elif constants and isinstance(value, torch.Tensor):
                _assign_attr(root, node.target, value.detach())
            else:
                raise ArtifactNotStored(f"the graph holds a constant ({node.target})")
        elif node.op == "call_function" and not _is_storable_target(node.target):
            raise ArtifactNotStored(f"node {node.name} calls {node.target!r}")
    return torch.fx.GraphModule(root, graph, class_name=type(gm).__name__)


def _is_storable_target(target: Any) -> bool:
    if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return True
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in ("torch", "_operator", "operator", "builtins", "math")


def loads(data: bytes, *, with_values: bool) -> LoadedArtifact:
    """Restore an artifact stored by :func:`dumps`, handed out again: its kernels in
    the side table, kept alive by the graph.

    ``with_values`` recomputes each node's ``meta["val"]`` (for those who receive
    the graphs); without it, the runner reads the stored facts instead. Raises
    :class:`ArtifactNotStored`, naming why, for an artifact of other versions or one
    whose kernels cannot run in this process.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    fake_mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    payload = _compat.GraphPickler.loads(data, fake_mode)
    # The graph's own ``.item()`` nodes (Inductor reads 0-d CPU tensor inputs so)
    # get unbacked values, whatever the settings of the ShapeEnv that the graph was
    # traced with (the pickler copies them onto this one: Dynamo's default refuses).
    fake_mode.allow_scalar_outputs = True
    if payload.get("format") != ARTIFACT_FORMAT or payload.get("versions") != versions():
        raise ArtifactNotStored(
            f"the FX artifact was made with {payload.get('versions') or 'an older format'}; "
            f"this process has {versions()}: compile it again here"
        )
    _check_kernels_can_run(payload["kernels"].values())
    # A process that only loads gets the ptxas of the one that compiled
    # (``register_fx_wrapper``).
    _compat.use_inductors_ptxas()
    with warnings.catch_warnings():
        # Interpreted kernels' modules warn on import that no CPU backend can compile
        # them; the interpreter never compiles, so the warning only misleads.
        warnings.filterwarnings("ignore", "Could not find an active CPU backend")
        owned: OwnedKernels = _from_sources(
            payload["kernels"], payload["constant_args"], payload["cpp_kernels"]
        )
    gm: torch.fx.GraphModule = payload["graph"]
    graphs: list[torch.fx.GraphModule] = []
    _restore(gm, fake_mode if with_values else None, graphs)
    hand_out(gm, owned, calls_runner=payload.get("calls_runner", False))
    return LoadedArtifact(gm, graphs, payload["runner"])


def _check_kernels_can_run(sources: Any) -> None:
    """Refuse, saying what to do, kernels this process cannot run: interpreted ones
    (the CPU mode's) where Triton's interpreter is off, compiled ones without a GPU."""
    interpreted = {source.interpreted for source in sources}
    if True in interpreted and os.environ.get("TRITON_INTERPRET") != "1":
        raise ArtifactNotStored(
            "the FX artifact runs its Triton kernels in Triton's interpreter (it was made by "
            "fx_backend('cpu')): set TRITON_INTERPRET=1 in the environment before Python "
            "imports Triton (before importing torch's compiler or this package), and load it "
            "again"
        )
    if False in interpreted and not torch.cuda.is_available():
        raise ArtifactNotStored(
            "the FX artifact runs Triton kernels compiled for a GPU, and this process has no "
            "CUDA device; make it with fx_backend('cpu') to run it on CPU"
        )


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


def _assign_attr(root: torch.nn.Module, target: str, value: Any) -> None:
    *path, name = target.split(".")
    module = root
    for atom in path:
        if not hasattr(module, atom):
            module.add_module(atom, torch.nn.Module())
        module = getattr(module, atom)
    setattr(module, name, value)


# Handing a graph out.


class HandedOutGraphModule(torch.fx.GraphModule):
    """A graph this package handed out: it owns its kernels and pickles by value.

    ``pickle``, ``torch.save``, ``copy`` and ``multiprocessing`` store it as
    :func:`dumps` does, with its tensor constants, and restore it with
    :func:`loads`, in this process or another; what cannot be stored raises
    ``pickle.PicklingError`` naming why. A graph that a runner serves (an AOT
    module) runs through that runner when called (``gm(...)``; ``forward`` is the
    graph's own code), unless hooks or a trace need its ``forward``.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        import pickle

        try:
            return (_unpickler, (dumps(self, "graph", constants=True),))
        except ArtifactNotStored as e:
            raise pickle.PicklingError(f"cannot pickle this FX graph by value: {e}") from e

    def __copy__(self) -> torch.fx.GraphModule:
        return _handed_out_copy(self, super().__copy__())

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.fx.GraphModule:
        return _handed_out_copy(self, super().__deepcopy__(memo))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        run = self.__dict__.get("_ifx_call")
        if run is not None and not kwargs and self._runs_as_it_is(args):
            if run is _PENDING:
                run = self._ifx_call = _call_runner(self)
            return run(*args)
        return super().__call__(*args, **kwargs)

    def _runs_as_it_is(self, args: tuple[Any, ...]) -> bool:
        """Neither hooks (but the one that places kernels) nor a trace (fake or
        functional tensors, Dynamo) ask for ``forward``."""
        hooks, pre_hooks = _compat.forward_hooks(self)
        if hooks or len(pre_hooks) > 1:
            return False
        if torch.compiler.is_compiling():
            return False
        return all(type(a) in _PLAIN_TENSORS for a in args if isinstance(a, torch.Tensor))


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
#: The runner of a graph that a runner serves, before its first call.
_PENDING = object()


def _call_runner(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """Builds the runner of such a graph: ``forward``, unless the integration layer
    registered its runner (:func:`register_call_runner`)."""
    return gm.forward


def unpickle(data: bytes) -> torch.fx.GraphModule:
    """A handed-out graph from its pickle (``HandedOutGraphModule.__reduce__``)."""
    return loads(data, with_values=True).gm


#: What a pickle of a handed-out graph calls to restore it (a registered
#: ``unpickle`` of the runner layer, so that a new process imports it first).
_unpickler: Callable[[bytes], torch.fx.GraphModule] = unpickle


def register_call_runner(
    build: Callable[[torch.fx.GraphModule], Callable[..., Any]],
    unpickler: Callable[[bytes], torch.fx.GraphModule],
) -> None:
    """Serve the calls of handed-out graphs marked ``calls_runner`` with ``build(gm)``,
    and restore pickles with ``unpickler`` (which must import the module that
    registers ``build``, then call :func:`unpickle`)."""
    global _call_runner, _unpickler
    _call_runner, _unpickler = build, unpickler


def _handed_out_copy(
    original: torch.fx.GraphModule, copy: torch.fx.GraphModule
) -> torch.fx.GraphModule:
    """A copy of a handed-out graph, handed out with the original's kernels (copies
    share them) and the original's way of being called."""
    return hand_out(copy, own_kernels(original), calls_runner="_ifx_call" in original.__dict__)


class PlaceKernelsHook:
    """A forward pre-hook that puts the graph's kernels back before each call
    (``gm(...)``), so that a graph runs its own kernels after a Dynamo reset."""

    def __call__(self, module: torch.nn.Module, args: Any) -> None:
        owned_kernels(module)  # type: ignore[arg-type]


def hand_out(
    gm: torch.fx.GraphModule,
    owned: OwnedKernels | None = None,
    *,
    calls_runner: bool = False,
    runner: Callable[..., Any] | None = None,
) -> torch.fx.GraphModule:
    """Make ``gm`` self-contained before anyone else sees it: it owns its kernels
    (``owned``, for a restored graph; else what its nodes name), calling it puts them
    back into the side table where they are missing, and it and its subgraphs pickle
    by value. ``calls_runner`` serves its calls with the runner that the integration
    layer registered (``runner``, where it is built already). Idempotent: a copy of a
    handed-out graph is handed out again, with the original's kernels."""
    owned = owned if owned is not None else own_kernels(gm)
    for module in gm.modules():
        if isinstance(module, torch.fx.GraphModule):
            module.meta[OWNED_KERNELS] = owned
            pre_hooks = _compat.forward_hooks(module)[1].values()
            if not any(isinstance(hook, PlaceKernelsHook) for hook in pre_hooks):
                module.register_forward_pre_hook(PlaceKernelsHook())
            _pickle_by_value(module)
    if calls_runner or runner is not None:
        gm._ifx_call = runner if runner is not None else _PENDING
    return gm


def _pickle_by_value(gm: torch.fx.GraphModule) -> None:
    """Give ``gm`` a class of its own that is a :class:`HandedOutGraphModule`.

    Each ``GraphModule`` has a class of its own already, which holds its
    ``forward``; the new one takes its name, and ``recompile`` gives it the code.
    """
    if isinstance(gm, HandedOutGraphModule):
        return
    name = type(gm).__name__
    gm.__class__ = type("GraphModuleImpl", (HandedOutGraphModule,), {"__module__": __name__})
    gm.__class__.__name__ = name
    gm.recompile()
