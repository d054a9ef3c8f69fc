# Owner(s): ["module: inductor"]
"""``ifx.compile``: an artifact for inference, called directly, that checks its inputs,
and ``ifx.save``/``ifx.load``; the AOT module, called, runs through the lowered runner.

Every check names the argument it refuses. What the contract refuses at compile
time (graph breaks, updates of inputs, outputs that alias inputs) says why.
"""

from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from test_fxir_runner import counting_higher_order_calls

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.programs import same

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).parents[2]


def signed(n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g).to(DEVICE)


def positives_doubled(x):
    return x[x > 0] * 2


class MaskedScale(torch.nn.Module):
    """A module whose parameter and buffer the graph reads."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.arange(1.0, 17.0))
        self.register_buffer("shift", torch.full((16,), 0.5))

    def forward(self, x):
        kept = x > 0
        return (x * self.scale + self.shift)[kept]


def test_a_direct_call_computes_what_eager_computes_on_unseen_sizes():
    artifact = ifx.compile(positives_doubled, signed(16, 0))
    compiles = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for seed in range(1, 6):  # selections of other lengths, never seen
        x = signed(16, seed)
        assert same(artifact(x), positives_doubled(x))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == compiles, "no compile"
    assert any(n.meta.get("unbacked_symbol") for n in artifact.graph.graph.nodes)
    assert artifact.graph in artifact.graphs


def test_static_refuses_a_new_size_and_dynamic_runs_it():
    static = ifx.compile(positives_doubled, signed(16, 0))
    with pytest.raises(
        ifx.InputError, match=r"args\[0\].size\(\)\[0\] == 16.*args\[0\] has size \(20,\)"
    ):
        static(signed(20, 1))
    dynamic = ifx.compile(positives_doubled, signed(16, 0), dynamic=True)
    for n in (20, 7):
        x = signed(n, n)
        assert same(dynamic(x), positives_doubled(x))


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda x: x.double(), r"args\[0\]: expected a tensor on \S+ of torch.float32"),
        (lambda x: x.reshape(4, 4), r"args\[0\]: .* with 1 dimensions, got .* with 2"),
        (lambda x: x.clone().requires_grad_(), r"args\[0\] requires grad.*torch.compile"),
        (lambda x: x.tolist(), r"args\[0\] is a list"),
        (lambda x: x.repeat(2)[::2], r"stride\(\)\[0\] == 1"),
    ],
    ids=["dtype", "rank", "grad", "not a tensor", "stride"],
)
def test_an_input_of_another_kind_is_refused_naming_it(bad, message):
    artifact = ifx.compile(positives_doubled, signed(16, 0))
    with pytest.raises((ifx.InputError, ValueError), match=message):
        artifact(bad(signed(16, 1)))


def test_a_modules_parameters_and_buffers_are_read_when_called():
    module = MaskedScale().to(DEVICE)
    x = signed(16, 0)
    artifact = ifx.compile(module, x)
    assert same(artifact(x), module(x).detach())
    with torch.no_grad():
        module.scale.mul_(3)
    module.shift = torch.full((16,), -2.0, device=DEVICE)  # a new buffer object
    assert same(artifact(x), module(x).detach())


def test_inputs_and_outputs_are_pytrees():
    Pair = collections.namedtuple("Pair", "kept doubled")

    def program(inputs):
        x, y = inputs["x"], inputs["y"]
        return Pair(x[x > 0], [y * 2, y.sum()])

    inputs = {"x": signed(16, 0), "y": signed(4, 1)}
    artifact = ifx.compile(program, inputs)
    other = {"x": signed(16, 2), "y": signed(4, 3)}
    got, want = artifact(other), program(other)
    assert isinstance(got, Pair)
    assert same(got.kept, want.kept) and same(got.doubled, want.doubled)
    with pytest.raises(ifx.InputError, match="the artifact takes"):
        artifact(other["x"], other["y"])


def test_an_input_that_starts_inside_its_storage_or_is_misaligned():
    artifact = ifx.compile(positives_doubled, signed(16, 0))
    base = signed(19, 4)
    for start in (1, 3):  # 4 and 12 bytes in: misaligned for a 16-byte assumption
        x = base[start : start + 16]
        assert same(artifact(x), positives_doubled(x))


def test_a_specialised_python_scalar_is_checked():
    def scaled(x, factor):
        return x[x > 0] * factor

    artifact = ifx.compile(scaled, signed(16, 0), 3)
    assert same(artifact(signed(16, 1), 3), scaled(signed(16, 1), 3))
    with pytest.raises(ifx.InputError, match=r"args\[1\] is 4; the artifact was compiled for 3"):
        artifact(signed(16, 1), 4)


def test_what_the_contract_refuses_is_refused_at_compile_time_with_why():
    def graph_break(x):
        torch._dynamo.graph_break()
        return x * 2

    def updates_its_input(x):
        x.add_(1)
        return x[x > 0]

    def returns_a_view_of_its_input(x):
        return x[1:], x[x > 0]

    x = signed(16, 0)
    with pytest.raises(ifx.CompileError, match="one graph"):
        ifx.compile(graph_break, x)
    with pytest.raises(ifx.CompileError, match="updates its input 0"):
        ifx.compile(updates_its_input, x.clone())
    with pytest.raises(ifx.CompileError, match="output 0 .* an input or a view of one"):
        ifx.compile(returns_a_view_of_its_input, x)
    with pytest.raises(ifx.CompileError, match="requires grad"):
        ifx.compile(positives_doubled, x.clone().requires_grad_())


def test_the_artifact_saves_and_loads_with_the_state_it_had(tmp_path):
    module = MaskedScale().to(DEVICE)
    x = signed(16, 0)
    artifact = ifx.compile(module, x)
    ifx.save(artifact, tmp_path / "artifact.ifx")
    want = module(signed(16, 1)).detach()
    with torch.no_grad():
        module.scale.zero_()  # after saving: the saved state is what loads
    loaded = ifx.load(tmp_path / "artifact.ifx")
    assert same(loaded(signed(16, 1)), want)
    assert same(pickle.loads(pickle.dumps(loaded))(signed(16, 1)), want)


def test_a_file_of_other_versions_is_refused_naming_both(tmp_path):
    from inductor_fx_unbacked.integration import saving

    path = tmp_path / "artifact.ifx"
    ifx.save(ifx.compile(positives_doubled, signed(16, 0)), path)
    saved = pickle.loads(path.read_bytes())
    saved["header"]["versions"] = {**saved["header"]["versions"], "torch": "2.9.0"}
    path.write_bytes(pickle.dumps(saved))
    with pytest.raises(ifx.LoadError, match=r"saved with torch 2.9.0 .* this process has torch"):
        ifx.load(path)
    path.write_bytes(pickle.dumps({"weights": 1}))
    with pytest.raises(ifx.LoadError, match="not a file that ifx.save wrote"):
        ifx.load(path)
    with pytest.raises(TypeError, match="ifx.save saves what the package hands out"):
        saving.save(torch.nn.Linear(2, 2), path)


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU mode's files")
def test_loading_a_cpu_mode_file_without_the_interpreter_says_what_to_set(tmp_path):
    path = tmp_path / "artifact.ifx"
    ifx.save(ifx.compile(positives_doubled, signed(16, 0)), path)
    script = textwrap.dedent(
        f"""
        import inductor_fx_unbacked as ifx
        try:
            ifx.load({str(path)!r})
        except ifx.LoadError as e:
            print("refused:", e)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert "refused:" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "set TRITON_INTERPRET=1" in done.stdout


