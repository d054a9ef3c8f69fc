"""The kernels of ``compaction_tuning.py``: the runner's count and write kernels
with the in-block rank's dtype a parameter (the runner's rank in int64), defined
when that module first needs them (Triton reads ``TRITON_INTERPRET`` where a
kernel is defined)."""

import triton
import triton.language as tl

from inductor_fx_unbacked.runner.compaction_kernels import block_offsets, publish


@triton.jit
def count(x_ptr, work_ptr, ticket_ptr, n, blocks, BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    offsets = block_offsets(BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n, other=0)
    total = tl.sum((x != 0).to(tl.int32), axis=0).to(tl.int64)
    publish(total, work_ptr, ticket_ptr, blocks, CHUNK)


@triton.jit
def places(flags_ptr, work_ptr, offsets, n, RANK: tl.constexpr):
    inside = offsets < n
    kept = (tl.load(flags_ptr + offsets, mask=inside, other=0) != 0) & inside
    rank = tl.cumsum(kept.to(RANK), axis=0) - 1
    return kept, tl.load(work_ptr + tl.program_id(0)) + rank.to(tl.int64)


@triton.jit
def indices(x_ptr, work_ptr, out_ptr, n, BLOCK: tl.constexpr, RANK: tl.constexpr):
    offsets = block_offsets(BLOCK)
    kept, place = places(x_ptr, work_ptr, offsets, n, RANK)
    tl.store(out_ptr + place, offsets, mask=kept)


@triton.jit
def values(x_ptr, mask_ptr, work_ptr, out_ptr, n, BLOCK: tl.constexpr, RANK: tl.constexpr):
    offsets = block_offsets(BLOCK)
    kept, place = places(mask_ptr, work_ptr, offsets, n, RANK)
    tl.store(out_ptr + place, tl.load(x_ptr + offsets, mask=kept), mask=kept)
