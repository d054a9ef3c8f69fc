"""What the sync-free tests at masked-out positions share: compile a program once,
compare it with eager on inputs whose selections differ in length, and say whether
the rewrite happened (``rewritten``) or was left with a reason (``kept``)."""

from __future__ import annotations

import contextlib
import logging

import torch
import torch.nn.functional as F
from programs import fresh_copy
from test_fxir_syncfree import DEVICE, LOGGER, symbols, targets

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.codegen import masked_reductions

aten = torch.ops.aten
C = 5
#: (rtol, atol) for a reduction computed in another order than eager's.
TOLERANCES = {torch.bfloat16: (2e-2, 2e-2), torch.float16: (2e-3, 2e-3)}


@contextlib.contextmanager
def aten_graphs():
    """The ATen graphs Inductor lowers, as the rewrite leaves them."""
    graphs = []
    rewrite = masked_reductions.rewrite_masked_reductions

    def recording(gm):
        outcomes = rewrite(gm)
        graphs.append(gm)
        return outcomes

    masked_reductions.rewrite_masked_reductions = recording
    try:
        yield graphs
    finally:
        masked_reductions.rewrite_masked_reductions = rewrite


def compile_and_compare(fn, inputs, caplog, level=logging.INFO, **config):
    """``fn`` compiled once, equal to eager on every input; its FX graphs and the
    package's messages about selections."""
    assert len({_count(args) for args in inputs}) >= 2, "selections of different lengths"
    torch._dynamo.reset()
    caplog.clear()
    patch = torch._inductor.config.patch(**config)
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
