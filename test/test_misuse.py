"""Misuse gets an error that says what is wrong."""

import os
import subprocess
import sys

import pytest
import torch

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_interpreter = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="CPU mode needs TRITON_INTERPRET=1"
)


@pytest.fixture(autouse=True)
def fresh_state():
    torch._dynamo.reset()
    yield
    ifx.disable()


def test_capture_of_nothing_callable():
    with pytest.raises(TypeError, match="needs a function or module to compile, not None"):
        ifx.capture_fx_graphs(None, torch.ones(3))


def test_capture_of_a_function_without_tensors():
    with pytest.raises(RuntimeError, match="its arguments hold no tensor"):
        ifx.capture_fx_graphs(lambda n: n * 2, 3, device=DEVICE, fullgraph=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_capture_of_tensors_on_another_device():
    with pytest.raises(RuntimeError, match="its tensors are on cpu, not cuda"):
        ifx.capture_fx_graphs(lambda x: x * 2, torch.ones(3), device="cuda", fullgraph=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_capture_for_cuda_without_cuda():
    with pytest.raises(RuntimeError, match="has no CUDA device"):
        ifx.capture_fx_graphs(lambda x: x * 2, torch.ones(3), device="cuda", fullgraph=True)


@needs_interpreter
@pytest.mark.parametrize(
    "program",
    [lambda x: x.nonzero() * 2, lambda x: x[x > 0] + 1],
    ids=["nonzero", "boolean_mask"],
)
def test_capture_split_by_dynamo_warns_that_no_symbol_is_defined(program):
    x = torch.tensor([1.0, -2.0, 3.0, 0.0])
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False):
        with pytest.warns(ifx.NoUnbackedSymbolWarning) as record:
            captured = ifx.capture_fx_graphs(program, x, device="cpu")
    assert torch.equal(captured.outputs, program(x))
    (warning,) = [w for w in record if issubclass(w.category, ifx.NoUnbackedSymbolWarning)]
    message = str(warning.message)
    assert "defines no unbacked symbol: Dynamo split the function" in message
    assert "fullgraph=True" in message
    assert "capture_dynamic_output_shape_ops = True" in message


@needs_interpreter
def test_capture_of_a_program_without_data_dependent_sizes_does_not_warn(recwarn):
    ifx.capture_fx_graphs(lambda x: x * 2, torch.ones(3), device="cpu")
    assert not [w for w in recwarn if issubclass(w.category, ifx.NoUnbackedSymbolWarning)]


def nonzero_times_two(x):
    return x.nonzero() * 2


def no_symbol_warnings(record):
    return [w for w in record if issubclass(w.category, ifx.NoUnbackedSymbolWarning)]


@needs_interpreter
def test_fx_backend_warns_once_when_graph_breaks_leave_no_symbol():
    inputs = [torch.tensor([1.0, -2.0, 3.0, 0.0]), torch.tensor([0.0, 5.0])]
    compiled = torch.compile(nonzero_times_two)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False):
        with pytest.warns(ifx.NoUnbackedSymbolWarning) as record:
            with ifx.fx_backend("cpu"), ifx.recording_graphs() as graphs:
                outputs = [compiled(x) for x in inputs]
    for x, output in zip(inputs, outputs):
        assert torch.equal(output, nonzero_times_two(x))
    # Dynamo ran nonzero eagerly: the graph the backend got multiplies a plain input.
    assert graphs and not any("unbacked_symbol" in n.meta for gm in graphs for n in gm.graph.nodes)
    (warning,) = no_symbol_warnings(record)
    message = str(warning.message)
    assert message.startswith(
        "torch.compile inside fx_backend('cpu') defines no unbacked symbol: Dynamo split the "
        "function at a graph break (Dynamic shape operator)"
    )
    assert "capture_dynamic_output_shape_ops = True" in message
    assert warning.filename == __file__  # the block's own line, not the package's


@needs_interpreter
def test_fx_backend_does_not_warn_when_a_graph_defines_a_symbol(recwarn):
    inputs = [torch.tensor([1.0, -2.0, 3.0, 0.0]), torch.tensor([0.0, 5.0])]
    compiled = torch.compile(nonzero_times_two)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        with ifx.fx_backend("cpu"), ifx.recording_graphs() as graphs:
            outputs = [compiled(x) for x in inputs]
    for x, output in zip(inputs, outputs):
        assert torch.equal(output, nonzero_times_two(x))
    symbols = [
        n.meta["unbacked_symbol"]
        for gm in graphs
        for n in gm.graph.nodes
        if "unbacked_symbol" in n.meta
    ]
    assert symbols
    assert not no_symbol_warnings(recwarn)


