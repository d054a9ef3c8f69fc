"""Data-dependent programs that call user-written Triton kernels.

Kernels are called directly (``kernel[grid](...)``), through ``wrap_triton``,
from a ``torch.library.triton_op``, and autotuned (``@triton.autotune``), with
``tl.constexpr`` parameters at the end, in the middle and first, accumulating with
atomic adds into an output that the autotuner resets (``reset_to_zero``), and with grids
over an unbacked size (the length of a boolean mask's selection, or an
``.item()``). On a CPU-only machine they run in Triton's interpreter
(``TRITON_INTERPRET=1``). Inputs reuse the corpus helpers, so each program has
inputs with different data-dependent sizes, one of them empty.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from programs import CorpusProgram, signs, values, with_count
from torch.library import triton_op, wrap_triton

USER_KERNELS: list[CorpusProgram] = []


def program(inputs, xfail: str | None = None, eager_wrap_triton: str | None = None):
    def register(fn):
        USER_KERNELS.append(CorpusProgram(fn.__name__, fn, inputs))
        XFAIL[fn.__name__] = xfail
        EAGER_WRAP_TRITON[fn.__name__] = eager_wrap_triton
        return fn

    return register


#: Expected failures by program name, with the defect that causes them.
XFAIL: dict[str, str | None] = {}
#: Programs whose eager run calls ``wrap_triton`` on a kernel: ``"kernel"`` or
#: ``"autotuner"`` (which the interpreter supports on some torch releases only).
EAGER_WRAP_TRITON: dict[str, str | None] = {}


@triton.jit
def add_scaled(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale + 1, mask=mask)


@triton.jit
def fill_index(out_ptr, n, STEP: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, offsets * STEP, mask=offsets < n)


@triton.jit
def shift_middle_constexpr(x_ptr, SHIFT: tl.constexpr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + SHIFT, mask=mask)


@triton.jit
def shift_first_constexpr(SHIFT: tl.constexpr, x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) - SHIFT, mask=mask)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 16})],
    key=["n"],
)
@triton.jit
def autotuned_square(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * x, mask=mask)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 4}), triton.Config({"BLOCK": 16})],
    key=["n"],
    reset_to_zero=["out_ptr"],
)
@triton.jit
def autotuned_atomic_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Adds the first ``n`` values of ``x`` into ``out[0]``, one block at a time: any
    config gives the sum, and only if ``out`` starts at zero (``reset_to_zero``)."""
    for start in range(0, n, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n
        values = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        tl.atomic_add(out_ptr + offsets * 0, values, mask=mask)


def blocks(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


# Called directly, grid over an unbacked size.


@program(signs(3, 11, 0))
def jit_over_mask(x):
    kept = x[x > 0]
    out = torch.empty_like(kept)
    n = kept.shape[0]
    add_scaled[(triton.cdiv(n, 8),)](kept, out, n, 2.0, BLOCK=8)
    return out * 3


@program(with_count(3, 0, 7))
def jit_over_item(x, count):
    n = count.item()
    torch._check(n >= 0)
    out = torch.empty(n, device=x.device, dtype=torch.int32)
    fill_index[blocks(n)](out, n, STEP=3, BLOCK=4)
    return out + 1


@program(signs(5, 14, 0))
def jit_then_mask(x):
    kept = x[x > 0.2]
    out = torch.empty_like(kept)
    n = kept.shape[0]
    add_scaled[blocks(n)](kept, out, n, -1.0, BLOCK=4)
    return out[out > 0.5] * 2


# wrap_triton, grid as a function of the config.


@program(signs(4, 12, 0), eager_wrap_triton="kernel")
def wrap_triton_over_nonzero(x):
    index = torch.nonzero(x > 0).squeeze(1).to(torch.float32)
    out = torch.empty_like(index)
    n = index.shape[0]
    wrap_triton(add_scaled)[blocks(n)](index, out, n, 0.5, BLOCK=8)
    return out


# tl.constexpr in the middle and first.


@program(signs(6, 13, 0))
def constexpr_in_the_middle(x):
    kept = x[x > 0]
    out = torch.empty_like(kept)
    n = kept.shape[0]
    shift_middle_constexpr[blocks(n)](kept, 5, out, n, BLOCK=8)
    return out


@program(signs(6, 13, 0))
def constexpr_first(x):
    kept = x[x < 0]
    out = torch.empty_like(kept)
    n = kept.shape[0]
    shift_first_constexpr[blocks(n)](2, kept, out, n, BLOCK=8)
    return out


# Autotuned.


@program(signs(4, 15, 0))
def autotuned_over_mask(x):
    kept = x[x > 0]
    out = torch.empty_like(kept)
    n = kept.shape[0]
    autotuned_square[blocks(n)](kept, out, n)
    return out.sum() + out


@program(signs(4, 15, 0))
def autotuned_atomic_sum_over_mask(x):
    kept = x[x > 0]
    total = torch.zeros(1, device=x.device)
    # One program whatever the config: the grid does not depend on it.
    autotuned_atomic_sum[(1,)](kept, total, kept.shape[0])
    return total * 2


# torch.library.triton_op


@triton_op("ifx_user_kernels::scaled_plus_one", mutates_args=())
def scaled_plus_one(x: torch.Tensor, scale: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    wrap_triton(add_scaled)[blocks(n)](x, out, n, scale, BLOCK=8)
    return out


@triton_op("ifx_user_kernels::squared", mutates_args=())
def squared(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    wrap_triton(autotuned_square)[blocks(n)](x, out, n)
    return out


@program(signs(2, 9, 0), eager_wrap_triton="kernel")
def triton_op_over_mask(x):
    return scaled_plus_one(x[x > 0], 3.0) - 1


@program(
    lambda d: [
        (values(8, 4, 1, d), torch.tensor([0.25], device=d)),
        (values(8, 7, 2, d), torch.tensor([0.75], device=d)),
    ],
    eager_wrap_triton="autotuner",
)
def autotuned_triton_op_over_threshold(x, t):
    return squared(x[x > t.item()]) * 2
