# Owner(s): ["module: inductor"]
"""``ifx.compile``: an artifact for inference, called directly, that checks its inputs,
and ``ifx.save``/``ifx.load``; the AOT module, called, runs through the lowered runner.

Every check names the argument it refuses. What the contract refuses at compile
time (graph breaks, updates of inputs, outputs that alias inputs) says why.
"""

from __future__ import annotations

import collections
import copy
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
        (lambda x: x.reshape(4, 4), r"args\[0\]: .* with 1 dimensions, got .* with 2 dimensions"),
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
    with pytest.raises(ifx.InputError, match="the artifact takes 1 argument; got 2"):
        artifact(other["x"], other["y"])
    # Where the structure departs, in words.
    with pytest.raises(
        ifx.InputError, match=r"args\[0\] is a dict with keys \['x'\]; .* keys \['x', 'y'\]"
    ):
        artifact({"x": other["x"]})
    with pytest.raises(ifx.InputError, match=r"args\[0\]\['y'\] is a list of 1; .* one value"):
        artifact({"x": other["x"], "y": [other["y"]]})


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
    with pytest.raises(ifx.CompileError, match=r"updates its input args\[0\] in place"):
        ifx.compile(updates_its_input, x.clone())
    with pytest.raises(ifx.CompileError, match="output 0 .* a view of an input"):
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


# Inference: modules whose parameters require grad, as every nn.Module's do.


class PositiveFeatures(torch.nn.Module):
    """Linear layers, then a data-dependent step: the README's model."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)
        )

    def forward(self, x):
        y = self.layers(x)
        return y[y > 0]


def rows(n, seed, width=6):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, width, generator=g).to(DEVICE)


def seeded(make):
    """A module whose parameters are the same whatever ran before."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make().to(DEVICE)


def eager_inference(module, *args):
    with torch.no_grad():
        return module(*args)


def test_a_linear_module_runs_with_its_parameters_requiring_grad():
    linear = seeded(lambda: torch.nn.Linear(6, 5))
    assert linear.weight.requires_grad
    artifact = ifx.compile(linear, rows(4, 0))
    out = artifact(rows(4, 1))  # grad mode on, as a user's script has it
    assert same(out, eager_inference(linear, rows(4, 1)))
    assert not out.requires_grad


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_linear_layers_then_a_data_dependent_step(dynamic):
    model = seeded(PositiveFeatures)
    artifact = ifx.compile(model, rows(5, 0), dynamic=dynamic)
    lengths = set()
    sizes = [(1, 5), (2, 5), (3, 9)] if dynamic else [(seed, 5) for seed in range(1, 6)]
    for seed, n in sizes:
        x = rows(n, seed)
        got = artifact(x)
        assert same(got, eager_inference(model, x), rtol=1e-4, atol=1e-5)
        lengths.add(got.shape[0])
    assert len(lengths) > 1, "the inputs select different numbers of values"


@pytest.mark.parametrize(
    "module",
    [
        lambda: torch.nn.Conv1d(2, 3, 3),
        lambda: torch.nn.Bilinear(4, 4, 3),
    ],
    ids=["conv1d", "bilinear"],
)
def test_modules_with_a_product_of_matrices_run(module):
    module = seeded(module)
    if isinstance(module, torch.nn.Conv1d):
        make = lambda seed: (rows(2, seed, 9).reshape(1, 2, 9),)  # noqa: E731
    else:
        make = lambda seed: (rows(5, seed, 4), rows(5, seed + 7, 4))  # noqa: E731

    def program(*args):
        y = module(*args)
        return y[y > 0] * 2

    artifact = ifx.compile(program, *make(0))
    lengths = set()
    for seed in (1, 2, 3):
        got, want = artifact(*make(seed)), eager_inference(program, *make(seed))
        assert same(got, want, rtol=1e-4, atol=1e-5)
        lengths.add(got.shape[0])
    assert len(lengths) > 1


def test_a_matmul_of_a_parameter_that_requires_grad():
    weight = torch.nn.Parameter(rows(6, 9, 3))

    def program(x):
        y = x @ weight
        return y[y > 0]

    artifact = ifx.compile(program, rows(4, 0))
    for seed in (1, 2):
        assert same(artifact(rows(4, seed)), eager_inference(program, rows(4, seed)), 1e-4, 1e-5)


