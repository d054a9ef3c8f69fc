"""Run the FX wrapper graph fast: the callable that ``compile_graph`` returns.

The converter's ``GraphModule`` is the contract with downstream compilers, and
it stays exactly as it is. Running it as ``gm.forward`` pays, on every call,
higher-order-operator dispatch for every Triton kernel and every ``cond`` (pytree
flattening, dispatch keys, autograd), launches through Triton's JIT, which
compiles again whenever data-dependent sizes change argument divisibility, and
custom-op dispatch for every check.

:func:`lower` copies the graph once into a second ``GraphModule`` in which each
of those nodes calls what it stands for directly:

- a Triton kernel goes to Inductor's precompiled launchers, the ones the Python
  wrapper calls: its first call is the autotuner's ``run``, which tunes a kernel
  of several configs, later calls the launcher it settled on (``tuning.py``);
  in the CPU mode, where nothing is precompiled, it calls the interpreted kernel;
- ``cond``, ``switch`` and ``while_loop`` are Python control flow over the
  lowered branches;
- checks call the functions they stand for, and only when they fail go through
  the operator, so that the exception and its message are the graph's own;
- a view whose start the graph gives relative to its base is the Python wrapper's
  ``reinterpret_tensor`` (``views.py``).

Grid arithmetic that only a precompiled launcher would have read (it computes
its grid itself, from the same expression) is dropped. The lowered module is
inspectable like any other: ``lowered.code``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

from .. import _compat
from ..codegen import views
from ..codegen.fx_cpp import kernel_function
from . import fused_selections
from .checks import checks_by_operator
from .tuning import Launch, launcher_arg_names

log = logging.getLogger(__name__)
aten = torch.ops.aten
higher_order = torch.ops.higher_order


class Kernels(Protocol):
    """Where lowering finds what a kernel node names: the graph's own kernels
    (``artifact.kernels.OwnedKernels``), or the side table for a graph that this
    package did not hand out."""

    def tuner(self, kernel_idx: int) -> Any: ...
    def kernel(self, kernel_idx: int) -> Any: ...
    def constant_args_of(self, constant_args_idx: int) -> dict[str, Any]: ...


class SideTableKernels:
    """The kernels of a graph that owns none: whatever the side table holds now."""

    def tuner(self, kernel_idx: int) -> Any:
        return None

    def kernel(self, kernel_idx: int) -> Any:
        return kernel_side_table.get_kernel(kernel_idx)

    def constant_args_of(self, constant_args_idx: int) -> dict[str, Any]:
        return kernel_side_table.get_constant_args(constant_args_idx)


def lower(gm: torch.fx.GraphModule, kernels: Kernels | None = None) -> torch.fx.GraphModule:
    """A ``GraphModule`` that computes what ``gm`` computes, with direct calls.

    ``gm`` is not modified. Subgraphs (``cond`` branches, ``while_loop`` bodies)
    are lowered too. Kernel nodes launch what ``kernels`` holds for their index
    (default: the side table, as ``gm.forward`` would). The lowered module reads
    the constants of ``gm`` (its ``get_attr`` targets, e.g. the parameters that
    ``config.freezing`` folds in) as the identical objects.
    """
    kernels = kernels if kernels is not None else SideTableKernels()
    graph = torch.fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    streams: dict[Any, torch.fx.Node] = {}
    fused_selections.fuse(graph, kernels, KernelCall)
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is higher_order.triton_kernel_wrapper_mutation:
            _lower_triton_kernel(graph, node, streams, kernels)
        elif node.target is higher_order.cond:
            predicate, true_fn, false_fn, operands = node.args
            branches = (
                _lowered_subgraph(gm, false_fn, kernels),
                _lowered_subgraph(gm, true_fn, kernels),
            )
            _replace(node, _Branch("cond", branches), (predicate, *operands))
        elif node.target is getattr(higher_order, "switch", None):
            selector, branch_fns, operands = node.args
            branches = tuple(_lowered_subgraph(gm, fn, kernels) for fn in branch_fns)
            _replace(node, _Branch("switch", branches), (selector, *operands))
        elif node.target in _WHILE_LOOPS:
            cond_fn, body_fn, carried, additional = node.args
            loop = _WhileLoop(
                _lowered_subgraph(gm, cond_fn, kernels),
                _lowered_subgraph(gm, body_fn, kernels),
                stack_output=node.target is _WHILE_LOOPS[-1],
            )
            _replace(node, loop, (tuple(carried), tuple(additional)))
        elif node.target in _CHECKS:
            node.target = _CHECKS[node.target]
        elif _is_cpp_kernel(node.target):
            key, buffers, sizes = node.args
            _replace(node, kernel_function(key), (*buffers, *sizes))
        elif node.target is torch.as_strided:
            _lower_view(node)
    _eliminate_dead_code(graph)
    graph.lint()
    # ``gm`` as the root: FX copies over exactly the attributes that the remaining
    # get_attr nodes name (subgraphs are gone, replaced by their lowered copies).
    return torch.fx.GraphModule(gm, graph, class_name="LoweredFxWrapperGraph")


def _is_cpp_kernel(target: Any) -> bool:
    """Whether ``target`` is ``fx_unbacked::cpp_kernel`` (``codegen/fx_cpp.py``)."""
    return isinstance(target, torch._ops.OpOverload) and target.name() == "fx_unbacked::cpp_kernel"


def _replace(node: torch.fx.Node, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    node.target = target
    node.args = args
    node.kwargs = {}


def _lowered_subgraph(
    gm: torch.fx.GraphModule, get_attr: torch.fx.Node, kernels: Kernels
) -> Callable[..., Any]:
    assert get_attr.op == "get_attr", get_attr.format_node()
    return lower(getattr(gm, get_attr.target), kernels).forward


def _eliminate_dead_code(graph: torch.fx.Graph) -> None:
    """Drop the nodes that nothing reads and that have no side effect
    (``views.is_pure``); never a check or a launch."""
    for node in reversed(list(graph.nodes)):
        if not node.users and views.is_pure(node):
            graph.erase_node(node)


def _lower_view(node: torch.fx.Node) -> None:
    """A view whose start the graph gives relative to its base (``views.view_of``) as
    ``reinterpret_tensor``, the Python wrapper's view without argument parsing: the
    same tensor as the graph's ``torch.as_strided``. Any other stays as it is."""
    view = views.view_of(node)
    if view is None or view.offset is None or views.REINTERPRET_TENSOR is None:
        return
    # Sizes and strides as the tuples its argument parser asks for.
    arguments = (view.base, tuple(view.size), tuple(view.stride), view.offset)
    _replace(node, views.REINTERPRET_TENSOR, arguments)


