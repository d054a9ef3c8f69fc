"""A corpus of data-dependent programs, in the style of an OpInfo sweep.

Each program comes with inputs whose data-dependent sizes differ (one of them
empty where that makes sense). Programs avoid ``libdevice`` functions (exp,
tanh, ...), which the CPU mode's Triton interpreter cannot run. Shared by the
differential corpus test (``test_corpus.py``) and the GPU stress run
(``benchmarks/stress.py``); inputs are built for a device on demand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._higher_order_ops import while_loop


@dataclasses.dataclass(frozen=True)
class InductorLimit:
    """Why Inductor itself cannot compile a program (on some releases, or all), and
    the error each path raises for it: a test expects the FX path's failure only
    where the error is this one and Inductor's own wrapper fails with its own."""

    reason: str
    #: A regex of the FX path's error, as ``Type: message``.
    fx_error: str
    #: A regex of the error of Inductor's Python wrapper (or, on the AOT path, its
    #: C++ wrapper).
    reference_error: str


@dataclasses.dataclass(frozen=True)
class CorpusProgram:
    name: str
    fn: Callable[..., Any]
    #: ``inputs(device)`` returns argument tuples with different data-dependent sizes.
    inputs: Callable[[str], list[tuple[Any, ...]]]
    #: Whether the program computes a gradient (compared after ``backward()``).
    backward: bool = False
    inductor_limit: InductorLimit | None = None


CORPUS: list[CorpusProgram] = []


@contextlib.contextmanager
def data_dependent_dynamo() -> Iterator[None]:
    """Dynamo keeps ``.item()`` and data-dependent shapes in the graph, its caches
    fresh and roomy enough for the corpus's inputs."""
    with torch._dynamo.config.patch(
        capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True, cache_size_limit=64
    ):
        torch._dynamo.reset()
        yield


