"""FX conversion of Triton kernels: definitions, calls and compile-time tuning.

Kernel definitions are imported (``load_kernel``) and placed in the kernel side
table under an index named by their source (``codegen/kernels.py``); each call becomes a
``triton_kernel_wrapper_mutation`` node whose arguments are matched to the
kernel's signature by name (``reconcile_triton_call_args``). With
``autotune_at_compile_time``, a kernel is tuned unless its sizes depend on
unbacked symbols without a hint.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
import functools
import logging
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import sympy
import torch
from torch._higher_order_ops.triton_kernel_wrap import (
    TraceableTritonKernelWrapper,
    triton_kernel_wrapper_mutation,
)
from torch._inductor import config, ir
from torch._inductor.codecache import CodeCacheFuture, PyCodeCache
from torch._inductor.codegen.triton_utils import should_unwrap_unspec_arg
from torch._inductor.codegen.wrapper import KernelCallLine, KernelDefinitionLine, SymbolicCallArg
from torch._inductor.codegen.wrapper_fxir import TritonKernel, replace_floor_div
from torch._inductor.virtualized import V
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils._ordered_set import OrderedSet

from .. import _compat
from .._compat import HOP_LAUNCH_KWARGS, ensure_kernel_loaded, optimization_hint
from . import fx_cpp
from .fx_symbols import _as_sympy
from .kernels import (
    ConvertedTritonKernel,
    KernelSource,
    converted_kernels,
    place_constant_args,
    place_kernel,
    stable_constant_args_idx,
    stable_kernel_idx,
)
from .triton_args import declared_constexprs, reconcile_triton_call_args

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper_fxir import FxConverter
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

aten = torch.ops.aten
#: The autotune guard warns under the logger that docs/reference.md names.
log = logging.getLogger(f"{__package__}.wrapper_fxir")


def _generate_kernel_definition(self: FxConverter, line: KernelDefinitionLine) -> None:
    """Import a Triton kernel and put it in the side table under its stable index; a
    C++ kernel (``gpu=False``, the CPU part of a graph) goes to ``fx_cpp``."""
    if not line.gpu:
        fx_cpp.define_kernel(self, kernel_source_of(self, line, interpreted=False))
        return
    define_triton_kernel(self, line, interpreted=False)


def define_triton_kernel(
    self: FxConverter, line: KernelDefinitionLine, *, interpreted: bool
) -> None:
    """Import the kernel of ``line``, give it its stable side-table index and record it
    on the converter (``self.kernels`` for the calls, ``converted_kernels`` for the graph)."""
    source = kernel_source_of(self, line, interpreted=interpreted)
    tuner, kernel = load_kernel(source)
    kernel_idx = stable_kernel_idx(source)
    place_kernel(kernel_idx, kernel)
    converted_kernels(self).triton[kernel_idx] = ConvertedTritonKernel(source, tuner, kernel)
    wrapped = TraceableTritonKernelWrapper(kernel, kernel_idx, None)
    self.kernels[line.kernel_name] = TritonKernel(tuner, wrapped)


def _generate_kernel_call(self: FxConverter, line: KernelCallLine) -> None:
    """A Triton kernel call (``_generate_triton_call``), or a C++ kernel's (``fx_cpp``)."""
    assert isinstance(line, KernelCallLine), type(line)
    if line.triton:
        self._generate_triton_call(line)
    else:
        fx_cpp.generate_call(self, line)


def kernel_source_of(
    self: FxConverter, line: KernelDefinitionLine, *, interpreted: bool
) -> KernelSource:
    """The module code that defines the kernel of a ``KernelDefinitionLine``."""
    assert isinstance(line, KernelDefinitionLine), type(line)
    code = _compat.format_kernel_definition(
        line.kernel_name, line.kernel_body, metadata=line.metadata
    )
    return KernelSource("\n".join([self.prologue, code]), line.kernel_name, interpreted)


@dataclasses.dataclass(frozen=True)
class InterpretedCompileResult:
    """The compile result of a kernel run by Triton's interpreter: only its config,
    the first (the one the interpreter runs), is known."""

    config: Any


def load_kernel(source: KernelSource) -> tuple[CachingAutotuner, Any]:
    """Import a kernel's autotuner from its source, with its kernel loaded; return it
    and the kernel object for the side table.

    Used by FX conversion and by loading a stored FX artifact, so that both see
    the same kernel. In the CPU mode the kernel is interpreted: it gets a compile
    result holding its first config, which graphs and runners read.

    The side table gets a twin of the autotuner's ``JITFunction`` with a JIT
    cache of its own: launches through the kernel node (``gm.forward``) fill that
    cache with compiled kernels, which must not reach the autotuner Inductor
    stores in its caches (they do not pickle).
    """
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    module = PyCodeCache.load(source.module_code)
    tuner = getattr(module, source.kernel_name)
    # With Inductor's compile workers warm, a kernel is a future: a compile in a
    # worker (``LambdaFuture``), or a statically launchable autotuner that an
    # earlier cache hit of this process left (``StaticAutotunerFuture``).
    if isinstance(tuner, CodeCacheFuture):
        tuner = tuner.result()
    if not isinstance(tuner, CachingAutotuner):
        raise NotImplementedError(
            f"FX conversion supports Triton kernels only; kernel {source.kernel_name} is a "
            f"{type(tuner).__module__}.{type(tuner).__qualname__}"
        )
    ensure_kernel_loaded(tuner)
    if source.interpreted and not tuner.compile_results:
        tuner.compile_results = [InterpretedCompileResult(tuner.configs[0])]
    return tuner, _jit_twin(tuner.fn)


