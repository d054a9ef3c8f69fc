"""The artifact of ``ifx.compile``: a compiled program called directly.

A call flattens its arguments (the module's parameters and buffers, as they are
now, then the inputs' leaves), checks them (count, device, dtype, rank,
gradients, Python scalars' types, constants the trace fixed, and the trace's
shape guards: the sizes and strides the graph assumes), reads the graph's inputs
from them, realigns an input that the kernels assume aligned where it is not (as
Inductor's compiled graph does), and calls the graph's lowered runner with
gradients off (inference: parameters that require grad are read as they are).
The result is built as eager's: the graph's outputs, and what Dynamo left out of
the graph (an argument or state returned as it is, a repeat, a constant). Every
check failing names the argument and what to do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .. import _compat
from .. import runner as runners
from ..artifact import store
from . import structures


class CompileError(RuntimeError):
    """``ifx.compile`` cannot make a direct-call artifact of this program; says why."""


class InputError(ValueError):
    """A call's arguments are not what the artifact was compiled for; names the argument."""


class Signature:
    """How a call's arguments become the graph's inputs, and what they must be: plain
    data (it pickles with the artifact).

    Expressions read the flat arguments ``F`` (the inputs' leaves, named ``names``)
    and the module's state ``S`` (its parameters and buffers that the graph reads,
    named ``state_names``, each read from the program ``G['fn']`` by an expression
    of ``state``). ``inputs``: each graph input; ``tensors``: ``"F[i]"`` or ``"S[k]"``
    -> (device, dtype, rank); ``constants``: flat index -> the value the trace fixed;
    ``guards``: the trace's shape guards; ``in_spec``, ``out_spec``: the pytrees of
    the arguments and the results.
    """

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def name(self, value: str) -> str:
        """The argument or state that ``F[i]`` or ``S[k]`` is."""
        index = int(value[2:-1])
        if value[0] == "F":
            return self.names[index]
        name = self.state_names[index]
        return name if name.startswith("global ") else f"module state {name}"


def function(arguments: str, body: str) -> Callable[..., Any]:
    """``lambda <arguments>: (<body>)``, with the names that shape guards use."""
    from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP

    return eval(f"lambda {arguments}: ({body})", dict(SYMPY_INTERP, torch=torch))  # noqa: S307


