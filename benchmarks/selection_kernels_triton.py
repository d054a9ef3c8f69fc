"""The kernels of ``selection_kernels.py``, defined when it first needs them (Triton
reads ``TRITON_INTERPRET`` where a kernel is defined).

Each selects the elements of ``x`` that a predicate keeps (``TEST`` 0: ``x > t``,
1: ``|x| > t``, 2: ``x != 0``): their indices (``nonzero``) or, with ``VALUES``, the elements
(``masked_select``), in order, from the start of ``out``; the total goes to
``work[blocks + 1]``.
"""

import triton
import triton.language as tl

from inductor_fx_unbacked.runner.compaction_kernels import (
    _AGGREGATE,
    _PREFIX,
    look_back,
    publish,
    ticket,
)


@triton.jit
def kept(x_ptr, offsets, n, thresh, TEST: tl.constexpr):
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside, other=0)
    if TEST == 0:
        keep = x > thresh
    elif TEST == 1:
        keep = tl.abs(x) > thresh
    else:
        keep = x != 0
    return keep & inside, x


@triton.jit
def write(keep, x, offsets, start, out_ptr, VALUES: tl.constexpr):
    place = start + (tl.cumsum(keep.to(tl.int32), axis=0) - 1).to(tl.int64)
    if VALUES:
        tl.store(out_ptr + place, x, mask=keep)
    else:
        tl.store(out_ptr + place, offsets, mask=keep)


@triton.jit(do_not_specialize=["n", "blocks", "thresh"])
def tiled_select(
    x_ptr,
    work_ptr,
    out_ptr,
    n,
    blocks,
    thresh,
    BLOCK: tl.constexpr,
    TILES: tl.constexpr,
    VALUES: tl.constexpr,
    TEST: tl.constexpr,
    WINDOW: tl.constexpr,
):
    """One pass, one look-back per program of ``TILES`` tiles of ``BLOCK`` elements:
    count every tile, learn the count before the program, then write each tile
    (read again, from L2, where ``TILES > 1``). ``TILES == 1`` is the package's
    fused selection at one tile a program (``compaction_kernels.write_tile``)."""
    block = ticket(work_ptr, blocks)
    base = block.to(tl.int64) * (BLOCK * TILES)
    count = tl.full([], 0, tl.int64)
    keep, x = kept(x_ptr, base + tl.arange(0, BLOCK), n, thresh, TEST)
    count += tl.sum(keep.to(tl.int32), axis=0).to(tl.int64)
    for t in tl.static_range(1, TILES):
        more, _ = kept(x_ptr, base + t * BLOCK + tl.arange(0, BLOCK), n, thresh, TEST)
        count += tl.sum(more.to(tl.int32), axis=0).to(tl.int64)
    exclusive = tl.full([], 0, tl.int64)
    if block == 0:
        tl.atomic_xchg(work_ptr, count | _PREFIX, sem="release")
    else:
        tl.atomic_xchg(work_ptr + block, count | _AGGREGATE, sem="release")
        exclusive = look_back(work_ptr, block, WINDOW)
        tl.atomic_xchg(work_ptr + block, (exclusive + count) | _PREFIX, sem="release")
    if block == blocks - 1:
        tl.store(work_ptr + blocks + 1, exclusive + count)
    write(keep, x, base + tl.arange(0, BLOCK), exclusive, out_ptr, VALUES)
    start = exclusive + tl.sum(keep.to(tl.int32), axis=0).to(tl.int64)
    for t in range(1, TILES):
        offsets = base + t * BLOCK + tl.arange(0, BLOCK)
        keep, x = kept(x_ptr, offsets, n, thresh, TEST)
        write(keep, x, offsets, start, out_ptr, VALUES)
        start += tl.sum(keep.to(tl.int32), axis=0).to(tl.int64)


@triton.jit(do_not_specialize=["n", "blocks", "thresh"])
def count_kept(
    x_ptr,
    work_ptr,
    ticket_ptr,
    n,
    blocks,
    thresh,
    BLOCK: tl.constexpr,
    TEST: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """The first of two passes: each block's count; the last block turns the counts
    into starts (``compaction_kernels.publish``)."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep, _ = kept(x_ptr, offsets, n, thresh, TEST)
    publish(tl.sum(keep.to(tl.int32), axis=0).to(tl.int64), work_ptr, ticket_ptr, blocks, CHUNK)


@triton.jit(do_not_specialize=["n", "thresh"])
def write_kept(
    x_ptr,
    work_ptr,
    out_ptr,
    n,
    thresh,
    BLOCK: tl.constexpr,
    VALUES: tl.constexpr,
    TEST: tl.constexpr,
):
    """The second pass: read ``x`` again and write each block's kept elements from
    its start."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep, x = kept(x_ptr, offsets, n, thresh, TEST)
    write(keep, x, offsets, tl.load(work_ptr + tl.program_id(0)), out_ptr, VALUES)
