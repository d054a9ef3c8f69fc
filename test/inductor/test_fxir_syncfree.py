# Owner(s): ["module: inductor"]
"""No host sync where no data-dependent size escapes: a reduction over a masked
selection is computed over the mask (``codegen/masked_reductions.py``).

Each program is compiled once and run on inputs whose selections differ in length
(empty ones too), against eager: exactly where eager is exact (integer sums,
counts), within the reordering of a float reduction elsewhere. Its FX graph
defines no unbacked symbol and runs no ``nonzero``: nothing for the host to wait
for. What the rewrite leaves, it names in the package's log, with why.
"""

from __future__ import annotations

import logging

import pytest
import torch
from programs import BY_NAME as CORPUS_BY_NAME
from programs import CORPUS, data_dependent_dynamo, fresh_copy, run, values
from test_fxir_cuda_graphs import CAPTURABLE, kind

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.artifact.kernels import owned_kernels
from inductor_fx_unbacked.demo.programs import same
from inductor_fx_unbacked.integration import caches
from inductor_fx_unbacked.runner import lowering, segments

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
LOGGER = "inductor_fx_unbacked.codegen.masked_reductions"


@pytest.fixture(autouse=True)
def dynamo_config():
    with data_dependent_dynamo():
        yield


def signs(*positives, n=24):
    return [(values(n, p, seed=p, device=DEVICE),) for p in positives]


