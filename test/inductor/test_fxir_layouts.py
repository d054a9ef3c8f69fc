# Owner(s): ["module: inductor"]
"""One meaning for every node: the graph handed out and every runner compute what
eager computes, on inputs of every layout.

Each corpus and benchmark program is compiled once per layout (a graph is
specialised to its example inputs' strides), on inputs that start inside their
storage (``base[3:]``: an offset that is no multiple of 16 bytes, too), that are
strided (every other element, from the second), or that are expanded (a row
repeated by a zero stride). Every call of every graph is then run again, on
copies of its arguments in the same layout, by ``gm.forward``, by the ``"graph"``
runner, by a freshly lowered runner (and on a GPU with CUDA graphs), and each
result must equal the compiled program's, which must equal eager's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any

import pytest
import tiers
import torch
from programs import CORPUS, CorpusProgram, fresh_copy, one_line, run, xfail_at_declared_limit

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked import runner
from inductor_fx_unbacked.demo.programs import PROGRAMS, same
from inductor_fx_unbacked.runner import cuda_graphs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture(autouse=True)
def releasing_cuda_graphs():
    """The CUDA graphs that a test's runners captured are released after it: kept,
    they would take the room that a later test's captures need."""
    yield
    cuda_graphs.release_all()


def in_storage(t: torch.Tensor, offset: int, step: int = 1) -> torch.Tensor:
    """``t``'s values in a tensor that starts ``offset`` elements into its storage, at
    every ``step``-th element of it (strided where ``step`` > 1)."""
    strides = [step * stride for stride in torch.empty(t.shape).stride()]
    storage = torch.zeros(offset + step * max(t.numel(), 1), dtype=t.dtype, device=t.device)
    return storage.as_strided(t.shape, strides, offset).copy_(t)


def expanded(t: torch.Tensor) -> torch.Tensor:
    """A floating tensor's first row repeated by a zero stride: expanded memory."""
    if not t.is_floating_point() or t.dim() == 0 or t.shape[0] < 2:
        return t
    return t[:1].expand_as(t)


LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "offset": lambda t: in_storage(t, offset=3),
    "strided": lambda t: in_storage(t, offset=1, step=2),
    "expanded": expanded,
}


def relayout(layout: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(LAYOUTS[layout](a) if isinstance(a, torch.Tensor) else a for a in args)


def same_layout_copy(t: Any) -> Any:
    """A copy of a tensor with its sizes, strides and storage offset."""
    if not isinstance(t, torch.Tensor):
        return t
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if n > 0)
    start = t.storage_offset()
    storage = torch.empty(start + span, dtype=t.dtype, device=t.device)
    if t.numel():
        # The memory it covers, element for element (an expanded tensor's, once).
        storage[start:].copy_(t.as_strided((span,), (1,), start))
    return storage.as_strided(t.shape, t.stride(), start)


@dataclasses.dataclass
class Call:
    """One call of a compiled graph: copies of its arguments, and what it returned."""

    gm: torch.fx.GraphModule
    args: list[Any]
    result: Any


@contextlib.contextmanager
def recording_calls():
    """Every call of the callables that ``runner.compile_graph`` builds inside."""
    calls: list[Call] = []
    compile_graph = runner.compile_graph

    def recording(gm, runner_name, **options):
        run_graph = compile_graph(gm, runner_name, **options)

        @functools.wraps(run_graph)
        def run_and_record(*args):
            copies = [same_layout_copy(a) for a in args]
            result = run_graph(*args)
            calls.append(Call(gm, copies, torch.utils._pytree.tree_map(same_layout_copy, result)))
            return result

        return run_and_record

    runner.compile_graph = recording
    try:
        yield calls
    finally:
        runner.compile_graph = compile_graph


def benchmark_program(name: str) -> CorpusProgram:
    program = next(p for p in PROGRAMS if p.name == name)
    return CorpusProgram(name, program.fn, lambda d: program.inputs(d, 256))


@torch.library.custom_op("ifx_test::first_positives", mutates_args=())
def first_positives(x: torch.Tensor) -> torch.Tensor:
    """An extern kernel whose output starts inside its storage."""
    return x[x > 0].clone()[1:]


@first_positives.register_fake
def _(x):
    return x.new_empty(torch.library.get_ctx().new_dynamic_size())


def scalar_threshold(x, t):
    return x[x > t] * 2


def of_an_extern_view(x):
    return first_positives(x).reshape(-1, 1) + 1


EXTRA = [
    # A 0-d input, in every layout its storage allows.
    CorpusProgram(
        "scalar_threshold",
        scalar_threshold,
        lambda d: [(torch.randn(12, device=d), torch.tensor(0.2, device=d)) for _ in range(2)],
    ),
    # A view of what an extern kernel returns.
    CorpusProgram(
        "of_an_extern_view",
        of_an_extern_view,
        lambda d: [(torch.randn(n, device=d),) for n in (9, 17)],
    ),
]
PROGRAMS_UNDER_TEST = [
    *CORPUS,
    *(benchmark_program(name) for name in ("P1", "P2", "P3", "P5", "P6", "P7", "P8")),
    *EXTRA,
]
DEFAULT_TIER = tiers.DEFAULT_TIER_PROGRAMS | {"P5", "P7", "of_an_extern_view"}


