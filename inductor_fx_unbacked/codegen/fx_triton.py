"""FX conversion of Triton kernels: definitions, calls and compile-time tuning.

Kernel definitions are imported (``load_kernel``) and registered for the
runner (``tuner_for_kernel``); each call becomes a
``triton_kernel_wrapper_mutation`` node whose arguments are matched to the
kernel's signature by name (``reconcile_triton_call_args``). With
``autotune_at_compile_time``, a kernel is tuned unless its sizes depend on
unbacked symbols without a hint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sympy
import torch
from torch._higher_order_ops.triton_kernel_wrap import (
    TraceableTritonKernelWrapper,
    kernel_side_table,
    tracing_triton_hopifier_singleton,
    triton_kernel_wrapper_mutation,
)
from torch._inductor import config, ir
from torch._inductor.codecache import LambdaFuture, PyCodeCache
from torch._inductor.codegen.triton_utils import should_unwrap_unspec_arg
from torch._inductor.codegen.wrapper import KernelCallLine, KernelDefinitionLine, SymbolicCallArg
from torch._inductor.codegen.wrapper_fxir import TritonKernel, replace_floor_div
from torch._inductor.virtualized import V
from torch._library.triton import wrap_triton
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils._ordered_set import OrderedSet

from .. import _compat
from .._compat import HOP_LAUNCH_KWARGS, ensure_kernel_loaded, optimization_hint
from ..caching import KernelSource, record_kernel_source
from . import fx_cpp
from .fx_symbols import _as_sympy

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper_fxir import FxConverter
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

aten = torch.ops.aten
#: The autotune guard's warning keeps the logger it is documented under
#: (docs/reference.md), from before the converter was split into modules.
log = logging.getLogger(f"{__package__}.wrapper_fxir")


@dataclasses.dataclass(frozen=True)
class ReconciledCallArgs:
    """Triton launch arguments, by name.

    ``kernel_kwargs`` are the kernel's own parameters in signature order, config
    kwargs (block sizes) excluded; ``launcher_kwargs`` are Inductor's extra launcher
    arguments, which only the grid reads.
    """

    kernel_kwargs: dict[str, Any]
    launcher_kwargs: dict[str, Any]


def reconcile_triton_call_args(
    signature: Sequence[str],
    constants: Mapping[str, Any],
    call_args: Sequence[Any],
    config_kwargs: Mapping[str, Any],
    extra_launcher_args: Sequence[str] = (),
    constexprs: Collection[str] = (),
) -> ReconciledCallArgs:
    """Match Inductor's positional call args to the kernel signature, by name.

    Inductor passes one value for every parameter that is not a ``tl.constexpr``
    of the kernel (``constexprs``; the config kwargs, such as block sizes, always
    are), in signature order, then the declared extra launcher arguments: for its
    own kernels and for user-written ones alike (it drops a user kernel's
    constexprs from the call, wherever they stand in the signature). A constexpr
    takes its value from the config or from ``constants``; one with neither is
    left to the kernel's own default. Constants from ``triton_meta`` also win
    over a passed value (an equal-to-1 ``xnumel`` is both passed and constant).
    A count of call args that differs from the parameters they stand for means
    the two lists disagree, and fails loudly instead of shifting values onto the
    wrong parameters.
    """
    n_extra = len(extra_launcher_args)
    positional = list(call_args[: len(call_args) - n_extra])
    launcher_values = list(call_args[len(call_args) - n_extra :])
    passed = [name for name in signature if name not in config_kwargs and name not in constexprs]
    assert len(positional) <= len(passed), (
        f"{len(positional)} positional call args for {len(passed)} non-constexpr "
        f"parameters {passed}: value {positional[len(passed)]!r} would land on a "
        f"constexpr or config kwarg of {sorted({*constexprs, *config_kwargs})}"
    )
    missing = [name for name in passed[len(positional) :] if name not in constants]
    assert not missing, f"no call arg or constant for parameters {missing}"
    by_name = dict(zip(passed, positional))
    kernel_kwargs = {}
    for name in signature:
        if name in config_kwargs:
            continue
        if name in constants:
            kernel_kwargs[name] = constants[name]
        elif name in by_name:
            kernel_kwargs[name] = by_name[name]
    return ReconciledCallArgs(
        kernel_kwargs=kernel_kwargs,
        launcher_kwargs=dict(zip(extra_launcher_args, launcher_values)),
    )


def declared_constexprs(fn: Any) -> list[str]:
    """The names of the ``tl.constexpr`` parameters of a Triton kernel function.

    A ``JITFunction`` records them on its parameters; the interpreter's
    ``InterpretedFunction`` does not, so they are read off the annotations of
    the Python function it wraps (what Triton's own parameters do).
    """
    params = getattr(fn, "params", None)
    if params is not None:
        return [param.name for param in params if param.is_constexpr]
    python_fn = getattr(fn, "fn", fn)
    return [
        name
        for name, param in inspect.signature(python_fn).parameters.items()
        if "constexpr" in str(param.annotation)
    ]


def _generate_kernel_definition(self: FxConverter, line: KernelDefinitionLine) -> None:
    """Import a Triton kernel and put it in the side table that kernel nodes index;
    a C++ kernel (``gpu=False``, the CPU part of a graph) goes to ``fx_cpp``."""
    if not line.gpu:
        fx_cpp.define_kernel(self, kernel_source_of(self, line, interpreted=False))
        return
    tuner, wrapped = load_kernel(kernel_source_of(self, line, interpreted=False))
    self.kernels[line.kernel_name] = TritonKernel(tuner, wrapped)


def _generate_kernel_call(self: FxConverter, line: KernelCallLine) -> None:
    """A Triton kernel call (``_generate_triton_call``), or a C++ kernel's (``fx_cpp``)."""
    assert isinstance(line, KernelCallLine), type(line)
    if line.triton:
        self._generate_triton_call(line)
    else:
        fx_cpp.generate_call(self, line)


#: The autotuner behind each kernel this package's converter defined, for runners
#: that launch its precompiled launchers (``inductor_fx_unbacked.runner``), keyed
#: by the identity of the kernel object in the side table. The side table's
#: indices are not identities: ``torch._dynamo.reset()`` empties the table and
#: hands the same indices out again, to whatever kernel comes next.
_tuners: dict[int, tuple[Any, CachingAutotuner]] = {}


def _register_tuner(wrapped: Any, tuner: CachingAutotuner) -> None:
    """Remember ``tuner`` for the kernel object that ``wrapped`` put in the side table."""
    kernel = kernel_side_table.get_kernel(wrapped.kernel_idx)
    with kernel_side_table.lock:
        # Entries whose kernel left the side table (a Dynamo reset) go now.
        live = {id(k) for k in kernel_side_table.id_to_kernel.values()}
        for key in [key for key in _tuners if key not in live]:
            del _tuners[key]
        _tuners[id(kernel)] = (kernel, tuner)


def tuner_for_kernel(kernel_idx: int) -> CachingAutotuner | None:
    """The autotuner of the kernel at ``kernel_idx``, if this package's converter
    defined that very kernel object; None for any other kernel."""
    kernel = kernel_side_table.id_to_kernel.get(kernel_idx)
    entry = _tuners.get(id(kernel)) if kernel is not None else None
    if entry is None or entry[0] is not kernel:
        return None
    return entry[1]


def kernel_source_of(
    self: FxConverter, line: KernelDefinitionLine, *, interpreted: bool
) -> KernelSource:
    """The module code that defines the kernel of a ``KernelDefinitionLine``."""
    assert isinstance(line, KernelDefinitionLine), type(line)
    code = _compat.format_kernel_definition(
        line.kernel_name, line.kernel_body, metadata=line.metadata
    )
    return KernelSource("\n".join([self.prologue, code]), line.kernel_name, interpreted)


def load_kernel(source: KernelSource) -> tuple[CachingAutotuner, Any]:
    """Import a kernel's autotuner, with its kernel loaded, and give it a side-table index.

    Used by FX conversion and by loading a stored FX artifact
    (``inductor_fx_unbacked.caching``), so that both see the same kernel. In the
    CPU mode the kernel is interpreted: it has no compile result to read its
    config from, so it gets one holding the first config (the one the
    interpreter runs), and its ``InterpretedFunction`` is wrapped for the table
    as it is.
    """
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    module = PyCodeCache.load(source.module_code)
    tuner = getattr(module, source.kernel_name)
    if isinstance(tuner, LambdaFuture):
        tuner = tuner.result()
    if not isinstance(tuner, CachingAutotuner):
        raise NotImplementedError(
            f"FX conversion supports Triton kernels only; kernel {source.kernel_name} is a "
            f"{type(tuner).__module__}.{type(tuner).__qualname__}"
        )
    ensure_kernel_loaded(tuner)
    if source.interpreted:
        from ..interpreter import InterpretedCompileResult

        if not tuner.compile_results:
            tuner.compile_results = [InterpretedCompileResult(tuner.configs[0])]
        # wrap_triton hands an InterpretedFunction back unwrapped (torch 2.13) or
        # refuses it (torch 2.11); the kernel table takes it as it is.
        wrapped = TraceableTritonKernelWrapper(tuner.fn, None, None)
    else:
        wrapped = wrap_triton(tuner.fn)
    _register_tuner(wrapped, tuner)
    record_kernel_source(
        wrapped.kernel_idx, kernel_side_table.get_kernel(wrapped.kernel_idx), source
    )
    return tuner, wrapped


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
    # Tuning prunes the compile results to the winner, so this is the config
    # that runs in every case.
    kernel_config = _compat.compile_results(tuner)[0].config

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
    # Backend options (torch 2.14+) travel with the node, so that running the
    # graph compiles the kernel with the options it was tuned with.
    backend_options = tuner.triton_meta.get("backend_options", {}) if HOP_LAUNCH_KWARGS else {}
    for name, value in backend_options.items():
        call_kwargs.setdefault(name, value)
    call_kwargs, constant_args_idx = tracing_triton_hopifier_singleton.store_non_graphable_args(
        call_kwargs
    )
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
