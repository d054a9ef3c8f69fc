"""Kernel identity in the FX graph: side-table indices that name one kernel forever.

A ``triton_kernel_wrapper_mutation`` node names its kernel by ``kernel_idx`` and
its non-graphable arguments by ``constant_args_idx``, both indices into
``kernel_side_table``. Upstream's indices are positions (``len`` of the table at
insertion), and ``torch._dynamo.reset()`` empties the table and hands them out
again, to whatever kernel comes next: a graph kept across a reset would launch
another program's kernel.

The converter therefore names each kernel by its content: the index of a kernel
is derived from the source that defines it (:func:`stable_kernel_idx`), and the
index of constant arguments from their values. These indices lie far above any
position upstream hands out, so no other kernel ever takes them; a graph whose
kernel left the table fails upstream's lookup ("Kernel index ... not found")
instead of running something else, and putting the kernel back
(:func:`place_kernel`) makes it run again, in any process. Every write of this
package to the side table goes through :func:`update_side_table`.

The converter records what it defined on the graph it returns
(:data:`CONVERTED_KERNELS` in ``gm.meta``), for the artifact layer, which owns
the kernels for as long as the graph lives.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

#: Stable indices start here; upstream's positions never reach it.
STABLE_INDEX_BASE = 1 << 40
#: Indices given to kernels that came without a source (upstream's converter).
UNSOURCED_INDEX_BASE = 1 << 52
#: The key in ``gm.meta`` under which the converter records its kernels.
CONVERTED_KERNELS = "inductor_fx_unbacked_kernels"


@dataclasses.dataclass(frozen=True)
class KernelSource:
    """What imports one kernel again: its module's code, and its name there."""

    module_code: str
    kernel_name: str
    #: Run by Triton's interpreter (the CPU mode), not compiled.
    interpreted: bool = False

    def digest(self) -> str:
        text = f"{self.kernel_name}\0{int(self.interpreted)}\0{self.module_code}"
        return hashlib.sha256(text.encode()).hexdigest()


def stable_kernel_idx(source: KernelSource) -> int:
    """The side-table index of the kernel that ``source`` defines, in any process."""
    return STABLE_INDEX_BASE + int(source.digest()[:10], 16)


def stable_constant_args_idx(args: dict[str, Any]) -> int:
    """The side-table index of a kernel call's constant arguments, by their values."""
    text = repr(sorted(args.items()))
    return STABLE_INDEX_BASE + int(hashlib.sha256(text.encode()).hexdigest()[:10], 16)


class _Released:
    """What the side table holds at an index whose kernel (or constant arguments) no
    live graph names any more."""

    def __repr__(self) -> str:
        return "<released by inductor_fx_unbacked: no live graph names this index>"


#: Upstream numbers its own entries by the table's length, so no entry is ever
#: removed: removing one would give an index that is in use to the next kernel.
RELEASED = _Released()


def update_side_table(
    kernels: Mapping[int, Any] | None = None,
    constant_args: Mapping[int, dict[str, Any]] | None = None,
    released_kernels: Iterable[int] = (),
    released_constant_args: Iterable[int] = (),
) -> None:
    """The one way this package writes upstream's ``kernel_side_table``.

    Upstream reads the table's dicts without its lock (Inductor walks
    ``id_to_kernel`` on every compile, for its repro string), so this never changes
    a dict that someone may be iterating: it builds new dicts and puts them in place,
    under upstream's lock, as Dynamo's reset does. Released indices keep a
    :data:`RELEASED` entry (upstream's next index is the table's length). Never call
    this from a finalizer: upstream's lock is not re-entrant.
    """
    with kernel_side_table.lock:
        id_to_kernel = dict(kernel_side_table.id_to_kernel)
        kernel_to_id = dict(kernel_side_table.kernel_to_id)
        args_table = dict(kernel_side_table.constant_args)
        for kernel_idx in released_kernels:
            kernel = id_to_kernel.get(kernel_idx, RELEASED)
            if kernel is RELEASED:
                continue
            id_to_kernel[kernel_idx] = RELEASED
            if kernel_to_id.get(kernel) == kernel_idx:
                del kernel_to_id[kernel]
        for constant_args_idx in released_constant_args:
            if constant_args_idx in args_table:
                args_table[constant_args_idx] = RELEASED
        for kernel_idx, kernel in (kernels or {}).items():
            id_to_kernel[kernel_idx] = kernel
            kernel_to_id[kernel] = kernel_idx
        args_table.update(constant_args or {})
        kernel_side_table.id_to_kernel = id_to_kernel
        kernel_side_table.kernel_to_id = kernel_to_id
        kernel_side_table.constant_args = args_table


def place_kernel(kernel_idx: int, kernel: Any) -> None:
    """Put ``kernel`` in the side table at ``kernel_idx``."""
    update_side_table(kernels={kernel_idx: kernel})


def place_constant_args(constant_args_idx: int, args: dict[str, Any]) -> None:
    update_side_table(constant_args={constant_args_idx: args})


@dataclasses.dataclass
class ConvertedTritonKernel:
    """A Triton kernel that the converter imported: its source, its autotuner, and
    the object the side table holds for it (what the HOP launches)."""

    source: KernelSource
    tuner: Any
    kernel: Any


@dataclasses.dataclass
class ConvertedKernels:
    """Every kernel a converted graph names, by its stable index or key."""

    triton: dict[int, ConvertedTritonKernel] = dataclasses.field(default_factory=dict)
    constant_args: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    #: C++ kernels (``fx_cpp``) by key.
    cpp: dict[str, KernelSource] = dataclasses.field(default_factory=dict)


def converted_kernels(self: Any) -> ConvertedKernels:
    """The record of the kernels that the converter ``self`` defined (made on first use)."""
    record = getattr(self, "inductor_fx_unbacked_kernels", None)
    if record is None:
        record = self.inductor_fx_unbacked_kernels = ConvertedKernels()
    return record
