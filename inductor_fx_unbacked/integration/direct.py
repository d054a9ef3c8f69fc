"""``ifx.compile``: an ahead-of-time artifact for inference, called directly.

``torch.compile``'s entry path (Dynamo's frame evaluation and guards,
AOTAutograd's runtime wrappers) costs tens of microseconds per call, more than
the fused work of a small data-dependent program. :func:`compile` traces once
(Dynamo, ``fullgraph=True``), compiles with ``fx_backend``, and keeps the FX
graph and what it takes to call it (``compiled.py``): where each graph input is
read from (an argument, or the module's state), the trace's shape guards, where
each leaf of the result comes from (``direct_sources.py``), and the graph's runner.

The contract: one graph (anything else raises :class:`CompileError` naming why);
inference (no gradients, whatever the parameters say); a module's parameters and
buffers, and tensors a function closes over, are read at call time, other
attributes are fixed at compile time; inputs are pytrees of tensors and Python
scalars, outputs pytrees of anything eager returns (a result that is an argument,
a closed-over tensor or a constant is that, as eager's); ``dynamic=False`` refuses
an input of a new size, ``dynamic=True`` runs any size, 0 and 1 included; a
program that updates an input in place or returns a view of one is refused before
it runs, so that a refusal changes nothing of the caller's.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import linecache
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
from torch.utils import _pytree as pytree

from . import direct_sources as sources
from . import self_check
from .backend import default_device, device_type, fx_backend
from .compiled import SCALAR_TYPES, CompiledArtifact, CompileError
from .direct_breaks import CompiledWithBreaks, compile_with_breaks
from .logs import log
from .recording import recording_graphs


def compile(  # noqa: A001 - the package's public name, as torch.compile
    fn: Callable[..., Any],
    *example_inputs: Any,
    dynamic: bool = False,
    cuda_graphs: bool = False,
    device: str | None = None,
    fullgraph: bool = True,
) -> CompiledArtifact | CompiledWithBreaks:
    """Compile ``fn`` (a function or a module) for inference on ``example_inputs``
    with the FX backend, and return an artifact that is called directly.

    ``dynamic`` compiles sizes symbolically, 0 and 1 included (else an input of
    another size is refused); ``cuda_graphs`` replays the stretches between host
    syncs as CUDA graphs. Data-dependent sizes never seen at compile time run
    without a compile. Raises :class:`CompileError`, naming why, for a program it
    cannot make into one graph; the caller's tensors are left as they were.
    ``fullgraph=False`` takes a program that Dynamo breaks into several graphs too:
    its artifact calls them through Dynamo's glue (``direct_breaks.py``), and
    cannot be saved; a program of one graph gets the one-graph artifact still.
    """
    if not callable(fn):
        raise TypeError(f"ifx.compile needs a function or a module, not {fn!r}")
    paths, in_spec = pytree.tree_flatten_with_path(example_inputs)
    names = [f"args{pytree.keystr(path)}" for path, _ in paths]
    leaves = [leaf for _, leaf in paths]
    for name, leaf in zip(names, leaves):
        _check_example(name, leaf)
    device = device_type(device or _device_of(leaves) or default_device())
    try:
        capture, graphs, namespace, traced = _traced(fn, in_spec, names, leaves, device, dynamic)
        fixed = _fixed_sizes(capture) if dynamic else {}
        if fixed:
            # Sizes the trace guarded equal to the example's (0 or 1) stay symbols, which
            # Inductor fuses less well (an attention's softmax over a batch of 1: a
            # reduction and a pointwise kernel, not one kernel); static, they take the
            # same inputs, the guard now a static size's.
            log.info("ifx.compile: the trace fixed sizes %s; tracing again with them static", fixed)
            capture, graphs, namespace, traced = _traced(
                fn, in_spec, names, leaves, device, dynamic, static=fixed
            )
    except _GraphBreak:
        if fullgraph:
            raise
        log.info("ifx.compile: Dynamo breaks the program; compiling its graphs with the glue")
        return compile_with_breaks(
            fn,
            lambda: _flat_function(fn, in_spec)[0],
            names,
            in_spec,
            leaves,
            device,
            dynamic=dynamic,
            cuda_graphs=cuda_graphs,
            example_inputs=example_inputs,
        )
    except _InductorFailed as e:
        if not dynamic:
            raise
        if any(size in (0, 1) for leaf in leaves for size in getattr(leaf, "shape", ())):
            raise CompileError(
                f"{e} (with an example of size 0 or 1: compile with examples of sizes 2 or "
                "more; with dynamic=True the artifact runs sizes 0 and 1)"
            ) from e
        # Some programs Inductor compiles only with sizes 0 and 1 apart (torch 2.10:
        # a torch.cond of slices): the artifact then refuses them, saying so.
        log.info("ifx.compile: sizes 0 and 1 specialised, since with them symbolic %s", e)
        capture, graphs, namespace, traced = _traced(
            fn, in_spec, names, leaves, device, dynamic, size_oblivious=False
        )
    # Eager's result, after the trace: a program refused above never ran.
    with torch.no_grad():
        expected = fn(*example_inputs)
    signature = sources.signature_of(
        capture, names, in_spec, leaves, fn, namespace, traced, expected, dynamic=dynamic
    )
    namespace = sources.namespace_for(signature, namespace)
    artifact = CompiledArtifact(signature, graphs, namespace, cuda_graphs=cuda_graphs)
    self_check.check(
        artifact(*example_inputs),
        expected,
        accumulates=capture.accumulates,
        inputs=leaves,
        in_float32=lambda: self_check.run_in_float32(fn, example_inputs),
        in_float64=lambda: self_check.run_in_float64(fn, example_inputs),
    )
    return artifact


def _traced(
    fn: Callable[..., Any],
    in_spec: pytree.TreeSpec,
    names: list[str],
    leaves: list[Any],
    device: str,
    dynamic: bool,
    *,
    size_oblivious: bool = True,
    static: dict[int, list[int]] | None = None,
) -> tuple[_Capture, list[torch.fx.GraphModule], dict[str, Any], tuple[Any, ...]]:
    """Trace and compile ``fn`` once, running it on the example (the dimensions of
    ``static``, by leaf, marked static for the trace): what the backend kept, the FX
    graphs, the namespace the state is read from, the result's leaves."""
    static = static or {}
    flat_fn, namespace = _flat_function(fn, in_spec)
    capture = _Capture(names)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        stack.enter_context(fx_backend(device))
        stack.enter_context(
            torch._dynamo.config.patch(
                capture_scalar_outputs=True,
                capture_dynamic_output_shape_ops=True,
                suppress_errors=False,
            )
        )
        if dynamic and size_oblivious:
            # Sizes 0 and 1 stay symbolic: no guard refuses them later.
            stack.enter_context(torch.fx.experimental._config.patch(backed_size_oblivious=True))
        graphs = stack.enter_context(recording_graphs())
        compiled = torch.compile(flat_fn, backend=capture, fullgraph=True, dynamic=dynamic)
        marked = [
            _static_alias(leaf, static[i]) if i in static else leaf for i, leaf in enumerate(leaves)
        ]
        traced = _trace(compiled, marked)
    # A leaf of the result that is an argument is the caller's tensor, not its alias.
    caller = {id(alias): leaf for alias, leaf in zip(marked, leaves) if alias is not leaf}
    traced = tuple(caller.get(id(value), value) for value in traced)
    return capture, graphs, namespace, traced


