# Owner(s): ["module: inductor"]
"""The sync-free rewrite where the mask is false (``codegen/masked_safety.py``).

``f(x[mask]).sum()`` becomes ``where(mask, f(x), 0).sum()``: ``f`` also runs where
the mask is false, on the values users keep there. Each program here puts there
exactly what would hurt (padding labels out of range, huge indices, zero divisors,
NaN, Inf, negative values under a log, extreme integers), is compiled once and
run on inputs whose selections differ in length (empty and one-element ones among
them), and must equal eager. Where the rewrite applies it must have happened (no
unbacked symbol, no ``nonzero``) and the operand that could trap must be guarded
in the ATen graph Inductor lowers; where it must not, the package's log says why.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from programs import data_dependent_dynamo, fresh_copy
from test_fxir_syncfree import DEVICE, LOGGER, symbols, targets

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.codegen import masked_reductions

aten = torch.ops.aten
C = 5
#: (rtol, atol) for a reduction computed in another order than eager's.
TOLERANCES = {torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}


@pytest.fixture(autouse=True)
def dynamo_config():
    with data_dependent_dynamo():
        yield


@pytest.fixture
def aten_graphs(monkeypatch):
    """The ATen graphs Inductor lowers, as the rewrite leaves them."""
    graphs = []
    rewrite = masked_reductions.rewrite_masked_reductions

    def recording(gm):
        outcomes = rewrite(gm)
        graphs.append(gm)
        return outcomes

    monkeypatch.setattr(masked_reductions, "rewrite_masked_reductions", recording)
    return graphs


def compile_and_compare(fn, inputs, caplog, level=logging.INFO, **config):
    """``fn`` compiled once, equal to eager on every input; its FX graphs and the
    package's messages about selections."""
    assert len({_count(args) for args in inputs}) >= 2, "selections of different lengths"
    torch._dynamo.reset()
    caplog.clear()
    # On CPU, exp through tl.math (Triton's interpreter has no libdevice), as eager's.
    patch = torch._inductor.config.patch(use_fast_math=DEVICE == "cpu", **config)
    with caplog.at_level(level, logger=LOGGER), patch:
        with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
            compiled = torch.compile(fresh_copy(fn), fullgraph=True)
            for args in inputs:
                got, want = compiled(*args), fn(*args)
                rtol, atol = TOLERANCES.get(want.dtype, (1e-4, 1e-5))
                torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    records = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.INFO]
    return graphs, [r.getMessage() for r in records]


def _count(args):
    """The selected count of one input: the inputs carry it as their last tensor's
    ``selected`` attribute (``tagged``)."""
    return getattr(args[-1], "selected", None)


def tagged(args, selected):
    args[-1].selected = int(selected)
    return args


def rewritten(fn, inputs, caplog, **config):
    graphs, messages = compile_and_compare(fn, inputs, caplog, **config)
    assert messages == [], messages
    assert symbols(graphs) == [], "the FX graph defines no unbacked symbol"
    assert aten.nonzero.default not in targets(graphs)


def kept(fn, inputs, caplog, *words, **config):
    graphs, messages = compile_and_compare(fn, inputs, caplog, **config)
    assert symbols(graphs), "the selection stays: its length is a symbol"
    assert messages and all(word in messages[0] for word in words), messages


def guarded(node, position, safe):
    """Whether argument ``position`` of ``node`` is ``where(mask, operand, safe)``."""
    operand = node.args[position]
    return operand.target is aten.where.ScalarOther and operand.args[2] == safe