def fresh_copy(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of ``fn`` with its own code object, so that Dynamo compiles it afresh
    (Dynamo caches compiled code per code object)."""
    return types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )


def run(program: CorpusProgram, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """The program's result; for a training program, the loss and the gradient."""
    if not program.backward:
        return fn(*args)
    w = args[0].detach().clone().requires_grad_()
    loss = fn(w, *args[1:])
    loss.backward()
    return loss.detach(), w.grad


def program(
    inputs: Callable[[str], list[tuple[Any, ...]]],
    backward: bool = False,
    inductor_limit: InductorLimit | None = None,
):
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        CORPUS.append(CorpusProgram(fn.__name__, fn, inputs, backward, inductor_limit))
        return fn

    return register


def one_line(error):
    """An exception as the one line that an xfail or skip reason shows."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first[:200]}"


def expect_inductor_limit(program, path, fx_error, reference_error):
    """xfail, naming the FX path, where its error is the program's declared Inductor
    limit and Inductor's own wrapper fails with its own error for it; else return,
    and the caller raises the FX path's error."""
    limit = program.inductor_limit
    if limit is None or reference_error is None:
        return
    fx_match = re.search(limit.fx_error, f"{type(fx_error).__name__}: {fx_error}")
    reference_match = re.search(
        limit.reference_error, f"{type(reference_error).__name__}: {reference_error}"
    )
    if fx_match and reference_match:
        reference = one_line(reference_error)
        if reference_match[0] not in reference:
            reference += f" (... {reference_match[0]})"
        import pytest

        pytest.xfail(
            f"{path} fails: {one_line(fx_error)}. Inductor's limit ({limit.reason}): its "
            f"own wrapper fails too: {reference}"
        )


def xfail_at_declared_limit(program, path, error):
    """xfail where ``error`` is the program's declared Inductor limit, for tests that
    run no reference of their own (the corpus test shows Inductor's wrapper fails too);
    else return, and the caller raises."""
    limit = program.inductor_limit
    if limit is not None and re.search(limit.fx_error, f"{type(error).__name__}: {error}"):
        import pytest

        pytest.xfail(f"{path} fails at Inductor's declared limit ({limit.reason})")


def values(n: int, positive: int, seed: int, device: str) -> torch.Tensor:
    """``n`` nonzero floats, ``positive`` of them positive, shuffled."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g) + 0.1
    x[positive:] *= -1
    return x[torch.randperm(n, generator=g)].to(device)


def signs(*positives: int, n: int = 16) -> Callable[[str], list[tuple[Any, ...]]]:
    """One 1-D input per count of positives (0 gives an empty selection)."""
    return lambda d: [(values(n, p, seed=p, device=d),) for p in positives]


def signs_2d(*positives: int, shape: tuple[int, ...] = (4, 6)):
    n = 1
    for s in shape:
        n *= s
    return lambda d: [(values(n, p, seed=p, device=d).reshape(shape),) for p in positives]


def ints(*rows: list[int]):
    return lambda d: [(torch.tensor(row, device=d),) for row in rows]


def with_count(*counts: int, n: int = 12):
    """An input vector and a 1-element count tensor."""
    return lambda d: [
        (values(n, n // 2, seed=c, device=d), torch.tensor([c], device=d)) for c in counts
    ]


# nonzero, argwhere, one-argument where


@program(signs(3, 11, 0))
def nonzero_1d(x):
    return torch.nonzero(x > 0) * 2 + 1


@program(signs_2d(5, 17, 0))
def nonzero_2d(x):
    return torch.nonzero(x > 0).sum(1)


@program(signs(4, 9, 0))
def nonzero_as_tuple(x):
    (index,) = torch.nonzero(x > 0, as_tuple=True)
    return x[index] * 3


@program(signs_2d(6, 13, 0))
def argwhere_2d(x):
    return torch.argwhere(x > 0) + 1


@program(signs_2d(3, 20, 0))
def where_one_argument(x):
    rows, cols = torch.where(x > 0)
    return rows * 10 + cols


@program(signs(5, 12, 0))
def nonzero_then_gather(x):
    index = torch.nonzero(x > 0).squeeze(1)
    return torch.index_select(x, 0, index).cos()


# boolean masks


@program(signs(2, 14, 0))
def mask_1d(x):
    return x[x > 0] * 2


@program(signs_2d(5, 19, 0))
def mask_2d(x):
    return x[x > 0].sin()


@program(signs_2d(7, 30, 0, shape=(2, 4, 5)))
def mask_3d(x):
    return x[x > 0] + 1


@program(signs_2d(6, 18, 0))
def row_mask(x):
    return x[x.sum(1) > 0] * 2


@program(signs(4, 10, 0))
def masked_select(x):
    return torch.masked_select(x, x > 0.5) * 2 + 1


@program(signs(6, 13, 0))
def mask_of_masked(x):
    y = x[x > 0]
    return y[y > 0.6] - 1


@program(signs(5, 12, 0))
def mask_sum(x):
    return (x[x > 0] * 2).sum()


@program(signs_2d(4, 15, 0))
def mask_then_reshape(x):
    y = x[x > 0]
    return torch.cat([y, y]).view(2, -1).sum(0)


# unique and friends


@program(ints([3, 1, 3, 2, 2, 2], [5, 4, 5, 7, 1, 9, 9, 0], [4, 4, 4]))
def unique_sorted(x):
    return torch.unique(x) + 1


@program(ints([3, 1, 3, 2], [5, 4, 5, 7, 1, 9, 9, 0]))
def unique_inverse(x):
    values_, inverse = torch.unique(x, return_inverse=True)
    return values_ * 2, inverse + 1


@program(ints([3, 1, 3, 2, 2], [5, 4, 5, 7, 1, 9, 9, 0]))
def unique_counts(x):
    values_, counts = torch.unique(x, return_counts=True)
    return values_ + 1, counts * 2


@program(
    lambda d: [
        (torch.tensor([[1, 2], [1, 2], [3, 4]], device=d),),
        (torch.tensor([[1, 2], [5, 6], [3, 4], [5, 6], [7, 8]], device=d),),
    ]
)
def unique_dim(x):
    return torch.unique(x, dim=0) * 2


@program(ints([1, 1, 2, 2, 3, 1], [4, 4, 4, 4], [1, 2, 3, 4, 5]))
def unique_consecutive(x):
    return torch.unique_consecutive(x) + 1


@program(ints([1, 1, 2, 2, 3, 1], [4, 4, 4, 4]))
def unique_consecutive_counts(x):
    values_, counts = torch.unique_consecutive(x, return_counts=True)
    return values_ * counts


@program(ints([3, 1, 3, 2, 2], [0, 0, 0]))
def unique_count(x):
    return torch.unique(x).numel() * torch.ones(2, device=x.device)


# repeat_interleave


@program(
    lambda d: [
        (values(5, 5, 1, d), torch.tensor([1, 0, 2, 3, 1], device=d)),
        (values(5, 5, 2, d), torch.tensor([0, 0, 0, 0, 0], device=d)),
    ]
)
def repeat_interleave_tensor(x, repeats):
    return torch.repeat_interleave(x, repeats) * 2


@program(
    lambda d: [
        (values(6, 3, 1, d).reshape(3, 2), torch.tensor([2, 0, 1], device=d)),
        (values(6, 4, 2, d).reshape(3, 2), torch.tensor([1, 3, 2], device=d)),
    ]
)
def repeat_interleave_rows(x, repeats):
    return torch.repeat_interleave(x, repeats, dim=0).sum(1)


@program(ints([1, 0, 2], [3, 1, 0, 1]))
def repeat_interleave_counts_only(repeats):
    return torch.repeat_interleave(repeats) * 3


# split from .tolist()


def lengths(*rows: list[int], n: int = 12):
    return lambda d: [(values(n, n // 2, 0, d), torch.tensor(row, device=d)) for row in rows]


@program(lengths([2, 4, 6], [6, 0, 6], [12, 0, 0]))
def split_tolist(x, sizes):
    return torch.stack([chunk.sum() for chunk in torch.split(x, sizes.tolist())])


@program(lengths([3, 3, 6], [0, 12, 0]))
def split_with_sizes_tolist(x, sizes):
    a, b, c = torch.split_with_sizes(x, sizes.tolist())
    return a * 2, b + 1, c.sin()


@program(lengths([5, 7], [12, 0]))
def split_first_chunk(x, sizes):
    first, _ = torch.split(x, sizes.tolist())
    return first.cos() + 1


# .item() values as sizes and arguments


@program(with_count(3, 0, 7))
def arange_item(x, n):
    return torch.arange(n.item(), device=x.device) * 2


@program(with_count(4, 0, 9))
def zeros_item(x, n):
    return torch.zeros(n.item(), 3, device=x.device) + 1


@program(with_count(2, 5))
def full_item(x, n):
    return torch.full((n.item(),), 7.0, device=x.device) * x[0]


def checked(n, limit):
    torch._check(n >= 0)
    torch._check(n <= limit)
    return n


@program(with_count(3, 0, 8))
def narrow_length_item(x, n):
    return torch.narrow(x, 0, 2, checked(n.item(), 10)) * 2


@program(with_count(1, 6))
def narrow_start_item(x, n):
    return torch.narrow(x, 0, checked(n.item(), 8), 4) + 1


@program(with_count(5, 0, 12))
def slice_end_item(x, n):
    return x[: checked(n.item(), 12)] * 3


@program(with_count(2, 11))
def slice_start_item(x, n):
    return x[checked(n.item(), 12) :].sin()


@program(with_count(1, 2))
def select_item(x, n):
    return x.view(3, 4)[checked(n.item(), 2)] + 1


@program(with_count(3, 7))
def topk_item(x, n):
    k = n.item()
    torch._check(k >= 1)
    torch._check(k <= x.shape[0])
    return torch.topk(x, k).values * 2


@program(with_count(2, 9))
def kthvalue_item(x, n):
    k = n.item()
    torch._check(k >= 1)
    torch._check(k <= x.shape[0])
    return torch.kthvalue(x, k).values + 1


@program(with_count(1, 4))
def pad_item(x, n):
    return torch.nn.functional.pad(x, (0, checked(n.item(), 6))) * 2


@program(with_count(2, 5))
def roll_item(x, n):
    return torch.roll(x, checked(n.item(), 11)) + 1


@program(with_count(3, 0))
def new_ones_item(x, n):
    return x.new_ones(n.item(), 2).sum(1)


@program(with_count(2, 6))
def index_select_arange_item(x, n):
    return torch.index_select(x, 0, torch.arange(checked(n.item(), 12), device=x.device))


# floats from .item()


@program(
    lambda d: [
        (values(8, 4, 1, d), torch.tensor([0.5], device=d)),
        (values(8, 4, 2, d), torch.tensor([-2.0], device=d)),
    ]
)
def scale_by_float_item(x, s):
    return x * s.item() + 1


@program(
    lambda d: [
        (values(8, 4, 1, d), torch.tensor([0.25], device=d)),
        (values(8, 6, 2, d), torch.tensor([0.75], device=d)),
    ]
)
def threshold_float_item(x, t):
    return x[x > t.item()] * 2


@program(
    lambda d: [
        (values(8, 4, 1, d), torch.tensor([0.3], device=d)),
        (values(8, 5, 2, d), torch.tensor([1.5], device=d)),
    ]
)
def clamp_float_item(x, m):
    return torch.clamp(x, max=m.item()) + 1


# chained unbacked sizes


@program(signs(5, 12, 0))
def arange_of_mask_count(x):
    n = (x > 0).sum().item()
    return torch.arange(n, device=x.device) + x[x > 0]


@program(ints([3, 1, 3, 2, 2, 2], [5, 5, 5]))
def nonzero_of_unique(x):
    values_ = torch.unique(x)
    return torch.nonzero(values_ > 2) + 1


@program(signs(6, 14, 0))
def mask_then_nonzero(x):
    y = x[x > 0]
    return torch.nonzero(y > 0.5) * 2


# torch.cond


@program(signs(14, 2))
def cond_mismatched_lengths(x):
    return torch.cond(x.sum() > 0, lambda x: x[1:] * 2, lambda x: x[2:] + 1, (x,))


@program(signs(14, 2, 0))
def cond_masked_branch(x):
    return torch.cond(x.sum() > 0, lambda x: x[x > 0], lambda x: x[3:] * 2, (x,))


@program(signs(14, 8, 2))
def cond_nested(x):
    def outer_true(x):
        return torch.cond(x[0] > 0, lambda x: x[1:] + 1, lambda x: x[:3] * 2, (x,))

    return torch.cond(x.sum() > 0, outer_true, lambda x: x[4:] - 1, (x,))


@program(
    with_count(3, 9),
    inductor_limit=InductorLimit(
        "the predicate's symbol from .item() of an input has no definition in the wrapper code",
        fx_error=r"no line of the wrapper code defines u\d+ before this use",
        # The C++ compiler quotes names with typographic quotes where the locale has them.
        reference_error=r"name 'u\d+' is not defined|\Wu\d+\W was not declared",
    ),
)
def cond_on_item(x, n):
    return torch.cond(n.item() > 5, lambda x: x[:2] * 2, lambda x: x.sin(), (x,))


@program(signs(14, 2))
def cond_same_shape(x):
    return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, (x,))


# while_loop


def count_down(n, x):
    return while_loop(lambda i, acc: i > 0, lambda i, acc: (i - 1, acc * 2 + 1), (n, x))


@program(
    lambda d: [
        (torch.tensor(3, device=d), values(4, 2, 1, d)),
        (torch.tensor(0, device=d), values(4, 3, 2, d)),
    ]
)
def while_loop_count_down(n, x):
    return count_down(n, x)


@program(
    lambda d: [
        (torch.tensor(2, device=d), values(6, 3, 1, d)),
        (torch.tensor(5, device=d), values(6, 1, 2, d)),
    ]
)
def while_loop_then_mask(n, x):
    _, acc = count_down(n, x)
    return acc[acc > 0]


# custom ops with new_dynamic_size


@torch.library.custom_op("ifx_corpus::positives", mutates_args=())
def positives(x: torch.Tensor) -> torch.Tensor:
    return x[x > 0].clone()


@positives.register_fake
def _(x):
    return x.new_empty(torch.library.get_ctx().new_dynamic_size())


@torch.library.custom_op("ifx_corpus::four_per_positive", mutates_args=())
def four_per_positive(x: torch.Tensor) -> torch.Tensor:
    return torch.arange(4 * int((x > 0).sum()), device=x.device, dtype=x.dtype)


@four_per_positive.register_fake
def _(x):
    return x.new_empty(4 * torch.library.get_ctx().new_dynamic_size())


@torch.library.custom_op("ifx_corpus::split_by_sign", mutates_args=())
def split_by_sign(x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Nested outputs whose sizes depend on the data: ``(2x, [x[x > 0], x[x <= 0]])``."""
    return x * 2, [x[x > 0].clone(), x[x <= 0].clone()]


@split_by_sign.register_fake
def _(x):
    ctx = torch.library.get_ctx()
    return x * 2, [x.new_empty(ctx.new_dynamic_size()), x.new_empty(ctx.new_dynamic_size())]


@program(signs(4, 11, 0))
def custom_op_dynamic_size(x):
    return positives(x) * 2


@program(signs(3, 9, 0))
def custom_op_divide_by_key(x):
    return four_per_positive(x) + 1


@program(signs(5, 12))
def custom_op_nested_outputs(x):
    doubled, (pos, neg) = split_by_sign(x)
    return doubled.sum(), pos * 3, neg.cos()


# backward through masked ops


def grad_inputs(*positives: int):
    return lambda d: [
        (values(12, p, seed=p, device=d), values(12, 6, seed=p + 50, device=d)) for p in positives
    ]


@program(grad_inputs(4, 9, 0), backward=True)
def masked_mse_backward(w, y):
    mask = y > 0
    pred = (w * 2).sin()
    return ((pred[mask] - y[mask]) ** 2).sum()


@program(grad_inputs(5, 10), backward=True)
def nonzero_gather_backward(w, y):
    index = torch.nonzero(y > 0).squeeze(1)
    return (w[index] * 3).sum()


@program(grad_inputs(3, 8), backward=True)
def masked_select_backward(w, y):
    return torch.masked_select(w.cos(), y > 0.2).sum()


# realistic compositions


@program(
    lambda d: [
        (values(16, 8, 1, d).reshape(8, 2), torch.tensor([0, 2, 1, 0, 2, 2, 1, 0], device=d)),
        (values(16, 5, 2, d).reshape(8, 2), torch.tensor([1, 1, 1, 1, 1, 1, 1, 1], device=d)),
    ],
    inductor_limit=InductorLimit(
        "torch.split by counts.tolist() guards on the data-dependent counts",
        fx_error="GuardOnDataDependentSymNode",
        reference_error="GuardOnDataDependentSymNode",
    ),
)
def moe_routing(tokens, expert):
    """Tokens routed to three experts by count: sort by expert, split by the counts."""
    order = torch.argsort(expert, stable=True)
    counts = torch.bincount(expert, minlength=3)
    groups = torch.split(tokens[order], counts.tolist())
    return torch.cat([group * (i + 1) for i, group in enumerate(groups)])


@program(
    lambda d: [
        (values(10, 6, 1, d).abs(), values(40, 20, 2, d).reshape(10, 4)),
        (values(10, 1, 3, d).abs() * 0.1, values(40, 20, 4, d).reshape(10, 4)),
    ]
)
def detection_postprocess(scores, boxes):
    """Keep boxes above a score threshold, then the best three of those."""
    keep = scores > 0.5
    kept_scores, kept_boxes = scores[keep], boxes[keep]
    k = min(3, kept_scores.shape[0])
    best = torch.topk(kept_scores, k).indices
    return kept_boxes[best] * 2, kept_scores[best]


@program(
    lambda d: [
        (values(12, 6, 1, d), torch.tensor([3, 0, 5, 4], device=d)),
        (values(12, 6, 2, d), torch.tensor([12, 0, 0, 0], device=d)),
    ]
)
def ragged_batch_means(x, lengths_):
    chunks = torch.split(x, lengths_.tolist())
    return torch.stack([chunk.sum() / max(chunk.shape[0], 1) for chunk in chunks])


@program(signs(6, 14, 0))
def token_dropping(x):
    """Drop tokens below a threshold, then pad back to the original length."""
    kept = x[x > 0.3]
    return torch.nn.functional.pad(kept, (0, x.shape[0] - kept.shape[0]))


@program(
    lambda d: [
        (
            torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.2, 0.6]], device=d),
            torch.tensor([1, 2, 2], device=d),
        ),
        (
            torch.tensor([[0.3, 0.3, 0.4], [0.5, 0.4, 0.1]], device=d),
            torch.tensor([0, 0], device=d),
        ),
    ]
)
def correct_predictions(probs, labels):
    """The rows a classifier gets right, and their confidences."""
    correct = probs.argmax(1) == labels
    return probs[correct].amax(1), torch.nonzero(correct).squeeze(1)


