"""``ifx.compile``: an ahead-of-time artifact for inference, called directly.

``torch.compile``'s entry path (Dynamo's frame evaluation and guards,
AOTAutograd's runtime wrappers) costs tens of microseconds per call, more than
the fused work of a small data-dependent program. :func:`compile` traces once
(Dynamo, ``fullgraph=True``), compiles with ``fx_backend``, and keeps the FX
graph and what it takes to call it (``compiled.py``): where each graph input is
read from (an argument, or the module's state), the trace's shape guards, and
the graph's runner.

The contract: one graph (a graph break raises); inference (an input that
requires grad raises); a module's parameters and buffers, and tensors a function
closes over, are read at call time, other attributes are fixed at compile time;
inputs and outputs are pytrees (tuples, lists, dicts, namedtuples) of tensors;
``dynamic=False`` refuses an input of a new size, ``dynamic=True`` runs it; a
program that updates an input in place, or returns an input or a view of one, is
refused at compile time, naming why.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import linecache
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .backend import default_device, device_type, fx_backend
from .compiled import CompiledArtifact, CompileError, Signature, function
from .recording import recording_graphs


def compile(  # noqa: A001 - the package's public name, as torch.compile
    fn: Callable[..., Any],
    *example_inputs: Any,
    dynamic: bool = False,
    cuda_graphs: bool = False,
    device: str | None = None,
) -> CompiledArtifact:
    """Compile ``fn`` (a function or a module) for inference on ``example_inputs``
    with the FX backend, and return an artifact that is called directly.

    ``dynamic`` compiles sizes symbolically (else an input of another size is
    refused); ``cuda_graphs`` replays the stretches between host syncs as CUDA
    graphs. Data-dependent sizes never seen at compile time run without a compile.
    """
    if not callable(fn):
        raise TypeError(f"ifx.compile needs a function or a module, not {fn!r}")
    paths, in_spec = pytree.tree_flatten_with_path(example_inputs)
    names = [f"args{pytree.keystr(path)}" for path, _ in paths]
    leaves = [leaf for _, leaf in paths]
    for name, leaf in zip(names, leaves):
        _check_example(name, leaf)
    device = device_type(device or _device_of(leaves) or default_device())
    with torch.no_grad():
        expected = fn(*example_inputs)
    out_leaves, out_spec = pytree.tree_flatten(expected)
    if not all(isinstance(leaf, torch.Tensor) for leaf in out_leaves):
        raise CompileError("ifx.compile's programs return tensors only (a pytree of them)")
    flat_fn, namespace = _flat_function(fn, in_spec)
    capture = _Capture()
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        stack.enter_context(fx_backend(device))
        stack.enter_context(
            torch._dynamo.config.patch(
                capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
            )
        )
        graphs = stack.enter_context(recording_graphs())
        compiled = torch.compile(flat_fn, backend=capture, fullgraph=True, dynamic=dynamic)
        try:
            compiled(*leaves)
        except torch._dynamo.exc.Unsupported as e:
            raise CompileError(
                "ifx.compile makes one graph, and Dynamo broke this program: "
                f"{str(e).strip().splitlines()[0]}; torch.compile runs programs with graph breaks"
            ) from e
    signature = signature_of(capture, names, in_spec, out_spec, leaves, namespace)
    artifact = CompiledArtifact(signature, graphs, namespace, cuda_graphs=cuda_graphs)
    got = pytree.tree_leaves(artifact(*example_inputs))
    if not all(_same(a, b) for a, b in zip(got, out_leaves)):
        raise CompileError("ifx.compile: the artifact's result on the example differs from eager's")
    return artifact


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    return torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)


def _check_example(name: str, leaf: Any) -> None:
    if isinstance(leaf, torch.Tensor):
        if leaf.requires_grad:
            raise CompileError(
                f"ifx.compile is for inference, and {name} requires grad: compile training "
                "with torch.compile inside ifx.fx_backend"
            )
        if type(leaf) is not torch.Tensor:
            kind = type(leaf).__name__
            raise CompileError(f"{name} is a {kind}; ifx.compile takes plain tensors")
    elif not isinstance(leaf, (int, float, bool)):
        raise CompileError(f"{name} is a {type(leaf).__name__}; inputs are pytrees of tensors")


def _device_of(leaves: Sequence[Any]) -> str | None:
    kinds = {leaf.device.type for leaf in leaves if isinstance(leaf, torch.Tensor)}
    return "cuda" if "cuda" in kinds else next(iter(kinds), None)


def _flat_function(
    fn: Callable[..., Any], in_spec: pytree.TreeSpec
) -> tuple[Callable[..., Any], dict[str, Any]]:
    """``fn`` over the inputs' leaves, and the globals it reads ``fn`` from.

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
    return namespace.pop("flat_fn"), {"fn": fn}


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
    environment, and AOTAutograd's view of the program."""

    sources: list[tuple[str, str]]
    examples: list[Any]
    shape_env: Any
    fw_metadata: Any

    def __call__(self, gm: torch.fx.GraphModule, examples: list[Any]) -> Callable[..., Any]:
        from torch._functorch import config as functorch_config
        from torch._guards import TracingContext
        from torch._inductor.compile_fx import compile_fx

        placeholders = gm.graph.find_nodes(op="placeholder")
        self.sources = [(node.name, _source_name(node)) for node in placeholders]
        # The fake values, with the trace's symbolic sizes (the examples are real).
        self.examples = [node.meta.get("example_value") for node in placeholders]
        # AOTAutograd's cache would serve the program without its metadata.
        with functorch_config.patch(enable_autograd_cache=False):
            compiled = compile_fx(gm, examples)
        context = TracingContext.try_get()
        self.fw_metadata = getattr(context, "fw_metadata", None)
        self.shape_env = context.fake_mode.shape_env if context is not None else None
        return compiled


