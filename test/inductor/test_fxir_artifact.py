# Owner(s): ["module: inductor"]
"""The FX graph and the compiled artifact as products: they pickle and load by value,
in this process and another, and ``ifx.compile``'s artifact is called directly.

``GraphModule``'s own pickling re-traces ``forward`` on load, which bakes the result
of every call that does not read the graph's inputs (allocations, ``nonzero`` of a
fresh buffer) in as a constant: a graph pickled that way returns what it computed
when pickled. Every test here calls what came back on an input whose
data-dependent sizes differ from the example's, against eager.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tiers
import torch
from programs import CORPUS, fresh_copy, run, xfail_at_declared_limit
from test_fxir_layouts import recording_calls, same_layout_copy

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.programs import same

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).parents[2]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def nonzero_program(x):
    return torch.nonzero(x > 0) * 2 + 1


def signed(values):
    return torch.tensor(values, dtype=torch.float32, device=DEVICE)


EXAMPLE = signed([-1, 2, -3, 4, 0.5, -6, 7, -8])
#: The same size, other data-dependent sizes (five positives where the example has four).
OTHER = signed([1, -2, 3, 4, -5, 6, -7, 8])


def by_pickle(obj):
    return pickle.loads(pickle.dumps(obj))


def by_torch_save(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


WAYS = {
    "pickle": by_pickle,
    "torch.save": by_torch_save,
    "deepcopy": copy.deepcopy,
    "copy": copy.copy,
}


class Module(torch.nn.Module):
    def forward(self, x):
        return nonzero_program(x)


def captured():
    return ifx.capture_fx_graphs(nonzero_program, EXAMPLE, fullgraph=True).graphs[-1]


def recorded():
    torch._dynamo.reset()
    with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
        torch.compile(fresh_copy(nonzero_program), fullgraph=True, dynamic=False)(EXAMPLE)
    return graphs[-1]


def aot_module():
    exported = torch.export.export(Module(), (EXAMPLE,), strict=False)
    with ifx.fx_backend(DEVICE):
        return torch._inductor.aot_compile(
            exported.module(), (EXAMPLE,), options={"fx_wrapper": True}
        )


def direct():
    return ifx.compile(nonzero_program, EXAMPLE)


KINDS = {"captured": captured, "recorded": recorded, "aot": aot_module, "ifx.compile": direct}


def result(obj, x):
    """What a graph (its outputs in a list or a tuple) or an artifact returns, as a tensor."""
    out = obj(x)
    return out[0] if isinstance(out, (list, tuple)) else out


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("kind", KINDS)
def test_what_comes_back_computes_what_eager_computes(kind, way):
    original = KINDS[kind]()
    again = WAYS[way](original)
    assert same(result(again, OTHER), nonzero_program(OTHER))
    assert same(result(original, OTHER), nonzero_program(OTHER))
    if kind != "ifx.compile":
        assert again.code == original.code, "the same graph, node for node"


@pytest.mark.parametrize("program", tiers.programs(CORPUS))
def test_every_corpus_programs_graph_pickles_by_value(program):
    """Each graph a corpus program compiles to, pickled and loaded, computes what the
    graph computed on every call's arguments (each call's data-dependent sizes)."""
    inputs = program.inputs(DEVICE)
    torch._dynamo.reset()
    try:
        with ifx.fx_backend(DEVICE), recording_calls() as calls:
            compiled = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=True)
            for args in inputs:
                run(program, compiled, args)
    except Exception as fx_error:
        xfail_at_declared_limit(program, "the FX path", fx_error)
        raise
    assert calls, "no graph of the FX backend was called"
    loaded = {}
    for call in calls:
        if id(call.gm) not in loaded:
            loaded[id(call.gm)] = by_pickle(call.gm)
            assert loaded[id(call.gm)].code == call.gm.code
        got = loaded[id(call.gm)](*[same_layout_copy(a) for a in call.args])
        assert same(got, call.result, **TOLERANCE), program.name


def test_a_new_process_loads_every_kind_after_the_original_is_gone(tmp_path):
    """Pickles of each kind, loaded in a fresh process (nothing compiled there, the
    originals gone), computing what eager computes on other data-dependent sizes."""
    for kind, make in KINDS.items():
        (tmp_path / f"{kind}.pkl").write_bytes(pickle.dumps(make()))
    torch.save(OTHER, tmp_path / "other.pt")
    script = textwrap.dedent(
        f"""
        import gc, pickle, torch
        other = torch.load({str(tmp_path / "other.pt")!r})
        want = torch.nonzero(other > 0) * 2 + 1
        for kind in {list(KINDS)!r}:
            loaded = pickle.loads(open({str(tmp_path)!r} + "/" + kind + ".pkl", "rb").read())
            gc.collect()
            out = loaded(other)
            out = out[0] if isinstance(out, (list, tuple)) else out
            assert torch.equal(out, want), (kind, out, want)
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if DEVICE == "cpu":
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "ok"


# ifx.save's file: a header read and checked before anything in it is unpickled.


def saved_file(tmp_path):
    path = tmp_path / "artifact.ifx"
    ifx.save(direct(), path)
    return path


