"""What the FX backend shows through torch's logs: TORCH_LOGS, the output file, TORCH_TRACE."""

import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from torch._inductor.codecache import output_code_log

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.integration import logs as _logging

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
needs_interpreter = pytest.mark.skipif(
    DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1",
    reason="CPU mode needs TRITON_INTERPRET=1",
)
REPO = pathlib.Path(__file__).resolve().parents[1]


def masked(x):
    return x[x > 0] * 2


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def output_code_records(monkeypatch):
    """The messages of torch's ``output_code`` log, switched on as TORCH_LOGS=output_code does."""
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    torch._logging.set_logs(output_code=True)
    records = Records()
    output_code_log.addHandler(records)
    try:
        yield records.messages
    finally:
        output_code_log.removeHandler(records)
        torch._logging.set_logs()


@needs_interpreter
def test_output_code_shows_the_fx_graph_and_a_file_that_exists(
    output_code_records, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        captured = ifx.capture_fx_graphs(masked, torch.tensor([1.0, -2.0, 3.0], device=DEVICE))
    (gm,) = captured.graphs
    (shown,) = [m for m in output_code_records if m.startswith("Output code (FX graph)")]
    # The graph as it is, and the straight-line code that runs it.
    assert gm.code.strip() in shown
    assert "# What runs: inductor_fx_unbacked.runner.straightline.compile_lowered(gm)" in shown
    assert "def lowered_forward(" in shown
    (written,) = [m for m in output_code_records if m.startswith("Output code written to: ")]
    path = pathlib.Path(written.removeprefix("Output code written to: "))
    assert path.is_relative_to(tmp_path)
    assert path.read_text() in shown


@needs_interpreter
def test_output_code_shows_cond_branches_with_the_graph_that_holds_them(output_code_records):
    def branches(x):
        return torch.cond(x.sum() > 0, lambda y: y[1:] * 2, lambda y: y[2:] + 1, (x,))

    captured = ifx.capture_fx_graphs(
        branches, torch.tensor([1.0, -2.0, 3.0], device=DEVICE), fullgraph=True, dynamic=True
    )
    *subgraphs, gm = captured.graphs
    (shown,) = [m for m in output_code_records if m.startswith("Output code (FX graph)")]
    names = [name for name, _ in gm.named_children()]
    assert sorted(names) == ["false_graph_0", "true_graph_0"]
    for name, subgraph in zip(names, (getattr(gm, name) for name in names)):
        assert f"class {name}:\n" in shown
        assert textwrap.indent(subgraph.code.strip(), "    ") in shown
    assert len(subgraphs) == 2


def test_the_package_logger_is_switched_on_by_set_logs(monkeypatch):
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    logger = logging.getLogger("inductor_fx_unbacked.codegen.wrapper_fxir")
    try:
        assert not logger.isEnabledFor(logging.INFO)
        torch._logging.set_logs(modules={_logging.LOG_NAME: logging.INFO})
        assert logger.isEnabledFor(logging.INFO)
        assert not logger.isEnabledFor(logging.DEBUG)
    finally:
        torch._logging.set_logs()
    assert not logger.isEnabledFor(logging.INFO)


PROGRAM = """
import logging
import torch
import inductor_fx_unbacked as ifx

torch._dynamo.config.capture_dynamic_output_shape_ops = True
logging.getLogger("inductor_fx_unbacked.test").info("the package logs at INFO")
device = "cuda" if torch.cuda.is_available() else "cpu"
ifx.capture_fx_graphs(lambda x: x[x > 0] * 2, torch.tensor([1.0, -2.0, 3.0], device=device))
"""


@needs_interpreter
def test_torch_logs_and_torch_trace_in_a_fresh_process(tmp_path):
    """As a user runs it: the environment is read when torch is imported, before the package."""
    trace_dir = tmp_path / "trace"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "TORCH_LOGS": "output_code,inductor_fx_unbacked",
        "TORCH_TRACE": str(trace_dir),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"),
    }
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "the package logs at INFO" in result.stderr
    assert "Output code (FX graph)" in result.stderr
    assert "torch.ops.higher_order.triton_kernel_wrapper_mutation" in result.stderr
    written = result.stderr.split("Output code written to: ")[1].split()[0]
    assert pathlib.Path(written).is_file()
    # The structured trace: one artifact per graph, its payload the code in the file.
    (log_file,) = trace_dir.iterdir()
    artifacts = []
    lines = log_file.read_text().splitlines()
    for index, line in enumerate(lines):
        if line.startswith("\t") or "{" not in line:
            continue  # a payload line, or a line without metadata
        record = json.loads(line[line.index("{") :])
        if record.get("artifact", {}).get("name") == _logging.GRAPH_ARTIFACT:
            payload = []
            for follow in lines[index + 1 :]:
                if not follow.startswith("\t"):
                    break
                payload.append(follow[1:])
            artifacts.append((record["artifact"], "\n".join(payload)))
    ((metadata, payload),) = artifacts
    assert metadata["filename"] == written
    assert payload.strip() == pathlib.Path(written).read_text().strip()


FAILING_TEST = """
import torch
import inductor_fx_unbacked as ifx


def test_compiles_then_fails():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with ifx.fx_backend(device), torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        torch.compile(lambda x: x[x > 0] * 2, fullgraph=True)(torch.ones(4, device=device))
    assert False, "deliberately"
"""


@needs_interpreter
@pytest.mark.full
def test_a_failing_test_reports_no_structured_trace_lines(tmp_path):
    """pytest captures logs of non-propagating loggers; torch's structured trace is one,
    always at DEBUG. The suite's conftest keeps the capture off it."""
    for helper in ("conftest.py", "process_state.py"):
        shutil.copy(REPO / "test" / helper, tmp_path / helper)
    (tmp_path / "test_fails.py").write_text(FAILING_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TRACE", "PYTEST_"))}
    # The package as this suite imports it, installed or not (the GPU machine runs a copy).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_fails.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "AssertionError: deliberately" in result.stdout
    assert "torch.__trace" not in result.stdout
    assert len(result.stdout.splitlines()) < 40, result.stdout
