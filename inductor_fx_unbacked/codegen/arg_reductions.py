"""``argmax`` and ``argmin`` over a data-dependent length, in chunks, for the FX wrapper.

Upstream never splits an arg reduction (``Reduction.num_splits`` leaves them
whole on every release): ``x[mask].argmax()`` is one program that walks the
whole selection alone, as scans did before they were split. Here such a
reduction over a length ``n`` with an unbacked symbol, longer than one chunk,
is three reductions and a gather:

1. per chunk of ``chunk`` elements (``CeilDiv(n, chunk)`` programs, the last
   one masked with the reduction's own default): its best value (``max`` or
   ``min``) and the index of its first best element (``argmax`` or ``argmin``);
2. over the chunks' best values: the first chunk whose best is the best
   (``argmax`` or ``argmin``, one program over ``CeilDiv(n, chunk)`` values);
3. that chunk's start plus its first best element's index.

Why the result is the operator's, element for element:

- **Ties**: the operator returns the first index of the best value. The first
  chunk holding it is the one step 2 returns (the first of equal values), and
  within it step 1 returns the first index.
- **NaN**: the operator takes NaN as the best value (both ``argmax`` and
  ``argmin``); so do ``max``/``min`` and the arg reductions of Inductor, so the
  first chunk with a NaN wins and its first NaN is returned.
- **Masked tail**: positions past ``n`` in the last chunk hold the reduction's
  default (``-inf``/``inf``, or the integer extremes), which never beats a real
  element and ties only after every real one; every chunk holds at least one
  real element.
- **Empty**: with no chunk, step 2 returns the same default index as upstream's
  single program, and step 3 returns it unchanged without reading anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch._inductor.ir import Pointwise, Reduction, ReductionHint
from torch._inductor.virtualized import ops

#: The best value a chunk holds, for each arg reduction.
VALUE_REDUCTION = {"argmax": "max", "argmin": "min"}


def is_chunked(reduction_type: str, src_dtype: torch.dtype) -> bool:
    """Whether an arg reduction of ``src_dtype`` is one this module chunks (not of
    bools, for which ``max`` is ``any``)."""
    return reduction_type in VALUE_REDUCTION and src_dtype != torch.bool


def chunked(
    cls: type[Reduction],
    call: dict[str, Any],
    programs: sympy.Expr,
    loader: Callable[..., Any],
    chunk: int,
    create: Any,
) -> Any:
    """``call`` (``Reduction.create``'s arguments, an arg reduction) as the module
    docstring says, over ``programs`` chunks of ``chunk`` elements that ``loader``
    reads (the reduction's default past the length's end); ``create`` is upstream's
    ``create``, called directly for the reduction over the chunks (which must not
    be chunked again)."""
    kind = call["reduction_type"]
    device, src_dtype, ranges = call["device"], call["src_dtype"], list(call["ranges"])
    size = sympy.Integer(chunk)

    def per_chunk(reduction_type: str, dtype: torch.dtype) -> Any:
        result = cls.create(
            device=device,
            dst_dtype=dtype,
            src_dtype=src_dtype,
            inner_fn=loader,
            ranges=[*ranges, programs],
            reduction_ranges=[size],
            reduction_type=reduction_type,
            reduction_hint=ReductionHint.INNER,
        )
        result.realize()
        return result.make_loader()

    best = per_chunk(VALUE_REDUCTION[kind], src_dtype)
    first = per_chunk(kind, torch.int64)
    winner = create(
        cls,
        device=device,
        dst_dtype=torch.int64,
        src_dtype=src_dtype,
        inner_fn=lambda index, rindex: best([*index, rindex[0]]),
        ranges=ranges,
        reduction_ranges=[programs],
        reduction_type=kind,
    )
    winner.realize()
    winning_chunk = winner.make_loader()

    def index_of_the_best(index: Any) -> Any:
        block = winning_chunk(index)
        found = ops.lt(block, ops.index_expr(programs, torch.int64))
        # Read only where a chunk was found (there is none for an empty length).
        at = ops.indirect_indexing(
            ops.where(found, block, ops.constant(0, torch.int64)), programs, check=False
        )
        offset = ops.masked(found, lambda: first([*index, at]), 0)
        start = ops.mul(block, ops.constant(chunk, torch.int64))
        return ops.where(found, ops.add(start, offset), block)

    return Pointwise.create(
        device=device, dtype=call["dst_dtype"], inner_fn=index_of_the_best, ranges=ranges
    )
