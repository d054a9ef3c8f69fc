"""The self-check's references (``self_check.py``): the program run eager with its
floats widened, on copies of the inputs and of what the program holds: in float32
from half precision (how Inductor computes), or in float64 from every float dtype
(how torchbench judges half-precision models), with the operators that have no
float64 kernel computed by their definition."""

from __future__ import annotations

import contextlib
import copy
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

#: The float dtypes eager rounds intermediates to where Inductor keeps float32.
HALF = (torch.float16, torch.bfloat16)


def run_in_float32(fn: Callable[..., Any], example_inputs: tuple[Any, ...]) -> Any:
    """``fn`` run eager on ``example_inputs`` with their half-precision tensors, and
    the half-precision parameters, buffers and tensors it holds (on copies: the
    program's module, a bound method's, the modules and tensors of its closure and
    of the globals it names), in float32; ``None`` where nothing is of half
    precision, or eager cannot run it so (a half-precision tensor reached otherwise
    meeting a float32 one in an operation without type promotion)."""
    return _run_widened(fn, example_inputs, HALF, torch.float32)


def run_in_float64(fn: Callable[..., Any], example_inputs: tuple[Any, ...]) -> Any:
    """``fn`` run eager with every float tensor of ``example_inputs`` and of what it
    holds (on copies, as :func:`run_in_float32`) in float64, where something is of
    half precision; ``None`` where nothing is, or eager cannot run it so (memory
    for the copies). Grouped matrix products, which have no float64 kernel, are
    computed group by group (:class:`_Float64Definitions`)."""
    return _run_widened(fn, example_inputs, (*HALF, torch.float32), torch.float64)


def _state_tensors(held: dict[Any, Any]) -> list[torch.Tensor]:
    """The parameters, buffers and tensors among what a program holds (:func:`_held`)."""
    tensors: list[torch.Tensor] = []
    for value in held.values():
        if isinstance(value, torch.nn.Module):
            tensors += [*value.parameters(), *value.buffers()]
        elif isinstance(value, torch.Tensor):
            tensors.append(value)
    return tensors


def _held(fn: Callable[..., Any]) -> dict[Any, Any]:
    """The modules and tensors a program holds, by where: itself (a module), the
    module of a bound method, its function's closure cells, and the globals its
    code names (``lambda ids: model(ids).logits``). What those reach further (a
    helper's own globals) is not looked for."""
    if isinstance(fn, torch.nn.Module):
        return {"self": fn}
    held: dict[Any, Any] = {}
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        held["self"] = owner
    function = getattr(fn, "__func__", fn)
    code = getattr(function, "__code__", None)
    if code is None:
        return held
    state = (torch.nn.Module, torch.Tensor)
    for index, cell in enumerate(function.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, state):
            held[("closure", index)] = value
    for name in code.co_names:
        value = function.__globals__.get(name)
        if isinstance(value, state):
            held[("global", name)] = value
    return held