# Triton kernels.


def _lower_triton_kernel(
    graph: torch.fx.Graph, node: torch.fx.Node, streams: dict[Any, torch.fx.Node], kernels: Kernels
) -> None:
    kwargs = dict(node.kwargs)
    call_kwargs = {**kwargs["kwargs"], **kernels.constant_args_of(kwargs["constant_args_idx"])}
    (grid,) = kwargs["grid"]
    tuner = _precompiled_tuner(kwargs, kernels)
    if tuner is None:
        names = list(call_kwargs)
        launch = _InterpretedLaunch(kernels.kernel(kwargs["kernel_idx"]), names)
        _replace(node, launch, (tuple(grid), *(call_kwargs[name] for name in names)))
        _compat.rename_node(node, launch.__name__)
        return
    args = _launcher_args(tuner, call_kwargs, grid)
    current_stream, index = _stream_of(tuner)
    if (current_stream, index) not in streams:
        # Launches run in graph order, so the first one's stream serves the rest.
        with graph.inserting_before(node):
            streams[current_stream, index] = graph.call_function(current_stream, (index,))
    _replace(node, Launch(tuner, tuner.fn.__name__), (streams[current_stream, index], *args))
    _compat.rename_node(node, tuner.fn.__name__)


def _precompiled_tuner(kwargs: dict[str, Any], kernels: Kernels) -> Any:
    """The autotuner whose precompiled launchers launch a kernel node with ``kwargs``;
    None where the node launches through Triton's JIT (``_InterpretedLaunch``)."""
    tuner = kernels.tuner(kwargs["kernel_idx"])
    if (
        tuner is None
        or not _has_precompiled_launchers(tuner)
        or not launcher_args_are_the_grid(tuner.inductor_meta)
        or kwargs["tma_descriptor_metadata"]
        or kwargs.get("launch_kwargs")
    ):
        return None
    return tuner


def _launcher_params(tuner: Any) -> tuple[list[str], list[str]]:
    """The launcher's parameters (every config of a kernel takes the same), and the
    extra launcher arguments among them, which the node's grid gives."""
    extra = list(tuner.inductor_meta.get("extra_launcher_args", ()))
    return launcher_arg_names(_compat.launchers(tuner)[0]), extra


def _launcher_args(tuner: Any, call_kwargs: dict[str, Any], grid: Sequence[Any]) -> tuple[Any, ...]:
    params, extra = _launcher_params(tuner)
    values = {**call_kwargs, **dict(zip(extra, grid))}
    return tuple(values[name] for name in params)


def _stream_of(tuner: Any) -> tuple[Callable[[int], int], int]:
    """The function that gives a device's current stream, and the kernel's device."""
    device = tuner.triton_meta.get("device", 0)
    index = device if isinstance(device, int) else getattr(device, "index", None) or 0
    return tuner.get_device_interface().get_raw_stream, index


