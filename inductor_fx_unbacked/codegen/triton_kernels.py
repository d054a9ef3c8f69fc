"""Triton kernels over lengths with unbacked symbols, under the FX wrapper: two
places where upstream's kernel text is wrong for such a length.

- A persistent reduction over a length whose upper bound is 1 (``x[idx].sum()``
  with ``idx`` from a mask of one element) drops its mask on torch 2.10 and 2.11:
  ``_has_constant_mask`` finds the length a multiple of its block of 1, so the
  kernel loads element 0 of an empty selection, an illegal memory access on a GPU.
  Newer releases keep every mask of a block narrower than a warp.
- The split scan's look-back helper takes the block's index in the kernel's index
  dtype, and does not compile with int64 (below).

And one in its launcher: a 2-D kernel whose y range is an unbacked row count
(a selection's rows, tiled) divides by zero for an empty selection on torch 2.10
and 2.11 (:func:`launching_empty_yz_overflow_grids`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from torch._inductor.virtualized import V
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from .. import _compat
from .reductions import graph_compiles_with_fx_wrapper


def launching_empty_yz_overflow_grids(generate: Callable[..., None]) -> Callable[..., None]:
    """Wrap ``Grid2DWithYZOverflow.generate``, on releases where it divides by zero
    (``_compat.YZ_OVERFLOW_GRID_DIVIDES_BY_ZERO``): the launcher's y count gets the
    guard that newer releases give it. Such a grid's z count is the number of y
    ranges of at most the device's y limit, 0 exactly when the y range is empty;
    its y count divides by it. With the guard an empty y range launches no program,
    which is what the kernel computes for it; every other grid is unchanged.

    The same launcher serves Inductor's Python wrapper, which the guard only
    keeps from raising ``ZeroDivisionError`` on an empty range."""

    @functools.wraps(generate)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        generate(self, *args, **kwargs)
        if isinstance(self.y_grid, str):
            if self.mode == "python":
                self.y_grid = f"(0 if {_compat.YZ_DIVISOR} == 0 else {self.y_grid})"
            else:
                self.y_grid = f"({_compat.YZ_DIVISOR} == 0 ? 0 : {self.y_grid})"

    return wrapper


def masking_lengths_that_may_be_0(
    has_constant_mask: Callable[..., bool],
) -> Callable[..., bool]:
    """Wrap ``TritonKernel._has_constant_mask``: under the FX wrapper, a persistent
    reduction over a length with an unbacked symbol that may be 0 keeps its mask.
    A persistent reduction runs its block once whatever the length (a loop or a
    grid runs nothing for 0), so a block of ``max_block`` elements that divides the
    length still reads past an empty one."""

    @functools.wraps(has_constant_mask)
    def wrapper(self: Any, tree: Any) -> bool:
        if (
            tree.is_reduction
            and self.persistent_reduction
            and free_unbacked_symbols(tree.numel)
            and not V.graph.sizevars.statically_known_geq(tree.numel, 1)
            and graph_compiles_with_fx_wrapper()
        ):
            return False
        return has_constant_mask(self, tree)

    return wrapper


def scanning_with_a_32_bit_block_index(scan: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``TritonSplitScanKernel.scan``: under the FX wrapper, the look-back helper
    gets the block's index as int32. Upstream passes the program id in the kernel's
    index dtype; with int64 indices (a scan over an unbacked length has them) the
    helper's loop rebinds that index to an int32 constant, which Triton refuses to
    compile ("initial value for `test_target` is of type int64[], but the then block
    redefines it as int32[]"). A block's index is a grid index: it fits in int32."""

    @functools.wraps(scan)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.index_dtype == "tl.int32" or not graph_compiles_with_fx_wrapper():
            return scan(self, *args, **kwargs)
        # ``scan`` asks for the program id only for the helper's index argument.
        self.iteration_ranges_get_pid = lambda entry: f"tl.program_id({entry.grid_dim})"
        try:
            return scan(self, *args, **kwargs)
        finally:
            del self.iteration_ranges_get_pid

    return wrapper