# Reductions over selections from real code: no data-dependent size leaves the graph
# (the FX backend computes them without the selection and its host sync).


@program(
    lambda d: [
        (values(24, 12, 1, d), values(24, 9, 2, d)),
        (values(24, 12, 3, d), values(24, 20, 4, d)),
        (values(24, 12, 5, d), values(24, 0, 6, d)),  # no label: NaN, as eager
    ]
)
def masked_mse_loss(pred, target):
    """A regression loss over the positions that have a label (positive targets)."""
    labelled = target > 0
    return ((pred[labelled] - target[labelled]) ** 2).mean()


@program(
    lambda d: [
        (values(30, 18, 1, d).abs(), torch.arange(30, device=d) % 3),
        (values(30, 18, 2, d).abs() * 0.4, torch.arange(30, device=d) % 3),
    ]
)
def per_class_counts(scores, labels):
    """A detection head's count of kept detections per class (scores over 0.5)."""
    keep = scores > 0.5
    return torch.stack([(labels[keep] == c).sum() for c in range(3)])


@program(
    lambda d: [
        (values(40, 20, 1, d).reshape(8, 5), torch.arange(8, device=d) % 5, values(8, 5, 2, d)),
        (values(40, 20, 3, d).reshape(8, 5), torch.arange(8, device=d) % 5, values(8, 2, 4, d)),
    ]
)
def masked_token_nll(log_probs, targets, attention):
    """A language model's loss over the tokens that are not padding (attention > 0)."""
    real = attention > 0
    return torch.nn.functional.nll_loss(log_probs[real], targets[real])


#: The corpus by program name.
BY_NAME = {program.name: program for program in CORPUS}
