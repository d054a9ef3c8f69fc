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
(:func:`place_kernel`) makes it run again, in any process.

The converter records what it defined on the graph it returns
(:data:`CONVERTED_KERNELS` in ``gm.meta``), for the artifact layer, which owns
the kernels for as long as the graph lives.
"""

from __future__ import annotations

import dataclasses
import hashlib
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


def place_kernel(kernel_idx: int, kernel: Any) -> None:
    """Put ``kernel`` in the side table at ``kernel_idx`` (where it is missing)."""
    with kernel_side_table.lock:
        kernel_side_table.id_to_kernel[kernel_idx] = kernel
        kernel_side_table.kernel_to_id[kernel] = kernel_idx


def place_constant_args(constant_args_idx: int, args: dict[str, Any]) -> None:
    with kernel_side_table.lock:
        kernel_side_table.constant_args[constant_args_idx] = args


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
