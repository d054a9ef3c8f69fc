"""Where a direct call reads what it needs: each graph input (an argument's leaf, a
size of one, the module's state), each leaf of the result (a graph output, an
argument, the module's state, a constant), and the trace's shape guards, as
expressions over the flat arguments ``F``, the state ``S``, the graph's outputs
``O`` and the result's constants ``C``.

Dynamo leaves out of its graph every result that the graph does not compute (an
argument or a closed-over tensor returned as it is, a constant, a repeat of
another result) and rebuilds them after the graph runs; so does the artifact,
from where the trace's result found each of them.
"""

from __future__ import annotations

import copy
import itertools
import re
import types
from collections.abc import Callable, Container
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .compiled import SCALAR_TYPES, CompileError, Signature, function

#: Where Dynamo reads an argument's leaf: ``L['leaf3']`` (torch 2.10: ``L['args'][3]``,
#: the positional arguments of the frame that calls ``flat_fn``).
_LEAF = re.compile(r"L\['(?:leaf(\d+)'\]|args'\]\[(\d+)\])")


def leaf_index(name: str) -> int | None:
    """The leaf that Dynamo's source ``name`` is, whole (``L['leaf0']``), or None."""
    leaf = _LEAF.match(name)
    return int(leaf[1] or leaf[2]) if leaf is not None and leaf.end() == len(name) else None


def signature_of(
    capture: Any,
    names: list[str],
    in_spec: pytree.TreeSpec,
    leaves: list[Any],
    fn: Callable[..., Any],
    namespace: dict[str, Any],
    traced: tuple[Any, ...],
    expected: Any,
    *,
    dynamic: bool,
) -> Signature:
    """How a call's arguments become the graph's inputs and the graph's outputs the
    result: each graph input's source in Dynamo's graph as an expression over the
    leaves (``F``) or over the state read from ``fn`` when called (``S``), and each
    of the result's leaves as a graph output, an argument, state or a constant."""
    inputs, state, state_names = [], [], []
    state_values: list[Any] = []
    state_scalars: dict[int, str] = {}
    fakes: list[Any] = []
    fake_sources: list[str] = []
    read_leaves: set[int] = set()
    for (node_name, name), example in zip(capture.sources, capture.examples):
        leaf = _LEAF.match(name)
        if leaf is not None:
            index = int(leaf[1] or leaf[2])
            expression = f"F[{index}]" + name[leaf.end() :]
            whole = leaf.end() == len(name)
            if whole and _stands_for_a_scalar(example, leaves[index]):
                read_leaves.add(index)
                expression = _as_tensor(expression, example)
            elif whole:
                read_leaves.add(index)
                fakes.append(example)
                fake_sources.append(f"t{index}")
            inputs.append(expression)
        elif name.startswith("G['"):
            # The program's state (``G['fn']``: a module's parameter, a closed-over
            # tensor) or a global it reads (through the module Dynamo imported it
            # from): read when called, as Dynamo reads it.
            expression = f"S[{len(state)}]"
            value = _read_back(name, namespace)
            if _stands_for_a_scalar(example, value):
                state_scalars[len(state)] = type(value).__name__
                expression = _as_tensor(expression, example)
            elif isinstance(value, torch.Tensor):
                fakes.append(example)
                fake_sources.append(f"s{len(state)}")
            elif type(value).__name__ in SCALAR_TYPES:
                state_scalars[len(state)] = type(value).__name__
                if isinstance(example, (torch.SymInt, torch.SymFloat)):  # its guards too
                    fakes.append(example)
                    fake_sources.append(f"s{len(state)}")
            else:
                raise CompileError(
                    f"graph input {node_name} is read from {name}, a {type(value).__name__}: "
                    "pass it as an argument"
                )
            inputs.append(expression)
            state.append(name)
            state_values.append(value)
            state_names.append(_state_name(name, namespace))
        else:
            raise CompileError(
                f"graph input {node_name} is read from {name}, not an argument: pass it as "
                "an argument, or read it from a module, a closure or a global"
            )
    # The state the graph reads is checked when called; what the result only
    # returns as it is (appended below) is not.
    state_tensors = {f"S[{k}]": _meta(v) for k, v in enumerate(state_values) if _meta(v)}
    outputs, output_constants = _result_sources(
        capture.graph_outputs or [], traced, expected, leaves, fn, namespace, state, state_names
    )
    return Signature(
        names=names,
        state=state,
        state_names=state_names,
        in_spec=in_spec,
        out_spec=pytree.tree_flatten(expected)[1],
        inputs=inputs,
        outputs=outputs,
        output_constants=output_constants,
        tensors={
            **{f"F[{i}]": _meta(v) for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)},
            **state_tensors,
        },
        scalars={i: type(v).__name__ for i, v in enumerate(leaves) if not _is_tensor(v)},
        state_scalars=state_scalars,
        constants={
            i: v for i, v in enumerate(leaves) if i not in read_leaves and not _is_tensor(v)
        },
        guards=_guards(capture.shape_env, fakes, fake_sources),
        fixed=_fixed(getattr(capture, "fixed_values", []), namespace),
        dynamic=dynamic,
    )