#: The side table's twin of each kernel function.
_twins: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _jit_twin(fn: Any) -> Any:
    """A copy of a ``JITFunction`` whose JIT cache is its own (the function itself
    for an interpreted kernel, which has none)."""
    binder = getattr(fn, "create_binder", None)
    if not hasattr(fn, "device_caches") or binder is None:
        return fn
    twin = _twins.get(fn)
    if twin is None:
        twin = copy.copy(fn)
        twin.device_caches = collections.defaultdict(twin.create_binder)
        _twins[fn] = twin
    return twin


def _generate_triton_call(self: FxConverter, line: KernelCallLine) -> None:
    """Convert a Triton kernel call into a ``triton_kernel_wrapper_mutation`` node."""
    assert isinstance(line, KernelCallLine), type(line)
    kernel = self.kernels[line.kernel_name]
    tuner = kernel.tuner
    raw_args = getattr(line, "raw_args", None)
    if raw_args is None or len(raw_args) != len(line.call_args):
        raw_args = None
    call_args = tuple(
        _lookup_call_arg(self, arg, raw_args[i] if raw_args else None)
        for i, arg in enumerate(line.call_args)
    )

    if config.triton.autotune_at_compile_time:
        _autotune_unless_unhinted(tuner, line.call_args, call_args)
    # The config the autotuner runs (the winner, if tuning ran), so that the
    # node's block sizes and grid and the runner's launcher agree.
    kernel_config = _compat.chosen_config(tuner)

    reconciled = reconcile_triton_call_args(
        signature=list(tuner.triton_meta["signature"]),
        constants=tuner.triton_meta.get("constants", {}),
        call_args=call_args,
        config_kwargs=kernel_config.kwargs,
        extra_launcher_args=tuner.inductor_meta.get("extra_launcher_args", ()),
        constexprs=declared_constexprs(tuner.fn),
    )
    grid = _compat.eval_grid(
        tuner.inductor_meta,
        kernel_config,
        reconciled.kernel_kwargs | reconciled.launcher_kwargs | kernel_config.kwargs,
    )
    grid = [replace_floor_div(x) if isinstance(x, sympy.Expr) else x for x in grid]
    call_kwargs = {
        name: _kernel_arg(self, value)
        for name, value in (reconciled.kernel_kwargs | kernel_config.kwargs).items()
    }
    # Backend options (where the HOP takes them) travel with the node, so that running the
    # graph compiles the kernel with the options it was tuned with.
    backend_options = tuner.triton_meta.get("backend_options", {}) if HOP_LAUNCH_KWARGS else {}
    for name, value in backend_options.items():
        call_kwargs.setdefault(name, value)
    call_kwargs, constant_args_idx = _store_constant_args(self, call_kwargs)
    hop_kwargs = {
        "kernel_idx": kernel.wrapped.kernel_idx,
        "constant_args_idx": constant_args_idx,
        "grid": [tuple(self._generate_sym_nodes(grid))],
        "tma_descriptor_metadata": {},
        "kwargs": call_kwargs,
    }
    if backend_options:
        hop_kwargs["launch_kwargs"] = tuple(backend_options)
    node = self.gm.graph.call_function(triton_kernel_wrapper_mutation, kwargs=hop_kwargs)
    if extra_options := getattr(kernel_config, "extra_options", None):
        node.meta["extra_options"] = extra_options


def _store_constant_args(self: FxConverter, call_kwargs: dict[str, Any]) -> tuple[dict, int]:
    """Split off the arguments that a node cannot hold (upstream's rule in
    ``store_non_graphable_args``: anything but FX's base types and nodes), and store
    them in the side table under an index named by their values."""
    graphable_types = (*torch.fx.node.base_types, torch.fx.Node)
    graphable = {k: v for k, v in call_kwargs.items() if isinstance(v, graphable_types)}
    constant_args = {k: v for k, v in call_kwargs.items() if k not in graphable}
    constant_args_idx = stable_constant_args_idx(constant_args)
    place_constant_args(constant_args_idx, constant_args)
    converted_kernels(self).constant_args[constant_args_idx] = constant_args
    return graphable, constant_args_idx


