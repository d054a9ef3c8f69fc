"""FX conversion: unbacked-symbol definitions, Triton kernel calls, runtime checks.

Mirrors ``torch/_inductor/codegen/wrapper_fxir.py``. The ``_generate_*``
functions are methods of ``FxConverter`` once the overlay is enabled (see
``inductor_fx_unbacked._overlay``); the rest is plain code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import operator
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

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
from torch._inductor.codegen.wrapper import (
    DynamicScalarLine,
    KernelCallLine,
    KernelDefinitionLine,
    MultiOutputLine,
    SymbolicCallArg,
)
from torch._inductor.codegen.wrapper_fxir import SymbolBuffer, TritonKernel, replace_floor_div
from torch._inductor.utils import GPU_ALIGN_BYTES, convert_to_symint, sympy_product
from torch._inductor.virtualized import V
from torch._library.triton import wrap_triton
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils import _pytree as pytree
from torch.utils._ordered_set import OrderedSet

from .. import _compat
from .. import ops as _ops_module  # noqa: F401  (registers the fx_unbacked:: ops)
from .._compat import (
    HOP_LAUNCH_KWARGS,
    UPSTREAM_CONVERTS_COMPOUND_GRAPH_INPUTS,
    ensure_kernel_loaded,
    optimization_hint,
)
from ..caching import KernelSource, record_kernel_source
from .keypath import INDEXED_METHODS, UnsupportedStep, define_symbol
from .wrapper import (
    AlignmentAssertLine,
    DynamicSelectIndexLine,
    DynamicSliceSizeLine,
    NanCheckLine,
    ScalarAssertLine,
    SizeStrideAssertLine,
    UnbackedSymbolDefsLine,
    WhileLoopLine,
)

if TYPE_CHECKING:
    from torch._inductor.codegen.wrapper_fxir import FxConverter
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

aten = torch.ops.aten
ops = torch.ops.fx_unbacked
log = logging.getLogger(__name__)

#: An upstream converter method that a wrapper below keeps the signature of.
F = TypeVar("F", bound=Callable[..., Any])

#: FX targets of the method calls that a KeyPath can contain, by (method, indexed).
_METHOD_TARGETS = {
    ("size", True): aten.sym_size.int,
    ("stride", True): aten.sym_stride.int,
    ("storage_offset", False): aten.sym_storage_offset.default,
    ("numel", False): aten.sym_numel.default,
    ("item", False): aten.item.default,
}
assert {m for m, indexed in _METHOD_TARGETS if indexed} == set(INDEXED_METHODS)


class FxKeyPathEmitter:
    """Renders each KeyPath step as one FX node in the converter's graph."""

    def __init__(self, converter: FxConverter, symbol: sympy.Symbol) -> None:
        self.converter = converter
        self.graph = converter.gm.graph
        self.symbol = symbol

    def method_call(self, value: torch.fx.Node, method: str, index: int | None) -> torch.fx.Node:
        target = _METHOD_TARGETS.get((method, index is not None))
        if target is None:
            called = f"{method}()" if index is None else f"{method}({index})"
            raise UnsupportedStep(f"no FX operator for the method call .{called}")
        args = (value,) if index is None else (value, index)
        return self.graph.call_function(target, args)

    def sequence_item(self, value: torch.fx.Node, index: int) -> torch.fx.Node:
        return _getitem(self.graph, value, index)

    def floor_divide(self, value: torch.fx.Node, divisor: Any) -> torch.fx.Node:
        divisor_arg = self.converter._generate_sym_node(_as_sympy(divisor))
        if divisor != 1:
            remainder = self.graph.call_function(operator.mod, (value, divisor_arg))
            divisible = self.graph.call_function(operator.eq, (remainder, 0))
            message = f"{self.symbol}: {value.name} is not divisible by {divisor}"
            _add_assert(self.converter, aten._assert_scalar.default, (divisible, message))
        return self.graph.call_function(operator.floordiv, (value, divisor_arg))

    def convert_int(self, value: torch.fx.Node) -> torch.fx.Node:
        return self.graph.call_function(torch.sym_ite, (value, 1, 0))

    def inner_tensor(self, value: torch.fx.Node, attr: str) -> torch.fx.Node:
        return self.graph.call_function(getattr, (value, attr))


