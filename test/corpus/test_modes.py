# Owner(s): ["module: inductor"]
"""A representative third of the corpus under the Inductor modes users pick.

Each program runs through the FX backend in a mode, against eager and against
Inductor's Python wrapper compiled in the same mode, on inputs whose
data-dependent sizes differ. The modes: ``max-autotune-no-cudagraphs``,
``reduce-overhead`` (the FX backend compiles without graph partitions, so it may
fail only where the Python wrapper fails in the default mode),
``coordinate_descent_tuning``, ``nan_asserts``, and ``freezing`` in inference,
where the program runs inside a module whose parameter freezing turns into a
constant of the graph.

Every program of the third runs under ``IFX_MODES_PER_PROGRAM`` modes, picked in
rotation so that each mode meets programs of several families (default: 1 on
CPU, where Triton's interpreter makes compiling slow, 2 on a GPU; 5 runs every
pair). On a GPU, ``reduce-overhead`` meets every program of the third. On CPU,
where Inductor partitions nothing, the programs that crashed under
``reduce-overhead`` run with every node taken for a GPU node, so that Inductor
partitions their graphs as it would on a GPU.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import unittest.mock
from collections.abc import Callable
from typing import Any

import pytest
import tiers
import torch
from programs import CORPUS, CorpusProgram, expect_inductor_limit, fresh_copy, one_line, run
from torch._inductor import compile_fx, config, scheduler
from torch.utils._pytree import tree_map_only

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.demo.programs import same
from inductor_fx_unbacked.integration.reference import python_wrapper_reference
from inductor_fx_unbacked.runner import cuda_graphs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def releasing_cuda_graphs():
    """The CUDA graphs that a test's runners captured are released after it: kept,
    they would take the room that a later test's captures need."""
    yield
    cuda_graphs.release_all()


#: A third of the corpus, every family of ``programs.py`` represented.
THIRD = [
    # nonzero, argwhere, one-argument where
    "nonzero_1d",
    "where_one_argument",
    # boolean masks
    "mask_2d",
    "row_mask",
    "mask_sum",
    # unique
    "unique_sorted",
    "unique_counts",
    # repeat_interleave
    "repeat_interleave_tensor",
    # split from .tolist()
    "split_with_sizes_tolist",
    # .item() as sizes and arguments
    "arange_item",
    "narrow_length_item",
    "topk_item",
    # floats from .item()
    "threshold_float_item",
    # chained unbacked sizes
    "mask_then_nonzero",
    # torch.cond
    "cond_masked_branch",
    "cond_on_item",
    # while_loop
    "while_loop_then_mask",
    # custom ops with new_dynamic_size
    "custom_op_divide_by_key",
    # backward through masked ops
    "masked_mse_backward",
    # realistic compositions
    "correct_predictions",
    "detection_postprocess",
    "token_dropping",
]
PROGRAMS = {p.name: p for p in CORPUS if p.name in THIRD}
assert list(PROGRAMS) == [n for n in (p.name for p in CORPUS) if n in THIRD], "unknown name"
assert len(PROGRAMS) == len(THIRD)


@dataclasses.dataclass(frozen=True, eq=False)
class Mode:
    """How a mode is asked for: ``torch.compile`` arguments and Inductor config."""

    name: str
    compile_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    inductor_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Inference with a frozen module parameter.
    frozen: bool = False


DEFAULT = Mode("default")
REDUCE_OVERHEAD = Mode("reduce-overhead", compile_kwargs={"mode": "reduce-overhead"})
MODES = [
    Mode("max-autotune-no-cudagraphs", compile_kwargs={"mode": "max-autotune-no-cudagraphs"}),
    REDUCE_OVERHEAD,
    Mode("coordinate-descent", inductor_config={"coordinate_descent_tuning": True}),
    Mode("nan-asserts", inductor_config={"nan_asserts": True}),
    # Without CPU weight packing: Inductor registers its packing patterns at the
    # process's first freezing compile that packs, and applies them to every later
    # freezing compile whatever its config; packing a linear whose batch is an
    # unbacked size guards on it (Inductor's limit, its Python wrapper's too), so
    # a test here would break test_fxir_defects' frozen linear in the same worker.
    Mode(
        "freezing",
        inductor_config={"freezing": True, "cpp.weight_prepack": False},
        frozen=True,
    ),
]
if DEVICE == "cpu":
    # Triton's interpreter benchmarks by running each candidate; keep the
    # search to a handful of configs, matmuls on ATen.
    CHEAP_AUTOTUNE = {"max_autotune_gemm_backends": "ATEN", "coordinate_descent_search_radius": 1}
    MODES = [
        dataclasses.replace(m, inductor_config={**m.inductor_config, **CHEAP_AUTOTUNE})
        if m.name in ("max-autotune-no-cudagraphs", "coordinate-descent")
        else m
        for m in MODES
    ]