def _kernel_arg(self: FxConverter, value: Any) -> Any:
    """A kernel argument as the node takes it: sizes and nodes through the converter;
    values that are no size (a user kernel's float scale, ``None``, a string) as
    they are."""
    if isinstance(value, (float, str)) or value is None:
        return value
    return self._generate_sym_node(value)


def _lookup_call_arg(self: FxConverter, arg: Any, raw_arg: Any) -> Any:
    """Map one wrapper call arg to an FX node or a sympy expression.

    A name that no buffer has (a ``reinterpret_tensor(...)`` view) is converted
    from its IR node. A 0-d tensor that Dynamo made from a Python scalar is passed
    by value, as the Python wrapper does with ``.item()``: the kernel's parameter
    is a scalar.
    """
    if isinstance(arg, SymbolicCallArg):
        return arg.inner_expr
    if not isinstance(arg, str):
        return arg
    if arg not in self.buffer_to_node and isinstance(raw_arg, ir.IRNode):
        return self._generate_buffer(raw_arg)
    node = self.buffer_to_node[arg]
    if should_unwrap_unspec_arg(arg):
        with _allowing_scalar_outputs():
            return self.gm.graph.call_function(aten.item.default, (node,))
    return node


@contextlib.contextmanager
def _allowing_scalar_outputs() -> Iterator[None]:
    """Let ``meta["val"]`` of an ``aten.item`` node be a fresh unbacked symbol.

    Inductor also unwraps 0-d CPU tensors that no Python scalar made, such as the
    tangent of a scalar loss in a backward graph on CPU; their fake mode may not
    allow scalar outputs, and the fake ``item`` then raises
    ``DataDependentOutputException``. The value only describes the node
    (``generate`` ignores the fresh symbol), so the check is lifted for it.
    """
    fake_mode = V.fake_mode
    previous = fake_mode.allow_scalar_outputs
    fake_mode.allow_scalar_outputs = True
    try:
        yield
    finally:
        fake_mode.allow_scalar_outputs = previous


def _autotune_unless_unhinted(
    tuner: CachingAutotuner, wrapper_args: Sequence[Any], call_args: Sequence[Any]
) -> None:
    """Tune the kernel on real tensors, unless its sizes depend on unhinted symbols.

    An unbacked symbol without a user hint has no meaningful size to tune on, so
    the kernel keeps its first config and one warning names it and the symbols.
    """
    kernel_name = tuner.fn.__name__
    unhinted = _unhinted_unbacked_symbols(wrapper_args, call_args)
    if unhinted:
        log.warning(
            "Not autotuning Triton kernel %s at compile time: its arguments depend "
            "on unbacked symbols without a hint (%s). It runs with its first config.",
            kernel_name,
            ", ".join(sorted(map(str, unhinted))),
        )
        return
    from triton.runtime import driver

    log.info("Autotuning Triton kernel %s at compile time.", kernel_name)
    device = driver.active.get_current_device()
    stream = driver.active.get_current_stream(device)
    tuner.run(*[_tuning_value(arg) for arg in call_args], stream=stream)


def _tuning_value(arg: Any) -> Any:
    hint = functools.partial(optimization_hint, V.graph.sizevars)
    if not isinstance(arg, torch.fx.Node):
        return hint(arg)
    fake = arg.meta["val"]
    if not isinstance(fake, torch.Tensor):
        return hint(_as_sympy(fake))
    return torch.empty_strided(
        [hint(_as_sympy(s)) for s in fake.shape],
        [hint(_as_sympy(s)) for s in fake.stride()],
        dtype=fake.dtype,
        device=fake.device,
    ).zero_()


def _unhinted_unbacked_symbols(
    wrapper_args: Sequence[Any], call_args: Sequence[Any]
) -> OrderedSet[sympy.Symbol]:
    """The unbacked symbols without a user hint in the kernel's sizes and strides.

    Tensor arguments are read from Inductor's own buffers, so that the symbols
    named are Inductor's (``u0``), not the fresh ones that re-running ops on fake
    tensors creates for ``meta["val"]``.
    """
    exprs: list[Any] = []
    for wrapper_arg, arg in zip(wrapper_args, call_args):
        buffer = V.graph.try_get_buffer(wrapper_arg) if isinstance(wrapper_arg, str) else None
        if buffer is not None and hasattr(buffer, "get_stride"):
            exprs += [*buffer.get_size(), *buffer.get_stride()]
        elif isinstance(arg, torch.fx.Node):
            fake = arg.meta.get("val")
            if isinstance(fake, torch.Tensor):
                exprs += [*fake.shape, *fake.stride(), fake.storage_offset()]
            else:
                exprs.append(fake)
        else:
            exprs.append(arg)
    exprs = [_as_sympy(e) for e in exprs if isinstance(e, (sympy.Expr, torch.SymInt))]
    hinted = V.graph.sizevars.var_to_hint_override
    return OrderedSet(s for s in free_unbacked_symbols(exprs) if s not in hinted)
