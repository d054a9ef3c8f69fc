"""A selection by a predicate that Inductor computed just before it, without the
predicate's buffer.

``torch.nonzero(x > t)`` and ``x.masked_select(x.abs() > t)`` reach the graph as a
pointwise Triton kernel that writes the predicate to a bool buffer, then the
compaction that reads it (``compaction.py``): the predicate is written and read
twice, and each compaction pass reads its input again. At 64M elements that is
several times the bytes the selection needs: the input once, the result once.

:func:`fuse` lowers such a pair (where :data:`ENABLED`) into kernels made from the
predicate's own (``predicate_source.py``), in two passes by default: the count
(the predicate kernel's statements, each program counting its kept elements, the
last one turning the counts into starts, as ``compaction`` does), the total to the
host (the sync that defines the unbacked size), the result allocated at that
size, then the write (each program computes its predicate again and writes its
kept elements from its start). The predicate never reaches memory; the input is
read twice. ``masked_select`` of the predicate kernel's own input writes the
values that the write pass loaded.

With :data:`ONE_PASS`, one kernel: each program computes the predicate over its
:data:`TILES` tiles and counts their kept elements, learns the count before it
from the programs before it (decoupled look-back), then computes each tile again
(its input now in L2) and writes the kept elements in order, so each input byte
is read from memory once. The count is known only after the elements are written,
so the result's storage holds as many elements as the input: ``nonzero`` returns
the ``(count, 1)`` tensor with the operator's strides, ``masked_select`` the
``(count,)`` tensor, each at the start of that storage, as
``nonzero_static(size=numel)`` keeps its padding.

It fuses only what it proves equal, else leaves the pair as it is:

- the buffer is a contiguous bool allocation of the graph (of one dimension for
  ``nonzero``, whose result has a column per dimension) that only the kernel writes
  and only the compaction reads; the kernel is the last launch before the
  compaction (nothing in between reads or writes memory);
- the kernel is a one-dimensional pointwise kernel of Inductor's, straight-line
  code whose only statement that names the buffer stores the predicate at its
  contiguous index, with each program taking the ``XBLOCK`` elements at
  ``program_id(0) * XBLOCK``; its other stores (other buffers it writes, read
  later) stay as they are: the count pass stores them, where each buffer stored is
  the graph's allocation and not one the kernel loads (the write pass computes the
  predicate again), and one pass computes each tile once (one a program);
- the kernel gathers nothing (no load at an address computed from loaded values,
  as ``mask[index]`` does): computing such a tile again repeats its scattered
  loads, and on an H100 the fused call took 1.36 times the unfused one's device
  time for ``edges_between_kept_nodes`` (``benchmarks/realistic_cases.py``);
- at run time, there are more than :data:`SMALLEST` elements, ``masked_select``'s
  values have the buffer's shape and are contiguous, and the kernels run on the
  device (``compaction.runs_kernels``); any other call launches the predicate kernel
  as the graph does and calls the compaction after it.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import torch
from torch._inductor.codecache import PyCodeCache

from ..artifact.facts import value_kind
from ..codegen import views
from . import compaction
from .predicate_source import COUNT_PREFIX, PREFIX, WRITE_PREFIX, FusedSource, fused_source

aten = torch.ops.aten
_KERNEL_HOP = torch.ops.higher_order.triton_kernel_wrapper_mutation

#: Whether lowering fuses selections: off by default. On an H100, two passes (the
#: default way) took ``masked_select`` at 64M and 256M elements from 0.66-0.72 of
#: eager's time to 0.52-0.64, and ``nonzero(x > 0.5)`` at 256M from 1.04 to about
#: 1.0, but a fused call spends 10 to 80 µs more outside its kernels than the
#: unfused one, and a call that it does not cover (up to :data:`SMALLEST`) was
#: measured only against a separate process
#: (``results/2026-12-07-h100-fused-two-passes-1cc427a.md``): measure both in one
#: process (``benchmarks.realistic --backends eager direct direct-fused``) before
#: this turns on. Set it before compiling.
ENABLED = False
#: A fused selection's shape: elements per tile, tiles per program (one look-back
#: each), warps. Its time is mostly latency, so what counts is how many elements
#: each thread has in flight: on an H100, outside Inductor, 4 tiles of 2048
#: elements with 4 warps took 0.86 of eager's time for ``nonzero(x > 0.5)`` at 64M
#: elements and 0.81 at 256M, where one tile of 4096 took 0.99 and 0.97, more warps
#: or smaller tiles up to 3 times eager's (``benchmarks.selection_kernels``,
#: ``results/2026-12-07-h100-selection-kernels-e3b1292.md``).
BLOCK = 2048
TILES = 4
NUM_WARPS = 4
#: The tile of a predicate kernel that stores other buffers too: it computes each
#: tile once, one tile a program (the best such shape of that sweep).
SINGLE_BLOCK = 4096
#: Status words each look-back step reads.
WINDOW = 32
#: Whether a fused selection takes one pass (a look-back; the result's storage holds
#: as many elements as the input) or two (a count, the host reads the total and
#: allocates the result, then the write; each reads the input).
ONE_PASS = False
#: The two passes' shape: elements per program, warps (outside Inductor on an H100
#: the best two-pass shape: 0.48 of eager's time for ``masked_select`` at 64M
#: elements, 0.44 at 256M, ``results/2026-12-07-h100-selection-kernels-e3b1292.md``).
PASS_BLOCK = 4096
PASS_WARPS = 8
#: Fused only over more elements than this, where the runner's own compaction takes
#: the unfused pair (``compaction.LARGEST``). Up to there a call is mostly host time:
#: on an H100 one pass took 1.12 of eager's time for ``sort_kept`` at 4M elements
#: against 1.07 unfused, the same device time; the unfused path launches the
#: predicate kernel first and prepares the rest while it runs
#: (``results/2026-12-07-h100-realistic-fused-8774b03.md``).
SMALLEST = compaction.LARGEST


def fuse(graph: torch.fx.Graph, kernels: Any, kernel_call: Callable[..., Any]) -> None:
    """Replace each predicate kernel and the selection after it by one fused call
    (the module docstring says which), where :data:`ENABLED`. ``kernel_call(node,
    kernels, names)`` gives how a kernel node launches from Python with the values of
    ``names`` (``lowering.KernelCall``): a call that does not fuse launches the
    predicate kernel with it."""
    if not ENABLED:
        return
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.nonzero.default and len(node.args) == 1 and not node.kwargs:
            _fuse(graph, node, node.args[0], None, kernels, kernel_call)
        elif node.target is aten.masked_select.default and len(node.args) == 2:
            _fuse(graph, node, node.args[1], node.args[0], kernels, kernel_call)


def _fuse(
    graph: torch.fx.Graph,
    selection: torch.fx.Node,
    mask: Any,
    values: Any,
    kernels: Any,
    kernel_call: Callable[..., Any],
) -> None:
    allocation = _bool_allocation(mask)
    if allocation is None or values is mask or (values is None and len(allocation[0]) != 1):
        return
    kernel_node = _previous_launch(selection)
    if kernel_node is None or set(mask.users) != {kernel_node, selection}:
        return
    kwargs = kernel_node.kwargs
    if kwargs.get("tma_descriptor_metadata") or kwargs.get("launch_kwargs"):
        return
    call_kwargs = {
        **kwargs["kwargs"],
        **kernels.constant_args_of(kwargs["constant_args_idx"]),
    }
    written = [name for name, value in call_kwargs.items() if value is mask]
    if len(written) != 1:
        return
    kernel = kernels.kernel(kwargs["kernel_idx"])
    params = list(getattr(kernel, "arg_names", ()))
    if set(params) != set(call_kwargs):
        return
    scalars = [
        name
        for name in params
        if name != "XBLOCK"
        and (
            not isinstance(call_kwargs[name], torch.fx.Node)
            or value_kind(call_kwargs[name]).is_scalar
        )
    ]
    values_param = [name for name, value in call_kwargs.items() if value is values]
    fused_kernel = fused_source(
        _source(kernel), written[0], scalars, values_param[0] if len(values_param) == 1 else None
    )
    if fused_kernel is None or fused_kernel.gathers:
        return
    one_pass = ONE_PASS
    if not one_pass and not _stores_only_new_buffers(fused_kernel, call_kwargs):
        return
    names = [name for name in params if name not in (written[0], "XBLOCK")]
    fused = FusedSelection(
        fused_kernel,
        one_pass,
        values is not None,
        kernel_call(kernel_node, kernels, (*names, written[0])),
        (*names, written[0]),
        torch.device(mask.kwargs.get("device", "cpu")),
    )
    (grid,) = kwargs["grid"]
    size, stride = allocation
    args = (tuple(grid), tuple(size), tuple(stride), *(call_kwargs[n] for n in names))
    selection.target = fused
    selection.args = (*args, values) if values is not None else args
    selection.kwargs = {}
    graph.erase_node(kernel_node)


def _stores_only_new_buffers(source: FusedSource, call_kwargs: dict[str, Any]) -> bool:
    """Whether the write pass, which computes the predicate again after the count pass
    stored the kernel's other buffers, reads what it read then: each buffer stored
    is the graph's own allocation that the kernel does not load."""
    return not source.stored & source.loaded and all(
        isinstance(call_kwargs.get(name), torch.fx.Node)
        and call_kwargs[name].target is torch.empty_strided
        for name in source.stored
        if name in call_kwargs
    )


