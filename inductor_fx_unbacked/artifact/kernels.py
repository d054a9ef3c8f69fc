"""A handed-out graph owns its kernels: they stay in the side table for as long as it lives.

The converter names each kernel by a stable index (``codegen/kernels.py``).
:func:`own_kernels` makes the graph the owner of everything those indices name:
its Triton kernels with their autotuners, their constant arguments, and its C++
kernels. The owner (:class:`OwnedKernels`, kept in ``gm.meta``) puts them back
into the side table whenever something emptied it (``torch._dynamo.reset()``),
travels with the graph through ``copy.deepcopy`` and pickling (as sources, which
import again in a new process), and releases them once the graph is gone: at the
package's next write to the side table (:func:`apply_releases`), never from the
finalizer that notices it.

Kernels that reached the graph without a source (upstream's converter, with the
overlay disabled inside ``fx_backend``) are owned too, under a fresh index that
no other kernel takes; such a graph runs its own kernels in this process, and
cannot be stored (:attr:`OwnedKernels.unstorable`).
"""

from __future__ import annotations

import collections
import itertools
import threading
import weakref
from collections import Counter
from typing import Any

import torch
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

from ..codegen import fx_cpp
from ..codegen.fx_triton import load_kernel
from ..codegen.kernels import (
    CONVERTED_KERNELS,
    UNSOURCED_INDEX_BASE,
    ConvertedKernels,
    ConvertedTritonKernel,
    KernelSource,
    stable_constant_args_idx,
    stable_kernel_idx,
    update_side_table,
)

#: The key in ``gm.meta`` under which a handed-out graph keeps its kernels.
OWNED_KERNELS = "inductor_fx_unbacked_owned_kernels"

_KERNEL_HOP = torch.ops.higher_order.triton_kernel_wrapper_mutation

_lock = threading.RLock()
#: Every live owner.
_owners: weakref.WeakSet[OwnedKernels] = weakref.WeakSet()
#: How many live owners name each side-table index and C++ key.
_users: Counter[Any] = Counter()
#: The keys of dropped graphs, queued by their finalizers, which never write a
#: table (upstream's lock is not re-entrant, and a collection can run inside
#: upstream's walk of the side table): :func:`apply_releases` forgets them at the
#: package's next write to the side table. Each entry names keys that the side
#: table holds, one entry per graph dropped since then.
_dropped: collections.deque[list[Any]] = collections.deque()
_unsourced = itertools.count(UNSOURCED_INDEX_BASE)


class KernelGoneError(RuntimeError):
    """A graph names a kernel that neither it nor the side table holds."""