def _result_sources(
    graph_outputs: list[Any],
    traced: tuple[Any, ...],
    expected: Any,
    leaves: list[Any],
    fn: Callable[..., Any],
    namespace: dict[str, Any],
    state: list[str],
    state_names: list[str],
) -> tuple[list[str], list[Any]]:
    """Each leaf of the result as ``O[i]`` (graph output i), ``F[i]`` (an argument,
    returned as it is), ``S[k]`` (state, read when called) or ``C[j]`` (a constant),
    found by identity in what the trace returned."""
    paths = [pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path(expected)[0]]
    if len(traced) != len(paths):
        raise CompileError(
            f"the traced program returned {len(traced)} leaves where eager returned "
            f"{len(paths)}: the program returns something else each time it runs"
        )
    for value in graph_outputs:
        if not isinstance(value, torch.Tensor):
            raise CompileError(
                f"the program returns a Python {type(value).__name__} that it computes (a "
                "size, or a value read from a tensor); the artifact returns tensors and "
                "constants: return it as a tensor (torch.tensor(n), or the tensor it was "
                "read from)"
            )
    computed = {id(v): i for i, v in reversed(list(enumerate(graph_outputs)))}
    arguments = {id(v): i for i, v in reversed(list(enumerate(leaves))) if _is_tensor(v)}
    outputs: list[str] = []
    output_constants: list[Any] = []
    state_values = list(_read(state, namespace))
    for path, value in zip(paths, traced):
        if not isinstance(value, torch.Tensor):
            outputs.append(f"C[{len(output_constants)}]")
            output_constants.append(value)
        elif id(value) in computed:
            outputs.append(f"O[{computed[id(value)]}]")
        elif id(value) in arguments:
            outputs.append(f"F[{arguments[id(value)]}]")
        else:
            read = [k for k, v in enumerate(state_values) if v is value]
            if not read:
                expression, name = _state_expression(fn, value, path)
                read = [len(state)]
                state.append(expression)
                state_names.append(name)
                state_values.append(value)
            outputs.append(f"S[{read[0]}]")
    return outputs, output_constants


def _state_expression(fn: Callable[..., Any], value: torch.Tensor, path: str) -> tuple[str, str]:
    """Where the program reads a tensor it returns as it is: a parameter or buffer
    of the module, or a variable the function closes over."""
    if isinstance(fn, torch.nn.Module):
        named = itertools.chain(
            (("get_parameter", n, t) for n, t in fn.named_parameters(remove_duplicate=False)),
            (("get_buffer", n, t) for n, t in fn.named_buffers(remove_duplicate=False)),
        )
        for method, name, tensor in named:
            if tensor is value:
                return f"G['fn'].{method}({name!r})", name
    code = getattr(fn, "__code__", None)
    for index, cell in enumerate(getattr(fn, "__closure__", None) or ()):
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if contents is value:
            return f"G['fn'].__closure__[{index}].cell_contents", code.co_freevars[index]
    raise CompileError(
        f"the result's leaf result{path} is a tensor the program neither computes nor reads "
        "from its arguments, its module or its closure (a global?): return a copy it "
        "computes (.clone()), or pass the tensor as an argument"
    )


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def _meta(value: Any) -> tuple[Any, ...] | None:
    if not isinstance(value, torch.Tensor):
        return None
    return (value.device, value.dtype, value.dim())


#: The values a direct call checks where the trace fixed them.
_FIXABLE = (int, float, bool, str, type(None))


