# Owner(s): ["module: inductor"]
"""The sync-free rewrite reads by index only in bounds (``codegen/masked_safety.py``).

``f(x[mask]).sum()`` becomes ``where(mask, f(x), 0).sum()``: ``f`` also runs where
the mask is false, on the values users keep there. Losses over labelled rows
(cross-entropy, ``nll_loss``, a gather of the label's log-probability) keep padding
labels there that are out of range (-1, -1000, 255 with fewer classes, 10**12) or
exactly ``ignore_index``; the gather's index is 0 where the mask is false. A mask
must cover its base exactly. Each program is compiled once and run on inputs whose
selections differ in length (empty and one-element ones among them), and must
equal eager; where the rewrite applies it must have happened (no unbacked symbol,
no ``nonzero``) and the index must be guarded in the ATen graph Inductor lowers;
where it must not, the package's log says why.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from programs import data_dependent_dynamo
from syncfree_checks import (
    DEVICE,
    LOGGER,
    LOSSES,
    MASKS,
    PADDING,
    C,
    aten,
    aten_graphs,
    compile_and_compare,
    guarded,
    kept,
    labelled,
    loss_program,
    rewritten,
    tagged,
)
from test_fxir_syncfree import targets

import inductor_fx_unbacked as ifx


@pytest.fixture(autouse=True)
def dynamo_config():
    with data_dependent_dynamo():
        yield


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("loss", LOSSES)
def test_a_loss_over_labelled_rows_gathers_in_bounds(loss, mask, caplog):
    """Issue 39, finding 1: the gather ran over every row, padding labels included,
    and read out of bounds (a crash, or an illegal address on a GPU). Its index is
    0 where the mask is false, the label where it is true: the rewrite stays."""
    inputs = labelled(0, 1, 7, 12, padding=PADDING[mask])
    with aten_graphs() as graphs:
        rewritten(loss_program(loss, mask), inputs, caplog)
    gathers = [n for gm in graphs for n in gm.graph.nodes if n.target is aten.gather.default]
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


def test_a_loss_over_labelled_tokens_of_a_batch(caplog):
    """A language model's loss: logits (batch, tokens, classes), a mask over
    (batch, tokens), padding -100, -1 and -10**12 where it is false."""

    def program(logits, labels):
        m = labels >= 0
        return F.cross_entropy(logits[m], labels[m])

    inputs = []
    for count in (0, 3, 11):
        g = torch.Generator().manual_seed(count)
        logits, labels = torch.randn(3, 4, C, generator=g), torch.randint(0, C, (3, 4), generator=g)
        padded = torch.randperm(12, generator=g)[: 12 - count]
        padding = torch.tensor([-100, -1, -(10**12)])[torch.arange(12 - count) % 3]
        labels.view(-1)[padded] = padding
        inputs.append(tagged((logits.to(DEVICE), labels.to(DEVICE)), count))
    with aten_graphs() as graphs:
        rewritten(program, inputs, caplog)
    gathers = [n for gm in graphs for n in gm.graph.nodes if n.target is aten.gather.default]
    assert gathers and all(guarded(n, 2, 0) for n in gathers)


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


@pytest.mark.parametrize("length, mask_length", [(30, 1), (5, 2)])
def test_the_fuzzers_where_indices_of_a_longer_base(length, mask_length, caplog):
    """``/work/fuzz-findings/syncfree-where-indices-of-a-longer-base.py``: 435 for 0
    with a mask of one position, no compile with two."""
    x = torch.arange(float(length), device=DEVICE)
    signs = [torch.ones(mask_length, device=DEVICE), -torch.ones(mask_length, device=DEVICE)]
    inputs = [tagged((x, k), (k > 0).sum()) for k in signs]

    def program(x, k):
        m = k > 0
        return x[torch.where(m)].sum()

    kept(program, inputs, caplog, "cover")


@pytest.mark.parametrize("function", [torch.sqrt, torch.reciprocal], ids=["sqrt", "reciprocal"])
def test_the_fuzzers_nan_from_beyond_a_shorter_mask(function, caplog):
    """``/work/fuzz-findings/syncfree-where-of-a-longer-base-gives-nan.py``: the chain
    ran (and was summed) at positions of ``x`` that no index reads: NaN for 2.0."""
    x = torch.tensor([4.0, float("nan"), -1.0, 0.0], device=DEVICE)
    inputs = [tagged((x, torch.tensor([s], device=DEVICE)), s > 0) for s in (1.0, -1.0)]

    def program(x, k):
        return function(x[torch.where(k > 0)]).sum()

    kept(program, inputs, caplog, "cover")


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


def test_an_embedding_of_the_selected_labels_looks_up_in_bounds(caplog):
    """A table's rows looked up by masked-out labels (huge, negative) read out of
    bounds; the index is 0 where the mask is false."""
    embedding = torch.nn.Embedding(C, 3).to(DEVICE)

    def program(weights, labels):
        m = (labels >= 0) & (labels < C)
        return (embedding(labels[m]) * weights[m]).sum()

    inputs = [
        tagged((logits[:, :1], labels), count)
        for (logits, labels), count in zip(
            labelled(0, 4, 9, padding=PADDING["in_range"]), (0, 4, 9)
        )
    ]
    with torch.no_grad(), aten_graphs() as graphs:
        rewritten(program, inputs, caplog)
    lookups = [n for gm in graphs for n in gm.graph.nodes if n.target is aten.embedding.default]
    assert lookups and all(guarded(n, 1, 0) for n in lookups)


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
    with caplog.at_level(logging.INFO, logger=LOGGER):
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