def _as_sympy(value: Any) -> Any:
    return value.node.expr if isinstance(value, torch.SymInt) else value


def _generate_unbacked_symbol_defs(self: FxConverter, line: UnbackedSymbolDefsLine) -> None:
    """Define each unbacked symbol of the line with FX nodes and register it.

    Every node that defines a symbol carries ``meta["unbacked_symbol"]``, and the
    symbol is registered so that later allocations, views, grids and kernel
    arguments use that node. A symbol that is already defined is left alone, and
    the root buffer is looked up only when there is something to define.
    """
    assert isinstance(line, UnbackedSymbolDefsLine), type(line)
    for symbol, keypath in line.unbacked_bindings.items():
        if not _is_defined(self, symbol):
            root_node = self.buffer_to_node[line.output_name]
            emitter = FxKeyPathEmitter(self, symbol)
            _register_symbol(self, symbol, define_symbol(symbol, keypath, root_node, emitter))


def _generate_dynamic_scalar(self: FxConverter, line: DynamicScalarLine) -> None:
    """Define the symbol of ``.item()`` (``ir.DynamicScalar``) on the same KeyPath walk.

    The scalar is read with ``aten.item``; the node's KeyPath (empty, a
    ``ConvertIntKey`` for bools, or a ``DivideByKey``) then applies to it.
    """
    assert isinstance(line, DynamicScalarLine), type(line)
    ir_node = line.node
    if _is_defined(self, ir_node.sym):
        return
    (data,) = ir_node.inputs
    scalar = self.gm.graph.call_function(aten.item.default, (self._generate_buffer(data),))
    emitter = FxKeyPathEmitter(self, ir_node.sym)
    node = define_symbol(ir_node.sym, ir_node.keypath, scalar, emitter)
    _register_symbol(self, ir_node.sym, node)


def deduplicating_graph_inputs(generate_inputs: F) -> F:
    """Wrap ``FxConverter._generate_graph_inputs`` so that no placeholder name repeats.

    A subgraph can receive one symbol twice: duck sizing gives equal dims one
    symbol, and each lifted use of it is an input of its own (``torch.cond``
    branches closing over ``y.shape[0]`` and ``z.shape[0]``). Upstream names
    every symbol placeholder after its symbol, so the generated ``forward`` has
    a duplicate argument. A repeat is renamed after its input, and the first
    placeholder stays the symbol's definition. Compound inputs such as
    ``2*s17`` (a backward graph's saved size) are placeholders for their
    expression where upstream has no conversion for them (see
    ``_compat.UPSTREAM_CONVERTS_COMPOUND_GRAPH_INPUTS``). Everything else is
    upstream's.
    """

    @functools.wraps(generate_inputs)
    def _generate_graph_inputs(self: FxConverter) -> None:
        before = {node for node in self.gm.graph.nodes if node.op == "placeholder"}
        compound = {} if UPSTREAM_CONVERTS_COMPOUND_GRAPH_INPUTS else _compound_inputs(self)
        graph_inputs = self.graph_inputs
        if compound:
            # Upstream makes a placeholder named after the input for a constant.
            self.graph_inputs = {
                name: sympy.Integer(0) if name in compound else ir_node
                for name, ir_node in graph_inputs.items()
            }
        try:
            generate_inputs(self)
        finally:
            self.graph_inputs = graph_inputs
        placeholders = [
            node for node in self.gm.graph.nodes if node.op == "placeholder" and node not in before
        ]
        assert len(placeholders) == len(self.graph_inputs), (placeholders, self.graph_inputs)
        first_of: dict[Any, torch.fx.Node] = {}
        for (name, ir_node), placeholder in zip(self.graph_inputs.items(), placeholders):
            first = first_of.setdefault(placeholder.target, placeholder)
            if first is placeholder:
                continue
            placeholder.target = name
            _compat.rename_node(placeholder, name)
            if isinstance(ir_node, sympy.Symbol):
                self.buffer_to_node[str(ir_node)] = first
                self._generate_size_proxy(first, ir_node)
        for placeholder in placeholders:
            expr = compound.get(placeholder.target)
            if expr is not None:
                placeholder.meta["val"] = convert_to_symint(expr)
                self._generate_size_proxy(placeholder, expr)

    return _generate_graph_inputs