# Labels: the loss of the labelled positions, padding where the mask is false.
MASKS = {
    "below_C": lambda labels: labels < C,
    "non_negative": lambda labels: labels >= 0,
    "in_range": lambda labels: (labels >= 0) & (labels < C),
}
#: Padding that each mask leaves out: out of range, huge, and exactly ignore_index.
PADDING = {
    "below_C": [255, 10**12, C, 2**62],
    "non_negative": [-1, -1000, -100, -(2**62)],
    "in_range": [-1, 255, -100, 10**12, -1000, C],
}
LOSSES = {
    "cross_entropy": lambda logits, labels, m: F.cross_entropy(logits[m], labels[m]),
    "nll_loss": lambda logits, labels, m: F.nll_loss(logits[m].log_softmax(-1), labels[m]),
    "gather": lambda logits, labels, m: (
        logits[m].log_softmax(-1).gather(1, labels[m][:, None]).sum()
    ),
    # The fuzzer's findings (both a SIGSEGV before the guard).
    "cross_entropy_sum": lambda logits, labels, m: F.cross_entropy(
        logits[m], labels[m], reduction="sum"
    ),
    "raw_gather": lambda logits, labels, m: (
        logits[m].gather(1, labels[m].unsqueeze(1)).squeeze(1).sum()
    ),
}


def labelled(*counts, padding, n=12, dtype=torch.float32, valid=(0, C)):
    """Logits and labels, ``count`` of them valid, the others ``padding`` (cycled)."""
    inputs = []
    for count in counts:
        g = torch.Generator().manual_seed(count)
        logits = (torch.randn(n, C, generator=g) * 3).to(dtype)
        labels = torch.randint(*valid, (n,), generator=g)
        padded = torch.randperm(n, generator=g)[: n - count]
        labels[padded] = torch.tensor(padding)[torch.arange(n - count) % len(padding)]
        inputs.append(tagged((logits.to(DEVICE), labels.to(DEVICE)), count))
    return inputs


def loss_program(loss, mask):
    def program(logits, labels):
        m = MASKS[mask](labels)
        return LOSSES[loss](logits, labels, m)

    return program


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("loss", LOSSES)
def test_a_loss_over_labelled_rows_gathers_in_bounds(loss, mask, caplog, aten_graphs):
    """Issue 39, finding 1: the gather ran over every row, padding labels included,
    and read out of bounds (a crash, or an illegal address on a GPU). Its index is
    0 where the mask is false, the label where it is true: the rewrite stays."""
    inputs = labelled(0, 1, 7, 12, padding=PADDING[mask])
    rewritten(loss_program(loss, mask), inputs, caplog)
    gathers = [n for gm in aten_graphs for n in gm.graph.nodes if n.target is aten.gather.default]
    assert gathers and all(guarded(n, 2, 0) for n in gathers)


@pytest.mark.parametrize("loss", ["cross_entropy_sum", "raw_gather"])
def test_the_fuzzers_out_of_range_labels(loss, caplog):
    """``/work/fuzz-findings/syncfree-*-out-of-range-label.py``, as found: two rows,
    three classes, the masked-out label 10**12 or -10**12, compiled as a user would."""
    logits = torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -2.0]], device=DEVICE)
    inputs = [
        tagged((logits, torch.tensor([1, 10**12], device=DEVICE)), 1),
        tagged((logits, torch.tensor([1, -(10**12)], device=DEVICE)), 1),
        tagged((logits, torch.tensor([2, 0], device=DEVICE)), 2),
    ]

    def program(logits, labels):
        m = (labels >= 0) & (labels < 3)
        return LOSSES[loss](logits, labels, m)

    rewritten(program, inputs, caplog)


def test_the_log_says_why_each_operation_is_safe_where_the_mask_is_false(caplog):
    inputs = labelled(2, 9, padding=PADDING["in_range"])
    compile_and_compare(loss_program("cross_entropy", "in_range"), inputs, caplog, logging.DEBUG)
    (message,) = [r.getMessage() for r in caplog.records if "reduced over its mask" in r.msg]
    assert "gather" in message and "the index is 0 where the mask is false" in message
    assert "exp" in message and "no trap" in message


def test_ignore_index_among_the_selected_labels(caplog):
    """-100 passes ``labels < C``: cross-entropy ignores it, as eager does."""
    inputs = labelled(3, 9, padding=[255, -100, -100])
    rewritten(loss_program("cross_entropy", "below_C"), inputs, caplog)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_loss_in_half_precision(dtype, caplog):
    inputs = labelled(0, 4, 11, padding=PADDING["in_range"], dtype=dtype)
    rewritten(loss_program("cross_entropy", "in_range"), inputs, caplog)


