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
import io
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