def pairs() -> list[tuple[Mode, str]]:
    per_program = int(os.environ.get("IFX_MODES_PER_PROGRAM", 1 if DEVICE == "cpu" else 2))
    selected = []
    for index, name in enumerate(THIRD):
        for shift in range(min(per_program, len(MODES))):
            mode = MODES[(index + shift) % len(MODES)]
            if mode.frozen and PROGRAMS[name].backward:
                # Freezing is for inference; a training program takes the next mode.
                mode = MODES[(index + shift + 1) % len(MODES)]
            if (mode, name) not in selected:
                selected.append((mode, name))
    if DEVICE == "cuda":
        selected += [(REDUCE_OVERHEAD, n) for n in THIRD if (REDUCE_OVERHEAD, n) not in selected]
    return sorted(selected, key=lambda p: (MODES.index(p[0]), THIRD.index(p[1])))


class WithParameter(torch.nn.Module):
    """The program, and a second output that reads a parameter, which freezing
    turns into a constant of the graph."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn
        # Inductor writes a tensor of up to 8 values into the kernel; 16 it reads.
        weight = torch.rand(16, generator=torch.Generator().manual_seed(0)) + 0.5
        self.weight = torch.nn.Parameter(weight.to(DEVICE))

    def forward(self, *args: Any) -> Any:
        return self.fn(*args), self.weight * args[0].sum().to(self.weight.dtype)


def program_for(mode: Mode, name: str) -> tuple[Any, Callable[..., Any]]:
    program = PROGRAMS[name]
    fn = fresh_copy(program.fn)
    return program, (WithParameter(fn).eval() if mode.frozen else fn)


def results(
    mode: Mode, program: Any, fn: Callable[..., Any], inputs: list, *, copied: bool = False
) -> list:
    """``fn``'s results on each input; ``copied``: copies taken as each call returns."""
    with config.patch(mode.inductor_config), torch.set_grad_enabled(not mode.frozen):
        if not copied:
            return [run(program, fn, args) for args in inputs]
        return [tree_map_only(torch.Tensor, torch.clone, run(program, fn, args)) for args in inputs]


def compiled(mode: Mode, name: str) -> Callable[..., Any]:
    torch._dynamo.reset()
    _, fn = program_for(mode, name)
    return torch.compile(fn, fullgraph=True, **mode.compile_kwargs)


def python_wrapper_results(mode: Mode, name: str, program: Any, inputs: list) -> Any:
    """The Python wrapper's results in ``mode``, or its own failure."""
    try:
        # On CPU with the CPU mode's Triton kernels: only the wrapper differs.
        # Copied: under reduce-overhead, Inductor's CUDA graph trees reuse a graph's
        # output memory on its next call (their error says to copy what outlives it).
        # The FX runner's outputs outlive the next call uncopied.
        with python_wrapper_reference(DEVICE):
            return results(mode, program, compiled(mode, name), inputs, copied=True)
    except Exception as e:  # noqa: BLE001 - the Python wrapper's own failure
        return e


def tiered_pairs() -> list[Any]:
    """Each mode's first program in the default tier, the others in the full tier."""
    seen: set[str] = set()
    params = []
    for mode, name in pairs():
        marks = pytest.mark.full if mode.name in seen else ()
        seen.add(mode.name)
        params.append(pytest.param(mode, name, id=f"{mode.name}-{name}", marks=marks))
    return params


