"""Indexing by a boolean mask as ``nonzero`` and a gather, for the FX wrapper.

Inductor lowers ``x[mask]`` (``aten.index.Tensor`` with a ``bool`` or ``uint8``
index) to a fallback: ATen's ``index``, which runs ``nonzero`` itself and then
writes the selected rows into a new buffer, which every consumer reads again.
A softmax over the selected rows reads them three more times; a column sum
over them, once more. Upstream's lowering of the same indexing with ``int64``
indices is a gather that fuses into its consumers (the selected rows are read
where they are used and never written).

While the graph compiles for an FX wrapper codegen (inside ``fx_backend``) and
the mask selects single elements or rows of at least ``MIN_ROW`` elements
(:func:`gathers_rows`),
the decomposition here writes ``x[mask]`` as ATen does inside ``index``: each mask
of ``k`` dimensions becomes the ``k`` columns of ``nonzero(mask)``, which index
the same dimensions of ``x``. ``nonzero`` is Inductor's own fallback and binds
the unbacked symbol of the selection's length, as ``index`` did. A mask's
``nonzero`` is traced once per graph (:func:`nonzero_once`): ``x[m]``, ``y[m]``
and ``m.nonzero()`` share one, and one host sync. Other wrappers keep upstream's
table.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._inductor import config, decomposition
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.utils.weak import WeakIdKeyDictionary

from .wrapper_fxir import registered_wrapper_is_fx

aten = torch.ops.aten
_MASK_DTYPES = (torch.bool, torch.uint8)


def _is_mask(index: torch.Tensor | None) -> bool:
    return index is not None and index.dtype in _MASK_DTYPES


#: Elements of a selected row, at least, for the gather to fuse (1 KiB of float32).
MIN_ROW = 256


def gathers_rows(x: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> bool:
    """Whether the indexing selects single elements, or rows of ``MIN_ROW``
    elements or more: the dimensions of ``x`` after those the indices cover, of
    static sizes.

    A gathered row is read as whole cache lines where it is used, so fusing the
    gather costs nothing over reading a copy: a softmax or a layer norm over the
    selected rows is one kernel that reads each row once. Single elements
    gathered into a reduction over the selection run in the chunks of an INNER
    split (``reductions.CHUNK``), which ATen's copy would have read anyway. Short
    rows gathered into a reduction over the rows (an OUTER one, a constant number
    of programs) wait on dependent loads: on an H200, column sums over the
    selected rows of 64 took 366 µs fused against 237 for ATen's copy and a
    reduction over it."""
    covered = sum(1 if not _is_mask(index) else index.dim() for index in indices)
    row = x.shape[covered:]
    if not all(isinstance(size, int) for size in row):
        return False
    elements = math.prod(row)
    return elements == 1 or elements >= MIN_ROW


def selects_from_a_dimension_of_one(
    x: torch.Tensor, indices: Sequence[torch.Tensor | None]
) -> bool:
    """Whether a mask covers a dimension of ``x`` of static size 1.

    Inductor's indirect indexing into a dimension of size 1 is the constant 0: the
    gathered element then no longer depends on the selection's position, so its
    load, and every load indexed by its value, loses the selection's bound mask.
    Fused into a consumer that indexes with it (``gather(t, 0, idx[mask])``), an
    empty selection would still read ``t`` at the masked-out element's index (a
    padding label, -1, 10**12). ATen's ``index`` writes such a selection out
    first, where each element is read only for a position that exists."""
    dim = 0
    for index in indices:
        covered = 1 if not _is_mask(index) else index.dim()
        if _is_mask(index) and any(
            isinstance(size, int) and size == 1 for size in x.shape[dim : dim + covered]
        ):
            return True
        dim += covered
    return False


def index_by_masks(x: torch.Tensor, indices: Sequence[torch.Tensor | None]) -> Any:
    """``aten.index.Tensor(x, indices)`` with each mask as the columns of its
    ``nonzero``; ``NotImplemented`` (upstream's path) without a mask, or where the
    graph does not compile for an FX wrapper."""
    if not any(_is_mask(index) for index in indices) or not registered_wrapper_is_fx(
        x.device.type, cpp_wrapper=config.cpp_wrapper, fx_wrapper=config.fx_wrapper
    ):
        return NotImplemented
    if not gathers_rows(x, indices) or selects_from_a_dimension_of_one(x, indices):
        return NotImplemented
    expanded: list[torch.Tensor | None] = []
    for index in indices:
        if not _is_mask(index):
            expanded.append(index)
            continue
        # Dynamo ran ``index`` itself on fake tensors first, which checked each
        # mask's shape against the dimensions it indexes.
        expanded.extend(aten.nonzero.default(index).unbind(1))
    return aten.index.Tensor(x, expanded)


#: The ``nonzero`` traced for each mask: ``mask -> (trace, mask's version, nonzero)``,
#: the trace as a weak reference to its proxy mode. A weak key: an entry goes with
#: the mask.
_NONZERO_OF: WeakIdKeyDictionary = WeakIdKeyDictionary()
#: Set while :func:`nonzero_once` traces the operator itself.
_TRACING = threading.local()


def nonzero_once(mask: torch.Tensor) -> Any:
    """``aten.nonzero(mask)``, traced once per mask: a second ``nonzero`` of the same
    tensor in the graph being traced is a copy of the first one's result.

    ``m.nonzero()`` next to ``x[m]`` (which :func:`index_by_masks` writes as
    ``nonzero(m)``'s columns), or ``torch.where(m)`` and ``y[m]``, otherwise run
    ``nonzero`` twice, and each copies its length to the host: two syncs where one
    is enough, and two unbacked symbols that the graph cannot tell are equal. Why
    the result cannot change:

    - ``nonzero`` is a function of its input's values alone;
    - the same tensor holds the same values: in the functional graphs that
      ``compile_fx`` traces a tensor is never written in place, and where one is
      (the version the tensor had then differs), ``nonzero`` is traced again;
    - the first result is a node of the same trace (another trace, or no trace at
      all, traces the operator);
    - the second result is a copy (``clone``, the first one's strides), so that no
      two results share memory as they do not in eager; a copy read only through
      views (a selection's columns) is inlined where they are read.

    ``NotImplemented`` (the operator as it is) where the graph does not compile for
    an FX wrapper codegen."""
    trace = get_proxy_mode()
    if (
        trace is None
        or getattr(_TRACING, "nonzero", False)
        or not registered_wrapper_is_fx(
            mask.device.type, cpp_wrapper=config.cpp_wrapper, fx_wrapper=config.fx_wrapper
        )
    ):
        return NotImplemented
    traced_in, version, found = _NONZERO_OF.get(mask, (None, None, None))
    if traced_in is not None and traced_in() is trace and version == mask._version:
        return aten.clone.default(found)
    _TRACING.nonzero = True
    try:
        found = aten.nonzero.default(mask)
    finally:
        _TRACING.nonzero = False
    _NONZERO_OF[mask] = (weakref.ref(trace), mask._version, found)
    return found


def select_decomp_table() -> dict[Any, Callable[..., Any]]:
    """What ``compile_fx`` decomposes with while the overlay is enabled: upstream's
    table (``torch._inductor.decomposition.select_decomp_table``), with
    :func:`index_by_masks` for ``aten.index.Tensor`` and :func:`nonzero_once` for
    ``aten.nonzero``, which leave every call they do not rewrite to upstream
    (``NotImplemented``). A module-level function, so that Inductor's cache keys,
    which pickle it, name it."""
    table = decomposition.select_decomp_table()
    ours = {aten.index.Tensor: index_by_masks, aten.nonzero.default: nonzero_once}
    # A later release's own decomposition of either wins.
    return {**table, **{op: fn for op, fn in ours.items() if op not in table}}
