# Owner(s): ["module: inductor"]
"""``ifx.compile(..., fullgraph=False)``: the direct call of a program that Dynamo
breaks into several graphs.

Dynamo's glue runs between the graphs; each graph whose AOTAutograd wrappers have
nothing to do runs its lowered runner directly. The artifact checks its inputs,
runs for inference, equals eager on inputs whose data-dependent sizes (and the
branches they take) differ, refuses updates of its inputs without changing them,
and says why it cannot be saved.
"""

from __future__ import annotations

import pickle
import types

import pytest
import torch

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.programs import same

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def signed(n, seed, columns=None):
    g = torch.Generator().manual_seed(seed)
    shape = (n,) if columns is None else (n, columns)
    return torch.randn(shape, generator=g).to(DEVICE)


def doubled_if_many_positives(x):
    kept = x[x > 0]
    if kept.numel() > 5:  # a Python branch on a data-dependent size: a graph break
        return kept * 2
    return kept - 1


class SparseMoE(torch.nn.Module):
    """transformers' Mixtral-style sparse block: top-k routing, then a loop over
    the experts the batch hits (a graph break), each an ``nn.Linear``."""

    def __init__(self, hidden=16, experts=4, top_k=2):
        super().__init__()
        self.top_k = top_k
        self.gate = torch.nn.Linear(hidden, experts, bias=False)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(experts))

    def forward(self, x):
        weights, selected = torch.topk(torch.sigmoid(self.gate(x)), self.top_k, dim=-1)
        out = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(selected, len(self.experts)).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_index in hit:
            rank, token = torch.where(mask[expert_index].squeeze(0))
            routed = self.experts[expert_index](x[token]) * weights[token, rank, None]
            out.index_add_(0, token, routed)
        return out


class Expert(torch.nn.Module):
    """A gated MLP written outside ``torch.nn`` (as transformers' activations are):
    a frame Dynamo compiles wherever it is called from."""

    def __init__(self, hidden=16, inner=24):
        super().__init__()
        self.up = torch.nn.Linear(hidden, inner)
        self.down = torch.nn.Linear(inner, hidden)

    def forward(self, x):
        return self.down(torch.nn.functional.silu(self.up(x)))


class ExpertLoop(torch.nn.Module):
    """The per-expert loop of transformers' MoE blocks, over experts of our own."""

    def __init__(self, hidden=16, experts=6, top_k=2):
        super().__init__()
        self.top_k = top_k
        self.gate = torch.nn.Linear(hidden, experts, bias=False)
        self.experts = torch.nn.ModuleList(Expert(hidden) for _ in range(experts))

    def forward(self, x):
        weights, selected = torch.topk(torch.softmax(self.gate(x), -1), self.top_k, dim=-1)
        out = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(selected, len(self.experts)).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for index in hit:  # a graph break Dynamo cannot resume from
            index = int(index[0])
            rank, token = torch.where(mask[index])
            out.index_add_(0, token, self.experts[index](x[token]) * weights[token, rank, None])
        return out


def compiled_regions(fn, *args):
    """The compiled regions (Dynamo's cache entries run) in one call of ``fn``."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn(*args)
    return sum("Torch-Compiled Region" in event.name for event in profile.events())


def experts_hit(block, x):
    with torch.no_grad():
        return int(torch.topk(block.gate(x), block.top_k, dim=-1)[1].unique().numel())


def test_a_data_dependent_branch_runs_through_dynamos_glue_and_direct_graphs():
    x = signed(16, 0)
    with pytest.raises(ifx.CompileError, match="fullgraph=False"):
        ifx.compile(doubled_if_many_positives, x)
    artifact = ifx.compile(doubled_if_many_positives, x, fullgraph=False, dynamic=True)
    assert isinstance(artifact, ifx.CompiledWithBreaks)
    assert artifact.dynamo_graphs >= 2
    assert artifact.wrapped == [], "every graph runs its lowered runner directly"
    assert any(n.meta.get("unbacked_symbol") for gm in artifact.graphs for n in gm.graph.nodes)
    # Both branches, an empty selection, sizes 0 and 1.
    inputs = [signed(16, 1), signed(40, 2), -signed(16, 3).abs(), signed(3, 4), signed(1, 5)]
    inputs += [torch.empty(0, device=DEVICE)]
    taken = set()
    for case in inputs:
        taken.add(int((case > 0).sum()) > 5)
        assert same(artifact(case), doubled_if_many_positives(case))
    assert taken == {True, False}


def counting_compiled_graph_calls(monkeypatch):
    """The ``CompiledFxGraph`` calls (``torch.compile``'s path to a graph) from now on."""
    from torch._inductor.output_code import CompiledFxGraph

    calls = []
    upstream_call = CompiledFxGraph.__call__

    def counted(self, *args, **kwargs):
        calls.append(self)
        return upstream_call(self, *args, **kwargs)

    monkeypatch.setattr(CompiledFxGraph, "__call__", counted)
    return calls


def test_a_call_reaches_no_graph_through_inductors_compiled_graph_wrapper(monkeypatch):
    """Each graph runs its lowered runner, not ``torch.compile``'s path to it
    (AOTAutograd's wrappers, then Inductor's ``CompiledFxGraph``)."""
    artifact = ifx.compile(doubled_if_many_positives, signed(16, 0), fullgraph=False)
    wrapper_calls = counting_compiled_graph_calls(monkeypatch)
    for seed in (1, 2):
        x = signed(16, seed)
        assert same(artifact(x), doubled_if_many_positives(x))
    assert wrapper_calls == []


def test_a_sparse_moe_block_with_linear_experts_runs_for_inference():
    torch.manual_seed(0)
    block = SparseMoE().to(DEVICE)
    assert all(p.requires_grad for p in block.parameters())
    artifact = ifx.compile(block, signed(32, 0, 16), fullgraph=False, dynamic=True)
    for tokens, seed in ((32, 1), (5, 2), (64, 3), (1, 4)):
        x = signed(tokens, seed, 16)
        with torch.no_grad():
            expected = block(x)
        result = artifact(x)
        assert not result.requires_grad
        torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)