def test_a_gather_along_a_dimension_that_may_be_empty_keeps_the_selection(caplog):
    """No index is in bounds of an empty dimension: eager gathers nothing where the
    selection is empty, a rewrite would gather at every row."""

    def program(x, index, k):
        n = k.item()
        torch._check(n >= 0)
        torch._check(n <= x.shape[1])
        m = index >= 0
        return x[:, :n][m].gather(1, index[m][:, None]).sum()

    index = torch.tensor([0, -1, 2, -7, 1, 2], device=DEVICE)
    x = torch.randn(6, 4, device=DEVICE)
    inputs = [
        tagged((x, index, torch.tensor(3)), 4),
        tagged((x, torch.full_like(index, -1), torch.tensor(0)), 0),
    ]
    kept(program, inputs, caplog, "may be empty")


def integers(dtype, *counts, traps=(0,), n=16):
    """``a``, ``b`` and the mask ``m`` of ``count`` positions; where it is false, ``b``
    is one of ``traps`` and ``a`` the type's minimum, and ``a[0]`` is its maximum."""
    info = torch.iinfo(dtype)
    inputs = []
    for count in counts:
        g = torch.Generator().manual_seed(count)
        a = torch.randint(-1000, 1000, (n,), generator=g)
        signs = torch.where(torch.rand(n, generator=g) < 0.5, -1, 1)
        b = torch.randint(1, 50, (n,), generator=g) * signs
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.randperm(n, generator=g)[:count]] = True
        b[~m] = torch.tensor(traps).repeat(n)[: n - count]
        a[~m], a[0] = info.min, info.max
        args = (a.to(dtype).to(DEVICE), b.to(dtype).to(DEVICE), m.to(DEVICE))
        inputs.append(tagged(args, count))
    return inputs