def _compound_inputs(self: FxConverter) -> dict[str, sympy.Expr]:
    """The graph inputs that are size expressions other than a symbol or a number."""
    return {
        name: ir_node
        for name, ir_node in self.graph_inputs.items()
        if isinstance(ir_node, sympy.Expr) and not isinstance(ir_node, (sympy.Symbol, sympy.Number))
    }


def _getitem(graph: torch.fx.Graph, value: torch.fx.Node, index: int) -> torch.fx.Node:
    """``value[index]``, reusing the node that reads it if there is one: a symbol
    defined from an output (``u0 = cond[0].size(0)``) and the output itself read
    the same item."""
    for user in value.users:
        if user.target is operator.getitem and user.args == (value, index):
            return user
    return graph.call_function(operator.getitem, (value, index))


def _generate_multi_output(self: FxConverter, line: MultiOutputLine) -> None:
    """One output of a multi-output kernel: a ``getitem`` for every index.

    Upstream applies only the first index, so an output nested in a list (a
    custom op returning ``tuple[Tensor, list[Tensor]]``) became the whole list.
    """
    assert isinstance(line, MultiOutputLine), type(line)
    node = self.buffer_to_node[line.arg_name]
    for _, index in line.indices:
        node = _getitem(self.gm.graph, node, index)
    if line.indices:
        node.name = line.result_name
    self.buffer_to_node[line.result_name] = node


def ignoring_fresh_unbacked_symbols(generate: F) -> F:
    """Wrap ``FxConverter.generate`` so that ``meta["val"]`` creates no pending symbols.

    The converter fills ``meta["val"]`` by running each node's op on fake values;
    an ``aten.item`` or a data-dependent op then allocates a fresh unbacked symbol
    in Inductor's ShapeEnv. Nothing binds it, so the next graph compiled on that
    ShapeEnv (the eagerly compiled backward of a training step) fails with
    ``PendingUnbackedSymbolNotFound``, which AOTAutograd prints as a long warning.
    These values only describe the graph; their symbols are not Inductor's.
    """

    @functools.wraps(generate)
    def method(self: FxConverter) -> torch.fx.GraphModule:
        shape_env = getattr(V.fake_mode, "shape_env", None)
        if shape_env is None:
            return generate(self)
        with shape_env.ignore_fresh_unbacked_symbols():
            return generate(self)

    return method


def materializing_symbolic_args(generate: F) -> F:
    """Wrap a converter method that emits extern kernel or fallback nodes, so that
    symbolic values in their arguments become FX nodes.

    Inductor keeps an extern kernel's non-tensor arguments as they were traced,
    so ``torch.topk(x, k.item())`` carries the symbol ``u0`` itself; upstream puts
    it into the node raw, and the generated code fails with ``NameError: name
    'u0' is not defined``. Every SymInt or sympy expression in the new nodes'
    arguments, positional, keyword or nested in lists, is computed from the
    nodes that define its symbols, right before the node that uses it.
    """

    @functools.wraps(generate)
    def method(self: FxConverter, *args: Any, **kwargs: Any) -> Any:
        graph = self.gm.graph
        root = _compat.graph_root(graph)
        last = root.prev
        with warnings.catch_warnings():
            # FX warns about the raw symbols that the loop below replaces.
            warnings.filterwarnings("ignore", message="Raw SymInt value")
            result = generate(self, *args, **kwargs)
        node = last.next
        while node is not root:
            if node.op == "call_function":
                _materialize_symbolic_args(self, node)
            node = node.next
        return result

    return method