def rows(*positive_rows, n=12, columns=6):
    inputs = []
    for p in positive_rows:
        x = values(n * columns, n * columns // 2, seed=p, device=DEVICE).reshape(n, columns)
        x[:, 0] = values(n, p, seed=p + 1, device=DEVICE)
        inputs.append((x,))
    return inputs


def integers(*positives, n=24):
    return [((values(n, p, seed=p, device=DEVICE) * 10).int(),) for p in positives]


#: name -> (program, inputs, exact): every one has a selection of length 0 among its inputs.
PROGRAMS = {
    "sum": (lambda x: (x[x > 0] * 2).sum(), signs(5, 17, 0), False),
    "sum_of_a_chain": (lambda x: (x[x > 0].sin() * 2 + 1).sum(), signs(5, 17, 0), False),
    "integer_sum": (lambda x: (x[x > 0] * 3).sum(), integers(5, 17, 0), True),
    "count": (lambda x: (x[x > 0.5] > 0).sum(), signs(5, 17, 0), True),
    "mean": (lambda x: x[x > 0].mean(), signs(5, 17, 0), False),
    "prod": (lambda x: (x[x > 0] + 1).prod(), signs(3, 7, 0), False),
    "any": (lambda x: (x[x > 0] > 0.9).any(), signs(5, 17, 0), True),
    "all": (lambda x: (x[x > 0] > 0.2).all(), signs(5, 17, 0), True),
    "rows": (lambda x: x[x[:, 0] > 0].sum(0), rows(3, 9, 0), False),
    "rows_mean": (lambda x: x[x[:, 0] > 0].mean(0), rows(3, 9, 0), False),
    "two_selections_by_one_mask": (
        lambda x, y: (x[x > 0] * y[x > 0]).sum(),
        [(*a, *b) for a, b in zip(signs(5, 17, 0), signs(9, 9, 9))],
        False,
    ),
    "softmax_of_rows": (
        lambda x: torch.softmax(x[x[:, 0] > 0], dim=1).sum(0),
        rows(3, 9, 0),
        False,
    ),
}


def compile_and_check(fn, inputs, exact, **backend_options):
    torch._dynamo.reset()
    with ifx.fx_backend(DEVICE, **backend_options), ifx.recording_graphs() as graphs:
        compiled = torch.compile(fresh_copy(fn), fullgraph=True)
        for args in inputs:
            got, want = compiled(*args), fn(*args)
            if exact:
                assert torch.equal(got, want), (args, got, want)
            else:
                assert same(got, want, **TOLERANCE), (args, got, want)
    assert graphs
    return graphs


def symbols(graphs):
    return [
        str(n.meta["unbacked_symbol"])
        for gm in graphs
        for n in gm.graph.nodes
        if "unbacked_symbol" in n.meta
    ]


def targets(graphs):
    return {n.target for gm in graphs for n in gm.graph.nodes}


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_reduction_over_a_selection_syncs_no_more(name):
    fn, inputs, exact = PROGRAMS[name]
    graphs = compile_and_check(fn, inputs, exact)
    assert symbols(graphs) == [], "the FX graph defines no unbacked symbol"
    assert torch.ops.aten.nonzero.default not in targets(graphs)


@pytest.mark.parametrize("name", ["masked_mse_loss", "per_class_counts", "masked_token_nll"])
def test_real_code_reductions_over_selections_sync_no_more(name):
    program = CORPUS_BY_NAME[name]
    inputs = program.inputs(DEVICE)
    graphs = compile_and_check(program.fn, inputs, exact=name == "per_class_counts")
    assert symbols(graphs) == []


def test_the_switch_keeps_upstreams_graph_and_is_in_the_artifacts_identity():
    fn, inputs, exact = PROGRAMS["sum"]
    graphs = compile_and_check(fn, inputs, exact, sync_free=False)
    assert symbols(graphs), "without the rewrite, the selection's length is a symbol"
    on = caches.FxArtifactIdentity(DEVICE, "lowered", True, None, None, True).uuid()
    off = caches.FxArtifactIdentity(DEVICE, "lowered", True, None, None, False).uuid()
    assert on != off


def kept(fn, inputs, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        graphs = compile_and_check(fn, inputs, exact=False)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert symbols(graphs), "the selection stays: its length is a symbol"
    assert len(messages) == 1, messages
    return messages[0]


def test_amax_keeps_its_selection_and_says_why(caplog):
    """amax of an empty selection raises in eager (so Dynamo checks it is not empty)."""
    message = kept(lambda x: x[x > 0].amax(), signs(5, 17), caplog)
    assert "amax" in message and "empty selection" in message


def test_var_keeps_its_selection_and_says_why(caplog):
    message = kept(lambda x: x[x > 0].var(), signs(5, 17), caplog)
    assert "correction" in message


def test_a_selection_that_reaches_the_output_keeps_it(caplog):
    message = kept(lambda x: (x[x > 0] * 2, x[x > 0].sum()), signs(5, 17, 0), caplog)
    assert "size escapes" in message


def test_a_users_check_of_the_length_keeps_it(caplog):
    """A check that does not hold by construction needs the host: it raises."""

    def checked(x):
        selected = x[x > 0]
        torch._check(selected.shape[0] <= 20)
        return selected.sum()

    message = kept(checked, signs(5, 17, 0), caplog)
    assert "reads its length" in message


def test_random_numbers_for_the_selection_keep_it(caplog):
    """Dropout draws for the selected elements only: drawing for all would change
    what eager draws."""
    fn = lambda x: torch.nn.functional.dropout(x[x > 0], 0.5, training=True).sum()  # noqa: E731
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        torch._dynamo.reset()
        with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
            torch.compile(fn, fullgraph=True)(*signs(5)[0])
    assert symbols(graphs)
    assert [r for r in caplog.records if r.name == LOGGER]


def test_deterministic_algorithms_give_the_same_bits_every_call():
    fn, inputs, _ = PROGRAMS["sum_of_a_chain"]
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        torch._dynamo.reset()
        with ifx.fx_backend(DEVICE):
            compiled = torch.compile(fresh_copy(fn), fullgraph=True)
            first, second = compiled(*inputs[0]), compiled(*inputs[0])
    finally:
        torch.use_deterministic_algorithms(old)
    assert torch.equal(first, second)


def test_a_program_with_no_sync_left_is_one_stretch():
    """Nothing in the rewritten graph needs the host: the whole of it is one stretch
    of device work, which CUDA graphs capture (on a GPU)."""

    def two_selections(x, y):
        # Over two lengths: two reduction kernels.
        return x[x > 0].sum() + (y[y < 0] * 2).sum()

    x, y = signs(5)[0][0], signs(9, n=40)[0][0]
    captured = ifx.capture_fx_graphs(two_selections, x, y, device=DEVICE, fullgraph=True)
    gm = captured.graphs[-1]
    lowered = lowering.lower(gm, owned_kernels(gm))
    stretches = segments.find_stretches(lowered.graph, CAPTURABLE)
    launches = [n for n in lowered.graph.nodes if kind(n) == "launch"]
    assert len(launches) >= 2 and symbols(captured.graphs) == []
    (stretch,) = stretches
    assert stretch.launches == len(launches)
    assert stretch.ended_by[0].op == "output"


@pytest.mark.full
@pytest.mark.parametrize("program", [p for p in CORPUS if not p.backward], ids=lambda p: p.name)
def test_every_corpus_program_equals_eager_without_the_rewrite(program):
    """The corpus test runs the rewrite (the default); this one runs without it."""
    inputs = program.inputs(DEVICE)
    expected = [run(program, program.fn, args) for args in inputs]
    torch._dynamo.reset()
    try:
        with ifx.fx_backend(DEVICE, sync_free=False):
            compiled = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=True)
            actual = [run(program, compiled, args) for args in inputs]
    except Exception as e:
        from programs import xfail_at_declared_limit

        xfail_at_declared_limit(program, "the FX path", e)
        raise
    for args, got, want in zip(inputs, actual, expected):
        assert same(got, want, **TOLERANCE), (args, got, want)