def flattened_and_scaled_if_many_positives(x):
    """transformers' MoE blocks around their per-expert loop: a view of the input
    before the break, a reshape of what the loop made after it."""
    flat = x.view(-1)
    if (flat > 0).sum() > 5:  # a graph break
        scaled = flat * 2
    else:
        scaled = flat - 1
    return flat, scaled.view(x.shape[0], -1)[1:]


def test_graphs_that_return_views_of_their_inputs_run_directly_and_return_views(monkeypatch):
    artifact = ifx.compile(
        flattened_and_scaled_if_many_positives, signed(8, 0, 4), fullgraph=False, dynamic=True
    )
    assert artifact.wrapped == [], "AOTAutograd's wrappers would only make the views again"
    wrapper_calls = counting_compiled_graph_calls(monkeypatch)
    taken = set()
    # The second has no positive: the other branch.
    for x in (signed(8, 1, 4), -signed(3, 2, 4).abs(), signed(12, 3, 4)):
        expected = flattened_and_scaled_if_many_positives(x)
        flat, rest = artifact(x)
        taken.add(int((x > 0).sum()) > 5)
        assert same((flat, rest), expected)
        # A view of the caller's tensor, as eager's: an update of one shows in the other.
        assert flat._base is x and (flat.stride(), flat.storage_offset()) == (
            expected[0].stride(),
            expected[0].storage_offset(),
        )
        flat[0] = 7.0
        assert x[0, 0] == 7.0
        assert rest.stride() == expected[1].stride()
    assert taken == {True, False}
    assert wrapper_calls == []


def test_a_graph_that_only_reshapes_its_input_runs_directly(monkeypatch):
    """The graph after transformers' per-expert loop: one output, a reshape of what
    the loop made."""

    def doubled_then_flattened(x):
        doubled = x * 2
        torch._dynamo.graph_break()
        return doubled.view(-1)

    artifact = ifx.compile(doubled_then_flattened, signed(8, 0, 4), fullgraph=False, dynamic=True)
    assert artifact.dynamo_graphs == 2 and artifact.wrapped == []
    wrapper_calls = counting_compiled_graph_calls(monkeypatch)
    for x in (signed(8, 1, 4), signed(3, 2, 4)):
        flat = artifact(x)
        assert same(flat, doubled_then_flattened(x))
        assert flat._is_view() and flat.shape == (x.numel(),)
    assert wrapper_calls == []


def test_a_view_of_an_input_that_starts_off_its_alignment_stays_the_callers():
    """On a GPU the graph's kernels assume aligned inputs, and the direct call hands
    them an aligned copy of one that is not: the view it returns is still of the
    caller's tensor."""

    def positives_and_the_input_flat(x):
        kept = x[x > 0]
        if kept.numel() > 5:
            return kept * 2, x.view(-1)
        return kept - 1, x.view(-1)

    artifact = ifx.compile(positives_and_the_input_flat, signed(8, 0, 4), fullgraph=False)
    storage = signed(33, 1)
    x = storage[1:].view(8, 4)  # 4 bytes past an aligned start
    kept, flat = artifact(x)
    expected = positives_and_the_input_flat(x)
    assert same((kept, flat), expected)
    assert flat.data_ptr() == x.data_ptr() and flat._base is storage
    flat[0] = 7.0
    assert storage[1] == 7.0