def _source(kernel: Any) -> str:
    """The source of a kernel's function: a ``JITFunction``'s, or the function an
    interpreted kernel runs."""
    source = getattr(kernel, "src", None)
    if source is None:
        try:
            source = inspect.getsource(kernel.fn)
        except (AttributeError, OSError, TypeError):
            return ""
    return source


def _bool_allocation(node: Any) -> tuple[list[Any], list[Any]] | None:
    """The size and stride of ``node`` if it is a contiguous bool allocation."""
    if not isinstance(node, torch.fx.Node) or node.target is not torch.empty_strided:
        return None
    if node.kwargs.get("dtype") is not torch.bool or len(node.args) != 2:
        return None
    size, stride = (list(a) for a in node.args)
    if not size:
        return None
    # Row-major: each stride the product of the sizes after it, where the graph
    # spells that product as a size itself or as integers.
    for dim in range(len(size)):
        later = size[dim + 1 :]
        if all(isinstance(s, int) for s in later):
            expected: Any = math.prod(later)
        elif len(later) == 1:
            expected = later[0]
        else:
            return None
        if not _equal(stride[dim], expected) and not _equal(size[dim], 1):
            return None
    return size, stride


def _equal(a: Any, b: Any) -> bool:
    return a is b or (isinstance(a, int) and isinstance(b, int) and a == b)


