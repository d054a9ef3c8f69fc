"""The runner's compactions (``runner/compaction.py``): ATen's ``nonzero``,
``masked_select`` and ``repeat_interleave`` through the runner's own kernels.

They must compute exactly the operator's tensor (values, sizes, strides, dtype)
on every input, hand every input they do not cover to the operator (which raises
its own errors), and leave the FX graph as it is: the graph still says
``aten.nonzero``, only the lowered runner calls the kernels. On CPU they run in
Triton's interpreter (``INTERPRETED``), as the CPU mode runs Inductor's kernels.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.programs import BY_NAME, same
from inductor_fx_unbacked.runner import compaction, fused_selections

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BLOCK = compaction.BLOCK
aten = torch.ops.aten


@pytest.fixture(autouse=True)
def kernels_run():
    """The kernels run on this machine's device (in the interpreter on CPU, under the
    CPU mode's patches of it)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(ifx.fx_backend(DEVICE))
        stack.enter_context(mock.patch.object(compaction, "INTERPRETED", True))
        yield


def assert_same_tensor(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert got.stride() == expected.stride()
    assert torch.equal(got, expected)


def counting_launches():
    """A patch that counts the runner's kernel launches."""
    calls = []
    original = compaction._Call.run

    def run(self, kernel, *args):
        calls.append(kernel.__name__)
        return original(self, kernel, *args)

    return calls, mock.patch.object(compaction._Call, "run", run)


# Sizes around the block: one element, one block, one more, several blocks.
SIZES = [1, BLOCK, BLOCK + 1, 3 * BLOCK + 5]


@pytest.mark.parametrize(
    "n",
    [pytest.param(n, marks=() if n == 3 * BLOCK + 5 else pytest.mark.full) for n in SIZES],
)
@pytest.mark.parametrize("kept", [0.0, 0.3, 1.0])
def test_nonzero_and_masked_select_equal_aten(n, kept):
    g = torch.Generator().manual_seed(n)
    mask = (torch.rand(n, generator=g) < kept).to(DEVICE)
    values = torch.randn(n, generator=g).to(DEVICE)
    calls, counting = counting_launches()
    with counting:
        assert_same_tensor(compaction.nonzero(mask), aten.nonzero.default(mask))
        assert_same_tensor(
            compaction.masked_select(values, mask), aten.masked_select.default(values, mask)
        )
    # The count (the last block computes the starts), then the compaction, none
    # where nothing is kept.
    kept_any = bool(mask.any())
    expected = ["count_nonzero"] + ["nonzero_indices"] * kept_any
    expected += ["count_nonzero"] + ["selected_values"] * kept_any
    assert calls == expected


@pytest.mark.full
@pytest.mark.parametrize("dtype", [torch.int32, torch.float16, torch.float64, torch.uint8])
def test_nonzero_of_values_equals_aten(dtype):
    x = torch.randint(-2, 3, (2 * BLOCK + 7,), generator=torch.Generator().manual_seed(1))
    x = x.to(dtype=dtype, device=DEVICE)
    assert_same_tensor(compaction.nonzero(x), aten.nonzero.default(x))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_repeat_interleave_equals_aten(dtype):
    g = torch.Generator().manual_seed(2)
    repeats = torch.randint(0, 6, (2 * BLOCK + 3,), generator=g, dtype=dtype).to(DEVICE)
    longest = compaction.LONGEST_REPEAT
    repeats[BLOCK - 1] = longest  # the longest run the kernels write, across a block's end
    calls, counting = counting_launches()
    with counting:
        assert_same_tensor(
            compaction.repeat_interleave(repeats), aten.repeat_interleave.Tensor(repeats)
        )
        repeats[7] = longest + 1  # longer: ATen's writes it
        assert_same_tensor(
            compaction.repeat_interleave(repeats), aten.repeat_interleave.Tensor(repeats)
        )
    assert calls == ["sum_repeats", "repeated_indices", "sum_repeats"], calls
    zeros = torch.zeros(5, dtype=dtype, device=DEVICE)
    assert_same_tensor(compaction.repeat_interleave(zeros), aten.repeat_interleave.Tensor(zeros))


def test_an_input_that_starts_off_alignment_is_read_from_its_start():
    base = torch.randn(BLOCK + 9, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    x = base[1:]  # 4 bytes into its storage
    assert x.data_ptr() % 16 != 0
    assert_same_tensor(compaction.nonzero(x > 0), aten.nonzero.default(x > 0))
    assert_same_tensor(compaction.masked_select(x, x > 0), aten.masked_select.default(x, x > 0))
    aligned = base[4:]
    assert_same_tensor(compaction.nonzero(aligned), aten.nonzero.default(aligned))


def test_what_the_kernels_do_not_cover_goes_to_the_operator():
    g = torch.Generator().manual_seed(4)
    grid = torch.randn(6, 7, generator=g).to(DEVICE) > 0
    strided = torch.randn(40, generator=g).to(DEVICE)[::2]
    empty = torch.zeros(0, dtype=torch.bool, device=DEVICE)
    calls, counting = counting_launches()
    with counting:
        assert_same_tensor(compaction.nonzero(grid), aten.nonzero.default(grid))
        assert_same_tensor(compaction.nonzero(strided), aten.nonzero.default(strided))
        assert_same_tensor(compaction.nonzero(empty), aten.nonzero.default(empty))
        broadcast = torch.randn(6, 7, generator=g).to(DEVICE)
        assert_same_tensor(
            compaction.masked_select(broadcast, grid[0]),
            aten.masked_select.default(broadcast, grid[0]),
        )
        repeats = torch.tensor([1, 2, 3], device=DEVICE)
        assert_same_tensor(
            compaction.repeat_interleave(repeats, output_size=6),
            aten.repeat_interleave.Tensor(repeats, output_size=6),
        )
    assert calls == []


def test_negative_repeats_raise_the_operators_error():
    repeats = torch.tensor([1, -1, 2], device=DEVICE)
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        compaction.repeat_interleave(repeats)


@pytest.mark.parametrize("name", ["P1", "P6", "P7", "P8"])
def test_programs_run_the_kernels_and_keep_the_operators_in_the_graph(name, monkeypatch):
    # The compactions themselves: fusion off, as by default (test_fxir_fused_selections).
    monkeypatch.setattr(fused_selections, "ENABLED", False)
    program = BY_NAME[name]
    inputs = program.inputs(DEVICE, 3 * BLOCK + 5)
    artifact = ifx.compile(program.fn, *inputs[0])
    operator = {
        "P1": aten.nonzero.default,
        "P6": aten._unique2.default,
        "P7": aten.masked_select.default,
        "P8": aten.repeat_interleave.Tensor,
    }[name]
    # The graph says the operator, and defines the size from its result.
    graph = artifact.graph.graph
    (node,) = graph.find_nodes(op="call_function", target=operator)
    defined = [n for n in graph.nodes if n.meta.get("unbacked_symbol") is not None]
    read = {m for d in defined for m in d.all_input_nodes}
    assert node in read or any(u in read for u in node.users), artifact.graph.code
    # The runner calls the runner's function in its place.
    called = artifact._run.__globals__.values()
    assert compaction.REPLACEMENTS[operator] in called and operator not in called
    calls, counting = counting_launches()
    with counting:
        for args in inputs:  # kept counts that differ
            assert same(artifact(*args), program.fn(*args))
    if name == "P6":
        # The first input spans fewer values than it has; the second (up to 50000
        # over 12293 elements) more, and goes to ATen's unique after its range.
        assert calls == ["min_max", "mark_values", "count_nonzero", "distinct_values", "min_max"]
    else:
        assert len(calls) == 2 * 2, calls  # the count and the compaction, per call


def garbage_work_buffers():
    """A patch under which every buffer the runner allocates starts as non-zero garbage,
    as a reused allocation can: 2 for the int64 ones, which a ticket of 2 would make
    the third of four blocks to count the "last" one."""
    original = compaction._Call.empty

    def empty(self, size, stride, dtype):
        return original(self, size, stride, dtype).fill_(2)

    return mock.patch.object(compaction._Call, "empty", empty)


def test_nothing_the_allocator_hands_out_reaches_the_starts_or_the_total():
    """The work buffers are not zeroed (every block writes its slot before the last
    reads it) and the ticket is not in them."""
    g = torch.Generator().manual_seed(8)
    n = 3 * BLOCK + 5  # four blocks
    mask = (torch.rand(n, generator=g) < 0.5).to(DEVICE)
    values = torch.randn(n, generator=g).to(DEVICE)
    repeats = torch.randint(0, 4, (n,), generator=g).to(DEVICE)
    integers = torch.randint(0, 3 * n, (n,), generator=g).to(DEVICE)
    with garbage_work_buffers():
        assert_same_tensor(compaction.nonzero(mask), aten.nonzero.default(mask))
        assert_same_tensor(
            compaction.masked_select(values, mask), aten.masked_select.default(values, mask)
        )
        assert_same_tensor(
            compaction.repeat_interleave(repeats), aten.repeat_interleave.Tensor(repeats)
        )
        assert_same_tensor(compaction.unique(integers)[0], aten._unique2.default(integers)[0])
    assert all(ticket.item() == 0 for ticket in compaction._TICKETS.values())


def test_nonzero_over_the_largest_size_goes_to_atens_operator():
    """Only ``nonzero``'s: the other kernels beat ATen's at every size measured."""
    g = torch.Generator().manual_seed(2)
    n = 2 * BLOCK + 1
    mask = (torch.rand(n, generator=g) < 0.5).to(DEVICE)
    values = torch.randn(n, generator=g).to(DEVICE)
    repeats = torch.randint(0, 3, (n,), generator=g).to(DEVICE)
    calls, counting = counting_launches()
    for largest, launched in ((n, True), (n - 1, False)):
        calls.clear()
        with counting, mock.patch.object(compaction, "LARGEST", largest):
            assert_same_tensor(compaction.nonzero(mask), aten.nonzero.default(mask))
        assert bool(calls) == launched, (largest, calls)
        calls.clear()
        with counting, mock.patch.object(compaction, "LARGEST", largest):
            assert_same_tensor(
                compaction.masked_select(values, mask), aten.masked_select.default(values, mask)
            )
            assert_same_tensor(
                compaction.repeat_interleave(repeats), aten.repeat_interleave.Tensor(repeats)
            )
        assert calls == ["count_nonzero", "selected_values", "sum_repeats", "repeated_indices"], (
            largest,
            calls,
        )


def test_calls_in_a_row_each_count_afresh():
    """Every launch finds its stream's ticket at zero, on every stream, and leaves it
    so."""
    g = torch.Generator().manual_seed(5)
    masks = [(torch.rand(3 * BLOCK + 5, generator=g) < p).to(DEVICE) for p in (0.1, 0.9, 0, 0.5)]
    streams = [None]
    if DEVICE == "cuda":
        streams.append(torch.cuda.Stream())
    for stream in streams:
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            results = [compaction.nonzero(mask) for mask in masks * 2]
            for mask, result in zip(masks * 2, results):
                assert_same_tensor(result, aten.nonzero.default(mask))
    if DEVICE == "cuda":
        kept = {stream for _, stream in compaction._TICKETS}
        assert {torch.cuda.current_stream().cuda_stream, streams[1].cuda_stream} <= kept
    assert all(ticket.item() == 0 for ticket in compaction._TICKETS.values())


@contextlib.contextmanager
def a_stream_on_cpu():
    """On CPU, tickets kept as a CUDA stream's are (the interpreter has no stream)."""
    key = (None, None)
    with mock.patch.object(compaction, "_keeps_ticket", lambda call: True):
        try:
            yield key
        finally:
            compaction._TICKETS.pop(key, None)


@pytest.mark.skipif(DEVICE != "cpu", reason="a stream simulated in the interpreter")
def test_a_launch_that_raises_takes_its_streams_ticket_with_it():
    """A count launch that fails partway (after some blocks took their tickets) must
    not leave a non-zero ticket for the next call on its stream."""
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(3 * BLOCK + 5, generator=g) < 0.5
    original = compaction._Call.run

    def half_launch(self, kernel, constexprs, blocks, args):
        args[2].add_(2)  # two blocks took their tickets
        raise RuntimeError("the launch failed")

    with a_stream_on_cpu() as key:
        assert_same_tensor(compaction.nonzero(mask), aten.nonzero.default(mask))
        kept = compaction._TICKETS[key]
        assert kept.item() == 0  # put back by the last block
        with mock.patch.object(compaction._Call, "run", half_launch):
            with pytest.raises(RuntimeError, match="the launch failed"):
                compaction.nonzero(mask)
        assert key not in compaction._TICKETS and kept.item() == 2
        assert original is compaction._Call.run
        assert_same_tensor(compaction.nonzero(mask), aten.nonzero.default(mask))
        assert compaction._TICKETS[key] is not kept and compaction._TICKETS[key].item() == 0


@pytest.mark.skipif(DEVICE != "cuda", reason="needs a GPU")
def test_a_count_captured_in_a_cuda_graph_counts_right_on_every_replay():
    """A capture of the count alone (the read of its total syncs, which a capture
    refuses): the ticket made in the capture is zeroed on each replay, the stream's
    own is not taken into the graph."""
    g = torch.Generator(device=DEVICE).manual_seed(4)
    n = 5 * BLOCK + 1
    mask = torch.rand(n, device=DEVICE, generator=g) < 0.5
    blocks = -(-n // BLOCK)
    stream = torch.cuda.Stream()
    work = torch.empty(blocks + 1, dtype=torch.int64, device=DEVICE)
    compaction.nonzero(mask)  # compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            call = compaction._Call(mask)
            kept_in_capture = compaction._keeps_ticket(call)
            compaction._count(call, "count_nonzero", blocks, mask, work)
        assert not kept_in_capture
        assert (0, stream.cuda_stream) not in compaction._TICKETS
        for kept in (0.1, 0.9, 0.5):
            mask.copy_(torch.rand(n, device=DEVICE, generator=g) < kept)
            work.fill_(2)
            graph.replay()
            assert work[blocks].item() == int(mask.sum())
    assert all(ticket.item() == 0 for ticket in compaction._TICKETS.values())


@pytest.mark.skipif(DEVICE != "cuda", reason="the interpreter compiles nothing")
def test_a_fresh_cache_dir_gets_the_kernels_binaries(tmp_path):
    """Inductor's ``fresh_cache()`` makes the kernels compile again, into its dir:
    kernels kept compiled in memory would leave a fresh dir without their
    binaries, and a process started on it would compile them again."""
    from torch._inductor.utils import fresh_cache

    mask = torch.rand(3 * BLOCK + 5, device=DEVICE) < 0.5
    compaction.nonzero(mask)  # compiled, and kept, before the fresh dir
    with fresh_cache(dir=str(tmp_path)):
        assert_same_tensor(compaction.nonzero(mask), aten.nonzero.default(mask))
        # fresh_cache makes its dir under ``tmp_path``, and deletes it on exit.
        triton_dir = Path(os.environ["TRITON_CACHE_DIR"])
        binaries = {path.name for path in triton_dir.rglob("*.cubin")}
        stored = stored_kernels(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]))
    assert {"count_nonzero.cubin", "nonzero_indices.cubin"} <= binaries, binaries
    # The runner's store, in the fresh dir too (none where the caches are forced off).
    assert len(stored) == (0 if torch._inductor.config.force_disable_caches else 2), stored


def stored_kernels(inductor_dir: Path) -> list[Path]:
    return sorted((inductor_dir / "inductor_fx_unbacked" / "kernels").glob("*.launcher"))


NEW_PROCESS_NONZERO = """
import json, torch
from inductor_fx_unbacked.runner import compaction
mask = torch.rand(3 * compaction.BLOCK + 5, device="cuda") < 0.5
same = torch.equal(compaction.nonzero(mask), torch.nonzero(mask))
kernels = [k for k, _ in compaction._kernels().values()]
compiled = sum(len(c[0]) for k in kernels for c in k.device_caches.values())
print(json.dumps({"same": same, "jit_compiles": compiled}))
"""


def nonzero_in_new_process(inductor_dir: Path, triton_dir: Path, **env: str) -> dict:
    # Inductor's caches as users have them (on), unless ``env`` says otherwise.
    inherited = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_FORCE_DISABLE_CACHES"}
    done = subprocess.run(
        [sys.executable, "-c", NEW_PROCESS_NONZERO],
        env={
            **inherited,
            "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir),
            "TRITON_CACHE_DIR": str(triton_dir),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(DEVICE != "cuda", reason="the interpreter compiles nothing")
def test_a_new_process_loads_the_kernels_from_the_store(tmp_path):
    """The first process compiles and stores the kernels; the next one loads them
    without Triton's JIT; a corrupt entry is compiled again and replaced."""
    inductor_dir, triton_dir = tmp_path / "inductor", tmp_path / "triton"
    first = nonzero_in_new_process(inductor_dir, triton_dir)
    assert first == {"same": True, "jit_compiles": 2}
    stored = stored_kernels(inductor_dir)
    assert len(stored) == 2
    second = nonzero_in_new_process(inductor_dir, triton_dir)
    assert second == {"same": True, "jit_compiles": 0}
    stored[0].write_bytes(b"not a launcher")
    third = nonzero_in_new_process(inductor_dir, triton_dir)
    assert third == {"same": True, "jit_compiles": 1}
    assert stored[0].read_bytes() != b"not a launcher"


@pytest.mark.skipif(DEVICE != "cuda", reason="the interpreter compiles nothing")
def test_with_inductors_caches_disabled_the_store_is_neither_read_nor_written(tmp_path):
    inductor_dir, triton_dir = tmp_path / "inductor", tmp_path / "triton"
    nonzero_in_new_process(inductor_dir, triton_dir)
    before = {path: path.read_bytes() for path in stored_kernels(inductor_dir)}
    disabled = nonzero_in_new_process(
        inductor_dir, triton_dir, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1"
    )
    assert disabled == {"same": True, "jit_compiles": 2}
    assert {path: path.read_bytes() for path in stored_kernels(inductor_dir)} == before


def unique_launches(inverse: bool, counts: bool) -> list[str]:
    marks = "count_values" if counts else "mark_values"
    launches = ["min_max", marks, "count_nonzero", "distinct_values"]
    inverting = ["distinct_places", "inverse_indices"]
    return launches + ["distinct_counts"] * counts + inverting * inverse


@pytest.mark.parametrize(
    "dtype", [torch.int64, pytest.param(torch.int32, marks=pytest.mark.full), torch.uint8]
)
@pytest.mark.parametrize(
    "inverse,counts",
    [
        (False, False),
        (True, True),
        pytest.param(True, False, marks=pytest.mark.full),
        pytest.param(False, True, marks=pytest.mark.full),
    ],
)
def test_unique_of_integers_equals_aten(dtype, inverse, counts):
    g = torch.Generator().manual_seed(6)
    high = 200 if dtype == torch.uint8 else 3000
    x = torch.randint(0, high, (2 * BLOCK + 11,), generator=g).to(dtype=dtype, device=DEVICE)
    if dtype != torch.uint8:
        x[5] = -7  # below the rest
    calls, counting = counting_launches()
    with counting:
        got = compaction.unique(x, True, inverse, counts)
    for mine, theirs in zip(got, aten._unique2.default(x, True, inverse, counts), strict=True):
        assert_same_tensor(mine, theirs)
    assert calls == unique_launches(inverse, counts)


@pytest.mark.parametrize(
    "name,values",
    [
        ("one element", [5]),
        ("all equal", [-3] * (3 * BLOCK + 5)),
        ("a value counted over a block", [0] * (BLOCK + 7) + [1, 2, 2, 9] + [0] * 3),
        ("the greatest int64", [2**63 - 1, 2**63 - 3, 2**63 - 1, 2**63 - 2]),
        ("the least int64", [-(2**63) + 2, -(2**63), -(2**63)]),
        ("every value once", list(range(BLOCK + 3, 0, -1))),
    ],
)
def test_unique_with_inverse_and_counts_equals_aten_at_the_edges(name, values):
    x = torch.tensor(values, dtype=torch.int64, device=DEVICE)
    calls, counting = counting_launches()
    with counting:
        got = compaction.unique(x, True, True, True)
    for mine, theirs in zip(got, aten._unique2.default(x, True, True, True), strict=True):
        assert_same_tensor(mine, theirs)
    assert calls == unique_launches(True, True), name


@settings(max_examples=40, derandomize=True, deadline=None, database=None)
@given(
    n=st.integers(1, 2 * BLOCK + 3),
    span=st.integers(1, 3 * BLOCK),
    low=st.integers(-(2**40), 2**40),
    dtype=st.sampled_from([torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]),
    inverse=st.booleans(),
    counts=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_unique_equals_aten_on_drawn_integers(n, span, low, dtype, inverse, counts, seed):
    """Drawn sizes around the block, ranges narrower and wider than the elements,
    every integer dtype at its extremes, each combination of inverse and counts:
    the kernels' result equals ATen's, or ATen's is returned."""
    info = torch.iinfo(dtype)
    low = max(info.min, min(low, info.max - span + 1))
    high = min(info.max, low + span - 1)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(low, high + 1, (n,), generator=g, dtype=torch.int64).to(dtype).to(DEVICE)
    calls, counting = counting_launches()
    with counting:
        got = compaction.unique(x, True, inverse, counts)
    for mine, theirs in zip(got, aten._unique2.default(x, True, inverse, counts), strict=True):
        assert_same_tensor(mine, theirs)
    narrow = int(x.max()) - int(x.min()) + 1 <= n
    assert calls == (unique_launches(inverse, counts) if narrow else ["min_max"])


def test_unique_over_a_wide_range_unsorted_or_of_floats_goes_to_the_operator():
    g = torch.Generator().manual_seed(7)
    wide = torch.randint(-(2**40), 2**40, (BLOCK,), generator=g).to(DEVICE)
    narrow = torch.randint(0, 9, (BLOCK,), generator=g).to(DEVICE)
    floats = torch.randn(BLOCK, generator=g).to(DEVICE)
    calls, counting = counting_launches()
    with counting:
        for args in [(wide, True, True, True), (narrow, False, True), (floats,)]:
            mine, theirs = compaction.unique(*args), aten._unique2.default(*args)
            for a, b in zip(mine, theirs, strict=True):
                assert_same_tensor(a, b)
    assert calls == ["min_max"], calls  # the wide range was measured, then left to ATen


# On a GPU: what the interpreter, which runs one block after another on one
# stream, cannot show.
needs_cuda = pytest.mark.skipif(DEVICE != "cuda", reason="needs a GPU")


@needs_cuda
@pytest.mark.parametrize("blocks", [compaction.CHUNK + 1, 4 * compaction.CHUNK + 3])
def test_the_last_block_to_count_sees_every_blocks_count(blocks):
    """The blocks count at once; the one whose ticket is ``blocks - 1`` must see every
    other block's count (the ticket's acquire and release), over several steps of
    the prefix sum (``CHUNK`` blocks each), call after call."""
    g = torch.Generator(device=DEVICE).manual_seed(blocks)
    n = blocks * BLOCK - 17
    calls, counting = counting_launches()
    with counting, mock.patch.object(compaction, "LARGEST", n):
        for kept in (0.001, 0.5, 0.999) * 8:
            mask = torch.rand(n, device=DEVICE, generator=g) < kept
            assert_same_tensor(compaction.nonzero(mask), aten.nonzero.default(mask))
        repeats = torch.randint(0, 4, (n,), device=DEVICE, generator=g)
        assert_same_tensor(
            compaction.repeat_interleave(repeats), aten.repeat_interleave.Tensor(repeats)
        )
        integers = torch.randint(0, n, (n,), device=DEVICE, generator=g)  # span <= n
        assert_same_tensor(compaction.unique(integers)[0], aten._unique2.default(integers)[0])
    assert calls.count("count_nonzero") == 24 + 1 and "sum_repeats" in calls, calls
    assert "min_max" in calls and "distinct_values" in calls, calls


@needs_cuda
def test_cuda_launches_go_through_inductors_static_launcher():
    from torch._inductor.runtime.triton_heuristics import StaticallyLaunchedCudaKernel

    launched = []
    original = StaticallyLaunchedCudaKernel.run

    def run(self, *args, **kwargs):
        launched.append(self.name)
        return original(self, *args, **kwargs)

    mask = torch.rand(3 * BLOCK + 5, device=DEVICE) < 0.5
    with mock.patch.object(StaticallyLaunchedCudaKernel, "run", run):
        for _ in range(2):  # compiled (or loaded from the store), then kept
            assert_same_tensor(compaction.nonzero(mask), aten.nonzero.default(mask))
    assert launched == ["count_nonzero", "nonzero_indices"] * 2


@needs_cuda
def test_calls_on_two_streams_at_once_each_count_their_own():
    g = torch.Generator(device=DEVICE).manual_seed(9)
    n = 64 * BLOCK + 3
    masks = [torch.rand(n, device=DEVICE, generator=g) < kept for kept in (0.1, 0.5, 0.9, 0.3)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()  # the masks are ready for both streams
    results = []
    for i, mask in enumerate(masks * 4):
        with torch.cuda.stream(streams[i % 2]):
            results.append(compaction.nonzero(mask))
    torch.cuda.synchronize()
    for mask, result in zip(masks * 4, results):
        assert_same_tensor(result, aten.nonzero.default(mask))


FAILED_CAPTURE = """
import json, torch
from inductor_fx_unbacked.runner import compaction
g = torch.Generator(device="cuda").manual_seed(10)
masks = [torch.rand(5 * compaction.BLOCK + 1, device="cuda", generator=g) < k for k in (0.2, 0.7)]
compaction.nonzero(masks[0])  # compiled before the capture
stream = torch.cuda.Stream()
try:
    with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=stream):
        compaction.nonzero(masks[0])
    raised = None
except RuntimeError as e:
    raised = type(e).__name__
torch.cuda.synchronize()
with torch.cuda.stream(stream):
    results = [compaction.nonzero(mask) for mask in masks * 2]
torch.cuda.synchronize()
expected = [torch.nonzero(mask) for mask in masks * 2]
same = [torch.equal(r, e) and r.stride() == e.stride() for r, e in zip(results, expected)]
print(json.dumps({"raised": raised, "same": same}))
"""


@needs_cuda
def test_a_call_inside_a_failed_capture_leaves_later_calls_right():
    """Inside a CUDA-graph capture the work buffer's zero-fill and the count are only
    recorded, and reading the total raises (a capture cannot wait for the host).
    Nothing of that call is kept: later calls on the capture's stream count right.
    In a process of its own: a failed capture leaves torch's current stream and its
    generator's capture state behind."""
    done = subprocess.run(
        [sys.executable, "-c", FAILED_CAPTURE], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["raised"] is not None, "reading the total inside the capture raised nothing"
    assert result["same"] == [True] * 4, result
