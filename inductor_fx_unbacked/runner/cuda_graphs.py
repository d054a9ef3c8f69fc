"""CUDA graphs for the stretches of a lowered graph between the host syncs.

A data-dependent program syncs with the host wherever it defines an unbacked
symbol (``.item()``, ``nonzero``); between those syncs, Inductor's launches,
allocations and checks run from Python one by one. ``stretches.py`` finds the
runs of device work between the syncs and gives each to a :class:`CapturedStretch`,
which captures it as a CUDA graph and replays it.

A capture is valid only for what it recorded, so an entry is keyed
(:func:`stretch_key`) by the value of every scalar the stretch reads and the
address, size, stride and dtype of every tensor it reads: replaying reads and
writes the same memory with the same sizes. Capturing costs about fifty eager
runs, so a key is captured only on its :attr:`Limits.capture_after`-th call: the
calls before it run eagerly (first-call tuning happens there), and that call
runs eagerly on the capture stream (warming cuBLAS there) before capturing.

Each entry has a memory pool of its own: sharing a pool with a graph already
freed trips an assert of the caching allocator. An evicted entry's pool goes
back to the allocator, which frees it when it needs the memory. :class:`GraphMemory` keeps all
entries within :attr:`Limits.max_entries` and :attr:`Limits.max_bytes`, evicting
the least recently used, never one used in the current call (its outputs may
still be read). A stretch whose capture fails runs eagerly from then on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import struct
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_map_only

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Limits:
    """How eagerly stretches capture, and how much they may keep."""

    #: The call of a key that captures it (the calls before it run eagerly).
    capture_after: int = 3
    #: Captured keys per stretch; further keys run eagerly.
    keys_per_stretch: int = 8
    #: Keys whose calls a stretch counts before forgetting the oldest.
    counted_keys: int = 64
    #: Captured entries of all stretches together.
    max_entries: int = 64
    #: Bytes of the pools of all entries together; None: 10% of the device's
    #: memory, at most 2 GiB.
    max_bytes: int | None = None
    #: What a replay costs, in kernel launches: a stretch is captured only where it
    #: launches at least this many times (1 + the results it copies after a replay).
    #: On an H200 a replay and each copy each cost about as much as three launches:
    #: stretches of two and three launches with one and two copies ran slower
    #: replayed, one of sixteen launches and one copy 40% faster
    #: (benchmarks/results/2026-12-01-h200-data-dependent-replay.md). Checked when
    #: a graph compiles.
    launches_per_replay: int = 3


LIMITS = Limits()


@contextlib.contextmanager
def limits(**changes: Any) -> Iterator[Limits]:
    """Change :data:`LIMITS` inside (for tests and benchmarks)."""
    saved = dataclasses.replace(LIMITS)
    for name, value in changes.items():
        setattr(LIMITS, name, value)
    try:
        yield LIMITS
    finally:
        for field in dataclasses.fields(Limits):
            setattr(LIMITS, field.name, getattr(saved, field.name))


def wanted(setting: bool | None) -> bool:
    """Whether graphs compiled now capture stretches: ``setting``, or where it is
    None, what ``mode="reduce-overhead"`` says (``config.triton.cudagraphs``)."""
    if setting is not None:
        return setting
    from torch._inductor import config

    return bool(config.triton.cudagraphs)


def stretch_key(inputs: Sequence[Any], device: int) -> tuple[Any, ...]:
    """What a capture of a stretch depends on: the scalars' values and the tensors'
    memory (address, size, stride, dtype), on ``device``. A float counts by its bits:
    ``-0.0`` is not ``0.0`` to a kernel, and a NaN finds its own key (``nan != nan``)."""
    key: list[Any] = [device]
    for value in inputs:
        if isinstance(value, torch.Tensor):
            key.append((value.data_ptr(), value.shape, value.stride(), value.dtype))
        elif type(value) is float:
            key.append((float, _FLOAT_BITS.pack(value)))
        else:
            key.append(value)
    return tuple(key)


_FLOAT_BITS = struct.Struct("<d")


class Action(enum.Enum):
    EAGER = "eager"
    #: Run eagerly on the capture stream, then capture for later calls.
    CAPTURE = "capture"
    REPLAY = "replay"


@dataclasses.dataclass
class StretchStats:
    """What a stretch did so far; ``entries`` and ``bytes`` are what it holds now."""

    serial: int
    name: str
    launches: int
    captures: int = 0
    replays: int = 0
    eager_runs: int = 0
    failures: int = 0
    evictions: int = 0
    entries: int = 0
    bytes: int = 0


@dataclasses.dataclass(eq=False)
class Entry:
    """One captured key of a stretch: its graph and the outputs the graph writes."""

    owner: CapturedStretch
    key: tuple[Any, ...]
    graph: Any
    outputs: tuple[Any, ...]
    nbytes: int
    #: The call (:attr:`GraphMemory.call`) that last replayed it.
    last_call: int = -1


class GraphMemory:
    """Every captured entry, least recently used first, and what they hold.

    A replay's results are the captured graph's own memory, read until the call that
    replayed it returns, and the entries are shared by every graph: so calls of graphs
    with stretches run one at a time in a process, each holding :attr:`lock` from its
    first plan to its return (threads wait for it; a graph called inside another's
    call, in the same thread, goes on).
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.entries: OrderedDict[int, Entry] = OrderedDict()
        self.total_bytes = 0
        #: Counts top-level calls; entries used in the current one are never evicted.
        self.call = 0

    def begin_call(self) -> None:
        self.call += 1

    def use(self, entry: Entry) -> None:
        entry.last_call = self.call
        self.entries.move_to_end(id(entry))

    def make_room(self, nbytes: int, max_entries: int, max_bytes: int) -> bool:
        """Evict until one more entry of ``nbytes`` fits; False where it cannot
        (what is left was used in the current call)."""
        for entry in list(self.entries.values()):
            if len(self.entries) < max_entries and self.total_bytes + nbytes <= max_bytes:
                break
            if entry.last_call != self.call:
                self.evict(entry)
        return len(self.entries) < max_entries and self.total_bytes + nbytes <= max_bytes

    def add(self, entry: Entry, max_entries: int, max_bytes: int) -> bool:
        """Keep ``entry`` if it fits (evicting others); False, and it is not kept, if not."""
        if not self.make_room(entry.nbytes, max_entries, max_bytes):
            return False
        self.entries[id(entry)] = entry
        self.total_bytes += entry.nbytes
        entry.owner.entries[entry.key] = entry
        return True

    def evict(self, entry: Entry) -> None:
        del self.entries[id(entry)]
        self.total_bytes -= entry.nbytes
        entry.owner.entries.pop(entry.key, None)
        entry.owner.counts.evictions += 1

    def release_all(self) -> None:
        for entry in list(self.entries.values()):
            self.evict(entry)


