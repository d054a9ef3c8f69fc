"""The Triton kernels of ``compaction.py``, defined when that module first needs
them: Triton reads ``TRITON_INTERPRET`` where a kernel is defined."""

import triton
import triton.language as tl


@triton.jit
def block_offsets(BLOCK: tl.constexpr):
    """The offsets of this program's elements (int64, as the indices written)."""
    return tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def kept_and_places(flags_ptr, work_ptr, offsets, n):
    """Which elements of this block ``flags`` keeps (nonzero), and where each goes:
    the block's start (``work[block]``) plus its rank among the kept."""
    inside = offsets < n
    kept = (tl.load(flags_ptr + offsets, mask=inside, other=0) != 0) & inside
    # The rank in int32 (a block holds far fewer than 2**31 elements): an int64 scan
    # made the compaction 1.7 times ATen's device time at 64M elements and more
    # (benchmarks.compaction_tuning, results/2026-12-05-h100-compaction-tuning-8ac2ec6.md).
    rank = tl.cumsum(kept.to(tl.int32), axis=0) - 1
    return kept, tl.load(work_ptr + tl.program_id(0)) + rank.to(tl.int64)


@triton.jit
def block_starts(work_ptr, blocks, CHUNK: tl.constexpr):
    """Run by the program that counted last: each block's count becomes its
    start (the sum of the counts before it), and the total goes after them (-1
    where a count was negative)."""
    total = tl.full([], 0, tl.int64)
    negative = tl.full([], 0, tl.int64)
    for first in range(0, blocks, CHUNK):
        index = first + tl.arange(0, CHUNK)
        inside = index < blocks
        count = tl.load(work_ptr + index, mask=inside, other=0, volatile=True)
        negative = tl.maximum(negative, tl.max((count < 0).to(tl.int64), axis=0))
        count = tl.maximum(count, 0)
        tl.store(work_ptr + index, total + tl.cumsum(count, axis=0) - count, mask=inside)
        total += tl.sum(count, axis=0)
    tl.store(work_ptr + blocks, tl.where(negative > 0, -1, total))


@triton.jit
def publish(count, work_ptr, ticket_ptr, blocks, CHUNK: tl.constexpr):
    """Store this block's count; the last block to do so computes the starts.

    The ticket is zero when the launch starts (``compaction.run_with_ticket`` says why):
    the block whose increment returns ``blocks - 1`` is the last, and its acquire
    sees every count stored before the other blocks' releases. Every block has
    taken its ticket by then, so that block puts it back to zero for the next
    launch on the stream."""
    pid = tl.program_id(0)
    tl.store(work_ptr + pid, count)
    tl.debug_barrier()
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == blocks - 1:
        block_starts(work_ptr, blocks, CHUNK)
        tl.store(ticket_ptr, 0)