@needs_interpreter
def test_fx_backend_does_not_warn_for_a_graph_break_unrelated_to_data(recwarn):
    def doubled_with_a_break(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y + 1

    x = torch.ones(3)
    with ifx.fx_backend("cpu"), ifx.recording_graphs() as graphs:
        assert torch.equal(torch.compile(doubled_with_a_break)(x), doubled_with_a_break(x))
    assert len(graphs) == 2
    assert not no_symbol_warnings(recwarn)


@needs_interpreter
def test_capture_inside_fx_backend_warns_once_as_the_capture():
    x = torch.tensor([1.0, -2.0, 3.0, 0.0])
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=False):
        with pytest.warns(ifx.NoUnbackedSymbolWarning) as record:
            with ifx.fx_backend("cpu"):
                ifx.capture_fx_graphs(nonzero_times_two, x, device="cpu")
    (warning,) = no_symbol_warnings(record)
    assert str(warning.message).startswith("capture_fx_graphs(nonzero_times_two) defines no")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--calls", "0"], "argument --calls: must be at least 1, not 0"),
        (["demo", "--device", "tpu"], "argument --device: invalid choice"),
    ],
)
def test_demo_argument_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_demo_on_cuda_without_cuda(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--device", "cuda"])
    assert "--device cuda: this machine has no CUDA device" in capsys.readouterr().err


def test_disabling_the_overlay_inside_fx_backend_names_the_cause():
    with ifx.fx_backend(DEVICE):
        ifx.disable()
        compiled = torch.compile(lambda x: torch.nonzero(x > 0) * 2, fullgraph=True)
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            with pytest.raises(Exception, match=r"overlay was disabled inside fx_backend"):
                compiled(torch.randn(8, device=DEVICE))


def test_interpret_set_after_triton_was_imported_is_refused():
    """Triton jits its own helpers (tl.sum, ...) when it is imported; set later, the
    interpreter cannot call them, so CPU mode says so instead of failing in a kernel."""
    program = (
        "import os, triton, inductor_fx_unbacked as ifx\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "with ifx.fx_backend('cpu'):\n"
        "    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 1
    assert "InterpreterNotEnabledError: TRITON_INTERPRET=1 was set after Triton" in result.stderr


# ifx.compile as a new user meets it: every message names the fix.


def positives_doubled(x):
    return x[x > 0] * 2


def signed(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


@needs_interpreter
def test_a_tensor_and_a_float_at_a_scripts_top_level_are_read_when_called(tmp_path):
    """Module-level values are the program's globals: read on each call, as Dynamo
    reads them (it made them graph inputs), never baked into the artifact."""
    script = tmp_path / "script.py"
    script.write_text(
        "import torch, inductor_fx_unbacked as ifx\n"
        "W = torch.arange(4.0)\n"
        "T = 0.5\n"
        "def program(x):\n"
        "    y = x * W\n"
        "    return y[y > T]\n"
        "x = torch.tensor([1.0, -2.0, 3.0, 0.25])\n"
        "artifact = ifx.compile(program, x, dynamic=True)\n"
        "print('same:', torch.equal(artifact(x), program(x)))\n"
        "W, T = torch.full((4,), 2.0), 0.4\n"
        "print('same after:', torch.equal(artifact(x), program(x)), artifact(x).numel())\n"
    )
    env = {**os.environ, "PYTHONPATH": REPO}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert "same: True" in done.stdout, done.stderr[-2000:]
    assert "same after: True 3" in done.stdout, done.stdout + done.stderr[-2000:]


def test_a_transposed_input_to_a_dynamic_artifact_names_contiguous():
    artifact = ifx.compile(positives_doubled, signed(4, 5), dynamic=True)
    transposed = signed(5, 4, seed=1).t()
    with pytest.raises(ifx.InputError, match=r"pass args\[0\]\.contiguous\(\)"):
        artifact(transposed)
    assert torch.equal(artifact(transposed.contiguous()), positives_doubled(transposed))


def test_a_new_size_of_a_static_artifact_names_dynamic():
    artifact = ifx.compile(positives_doubled, signed(8))
    with pytest.raises(ifx.InputError, match="compile it with dynamic=True for other sizes"):
        artifact(signed(9, seed=1))


def test_a_tensor_of_another_dtype_says_both_in_full():
    artifact = ifx.compile(positives_doubled, signed(4, 5))
    with pytest.raises(
        ifx.InputError,
        match=r"args\[0\]: expected a tensor on \S+ of torch.float32 with 2 dimensions, got a "
        r"tensor on \S+ of torch.float64 with 2 dimensions$",
    ):
        artifact(signed(4, 5, seed=1).double())


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize(
    "value, message",
    [
        (2.7, r"args\[1\] is a float \(2.7\); the artifact was compiled for a Python int there$"),
        (
            torch.tensor(4),
            r"args\[1\] is a tensor \(torch.int64\[\]\); the artifact was compiled for a Python "
            r"int there \(pass args\[1\].item\(\)\)",
        ),
        (True, r"args\[1\] is a bool"),
    ],
    ids=["float", "tensor", "bool"],
)
def test_an_int_argument_of_another_type_is_refused_naming_it(dynamic, value, message):
    def scaled(x, n):
        return x[x > 0] * n

    artifact = ifx.compile(scaled, signed(8), 2, dynamic=dynamic)
    assert torch.equal(artifact(signed(8, seed=1), 2), scaled(signed(8, seed=1), 2))
    with pytest.raises(ifx.InputError, match=message):
        artifact(signed(8, seed=1), value)


def test_a_data_dependent_branch_is_a_compile_error_that_says_why():
    def branches(x):
        if (x > 0).sum().item() > 3:
            return x * 2
        return x * 3

    x = signed(8)
    with pytest.raises(
        ifx.CompileError, match="data-dependent expression.*torch.where.*torch.cond"
    ):
        ifx.compile(branches, x)


def test_what_dynamo_cannot_trace_is_a_compile_error():
    def opens_a_file(x):
        open(os.devnull).close()
        return x * 2

    with pytest.raises(ifx.CompileError):
        ifx.compile(opens_a_file, signed(8))
