# Owner(s): ["module: inductor"]
"""``ifx.compile`` of programs that read globals, float arguments and module flags.

Dynamo reads a module-level value either as a graph input (a tensor; a float with
``dynamic=True``, passed as a 0-d tensor) or as a constant it guards on (a float with
``dynamic=False``, a module's ``training``). The artifact reads the first kind on
every call, as Dynamo does, and checks the second where ``torch.compile`` would
compile again: a changed value never gives a silently stale result.
"""

from __future__ import annotations

import pickle

import pytest
import torch

import inductor_fx_unbacked as ifx

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

THRESHOLD = 0.5
SCALE = torch.arange(1.0, 9.0)
KEPT_COLUMNS = [0, 2]


@pytest.fixture(autouse=True)
def module_globals():
    """Each test starts from the globals as written, and leaves them so."""
    global THRESHOLD, SCALE, KEPT_COLUMNS
    THRESHOLD, SCALE, KEPT_COLUMNS = 0.5, torch.arange(1.0, 9.0).to(DEVICE), [0, 2]
    yield
    THRESHOLD, SCALE, KEPT_COLUMNS = 0.5, torch.arange(1.0, 9.0), [0, 2]


def over_threshold(x):
    return x[x > THRESHOLD] * 2


def scaled_positives(x):
    y = x * SCALE
    return y[y > 0]


def inputs():
    g = torch.Generator().manual_seed(0)
    first = torch.randn(8, generator=g).to(DEVICE)
    second = torch.randn(8, generator=g).to(DEVICE)
    assert (first > 0.5).sum() != (second > 0.5).sum()
    return first, second


def test_a_global_float_is_read_on_every_call_with_dynamic_true():
    global THRESHOLD
    first, second = inputs()
    artifact = ifx.compile(over_threshold, first, dynamic=True)
    for threshold in (0.5, -0.25, 1.5, 0.0):
        THRESHOLD = threshold
        for x in (first, second, first[:5]):
            assert torch.equal(artifact(x), over_threshold(x))
    THRESHOLD = "0.5"
    with pytest.raises(ifx.InputError, match=r"global .*THRESHOLD is now a str \('0.5'\)"):
        artifact(first)


def test_a_global_float_the_trace_fixed_is_checked_on_every_call():
    global THRESHOLD
    first, second = inputs()
    artifact = ifx.compile(over_threshold, first, dynamic=False)
    assert torch.equal(artifact(second), over_threshold(second))
    THRESHOLD = 0.1
    with pytest.raises(ifx.InputError, match=r"THRESHOLD is 0.1; the trace fixed it at 0.5"):
        artifact(second)
    THRESHOLD = 0.5
    assert torch.equal(artifact(second), over_threshold(second))


def test_a_global_tensor_is_read_on_every_call():
    global SCALE
    first, second = inputs()
    artifact = ifx.compile(scaled_positives, first, dynamic=True)
    assert torch.equal(artifact(second), scaled_positives(second))
    SCALE = -torch.arange(1.0, 9.0).to(DEVICE)
    for x in (first, second):
        assert torch.equal(artifact(x), scaled_positives(x))
    SCALE = SCALE.to(torch.float64)
    with pytest.raises(ifx.InputError, match=r"global .*SCALE: expected a tensor .*float32"):
        artifact(first)


def test_a_saved_artifact_keeps_the_globals_it_was_saved_with(tmp_path):
    global THRESHOLD
    first, second = inputs()
    artifact = ifx.compile(over_threshold, first, dynamic=True)
    path = tmp_path / "artifact.ifx"
    ifx.save(artifact, path)
    loaded = ifx.load(path)
    THRESHOLD = 1.5  # the loaded artifact reads the value it was saved with
    expected = second[second > 0.5] * 2
    assert torch.equal(loaded(second), expected)
    assert torch.equal(pickle.loads(pickle.dumps(loaded))(second), expected)


def test_a_float_argument_with_dynamic_true_is_passed_as_the_graph_takes_it():
    """Dynamo passes it as a 0-d float64 tensor, made when called."""

    def over(x, t):
        return x[x > t] * 2

    first, second = inputs()
    artifact = ifx.compile(over, first, 0.5, dynamic=True)
    for t in (0.5, 0.1, -1.0, 2, 1e30):
        for x in (first, second):
            assert torch.equal(artifact(x, t), over(x, t))
    with pytest.raises(ifx.InputError, match=r"args\[1\] is a str \('a'\)"):
        artifact(first, "a")


class Dropped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, x):
        y = self.dropout(self.linear(x))
        return y[y > 0]


def test_a_module_switched_to_training_after_compile_is_refused_by_name():
    """The eval-mode graph has no dropout: called in training mode it would silently
    compute something else."""
    model = Dropped().to(DEVICE).eval()
    x = torch.randn(4, 8).to(DEVICE)
    artifact = ifx.compile(model, x)
    with torch.no_grad():
        assert torch.equal(artifact(x), model(x))
    model.train()
    with pytest.raises(ifx.InputError, match=r"dropout.training is True; the trace fixed it"):
        artifact(x)
    model.eval()
    with torch.no_grad():
        assert torch.equal(artifact(x), model(x))


def rows_over_threshold_in_kept_columns(x):
    kept = x[:, KEPT_COLUMNS]
    return kept[kept[:, 0] > 0]


def test_a_global_list_updated_in_place_after_compile_is_refused():
    """The trace fixed the list's contents; the same list, changed in place, is not
    what it fixed."""
    x = torch.randn(6, 4).to(DEVICE)
    artifact = ifx.compile(rows_over_threshold_in_kept_columns, x)
    assert torch.equal(artifact(x), rows_over_threshold_in_kept_columns(x))
    KEPT_COLUMNS[1] = 1
    with pytest.raises(ifx.InputError, match=r"KEPT_COLUMNS\[1\] is 1; the trace fixed it at 2"):
        artifact(x)
    KEPT_COLUMNS[1] = 2
    assert torch.equal(artifact(x), rows_over_threshold_in_kept_columns(x))
    KEPT_COLUMNS.append(3)
    with pytest.raises(ifx.InputError, match=r"length of global .*KEPT_COLUMNS is 3; .* at 2"):
        artifact(x)