@triton.jit(do_not_specialize=["n", "blocks"])
def count_nonzero(x_ptr, work_ptr, ticket_ptr, n, blocks, BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    offsets = block_offsets(BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0)
    count = tl.sum((x != 0).to(tl.int32), axis=0).to(tl.int64)
    publish(count, work_ptr, ticket_ptr, blocks, CHUNK)


@triton.jit(do_not_specialize=["n", "blocks"])
def sum_repeats(
    r_ptr,
    work_ptr,
    ticket_ptr,
    n,
    blocks,
    BLOCK: tl.constexpr,
    CHUNK: tl.constexpr,
    LONGEST: tl.constexpr,
):
    offsets = block_offsets(BLOCK)
    r = tl.load(r_ptr + offsets, mask=offsets < n, other=0).to(tl.int64)
    # -1 where a repeat is negative, or longer than ``repeated_indices`` writes well
    # (its loop runs the block's longest repeat).
    refused = (tl.min(r, axis=0) < 0) | (tl.max(r, axis=0) > LONGEST)
    count = tl.where(refused, -1, tl.sum(r, axis=0))
    publish(count, work_ptr, ticket_ptr, blocks, CHUNK)


@triton.jit(do_not_specialize=["n"])
def nonzero_indices(x_ptr, work_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = block_offsets(BLOCK)
    kept, place = kept_and_places(x_ptr, work_ptr, offsets, n)
    tl.store(out_ptr + place, offsets, mask=kept)


@triton.jit(do_not_specialize=["n"])
def selected_values(x_ptr, mask_ptr, work_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = block_offsets(BLOCK)
    kept, place = kept_and_places(mask_ptr, work_ptr, offsets, n)
    tl.store(out_ptr + place, tl.load(x_ptr + offsets, mask=kept), mask=kept)


@triton.jit(do_not_specialize=["n"])
def repeated_indices(r_ptr, work_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = block_offsets(BLOCK)
    r = tl.load(r_ptr + offsets, mask=offsets < n, other=0).to(tl.int64)
    start = tl.load(work_ptr + tl.program_id(0)) + tl.cumsum(r, axis=0) - r
    index = offsets.to(out_ptr.dtype.element_ty)
    for j in range(0, tl.max(r, axis=0)):
        tl.store(out_ptr + start + j, index, mask=j < r)


@triton.jit(do_not_specialize=["n", "blocks"])
def min_max(x_ptr, work_ptr, ticket_ptr, n, blocks, BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    """Each block's least and greatest values at ``work[2 * block]`` and after it; the
    block that finishes last writes those of all at ``work[2 * blocks]`` and after,
    and puts the ticket back to zero (as :func:`publish` does)."""
    pid = tl.program_id(0)
    offsets = block_offsets(BLOCK)
    first = tl.load(x_ptr).to(tl.int64)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=first).to(tl.int64)
    tl.store(work_ptr + 2 * pid, tl.min(x, axis=0))
    tl.store(work_ptr + 2 * pid + 1, tl.max(x, axis=0))
    tl.debug_barrier()
    if tl.atomic_add(ticket_ptr, 1, sem="acq_rel") == blocks - 1:
        least = first
        greatest = first
        for start in range(0, blocks, CHUNK):
            index = start + tl.arange(0, CHUNK)
            inside = index < blocks
            lows = tl.load(work_ptr + 2 * index, mask=inside, other=first, volatile=True)
            highs = tl.load(work_ptr + 2 * index + 1, mask=inside, other=first, volatile=True)
            least = tl.minimum(least, tl.min(lows, axis=0))
            greatest = tl.maximum(greatest, tl.max(highs, axis=0))
        tl.store(work_ptr + 2 * blocks, least)
        tl.store(work_ptr + 2 * blocks + 1, greatest)
        tl.store(ticket_ptr, 0)


@triton.jit(do_not_specialize=["n", "least_at"])
def mark_values(x_ptr, flags_ptr, work_ptr, least_at, n, BLOCK: tl.constexpr):
    """``flags[x - least] = 1`` for each value ``x`` (``least`` is ``work[least_at]``)."""
    offsets = block_offsets(BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside, other=0).to(tl.int64)
    least = tl.load(work_ptr + least_at)
    tl.store(flags_ptr + (x - least), 1, mask=inside)


@triton.jit(do_not_specialize=["n", "least_at"])
def distinct_values(flags_ptr, work_ptr, least_work_ptr, least_at, out_ptr, n, BLOCK: tl.constexpr):
    """Each flagged offset plus ``least``, at its block's start plus its rank."""
    offsets = block_offsets(BLOCK)
    kept, place = kept_and_places(flags_ptr, work_ptr, offsets, n)
    value = offsets + tl.load(least_work_ptr + least_at)
    tl.store(out_ptr + place, value.to(out_ptr.dtype.element_ty), mask=kept)


@triton.jit(do_not_specialize=["n", "least_at"])
def count_values(x_ptr, counts_ptr, work_ptr, least_at, n, BLOCK: tl.constexpr):
    """``counts[x - least] += 1`` for each value ``x`` (``least`` is ``work[least_at]``):
    integer atomics, so the counts are exact in any order."""
    offsets = block_offsets(BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside, other=0).to(tl.int64)
    least = tl.load(work_ptr + least_at)
    tl.atomic_add(counts_ptr + (x - least), inside.to(tl.int32), mask=inside, sem="relaxed")


@triton.jit(do_not_specialize=["n"])
def distinct_counts(counts_ptr, work_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Each nonzero count, at its block's start plus its rank (where
    :func:`distinct_values` writes its value)."""
    offsets = block_offsets(BLOCK)
    kept, place = kept_and_places(counts_ptr, work_ptr, offsets, n)
    count = tl.load(counts_ptr + offsets, mask=kept, other=0).to(tl.int64)
    tl.store(out_ptr + place, count, mask=kept)


@triton.jit(do_not_specialize=["n"])
def distinct_places(flags_ptr, work_ptr, places_ptr, n, BLOCK: tl.constexpr):
    """``places[offset]``: where the value at each flagged offset is written; the
    other offsets are left as they were (no value maps to them)."""
    offsets = block_offsets(BLOCK)
    kept, place = kept_and_places(flags_ptr, work_ptr, offsets, n)
    tl.store(places_ptr + offsets, place, mask=kept)


@triton.jit(do_not_specialize=["n", "least_at"])
def inverse_indices(x_ptr, places_ptr, work_ptr, least_at, out_ptr, n, BLOCK: tl.constexpr):
    """``out[i] = places[x[i] - least]``: the index of each element's value among the
    distinct values."""
    offsets = block_offsets(BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside, other=0).to(tl.int64)
    least = tl.load(work_ptr + least_at)
    tl.store(out_ptr + offsets, tl.load(places_ptr + (x - least), mask=inside), mask=inside)


# The one-pass selection that ``fused_selections.py`` makes of a predicate's kernel.

#: A block's status word: its count or inclusive prefix in the low bits, what the
#: word holds in the two bits above (0: nothing yet, while the word is zero).
_AGGREGATE = tl.constexpr(1 << 60)
_PREFIX = tl.constexpr(2 << 60)
_VALUE = tl.constexpr((1 << 60) - 1)


@triton.jit
def ticket(work_ptr, blocks):
    """This program's place in the order in which programs started (``work[blocks]``,
    zero at the launch, counts them): a program waits only on programs that
    started before it, which are resident, so the look-back always ends."""
    return tl.atomic_add(work_ptr + blocks, 1, sem="relaxed")


@triton.jit
def look_back(work_ptr, block, WINDOW: tl.constexpr):
    """The sum of the counts of the blocks before ``block``, from their status words
    (decoupled look-back): ``WINDOW`` words at a time, nearest first, summing the
    counts up to the nearest inclusive prefix, and reading the window again while
    one of those words is still empty. A word before block 0 reads as a prefix of 0."""
    k = tl.arange(0, WINDOW)
    exclusive = tl.full([], 0, tl.int64)
    end = block.to(tl.int64)
    done = tl.full([], 0, tl.int32)
    while done == 0:
        index = end - 1 - k
        status = tl.load(work_ptr + index, mask=index >= 0, other=_PREFIX, volatile=True)
        kind = status >> 60
        nearest_prefix = tl.min(tl.where(kind == 2, k, WINDOW), axis=0)
        nearest_empty = tl.min(tl.where(kind == 0, k, WINDOW), axis=0)
        ready = (nearest_empty > nearest_prefix) | (nearest_empty == WINDOW)
        counts = tl.sum(tl.where(k <= nearest_prefix, status & _VALUE, 0), axis=0)
        exclusive += tl.where(ready, counts, 0)
        found = ready & (nearest_prefix < WINDOW)
        end -= tl.where(ready & (nearest_prefix == WINDOW), WINDOW, 0)
        done = found.to(tl.int32)
    return exclusive


@triton.jit
def tile_count(keep, tile, n, BLOCK: tl.constexpr):
    """How many elements of ``tile`` (``BLOCK`` elements, the last maybe short)
    ``keep`` keeps."""
    offsets = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    return tl.sum(((keep != 0) & (offsets < n)).to(tl.int32), axis=0).to(tl.int64)


@triton.jit
def program_start(count, program, work_ptr, blocks, WINDOW: tl.constexpr):
    """The sum of the counts of the programs before ``program``, which counted
    ``count``: publish the count, look back, publish the inclusive prefix. The last
    program writes the total at ``work[blocks + 1]``."""
    exclusive = tl.full([], 0, tl.int64)
    if program == 0:
        tl.atomic_xchg(work_ptr, count | _PREFIX, sem="release")
    else:
        tl.atomic_xchg(work_ptr + program, count | _AGGREGATE, sem="release")
        exclusive = look_back(work_ptr, program, WINDOW)
        tl.atomic_xchg(work_ptr + program, (exclusive + count) | _PREFIX, sem="release")
    if program == blocks - 1:
        tl.store(work_ptr + blocks + 1, exclusive + count)
    return exclusive


@triton.jit
def write_tile(
    keep,
    loaded,
    tile,
    start,
    n,
    values_ptr,
    out_ptr,
    BLOCK: tl.constexpr,
    VALUES: tl.constexpr,
    LOADED: tl.constexpr,
    STORED: tl.constexpr,
):
    """Write the elements of ``tile`` that ``keep`` keeps, in order, from ``start``:
    their indices (``nonzero``), or with ``VALUES`` the values at them
    (``masked_select``): ``loaded`` where ``LOADED`` (the kernel loaded the values at
    the tile's elements itself), else read from ``values_ptr``. ``STORED``: the
    kernel stored other buffers before (the values among them, maybe), which the
    program's threads then see. Returns ``start`` plus the count written."""
    offsets = tile.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep = (keep != 0) & (offsets < n)
    # The rank in int32, as in ``kept_and_places``.
    rank = tl.cumsum(keep.to(tl.int32), axis=0)
    place = start + (rank - 1).to(tl.int64)
    if VALUES:
        if LOADED:
            tl.store(out_ptr + place, loaded, mask=keep)
        else:
            if STORED:
                tl.debug_barrier()
            tl.store(out_ptr + place, tl.load(values_ptr + offsets, mask=keep), mask=keep)
    else:
        tl.store(out_ptr + place, offsets, mask=keep)
    return start + tl.max(rank, axis=0).to(tl.int64)