# Outputs keep eager's structure.


def test_a_repeated_output_is_returned_twice_as_eager_does():
    def twice(x):
        y = x[x > 0]
        return y, y

    artifact = ifx.compile(twice, signed(16, 0))
    for seed in (1, 2):
        x = signed(16, seed)
        got = artifact(x)
        assert len(got) == 2 and got[0] is got[1]
        assert same(got, twice(x))


def test_an_argument_returned_is_the_argument_itself():
    def with_input(x):
        return x[x > 0] * 2, x

    artifact = ifx.compile(with_input, signed(16, 0))
    for seed in (1, 2):
        x = signed(16, seed)
        got = artifact(x)
        assert got[1] is x
        assert same(got, with_input(x))


def test_a_program_that_computes_nothing_returns_its_arguments():
    artifact = ifx.compile(lambda x: x, signed(16, 0))
    x = signed(16, 1)
    assert artifact(x) is x
    pair = ifx.compile(lambda x, y: (y, x), signed(4, 0), signed(4, 1))
    a, b = signed(4, 2), signed(4, 3)
    got = pair(a, b)
    assert got[0] is b and got[1] is a


def test_a_closed_over_tensor_returned_is_read_when_called():
    def closing_over(w):
        def program(x):
            return x[x > 0] * 2, w

        def rebind(value):
            nonlocal w
            w = value

        return program, rebind

    program, rebind = closing_over(torch.arange(3.0, device=DEVICE))
    artifact = ifx.compile(program, signed(16, 0))
    got = artifact(signed(16, 1))
    assert same(got, program(signed(16, 1)))
    rebind(torch.ones(2, device=DEVICE))
    got = artifact(signed(16, 2))
    assert got[1] is program(signed(16, 2))[1]
    assert same(got, program(signed(16, 2)))


def test_dicts_none_and_python_numbers_in_the_output():
    w = torch.arange(3.0, device=DEVICE)

    def program(x):
        kept = x[x > 0]
        return {"kept": kept, "again": kept, "x": x, "w": w, "none": None, "n": 3, "f": 2.5}

    artifact = ifx.compile(program, signed(16, 0))
    for seed in (1, 2):
        x = signed(16, seed)
        got, want = artifact(x), program(x)
        assert list(got) == list(want)
        assert same(got, want)
        assert got["x"] is x and got["w"] is w and got["none"] is None
        assert type(got["n"]) is int and type(got["f"]) is float


def test_a_python_number_the_program_computes_is_refused_with_why():
    def count(x):
        kept = x[x > 0]
        return kept, kept.shape[0]

    with pytest.raises(ifx.CompileError, match="returns a Python int that it computes.*tensor"):
        ifx.compile(count, signed(16, 0))


# A refusal changes nothing of the caller's.


def test_a_refused_update_of_an_input_leaves_the_input_as_it_was():
    def bump(x):
        x.add_(1)
        return x[x > 1] * 2

    x = torch.ones(4, device=DEVICE)
    with pytest.raises(ifx.CompileError, match=r"updates its input args\[0\] in place"):
        ifx.compile(bump, x)
    assert torch.equal(x, torch.ones(4, device=DEVICE))


def test_a_refused_update_of_a_buffer_leaves_the_module_as_it_was():
    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x):
            self.calls.add_(1)
            return x[x > 0]

    module = Counting().to(DEVICE)
    with pytest.raises(ifx.CompileError, match="updates its state calls in place"):
        ifx.compile(module, signed(16, 0))
    assert module.calls.item() == 0


# Sizes: bounded .item() values, 0 and 1 with dynamic=True.


@pytest.mark.parametrize(
    "take",
    [lambda x, n: x.topk(n).values * 2, lambda x, n: x[:n] * 2],
    ids=["topk", "slice"],
)
def test_an_item_bounded_by_an_input_size_compiles_with_dynamic(take):
    def program(x, k):
        n = k.item()
        torch._check(n >= 1)
        torch._check(n <= x.shape[0])
        return take(x, n)

    k = lambda n: torch.tensor(n, device=DEVICE)  # noqa: E731
    artifact = ifx.compile(program, signed(8, 0), k(3), dynamic=True)
    for size, n in [(8, 5), (12, 2), (5, 5)]:
        x = signed(size, size)
        assert same(artifact(x, k(n)), program(x, k(n)))