def cases() -> list[Any]:
    """The default tier's programs with offset inputs in the default tier; the rest in
    the full tier."""
    params = []
    for program in PROGRAMS_UNDER_TEST:
        for layout in LAYOUTS:
            marks = []
            if program.name not in DEFAULT_TIER or layout != "offset":
                marks.append(pytest.mark.full)
            params.append(pytest.param(program, layout, id=f"{program.name}-{layout}", marks=marks))
    return params


@pytest.mark.parametrize("program, layout", cases())
def test_every_runner_computes_what_eager_computes(program, layout):
    inputs = [relayout(layout, args) for args in program.inputs(DEVICE)]
    try:
        expected = [run(program, program.fn, args) for args in inputs]
    except Exception as e:  # noqa: BLE001 - eager's refusal: nothing to compare with
        pytest.skip(f"eager refuses this layout: {one_line(e)}")
    torch._dynamo.reset()
    try:
        with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs, recording_calls() as calls:
            compiled = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=True)
            actual = [run(program, compiled, args) for args in inputs]
    except Exception as fx_error:
        xfail_at_declared_limit(program, "the FX path", fx_error)
        xfail_where_inductor_fails_too(program, inputs, fx_error)
        raise
    assert graphs, "nothing was compiled through the FX backend"
    for args, got, want in zip(inputs, actual, expected):
        assert same(got, want, **TOLERANCE), (layout, args, got, want)
    assert calls, "no graph of the FX backend was called"
    for call in calls:
        runs = {
            "forward": call.gm.forward,
            "graph": runner.compile_graph(call.gm, "graph"),
            "lowered": runner.compile_graph(call.gm, "lowered"),
        }
        if DEVICE == "cuda":
            runs["cuda graphs"] = replayed(
                runner.compile_graph(call.gm, "lowered", cuda_graphs=True)
            )
        for name, run_graph in runs.items():
            got = run_graph(*[same_layout_copy(a) for a in call.args])
            assert same(got, call.result, **TOLERANCE), (name, call.gm.code)


def xfail_where_inductor_fails_too(program: CorpusProgram, inputs: list, fx_error: Exception):
    """xfail where Inductor's own Python wrapper fails this layout with the same error
    (torch 2.10 cannot lower ``select`` by an unbacked index of a strided view: the
    same ``LoweringException``, word for word); else return, and the caller raises.
    The type alone says too little: ``InductorError`` wraps every compile failure."""
    torch._dynamo.reset()
    try:
        compiled = torch.compile(fresh_copy(program.fn), fullgraph=True, dynamic=True)
        for args in inputs:
            run(program, compiled, args)
    except Exception as reference_error:  # noqa: BLE001 - compared below
        if same_failure(fx_error, reference_error):
            pytest.xfail(f"Inductor's Python wrapper fails too: {one_line(reference_error)}")


#: Names that Inductor and Dynamo number per compile (``s7``, ``u0``, ``buf3``,
#: ``arg1_1``, ``i0``), and addresses.
_NUMBERED = re.compile(r"\b([A-Za-z_]+?)\d+(?:_\d+)?\b|0x[0-9a-fA-F]+")


def same_failure(error: Exception, other: Exception) -> bool:
    """Whether two errors say the same thing: the same type and the same message, but
    for the names each compile numbers its own way."""

    def said(e: Exception) -> str:
        return _NUMBERED.sub(lambda m: f"{m.group(1) or '0x'}#", str(e).strip())

    return type(error) is type(other) and said(error) == said(other)


def test_errors_of_one_type_with_other_messages_are_other_failures():
    from torch._inductor.exc import InductorError

    def inductor_error(message: str) -> InductorError:
        return InductorError(NotImplementedError(message), None)

    view = "View\n  target: aten.select.int\n  args[0]: InputBuffer(name='arg1_1')\n  args[2]: u0"
    renumbered = view.replace("u0", "u3").replace("arg1_1", "arg0_1")
    other = "buf2 is not defined"
    assert same_failure(inductor_error(view), inductor_error(renumbered))
    assert not same_failure(inductor_error(view), inductor_error(other))
    assert not same_failure(inductor_error(view), RuntimeError(str(inductor_error(view))))


def replayed(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` called until its stretches capture, then once more (a replay)."""

    def call(*args: Any) -> Any:
        with cuda_graphs.limits(capture_after=1, launches_per_replay=0):
            for _ in range(2):
                compiled(*[same_layout_copy(a) for a in args])
            return compiled(*args)

    return call


def test_a_graph_refuses_an_input_of_another_layout():
    """A graph is specialised to its example inputs' strides: called directly with an
    input of other strides, it raises its input check's error."""
    x = torch.randn(16, device=DEVICE)
    captured = ifx.capture_fx_graphs(lambda x: x[x > 0] * 2, x, fullgraph=True)
    gm = captured.graphs[-1]
    strided = in_storage(x, offset=0, step=2)
    with pytest.raises(Exception, match=r"graph input 0 \(\w+\): expected size"):
        gm(strided)
    # The same strides from another start in the storage are the same layout.
    shifted = in_storage(x, offset=4)
    assert same(gm(shifted), x[x > 0] * 2)