def _fixed_sizes(capture: _Capture) -> dict[int, list[int]]:
    """The dimensions of whole tensor arguments, by leaf, whose sizes the trace kept
    as symbols yet guarded equal to a constant (``backed_size_oblivious`` does so
    for the example's 0 and 1 where the program needs that size)."""
    import sympy

    shape_env = capture.shape_env
    if shape_env is None:
        return {}
    constants = set()
    for guard in shape_env.guards:
        expr = guard.expr
        if isinstance(expr, sympy.Eq):
            for side, other in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
                if isinstance(side, sympy.Symbol) and other.is_Integer:
                    constants.add(side)
    fixed: dict[int, list[int]] = {}
    for (_, name), example in zip(capture.sources, capture.examples):
        index = sources.leaf_index(name)
        if index is not None and isinstance(example, torch.Tensor):
            dims = [
                dim
                for dim, size in enumerate(example.shape)
                if isinstance(size, torch.SymInt) and size.node.expr in constants
            ]
            if dims:
                fixed[index] = dims
    return fixed


def _static_alias(leaf: torch.Tensor, dims: list[int]) -> torch.Tensor:
    """An alias of the caller's tensor with ``dims`` marked static for Dynamo (the
    mark stays on the alias)."""
    alias = leaf.detach()
    torch._dynamo.mark_static(alias, dims)
    return alias