@pytest.mark.parametrize("mode, name", tiered_pairs())
def test_mode_matches_eager_and_the_python_wrapper(mode, name):
    program, eager = program_for(mode, name)
    inputs = program.inputs(DEVICE)
    expected = results(mode, program, eager, inputs)
    python = python_wrapper_results(mode, name, program, inputs)
    python_error = python if isinstance(python, Exception) else None
    # Frozen constants: the graph runner first, then the lowered runner.
    runners = ["graph", "lowered"] if mode.frozen else ["lowered"]
    for runner in runners:
        try:
            with ifx.fx_backend(DEVICE, runner=runner), ifx.recording_graphs() as graphs:
                actual = results(mode, program, compiled(mode, name), inputs)
        except Exception as fx_error:
            # Under reduce-overhead the FX backend compiles without graph partitions,
            # as in the default mode, so only the reference's failure there excuses it.
            excuse = (
                python_wrapper_results(DEFAULT, name, program, inputs)
                if mode is REDUCE_OVERHEAD
                else python
            )
            excuse_error = excuse if isinstance(excuse, Exception) else None
            expect_inductor_limit(program, f"the FX path ({runner} runner)", fx_error, excuse_error)
            raise
        assert graphs, "nothing was compiled through the FX backend"
        for args, got, want in zip(inputs, actual, expected):
            assert same(got, want, rtol=1e-4, atol=1e-5), (args, got, want)
        if python_error is None:
            for args, got, from_python in zip(inputs, actual, python):
                assert same(got, from_python, rtol=1e-4, atol=1e-5), (args, got, from_python)
        check_graphs(mode, graphs)
    if python_error is not None:
        pytest.xfail(
            "the FX path matches eager; the reference, Inductor's Python wrapper, fails: "
            f"{one_line(python_error)}"
        )


def check_graphs(mode: Mode, graphs: list[torch.fx.GraphModule]) -> None:
    """The mode shows in the FX graphs: frozen constants, NaN checks."""
    if mode.frozen:
        constants = [
            n
            for g in graphs
            for n in g.graph.nodes
            if n.op == "get_attr" and isinstance(getattr(g, n.target), torch.Tensor)
        ]
        assert constants, "freezing left no constant in the FX graph"
    if mode.inductor_config.get("nan_asserts"):
        checks = [
            n
            for g in graphs
            for n in g.graph.nodes
            if n.meta.get("runtime_assert") and "has NaN" in str(n.args)
        ]
        assert checks, "nan_asserts added no NaN check to the FX graph"


@pytest.fixture
def partitioned_as_on_a_gpu():
    """Every scheduler node counts as a GPU node, so that Inductor partitions graphs
    on CPU too (it partitions around nodes that are not)."""
    with unittest.mock.patch.object(scheduler.BaseSchedulerNode, "is_gpu", lambda self: True):
        yield


def plain(x):
    return (x * 2 + 1).abs()


def plain_inputs(device):
    return [(torch.randn(n, device=device),) for n in (9, 12)]


#: The programs that crashed under reduce-overhead with graph partitions, and a
#: program without unbacked symbols.
PARTITIONED = [
    *(PROGRAMS[name] for name in ("nonzero_1d", "where_one_argument", "narrow_length_item")),
    *(PROGRAMS[name] for name in ("topk_item", "detection_postprocess", "token_dropping")),
    CorpusProgram(
        "plain", plain, lambda device: [(torch.randn(n, device=device),) for n in (9, 12)]
    ),
]


@pytest.mark.skipif(DEVICE != "cpu", reason="on a GPU, reduce-overhead runs every program")
@pytest.mark.parametrize(
    "program",
    tiers.tiered(PARTITIONED, lambda p: p.name in ("plain", "nonzero_1d"), lambda p: p.name),
)
def test_reduce_overhead_with_graph_partitions_matches_eager(program, partitioned_as_on_a_gpu):
    inputs = program.inputs(DEVICE)
    expected = [run(program, program.fn, args) for args in inputs]
    torch._dynamo.reset()
    with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
        compiled = torch.compile(fresh_copy(program.fn), fullgraph=True, mode="reduce-overhead")
        actual = [run(program, compiled, args) for args in inputs]
    assert graphs, "nothing was compiled through the FX backend"
    for args, got, want in zip(inputs, actual, expected):
        assert same(got, want, rtol=1e-4, atol=1e-5), (args, got, want)


def test_the_fx_wrapper_turns_graph_partitions_off_and_says_why(caplog):
    """Inductor asks ``maybe_disable_graph_partition`` before it lowers a graph: under
    the FX wrapper the answer is no partitions, and with CUDA graphs asked for, one
    line in the package's log; the Python wrapper keeps upstream's answer."""

    def partitions_inside(cpp_wrapper=False):
        with compile_fx.maybe_disable_graph_partition(cpp_wrapper, False):
            return config.graph_partition

    with config.patch(graph_partition=True, **{"triton.cudagraphs": True}):
        ifx.enable()
        assert partitions_inside(), "the Python wrapper lost its graph partitions"
        with caplog.at_level(logging.INFO, logger="inductor_fx_unbacked"):
            with ifx.fx_backend(DEVICE):
                assert not partitions_inside()
        assert [r.getMessage() for r in caplog.records if "graph partitions" in r.getMessage()]
        ifx.disable()
        assert partitions_inside(), "disable() left graph partitions off"