@pytest.mark.parametrize("example_size", [16, 1, 0])
def test_dynamic_runs_sizes_zero_and_one(example_size):
    try:
        artifact = ifx.compile(positives_doubled, signed(example_size, 0), dynamic=True)
    except ifx.CompileError as e:
        # Inductor of torch 2.10 cannot pick a kernel config for a size hint of 0.
        assert example_size == 0, e
        assert "compile with examples of sizes 2 or more" in str(e)
        return
    for n in (0, 1, 2, 16):
        x = signed(n, n)
        assert same(artifact(x), positives_doubled(x)), n


def causal_attention(q, k, v):
    """Attention with a causal mask, as transformers' eager attention computes it."""
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    causal = torch.ones(q.shape[-2], q.shape[-2], dtype=torch.bool, device=q.device).tril()
    probabilities = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    return probabilities @ v


def heads(batch, tokens, seed):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, 2, tokens, 8, generator=g).to(DEVICE) for _ in range(3))


def test_a_size_the_trace_fixes_is_compiled_static():
    """The batch of 1 stays a symbol with ``dynamic=True``, yet the trace guards it
    equal to 1 (the artifact takes no other batch): compiled as a symbol, Inductor
    splits the softmax into a reduction and a pointwise kernel over the scores (3 ms
    more on an H100 for a model's 4096 tokens). Traced again with that size static,
    the softmax is one kernel, and the artifact takes the same inputs as before."""
    q, k, v = heads(1, 48, 0)
    artifact = ifx.compile(causal_attention, q, k, v, dynamic=True)
    hop = torch.ops.higher_order.triton_kernel_wrapper_mutation
    assert len(artifact.graph.graph.find_nodes(op="call_function", target=hop)) == 1
    # Traced on aliases of the caller's tensors: a result that is an argument is the
    # caller's tensor.
    returning_q = ifx.compile(lambda q, k, v: (causal_attention(q, k, v), q), q, k, v, dynamic=True)
    assert returning_q(q, k, v)[1] is q
    torch.testing.assert_close(artifact(*heads(1, 48, 1)), causal_attention(*heads(1, 48, 1)))
    for tokens, seed in ((7, 2), (64, 3)):
        args = heads(1, tokens, seed)
        if torch.__version__.startswith("2.10"):
            # Inductor of torch 2.10 fixes the tokens too, with or without this.
            with pytest.raises(ifx.InputError, match=r"size\(\)\[2\] == 48"):
                artifact(*args)
        else:
            torch.testing.assert_close(artifact(*args), causal_attention(*args))
    with pytest.raises(
        ifx.InputError, match=r"args\[\d\]\.size\(\)\[0\] == 1, .* size \(2, 2, 48, 8\)"
    ):
        artifact(*heads(2, 48, 4))


# The self-check: the whole structure, at dtype-aware tolerances.


def blockwise_cumsum(x, block=1024):
    """A float32 cumsum that sums by blocks, as a parallel scan does."""
    parts = x.split(block)
    sums = torch.stack([p.sum() for p in parts]).cumsum(0)
    starts = torch.cat([sums.new_zeros(1), sums[:-1]])
    return torch.cat([p.cumsum(0) + s for p, s in zip(parts, starts)])


def test_the_self_check_accepts_the_summation_order_of_a_long_scan():
    from inductor_fx_unbacked.integration import self_check

    half = torch.ones(1 << 19, device=DEVICE)
    x = signed(1 << 20, 0) + torch.cat([half, -half])  # up to 5e5, then back near 0
    eager = x.double().cumsum(0).float()  # CPU accumulates in double
    blocked = blockwise_cumsum(x)
    assert not torch.allclose(blocked, eager, rtol=1.3e-6, atol=1e-5), "orders differ"
    self_check.check(blocked, eager, accumulates=True, inputs=[x])
    with pytest.raises(ifx.CompileError, match="differs from eager's: largest difference"):
        self_check.check(blocked, eager, accumulates=False, inputs=[x])
    wrong = blocked.clone()
    wrong[1000] += 0.01 * eager.abs().max()  # a wrong value, not an order
    with pytest.raises(ifx.CompileError, match="beyond the accumulation bound"):
        self_check.check(wrong, eager, accumulates=True, inputs=[x])


