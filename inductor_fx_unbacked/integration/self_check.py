"""``ifx.compile``'s self-check: the artifact's result on the example against
eager's, the whole structure, at the tolerances ``torch.testing.assert_close``
uses for each dtype.

A program that accumulates (a reduction, a scan, a product of matrices) sums in
another order than eager, by blocks: its error grows with the square root of the
length summed, relative to the result's largest magnitude. Such a program's
float results are also accepted within ``10 * eps * sqrt(n) * max|eager|``, ``eps``
that of the dtype it accumulates in (float32 for the narrower ones) and ``n`` the
most elements any argument or result holds; ``torch.compile`` runs it with the
same numerics. Eager rounds each intermediate to the inputs' dtype where Inductor
computes in float32: a result of inputs narrower than float32 is compared at the
tolerances of the narrowest dtype of the result and the inputs (a float32 mean of
float16 square roots), and may differ by the rounding of an intermediate as large
as the program's inputs (``x - logsumexp(x)`` in log-softmax: a result near 0 off
by a bfloat16 step of the log-sum-exp), so its bound adds ``2 * eps(dtype) *
max(max|eager|, max|inputs|)`` for that narrowest dtype.

Rounding every intermediate of a long chain compounds (a product of 22 float16
square roots: each factor is off by up to half a float16 step in eager and not at all
in the artifact), so no bound on eager's result alone is both sound and tight. A
result that eager's misses is also compared, at the same tolerances, with eager's
computed in float32 (half-precision inputs and module parameters converted, results
rounded back to eager's dtypes), which is how Inductor computes it and how
upstream's tests compare half precision (``reference_in_float``). The artifact is
accepted when it matches either.

A model in half precision whose result depends on a comparison of rounded values
(the top-2 experts a router picks, among near ties) gives other values wherever
the artifact's rounding tips a comparison another way than eager's: a token
routed elsewhere differs by the whole expert's output, beyond any rounding bound.
Where half precision is involved and the artifact misses both references above,
it is also judged as torchbench judges such models: against the program run in
float64 (inputs and a copy of the module's state converted), its root mean square
error is at most 3 times eager's, plus a tenth of the dtype's tolerance
(``torch._dynamo.utils.same`` with ``fp64_ref``), on each float result scaled by
the float64 result's largest magnitude (so that the added term is relative), and
at most 3 times as many of its elements as of eager's miss the float64 result
beyond rounding; every other result must still equal eager's exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .compiled import CompileError
from .widened import run_in_float32, run_in_float64  # noqa: F401 (the check's references)

#: Operations whose results depend on the order they sum in, by the name Dynamo's
#: graph calls them (a function's, a method's or a module's class).
ACCUMULATING = frozenset(
    "sum nansum mean nanmean prod cumsum cumprod logcumsumexp var std var_mean std_mean norm "
    "vector_norm matrix_norm dist logsumexp softmax log_softmax cross_entropy nll_loss "
    "matmul mm bmm addmm addmv mv dot vdot einsum tensordot linear bilinear baddbmm addbmm "
    "conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d "
    "layer_norm group_norm batch_norm instance_norm rms_norm scaled_dot_product_attention "
    "Linear Bilinear Conv1d Conv2d Conv3d LayerNorm GroupNorm BatchNorm1d BatchNorm2d "
    "RMSNorm Softmax LogSoftmax MultiheadAttention "
    "__matmul__ __rmatmul__ trapezoid cumulative_trapezoid".split()
)


def accumulates(gm: torch.fx.GraphModule) -> bool:
    """Whether Dynamo's graph calls an operation that sums in some order."""
    for node in gm.graph.nodes:
        if node.op == "call_method":
            name = node.target
        elif node.op == "call_function":
            name = getattr(node.target, "__name__", "")
        elif node.op == "call_module":
            name = type(gm.get_submodule(node.target)).__name__
        else:
            continue
        if name in ACCUMULATING:
            return True
    return False


