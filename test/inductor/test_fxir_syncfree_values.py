# Owner(s): ["module: inductor"]
"""The sync-free rewrite with values that trap or check where the mask is false
(``codegen/masked_safety.py``): zero divisors and ``INT_MIN // -1`` (the divisor is
1 there), NaN, Inf and negative values under a log or a square root (discarded by
``where``), extreme integers, small integer and boolean dtypes, and
``config.nan_asserts`` (no rewrite: it checks masked-out positions too). Each
program is compiled once, run on inputs whose selections differ in length, and
must equal eager.
"""

from __future__ import annotations

import logging

import pytest
import torch
from programs import data_dependent_dynamo, fresh_copy
from syncfree_checks import (
    DEVICE,
    LOGGER,
    aten,
    aten_graphs,
    guarded,
    integers,
    kept,
    rewritten,
    tagged,
)
from test_fxir_syncfree import symbols, targets


@pytest.fixture(autouse=True)
def dynamo_config():
    with data_dependent_dynamo():
        yield


DIVISIONS = {
    "floor_divide": lambda a, b: (a[b != 0] // b[b != 0]).sum(),
    "remainder": lambda a, b: (a[b != 0] % b[b != 0]).sum(),
    "trunc_divide": lambda a, b: torch.div(a[b != 0], b[b != 0], rounding_mode="trunc").sum(),
    "fmod": lambda a, b: torch.fmod(a[b != 0], b[b != 0]).sum(),
}


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
@pytest.mark.parametrize("division", DIVISIONS.values(), ids=DIVISIONS)
def test_an_integer_division_by_masked_out_zeros(division, dtype, caplog):
    """Issue 39, finding 3: ``a[b != 0] // b[b != 0]`` divided by zero where ``b`` is
    zero (``ZeroDivisionError`` from the C++ kernel, another value on a GPU). The
    divisor is 1 where the mask is false."""
    inputs = [tagged((a, b), m.sum()) for a, b, m in integers(dtype, 0, 1, 9)]
    with aten_graphs() as graphs:
        rewritten(division, inputs, caplog)
    assert_divisors_guarded(graphs)


def assert_divisors_guarded(graphs):
    divisions = [n for gm in graphs for n in gm.graph.nodes if _divides(n)]
    assert divisions and all(guarded(n, 1, 1) for n in divisions)


def _divides(node):
    return getattr(node.target, "overloadpacket", None) in (
        aten.div,
        aten.floor_divide,
        aten.remainder,
        aten.fmod,
    )


def test_min_divided_by_minus_one_where_the_mask_is_false(caplog):
    """A mask that does not read the divisor: where it is false, ``b`` is 0 or -1 and
    ``a`` the type's minimum (``INT_MIN // -1`` traps on x86)."""
    inputs = integers(torch.int32, 0, 1, 9, traps=(0, -1))
    with aten_graphs() as graphs:
        rewritten(lambda a, b, m: (a[m] // b[m] + torch.fmod(a[m], b[m])).sum(), inputs, caplog)
    assert_divisors_guarded(graphs)


def test_division_by_a_constant(caplog):
    """A constant other than 0 and -1 divides any integer: nothing to guard."""
    inputs = integers(torch.int64, 0, 5)
    rewritten(lambda a, b, m: (a[m] // 7 + torch.fmod(a[m], -3)).sum(), inputs, caplog)


@pytest.mark.full
def test_an_integer_division_in_a_cpp_kernel(caplog):
    """The finding as it was seen: Inductor's C++ kernels raise ``ZeroDivisionError``
    on an integer division by zero (the FX wrapper registered for the CPU with the
    C++ scheduling; gcc builds the kernel)."""
    from test_fxir_cpp_kernels import CPP_KERNEL, cpp_kernels

    def program(a, b):
        return (a[b != 0] // b[b != 0]).sum()

    inputs = [(a, b) for a, b, _ in integers(torch.int32, 0, 1, 9)]
    torch._dynamo.reset()
    with caplog.at_level(logging.INFO, logger=LOGGER), cpp_kernels() as graphs:
        compiled = torch.compile(fresh_copy(program), fullgraph=True)
        for a, b in inputs:
            assert torch.equal(compiled(a.cpu(), b.cpu()), program(a.cpu(), b.cpu()))
    assert CPP_KERNEL in targets(graphs) and symbols(graphs) == []


def floats(*counts, n=24, dtype=torch.float32, adversarial=(float("nan"), float("inf"), -1.0)):
    """``x`` positive at ``count`` positions; elsewhere NaN, Inf, -Inf, negative values
    and zeros (cycled from ``adversarial``), which no log or sqrt of eager's reads."""
    inputs = []
    for count in counts:
        g = torch.Generator().manual_seed(count)
        x = torch.rand(n, generator=g) + 0.1
        out = torch.randperm(n, generator=g)[: n - count]
        x[out] = torch.tensor(adversarial)[torch.arange(n - count) % len(adversarial)]
        inputs.append(tagged((x.to(dtype).to(DEVICE),), count))
    return inputs


#: Float functions outside their domain where the mask is false: NaN or Inf there,
#: discarded by ``where``.
OUTSIDE_THE_DOMAIN = {
    "log": lambda x: x[x > 0].log().sum(),
    "sqrt_mean": lambda x: x[x > 0].sqrt().mean(),
    "reciprocal_prod": lambda x: (1 / x[x > 0]).clamp(max=2).prod(),
    "pow": lambda x: (x[x > 0] ** 0.5 + (x[x > 0] - 1).sin()).sum(),
    "all_below": lambda x: (x[x > 0].log() < 10).all(),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", OUTSIDE_THE_DOMAIN)
def test_nan_inf_and_negative_values_where_the_mask_is_false(name, dtype, caplog):
    adversarial = (float("nan"), float("inf"), float("-inf"), -1.0, -1e30, 0.0)
    inputs = floats(0, 1, 13, dtype=dtype, adversarial=adversarial)
    rewritten(OUTSIDE_THE_DOMAIN[name], inputs, caplog)


def test_extreme_integers_where_the_mask_is_false(caplog):
    """Integer overflow where the mask is false gives some value, then ``where``
    discards it."""
    inputs = [tagged((a.long(), m), m.sum()) for a, _, m in integers(torch.int64, 0, 1, 9)]
    rewritten(lambda a, m: (a[m] * 3 + a[m] ** 2).sum() + a[m].abs().sum(), inputs, caplog)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.bool])
def test_small_integer_and_boolean_selections(dtype, caplog):
    def program(x, m):
        return x[m].sum() + (x[m] > 0).sum()

    inputs = []
    for count in (0, 1, 6):
        x = torch.arange(-5, 7).to(dtype).to(DEVICE)
        m = torch.zeros(12, dtype=torch.bool, device=DEVICE)
        m[:count] = True
        inputs.append(tagged((x, m), count))
    rewritten(program, inputs, caplog)


def softmax_of_logs(x):
    return torch.softmax(x[x[:, 0] > 0].log(), 1).sum(0)


def rows_positive(*counts, n=10, columns=4):
    """Rows positive where selected (column 0 > 0), negative elsewhere: finite values
    everywhere (``nan_asserts`` also checks the inputs)."""
    inputs = []
    for count in counts:
        g = torch.Generator().manual_seed(count)
        x = torch.rand(n, columns, generator=g) + 0.5
        x[torch.randperm(n, generator=g)[: n - count]] *= -1
        inputs.append(tagged((x.to(DEVICE),), count))
    return inputs


def test_under_nan_asserts_the_selection_stays(caplog):
    """Issue 39, finding 3: the rewrite stored the log of masked-out negative rows, and
    ``nan_asserts`` (which checks every kernel's buffers) raised ``buf0 has NaN``."""
    inputs = rows_positive(0, 1, 6)
    kept(softmax_of_logs, inputs, caplog, "nan_asserts", nan_asserts=True)


def test_without_nan_asserts_the_log_of_masked_out_rows_is_discarded(caplog):
    rewritten(softmax_of_logs, rows_positive(0, 1, 6), caplog)