def test_the_self_check_takes_the_tolerance_of_the_inputs_narrower_dtype():
    """Fuzzer seed 1796310348 on the H200: ``take(x, idx[m]).sqrt().float().mean()``
    of float16 ``x``; eager rounds the square root to float16, Inductor does not."""
    from inductor_fx_unbacked.integration import self_check

    x = torch.tensor([2.1], dtype=torch.float16)
    eager = x.sqrt().float().mean()
    inductor = x.float().sqrt().mean()
    assert not torch.allclose(inductor, eager, rtol=1.3e-6, atol=1e-5)
    self_check.check(inductor, eager, accumulates=False, inputs=[x])
    with pytest.raises(ifx.CompileError, match="beyond the rounding bound"):
        self_check.check(inductor + 0.01, eager, accumulates=False, inputs=[x])
    with pytest.raises(ifx.CompileError, match=r"largest difference .* \(rtol"):
        self_check.check(inductor, eager, accumulates=False, inputs=[x.float()])


def sqrt_product_of_kept(x, k):
    """Fuzzer seed 1799402445 on the H200: a float16 product of 22 square roots.
    Eager rounds each root to float16 and the errors compound through the product,
    beyond any bound on eager's result alone; Inductor keeps the roots in float32."""
    return x[torch.where(k > 0)].sqrt().prod()


SQRT_PRODUCT_EXAMPLE = (
    torch.tensor(
        [-1.0, 2.94, 2.31, 2.15, 1.76, 2.83, 1.59, 0.96, 1.32, -0.0, 1.8, 2.83, 0.12, 0.45]
        + [0.11, 2.55, 2.4, 1.32, 0.59, 0.14, 2.78, 2.99, 1.77, 1.31, float("nan")],
        dtype=torch.float16,
    ),
    torch.tensor(
        [float("nan"), 1.97, 1.13, 0.63, 0.46, 0.61, 1.77, 0.43, 1.38, -1.0, 2.28, 2.2]
        + [1.38, 0.68, 0.44, 2.25, 1.63, 2.88, 2.0, 1.01, 2.06, 1.2, 1.13, 2.19]
    ),
)


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_float16_product_of_roots_compiles_against_eager_in_float32(dynamic):
    from inductor_fx_unbacked.integration import self_check

    x, k = (t.to(DEVICE) for t in SQRT_PRODUCT_EXAMPLE)
    artifact = ifx.compile(sqrt_product_of_kept, x, k, dynamic=dynamic)
    for n in (24, 9):  # 22 and 8 kept
        if dynamic:
            args = (x[: n + 1], k[:n])
        else:
            args = (x, k.where(torch.arange(24, device=DEVICE) < n, -1.0))
        got, want = artifact(*args), sqrt_product_of_kept(*args)
        reference = self_check.run_in_float32(sqrt_product_of_kept, args).half()
        torch.testing.assert_close(got, reference, rtol=1e-3, atol=1e-5)
        torch.testing.assert_close(got, want, rtol=0.02, atol=1e-5)


def test_the_float32_reference_accepts_only_what_matches_it():
    from inductor_fx_unbacked.integration import self_check

    x, k = SQRT_PRODUCT_EXAMPLE
    eager = sqrt_product_of_kept(x, k)
    reference = lambda: self_check.run_in_float32(sqrt_product_of_kept, (x, k))  # noqa: E731
    inductor = reference().half()
    with pytest.raises(ifx.CompileError, match="beyond the accumulation bound"):
        self_check.check(inductor, eager, accumulates=True, inputs=[x, k])
    self_check.check(inductor, eager, accumulates=True, inputs=[x, k], in_float32=reference)
    with pytest.raises(ifx.CompileError, match="beyond the accumulation bound"):
        self_check.check(
            inductor * 1.01, eager, accumulates=True, inputs=[x, k], in_float32=reference
        )
    # Nothing of half precision: no reference, eager's result alone.
    assert self_check.run_in_float32(sqrt_product_of_kept, (x.float(), k)) is None