class OwnedKernels:
    """The kernels one graph (with its subgraphs) names, kept alive and in the side table."""

    def __init__(
        self,
        triton: dict[int, ConvertedTritonKernel],
        constant_args: dict[int, dict[str, Any]],
        cpp: dict[str, KernelSource],
        unsourced: dict[int, Any] | None = None,
    ) -> None:
        self.triton = dict(triton)
        self.constant_args = dict(constant_args)
        self.cpp = dict(cpp)
        #: Kernels without a source, by index: they run here and are never stored.
        self.unsourced = dict(unsourced or {})
        keys = self._keys()
        with _lock:
            for key in keys:
                _users[key] += 1
            _owners.add(self)
            weakref.finalize(self, _dropped.append, keys)
            self._place()

    # What the runner reads.

    def tuner(self, kernel_idx: int) -> Any:
        """The autotuner of the kernel at ``kernel_idx``, or None for a kernel without
        a source (it is launched as Triton's own kernel object)."""
        entry = self.triton.get(kernel_idx)
        return None if entry is None else entry.tuner

    def kernel(self, kernel_idx: int) -> Any:
        """The kernel object the graph launches at ``kernel_idx``."""
        if kernel_idx in self.triton:
            return self.triton[kernel_idx].kernel
        if kernel_idx in self.unsourced:
            return self.unsourced[kernel_idx]
        raise KernelGoneError(f"the graph does not own a kernel at index {kernel_idx}")

    def constant_args_of(self, constant_args_idx: int) -> dict[str, Any]:
        return self.constant_args[constant_args_idx]

    @property
    def unstorable(self) -> str | None:
        """Why the graph cannot be stored, or None."""
        if self.unsourced:
            return f"kernels {sorted(self.unsourced)} have no source"
        return None

    def sources(self) -> dict[int, KernelSource]:
        return {idx: entry.source for idx, entry in self.triton.items()}

    # Keeping them in the side table.

    def ensure_placed(self) -> None:
        """Put this graph's kernels back into the side table where something emptied
        it since (``torch._dynamo.reset()``). Cheap when they are there."""
        if _dropped or not self._in_side_table():
            with _lock:
                self._place()

    def _in_side_table(self) -> bool:
        kernels, args = kernel_side_table.id_to_kernel, kernel_side_table.constant_args
        return all(
            kernels.get(kernel_idx) is entry.kernel for kernel_idx, entry in self.triton.items()
        ) and all(
            args.get(constant_args_idx) is constant_args
            for constant_args_idx, constant_args in self.constant_args.items()
        )

    def _place(self) -> None:
        """Write this graph's kernels into the side table, with the releases due."""
        kernels = {kernel_idx: entry.kernel for kernel_idx, entry in self.triton.items()}
        kernels.update(self.unsourced)
        apply_releases(kernels, self.constant_args)
        for source in self.cpp.values():
            fx_cpp.register_source(source)

    def _keys(self) -> list[Any]:
        return [
            *(("kernel", idx) for idx in (*self.triton, *self.unsourced)),
            *(("constant_args", idx) for idx in self.constant_args),
            *(("cpp", key) for key in self.cpp),
        ]

    # Copies share the owner; pickles carry the sources and import them again.

    def __deepcopy__(self, memo: dict[int, Any]) -> OwnedKernels:
        return self

    def __reduce__(self) -> Any:
        if self.unstorable:
            raise TypeError(f"cannot pickle the kernels of this graph: {self.unstorable}")
        return (_from_sources, (self.sources(), self.constant_args, self.cpp))

    def __repr__(self) -> str:
        return (
            f"OwnedKernels({len(self.triton)} Triton, {len(self.cpp)} C++, "
            f"{len(self.unsourced)} without a source)"
        )


def _from_sources(
    sources: dict[int, KernelSource],
    constant_args: dict[int, dict[str, Any]],
    cpp: dict[str, KernelSource],
) -> OwnedKernels:
    """Import the kernels of a stored or pickled graph, under their stable indices."""
    triton = {}
    for kernel_idx, source in sources.items():
        if stable_kernel_idx(source) != kernel_idx:
            raise ValueError(f"kernel {source.kernel_name}: its source is not index {kernel_idx}")
        triton[kernel_idx] = ConvertedTritonKernel(source, *load_kernel(source))
    for key, source in cpp.items():
        if fx_cpp.source_key(source) != key:
            raise ValueError(f"C++ kernel {key}: its stored source has another key")
    return OwnedKernels(triton, constant_args, cpp)


def apply_releases(
    kernels: dict[int, Any] | None = None, constant_args: dict[int, dict[str, Any]] | None = None
) -> None:
    """Forget what no live graph names any more, writing ``kernels`` and
    ``constant_args`` into the side table in the same update.

    The package's one point for writing the side table: when a converter or a
    restored graph places its kernels, when a graph called after a Dynamo reset
    puts them back, and when ``fx_backend`` is entered or left. Never from a
    finalizer (see ``_dropped``).
    """
    with _lock:
        released: dict[str, list[Any]] = {"kernel": [], "constant_args": [], "cpp": []}
        while _dropped:
            for key in _dropped.popleft():
                _users[key] -= 1
                if _users[key] <= 0:
                    del _users[key]
                    released[key[0]].append(key[1])
        if kernels or constant_args or released["kernel"] or released["constant_args"]:
            update_side_table(kernels, constant_args, released["kernel"], released["constant_args"])
        for key in released["cpp"]:
            fx_cpp.forget(key)