def _widened_program(
    fn: Callable[..., Any],
    held: dict[Any, Any],
    narrow: tuple[torch.dtype, ...],
    wide: torch.dtype,
) -> Callable[..., Any]:
    """``fn`` with copies of what it holds (``held``, :func:`_held`'s) converted from
    ``narrow`` dtypes to ``wide``: a copied module, or the function rebuilt on new
    closure cells and a copy of its globals. Nothing of the caller's is changed."""

    def widened(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().to(wide) if value.dtype in narrow else value
        value = copy.deepcopy(value)
        for t in (*value.parameters(), *value.buffers()):
            if t.dtype in narrow:
                t.data = t.data.to(wide)
        return value

    if not any(t.dtype in narrow for t in _state_tensors(held)):
        return fn
    copies = {where: widened(value) for where, value in held.items()}
    if isinstance(fn, torch.nn.Module):
        return copies["self"]
    function = getattr(fn, "__func__", fn)
    closure = function.__closure__ and tuple(
        types.CellType(copies[("closure", i)]) if ("closure", i) in copies else cell
        for i, cell in enumerate(function.__closure__)
    )
    names = {where[1]: value for where, value in copies.items() if where[0] == "global"}
    rebuilt = types.FunctionType(
        function.__code__,
        {**function.__globals__, **names} if names else function.__globals__,
        function.__name__,
        function.__defaults__,
        closure,
    )
    rebuilt.__kwdefaults__ = function.__kwdefaults__
    if "self" in copies:
        return types.MethodType(rebuilt, copies["self"])
    owner = getattr(fn, "__self__", None)
    return types.MethodType(rebuilt, owner) if owner is not None else rebuilt


def _run_widened(
    fn: Callable[..., Any],
    example_inputs: tuple[Any, ...],
    narrow: tuple[torch.dtype, ...],
    wide: torch.dtype,
) -> Any:
    """``fn`` run eager with the tensors of ``narrow`` dtypes among its inputs and
    what it holds (on copies: :func:`_widened_program`) converted to ``wide``;
    ``None`` where none is of half precision, or eager cannot run it so."""

    def widened(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype in narrow:
            return value.to(wide)
        return value

    held = _held(fn)
    leaves = [*pytree.tree_leaves(example_inputs), *_state_tensors(held)]
    if not any(isinstance(v, torch.Tensor) and v.dtype in HALF for v in leaves):
        return None
    try:
        program = _widened_program(fn, held, narrow, wide)
        definitions = _Float64Definitions() if wide == torch.float64 else contextlib.nullcontext()
        with torch.no_grad(), definitions:
            return program(*pytree.tree_map(widened, example_inputs))
    except Exception:  # not copied, or not computed so: the other references alone
        return None


class _Float64Definitions(TorchDispatchMode):
    """In the float64 reference: the operators that have no float64 kernel computed
    by their definition, from float64 products. Transformers' MoE experts run as
    one grouped matrix product (``torch._grouped_mm``, bfloat16, float16 and float32
    only); without this, a bfloat16 model with them had no float64 reference."""

    def __torch_dispatch__(self, func, _types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._grouped_mm.default and args[0].dtype == torch.float64:
            return _grouped_mm_by_definition(*args, **kwargs)
        return func(*args, **kwargs)


def _grouped_mm_by_definition(
    a: torch.Tensor,
    b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``torch._grouped_mm`` as its documentation defines it, a product per group:
    ``offs[g]`` ends group ``g`` of the sliced dimension of each 2-D operand (of
    ``a``'s rows against ``b[g]``, of the columns of ``b`` for ``a[g]``, of the
    contracted dimension where both are 2-D); two 3-D operands multiply batch by
    batch. Rows and columns past ``offs[-1]`` are zero (the operator leaves them
    undefined). A bias (no kernel of any release on the CPU takes one), an output
    dtype other than the inputs' and a mismatch raise, and the reference is none."""
    if bias is not None or (out_dtype is not None and out_dtype != a.dtype):
        raise NotImplementedError("grouped_mm by definition: bias or another output dtype")
    if a.dim() == 3 and b.dim() == 3:
        return torch.bmm(a, b)
    if offs is None:
        raise ValueError("grouped_mm of a 2-D operand needs offs")
    ends = offs.tolist()
    starts = [0, *ends[:-1]]
    if a.dim() == 2 and b.dim() == 3:
        out = a.new_zeros(a.shape[0], b.shape[-1])
        for g, (start, end) in enumerate(zip(starts, ends)):
            out[start:end] = a[start:end] @ b[g]
    elif a.dim() == 3 and b.dim() == 2:
        out = a.new_zeros(a.shape[1], b.shape[1])
        for g, (start, end) in enumerate(zip(starts, ends)):
            out[:, start:end] = a[g] @ b[:, start:end]
    else:
        out = a.new_zeros(len(ends), a.shape[0], b.shape[1])
        for g, (start, end) in enumerate(zip(starts, ends)):
            out[g] = a[:, start:end] @ b[start:end]
    return out