class CompiledArtifact:
    """What ``ifx.compile`` returns: called like the program, directly.

    ``graph`` is its FX graph, ``graphs`` every graph (subgraphs first). It reads
    its module's parameters and buffers when called. It pickles, saves
    (``ifx.save``) and loads by value, with that state as it was then; a loaded
    artifact reads the state it was saved with.
    """

    def __init__(
        self,
        signature: Signature,
        graphs: list[torch.fx.GraphModule],
        namespace: dict[str, Any] | None,
        *,
        cuda_graphs: bool = False,
        state: list[torch.Tensor] | None = None,
    ) -> None:
        self.signature = signature
        self.graphs = list(graphs)
        #: The FX graph, or None for a program that computes nothing (``lambda x: x``).
        self.graph = self.graphs[-1] if self.graphs else None
        self.cuda_graphs = cuda_graphs
        #: What the state is read from (``G['fn']``: the program), or the state itself.
        self._namespace = namespace
        self._state = state
        self._read_state = function("G", "".join(f"{e}, " for e in signature.state))
        self._run = (
            runners.compile_graph(self.graph, "lowered", cuda_graphs=cuda_graphs)
            if self.graph is not None
            else _no_graph
        )
        self._graph_inputs = function("F, S", "".join(f"{e}, " for e in signature.inputs))
        self._guard = function("F, S", " and ".join(f"({g})" for g in signature.guards) or "1")
        self._aligned = aligned_inputs(self.graph) if self.graph is not None else []
        self._flat = signature.in_spec == pytree.tree_flatten(tuple(signature.names))[1]
        #: (where, reads the state, index, device, dtype, rank) of each tensor to check.
        self._tensors = [
            (where, where[0] == "S", int(where[2:-1]), *meta)
            for where, meta in signature.tensors.items()
        ]
        #: (index, the types it takes) of each argument that is a Python scalar.
        self._scalars = [
            (index, SCALAR_TYPES[kind]) for index, kind in getattr(signature, "scalars", {}).items()
        ]
        #: The globals and program attributes whose values the trace fixed, and those
        #: values (checked while they are read from the program, not once loaded).
        fixed = getattr(signature, "fixed", [])
        self._fixed_values = tuple(value for _, value, _ in fixed)
        self._read_fixed = (
            function("G", "".join(f"{name}, " for name, _, _ in fixed)) if fixed else None
        )
        #: The same of the state (a global the program reads).
        self._state_scalars = [
            (index, SCALAR_TYPES[kind])
            for index, kind in getattr(signature, "state_scalars", {}).items()
        ]
        #: How the result is made of the graph's outputs: its only one, a tuple, or
        #: (the leaves' expressions over O, F, S, C, then) the spec.
        spec = signature.out_spec
        outputs = getattr(signature, "outputs", None) or [f"O[{i}]" for i in range(spec.num_leaves)]
        in_order = outputs == [f"O[{i}]" for i in range(spec.num_leaves)]
        self._one_output = in_order and spec.is_leaf()
        self._tuple_output = in_order and spec == pytree.tree_flatten((0,) * spec.num_leaves)[1]
        self._result = (
            None if in_order else function("O, F, S, C", "".join(f"{e}, " for e in outputs))
        )
        self._output_constants = list(getattr(signature, "output_constants", []))

    def __call__(self, *args: Any) -> Any:
        signature = self.signature
        if self._flat and len(args) == len(signature.names):
            leaves: Sequence[Any] = args
        else:
            leaves, spec = pytree.tree_flatten(args)
            if spec != signature.in_spec:
                raise InputError(structures.departure(args, signature.in_spec))
        if self._state is not None:
            state = self._state
        else:
            if self._read_fixed is not None:
                self._check_fixed()
            state = self._read_state(self._namespace) if signature.state else ()
        self._check(leaves, state)
        inputs = self._graph_inputs(leaves, state)
        if self._aligned:
            inputs = realigned_inputs(inputs, self._aligned)
        # Inference: parameters that require grad are read as constants (extern
        # kernels write their results with out=, which autograd refuses).
        grad = torch.is_grad_enabled()
        if grad:
            _compat.set_grad_enabled(False)
        try:
            outputs = self._run(*inputs)
        finally:
            if grad:
                _compat.set_grad_enabled(True)
        if not isinstance(outputs, (tuple, list)):
            outputs = (outputs,)
        if self._one_output:
            return outputs[0]
        if self._tuple_output:
            return tuple(outputs)
        if self._result is not None:
            outputs = self._result(outputs, leaves, state, self._output_constants)
        return pytree.tree_unflatten(list(outputs), signature.out_spec)

    def _check(self, leaves: Sequence[Any], state: Sequence[Any]) -> None:
        for where, of_state, index, device, dtype, rank in self._tensors:
            value = state[index] if of_state else leaves[index]
            if (
                not isinstance(value, torch.Tensor)
                or value.dtype != dtype
                or value.device != device
                or value.dim() != rank
                or (not of_state and value.requires_grad)
            ):
                raise InputError(self._mismatch(where, value, device, dtype, rank))
        signature = self.signature
        for index, kinds in self._scalars:
            if type(leaves[index]).__name__ not in kinds:
                raise InputError(self._not_a_scalar(index, leaves[index]))
        for index, kinds in self._state_scalars:
            if type(state[index]).__name__ not in kinds:
                raise InputError(
                    f"{signature.name(f'S[{index}]')} is now {_described(state[index])}; the "
                    f"artifact was compiled for a Python {signature.state_scalars[index]} there"
                )
        for index, constant in signature.constants.items():
            if leaves[index] != constant:
                raise InputError(
                    f"{signature.names[index]} is {leaves[index]!r}; the artifact was compiled "
                    f"for {constant!r} (compile it with dynamic=True, or again)"
                )
        if not self._guard(leaves, state):
            raise InputError(self._failed_guard(leaves, state))

    def _check_fixed(self) -> None:
        values = self._read_fixed(self._namespace)
        if values == self._fixed_values:
            return
        for (_, fixed, what), value in zip(self.signature.fixed, values):
            if value != fixed and not (value != value and fixed != fixed):  # NaN is NaN
                raise InputError(
                    f"{what} is {value!r}; the trace fixed it at {fixed!r} "
                    "(torch.compile would compile again): compile the artifact again with it "
                    "as it is now"
                )

    def _not_a_scalar(self, index: int, value: Any) -> str:
        name = self.signature.names[index]
        kind = self.signature.scalars[index]
        fix = f" (pass {name}.item())" if isinstance(value, torch.Tensor) else ""
        return (
            f"{name} is {_described(value)}; the artifact was compiled for a Python {kind} "
            f"there{fix}"
        )

    def _mismatch(self, where: str, value: Any, device: Any, dtype: Any, rank: int) -> str:
        name = self.signature.name(where)
        if not isinstance(value, torch.Tensor):
            return f"{name} is a {type(value).__name__}; the artifact takes a tensor there"
        if value.requires_grad and where[0] == "F":
            return (
                f"{name} requires grad; the artifact is for inference: compile training with "
                "torch.compile inside ifx.fx_backend"
            )
        return (
            f"{name}: expected a tensor on {device} of {dtype} with {rank} dimensions, got a "
            f"tensor on {value.device} of {value.dtype} with {value.dim()} dimensions"
        )

    def _failed_guard(self, leaves: Sequence[Any], state: Sequence[Any]) -> str:
        values = {"F": leaves, "S": state}
        for guard in self.signature.guards:
            if function("F, S", guard)(leaves, state):
                continue
            found = dict.fromkeys(re.findall(r"[FS]\[\d+\]", guard))
            tensors = [(w, values[w[0]][int(w[2:-1])]) for w in found]
            shapes = ", ".join(
                f"{self.signature.name(w)} has size {tuple(t.shape)} and stride {t.stride()}"
                for w, t in tensors
                if isinstance(t, torch.Tensor)
            )
            named = re.sub(r"[FS]\[\d+\]", lambda m: self.signature.name(m[0]), guard)
            return (
                f"the artifact was compiled for {named}, and {shapes}: {self._fix(guard, tensors)}"
            )
        return "the arguments fail the artifact's shape guards"

    def _fix(self, guard: str, tensors: list[tuple[str, Any]]) -> str:
        """What to do about a failed guard: the layout, the size, or the relation."""
        if ".stride()" in guard:
            strided = [
                self.signature.name(w)
                for w, t in tensors
                if isinstance(t, torch.Tensor) and not t.is_contiguous()
            ]
            if strided:
                return f"pass {strided[0]}.contiguous() (the layout it was compiled for)"
            return "pass a tensor with the strides it was compiled for (.contiguous())"
        if not getattr(self.signature, "dynamic", False):
            return "compile it with dynamic=True for other sizes"
        if re.match(r"\d+ <= [FS]\[\d+\]\.size\(\)\[\d+\]( and |$)", guard):
            return (
                "smaller sizes compile only as fixed sizes for this program: compile an "
                "artifact for them with dynamic=False on an example of that size"
            )
        if ".item()" in guard:
            return "pass a value within the bounds the program checks (torch._check)"
        return (
            "the trace found this relation between sizes (its examples satisfied it); pass "
            "sizes that satisfy it, or compile with examples whose sizes differ"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        state = self._state if self._state is not None else self._read_state(self._namespace)
        signature = dict(self.signature.__dict__)
        # The pytrees' structures as skeletons (their leaves 0): a TreeSpec pickles
        # through classes that some releases warn about when unpickled.
        for key in ("in_spec", "out_spec"):
            spec = signature[key]
            signature[key] = _Skeleton(pytree.tree_unflatten([0] * spec.num_leaves, spec))
        payload = {
            "signature": signature,
            "graph": None
            if self.graph is None
            else store.dumps(self.graph, "lowered", constants=True),
            "state": [v.detach() if isinstance(v, torch.Tensor) else v for v in state],
            "cuda_graphs": self.cuda_graphs,
        }
        return (restored, (payload,))

    def __repr__(self) -> str:
        kernels = sum(
            1
            for gm in self.graphs
            for node in gm.graph.nodes
            if node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation
        )
        return f"CompiledArtifact({len(self.graphs)} FX graph(s), {kernels} Triton kernel calls)"


_ALIGNMENT = 16

#: What a non-tensor argument may be, by the example's type (an int may be passed
#: for a float, as Python does; a bool is no int here).
SCALAR_TYPES = {"int": ("int",), "float": ("float", "int"), "bool": ("bool",)}


class _Skeleton:
    """A pytree whose leaves are 0, standing for its structure in a pickle."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _no_graph(*inputs: Any) -> tuple[Any, ...]:
    """The graph of a program that computes nothing: its result is its arguments."""
    return ()


def _described(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor ({value.dtype}{list(value.shape)})"
    return f"a {type(value).__name__} ({value!r})"


def restored(payload: dict[str, Any]) -> CompiledArtifact:
    graphs = (
        [] if payload["graph"] is None else store.loads(payload["graph"], with_values=True).graphs
    )
    fields = dict(payload["signature"])
    for key in ("in_spec", "out_spec"):
        if isinstance(fields[key], _Skeleton):
            fields[key] = pytree.tree_flatten(fields[key].value)[1]
    signature = Signature(**fields)
    return CompiledArtifact(
        signature, graphs, None, cuda_graphs=payload["cuda_graphs"], state=payload["state"]
    )


def aligned_inputs(gm: torch.fx.GraphModule) -> list[int]:
    """The graph inputs that the graph checks for alignment (its kernels assume it)."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    checked = {
        node.args[0]
        for node in gm.graph.find_nodes(
            op="call_function", target=torch.ops.fx_unbacked.assert_alignment.default
        )
    }
    return [i for i, node in enumerate(placeholders) if node in checked]


def realigned_inputs(inputs: Sequence[Any], aligned: list[int]) -> tuple[Any, ...]:
    """``inputs`` with each one at an ``aligned`` position that starts off a 16-byte
    boundary replaced by an aligned copy (the graph's kernels assume alignment)."""
    inputs = tuple(inputs)
    for position in aligned:
        if inputs[position].data_ptr() % _ALIGNMENT:
            realigned = _realigned(inputs[position])
            inputs = (*inputs[:position], realigned, *inputs[position + 1 :])
    return inputs


def _realigned(tensor: torch.Tensor) -> torch.Tensor:
    """A copy of ``tensor``, with its sizes and strides, that starts its storage."""
    copy = torch.empty_strided(
        tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device
    )
    return copy.copy_(tensor)