def _source_name(node: torch.fx.Node) -> str:
    """The expression Dynamo reads a graph input from (``L['leaf0'].size()[0]``)."""
    source = getattr(node.meta.get("grapharg"), "source", None)
    if source is None:
        raise CompileError(f"Dynamo's graph input {node.name} has no source")
    return source.name() if callable(source.name) else source.name


#: Where Dynamo reads an argument's leaf: ``L['leaf3']`` (torch 2.10: ``L['args'][3]``,
#: the positional arguments of the frame that calls ``flat_fn``).
_LEAF = re.compile(r"^L\['(?:leaf(\d+)'\]|args'\]\[(\d+)\])")


def signature_of(
    capture: _Capture,
    names: list[str],
    in_spec: pytree.TreeSpec,
    out_spec: pytree.TreeSpec,
    leaves: list[Any],
    namespace: dict[str, Any],
) -> Signature:
    """How a call's arguments become the graph's inputs: each input's source in
    Dynamo's graph, as an expression over the leaves (``F``) or over the state read
    from ``fn`` when called (``S``); checked against what AOTAutograd says the
    program does with them."""
    _check_no_aliasing(capture.fw_metadata, len(capture.sources))
    inputs, state, state_names = [], [], []
    fakes, fake_sources, read_leaves = [], [], set()
    for (node_name, name), example in zip(capture.sources, capture.examples):
        leaf = _LEAF.match(name)
        if leaf is not None:
            index = int(leaf[1] or leaf[2])
            inputs.append(f"F[{index}]" + name[leaf.end() :])
            if leaf.end() == len(name):
                read_leaves.add(index)
                fakes.append(example)
                fake_sources.append(f"t{index}")
        elif name.startswith("G['fn']"):
            inputs.append(f"S[{len(state)}]")
            if isinstance(example, torch.Tensor):
                fakes.append(example)
                fake_sources.append(f"s{len(state)}")
            state.append(name)
            state_names.append(_state_name(name))
        else:
            raise CompileError(f"graph input {node_name} is read from {name}, not an argument")
    _check_readable(state, namespace)
    return Signature(
        names=names,
        state=state,
        state_names=state_names,
        in_spec=in_spec,
        out_spec=out_spec,
        inputs=inputs,
        tensors={
            **{f"F[{i}]": _meta(v) for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)},
            **{f"S[{k}]": _meta(v) for k, v in enumerate(_read(state, namespace)) if _meta(v)},
        },
        constants={
            i: v for i, v in enumerate(leaves) if i not in read_leaves and not _is_tensor(v)
        },
        guards=_guards(capture.shape_env, fakes, fake_sources),
    )


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def _meta(value: Any) -> tuple[Any, ...] | None:
    if not isinstance(value, torch.Tensor):
        return None
    return (value.device, value.dtype, value.dim())


def _read(state: list[str], namespace: dict[str, Any]) -> tuple[Any, ...]:
    return function("G", "".join(f"{e}, " for e in state))(namespace)


def _check_readable(state: list[str], namespace: dict[str, Any]) -> None:
    try:
        _read(state, namespace)
    except Exception as e:  # noqa: BLE001 - named in the error
        raise CompileError(f"the module's state cannot be read back: {e}") from e


def _state_name(expression: str) -> str:
    """The names in a state's expression (a submodule's, its parameter's), dotted."""
    parts = re.findall(r"\['([^']+)'\]", expression.removeprefix("G['fn']"))
    return ".".join(parts) or expression


def _check_no_aliasing(fw_metadata: Any, inputs: int) -> None:
    """Refuse what AOTAutograd's runtime wrappers would have to do for the program:
    updates of inputs, outputs that are inputs or views of them."""
    if fw_metadata is None:
        raise CompileError("AOTAutograd left no metadata of the program's inputs and outputs")
    for index, info in enumerate(fw_metadata.input_info):
        if info.mutates_data or info.mutates_metadata:
            raise CompileError(
                f"the program updates its input {index} (of {inputs}) in place; ifx.compile "
                "refuses programs that mutate their inputs (torch.compile runs them)"
            )
    for index, info in enumerate(fw_metadata.output_info):
        if info.output_type.name != "non_alias":
            raise CompileError(
                f"output {index} of the program is an input or a view of one "
                f"({info.output_type.name}); ifx.compile returns new tensors only"
            )
    if fw_metadata.num_intermediate_bases or getattr(fw_metadata, "tokens", None):
        raise CompileError("the program's outputs share memory, or it has side effects")


#: A guard on where an argument starts in its storage: the graph reads any start
#: (its views are relative to their base), and a misaligned start is realigned.
_STORAGE_OFFSET_GUARD = re.compile(r"^L\['[ts]\d+'\]\.storage_offset\(\) == -?\d+$")


def _guards(shape_env: Any, fakes: list[Any], sources: list[str]) -> list[str]:
    """The trace's guards on the sizes and strides of what it read (static ones
    too), over the leaves ``F`` and the state ``S``."""
    from torch._dynamo.source import LocalSource

    if shape_env is None or not fakes:
        return []
    guards = shape_env.produce_guards(fakes, [LocalSource(s) for s in sources], ignore_static=False)
    kept = [g for g in guards if not _STORAGE_OFFSET_GUARD.match(g)]
    return [re.sub(r"L\['([ts])(\d+)'\]", _renamed, g) for g in kept]


def _renamed(match: re.Match[str]) -> str:
    return f"{'F' if match[1] == 't' else 'S'}[{match[2]}]"