def _fixed(names: list[str], namespace: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """(expression, value, what it is) of each global or program attribute whose plain
    value (a number, a string, None) the trace fixed, read now."""
    fixed = []
    for name in names:
        try:
            (value,) = _read([name], namespace)
        except Exception:  # noqa: BLE001 - Dynamo read it another way; its graph holds it
            continue
        if _plain(value):
            # A copy: a list updated in place must not look the same as the one fixed.
            fixed.append((name, copy.deepcopy(value), _fixed_name(name, namespace)))
    return fixed


def _plain(value: Any) -> bool:
    """A number, a string, None, or a list or tuple of them (as nested)."""
    if type(value) in (list, tuple):
        return all(_plain(v) for v in value)
    return type(value) in _FIXABLE


def _stands_for_a_scalar(example: Any, value: Any) -> bool:
    """Whether the graph takes a 0-d tensor where the program reads a Python scalar:
    Dynamo passes a float that it does not specialise so, made when called."""
    return (
        isinstance(example, torch.Tensor)
        and example.dim() == 0
        and type(value).__name__ in SCALAR_TYPES
    )


def _as_tensor(expression: str, example: torch.Tensor) -> str:
    """``expression``'s scalar as the 0-d tensor that the graph takes for it."""
    return f"torch.tensor({expression}, dtype={example.dtype}, device={str(example.device)!r})"


def _read(state: list[str], namespace: dict[str, Any]) -> tuple[Any, ...]:
    return function("G", "".join(f"{e}, " for e in state))(namespace)


def _read_back(expression: str, namespace: dict[str, Any]) -> Any:
    """The state at ``expression``, read as a call will read it."""
    try:
        (value,) = _read([expression], namespace)
    except Exception as e:  # noqa: BLE001 - named in the error
        raise CompileError(f"the module's state cannot be read back: {e}") from e
    return value


def _state_name(expression: str, namespace: dict[str, Any] | None = None) -> str:
    """The names in a state's expression, dotted: a submodule's and its parameter's
    (``G['fn']``), or a global's, after the module it is read from (the module that
    Dynamo imported into the traced frame's ``namespace``)."""
    program = expression.startswith("G['fn']")
    parts = re.findall(r"\['([^']+)'\]|\.(\w+)|(\[\d+\])", expression.removeprefix("G['fn']"))
    names = [a or b or c for a, b, c in parts]
    names = [n for n in names if n not in ("_modules", "_parameters", "_buffers")]
    if not program and names:
        module = (namespace or {}).get(names[0])
        if isinstance(module, types.ModuleType):
            names[0] = module.__name__
    dotted = ".".join(names).replace(".[", "[") or expression
    return dotted if program else f"global {dotted}"


def _fixed_name(expression: str, namespace: dict[str, Any]) -> str:
    """A fixed value's source as its user names it."""
    inner = expression.removeprefix("len(").removesuffix(")")
    name = _state_name(inner, namespace)
    name = name if name.startswith("global ") else f"the program's {name}"
    return f"the length of {name}" if inner != expression else name


#: The name of the traced frame's global that a state's expression starts from.
_GLOBAL = re.compile(r"G\['([^']+)'\]")


def namespace_for(signature: Signature, traced_globals: dict[str, Any]) -> dict[str, Any]:
    """What the state's and the fixed values' expressions read when called: the
    program (``G['fn']``) and the traced frame's globals that they name (the modules
    whose globals the program reads, as Dynamo imported them there), nothing else of
    that frame."""
    expressions = [*signature.state, *(name for name, _, _ in getattr(signature, "fixed", []))]
    names = {"fn"} | {
        match[1] for e in expressions if (match := _GLOBAL.match(e.removeprefix("len(")))
    }
    return {name: traced_globals[name] for name in names if name in traced_globals}


def check_no_aliasing(fw_metadata: Any, sources: list[str], names: list[str]) -> None:
    """Refuse what AOTAutograd's runtime wrappers would have to do for the program:
    updates of inputs, outputs that are views of inputs or share memory. Runs in
    the backend, before the program runs on the caller's tensors."""
    work = _wrapper_work(fw_metadata)
    if work is None:
        return
    kind, index, detail = work
    if kind == "mutation":
        raise CompileError(
            f"the program updates {_input_name(sources, names, index)} in place; "
            "ifx.compile refuses programs that mutate their inputs or state (torch.compile "
            "runs them): compute a new tensor instead (x + 1, not x.add_(1))"
        )
    if kind == "view":
        raise CompileError(
            f"output {index} of the program is a view of an input or of another output "
            f"({detail}); ifx.compile returns new tensors, the arguments "
            "themselves, or its state: return a copy (.clone())"
        )
    raise CompileError(f"the program's outputs share memory, or it has side effects ({detail})")


def aot_wrapper_work(fw_metadata: Any, views_made: Container[int] = ()) -> str | None:
    """What AOTAutograd's runtime wrappers would do for a graph (update an input,
    rebuild an output as a view, but those of ``views_made``, thread effect tokens),
    in words; None where they would pass its inputs and outputs through as they are."""
    work = _wrapper_work(fw_metadata, views_made)
    if work is None:
        return None
    kind, index, detail = work
    return {
        "mutation": f"it updates its input {index} in place",
        "view": f"its output {index} is a view ({detail})",
    }.get(kind, detail)


def _wrapper_work(fw_metadata: Any, views_made: Container[int] = ()) -> tuple[str, int, str] | None:
    """The first thing AOTAutograd's runtime wrappers would do: (``"mutation"``, input
    index, ""), (``"view"``, output index, its alias kind), (``"other"``, 0, what)."""
    if fw_metadata is None:
        return ("other", 0, "AOTAutograd left no metadata of the graph's inputs and outputs")
    for index, info in enumerate(fw_metadata.input_info):
        if info.mutates_data or info.mutates_metadata:
            return ("mutation", index, "")
    for index, info in enumerate(fw_metadata.output_info):
        if info.output_type.name != "non_alias" and index not in views_made:
            return ("view", index, info.output_type.name)
    if fw_metadata.num_intermediate_bases:
        return ("other", 0, "outputs that share memory")
    if getattr(fw_metadata, "tokens", None):
        return ("other", 0, "effect tokens")
    return None


def _input_name(sources: list[str], names: list[str], index: int) -> str:
    if index >= len(sources):
        return f"its input {index}"
    leaf = _LEAF.fullmatch(sources[index])
    if leaf is not None:
        return f"its input {names[int(leaf[1] or leaf[2])]}"
    return f"its state {_state_name(sources[index])}"


#: A guard on where an argument starts in its storage: the graph reads any start
#: (its views are relative to their base), and a misaligned start is realigned.
_STORAGE_OFFSET_GUARD = re.compile(r"^L\['[ts]\d+'\]\.storage_offset\(\) == -?\d+$")


def _guards(shape_env: Any, fakes: list[Any], sources: list[str]) -> list[str]:
    """The trace's guards on the sizes and strides of what it read (static ones
    too), over the leaves ``F`` and the state ``S``."""
    from torch._dynamo.source import LocalSource

    if shape_env is None or not fakes:
        return []
    sources = [LocalSource(s) for s in sources]
    for value, source in _read_values(shape_env):
        fakes, sources = [*fakes, value], [*sources, source]
    guards = shape_env.produce_guards(fakes, sources, ignore_static=False)
    kept = [g for g in guards if not _STORAGE_OFFSET_GUARD.match(g)]
    kept = [re.sub(r"L\['([ts])(\d+)'\]", _renamed, g) for g in kept]
    # A bound on a value read from an argument (``k.item()``) names the argument
    # as Dynamo read it.
    return [_LEAF.sub(lambda m: f"F[{m[1] or m[2]}]", g) for g in kept]


def _read_values(shape_env: Any) -> list[tuple[Any, Any]]:
    """The values a trace read from arguments as backed symbols (torch 2.10 reads
    ``k.item()`` of an argument so), each a SymInt and its source: their bounds are
    guards too."""
    found = []
    for symbol, symbol_sources in shape_env.var_to_sources.items():
        for source in symbol_sources:
            name = source.name() if callable(source.name) else source.name
            if _LEAF.match(name) and name.endswith(".item()"):
                hint = int(shape_env.var_to_val[symbol])
                found.append((shape_env.create_symintnode(symbol, hint=hint), source))
                break
    return found


def _renamed(match: re.Match[str]) -> str:
    return f"{'F' if match[1] == 't' else 'S'}[{match[2]}]"
