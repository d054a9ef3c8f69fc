"""Triton kernels over lengths with unbacked symbols, under the FX wrapper: two
places where upstream's kernel text is wrong for such a length.

- A persistent reduction over a length whose upper bound is 1 (``x[idx].sum()``
  with ``idx`` from a mask of one element) drops its mask on torch 2.10 and 2.11:
  ``_has_constant_mask`` finds the length a multiple of its block of 1, so the
  kernel loads element 0 of an empty selection, an illegal memory access on a GPU.
  Newer releases keep every mask of a block narrower than a warp.
- The split scan's look-back helper takes the block's index in the kernel's index
  dtype, and does not compile with int64 (below).

And one place where upstream's block is too small: the split scan's (below).

And one in its launcher: a 2-D kernel whose y range is an unbacked row count
(a selection's rows, tiled) divides by zero for an empty selection on torch 2.10
and 2.11 (:func:`launching_empty_yz_overflow_grids`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch._inductor import config
from torch._inductor.runtime.runtime_utils import next_power_of_2
from torch._inductor.utils import upcast_compute_type
from torch._inductor.virtualized import V
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from .. import _compat
from .reductions import graph_compiles_with_fx_wrapper, length_bound

#: Elements per block of a split scan under the FX wrapper, by the bits of the
#: type it scans in. Each block looks back over its predecessors' sums, a chain
#: that upstream's block of 2048 makes 32k links long at 64M elements; a 64-bit
#: link keeps value and flag in separate words with a fence between them, so it
#: costs the most. Measured on an H100 (``benchmarks/scan_tuning.py``,
#: ``results/2026-12-06-h100-scan-tuning.md``): at 4M and 64M elements, a gathered
#: int64 cumsum took 1.38 and 1.40 times eager's with 2048, 1.20 and 1.05 with
#: 16384; a float32 one 1.18 and 0.95 with 2048, 1.11 and 0.82 with 4096.
SCAN_BLOCK = {64: 1 << 14, 32: 1 << 12}
#: Each split-scan kernel's block, between its scan (which chooses it) and its
#: source (whose heuristic launches it).
_BLOCKS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


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


def scan_block(kernel: Any, dtype: torch.dtype) -> int | None:
    """The least elements per block for a split scan in ``dtype`` over the kernel's
    length (:data:`SCAN_BLOCK`), or None for upstream's: for a length whose bound is
    below it, or outside the FX wrapper. A kernel's first scan chooses for all."""
    chosen = _BLOCKS.get(kernel)
    if chosen is not None or not graph_compiles_with_fx_wrapper():
        return chosen
    block = SCAN_BLOCK[64 if upcast_compute_type(dtype).itemsize >= 8 else 32]
    length = V.graph.sizevars.simplify(kernel.numels["r0_"])
    bound = length_bound(length) if isinstance(length, sympy.Expr) else int(length)
    if bound is not None and bound < block:
        return None
    block = max(block, next_power_of_2(config.triton.min_split_scan_rblock))
    _BLOCKS[kernel] = block
    return block


def scanning_split(scan: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``TritonSplitScanKernel.scan`` with both of the wrappers below (one
    overlay row per attribute); ``__wrapped__`` is upstream's, as for every row."""
    wrapper = scanning_in_long_blocks(scanning_with_a_32_bit_block_index(scan))
    wrapper.__wrapped__ = scan  # type: ignore[attr-defined]
    return wrapper


def scanning_in_long_blocks(scan: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``TritonSplitScanKernel.scan``: under the FX wrapper, a split scan over
    a length that may exceed :data:`SCAN_BLOCK` records that many elements as its
    least block (:func:`scan_block`), which :func:`launching_long_scan_blocks`
    writes into the kernel's source.

    The look-back workspace keeps upstream's size, a slot per block of
    ``config.triton.min_split_scan_rblock`` (256) elements, which the scan reads
    here: a launch of longer blocks uses fewer of its slots, and one that
    coordinate descent tuning (``max-autotune``) shortens below our block, which it
    may, still has a slot for each of its blocks above upstream's least, as
    upstream's own launches have. A workspace sized by our block would overflow."""

    @functools.wraps(scan)
    def wrapper(self: Any, dtypes: Any, combine_fn: Any, values: Any) -> Any:
        scan_block(self, dtypes[0])
        return scan(self, dtypes, combine_fn, values)

    return wrapper


def launching_long_scan_blocks(codegen_kernel: Callable[..., str]) -> Callable[..., str]:
    """Wrap ``TritonSplitScanKernel.codegen_kernel``: a kernel whose scan chose a
    block (:func:`scanning_in_long_blocks`) writes it into its heuristic's
    ``inductor_meta`` as ``min_split_scan_rblock``, the least block it launches."""

    @functools.wraps(codegen_kernel)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> str:
        block = _BLOCKS.get(self)
        if block is None:
            return codegen_kernel(self, *args, **kwargs)
        with config.patch({"triton.min_split_scan_rblock": block}):
            return codegen_kernel(self, *args, **kwargs)

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