def test_a_graph_that_returns_its_input_as_a_view_runs_directly():
    def positives_and_the_input(x):
        kept = x[x > 0]
        if kept.numel() > 5:
            return kept * 2, x.view(-1)  # the input itself, to Inductor
        return kept - 1, x.view(-1)

    artifact = ifx.compile(positives_and_the_input, signed(16, 0), fullgraph=False, dynamic=True)
    if DEVICE == "cpu":  # no input checked for alignment
        assert artifact.wrapped == []
    for x in (signed(16, 1), -signed(5, 2).abs()):
        kept, flat = artifact(x)
        assert same((kept, flat), positives_and_the_input(x))
        assert flat._base is x and flat is not x


def selects_again_if_many_positives(x):
    kept = x[x > 0]
    if kept.numel() > 5:
        return kept[kept > 1] * 2  # compiled at the first call that takes it
    return kept - 1


def test_a_branch_first_taken_in_a_call_is_traced_with_the_artifacts_capture_settings():
    """Dynamo compiles the branch inside the artifact's call: with ``nonzero`` kept in
    its graph, as when the artifact was compiled; the caller's settings are put
    back after the call."""
    capture = dict(capture_scalar_outputs=False, capture_dynamic_output_shape_ops=False)
    with torch._dynamo.config.patch(**capture):
        few_positives = -signed(16, 0).abs()
        artifact = ifx.compile(
            selects_again_if_many_positives, few_positives, fullgraph=False, dynamic=True
        )
        compiled = len(artifact.graphs)
        x = signed(32, 1)
        assert same(artifact(x), selects_again_if_many_positives(x))
        branch = artifact.graphs[compiled:]
        assert any(n.meta.get("unbacked_symbol") for gm in branch for n in gm.graph.nodes)
        assert {name: getattr(torch._dynamo.config, name) for name in capture} == capture


def test_each_call_checks_its_inputs_naming_the_argument():
    artifact = ifx.compile(doubled_if_many_positives, signed(16, 0), fullgraph=False)
    with pytest.raises(ifx.InputError, match=r"args\[0\] is a torch.float64 tensor"):
        artifact(signed(16, 1).double())
    with pytest.raises(ifx.InputError, match=r"args\[0\] has sizes \(17,\).*dynamic=True"):
        artifact(signed(17, 1))
    with pytest.raises(ifx.InputError, match=r"args\[0\] requires grad"):
        artifact(signed(16, 1).requires_grad_())


def test_it_cannot_be_saved_and_says_why(tmp_path):
    artifact = ifx.compile(doubled_if_many_positives, signed(16, 0), fullgraph=False)
    with pytest.raises(TypeError, match="glue between its graphs.*fullgraph=True"):
        ifx.save(artifact, tmp_path / "artifact.ifx")
    with pytest.raises(TypeError, match="cannot be saved or pickled"):
        pickle.dumps(artifact)


def test_an_update_of_an_input_in_the_glue_is_refused_leaving_the_input_as_it_was():
    def bumps_if_many_positives(x):
        kept = x[x > 0]
        if kept.numel() > 5:
            x.add_(1)
        return kept * 2

    x = signed(16, 0)
    before = x.clone()
    with pytest.raises(ifx.CompileError, match=r"updates args\[0\] in place"):
        ifx.compile(bumps_if_many_positives, x, fullgraph=False)
    assert torch.equal(x, before)


def test_a_program_of_one_graph_gets_the_one_graph_artifact():
    artifact = ifx.compile(lambda x: x[x > 0] * 2, signed(16, 0), fullgraph=False)
    assert isinstance(artifact, ifx.CompiledArtifact)


def test_what_a_loop_dynamo_cannot_resume_calls_runs_as_python_where_that_is_faster():
    """Dynamo compiles the block up to its per-expert loop and leaves the loop to
    Python, yet compiles each expert it calls, entered once per expert per call.
    The artifact times both on the example and keeps the faster; with the loop's
    callees as Python, the compiled regions of a call do not grow with the experts
    hit and the router's graph still runs; either way the result is eager's, and
    ``torch.compile`` of the same block elsewhere is left as it was."""
    torch.manual_seed(0)
    block = ExpertLoop().to(DEVICE).eval()
    artifact = ifx.compile(block, signed(32, 0, 16), fullgraph=False, dynamic=True)
    assert artifact.python_rests == ["ExpertLoop.forward"]
    seconds = artifact.rest_seconds["ExpertLoop.forward"]
    assert set(seconds) == {True, False} and all(s > 0 for s in seconds.values())
    assert artifact.rests_as_python == (seconds[True] <= seconds[False])
    assert artifact.python_callees == (["ExpertLoop.forward"] if artifact.rests_as_python else [])
    few, many = signed(1, 1, 16), signed(64, 2, 16)
    assert experts_hit(block, few) < experts_hit(block, many) == len(block.experts)
    for as_python in (True, False):
        artifact.rests_as_python = as_python
        grown = compiled_regions(artifact, many) - compiled_regions(artifact, few)
        if as_python:
            assert grown == 0 and compiled_regions(artifact, few) >= 1, "the router's graph runs"
        else:
            assert grown == experts_hit(block, many) - experts_hit(block, few)
        for tokens, seed in ((32, 3), (1, 4), (5, 5), (64, 6)):
            x = signed(tokens, seed, 16)
            with torch.no_grad():
                expected = block(x)
            torch.testing.assert_close(artifact(x), expected, rtol=1e-5, atol=1e-5)

    # Set for the artifact's calls only: Dynamo still intercepts the experts called
    # from the same loop compiled elsewhere, one region per expert hit.
    elsewhere = torch.compile(block, backend="eager", dynamic=True)
    with (
        torch.no_grad(),
        torch._dynamo.config.patch(
            capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
        ),
    ):
        elsewhere(few)
        assert compiled_regions(elsewhere, many) - compiled_regions(elsewhere, few) == (
            experts_hit(block, many) - experts_hit(block, few)
        )