def _materialize_symbolic_args(self: FxConverter, node: torch.fx.Node) -> None:
    def to_node(value: Any) -> Any:
        if isinstance(value, (torch.SymInt, torch.SymBool)):
            value = value.node.expr
        if isinstance(value, sympy.Basic) and value.free_symbols:
            with self.gm.graph.inserting_before(node):
                return self._generate_sym_node(value)
        return value

    if not any(
        isinstance(leaf, (torch.SymInt, torch.SymBool, sympy.Basic))
        for leaf in pytree.tree_leaves((node.args, node.kwargs))
    ):
        return
    node.args = pytree.tree_map(to_node, node.args)
    node.kwargs = pytree.tree_map(to_node, node.kwargs)


def _is_defined(self: FxConverter, symbol: sympy.Symbol) -> bool:
    return symbol in self.expr_to_proxy or str(symbol) in self.buffer_to_node


def _register_symbol(self: FxConverter, symbol: sympy.Symbol, node: torch.fx.Node) -> None:
    """Make ``node`` the definition that later lines use for ``symbol``."""
    node.meta["unbacked_symbol"] = symbol
    self._record_allocation(SymbolBuffer(symbol), node)
    self._generate_size_proxy(node, symbol)


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
    """Import a Triton kernel and put it in the side table that kernel nodes index."""
    tuner, wrapped = load_kernel(kernel_source_of(self, line, interpreted=False))
    self.kernels[line.kernel_name] = TritonKernel(tuner, wrapped)


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
    module = PyCodeCache.load(source.module_code)
    tuner = getattr(module, source.kernel_name)
    if isinstance(tuner, LambdaFuture):
        tuner = tuner.result()
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
    writes these into its prologue, which FX conversion never sees.
    """

    @functools.wraps(generate_shapes)
    def _generate_graph_input_shapes(self: FxConverter) -> None:
        generate_shapes(self)
        if not self.is_subgraph:
            _generate_graph_input_asserts(self)

    return _generate_graph_input_shapes


def _generate_graph_input_asserts(self: FxConverter) -> None:
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
        if config.nan_asserts and _is_floating_tensor(placeholder):
            _assert_all_finite(self, placeholder)


def _generate_outputs(self: FxConverter) -> Any:
    """The graph's outputs; with ``config.nan_asserts``, each float output is checked
    for NaN and Inf first, as the Python wrapper does."""
    outputs = [_generate_output(self, node) for node in self.graph_outputs]
    if config.nan_asserts:
        for output in outputs:
            if isinstance(output, torch.fx.Node) and _is_floating_tensor(output):
                _assert_all_finite(self, output)
    return outputs[0] if len(outputs) == 1 and not self.is_subgraph else outputs


def _generate_output(self: FxConverter, output: ir.IRNode) -> Any:
    """One graph output: a node, None, or the constant the Python wrapper returns.

    A non-tensor output is a ``ShapeAsConstantBuffer`` whose expression is what
    Inductor's lowering left of a ``SymInt``/``SymBool``/``SymFloat``: a Python
    ``int`` or ``bool`` (a size that lowering specialized, e.g. to a weight's
    size), a sympy number or boolean atom, or a symbolic expression. The Python
    wrapper prints the expression, so a constant comes back as a Python constant
    and an expression as the value of its symbols.
    """
    if not isinstance(output, ir.ShapeAsConstantBuffer):
        return self._generate_buffer(output)
    expr = output.expr
    if isinstance(expr, (bool, sympy.logic.boolalg.BooleanAtom)):
        return bool(expr)
    if isinstance(expr, (int, sympy.Integer)):
        return int(expr)
    if isinstance(expr, sympy.Float):
        return float(expr)
    if not isinstance(expr, sympy.Basic):
        raise TypeError(
            f"graph output {output!r}: expected an int, a bool or a sympy expression, "
            f"got {type(expr).__name__}"
        )
    return self._sympy_interp(expr).node


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


# The remaining definitions of unbacked symbols.


def _generate_dynamic_select_index(self: FxConverter, line: DynamicSelectIndexLine) -> None:
    """``u = base_offset + stride * (index + size if index < 0 else index)``."""
    assert isinstance(line, DynamicSelectIndexLine), type(line)
    node = line.node
    if _is_defined(self, node.unbacked_offset_symbol):
        return
    sym = _SymBuilder(self)
    index, size = sym.value(node.index), sym.value(node.size)
    index = sym.ite(sym.call(operator.lt, index, 0), sym.call(operator.add, index, size), index)
    if line.clamp:
        index = sym.max(0, sym.min(size, index))
    offset = sym.call(
        operator.add,
        sym.value(node.base_offset),
        sym.call(operator.mul, sym.value(node.base_dim_stride), index),
    )
    _register_symbol(self, node.unbacked_offset_symbol, offset)


def _generate_dynamic_slice_size(self: FxConverter, line: DynamicSliceSizeLine) -> None:
    """The length of ``x[start:end:step]``, with Python's clamping of the bounds."""
    assert isinstance(line, DynamicSliceSizeLine), type(line)
    node = line.node
    if _is_defined(self, node.unbacked_size_symbol):
        return
    sym = _SymBuilder(self)
    size = sym.value(node.size)

    def clamped(bound: Any) -> Any:
        bound = sym.value(bound)
        positive = sym.max(0, sym.min(bound, size))
        negative = sym.max(0, sym.min(sym.call(operator.add, bound, size), size))
        return sym.ite(sym.call(operator.ge, bound, 0), positive, negative)

    length = sym.call(operator.sub, clamped(node.end), clamped(node.start))
    if node.step != 1:
        step = sym.value(node.step)
        length = sym.call(
            operator.floordiv, sym.call(operator.add, length, sym.call(operator.sub, step, 1)), step
        )
    _register_symbol(self, node.unbacked_size_symbol, sym.node(sym.max(0, length)))


