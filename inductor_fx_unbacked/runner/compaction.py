"""ATen's stream compactions, as the lowered runner calls them: fewer launches, one copy.

``nonzero``, ``masked_select``, ``repeat_interleave`` (of repeats alone) and
``_unique2`` (``torch.unique``) are the externs that define most unbacked
sizes, and on a small input their host path is most of a data-dependent
program's time: ATen's ``nonzero`` launches
four cub kernels (two for the count, two for the selection) around the copy of
the count to the host, and queries the device's occupancy on each call;
``masked_select`` goes through ``nonzero`` and an index kernel;
``repeat_interleave`` through a ``cumsum``, ``.item()`` and a fill;
``unique`` sorts.

The runner calls these functions in their place. Each computes exactly what the
operator computes (the same values, sizes, strides and dtype) with two Triton
kernels and one scalar copied to the host:

1. per block of :data:`BLOCK` elements, the count of kept elements (the sum of
   the repeats, or ``-1`` where one is negative); the block that counts last (a
   ticket that the stream keeps at zero between launches finds it:
   :func:`run_with_ticket`) turns the counts into each block's start (an exclusive prefix sum) and
   writes the total after them (``-1`` where a count was negative);
2. after the host has read the total and allocated the result, each
   block writes its kept elements (their indices, their values, or each index
   repeated) at its start plus their rank in the block.

``unique`` of integers that span no more values than there are elements
needs no sort, for its inverse and counts either: :func:`unique` says how.

An input these kernels do not cover (another rank, a non-contiguous or empty
tensor, an explicit ``output_size``, negative repeats or one longer than
:data:`LONGEST_REPEAT`, a ``nonzero`` of more than :data:`LARGEST` elements)
goes to the operator itself, which also raises its own errors.

The kernels are compiled on their first call for each device, dtypes and
alignment, and stored with their binaries (``kernel_store.py``), so that later
processes load them as Inductor loads its own; they launch through Inductor's
static launcher. In Triton's interpreter they run through the JIT on CPU tensors
when :data:`INTERPRETED` is set (the tests set it): the CPU mode runs ATen's
operators otherwise, a hundred times faster there.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import torch
from torch._inductor.utils import clear_on_fresh_cache

from .. import _compat
from . import kernel_store

aten = torch.ops.aten

#: Elements per program of the count and compaction kernels.
BLOCK = 4096
#: Block counts per step of the prefix sum (one program).
CHUNK = 1024

_DTYPES = frozenset(
    (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    + (torch.float16, torch.bfloat16, torch.float32, torch.float64)
)
_LIMIT = 2**31 - BLOCK
#: The most elements ``nonzero`` takes; larger inputs go to ATen's operator. On a
#: small input ATen's host path is most of the time and the kernels win (1M
#: elements, H200); from 16M to 256M elements a call takes 1.18 of ATen's time
#: (H100, ``results/2026-12-07-h100-fused-selection-6ed36af.md``). ``masked_select``
#: (0.66 of ATen's at 64M and 256M), ``repeat_interleave`` (0.94 of ATen's at 4M to
#: 64M repeats of mean 4, 0.2 to 0.37 of mean 1) and ``unique`` (whose operator
#: sorts) take every size.
LARGEST = 1 << 22
#: The longest repeat the runner's ``repeat_interleave`` writes (its kernel loops
#: over a block's longest one, a whole block wide); longer ones go to ATen's.
LONGEST_REPEAT = 16
#: Whether the kernels also run on CPU tensors in Triton's interpreter.
INTERPRETED = False


@functools.cache
def _kernels() -> dict[str, tuple[Any, dict[str, int]]]:
    """Kernel and constexprs (its last parameters) by name, imported on first use."""
    from . import compaction_kernels as k

    kernels = (
        k.count_nonzero,
        k.sum_repeats,
        k.nonzero_indices,
        k.selected_values,
        k.repeated_indices,
        k.min_max,
        k.mark_values,
        k.distinct_values,
        k.count_values,
        k.distinct_counts,
        k.distinct_places,
        k.inverse_indices,
    )
    return {
        kernel.__name__: (kernel, {k: _CONSTEXPRS[k] for k in kernel.arg_names if k in _CONSTEXPRS})
        for kernel in kernels
    }


_CONSTEXPRS = {"BLOCK": BLOCK, "CHUNK": CHUNK, "LONGEST": LONGEST_REPEAT}
#: Compile options among the constexprs, which the compiled kernel does not take.
_OPTIONS = frozenset({"num_warps", "num_stages"})


class _CompiledKernels(dict[tuple[Any, ...], Callable[..., None]]):
    """(kernel, ``_Call.key``, *constexprs) -> how to launch the compiled kernel.

    Inductor's ``fresh_cache()`` forgets it (``clear_on_fresh_cache``), together
    with the compiles that Triton's JIT keeps in memory, so that the kernels
    compile again into the fresh cache dir, as Inductor's own do: a process that
    starts on that dir then finds their binaries there.
    """

    def cache_clear(self) -> None:
        kernels = {key[0] for key in self}
        if _kernels.cache_info().currsize:
            kernels.update(kernel for kernel, _ in _kernels().values())
        self.clear()
        for kernel in kernels:
            caches = getattr(kernel, "device_caches", None)  # not in the interpreter
            if caches is not None:
                caches.clear()


_COMPILED = clear_on_fresh_cache(_CompiledKernels())

_EMPTY = {"cuda": _compat.fast_empty_strided("cuda"), "cpu": _compat.fast_empty_strided("cpu")}
_VIEW = _compat.reinterpret_tensor()


class _Call:
    """What one operator's call launches with: its device, stream and kernel key.

    The key is the device and the dtypes and alignment of ``inputs``: they must
    determine those of every tensor its launches take (the others are the
    runner's own int64 buffers), since a kernel compiled for one key is launched
    for every call of that key.
    """

    __slots__ = ("device", "key", "stream")

    def __init__(self, *inputs: torch.Tensor) -> None:
        first = inputs[0]
        self.device = first.device
        aligned = tuple(t.data_ptr() % 16 == 0 for t in inputs)
        self.key = (self.device.index, tuple(t.dtype for t in inputs), aligned)
        self.stream = _compat.current_raw_stream(self.device.index) if first.is_cuda else None

    def empty(self, size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> Any:
        allocate = _EMPTY.get(self.device.type)
        if allocate is None:
            return torch.empty_strided(size, stride, dtype=dtype, device=self.device)
        return allocate(size, stride, dtype)

    def nonzero_strides(self, total: int) -> tuple[int, int]:
        """``nonzero``'s strides: a (1, total) buffer, transposed (CUDA's of an empty one
        are a (1, 1) buffer's)."""
        return (1, max(total, 1) if self.stream is not None else total)

    def launch(self, name: str, blocks: int, *args: Any) -> None:
        """``kernels[name][(blocks,)](*args, BLOCK=BLOCK, ...)``."""
        self.run(*_kernels()[name], blocks, args)

    def run(self, kernel: Any, constexprs: dict, blocks: int, args: tuple[Any, ...]) -> None:
        """``kernel[(blocks,)](*args, **constexprs)``, launched through Inductor's static
        launcher (or Triton's own, where that cannot launch it). The first call of
        each key in a process loads the kernel from the runner's store
        (``kernel_store.py``), or compiles and stores it."""
        key = (kernel, self.key, *constexprs.values())
        launch = _COMPILED.get(key)
        if launch is None:
            launch = self._prepare(kernel, blocks, args, constexprs)
            if launch is None:  # Triton's interpreter: the call above ran it
                return
            _COMPILED[key] = launch
        launch(blocks, self.stream, args)

    def _prepare(
        self, kernel: Any, blocks: int, args: tuple[Any, ...], constexprs: dict[str, Any]
    ) -> Any:
        if self.stream is None:
            kernel[(blocks,)](*args, **constexprs)
            return None
        index = self.device.index
        # Before the key: it holds the ptxas version, which Triton reads once.
        _compat.use_inductors_ptxas()
        key = kernel_store.entry_key(kernel, self.key[1:], constexprs, index)
        static = kernel_store.load(key, index)
        if static is not None:
            return _static_launch(static)
        # Compiled without a launch: Inductor's launcher needs no launcher of
        # Triton's, which would be built (a C compile) on a cold cache.
        compiled = kernel.warmup(*args, grid=(blocks,), **constexprs)
        static = _compat.static_launcher(compiled)
        if static is not None:
            kernel_store.store(key, static)
            if _compat.load_static_launcher(static, index):
                return _static_launch(static)
        values = tuple(v for k, v in constexprs.items() if k not in _OPTIONS)

        def launch(blocks: int, stream: int, args: tuple[Any, ...]) -> None:
            compiled[(blocks, 1, 1)](*args, *values, stream=stream)

        return launch


def _static_launch(static: Any) -> Callable[..., None]:
    def launch(blocks: int, stream: int, args: tuple[Any, ...]) -> None:
        static.run(blocks, 1, 1, stream, *args)

    return launch


def _covered(x: torch.Tensor, largest: int | None = None) -> bool:
    """Whether the kernels compute the operator on ``x``: one contiguous dimension of
    a dtype they load, on a device where they run, of at most ``largest`` elements,
    small enough for int32 sizes."""
    largest = LARGEST if largest is None else largest
    if x.dim() != 1 or x.dtype not in _DTYPES or not 0 < x.numel() <= min(largest, _LIMIT - 1):
        return False
    return x.stride(0) == 1 and runs_kernels(x.device)


def runs_kernels(device: torch.device) -> bool:
    """Whether the kernels run on ``device``: the current CUDA device, or the CPU in
    Triton's interpreter where :data:`INTERPRETED` says so."""
    if device.type == "cuda":
        return device.index == torch.cuda.current_device()
    return INTERPRETED and device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


#: (device index, stream) -> the count kernels' ticket on that stream.
_TICKETS: dict[tuple[int, int], torch.Tensor] = {}


def run_with_ticket(
    call: _Call,
    kernel: Any,
    constexprs: dict,
    blocks: int,
    before: tuple[Any, ...],
    after: tuple[Any, ...],
) -> None:
    """``kernel[(blocks,)](*before, ticket, *after, **constexprs)``, a kernel whose
    blocks end in ``compaction_kernels.publish``, with the ticket that finds the
    block that counts last.

    That block is the one whose increment of the ticket returns ``blocks - 1``, so
    the ticket must be 0 when the launch starts. A CUDA stream keeps one ticket
    (8 bytes), made zero where it is first needed and put back to zero by the
    last block of every launch; the launches on a stream run one after the other,
    so each finds it zero. That holds only while each launch that takes it runs
    to its end, and only for tickets really zeroed:

    - a ticket first needed while the stream is capturing a CUDA graph (whose
      fill would only be recorded) is that call's alone, zeroed in the capture,
      never kept;
    - a launch that raises (Triton's interpreter, a launch the driver refuses)
      takes its stream's ticket with it: the next call makes a new one;
    - a kernel that faults on a GPU leaves the CUDA context unusable, so no later
      launch can read what it left.

    No ticket is kept on CPU tensors (Triton's interpreter): threads there share no
    stream that would order their launches.
    """
    key = (call.device.index, call.stream)
    ticket = _TICKETS.get(key)
    if ticket is None:
        ticket = torch.zeros((1,), dtype=torch.int64, device=call.device)
        if _keeps_ticket(call):
            _TICKETS[key] = ticket
    try:
        call.run(kernel, constexprs, blocks, (*before, ticket, *after))
    except BaseException:
        _TICKETS.pop(key, None)
        raise


def _keeps_ticket(call: _Call) -> bool:
    """Whether a ticket made for ``call`` is its stream's (:func:`run_with_ticket`)."""
    return call.stream is not None and not torch.cuda.is_current_stream_capturing()


def _starts(call: _Call, count: str, x: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """Steps 1 and 2 over ``x``: the work buffer (each block's start, then the
    total, or -1 where a count was negative), the blocks, the total."""
    blocks = -(-x.numel() // BLOCK)
    work = call.empty((blocks + 1,), (1,), torch.int64)
    run_with_ticket(call, *_kernels()[count], blocks, (x, work), (x.numel(), blocks))
    (total,) = _read(work, blocks, 1)
    return work, blocks, total


def _read(work: torch.Tensor, at: int, count: int) -> list[int]:
    """``work[at:at + count]`` on the host (the one copy, and the sync)."""
    if _VIEW is None:
        return work[at : at + count].tolist()
    if count == 1:
        return [_VIEW(work, (), (), at).item()]
    return _VIEW(work, (count,), (1,), at).tolist()


def nonzero(x: torch.Tensor) -> torch.Tensor:
    """``aten.nonzero(x)``."""
    if not _covered(x):
        return aten.nonzero.default(x)
    call = _Call(x)
    work, blocks, total = _starts(call, "count_nonzero", x)
    out = call.empty((total, 1), call.nonzero_strides(total), torch.int64)
    if total:
        call.launch("nonzero_indices", blocks, x, work, out, x.numel())
    return out


def masked_select(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``aten.masked_select(x, mask)``."""
    if not (
        _covered(x, _LIMIT)
        and _covered(mask, _LIMIT)
        and mask.dtype == torch.bool
        and mask.numel() == x.numel()
        and mask.device == x.device
    ):
        return aten.masked_select.default(x, mask)
    call = _Call(x, mask)
    work, blocks, total = _starts(call, "count_nonzero", mask)
    out = call.empty((total,), (1,), x.dtype)
    if total:
        call.launch("selected_values", blocks, x, mask, work, out, x.numel())
    return out


def repeat_interleave(repeats: torch.Tensor, *, output_size: Any = None) -> torch.Tensor:
    """``aten.repeat_interleave.Tensor(repeats)``."""
    if output_size is not None or repeats.dtype not in (torch.int32, torch.int64):
        return aten.repeat_interleave.Tensor(repeats, output_size=output_size)
    if not _covered(repeats, _LIMIT):
        return aten.repeat_interleave.Tensor(repeats)
    call = _Call(repeats)
    work, blocks, total = _starts(call, "sum_repeats", repeats)
    if not 0 <= total < _LIMIT:
        # A negative repeat (ATen's raises), one longer than LONGEST_REPEAT, or too many.
        return aten.repeat_interleave.Tensor(repeats)
    out = call.empty((total,), (1,), repeats.dtype)
    if total:
        call.launch("repeated_indices", blocks, repeats, work, out, repeats.numel())
    return out


_INTEGERS = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})


def unique(
    x: torch.Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten._unique2(x)``: the distinct values of integers, sorted, with the
    inverse and the counts where asked, without a sort where the values span no
    more values than ``x`` has elements.

    The least and greatest values come to the host first (one copy); over that
    range, one kernel marks each value present (a flag, or with counts asked for,
    its count by integer atomics) and the compaction writes the marked ones in
    order, as ``nonzero`` does, and their counts beside them. The inverse is each
    element's value's place among them, written over the range first. A wider
    range goes to the operator. Every size goes: the operator sorts, which at 64M
    elements takes ten times the kernels' passes.
    """
    if not (sorted and x.dtype in _INTEGERS and _covered(x, _LIMIT)):
        return aten._unique2.default(x, sorted, return_inverse, return_counts)
    call = _Call(x)
    n = x.numel()
    blocks = -(-n // BLOCK)
    work = call.empty((2 * blocks + 2,), (1,), torch.int64)
    run_with_ticket(call, *_kernels()["min_max"], blocks, (x, work), (n, blocks))
    least, greatest = _read(work, 2 * blocks, 2)
    span = greatest - least + 1
    if span > n:
        return aten._unique2.default(x, sorted, return_inverse, return_counts)
    least_at = 2 * blocks
    if return_counts:
        marks = call.empty((span,), (1,), torch.int32).zero_()
        call.launch("count_values", blocks, x, marks, work, least_at, n)
    else:
        marks = call.empty((span,), (1,), torch.int8).zero_()
        call.launch("mark_values", blocks, x, marks, work, least_at, n)
    # Keyed by the values' dtype too: the compaction writes them.
    marked = _Call(marks, x)
    starts, span_blocks, total = _starts(marked, "count_nonzero", marks)
    out = call.empty((total,), (1,), x.dtype)
    marked.launch("distinct_values", span_blocks, marks, starts, work, least_at, out, span)
    # Not asked for: empty, as the operator's.
    inverse = call.empty((n,) if return_inverse else (0,), (1,), torch.int64)
    counts = call.empty((total,) if return_counts else (0,), (1,), torch.int64)
    if return_counts:
        marked.launch("distinct_counts", span_blocks, marks, starts, counts, span)
    if return_inverse:
        places = call.empty((span,), (1,), torch.int64)
        marked.launch("distinct_places", span_blocks, marks, starts, places, span)
        call.launch("inverse_indices", blocks, x, places, work, least_at, inverse, n)
    return out, inverse, counts


#: What the runner calls for each operator.
REPLACEMENTS: dict[Any, Callable[..., torch.Tensor]] = {
    aten.nonzero.default: nonzero,
    aten.masked_select.default: masked_select,
    aten.repeat_interleave.Tensor: repeat_interleave,
    aten._unique2.default: unique,
}