def test_the_float32_reference_widens_a_half_precision_module_on_a_copy():
    from inductor_fx_unbacked.integration import self_check

    module = torch.nn.Linear(4, 3).to(DEVICE, torch.bfloat16)
    x = signed(8, 0).view(2, 4).bfloat16()
    got = self_check.run_in_float32(module, (x,))
    assert module.weight.dtype == torch.bfloat16 and got.dtype == torch.float32
    torch.testing.assert_close(
        got, torch.nn.functional.linear(x.float(), module.weight.float(), module.bias.float())
    )


class TopOneRouter(torch.nn.Module):
    """Each token to the better of two experts by a bfloat16 router: where two
    logits nearly tie, rounding decides, as in a half-precision MoE model."""

    def __init__(self, width, routes=False):
        super().__init__()
        g = torch.Generator().manual_seed(11)
        self.router = torch.nn.Linear(width, 2, bias=False)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(2))
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g) / width**0.5
        self.routes = routes

    def forward(self, x):
        choice = self.router(x).argmax(-1, keepdim=True)
        out = torch.where(choice == 0, self.experts[0](x), self.experts[1](x))
        return (out, choice) if self.routes else out


def routed_example(routes=False):
    """The router in bfloat16, 4096 tokens; eager's result, and the float64 program's
    routing applied with bfloat16 experts (an artifact whose rounding tips the near
    ties the exact way)."""
    module = TopOneRouter(16, routes).to(DEVICE, torch.bfloat16)
    x = torch.randn(4096, 16, generator=torch.Generator().manual_seed(12)).to(DEVICE)
    x = x.bfloat16()
    eager = module(x)
    exact_route = module.router.double()(x.double()).argmax(-1, keepdim=True)
    module.router.bfloat16()
    out = torch.where(exact_route == 0, module.experts[0](x), module.experts[1](x))
    got = (out, exact_route) if routes else out
    return module, x, eager, got


def test_the_float64_reference_accepts_routing_that_tips_otherwise_than_eagers():
    from inductor_fx_unbacked.integration import self_check

    module, x, eager, got = routed_example()
    # Some tokens go elsewhere than eager sends them: whole rows differ.
    flipped = (got - eager).abs().amax(-1) > 0.1
    assert 0 < int(flipped.sum()) < 50
    reference = lambda: self_check.run_in_float64(module, (x,))  # noqa: E731
    with pytest.raises(ifx.CompileError, match="differs from eager's"):
        self_check.check(got, eager, accumulates=True, inputs=[x])
    self_check.check(got, eager, accumulates=True, inputs=[x], in_float64=reference)
    # Farther from float64 than eager is: refused.
    garbage = (torch.arange(4096, device=DEVICE) % 40 == 0)[:, None]
    spikes = got.clone()
    spikes[0, :2] = 1000.0
    # 5% off; a row in 40 zeroed; two elements far off (fewer misses than eager's).
    for worse in (got * 1.05, got.where(~garbage, 0.0), spikes):
        with pytest.raises(ifx.CompileError, match="differs from eager's"):
            self_check.check(worse, eager, accumulates=True, inputs=[x], in_float64=reference)


def test_the_float64_reference_still_asks_integer_results_to_equal_eagers():
    from inductor_fx_unbacked.integration import self_check

    module, x, eager, got = routed_example(routes=True)
    assert not torch.equal(got[1], eager[1])  # the routes differ where rounding tipped
    reference = lambda: self_check.run_in_float64(module, (x,))  # noqa: E731
    with pytest.raises(ifx.CompileError, match="differs from eager's"):
        self_check.check(got, eager, accumulates=True, inputs=[x], in_float64=reference)


