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
    """Same structure, tensors of the same shape and close values (NaN where the
    other has NaN), other leaves equal."""
    flat_a, spec_a = torch.utils._pytree.tree_flatten(a)
    flat_b, spec_b = torch.utils._pytree.tree_flatten(b)
    return spec_a == spec_b and all(
        x.shape == y.shape and torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
        if isinstance(x, torch.Tensor)
        else x == y
        for x, y in zip(flat_a, flat_b)
    )


def synchronize(device: str) -> None:
    """Wait for the device, so that wall-clock times include the kernels."""
    if device == "cuda":
        torch.cuda.synchronize()


# Heavy programs: kernels large enough for the Triton config to matter. ``n`` is
# the number of input elements (the benchmark uses 2**26 = 64M); each has two
# inputs whose data-dependent sizes differ. The benchmark runs them on GPUs only.


def h1(x):
    return (x[x > 0].sin() * 2).sum()


def h2(x):
    return torch.softmax(x[x[:, 0] > 0], dim=-1)


def h3(x, weight, bias):
    return torch.nn.functional.layer_norm(x[x[:, 0] > 0], weight.shape, weight, bias)


def h4(x):
    return x[x[:, 0] > 0].sum(dim=0)


def h5(tokens, router, experts):
    """Top-1 MoE: route, sort by expert, one matmul per expert, scatter back."""
    choice = (tokens @ router).argmax(dim=-1)
    order = torch.argsort(choice, stable=True)
    # One count per expert (bincount's length would depend on the data).
    expert_ids = torch.arange(experts.shape[0], device=tokens.device)
    counts = (choice[None, :] == expert_ids[:, None]).sum(dim=1).tolist()
    groups = torch.split(tokens[order], counts)
    routed = torch.cat([group @ experts[i] for i, group in enumerate(groups)])
    out = torch.zeros_like(tokens)
    out[order] = routed
    return out


def generator(device, seed):
    """A seeded generator on ``device``: large inputs are made where they are used."""
    return torch.Generator(device=device).manual_seed(seed)


def random_signed(shape, fraction, device, seed):
    """Values of magnitude 0.1 to 1.1, each positive with probability ``fraction``."""
    g = generator(device, seed)
    x = torch.rand(shape, generator=g, device=device) + 0.1
    flip = torch.rand(shape, generator=g, device=device) >= fraction
    return torch.where(flip, -x, x)


def heavy_signed(fractions):
    return lambda d, n: [
        (random_signed((n,), f, d, seed=100 + i),) for i, f in enumerate(fractions)
    ]


def rows_inputs(columns, fractions, extra=lambda d, c: ()):
    """``n // columns`` rows; the given fractions of them have a positive first column."""

    def inputs(device, n):
        rows = max(n // columns, 8)
        result = []
        for seed, fraction in enumerate(fractions):
            x = torch.randn(rows, columns, generator=generator(device, 200 + seed), device=device)
            x[:, 0] = random_signed((rows,), fraction, device, seed=300 + seed)
            result.append((x, *extra(device, columns)))
        return result

    return inputs


def layer_norm_parameters(device, columns):
    g = torch.Generator().manual_seed(7)
    return (
        torch.randn(columns, generator=g).to(device),
        torch.randn(columns, generator=g).to(device),
    )


def h5_inputs(device, n):
    hidden, experts = 64, 8
    tokens = max(n // hidden, 64)
    result = []
    for seed in (0, 1):
        g = generator(device, 400 + seed)
        router = torch.randn(hidden, experts, generator=g, device=device)
        router[:, 0] += seed  # the second input routes more tokens to expert 0
        weights = torch.randn(experts, hidden, hidden, generator=g, device=device) / hidden**0.5
        tokens_in = torch.randn(tokens, hidden, generator=g, device=device)
        result.append((tokens_in, router, weights))
    return result


HEAVY_PROGRAMS = [
    Program("H1", "(x[x > 0].sin() * 2).sum(), n elements", h1, heavy_signed([0.3, 0.7])),
    Program(
        "H2",
        "softmax over the rows of x (n/1024 x 1024) whose first value is positive",
        h2,
        rows_inputs(1024, [0.3, 0.7]),
    ),
    Program(
        "H3",
        "layer_norm over the rows of x (n/2048 x 2048) whose first value is positive",
        h3,
        rows_inputs(2048, [0.3, 0.7], layer_norm_parameters),
    ),
    Program(
        "H4",
        "column sums over the rows of x (n/64 x 64) whose first value is positive",
        h4,
        rows_inputs(64, [0.3, 0.7]),
    ),
    Program(
        "H5",
        "top-1 MoE, n/64 tokens of 64, 8 experts: route, sort, split, matmuls, scatter",
        h5,
        h5_inputs,
    ),
]
BY_NAME.update({program.name: program for program in HEAVY_PROGRAMS})


# Sync-free programs from real code: a reduction over a selection, no data-dependent
# size leaving the graph (the FX backend runs them without a host sync).


def s1(pred, target):
    """A regression loss over the positions that have a label (positive targets)."""
    labelled = target > 0
    return ((pred[labelled] - target[labelled]) ** 2).mean()


def s2(scores, labels):
    """A detection head's count of kept detections per class (8 classes)."""
    keep = scores > 0.5
    return torch.stack([(labels[keep] == c).sum() for c in range(8)])


def s3(logits, targets, attention):
    """A language model's loss over the tokens that are not padding."""
    real = attention > 0
    return torch.nn.functional.cross_entropy(logits[real], targets[real])


def s1_inputs(device, n):
    return [
        (random_signed((n,), 0.5, device, 500 + i), random_signed((n,), f, device, 510 + i))
        for i, f in enumerate((0.3, 0.7))
    ]


def s2_inputs(device, n):
    labels = torch.randint(0, 8, (n,), generator=generator(device, 520), device=device)
    return [
        (torch.rand(n, generator=generator(device, 530 + i), device=device) * f, labels)
        for i, f in enumerate((0.8, 1.6))
    ]


def s3_inputs(device, n):
    vocab = 256
    tokens = max(n // vocab, 8)
    g = generator(device, 540)
    logits = torch.randn(tokens, vocab, generator=g, device=device)
    targets = torch.randint(0, vocab, (tokens,), generator=g, device=device)
    return [
        (logits, targets, random_signed((tokens,), f, device, 550 + i))
        for i, f in enumerate((0.6, 0.9))
    ]


SYNC_FREE_PROGRAMS = [
    Program("S1", "masked MSE loss over labelled positions", s1, s1_inputs),
    Program("S2", "per-class counts of kept detections (8 classes)", s2, s2_inputs),
    Program(
        "S3",
        "cross-entropy over the non-padding tokens (n/256 tokens, vocabulary 256)",
        s3,
        s3_inputs,
    ),
]
BY_NAME.update({program.name: program for program in SYNC_FREE_PROGRAMS})
#: The programs whose data-dependent sizes never leave the graph.
SYNC_FREE = ("P2", "H1", "H4", "S1", "S2", "S3")