def check(
    got: Any,
    expected: Any,
    *,
    accumulates: bool,
    inputs: list[Any],
    in_float32: Callable[[], Any] | None = None,
    in_float64: Callable[[], Any] | None = None,
) -> None:
    """Raise :class:`CompileError` where ``got`` (the artifact's result) differs
    from ``expected`` (eager's): its structure, a leaf's type, a tensor's shape or
    dtype, or its values beyond the tolerances above. ``in_float32`` runs the
    program eager with its half-precision floats in float32 (:func:`run_in_float32`),
    ``in_float64`` with all its floats in float64 (:func:`run_in_float64`); each is
    called only where ``got`` differs from what came before it."""
    problem = _first_difference(got, expected, accumulates, inputs)
    if problem is None:
        return
    reference = in_float32() if in_float32 is not None else None
    if reference is not None:
        rounded = _rounded_like(reference, expected)
        if rounded is not None and _first_difference(got, rounded, accumulates, inputs) is None:
            return
    exact = in_float64() if in_float64 is not None else None
    if exact is not None and as_close_to_float64(got, expected, exact, inputs):
        return
    raise CompileError(problem)


def as_close_to_float64(got: Any, expected: Any, exact: Any, inputs: list[Any]) -> bool:
    """Whether ``got`` (the artifact's result) is as close to ``exact`` (the program
    in float64) as ``expected`` (eager's) is, as the module's docstring says: the
    same structure, shapes and dtypes, every result that is not a float tensor equal
    to eager's, and each float one within ``torch._dynamo.utils.same``'s bound for
    ``fp64_ref`` and :func:`_misses`' count, all three scaled by the float64
    result's largest magnitude."""
    from torch._dynamo.utils import same

    got_leaves, got_spec = pytree.tree_flatten(got)
    want_leaves, want_spec = pytree.tree_flatten(expected)
    exact_leaves, exact_spec = pytree.tree_flatten(exact)
    if not got_spec == want_spec == exact_spec:
        return False
    input_dtypes = [
        v.dtype for v in inputs if isinstance(v, torch.Tensor) and v.is_floating_point()
    ]
    for a, b, c in zip(got_leaves, want_leaves, exact_leaves, strict=True):
        if not (isinstance(b, torch.Tensor) and b.is_floating_point()):
            if _difference(a, b, False, 1, 0.0, []) is not None:
                return False
            continue
        if not (
            isinstance(a, torch.Tensor)
            and isinstance(c, torch.Tensor)
            and a.shape == b.shape == c.shape
            and a.dtype == b.dtype
        ):
            return False
        scale = _magnitude(c) or 1.0
        a, b, c = ((t.detach().to(torch.float64) / scale).to(t.dtype) for t in (a, b, c))
        narrowest = _narrowest(b.dtype, input_dtypes)
        tol = _default_tolerances(narrowest)[0]
        if not same(b, a, fp64_ref=c, tol=tol, equal_nan=True, log_error=lambda *_: None):
            return False
        if _misses(a, c, narrowest) > FLOAT64_MULTIPLIER * _misses(b, c, narrowest):
            return False
    return True


#: How many times eager's error against float64 the artifact's may be: torchbench's
#: multiplier for half precision, for the root mean square error and for the count
#: of elements that miss the float64 result beyond rounding.
FLOAT64_MULTIPLIER = 3


def _misses(t: torch.Tensor, exact: torch.Tensor, dtype: torch.dtype) -> int:
    """The elements of ``t`` (scaled, as ``exact``) beyond ``dtype``'s rounding of the
    float64 result: ``rtol`` of the element plus two steps of the largest magnitude
    (1). A root mean square error within bounds can hide a few large errors or many
    small ones, which this count does not: a result scaled by 5%, or a few rows of
    garbage, miss at many more elements than the near ties eager's rounding tips."""
    rtol, atol = _default_tolerances(dtype)
    bound = atol + 2 * torch.finfo(dtype).eps + rtol * exact.abs()
    error = (t.to(torch.float64) - exact).abs()
    return int((error.nan_to_num(nan=math.inf) > bound).logical_and(~exact.isnan()).sum())


def _rounded_like(reference: Any, expected: Any) -> Any:
    """``reference`` with each tensor converted to the dtype of ``expected``'s leaf
    at the same place; ``None`` where the structures differ."""
    leaves, spec = pytree.tree_flatten(reference)
    want_leaves, want_spec = pytree.tree_flatten(expected)
    if spec != want_spec:
        return None
    rounded = [
        v.to(w.dtype) if isinstance(v, torch.Tensor) and isinstance(w, torch.Tensor) else v
        for v, w in zip(leaves, want_leaves, strict=True)
    ]
    return pytree.tree_unflatten(rounded, spec)