def test_the_aot_module_runs_through_the_lowered_runner_when_called():
    """Called, the AOT module runs the lowered runner; ``forward`` is the graph's code.

    Upstream compiles an AOT module under the C++ wrapper's config, which stores
    each kernel's binary and so refuses Inductor's static launcher. The FX graph
    stores no binary: its kernels keep the user's ``store_cubin`` (off), and on a
    GPU launch statically, as ``torch.compile``'s and ``ifx.compile``'s do."""
    from torch._inductor import compile_fx
    from torch._inductor import config as inductor_config

    from inductor_fx_unbacked import _compat
    from inductor_fx_unbacked.artifact.kernels import OWNED_KERNELS

    class Module(torch.nn.Module):
        def forward(self, x):
            return positives_doubled(x)

    x = signed(16, 0)
    exported = torch.export.export(Module(), (x,), strict=False)
    with ifx.fx_backend(DEVICE):
        aot = torch._inductor.aot_compile(exported.module(), (x,), options={"fx_wrapper": True})
    other = signed(16, 5)
    with counting_higher_order_calls() as calls:
        got = aot(other)
    assert calls == [], "called, the AOT module dispatches no higher-order operator"
    assert same(got[0] if isinstance(got, (list, tuple)) else got, positives_doubled(other))
    with counting_higher_order_calls() as calls:
        aot.forward(other)
    assert "triton_kernel_wrapper_mutation" in calls, "forward is the graph's own code"

    tuners = [kernel.tuner for kernel in aot.meta[OWNED_KERNELS].triton.values()]
    assert tuners, "the program compiles to Triton kernels"
    assert [tuner.inductor_meta.get("store_cubin") for tuner in tuners] == [False] * len(tuners)
    if DEVICE == "cuda" and inductor_config.use_static_triton_launcher:
        kinds = {type(r).__name__ for tuner in tuners for r in _compat.compile_results(tuner)}
        assert kinds == {"StaticTritonCompileResult"}, kinds
    # The C++ wrapper keeps upstream's config; an FX wrapper keeps the user's choice.
    with ifx.fx_backend(DEVICE):
        assert compile_fx.get_cpp_wrapper_config()["triton.store_cubin"] is True
        with inductor_config.patch(fx_wrapper=True):
            assert compile_fx.get_cpp_wrapper_config()["triton.store_cubin"] is False
            with inductor_config.patch({"triton.store_cubin": True}):
                assert compile_fx.get_cpp_wrapper_config()["triton.store_cubin"] is True