def test_the_float64_reference_widens_a_copy_and_only_for_half_precision():
    from inductor_fx_unbacked.integration import self_check

    module = torch.nn.Linear(4, 3).to(DEVICE, torch.bfloat16)
    x = signed(8, 0).view(2, 4)
    got = self_check.run_in_float64(module, (x.bfloat16(),))
    assert module.weight.dtype == torch.bfloat16 and got.dtype == torch.float64
    torch.testing.assert_close(
        got,
        torch.nn.functional.linear(
            x.bfloat16().double(), module.weight.double(), module.bias.double()
        ),
    )
    # Nothing of half precision: no reference.
    assert self_check.run_in_float64(module.float(), (x.float(),)) is None


class GroupedTopOneRouter(TopOneRouter):
    """``TopOneRouter`` with its experts as transformers runs them by default: the
    tokens sorted by expert, one grouped matrix product (``torch._grouped_mm``, which
    has no float64 kernel), and put back in order."""

    def __init__(self, width):
        super().__init__(width)
        self.weight = torch.nn.Parameter(
            torch.stack([expert.weight.T for expert in self.experts]).contiguous()
        )

    def forward(self, x):
        choice = self.router(x).argmax(-1)
        order = choice.argsort(stable=True)
        offs = torch.bincount(choice, minlength=2).cumsum(0).to(torch.int32)
        out = torch._grouped_mm(x[order], self.weight, offs=offs)
        return out[order.argsort()]


def grouped_by(weight, offs, **kwargs):
    """A program of one grouped product by ``weight`` (held in its closure)."""
    return lambda x: torch._grouped_mm(x, weight, offs=offs, **kwargs)


def test_the_float64_reference_computes_grouped_products_by_their_definition():
    from inductor_fx_unbacked.integration import self_check

    g = torch.Generator().manual_seed(3)
    a2, b2 = (torch.randn(16, 8, generator=g).to(DEVICE) for _ in range(2))
    a3, b3 = (torch.randn(3, 8, 8, generator=g).to(DEVICE) for _ in range(2))
    offs = torch.tensor([3, 3, 16], dtype=torch.int32, device=DEVICE)  # group 1 empty
    wide = lambda t: t.bfloat16().double()  # noqa: E731
    cases = {
        "rows against each matrix": (a2, b3, offs),
        "each matrix against columns": (a3, b2.T.contiguous(), offs),
        "the contracted dimension": (a2.T.contiguous(), b2, offs),
        "batch by batch": (a3, b3, None),
    }
    for name, (a, b, o) in cases.items():
        program = grouped_by(b.bfloat16(), o)
        got = self_check.run_in_float64(program, (a.bfloat16(),))
        assert got is not None and got.dtype == torch.float64, name
        if o is None:
            want = wide(a) @ wide(b)
        elif b.dim() == 3:
            want = torch.cat(
                [wide(a[s:e]) @ wide(b[i]) for i, (s, e) in enumerate([(0, 3), (3, 3), (3, 16)])]
            )
        elif a.dim() == 3:
            want = torch.cat(
                [
                    wide(a[i]) @ wide(b[:, s:e])
                    for i, (s, e) in enumerate([(0, 3), (3, 3), (3, 16)])
                ],
                1,
            )
        else:
            want = torch.stack(
                [wide(a[:, s:e]) @ wide(b[s:e]) for s, e in [(0, 3), (3, 3), (3, 16)]]
            )
        torch.testing.assert_close(got, want, msg=name)
        # The bfloat16 kernel agrees with the definition at its own precision. CUDA's
        # asserts on the device where these offsets split the columns or the
        # contracted dimension (H100, torch 2.11): rows and batches only there.
        if DEVICE == "cpu" or o is None or b.dim() == 3:
            torch.testing.assert_close(program(a.bfloat16()).double(), want, rtol=0.02, atol=0.1)
    # A bias: not computed by definition, no reference (the other references decide).
    biased = grouped_by(b3.bfloat16(), offs, bias=b2[:3].bfloat16())
    assert self_check.run_in_float64(biased, (a2.bfloat16(),)) is None