def _first_difference(got: Any, expected: Any, accumulates: bool, inputs: list[Any]) -> str | None:
    """The message for the first way ``got`` differs from ``expected``, or ``None``."""
    got_paths, got_spec = pytree.tree_flatten_with_path(got)
    want_leaves, want_spec = pytree.tree_flatten(expected)
    if got_spec != want_spec:
        return f"ifx.compile: the artifact returns {got_spec} where eager returns {want_spec}"
    tensors = [v for v in (*inputs, *want_leaves) if isinstance(v, torch.Tensor)]
    longest = max([v.numel() for v in tensors], default=1)
    input_scale = max(
        [_magnitude(v) for v in inputs if isinstance(v, torch.Tensor) and v.is_floating_point()],
        default=0.0,
    )
    input_dtypes = [
        v.dtype for v in inputs if isinstance(v, torch.Tensor) and v.is_floating_point()
    ]
    for (path, a), b in zip(got_paths, want_leaves, strict=True):
        problem = _difference(a, b, accumulates, longest, input_scale, input_dtypes)
        if problem:
            return (
                f"ifx.compile: the artifact's result{pytree.keystr(path)} on the example "
                f"differs from eager's: {problem}"
            )
    return None


def _magnitude(t: torch.Tensor) -> float:
    """The largest finite magnitude in ``t`` (0 for none)."""
    if not t.numel():
        return 0.0
    return t.detach().abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).max().item()


def _difference(
    a: Any,
    b: Any,
    accumulates: bool,
    longest: int,
    input_scale: float,
    input_dtypes: list[torch.dtype],
) -> str | None:
    if not isinstance(b, torch.Tensor):
        return None if type(a) is type(b) and a == b else f"{a!r}, eager {b!r}"
    if not isinstance(a, torch.Tensor):
        return f"a {type(a).__name__} where eager returns a tensor"
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{tuple(a.shape)}, eager {b.dtype}{tuple(b.shape)}"
    a, b = a.detach().cpu(), b.detach().cpu()
    if not (a.is_floating_point() or a.is_complex()):
        return None if torch.equal(a, b) else "other values"
    # Eager rounds intermediates to the inputs' dtype where Inductor keeps float32:
    # a float32 result of float16 inputs is as close as float16 allows.
    narrowest = _narrowest(b.dtype, input_dtypes)
    rtol, atol = _default_tolerances(narrowest)
    close = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    error = (a - b).abs()[~close].nan_to_num(nan=math.inf).max().item()
    if not (accumulates or narrowest.itemsize < 4) or not a.numel():
        return f"largest difference {error:.3g} (rtol {rtol:g}, atol {atol:g})"
    scale = _magnitude(b)
    bound = atol
    if accumulates:
        accumulated = torch.finfo(_accumulation_dtype(b.dtype)).eps
        bound += 10 * accumulated * math.sqrt(longest) * scale
    if narrowest.itemsize < 4:
        bound += 2 * torch.finfo(narrowest).eps * max(scale, input_scale)
    same_nans = torch.equal(a.isnan(), b.isnan()) and torch.equal(a.isinf(), b.isinf())
    if same_nans and error <= bound:
        return None
    kind = "accumulation" if accumulates else "rounding"
    return f"largest difference {error:.3g}, beyond the {kind} bound {bound:.3g}"


def _narrowest(dtype: torch.dtype, input_dtypes: list[torch.dtype]) -> torch.dtype:
    """Of ``dtype`` (a result's) and the inputs' float dtypes, the one with the
    loosest tolerance."""
    candidates = [dtype, *(d for d in input_dtypes if not dtype.is_complex)]
    return max(candidates, key=lambda d: _default_tolerances(d)[0])


#: ``torch.testing.assert_close``'s (rtol, atol) by dtype, as its documentation lists them.
TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-3, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


def _default_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(dtype, (1.3e-6, 1e-5))


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype in (torch.float64, torch.complex128) else torch.float32