class _InductorFailed(CompileError):
    """Inductor could not compile the traced program (not a refusal of the contract)."""


class _GraphBreak(CompileError):
    """Dynamo cannot make one graph of the program (``fullgraph=False`` takes it)."""


def _trace(compiled: Callable[..., Any], leaves: list[Any]) -> tuple[Any, ...]:
    """Dynamo's trace and the compile, run once on the example: its result's leaves.
    Whatever keeps the program from being one graph raises :class:`CompileError`."""
    try:
        return compiled(*leaves)
    except torch._dynamo.exc.BackendCompilerFailed as e:
        inner = e.inner_exception
        if isinstance(inner, CompileError):
            raise CompileError(str(inner)) from None
        raise _InductorFailed(
            f"Inductor cannot compile this program: {type(inner).__name__}: {_first_line(inner)}"
        ) from e
    except (
        torch._dynamo.exc.Unsupported,
        torch._dynamo.exc.UserError,
        GuardOnDataDependentSymNode,
    ) as e:
        if "data-dependent" in str(e):
            raise _GraphBreak(
                f"Dynamo cannot make one graph of this program: {_reason(e)}. A Python "
                "branch on a value read from a tensor (`if t.item() > 3:`) cannot be compiled "
                "into one graph: compute both sides and select with torch.where, or use "
                "torch.cond; or compile it with fullgraph=False (an artifact that keeps "
                "Dynamo's glue between the graphs, not saved)"
            ) from e
        raise _GraphBreak(
            "ifx.compile makes one graph, and Dynamo broke this program: "
            f"{_first_line(e)}; compile it with fullgraph=False (an artifact that keeps "
            "Dynamo's glue between the graphs, not saved), or with torch.compile"
        ) from e
    except torch._dynamo.exc.TorchDynamoException as e:
        raise CompileError(
            f"Dynamo cannot trace this program: {type(e).__name__}: {_first_line(e)}"
        ) from e


def _reason(error: BaseException) -> str:
    """The line of Dynamo's message that says what it could not decide."""
    lines = str(error).strip().splitlines()
    found = [line.strip() for line in lines if "data-dependent" in line]
    return found[0] if found else _first_line(error)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _check_example(name: str, leaf: Any) -> None:
    if isinstance(leaf, torch.Tensor):
        if leaf.requires_grad:
            raise CompileError(
                f"ifx.compile is for inference, and {name} requires grad: pass "
                f"{name}.detach(), or compile training with torch.compile inside ifx.fx_backend"
            )
        if type(leaf) is not torch.Tensor:
            kind = type(leaf).__name__
            raise CompileError(f"{name} is a {kind}; ifx.compile takes plain tensors")
    elif type(leaf).__name__ not in SCALAR_TYPES:
        raise CompileError(
            f"{name} is a {type(leaf).__name__}; inputs are pytrees of tensors, ints, floats "
            "and bools"
        )


def _device_of(leaves: Sequence[Any]) -> str | None:
    kinds = {leaf.device.type for leaf in leaves if isinstance(leaf, torch.Tensor)}
    return "cuda" if "cuda" in kinds else next(iter(kinds), None)


def _flat_function(
    fn: Callable[..., Any], in_spec: pytree.TreeSpec
) -> tuple[Callable[..., Any], dict[str, Any]]:
    """``fn`` over the inputs' leaves, returning its result's leaves, and its globals
    (``fn``; Dynamo installs there the modules whose globals ``fn`` reads).

    The arguments are built by code written for ``in_spec`` (``(leaf0, {'a':
    leaf1})``), not by ``tree_unflatten``, whose reads of the spec Dynamo would
    trace (and, with ``dynamic=True``, guard on); and each call makes a function
    of its own, which Dynamo compiles afresh.
    """
    namespace: dict[str, Any] = {"fn": fn, "tree_leaves": pytree.tree_leaves}
    parameters = ", ".join(f"leaf{i}" for i in range(in_spec.num_leaves))
    arguments = _structure(pytree.tree_unflatten(list(range(in_spec.num_leaves)), in_spec))
    source = f"def flat_fn({parameters}):\n    return tuple(tree_leaves(fn(*{arguments})))\n"
    # A file name of its own, its source in linecache: Dynamo traces a function whose
    # source it finds in its own frame (torch 2.10 wraps one without, in a frame
    # whose code every such compile shares, and hits its recompile limit).
    filename = f"<ifx.compile of {getattr(fn, '__name__', type(fn).__name__)} #{next(_COUNT)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(builtins.compile(source, filename, "exec"), namespace)  # noqa: S102 - written above
    return namespace.pop("flat_fn"), namespace