def test_the_float64_reference_accepts_grouped_experts_routed_otherwise_than_eager():
    # As transformers' bfloat16 MoE blocks run on a GPU: the experts one grouped product.
    from inductor_fx_unbacked.integration import self_check

    module = GroupedTopOneRouter(16).to(DEVICE, torch.bfloat16)
    x = torch.randn(4096, 16, generator=torch.Generator().manual_seed(12)).to(DEVICE)
    x = x.bfloat16()
    eager = module(x)
    exact_route = module.router.double()(x.double()).argmax(-1, keepdim=True)
    module.router.bfloat16()
    experts = [x @ module.weight[i] for i in range(2)]
    got = torch.where(exact_route == 0, *experts)
    flipped = (got - eager).abs().amax(-1) > 0.1
    assert 0 < int(flipped.sum()) < 50
    reference = lambda: self_check.run_in_float64(module, (x,))  # noqa: E731
    assert reference() is not None
    with pytest.raises(ifx.CompileError, match="differs from eager's"):
        self_check.check(got, eager, accumulates=True, inputs=[x])
    self_check.check(got, eager, accumulates=True, inputs=[x], in_float64=reference)
    with pytest.raises(ifx.CompileError, match="differs from eager's"):
        self_check.check(got * 1.05, eager, accumulates=True, inputs=[x], in_float64=reference)


#: A module a program reaches as a global (set by the test that uses it).
GLOBAL_ROUTER = None


def routed_by_the_global(x):
    return GLOBAL_ROUTER(x)


def test_the_references_widen_copies_of_the_modules_a_program_holds(monkeypatch):
    # As users write it: a closure over a model, a global one, a bound method.
    from inductor_fx_unbacked.integration import self_check

    module = TopOneRouter(16).to(DEVICE, torch.bfloat16)
    monkeypatch.setattr(sys.modules[__name__], "GLOBAL_ROUTER", module)
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(13)).to(DEVICE)
    wide = copy.deepcopy(module).double()
    expected = wide(x.double())
    programs = {
        "closure": lambda t: module(t),
        "global": routed_by_the_global,
        "bound method": module.forward,
    }
    for name, program in programs.items():
        got = self_check.run_in_float64(program, (x.bfloat16(),))
        assert got is not None and got.dtype == torch.float64, name
        torch.testing.assert_close(got, wide(x.bfloat16().double()), msg=name)
        in_float32 = self_check.run_in_float32(program, (x.bfloat16(),))
        assert in_float32.dtype == torch.float32, name
        # Float inputs too: the module's state alone is of half precision.
        assert self_check.run_in_float64(program, (x,)).dtype == torch.float64, name
    torch.testing.assert_close(self_check.run_in_float64(programs["closure"], (x,)), expected)
    assert all(p.dtype == torch.bfloat16 for p in module.parameters())
    assert GLOBAL_ROUTER is module


def test_the_self_check_takes_bfloat16s_tolerance_and_compares_every_leaf():
    from inductor_fx_unbacked.integration import self_check

    mean = torch.tensor(0.7930, dtype=torch.bfloat16)
    ulp_apart = mean + torch.finfo(torch.bfloat16).eps * mean
    assert not torch.equal(mean, ulp_apart)
    self_check.check(ulp_apart, mean, accumulates=False, inputs=[])
    with pytest.raises(ifx.CompileError, match="returns .* where eager returns"):
        self_check.check((mean,), (mean, mean), accumulates=False, inputs=[])
    with pytest.raises(ifx.CompileError, match=r"result\[1\] on the example differs"):
        self_check.check((mean, 2), (mean, 3), accumulates=False, inputs=[])


def test_a_bfloat16_mean_of_a_long_selection_compiles():
    def mean_of_positives(x):
        return x[x > 0].mean()

    example = signed(6000, 0).bfloat16()
    artifact = ifx.compile(mean_of_positives, example)
    for seed in (1, 2):
        x = signed(6000, seed).bfloat16()
        torch.testing.assert_close(artifact(x), mean_of_positives(x))


def test_a_scan_of_a_repeated_selection_compiles():
    def scan(x, repeats):
        return torch.repeat_interleave(x, repeats).cumsum(0)

    g = torch.Generator().manual_seed(0)
    repeats = [torch.randint(0, 4, (20000,), generator=g).to(DEVICE) for _ in range(2)]
    artifact = ifx.compile(scan, signed(20000, 0), repeats[0])
    x = signed(20000, 1)
    got, want = artifact(x, repeats[1]), scan(x, repeats[1])
    assert got.shape == want.shape and got.shape != scan(signed(20000, 0), repeats[0]).shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