def split_file(path):
    from inductor_fx_unbacked.integration import saving

    data = path.read_bytes()
    start = len(saving._MAGIC) + 4
    length = int.from_bytes(data[len(saving._MAGIC) : start], "big")
    return data[:start], json.loads(data[start : start + length]), data[start + length :]


def write_file(path, header, payload):
    from inductor_fx_unbacked.integration import saving

    encoded = json.dumps(header).encode()
    path.write_bytes(saving._MAGIC + len(encoded).to_bytes(4, "big") + encoded + payload)


class RunsWhenUnpickled:
    """A payload that would leave a mark if anything unpickled it."""

    def __init__(self, mark):
        self.mark = mark

    def __reduce__(self):
        return (Path.touch, (Path(self.mark),))


def test_the_header_names_the_versions_and_loads_back(tmp_path):
    path = saved_file(tmp_path)
    _, header, _ = split_file(path)
    assert header["file_format"] == 2 and header["kind"] == "compiled"
    assert header["torch"] == torch.__version__ and header["package"] == ifx.__version__
    assert {"triton", "artifact_format", "sha256"} <= set(header)
    assert same(result(ifx.load(path), OTHER), nonzero_program(OTHER))


def test_a_file_of_other_versions_is_refused_before_its_payload_is_unpickled(tmp_path):
    path = saved_file(tmp_path)
    _, header, _ = split_file(path)
    mark = tmp_path / "unpickled"
    payload = pickle.dumps(RunsWhenUnpickled(str(mark)))
    write_file(path, {**header, "torch": "2.9.0", "sha256": None}, payload)
    with pytest.raises(
        ifx.LoadError, match=r"saved with .*torch 2.9.0 .* this process has .*torch"
    ):
        ifx.load(path)
    assert not mark.exists(), "the payload was unpickled"


def test_a_damaged_payload_is_refused_before_it_is_unpickled(tmp_path):
    path = saved_file(tmp_path)
    prefix, header, payload = split_file(path)
    mark = tmp_path / "unpickled"
    write_file(path, header, pickle.dumps(RunsWhenUnpickled(str(mark))))
    with pytest.raises(ifx.LoadError, match="is damaged .*: save it again"):
        ifx.load(path)
    assert not mark.exists()
    path.write_bytes(path.read_bytes()[: len(prefix) + 5])  # cut inside the header
    with pytest.raises(ifx.LoadError, match="is damaged"):
        ifx.load(path)
    garbage = payload[: len(payload) // 2]
    write_file(path, {**header, "sha256": hashlib.sha256(garbage).hexdigest()}, garbage)
    with pytest.raises(ifx.LoadError, match="its payload cannot be loaded .*: save it again"):
        ifx.load(path)


@pytest.mark.parametrize(
    "content",
    [
        lambda mark: pickle.dumps({"weights": 1}),
        lambda mark: b"\x00\x01 not a pickle at all",
        lambda mark: b"",
        lambda mark: pickle.dumps({"header": RunsWhenUnpickled(mark), "payload": b""}),
    ],
    ids=["another pickle", "bytes", "empty", "a pickle that runs code"],
)
def test_a_foreign_file_is_refused_without_running_it(tmp_path, content):
    path, mark = tmp_path / "foreign.ifx", tmp_path / "unpickled"
    path.write_bytes(content(str(mark)))
    with pytest.raises(ifx.LoadError, match="not a file that ifx.save wrote"):
        ifx.load(path)
    assert not mark.exists()


def test_a_file_of_the_first_format_still_loads(tmp_path):
    """Format 1 was a pickle of the header and the payload; its header is read
    without running anything, then checked as the current one is."""
    from inductor_fx_unbacked.artifact import store

    path = tmp_path / "format1.ifx"
    payload = pickle.dumps(direct())
    header = {"inductor_fx_unbacked": 1, "kind": "compiled", "versions": store.versions()}
    path.write_bytes(pickle.dumps({"header": header, "payload": payload}))
    assert same(result(ifx.load(path), OTHER), nonzero_program(OTHER))
    header["versions"] = {**header["versions"], "triton": "0.0"}
    path.write_bytes(pickle.dumps({"header": header, "payload": payload}))
    with pytest.raises(ifx.LoadError, match=r"Triton 0.0 .*compile it again here"):
        ifx.load(path)


def test_loading_warns_of_nothing(tmp_path):
    """No warning from the package's own pickles (a deprecated TreeSpec class) nor
    the kernels' modules (no CPU backend: the interpreter needs none), in a fresh
    process that only loads."""
    path = saved_file(tmp_path)
    torch.save(OTHER, tmp_path / "other.pt")
    script = textwrap.dedent(
        f"""
        import warnings
        warnings.simplefilter("error")
        import torch, inductor_fx_unbacked as ifx
        loaded = ifx.load({str(path)!r})
        other = torch.load({str(tmp_path / "other.pt")!r})
        assert torch.equal(loaded(other), torch.nonzero(other > 0) * 2 + 1)
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if DEVICE == "cpu":
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "ok"
