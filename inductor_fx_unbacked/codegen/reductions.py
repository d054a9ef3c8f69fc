"""Reductions over a data-dependent length, in two stages, for the FX wrapper.

Upstream never splits a reduction whose length has an unbacked symbol
(``x[x > 0].sum()``): ``Reduction.num_splits`` gives up on a length it cannot
hint, so one program reduces the whole length. Everything after that choice
already handles a symbolic length (``create_multilayer``, the masks of
``_multilayer_wrap_loader``), so these wrappers only make the choice:

- ``num_splits`` asks upstream's own heuristic again, with the length's
  value-range upper bound as its size (:func:`length_bound`), for a constant
  number of programs, where the length has a bound. Sums, Welford reductions
  and online softmax all ask ``num_splits``. For a static length over rows of
  an unbacked number (a softmax over the rows of ``x[mask]``) it asks for the
  hint (``INNER``, ``OUTER``) with the rows at their fallback hint, and splits
  nothing: with ``DEFAULT``, a row of 1024 elements is never persistent.
- ``create`` lays an INNER split of a length that may exceed ``CHUNK`` out as
  ``CeilDiv(u0, CHUNK)`` programs of a fixed ``CHUNK`` elements, so the first
  stage's inner length is static and its kernel is tuned for the length it
  reduces; the number of programs follows the length, bounded or not. OUTER
  splits keep upstream's constant count of programs, each over
  ``CeilDiv(u0, split)`` elements: chunks of an OUTER reduction would read
  across rows.
- ``dynamic_reshape_indexer`` flattens sizes with unbacked symbols itself,
  which releases that hint them without a fallback cannot (``docs/upstream.md``).
- ``BaseSchedulerNode.decide_inplace_update`` never lets a reduction kernel
  store into a buffer that it loads (an ``in_out_ptr``): Triton (3.6, H200)
  compiles a looped reduction whose tile is small (``XBLOCK=4, R0_BLOCK=4``)
  and that loads, updates and stores a buffer in place into a kernel whose sum
  reads some of the updated values, while the stored buffer is right. Tiles
  that small are what the kernels of reductions over short unbacked lengths
  get, and the fusions above make such kernels (``s = -x[m]; s.sum(0)``).
- ``GraphLowering.get_dep_size_hint`` sizes a buffer with an unbacked size as
  upstream hints such sizes elsewhere (``unbacked_symint_fallback``), not as 0
  bytes. The scheduler refuses any fusion of a reduction whose shared data
  scores 0 ("no shared data"), so a softmax or a layer norm over the rows of
  ``x[mask]`` ran as three or four kernels, each reading the rows again.

They change nothing unless the graph compiles with an FX wrapper codegen
(inside ``fx_backend``): the Python and C++ wrappers keep upstream's reductions.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from torch._inductor import config
from torch._inductor.ir import Reduction, ReductionHint
from torch._inductor.utils import sympy_product
from torch._inductor.virtualized import V
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils._sympy.functions import CeilDiv, FloorDiv, ModularIndexing
from torch.utils._sympy.value_ranges import bound_sympy

from .. import _compat
from . import arg_reductions
from .wrapper_fxir import registered_wrapper_is_fx

#: The size the heuristic is asked about, for the chunk layout, where a length
#: has no upper bound.
UNBOUNDED_LENGTH_HINT = 1 << 24
#: The largest upper bound taken for one: more elements than any one device holds
#: bytes. Fake tensors bound a selection from a tensor of symbolic size by the
#: int64 limit, which bounds nothing.
LARGEST_BOUND = 1 << 40
#: Elements per first-stage program of an INNER split: a selection of 300k
#: elements is 19 programs; 64M elements, 4096 partial results for the second.
CHUNK = 1 << 14


def length_bound(length: sympy.Expr) -> int | None:
    """The value-range upper bound of ``length`` where it bounds a size (up to
    :data:`LARGEST_BOUND`): the largest length the kernels must serve; else None."""
    ranges = V.graph.sizevars.shape_env.var_to_range
    bounds = {symbol: ranges[symbol] for symbol in length.free_symbols if symbol in ranges}
    upper = bound_sympy(length, bounds).upper
    if isinstance(upper, sympy.Integer) and upper <= LARGEST_BOUND:
        return max(int(upper), 1)
    return None


def graph_compiles_with_fx_wrapper(device: torch.device | None = None) -> bool:
    """Whether the graph being lowered gets an FX wrapper codegen: the one
    registered for its device type, the one that is not the CPU where it has one
    (as ``GraphLowering.init_wrapper_code`` chooses)."""
    graph = V.graph
    device_types = set(graph.device_types) | ({device.type} if device is not None else set())
    device_type = next((d for d in sorted(device_types) if d not in ("cpu", "meta")), "cpu")
    return registered_wrapper_is_fx(
        device_type, cpp_wrapper=graph.cpp_wrapper, fx_wrapper=graph.fx_wrapper
    )


def splits_unbacked_length(
    device: torch.device, length: Any, ranges: Sequence[Any], reduction_type: str
) -> bool:
    """Whether a reduction is one these wrappers split: over a length with an
    unbacked symbol, into outputs of a length without one, under the FX wrapper."""
    return (
        # A scan has a split kernel of its own; a dot is a matmul; an arg
        # reduction keeps its index in one program (upstream asserts no split),
        # and is chunked by ``arg_reductions.py`` instead.
        reduction_type != "scan"
        and reduction_type != "dot"
        and not reduction_type.startswith(("argmax", "argmin"))
        and splits_over_unbacked_length(device, length, ranges)
    )


def splits_over_unbacked_length(device: torch.device, length: Any, ranges: Sequence[Any]) -> bool:
    """Whether a reduction of any type over ``length`` into ``ranges`` is split here:
    the length has an unbacked symbol and the outputs none, under the FX wrapper."""
    return (
        config.split_reductions
        and not _compat.strict_reduction_numerics()
        and bool(free_unbacked_symbols(length))
        and not free_unbacked_symbols(ranges)
        and graph_compiles_with_fx_wrapper(device)
    )


def splits_unbacked_scan(
    device: torch.device, length: Any, ranges: Sequence[Any], call: dict[str, Any]
) -> bool:
    """Whether a scan (``cumsum``, ``cumprod``, ``logcumsumexp``) over a length with
    an unbacked symbol, of rows of a static number, under the FX wrapper, gets
    upstream's split kernel: the decoupled look-back scan that upstream gives a
    long static length (``TritonSplitScanKernel``), its grid ``CeilDiv(length,
    RBLOCK)`` programs. Upstream keeps such a scan in one program, which walks the
    whole length alone (a million elements: ten times eager's time)."""
    return (
        call["reduction_type"] == "scan"
        and config.split_reductions
        and not _compat.strict_reduction_numerics()
        and bool(free_unbacked_symbols(length))
        and not free_unbacked_symbols(ranges)
        and graph_compiles_with_fx_wrapper(device)
    )


def hints_unbacked_rows(call: dict[str, Any]) -> bool:
    """Whether ``num_splits`` (arguments ``call``) is asked about a static length
    over rows whose number has an unbacked symbol, under the FX wrapper: upstream
    then gives up on the hint (``DEFAULT``), which keeps a reduction over a row of
    a few hundred elements from being persistent."""
    return (
        bool(free_unbacked_symbols(call["ranges"]))
        and not free_unbacked_symbols(call["reduction_numel"])
        and call["reduction_type"] != "scan"
        and graph_compiles_with_fx_wrapper(call["device"])
    )


def _function(descriptor: Any) -> Callable[..., Any]:
    return getattr(descriptor, "__func__", descriptor)


def _binder(upstream: Callable[..., Any]) -> Callable[..., dict[str, Any]]:
    """A function that names the arguments of a call of ``upstream`` as upstream
    does, defaults included: lowerings pass them by position and by keyword."""
    signature = inspect.signature(upstream)

    def bind(*args: Any, **kwargs: Any) -> dict[str, Any]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    return bind


def splitting_unbacked_lengths(num_splits: Any) -> staticmethod:
    """Wrap ``Reduction.num_splits`` (a staticmethod): where upstream keeps a
    reduction over an unbacked length in one program, the split that upstream
    chooses for the length's upper bound; where it gives rows of an unbacked
    number no hint, the hint it gives them at their fallback hint.

    The split is a constant number of programs, each over ``CeilDiv(length,
    split)`` elements, chosen for the longest length; without a bound, that
    choice would be a guess paid at every length, so the reduction stays whole
    (an INNER one is chunked by ``create`` instead)."""
    upstream = _function(num_splits)
    bind = _binder(upstream)

    @functools.wraps(upstream)
    def wrapper(*args: Any, **kwargs: Any) -> tuple[ReductionHint, Any]:
        hint, split = upstream(*args, **kwargs)
        call = bind(*args, **kwargs)
        length = call["reduction_numel"]
        if hint == ReductionHint.DEFAULT and split == 1 and hints_unbacked_rows(call):
            # The hint for the rows at their fallback hint; no split of a reduction
            # whose number of rows is unknown.
            sizevars, fallback = V.graph.sizevars, config.unbacked_symint_fallback
            ranges = [
                _compat.optimization_hint(sizevars, size, fallback=fallback)
                for size in call["ranges"]
            ]
            return upstream(**{**call, "ranges": ranges})[0], 1
        if split == 1 and splits_unbacked_scan(call["device"], length, call["ranges"], call):
            # Any split above 1 makes ``Scan.create`` choose its split kernel, whose
            # programs follow the length at run time: asked about the longest length.
            bound = length_bound(length)
            at_bound = sympy.Integer(UNBOUNDED_LENGTH_HINT if bound is None else bound)
            bounded_hint, bounded_split = upstream(**{**call, "reduction_numel": at_bound})
            return (bounded_hint, bounded_split) if bounded_split > 1 else (hint, split)
        if split != 1 or not splits_unbacked_length(
            call["device"], length, call["ranges"], call["reduction_type"]
        ):
            return hint, split
        bound = length_bound(length)
        if bound is None:
            return hint, split
        bounded_hint, bounded_split = upstream(**{**call, "reduction_numel": sympy.Integer(bound)})
        # -1 reuses the producer's ranges when their hint equals the length's:
        # a comparison of static lengths, which the bound only stands in for.
        if bounded_split == -1:
            return hint, split
        return bounded_hint, bounded_split

    return staticmethod(wrapper)


def chunking_unbacked_inner_reductions(create: Any) -> classmethod:
    """Wrap ``Reduction.create`` (a classmethod): an INNER split of a reduction
    over an unbacked length that may exceed ``CHUNK`` elements becomes
    ``CeilDiv(length, CHUNK)`` first-stage programs of ``CHUNK`` elements each,
    the last one masked. Their number follows the length, so a length without a
    bound is split too, as upstream splits one of ``UNBOUNDED_LENGTH_HINT``."""
    upstream = _function(create)
    bind = _binder(upstream)

    @functools.wraps(upstream)
    def wrapper(cls: type[Reduction], *args: Any, **kwargs: Any) -> Any:
        call = bind(cls, *args, **kwargs)
        length = V.graph.sizevars.simplify(sympy_product(call["reduction_ranges"]))
        # Welford and online-softmax reductions have their own ``create``, and
        # split through ``num_splits`` alone.
        if cls is Reduction and splits_unbacked_length(
            call["device"], length, call["ranges"], call["reduction_type"]
        ):
            bound = length_bound(length)
            # A static length: the heuristic as upstream asks it, unwrapped.
            hint, split = cls.num_splits(
                *(call[name] for name in _NUM_SPLITS_ARGUMENTS),
                sympy.Integer(UNBOUNDED_LENGTH_HINT if bound is None else bound),
                call["input_node"],
            )
            # Up to CHUNK elements are one program at most: upstream's split then.
            if split > 1 and hint == ReductionHint.INNER and (bound is None or bound > CHUNK):
                return _chunked(cls, call, length, split, hint)
        elif (
            cls is Reduction
            and arg_reductions.is_chunked(call["reduction_type"], call["src_dtype"])
            and splits_over_unbacked_length(call["device"], length, call["ranges"])
            and ((bound := length_bound(length)) is None or bound > CHUNK)
        ):
            default = cls.default_accumulator(call["reduction_type"], call["src_dtype"])
            programs, loader = _chunk_loader(cls, call, length, default)
            return arg_reductions.chunked(cls, call, programs, loader, CHUNK, upstream)
        return upstream(cls, *args, **kwargs)

    return classmethod(wrapper)


#: What ``create`` passes on to ``num_splits`` before the length, in its order.
_NUM_SPLITS_ARGUMENTS = (
    "device",
    "dst_dtype",
    "src_dtype",
    "inner_fn",
    "ranges",
    "reduction_ranges",
    "reduction_type",
)


def _chunked(
    cls: type[Reduction],
    call: dict[str, Any],
    length: sympy.Expr,
    split: int,
    hint: ReductionHint,
) -> Any:
    """The two stages of ``call`` (``create``'s arguments): ``CeilDiv(length, CHUNK)``
    programs of ``CHUNK`` elements, then the reduction of their partial results.
    A hint the caller passed wins over ``num_splits``' ``hint``, as in upstream's
    ``create``."""
    if call["reduction_hint"] != ReductionHint.DEFAULT:
        hint = call["reduction_hint"]
    default = cls.default_value(call["reduction_type"], call["dst_dtype"])
    programs, loader = _chunk_loader(cls, call, length, default)
    return cls.create_multilayer_helper(
        call["device"],
        call["dst_dtype"],
        call["src_dtype"],
        loader,
        call["ranges"],
        call["reduction_ranges"],
        [*call["ranges"], programs],
        [sympy.Integer(CHUNK)],
        call["reduction_type"],
        split,
        hint,
    )


def _chunk_loader(
    cls: type[Reduction], call: dict[str, Any], length: sympy.Expr, default: Any
) -> tuple[sympy.Expr, Callable[..., Any]]:
    """The number of ``CHUNK``-element chunks of ``length``, and the loader of
    ``call``'s reduction (``create``'s arguments) over them: element ``r`` of chunk
    ``c`` is element ``c * CHUNK + r`` of the length, ``default`` past its end."""
    chunk = sympy.Integer(CHUNK)
    programs = CeilDiv(length, chunk)
    loader = _compat.multilayer_wrap_loader(
        cls,
        call["inner_fn"],
        call["reduction_ranges"],
        length,
        programs,
        chunk,
        default,
        call["input_node"],
    )
    return programs, loader


def unflattening_unbacked_sizes(dynamic_reshape_indexer: Any) -> classmethod:
    """Wrap ``View.dynamic_reshape_indexer`` (a classmethod): the flattening of
    sizes with unbacked symbols into one length, which a split reduction loads
    through, indexed row-major."""
    upstream = _function(dynamic_reshape_indexer)

    @functools.wraps(upstream)
    def wrapper(
        cls: type,
        old_size: Sequence[Any],
        new_size: Sequence[Any],
        dense_dim: int | None = None,
    ) -> Callable[[Sequence[Any]], Sequence[Any]]:
        if (
            dense_dim is None
            and len(new_size) == 1
            and free_unbacked_symbols(list(old_size))
            and V.graph.sizevars.simplify(sympy_product(old_size) - new_size[0]) == 0
            and graph_compiles_with_fx_wrapper()
        ):
            return functools.partial(_unflatten, list(old_size))
        return upstream(cls, old_size, new_size, dense_dim)

    return classmethod(wrapper)


def sizing_unbacked_dependencies(get_dep_size_hint: Any) -> Callable[..., int]:
    """Wrap ``GraphLowering.get_dep_size_hint``: where upstream gives a buffer whose
    size has an unbacked symbol 0 bytes, its size at the symbols' fallback hint.

    The hint only ranks and permits fusions (the score of shared data); it
    decides nothing about correctness, and it is what the kernels' size hints
    already assume for the same symbols."""

    @functools.wraps(get_dep_size_hint)
    def wrapper(self: Any, dep: Any, count_bytes: bool = True) -> int:
        size = get_dep_size_hint(self, dep, count_bytes)
        if size or not graph_compiles_with_fx_wrapper():
            return size
        try:
            numel = dep.get_numel()
            if not free_unbacked_symbols(numel):
                return size
            size = _compat.optimization_hint(
                self.sizevars, numel, fallback=config.unbacked_symint_fallback
            )
            if count_bytes:
                size *= self.get_dtype(dep.name).itemsize
        except (KeyError, NotImplementedError):  # a buffer without a layout, as upstream
            return 0
        self.dep_size_hint_cache[(dep, count_bytes)] = size
        return size

    return wrapper


def keeping_reductions_out_of_place(decide: Callable[[Any], None]) -> Callable[[Any], None]:
    """Wrap ``BaseSchedulerNode.decide_inplace_update``: under the FX wrapper, no
    node of a reduction kernel reuses the buffer it reads for the one it writes.

    Upstream makes ``buf = -buf`` an in-place update (``in_out_ptr0``) wherever the
    read and the write index the same element, reduction kernels included. Triton
    may load such a buffer again after the kernel's own store to it, where the
    loaded value feeds two layouts (the store's and the reduction's): on an H200
    a looped sum over a ``(4, 4)`` tile of an in-place negation summed the
    updated values of the last rows, on every call (``docs/upstream.md``).
    Out of place, the kernel writes a buffer it never reads, so no reordering of
    its loads and stores can change what they read; the cost is one allocation
    of the updated buffer, which the in-place update saved."""

    @functools.wraps(decide)
    def wrapper(self: Any) -> None:
        features = getattr(V.kernel, "features", None)
        if features is not None and features.is_reduction() and graph_compiles_with_fx_wrapper():
            return
        decide(self)

    return wrapper


def _unflatten(sizes: list[Any], index: Sequence[Any]) -> list[Any]:
    """The row-major index into ``sizes`` of the flat index ``index[0]``."""
    (flat,) = index
    strides = [sympy_product(sizes[position + 1 :]) for position in range(len(sizes))]
    return [
        FloorDiv(flat, stride) if position == 0 else ModularIndexing(flat, stride, size)
        for position, (size, stride) in enumerate(zip(sizes, strides))
    ]