INTERPRETER_HAS_NO_SIGNBIT = "Triton's interpreter has no libdevice.signbit (remainder)"
DIVISIONS = {
    "floor_divide": lambda a, b: (a[b != 0] // b[b != 0]).sum(),
    "remainder": pytest.param(
        lambda a, b: (a[b != 0] % b[b != 0]).sum(),
        marks=pytest.mark.skipif(DEVICE == "cpu", reason=INTERPRETER_HAS_NO_SIGNBIT),
    ),
    "trunc_divide": lambda a, b: torch.div(a[b != 0], b[b != 0], rounding_mode="trunc").sum(),
    "fmod": lambda a, b: torch.fmod(a[b != 0], b[b != 0]).sum(),
}


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
@pytest.mark.parametrize("division", DIVISIONS.values(), ids=DIVISIONS)
def test_an_integer_division_by_masked_out_zeros(division, dtype, caplog, aten_graphs):
    """Issue 39, finding 3: ``a[b != 0] // b[b != 0]`` divided by zero where ``b`` is
    zero (``ZeroDivisionError`` from the C++ kernel, another value on a GPU). The
    divisor is 1 where the mask is false."""
    inputs = [tagged((a, b), m.sum()) for a, b, m in integers(dtype, 0, 1, 9)]
    rewritten(division, inputs, caplog)
    divisions = [n for gm in aten_graphs for n in gm.graph.nodes if _divides(n)]
    assert divisions and all(guarded(n, 1, 1) for n in divisions)


def _divides(node):
    return getattr(node.target, "overloadpacket", None) in (
        aten.div,
        aten.floor_divide,
        aten.remainder,
        aten.fmod,
    )


def test_min_divided_by_minus_one_where_the_mask_is_false(caplog, aten_graphs):
    """A mask that does not read the divisor: where it is false, ``b`` is 0 or -1 and
    ``a`` the type's minimum (``INT_MIN // -1`` traps on x86)."""
    inputs = integers(torch.int32, 0, 1, 9, traps=(0, -1))
    rewritten(lambda a, b, m: (a[m] // b[m] + torch.fmod(a[m], b[m])).sum(), inputs, caplog)


def test_division_by_a_constant(caplog):
    """A constant other than 0 and -1 divides any integer: nothing to guard."""
    inputs = integers(torch.int64, 0, 5)
    rewritten(lambda a, b, m: (a[m] // 7 + torch.fmod(a[m], -3)).sum(), inputs, caplog)


@pytest.mark.full
@pytest.mark.ci_oldest
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


def test_a_mask_shorter_than_the_base_keeps_the_selection(caplog):
    """Issue 39, finding 2: ``y[torch.where(m)]`` indexes ``y`` by ``m``'s positions;
    the rewrite took it for ``y`` masked by ``m`` (435 for 0 with ``m`` of shape (1,),
    a failed compile with ``m`` of shape (20,))."""
    y = torch.arange(30.0, device=DEVICE)
    for length in (1, 20):
        inputs = [
            tagged((y, torch.zeros(length, dtype=torch.bool, device=DEVICE)), 0),
            tagged((y, torch.ones(length, dtype=torch.bool, device=DEVICE)), length),
        ]
        kept(lambda y, m: y[torch.where(m)].sum(), inputs, caplog, "cover")


def test_a_mask_that_broadcasts_keeps_the_selection(caplog):
    """``masked_select`` broadcasts its mask: one column's mask selects whole columns."""
    x = torch.randn(4, 6, device=DEVICE)
    inputs = [tagged((x, (torch.arange(6, device=DEVICE) < k)), 4 * k) for k in (0, 1, 5)]
    kept(lambda x, m: torch.masked_select(x, m).sum(), inputs, caplog, "cover")


def test_a_mask_of_the_same_length_by_another_name(caplog):
    """Two inputs of one length, one indexing the other by its positions: the shapes
    are one symbol (Dynamo's duck sizing, a guard), so the mask covers the base."""
    inputs = [
        tagged((torch.arange(12.0, device=DEVICE), torch.arange(12, device=DEVICE) < k), k)
        for k in (0, 1, 7)
    ]
    rewritten(lambda y, m: y[torch.where(m)].sum(), inputs, caplog)


def test_an_embedding_of_the_selected_labels_keeps_the_selection(caplog):
    """An index into a table reads memory by masked-out labels (huge, negative):
    no masked form for it yet."""
    table = torch.randn(C, 3, device=DEVICE)

    def program(table, labels):
        m = (labels >= 0) & (labels < C)
        return F.embedding(labels[m], table).sum()

    inputs = [(table, labels) for _, labels in labelled(0, 4, 9, padding=PADDING["in_range"])]
    kept(program, inputs, caplog, "embedding")


class MaskedLoss(torch.nn.Module):
    """A linear layer whose parameters require grad, then the loss of the labelled rows."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(6, C)

    def forward(self, x, labels):
        m = labels >= 0
        return F.cross_entropy(self.linear(x)[m], labels[m])


def module_inputs(*counts):
    inputs = []
    for count, (_, labels) in zip(counts, labelled(*counts, padding=PADDING["non_negative"])):
        x = torch.randn(12, 6, generator=torch.Generator().manual_seed(count))
        inputs.append(tagged((x.to(DEVICE), labels), count))
    return inputs


def test_a_modules_masked_loss_in_inference(caplog):
    model = MaskedLoss().to(DEVICE)
    assert all(p.requires_grad for p in model.parameters())
    with torch.no_grad():
        rewritten(lambda x, labels: model(x, labels), module_inputs(0, 1, 8), caplog)


def test_a_training_step_keeps_the_selection_in_its_forward(caplog):
    """The forward saves the selected rows for the backward: their length escapes,
    so its ``nonzero`` stays (the backward reads the length from the forward). Loss
    and gradients equal eager's."""
    model, reference = MaskedLoss().to(DEVICE), MaskedLoss().to(DEVICE)
    torch._dynamo.reset()
    patch = torch._inductor.config.patch(use_fast_math=DEVICE == "cpu")
    with caplog.at_level(logging.INFO, logger=LOGGER), patch:
        with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
            compiled = torch.compile(model, fullgraph=True)
            for args in module_inputs(1, 8):
                got, want = compiled(*args), reference(*args)
                got.backward()
                want.backward()
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert aten.nonzero.default in targets(graphs)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert messages and "reads its length" in messages[0], messages
