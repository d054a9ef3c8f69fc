"""The ten data-dependent programs of docs/benchmarks.md, shared by the demo, tests and benchmarks.

Each program comes with an input factory ``inputs(device, n)`` that returns two
argument tuples whose data-dependent sizes differ (for the cond programs, the
second input takes the other branch; for P5 the split sizes change and include
a 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Program:
    name: str
    source: str
    fn: Callable[..., Any]
    inputs: Callable[[str, int], list[tuple[Any, ...]]]
    dynamic: bool | None = None


def signed(n: int, positive: int, device: str, seed: int) -> torch.Tensor:
    """``n`` nonzero values, ``positive`` of them positive, in shuffled order."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g) + 0.1
    x[positive:] *= -1
    return x[torch.randperm(n, generator=g)].to(device)


def p4a(x):
    return torch.cond(x.sum() > 0, lambda x: x[1:] * 2, lambda x: x[2:] + 1, (x,))


def p4b(x):
    return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, (x,))


def p4c(x):
    return torch.cond(x.sum() > 0, lambda x: x[x > 0], lambda x: x[2:] * 2, (x,))


def p5(x, lengths):
    return torch.stack([c.sum() for c in torch.split(x, lengths.tolist())])


def p6(x):
    return torch.unique(x) + 1


def p7(x):
    y = torch.masked_select(x, x > 0.5) * 2 + 1
    return y, y.sum()


def two_signed(fractions):
    return lambda d, n: [(signed(n, int(n * f), d, seed=i),) for i, f in enumerate(fractions)]


def p5_inputs(device, n):
    x = signed(n, n // 2, device, seed=3)
    a = torch.tensor([n // 8] * 7 + [n - 7 * (n // 8)])
    quarter, eighth = n // 4, n // 8
    b = torch.tensor([0, quarter, quarter, 0, eighth, eighth, eighth, n - 2 * quarter - 3 * eighth])
    return [(x, a.to(device)), (x, b.to(device))]


def p6_inputs(device, n):
    g = torch.Generator().manual_seed(6)
    return [
        (torch.randint(0, 1000, (n,), generator=g).to(device),),
        (torch.randint(0, 50000, (n,), generator=g).to(device),),
    ]


def p8_inputs(device, n):
    n = n // 5
    g = torch.Generator().manual_seed(8)
    x = torch.randn(n, generator=g).to(device)
    return [
        (x, torch.randint(0, 3, (n,), generator=g).to(device)),
        (x, torch.randint(0, 5, (n,), generator=g).to(device)),
    ]


PROGRAMS = [
    Program(
        "P1",
        "torch.nonzero(x > 0) * 2 + 1",
        lambda x: torch.nonzero(x > 0) * 2 + 1,
        two_signed([0.3, 0.7]),
    ),
    Program("P2", "(x[x > 0] * 2).sum()", lambda x: (x[x > 0] * 2).sum(), two_signed([0.3, 0.7])),
    Program(
        "P3",
        "torch.arange((x > 0).sum().item()) * 2",
        lambda x: torch.arange((x > 0).sum().item(), device=x.device) * 2,
        two_signed([0.3, 0.7]),
    ),
    Program("P4a", "cond: x[1:] * 2 | x[2:] + 1", p4a, two_signed([0.9, 0.1]), dynamic=True),
    Program("P4b", "cond: x * 2 | x - 1", p4b, two_signed([0.9, 0.1]), dynamic=True),
    Program("P4c", "cond: x[x > 0] | x[2:] * 2", p4c, two_signed([0.9, 0.1]), dynamic=True),
    Program("P5", "split(x, lengths.tolist()), stack of sums", p5, p5_inputs),
    Program("P6", "torch.unique(x_int) + 1", p6, p6_inputs),
    Program("P7", "masked_select(x, x > 0.5) * 2 + 1, and its sum", p7, two_signed([0.3, 0.8])),
    Program(
        "P8",
        "repeat_interleave(x, repeats) * 2",
        lambda x, r: torch.repeat_interleave(x, r) * 2,
        p8_inputs,
    ),
]

BY_NAME = {program.name: program for program in PROGRAMS}


def same(a: Any, b: Any, rtol: float = 1e-5, atol: float = 1e-8) -> bool:
    """Same structure, tensors of the same shape and close values, other leaves equal."""
    flat_a, spec_a = torch.utils._pytree.tree_flatten(a)
    flat_b, spec_b = torch.utils._pytree.tree_flatten(b)
    return spec_a == spec_b and all(
        x.shape == y.shape and torch.allclose(x, y, rtol=rtol, atol=atol)
        if isinstance(x, torch.Tensor)
        else x == y
        for x, y in zip(flat_a, flat_b)
    )


def synchronize(device: str) -> None:
    """Wait for the device, so that wall-clock times include the kernels."""
    if device == "cuda":
        torch.cuda.synchronize()