MEMORY = GraphMemory()


class _Made:
    """Every live stretch, and how many were made (their serials)."""

    stretches: weakref.WeakSet[CapturedStretch] = weakref.WeakSet()
    count = 0


class CapturedStretch:
    """A stretch's node in the rewritten graph: ``stretch(*inputs)`` returns the
    tensors the rest of the graph reads, computed by ``body`` or by replaying a
    graph captured from it. Replayed outputs are the graph's own memory: those
    marked in ``copied`` (they reach the graph's output) are copied after replay,
    the others are read later in the same call only."""

    __module__ = __name__

    def __init__(
        self,
        name: str,
        body: Callable[..., tuple[Any, ...]],
        copied: Sequence[bool],
        launches: int,
        device_type: str = "cuda",
        memory: GraphMemory = MEMORY,
    ) -> None:
        self.__name__ = name
        self.body = body
        self.copied = tuple(copied)
        self.device_type = device_type
        self.memory = memory
        self.entries: dict[tuple[Any, ...], Entry] = {}
        self.calls_by_key: OrderedDict[tuple[Any, ...], int] = OrderedDict()
        #: Keys whose capture did not fit in memory: they run eagerly.
        self.unfit: set[tuple[Any, ...]] = set()
        #: Why this stretch runs eagerly for good (its capture failed), or None.
        self.uncapturable: str | None = None
        self.counts = StretchStats(_Made.count, name, launches)
        _Made.count += 1
        _Made.stretches.add(self)

    def __call__(self, *inputs: Any) -> tuple[Any, ...]:
        if self.uncapturable is not None or self._caller_is_capturing():
            self.counts.eager_runs += 1
            return self.body(*inputs)
        key = stretch_key(inputs, self._device())
        entry = self.entries.get(key)
        if entry is not None:
            return self.replay(entry)
        action = self.plan(key)
        if action is Action.CAPTURE:
            return self.capture(key, inputs)
        self.counts.eager_runs += 1
        return self.body(*inputs)

    def plan(self, key: tuple[Any, ...]) -> Action:
        """What a call with ``key`` does; counts the call of a key not captured."""
        if key in self.entries:
            return Action.REPLAY
        calls = self.calls_by_key.pop(key, 0) + 1
        self.calls_by_key[key] = calls
        if len(self.calls_by_key) > LIMITS.counted_keys:
            self.calls_by_key.popitem(last=False)
        if calls < LIMITS.capture_after or len(self.entries) >= LIMITS.keys_per_stretch:
            return Action.EAGER
        return Action.EAGER if key in self.unfit else Action.CAPTURE

    def replay(self, entry: Entry) -> tuple[Any, ...]:
        self.memory.use(entry)
        entry.graph.replay()
        self.counts.replays += 1
        # A replay is worth only the launches it saves: the copies of the results
        # are direct calls (a pytree walk per result cost more than a launch).
        return tuple(
            (_copy(output) if type(output) is torch.Tensor else _copy_leaves(output))
            if copied
            else output
            for output, copied in zip(entry.outputs, self.copied)
        )

    def capture(self, key: tuple[Any, ...], inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """This call's results, computed eagerly on the capture stream; and, for the
        calls after it, a graph captured for ``key`` where it fits in memory."""
        try:
            stream = _capture_stream(self._device())
            max_bytes = self._max_bytes()
        except Exception as e:  # noqa: BLE001 - no CUDA device here: never capturable
            self._give_up(e)
            self.counts.eager_runs += 1
            return self.body(*inputs)
        estimate = max((entry.nbytes for entry in self.entries.values()), default=0)
        if not self.memory.make_room(estimate, LIMITS.max_entries, max_bytes):
            self.counts.eager_runs += 1
            return self.body(*inputs)
        # The body's own errors (a failing check) are this call's: they propagate.
        outputs = _run_on(stream, self.body, inputs)
        self.counts.eager_runs += 1
        try:
            graph, static_outputs, nbytes = _capture(stream, self.body, inputs)
        except Exception as e:  # noqa: BLE001 - anything the body does that capture refuses
            self._give_up(e)
            return outputs
        self.counts.captures += 1
        entry = Entry(self, key, graph, tuple(static_outputs), nbytes)
        if not self.memory.add(entry, LIMITS.max_entries, max_bytes):
            log.info("%s: a capture of %d bytes does not fit in %d", self, nbytes, max_bytes)
            if len(self.unfit) >= LIMITS.counted_keys:
                self.unfit.clear()
            self.unfit.add(key)
        return outputs

    def stats(self) -> StretchStats:
        return dataclasses.replace(
            self.counts,
            entries=len(self.entries),
            bytes=sum(entry.nbytes for entry in self.entries.values()),
        )

    def _give_up(self, error: Exception) -> None:
        self.uncapturable = f"{type(error).__name__}: {error}"
        self.counts.failures += 1
        log.warning(
            "%s cannot be captured as a CUDA graph; it runs without one from now on (%s)",
            self.__name__,
            self.uncapturable.splitlines()[0],
        )

    def _caller_is_capturing(self) -> bool:
        return self.device_type == "cuda" and torch.cuda.is_current_stream_capturing()

    def _device(self) -> int:
        return torch.cuda.current_device() if self.device_type == "cuda" else -1

    def _max_bytes(self) -> int:
        if LIMITS.max_bytes is not None:
            return LIMITS.max_bytes
        total = torch.cuda.get_device_properties(self._device()).total_memory
        return min(2 << 30, total // 10)

    def __repr__(self) -> str:
        return f"cuda_graph({self.__name__})"


def stats(since: int = 0) -> list[StretchStats]:
    """What every live stretch with a serial from ``since`` on did and holds."""
    found = [stretch.stats() for stretch in list(_Made.stretches)]
    return sorted((s for s in found if s.serial >= since), key=lambda s: s.serial)


def next_serial() -> int:
    """The serial of the next stretch made: ``stats(since=next_serial())``, taken
    before compiling, reports what was compiled after."""
    return _Made.count


def release_all() -> None:
    """Drop every captured graph (their stretches capture again when called)."""
    MEMORY.release_all()


def _copy_leaves(output: Any) -> Any:
    return tree_map_only(torch.Tensor, _copy, output)


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    copy = torch.empty_strided(
        tensor.size(), tensor.stride(), dtype=tensor.dtype, device=tensor.device
    )
    return copy.copy_(tensor)


_CAPTURE_STREAMS: dict[int, Any] = {}


def _capture_stream(device: int) -> Any:
    """One side stream per device for every capture, so that warming it up once
    (cuBLAS keeps a workspace per stream) serves all of them."""
    if device not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[device] = torch.cuda.Stream(device)
    return _CAPTURE_STREAMS[device]


def _run_on(stream: Any, body: Callable[..., Any], inputs: tuple[Any, ...]) -> Any:
    current = torch.cuda.current_stream()
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        outputs = body(*inputs)
    current.wait_stream(stream)
    return outputs


def _capture(
    stream: Any, body: Callable[..., Any], inputs: tuple[Any, ...]
) -> tuple[Any, Any, int]:
    """A graph of ``body`` on ``inputs`` in a pool of its own, its outputs, and the
    bytes its pool took. Unlike ``torch.cuda.graph``, this leaves the caching
    allocator's cache as it is: emptying it would move the tensors of the calls
    after this one, and with them their keys."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_reserved()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        graph.capture_begin(torch.cuda.graph_pool_handle(), capture_error_mode="thread_local")
        try:
            outputs = body(*inputs)
        except BaseException:
            # End the capture the error invalidated; the body's error says why.
            with contextlib.suppress(Exception):
                graph.capture_end()
            raise
        graph.capture_end()
    return graph, outputs, max(torch.cuda.memory_reserved() - before, 0)