# The differential fuzzer's findings, kept.


def test_a_linear_layer_over_selected_rows_beside_nan_and_inf():
    """Fuzzer finding: ``Linear(x[k > 0]).sum()`` raised addmm's out= error (parameters
    that require grad); the masked-out row holds NaN and inf."""
    nan, inf = float("nan"), float("inf")
    linear = torch.nn.Linear(2, 2).to(DEVICE)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[0.5, -0.25], [1.0, 0.75]]))
        linear.bias.copy_(torch.tensor([0.1, -0.2]))

    def program(x, k):
        return linear(x[k > 0]).sum()

    x = torch.tensor([[1.0, 2.0], [nan, inf], [0.5, 0.5]], device=DEVICE)
    keeps = [torch.tensor(k, device=DEVICE) for k in ([1.0, -1.0, 1.0], [-1.0, -1.0, 1.0])]
    artifact = ifx.compile(program, x, keeps[0])
    for k in keeps:
        torch.testing.assert_close(artifact(x, k), eager_inference(program, x, k))


def test_a_bfloat16_log_softmax_gather_of_labelled_rows():
    """Fuzzer finding: the self-check refused a bf16 result one ulp from eager's
    (it compared at float32's tolerance); padding labels out of range."""

    def program(logits, labels):
        m = (labels >= 0) & (labels < 2)
        return logits[m].log_softmax(-1).gather(1, labels[m][:, None])

    g = torch.Generator().manual_seed(9)
    cases = [
        (torch.randn(7, 2, generator=g).bfloat16().to(DEVICE), torch.tensor(labels).to(DEVICE))
        for labels in ([-100, -1, 1, -1000, 0, -100, 10**12], [0, 1, 0, -1, 1, -1000, 0])
    ]
    artifact = ifx.compile(program, *cases[0])
    for logits, labels in cases:
        # Inductor computes in float32 and rounds once, closer to the exact result
        # than eager's bfloat16 steps (4 ulps apart here).
        want = program(logits.float(), labels).bfloat16()
        torch.testing.assert_close(artifact(logits, labels), want)


def test_a_bfloat16_log_softmax_near_zero_passes_the_self_check():
    """Fuzzer finding (seed 17): a log-softmax near 0 is off by a bfloat16 step of
    its log-sum-exp (eager rounds it, Inductor does not), 0.003 where the result's
    own tolerance allowed 3e-5."""

    def program(logits, labels):
        m = (labels >= 0) & (labels < 3)
        return logits[m].log_softmax(-1).gather(1, labels[m][:, None])

    logits = torch.tensor(
        [-2.17, 0.31, -2.16, 1.75, -1.82, 2.3, 0.2, 1.81, 1.11, -1.01, -2.26]
        + [1.29, -2.58, -0.54, 0.04, 2.15, 0.84, 0.6, 1.1, -0.55, 0.04],
        dtype=torch.bfloat16,
        device=DEVICE,
    ).reshape(7, 3)
    labels = torch.tensor([1, 0, 1, 1, 2, 0, 2], device=DEVICE)
    artifact = ifx.compile(program, logits, labels)
    want = program(logits.float(), labels).bfloat16()
    torch.testing.assert_close(artifact(logits, labels), want)


def test_a_cond_of_slices_with_dynamic_runs_or_names_sizes_zero_and_one():
    """Inductor of torch 2.10 cannot compile this with sizes 0 and 1 symbolic: the
    artifact is compiled with them fixed, and refuses them saying what to do."""

    def sliced(x):
        return torch.cond(x.sum() > 0, lambda x: x[1:] * 2, lambda x: x[2:] + 1, (x,))

    artifact = ifx.compile(sliced, signed(16, 0), dynamic=True)
    for n in (16, 9, 5):
        for seed in (1, 2):
            x = signed(n, seed)
            assert same(artifact(x), sliced(x))
    for n in (0, 1, 2):
        x = signed(n, 3)
        try:
            got = artifact(x)
        except ifx.InputError as e:
            assert "smaller sizes compile only as fixed sizes for this program" in str(e), e
        else:
            assert same(got, sliced(x))