class _SymBuilder:
    """Integer arithmetic on FX nodes and Python ints, one node per operation.

    Operations on constants fold in Python; any other creates a ``call_function``
    node (``operator.*``, ``torch.sym_ite``/``sym_min``/``sym_max``), whose
    ``meta["val"]`` the converter's metadata hook fills in.
    """

    def __init__(self, converter: FxConverter) -> None:
        self.converter = converter
        self.graph = converter.gm.graph

    def value(self, expr: Any) -> Any:
        return self.converter._generate_sym_node(expr)

    def call(self, target: Any, *args: Any) -> Any:
        if not any(isinstance(a, torch.fx.Node) for a in args):
            return target(*args)
        return self.graph.call_function(target, args)

    def ite(self, condition: Any, if_true: Any, if_false: Any) -> Any:
        if not isinstance(condition, torch.fx.Node):
            return if_true if condition else if_false
        return self.graph.call_function(torch.sym_ite, (condition, if_true, if_false))

    def min(self, a: Any, b: Any) -> Any:
        return self.call(torch.sym_min if _any_node(a, b) else min, a, b)

    def max(self, a: Any, b: Any) -> Any:
        return self.call(torch.sym_max if _any_node(a, b) else max, a, b)

    def node(self, value: Any) -> torch.fx.Node:
        """Symbols are defined by nodes, so a constant result still gets one."""
        if isinstance(value, torch.fx.Node):
            return value
        return self.graph.call_function(operator.add, (value, 0))


def _any_node(*args: Any) -> bool:
    return any(isinstance(a, torch.fx.Node) for a in args)


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