class KernelCall:
    """A kernel node's launch with its grid and ``names``' values given at each call
    (its other arguments, constexprs such as ``XBLOCK``, the node's), as lowering
    launches the node itself: through the precompiled launchers where it has them,
    else Triton's JIT. What a fused selection runs where it does not fuse
    (``fused_selections.FusedSelection``): everything a call can do once is done here
    (the launcher's argument order, the stream function), since the call is on the
    host path of small selections, where eager takes tens of µs."""

    __module__ = __name__

    def __init__(self, node: torch.fx.Node, kernels: Kernels, names: Sequence[str]) -> None:
        kwargs = dict(node.kwargs)
        call_kwargs = {**kwargs["kwargs"], **kernels.constant_args_of(kwargs["constant_args_idx"])}
        self.names = tuple(names)
        self.fixed = {k: v for k, v in call_kwargs.items() if k not in self.names}
        if any(isinstance(v, torch.fx.Node) for v in self.fixed.values()):
            raise ValueError(
                f"KernelCall: the node's arguments {list(self.fixed)} are not all given"
            )
        self.tuner = _precompiled_tuner(kwargs, kernels)
        if self.tuner is None:
            self.launch: Any = _InterpretedLaunch(kernels.kernel(kwargs["kernel_idx"]), ())
            return
        self.launch = Launch(self.tuner, self.tuner.fn.__name__)
        self.current_stream, self.index = _stream_of(self.tuner)
        # Where each launcher argument is: a given value's position, or (after them)
        # an extra launcher argument's place in the grid.
        params, extra = _launcher_params(self.tuner)
        places = {n: i for i, n in enumerate((*self.names, *extra))}
        self.order = tuple(places[n] for n in params)

    def __call__(self, grid: tuple[Any, ...], *values: Any) -> None:
        """Launch over ``grid`` with ``values``, in the order of ``names``."""
        if self.tuner is None:
            self.launch.kernel[grid](**dict(zip(self.names, values)), **self.fixed)
            return
        given = (*values, *grid)
        self.launch(self.current_stream(self.index), *(given[i] for i in self.order))


def launcher_args_are_the_grid(inductor_meta: dict[str, Any]) -> bool:
    """Whether the node's grid gives every extra launcher argument of the kernel.

    Inductor's kernels take none (the launcher computes the grid from the sizes);
    a user kernel with one grid takes that grid (``FixedGrid``). An autotuned user
    kernel whose grid depends on the config (``PrecomputedGrid``) takes the sizes
    the grid is computed from, which the node does not keep (it holds the grid of
    the graph's config, already computed): it is launched as ``kernel[grid](...)``
    with the graph's config, as ``gm.forward`` does, and is not tuned.
    """
    extra = list(inductor_meta.get("extra_launcher_args", ()))
    return not extra or inductor_meta.get("fixed_grid") == extra


def _has_precompiled_launchers(tuner: Any) -> bool:
    """Whether the autotuner has launchers of compiled binaries (Triton's interpreter
    compiles nothing). Kernels imported by FX conversion are compiled, but their
    binaries are not loaded until launchers are made, as the Python wrapper's
    ``async_compile.wait`` does: made here, once, for every config.
    """
    results = _compat.compile_results(tuner)
    if not results or not all(hasattr(result, "make_launcher") for result in results):
        return False
    return bool(_compat.launchers(tuner))


class _InterpretedLaunch:
    """Launches a kernel as Triton's own ``kernel[grid](**kwargs)``, with the graph's
    config: for kernels with no precompiled launcher (Triton's interpreter) or
    whose node does not hold the launcher's arguments (TMA descriptors, backend
    options, a grid that depends on the config)."""

    __module__ = __name__

    def __init__(self, kernel: Any, names: Sequence[str]) -> None:
        self.kernel = kernel
        self.names = tuple(names)
        self.__name__ = getattr(kernel, "__name__", None) or getattr(
            getattr(kernel, "fn", None), "__name__", "triton_kernel"
        )

    def __call__(self, grid: tuple[Any, ...], *values: Any) -> None:
        self.kernel[grid](**dict(zip(self.names, values)))


# Control flow.


class _Branch:
    """``cond(pred, true_fn, false_fn, operands)`` or ``switch(index, fns, operands)``
    as a Python branch; for cond, ``branches`` is ``(false, true)``."""

    __module__ = __name__

    def __init__(self, kind: str, branches: tuple[Callable[..., Any], ...]) -> None:
        self.branches = branches
        self.__name__ = kind

    def __call__(self, selector: Any, *operands: Any) -> Any:
        index = bool(selector) if self.__name__ == "cond" else int(selector)
        return self.branches[index](*operands)


class _WhileLoop:
    """``while_loop`` through its own dense implementation, over lowered subgraphs."""

    __module__ = __name__
    __name__ = "while_loop"

    def __init__(
        self, cond_fn: Callable[..., Any], body_fn: Callable[..., Any], stack_output: bool
    ):
        self.cond_fn = cond_fn
        self.body_fn = body_fn
        self.stack_output = stack_output

    def __call__(self, carried: tuple[Any, ...], additional: tuple[Any, ...]) -> Any:
        return _compat.while_loop_dense(
            self.cond_fn, self.body_fn, carried, additional, stack_output=self.stack_output
        )


_WHILE_LOOPS = tuple(
    op
    for op in (
        getattr(higher_order, "while_loop", None),
        getattr(higher_order, "while_loop_stack_output", None),
    )
    if op is not None
)


_CHECKS = checks_by_operator()