def normalised(values):
    return values / values.norm()


def per_class_normalised(x, labels):
    """torchvision's per-class NMS loop in miniature: a loop over the classes at the
    frame's start, each class's values through a function of its own."""
    out = torch.zeros_like(x)
    for label in torch.unique(labels):
        index = torch.where(labels == label)[0]
        out[index] = normalised(x[index])
    return out


def scaled_per_class(x, labels):
    return per_class_normalised(x * 2, labels) + 1


def labelled(n, classes, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    return x.to(DEVICE), labels.to(DEVICE)


def test_what_a_frame_dynamo_gives_up_on_calls_runs_as_python_where_that_is_faster():
    """Dynamo gives up on the per-class frame whole (its loop over a tensor's values
    comes first), runs it as Python and compiles the function it calls, a region per
    class per call. The artifact finds that frame and times its callees both ways;
    as Python, the regions of a call do not grow with the classes. Either way the
    result is eager's, and ``torch.compile`` elsewhere keeps Dynamo's behaviour."""
    artifact = ifx.compile(scaled_per_class, *labelled(64, 3, 0), fullgraph=False, dynamic=True)
    assert artifact.python_rests == ["per_class_normalised"]
    seconds = artifact.rest_seconds["per_class_normalised"]
    assert artifact.rests_as_python == (seconds[True] <= seconds[False])
    few, many = labelled(64, 2, 1), labelled(64, 6, 2)
    for as_python in (True, False):
        artifact.rests_as_python = as_python
        grown = compiled_regions(artifact, *many) - compiled_regions(artifact, *few)
        assert grown == (0 if as_python else 4)
        for n, classes, seed in ((64, 3, 3), (40, 7, 4), (1, 1, 5), (5, 5, 6)):
            x, labels = labelled(n, classes, seed)
            torch.testing.assert_close(artifact(x, labels), scaled_per_class(x, labels))

    # Dynamo's strategy for the frame is put back after each call: it still gives it
    # up and compiles each class's call of the function.
    elsewhere = torch.compile(scaled_per_class, backend="eager", dynamic=True)
    with torch._dynamo.config.patch(
        capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
    ):
        elsewhere(*few)
        assert compiled_regions(elsewhere, *many) - compiled_regions(elsewhere, *few) == 4


def fresh(fn, **names):
    """``fn`` on a new code object (Dynamo's state is per code), reading ``names``."""
    return types.FunctionType(fn.__code__.replace(), {**fn.__globals__, **names})


def test_a_frame_dynamo_gave_up_on_before_the_compile_is_found_too():
    """Dynamo gives a frame up once per process: a ``torch.compile`` of the same code
    earlier leaves it skipped, never converted again. The artifact still finds it,
    by the functions it calls, which Dynamo intercepts and converts."""
    per_class = fresh(per_class_normalised, normalised=fresh(normalised))
    program = fresh(scaled_per_class, per_class_normalised=per_class)
    earlier = torch.compile(program, backend="eager", dynamic=True)
    with torch._dynamo.config.patch(
        capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True
    ):
        earlier(*labelled(64, 3, 0))
    artifact = ifx.compile(program, *labelled(64, 3, 0), fullgraph=False, dynamic=True)
    assert artifact.python_rests == ["per_class_normalised"]
    artifact.rests_as_python = True
    few, many = labelled(64, 2, 1), labelled(64, 6, 2)
    assert compiled_regions(artifact, *many) == compiled_regions(artifact, *few)
    for n, classes, seed in ((64, 3, 3), (40, 7, 4), (1, 1, 5)):
        x, labels = labelled(n, classes, seed)
        torch.testing.assert_close(artifact(x, labels), scaled_per_class(x, labels))