def hold_subgraph_kernels(gm: torch.fx.GraphModule) -> OwnedKernels | None:
    """Own what the converter placed for the subgraph ``gm`` while the result that
    holds it lives: the graph that holds the subgraph owns them once handed out, but
    its compile may fail first (a branch of ``torch.cond`` that Inductor cannot
    lower), and then nothing else would release them. Leaves the converter's record
    in place for that graph."""
    record = gm.meta.get(CONVERTED_KERNELS)
    if record is None:
        return None
    return OwnedKernels(record.triton, record.constant_args, record.cpp)


def release_unfinished(record: ConvertedKernels) -> None:
    """Release what a converter placed for a graph it never finished (a conversion
    that raised): the entries of ``record`` that no live graph owns. Nothing will
    hand them out, so nothing else would ever release them."""
    with _lock:
        unowned = {
            kind: [key for key in keys if _users.get((kind, key), 0) <= 0]
            for kind, keys in (
                ("kernel", record.triton),
                ("constant_args", record.constant_args),
                ("cpp", record.cpp),
            )
        }
        if unowned["kernel"] or unowned["constant_args"]:
            update_side_table(
                released_kernels=unowned["kernel"], released_constant_args=unowned["constant_args"]
            )
        for key in unowned["cpp"]:
            fx_cpp.forget(key)


def own_kernels(gm: torch.fx.GraphModule) -> OwnedKernels:
    """Make ``gm`` (and its subgraphs) the owner of every kernel its nodes name.

    Reads what the converter recorded (``CONVERTED_KERNELS`` in the meta of ``gm``
    and of each subgraph); kernel nodes that name a kernel the converter did not
    record (upstream's converter wrote them) get a fresh index of their own, as do
    constant arguments stored by position. Idempotent.
    """
    owned = gm.meta.get(OWNED_KERNELS)
    if owned is not None:
        return owned
    record = ConvertedKernels()
    unsourced: dict[int, Any] = {}
    for module in _graph_modules(gm):
        converted = module.meta.pop(CONVERTED_KERNELS, None)
        if converted is not None:
            record.triton.update(converted.triton)
            record.constant_args.update(converted.constant_args)
            record.cpp.update(converted.cpp)
    for module in _graph_modules(gm):
        changed = False
        for node in module.graph.nodes:
            if node.target is not _KERNEL_HOP:
                continue
            kwargs = dict(node.kwargs)
            if kwargs["kernel_idx"] not in record.triton:
                kernel = kernel_side_table.get_kernel(kwargs["kernel_idx"])
                kwargs["kernel_idx"] = next(_unsourced)
                unsourced[kwargs["kernel_idx"]] = kernel
            if kwargs["constant_args_idx"] not in record.constant_args:
                args = kernel_side_table.get_constant_args(kwargs["constant_args_idx"])
                kwargs["constant_args_idx"] = stable_constant_args_idx(args)
                record.constant_args[kwargs["constant_args_idx"]] = args
            if kwargs != node.kwargs:
                node.kwargs = kwargs
                changed = True
        if changed:
            module.recompile()
    owned = OwnedKernels(record.triton, record.constant_args, record.cpp, unsourced)
    gm.meta[OWNED_KERNELS] = owned
    return owned


def owned_kernels(gm: torch.fx.GraphModule) -> OwnedKernels | None:
    """The owner of ``gm``'s kernels, placed in the side table; None for a graph that
    this package did not hand out."""
    owned = gm.meta.get(OWNED_KERNELS)
    if owned is not None:
        owned.ensure_placed()
    return owned


def _graph_modules(gm: torch.fx.GraphModule) -> list[torch.fx.GraphModule]:
    """``gm`` and every GraphModule below it."""
    return [m for m in gm.modules() if isinstance(m, torch.fx.GraphModule)]