_COUNT = itertools.count()


def _structure(value: Any) -> str:
    """Python for a pytree whose leaves are the indices of the parameters ``leaf<i>``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"leaf{value}"
    if value is None:
        return "None"
    if type(value) is tuple:
        return "(" + "".join(_structure(v) + ", " for v in value) + ")"
    if isinstance(value, list):
        return "[" + ", ".join(_structure(v) for v in value) + "]"
    if isinstance(value, dict) and all(isinstance(k, (str, int)) for k in value):
        return "{" + ", ".join(f"{k!r}: {_structure(v)}" for k, v in value.items()) + "}"
    raise CompileError(
        f"ifx.compile takes arguments in tuples, lists and dicts (outputs in any pytree), not "
        f"a {type(value).__name__}"
    )


class _Capture:
    """The Dynamo backend of :func:`compile`: Inductor with the FX wrapper, keeping
    where Dynamo's graph reads each input from, its fake values and shape
    environment, whether it accumulates (reductions, scans, products of matrices),
    and what the compiled graph returned on its first call.

    A program that updates an input or returns a view of one is refused here,
    before Dynamo runs the graph on the caller's tensors. A program of no
    operation (``lambda x: x``) never comes here: it keeps the defaults."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.sources: list[tuple[str, str]] = []
        self.examples: list[Any] = []
        self.shape_env: Any = None
        self.accumulates = False
        self.graph_outputs: list[Any] | None = None
        #: The sources of the globals and program attributes whose values the trace fixed.
        self.fixed_values: list[str] = []

    def __call__(self, gm: torch.fx.GraphModule, examples: list[Any]) -> Callable[..., Any]:
        from torch._functorch import config as functorch_config
        from torch._guards import TracingContext
        from torch._inductor.compile_fx import compile_fx

        placeholders = gm.graph.find_nodes(op="placeholder")
        self.sources = [(node.name, _source_name(node)) for node in placeholders]
        # The fake values, with the trace's symbolic sizes (the examples are real).
        self.examples = [node.meta.get("example_value") for node in placeholders]
        self.accumulates = self_check.accumulates(gm)
        # AOTAutograd's cache would serve the program without its metadata.
        with functorch_config.patch(enable_autograd_cache=False):
            compiled = compile_fx(gm, examples)
        context = TracingContext.try_get()
        sources.check_no_aliasing(
            getattr(context, "fw_metadata", None), [name for _, name in self.sources], self.names
        )
        self.shape_env = context.fake_mode.shape_env if context is not None else None
        self.fixed_values = _fixed_values(context)

        def first_call(*args: Any) -> Any:
            outputs = compiled(*args)
            if self.graph_outputs is None:
                self.graph_outputs = list(outputs)
            return outputs

        return first_call


def _fixed_values(context: Any) -> list[str]:
    """The globals and attributes of the program (``G[...]``) whose values Dynamo fixed in
    the trace: its ``CONSTANT_MATCH`` and ``EQUALS_MATCH`` guards on them (and
    ``SEQUENCE_LENGTH``, as ``len(...)``), on which a compiled function would
    recompile, and which a direct call checks instead."""
    guards = getattr(getattr(context, "guards_context", None), "dynamo_guards", None)
    names = set()
    for guard in guards or ():
        name, kind = guard.name, guard.create_fn_name()
        # ``tree_leaves`` is the direct call's own helper (``_flat_function``).
        if not name.startswith("G['") or name.startswith("G['tree_leaves']"):
            continue
        if kind in ("CONSTANT_MATCH", "EQUALS_MATCH"):
            names.add(name)
        elif kind == "SEQUENCE_LENGTH":
            names.add(f"len({name})")
    return sorted(names)


def _source_name(node: torch.fx.Node) -> str:
    """The expression Dynamo reads a graph input from (``L['leaf0'].size()[0]``)."""
    source = getattr(node.meta.get("grapharg"), "source", None)
    if source is None:
        raise CompileError(f"Dynamo's graph input {node.name} has no source")
    return source.name() if callable(source.name) else source.name