def _previous_launch(selection: torch.fx.Node) -> torch.fx.Node | None:
    """The kernel launch just before ``selection``, with only host values between."""
    node = selection.prev
    while node.op == "call_function" and node.target is not _KERNEL_HOP:
        if not views.is_host_value(node, _reads_tensor):
            return None
        node = node.prev
    return node if node.op == "call_function" else None


def _reads_tensor(node: torch.fx.Node) -> bool:
    return any(not value_kind(n).is_scalar for n in node.all_input_nodes)


class FusedSelection:
    """``nonzero(mask)`` or ``masked_select(values, mask)`` where a predicate kernel
    writes ``mask``, in the kernels that ``source`` defines (one pass or two). Called
    with the kernel's grid, the mask's size and stride, the kernel's other arguments
    (``names`` but the last, the mask's), then the values. A call that it does not
    cover runs ``unfused(grid, *arguments)`` (the predicate kernel as the graph
    launches it, with the values of ``names``) and the compaction."""

    __module__ = __name__

    def __init__(
        self,
        source: FusedSource,
        one_pass: bool,
        select_values: bool,
        unfused: Callable[..., None],
        names: tuple[str, ...],
        device: torch.device,
    ) -> None:
        self.source = source
        self.one_pass = one_pass
        self.select_values = select_values
        self.unfused = unfused
        self.names = names
        self.device = device
        self.__name__ = "fused_masked_select" if select_values else "fused_nonzero"

    @functools.cached_property
    def kernels(self) -> dict[str, Any]:
        """The one-pass kernel and the two passes', by their names' prefixes."""
        module = PyCodeCache.load(self.source.source)
        return {
            prefix: next(v for n, v in vars(module).items() if n.startswith(prefix))
            for prefix in (PREFIX, COUNT_PREFIX, WRITE_PREFIX)
        }

    def __call__(
        self, grid: tuple[int, ...], size: tuple[int, ...], stride: tuple[int, ...], *args: Any
    ) -> torch.Tensor:
        inputs = args[: len(self.names) - 1]
        values = args[-1] if self.select_values else None
        n = math.prod(size)
        if not self._covered(size, values, n):
            return self._unfused(grid, size, stride, inputs, values, n)
        tensors = [a for a in (*inputs, values) if isinstance(a, torch.Tensor)]
        call = (
            compaction._Call(*tensors)
            if tensors
            else compaction._Call(torch.empty((0,), device=self.device))
        )
        dtype = values.dtype if values is not None else torch.int64
        if not self.one_pass:
            return self._two_passes(call, inputs, values, n, dtype)
        out = call.empty((n,), (1,), dtype)
        block, tiles = (SINGLE_BLOCK, 1) if self.source.stores else (BLOCK, TILES)
        blocks = -(-n // (block * tiles))
        work = call.empty((blocks + 2,), (1,), torch.int64).zero_()
        constexprs: dict[str, Any] = {
            "XBLOCK": block,
            "VALUES": values is not None,
            "WINDOW": WINDOW,
            "TILES": tiles,
        }
        if call.stream is not None:
            constexprs["num_warps"] = NUM_WARPS
        selected = values if values is not None else out
        call.run(
            self.kernels[PREFIX], constexprs, blocks, (*inputs, work, blocks, n, selected, out)
        )
        (total,) = compaction._read(work, blocks + 1, 1)
        if values is not None:
            return out[:total]
        # ``nonzero``'s layout, at the start of ``out``.
        return out.as_strided((total, 1), call.nonzero_strides(total))

    def _two_passes(
        self,
        call: compaction._Call,
        inputs: tuple[Any, ...],
        values: Any,
        n: int,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        """The count pass (each program's kept elements; the last turns them into
        starts), the total to the host, the result allocated, the write pass."""
        blocks = -(-n // PASS_BLOCK)
        work = call.empty((blocks + 1,), (1,), torch.int64)
        warps = {"num_warps": PASS_WARPS} if call.stream is not None else {}
        count = {"XBLOCK": PASS_BLOCK, "CHUNK": compaction.CHUNK, **warps}
        compaction.run_with_ticket(
            call, self.kernels[COUNT_PREFIX], count, blocks, (*inputs, work), (blocks, n)
        )
        (total,) = compaction._read(work, blocks, 1)
        if values is not None:
            out = call.empty((total,), (1,), dtype)
        else:
            out = call.empty((total, 1), call.nonzero_strides(total), dtype)
        if total:
            write = {"XBLOCK": PASS_BLOCK, "VALUES": values is not None, **warps}
            selected = values if values is not None else out
            call.run(self.kernels[WRITE_PREFIX], write, blocks, (*inputs, work, n, selected, out))
        return out

    def _covered(self, size: tuple[int, ...], values: Any, n: int) -> bool:
        if not SMALLEST < n < compaction._LIMIT:
            return False
        device = self.device
        if device.type == "cuda" and device.index is None:
            # The graph's ``device="cuda"``: the current device, as allocations take it.
            device = torch.device("cuda", torch.cuda.current_device())
        if not compaction.runs_kernels(device):
            return False
        if values is None:
            return True
        return (
            tuple(values.shape) == tuple(size)
            and values.is_contiguous()
            and values.dtype in compaction._DTYPES
            and values.device == device
        )

    def _unfused(
        self,
        grid: tuple[int, ...],
        size: tuple[int, ...],
        stride: tuple[int, ...],
        inputs: tuple[Any, ...],
        values: Any,
        n: int,
    ) -> torch.Tensor:
        """What the graph does: the predicate kernel (over no element, none), then the
        compaction."""
        # The Python wrapper's allocator takes the current device: the graph's
        # ``device="cuda"`` (no index) means that one.
        allocate = compaction._EMPTY.get(self.device.type) if self.device.index is None else None
        if allocate is None:
            mask = torch.empty_strided(size, stride, dtype=torch.bool, device=self.device)
        else:
            mask = allocate(size, stride, torch.bool)
        if n:
            self.unfused(grid, *inputs, mask)
        if values is None:
            return compaction.nonzero(mask)
        return compaction.masked_select(values, mask)
