"""Real-library data-dependent code through the FX backend: the model sweep.

Each case of ``docs/models.md`` is code this project does not control
(transformers' mixture-of-experts models with their per-expert loop,
torchvision's box operations and detection post-processing, torch_geometric's
graph filtering and a small GNN), built from tiny configs in code (no download).
Every case is compiled as users compile it (``torch.compile(fn, dynamic=...)``,
``fullgraph=False``, Dynamo's ``capture_scalar_outputs`` and
``capture_dynamic_output_shape_ops`` on), with ``dynamic`` False and True, twice:
with Inductor's Python wrapper and inside ``fx_backend``. Both are compared with
eager on two inputs whose data-dependent sizes differ (gradients too for the
training steps).

On CPU both compiles use Triton kernels run by Triton's interpreter (the Python
wrapper under ``cpu_backend="triton"``), so the two differ only in the wrapper.
A case whose kernels call a ``libdevice`` function that the CPU mode does not
compute is reported as ``needs GPU`` and not counted as passed.

    python -m benchmarks.models --device cuda --out benchmarks/results/DATE-h200-models.md
    python -m benchmarks.models --device cuda --budget 200 --cases mixtral_forward,...  # in order
    python -m benchmarks.models --device cpu --cases mixtral_moe_block,batched_nms  # a subset
    python -m benchmarks.models --device cpu --quick  # a smoke run: one small case
    # parts run apart (two GPUs, two calls), then one report:
    python -m benchmarks.models --cases A,B --json part1.json; ... --cases C --json part2.json
    python -m benchmarks.models --merge part1.json part2.json --out report.md

The report ends with ``models_cases: <m>``, ``models_python_wrapper_passed: <p>``,
``models_fx_passed: <n>``, ``models_needs_gpu: <g>``,
``models_unbacked_definitions_differ: <d>``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib.util
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from benchmarks import harness

#: The libraries of the sweep, by import name (the ``models`` extra installs them).
LIBRARIES = ("transformers", "torchvision", "torch_geometric")

RTOL = ATOL = 1e-4


def missing_libraries(libraries: Iterable[str] = LIBRARIES) -> list[str]:
    return sorted(name for name in libraries if importlib.util.find_spec(name) is None)


@dataclasses.dataclass
class Built:
    """What a case runs: ``fn(*args)`` on each input; ``parameters`` get gradients
    when the case is a training step (``fn`` then returns a scalar loss)."""

    fn: Callable[..., Any]
    inputs: list[tuple[Any, ...]]
    parameters: list[Any] = dataclasses.field(default_factory=list)
    #: What runs, where the library chose it (transformers' experts implementation).
    description: str = ""
    #: ``fn`` computed in float64 from the same weights and inputs, or None: the
    #: reference of a low-precision case whose discrete choices (an expert's routing)
    #: flip under any other rounding, as torchbench compares such models.
    fp64: Callable[..., Any] | None = None


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    library: str
    build: Callable[[str], Built]
    train: bool = False


# transformers: mixture-of-experts models with the per-expert loop.

#: Tiny config values shared by every architecture (fields a config lacks are ignored).
TINY = dict(
    vocab_size=64,
    hidden_size=16,
    intermediate_size=32,
    moe_intermediate_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
    max_position_embeddings=64,
    hidden_act="relu",
    tie_word_embeddings=False,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)

#: Architecture -> (config class, causal-LM class, module path, config overrides).
MOE_ARCHITECTURES = {
    "mixtral": (
        "MixtralConfig",
        "MixtralForCausalLM",
        dict(num_local_experts=4, num_experts_per_tok=2),
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        dict(num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[]),
    ),
    "olmoe": (
        "OlmoeConfig",
        "OlmoeForCausalLM",
        dict(num_experts=4, num_experts_per_tok=2),
    ),
}


class ExpertsImplementationUnavailable(RuntimeError):
    """The installed transformers cannot run the experts implementation asked for."""


def tiny_moe_model(
    architecture: str,
    device: str,
    *,
    config: dict[str, Any] | None = None,
    experts: str = "eager",
    dtype: Any = None,
    attention: str = "eager",
) -> Any:
    """The architecture's causal LM from :data:`TINY` (``config`` overrides fields), its
    experts run by ``experts``: ``"eager"`` is transformers' per-expert loop,
    ``"grouped_mm"`` its grouped matrix products (``config._experts_implementation``,
    set where the model class has ``set_experts_implementation``, transformers 5)."""
    import torch
    import transformers

    config_name, model_name, overrides = MOE_ARCHITECTURES[architecture]
    config_class = getattr(transformers, config_name)
    fields = {**TINY, **overrides, **(config or {})}
    model_config = config_class(**{k: v for k, v in fields.items() if hasattr(config_class(), k)})
    torch.manual_seed(0)
    model_class = getattr(transformers, model_name)
    kwargs: dict[str, Any] = {"attn_implementation": attention}
    if hasattr(model_class, "set_experts_implementation"):
        kwargs["experts_implementation"] = experts
    elif experts != "eager":
        raise ExpertsImplementationUnavailable(
            f"transformers {transformers.__version__} has one experts implementation (the "
            f"per-expert loop): {model_name} has no set_experts_implementation for {experts!r}"
        )
    model = model_class._from_config(model_config, **kwargs)
    return model.to(device) if dtype is None else model.to(device, dtype)


def experts_description(model: Any) -> str:
    """Which experts implementation the model runs, as its config says."""
    chosen = getattr(model.config, "_experts_implementation", None)
    return f"experts_implementation={chosen!r}" if chosen else "the per-expert loop"


def token_inputs(
    device: str, lengths: tuple[int, ...] = (5, 9), vocab: int = 64
) -> list[tuple[Any, ...]]:
    """Prompts of ``lengths`` tokens: the experts each token picks differ."""
    import torch

    g = torch.Generator().manual_seed(1)
    return [(torch.randint(3, vocab, (1, n), generator=g).to(device),) for n in lengths]


def moe_forward(
    architecture: str,
    *,
    lengths: tuple[int, ...] = (5, 9),
    config: dict[str, Any] | None = None,
    experts: str = "eager",
    dtype: Any = None,
) -> Callable[[str], Built]:
    def build(device: str) -> Built:
        model = tiny_moe_model(
            architecture, device, config=config, experts=experts, dtype=dtype
        ).eval()
        inputs = token_inputs(device, lengths, model.config.vocab_size)

        @functools.cache
        def model64() -> Any:
            import torch

            # The per-expert loop: grouped products have no float64 kernel.
            reference = tiny_moe_model(
                architecture, device, config=config, experts="eager", dtype=torch.float64
            ).eval()
            reference.load_state_dict(model.state_dict())
            return reference

        return Built(
            lambda ids: model(ids).logits,
            inputs,
            description=experts_description(model),
            fp64=lambda ids: model64()(ids).logits,
        )

    return build


def moe_training_step(architecture: str) -> Callable[[str], Built]:
    def build(device: str) -> Built:
        model = tiny_moe_model(architecture, device).train()

        def step(ids):
            return model(ids, labels=ids).loss

        return Built(step, token_inputs(device), list(model.parameters()))

    return build


def moe_block(
    architecture: str,
    train: bool = False,
    *,
    tokens: tuple[int, ...] = (6, 11),
    config: dict[str, Any] | None = None,
    experts: str = "eager",
    dtype: Any = None,
) -> Callable[[str], Built]:
    """The sparse MoE block of the first layer alone: router, top-k, the experts (a
    training step: the block's output summed, backward to its weights); an input of
    each of ``tokens`` tokens, in the model's dtype."""

    def build(device: str) -> Built:
        import torch

        model = tiny_moe_model(architecture, device, config=config, experts=experts, dtype=dtype)
        block = model.model.layers[0].mlp.train(train)
        g = torch.Generator().manual_seed(2)
        hidden_size = model.config.hidden_size
        inputs = [
            (torch.randn(1, n, hidden_size, generator=g).to(device, model.dtype),) for n in tokens
        ]
        description = experts_description(model)
        if not train:
            return Built(lambda hidden: block(hidden), inputs, description=description)
        return Built(
            lambda hidden: block(hidden).sum(), inputs, list(block.parameters()), description
        )

    return build


def block_name(architecture: str) -> str:
    return architecture if architecture.endswith("moe") else f"{architecture}_moe"


# torchvision: box operations and detection post-processing.


def random_boxes(n: int, size: float, generator: Any, *, whole_pixels: bool = False) -> Any:
    import torch

    corner = torch.rand(n, 2, generator=generator) * size
    extent = torch.rand(n, 2, generator=generator) * size / 2
    boxes = torch.cat([corner, corner + extent], dim=1)
    return boxes.round() if whole_pixels else boxes


def batched_nms(
    device: str, *, boxes: tuple[int, ...] = (12, 20), classes: int = 3, image: float = 32
) -> Built:
    """torchvision's ``batched_nms`` over boxes of whole pixels. On a GPU, up to 25k
    boxes, it offsets each class's boxes by ``class * (max + 1)`` (the coordinate
    trick); a compiled kernel fuses that product and sum into one rounding where eager
    rounds twice, which moves fractional boxes by an ulp of the offset and flips the
    IoUs that lie at the threshold (one box kept more or less, by Inductor's Python
    wrapper as by this package). Whole pixels keep every offset box exact."""
    import torch
    from torchvision.ops import batched_nms as nms

    g = torch.Generator().manual_seed(3)
    inputs = [
        (
            random_boxes(n, image, g, whole_pixels=True).to(device),
            torch.rand(n, generator=g).to(device),
            torch.randint(0, classes, (n,), generator=g).to(device),
        )
        for n in boxes
    ]
    return Built(lambda boxes, scores, idxs: nms(boxes, scores, idxs, 0.3), inputs)


def box_filtering(
    device: str, *, boxes: tuple[int, ...] = (10, 16), image: int = 24, extent: float = 32
) -> Built:
    """Clip to the image, drop small and low-scoring boxes (the usual post-processing)."""
    import torch
    from torchvision.ops import boxes as box_ops

    def fn(boxes, scores):
        boxes = box_ops.clip_boxes_to_image(boxes, (image, image))
        keep = box_ops.remove_small_boxes(boxes, 2.0)
        boxes, scores = boxes[keep], scores[keep]
        keep = torch.where(scores > 0.3)[0]
        return boxes[keep], scores[keep]

    g = torch.Generator().manual_seed(4)
    inputs = [
        (random_boxes(n, extent, g).to(device), torch.rand(n, generator=g).to(device))
        for n in boxes
    ]
    return Built(fn, inputs)


def detection_postprocess(
    device: str,
    *,
    proposals: tuple[int, ...] = (8, 14),
    classes: int = 3,
    image: int = 32,
    score_thresh: float = 0.2,
    detections: int = 10,
) -> Built:
    """Faster R-CNN's box head post-processing in eval: decode, softmax, score
    threshold, small boxes, per-class NMS, top detections (``classes`` with the
    background)."""
    import torch
    from torchvision.models.detection.roi_heads import RoIHeads

    heads = RoIHeads(
        box_roi_pool=None,
        box_head=None,
        box_predictor=None,
        fg_iou_thresh=0.5,
        bg_iou_thresh=0.5,
        batch_size_per_image=16,
        positive_fraction=0.25,
        bbox_reg_weights=None,
        score_thresh=score_thresh,
        nms_thresh=0.5,
        detections_per_img=detections,
    ).eval()
    g = torch.Generator().manual_seed(5)

    def one_input(n: int) -> tuple[Any, ...]:
        return (
            torch.randn(n, classes, generator=g).to(device),
            (torch.randn(n, classes * 4, generator=g) * 0.1).to(device),
            random_boxes(n, image, g).to(device),
        )

    def fn(class_logits, box_regression, proposals):
        return heads.postprocess_detections(
            class_logits, box_regression, [proposals], [(image, image)]
        )

    return Built(fn, [one_input(n) for n in proposals])


def rpn_filter_proposals(
    device: str,
    *,
    anchors: tuple[int, ...] = (12, 24),
    image: int = 28,
    extent: float = 32,
    pre_nms: int = 20,
    post_nms: int = 10,
) -> Built:
    """The region proposal network's proposal filtering: top-k per level, sigmoid,
    clipping, small boxes, score threshold, NMS per level."""
    import torch
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.rpn import RegionProposalNetwork, RPNHead

    rpn = RegionProposalNetwork(
        AnchorGenerator(((8,),), ((1.0,),)),
        RPNHead(4, 1),
        fg_iou_thresh=0.7,
        bg_iou_thresh=0.3,
        batch_size_per_image=16,
        positive_fraction=0.5,
        pre_nms_top_n={"training": pre_nms, "testing": pre_nms},
        post_nms_top_n={"training": post_nms, "testing": post_nms},
        nms_thresh=0.5,
        score_thresh=0.3,
    ).eval()
    g = torch.Generator().manual_seed(6)

    def one_input(n: int) -> tuple[Any, ...]:
        return (random_boxes(n, extent, g).to(device), torch.randn(n, generator=g).to(device))

    def fn(proposals, objectness):
        boxes, scores = rpn.filter_proposals(
            proposals.unsqueeze(0), objectness, [(image, image)], [proposals.shape[0]]
        )
        return boxes[0], scores[0]

    return Built(fn, [one_input(n) for n in anchors])


# torch_geometric: graph filtering and a small GNN on a masked graph.


def random_graph(nodes: int, edges: int, generator: Any, device: str) -> Any:
    import torch

    edge_index = torch.randint(0, nodes, (2, edges), generator=generator)
    edge_index[:, : edges // 4] = edge_index[0, : edges // 4]  # some self-loops
    return edge_index.to(device)


def pyg_subgraph(
    device: str, *, graphs: tuple[tuple[int, int], ...] = ((10, 30), (16, 48))
) -> Built:
    """``subgraph`` of the nodes a mask keeps, relabelled; an input per (nodes, edges)."""
    import torch
    from torch_geometric.utils import subgraph

    g = torch.Generator().manual_seed(7)

    def one_input(nodes: int, edges: int) -> tuple[Any, ...]:
        keep = torch.rand(nodes, generator=g) > 0.4
        return random_graph(nodes, edges, g, device), keep.to(device)

    def fn(edge_index, keep):
        return subgraph(keep, edge_index, relabel_nodes=True, num_nodes=keep.shape[0])

    return Built(fn, [one_input(nodes, edges) for nodes, edges in graphs])


def pyg_remove_self_loops(
    device: str, *, graphs: tuple[tuple[int, int], ...] = ((8, 24), (12, 40))
) -> Built:
    import torch
    from torch_geometric.utils import remove_self_loops

    g = torch.Generator().manual_seed(8)
    inputs = []
    for nodes, edges in graphs:
        edge_index = random_graph(nodes, edges, g, device)
        inputs.append((edge_index, torch.rand(edges, generator=g).to(device)))
    return Built(lambda edge_index, weight: remove_self_loops(edge_index, weight), inputs)


def pyg_gnn_masked(
    device: str,
    *,
    graphs: tuple[tuple[int, int], ...] = ((10, 30), (16, 50)),
    channels: tuple[int, int, int] = (4, 8, 3),
) -> Built:
    """Two SAGE layers (``channels``: in, hidden, out) on the subgraph of the nodes a
    mask keeps; an input per (nodes, edges)."""
    import torch
    from torch_geometric.nn import SAGEConv
    from torch_geometric.utils import subgraph

    torch.manual_seed(0)
    features, hidden, out = channels
    conv1, conv2 = SAGEConv(features, hidden).to(device), SAGEConv(hidden, out).to(device)

    def fn(x, edge_index, keep):
        edge_index, _ = subgraph(keep, edge_index, relabel_nodes=True, num_nodes=x.shape[0])
        h = x[keep]
        return conv2(torch.relu(conv1(h, edge_index)), edge_index)

    g = torch.Generator().manual_seed(9)

    def one_input(nodes: int, edges: int) -> tuple[Any, ...]:
        return (
            torch.randn(nodes, features, generator=g).to(device),
            random_graph(nodes, edges, g, device),
            (torch.rand(nodes, generator=g) > 0.3).to(device),
        )

    return Built(fn, [one_input(nodes, edges) for nodes, edges in graphs])


CASES = [
    *(
        Case(f"{block_name(architecture)}_block", "transformers", moe_block(architecture))
        for architecture in MOE_ARCHITECTURES
    ),
    Case("mixtral_moe_block_train_step", "transformers", moe_block("mixtral", True), True),
    *(
        Case(f"{architecture}_forward", "transformers", moe_forward(architecture))
        for architecture in MOE_ARCHITECTURES
    ),
    *(
        Case(f"{architecture}_train_step", "transformers", moe_training_step(architecture), True)
        for architecture in MOE_ARCHITECTURES
    ),
    Case("batched_nms", "torchvision", batched_nms),
    Case("box_filtering", "torchvision", box_filtering),
    Case("fasterrcnn_postprocess_detections", "torchvision", detection_postprocess),
    Case("rpn_filter_proposals", "torchvision", rpn_filter_proposals),
    Case("pyg_subgraph", "torch_geometric", pyg_subgraph),
    Case("pyg_remove_self_loops", "torch_geometric", pyg_remove_self_loops),
    Case("pyg_sage_on_masked_graph", "torch_geometric", pyg_gnn_masked),
]


# Running a case.


@dataclasses.dataclass
class Outcome:
    """One compile of one case: ``status`` is pass, mismatch, needs GPU or error."""

    status: str
    detail: str = ""
    graph_breaks: int = 0
    fx_graphs: int = 0
    #: FX backend: nodes with ``meta["unbacked_symbol"]``; Python wrapper: the
    #: ``u0 = ...`` lines of its code. Over every graph the compile produced.
    unbacked_definitions: int = 0
    seconds: float = 0.0


def call(built: Built, fn: Callable[..., Any], args: tuple[Any, ...], train: bool) -> Any:
    """Run once; a training step returns the loss and the gradients."""
    if not train:
        return fn(*args)
    for parameter in built.parameters:
        parameter.grad = None
    loss = fn(*args)
    loss.backward()
    return loss.detach(), [p.grad for p in built.parameters]


def same(a: Any, b: Any) -> bool:
    import torch

    flat_a, spec_a = torch.utils._pytree.tree_flatten(a)
    flat_b, spec_b = torch.utils._pytree.tree_flatten(b)
    return spec_a == spec_b and all(
        isinstance(y, torch.Tensor)
        and x.shape == y.shape
        and x.dtype == y.dtype
        and torch.allclose(x, y, rtol=RTOL, atol=ATOL)
        if isinstance(x, torch.Tensor)
        else x == y
        for x, y in zip(flat_a, flat_b)
    )


def fx_unbacked_definitions(graphs: list[Any]) -> int:
    return sum(
        node.meta.get("unbacked_symbol") is not None for gm in graphs for node in gm.graph.nodes
    )


#: A definition of an unbacked symbol in the Python wrapper's code, from a kernel's
#: output; ``u0 = sym_size_int`` names a graph input (an FX placeholder) instead.
PYTHON_DEFINITION = re.compile(r"^\s*(u\d+) = (?![A-Za-z_]\w*$)", re.MULTILINE)


def graph_breaks(built: Built) -> int:
    """Dynamo's graph breaks in the case's code, on its first input (``explain``)."""
    import torch

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(built.fn)(*built.inputs[0])
    torch._dynamo.reset()
    return explanation.graph_break_count


@contextlib.contextmanager
def saving_output_code() -> Iterator[list[str]]:
    """The wrapper code of every graph Inductor compiles inside (repeats kept)."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    code: list[str] = []
    original = GraphLowering.save_output_code

    def save(text: str) -> None:
        code.append(text)
        if original is not None:
            original(text)

    with mock.patch.object(GraphLowering, "save_output_code", staticmethod(save)):
        yield code


def compile_and_check(
    case: Case, built: Built, expected: list[Any], device: str, dynamic: bool, backend: str
) -> Outcome:
    import torch

    import inductor_fx_unbacked as ifx
    from inductor_fx_unbacked.codegen.converters import InterpreterUnsupportedError
    from inductor_fx_unbacked.integration.reference import python_wrapper_reference

    torch._dynamo.reset()
    counted_before = _compile_counters()
    if backend == "fx":
        context: Any = contextlib.ExitStack()
        context.enter_context(ifx.fx_backend(device))
        graphs = context.enter_context(ifx.recording_graphs())
    else:
        context, graphs = python_wrapper_reference(device), []
    start = time.perf_counter()
    try:
        with context:
            compiled = torch.compile(built.fn, dynamic=dynamic)
            with saving_output_code() as code:
                got = [call(built, compiled, args, case.train) for args in built.inputs]
        mismatched = [i for i, (g, e) in enumerate(zip(got, expected)) if not same(g, e)]
        status = "pass" if not mismatched else "mismatch"
        detail = f"inputs {mismatched} differ from eager" if mismatched else ""
        # Per graph, each symbol once: the Python wrapper rebinds a symbol that two
        # kernels bind (``u0 = buf1.size(1)`` and later ``u0 = buf4.size(0)``).
        python_definitions = sum(len(set(PYTHON_DEFINITION.findall(text))) for text in code)
    except Exception as error:  # noqa: BLE001 - every failure is a row of the report
        python_definitions = 0
        status, detail = classify(error, InterpreterUnsupportedError)
        if status == "error" and os.environ.get("MODELS_TRACEBACK"):
            traceback.print_exc()
    outcome = Outcome(status, detail, seconds=time.perf_counter() - start)
    outcome.fx_graphs = len(graphs)
    if backend == "fx":
        outcome.unbacked_definitions = fx_unbacked_definitions(graphs)
        if status == "pass" and not graphs:
            outcome.status = "no FX graph"
            outcome.detail = f"the compile produced no FX graph; {_why_no_graph(counted_before)}"
    else:
        outcome.unbacked_definitions = python_definitions
    return outcome


def _compile_counters() -> dict[str, int]:
    from torch._dynamo.utils import counters

    # Every group: where Dynamo skipped a frame or broke the graph before capturing
    # anything, only ``frames``, ``graph_break`` or ``unimplemented`` say so.
    return {
        f"{group}.{name}": count
        for group, counted in list(counters.items())
        for name, count in list(counted.items())
    }


def _why_no_graph(counted_before: dict[str, int]) -> str:
    """What Dynamo and Inductor did, and what was registered, when a compile inside
    ``fx_backend`` handed out no FX graph (a diagnosis for the report)."""
    import torch
    from torch._inductor.codegen import common

    from inductor_fx_unbacked.integration import overlay, sharing

    counted = {
        name: count - counted_before.get(name, 0)
        for name, count in _compile_counters().items()
        if count != counted_before.get(name, 0)
    }
    registered = {
        device: getattr(codegens.wrapper_codegen, "__qualname__", codegens.wrapper_codegen)
        for device, codegens in common.device_codegens.items()
        if device in ("cpu", "cuda")
    }
    layers = {
        device: [str(layer.options) for layer in held] for device, held in sharing._layers.items()
    }
    dynamo = {
        "stance": repr(getattr(torch._dynamo.eval_frame, "_stance", None)),
        "eval-frame callback": repr(torch._C._dynamo.eval_frame.get_eval_frame_callback()),
        "disable": torch._dynamo.config.disable,
    }
    return (
        f"counters {counted}; wrapper codegens after the compile {registered}; "
        f"fx_backend layers {layers}; overlay enabled {overlay.is_enabled()}; Dynamo {dynamo}"
    )


def classify(error: BaseException, unsupported: type) -> tuple[str, str]:
    """``needs GPU`` for what Triton's interpreter cannot run (a kernel calls a
    ``libdevice`` function that the CPU mode does not compute), else ``error``."""
    chain, cause = [], error
    while cause is not None:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    refusals = [e for e in chain if isinstance(e, unsupported) or "libdevice" in str(e)]
    if refusals:
        return "needs GPU", str(refusals[-1]).strip()[:160]
    first_line = (str(error).strip().splitlines() or [""])[0]
    return "error", f"{type(error).__name__}: {first_line[:160]}"


def run_case(case: Case, device: str) -> list[tuple[bool, Outcome, Outcome]]:
    import torch

    rows = []
    for dynamic in (False, True):
        built = case.build(device)
        torch.manual_seed(0)
        expected = [call(built, built.fn, args, case.train) for args in built.inputs]
        python = compile_and_check(case, built, expected, device, dynamic, "python")
        fx = compile_and_check(case, built, expected, device, dynamic, "fx")
        python.graph_breaks = fx.graph_breaks = graph_breaks(built)
        rows.append((dynamic, python, fx))
    return rows


TITLE = "Model sweep: real-library data-dependent code through the FX backend"


def method_lines(device: str) -> list[str]:
    return [
        "- Each case: `torch.compile(fn, dynamic=D)` (fullgraph=False, Dynamo's capture flags "
        "on), compared with eager on two inputs with different data-dependent sizes."
    ]


def report(
    results: list[tuple[Case, bool, Outcome, Outcome]],
    seconds: float,
    not_run: list[str] | None = None,
    runs: int = 1,
) -> list[str]:
    """The report's table and closing lines."""
    lines = [
        f"Wall time: {seconds:.0f} s"
        + (f", summed over the {runs} runs merged into this report." if runs > 1 else "."),
        "",
        "| case | library | dynamic | graph breaks | FX graphs | unbacked definitions FX "
        "| unbacked definitions Python wrapper | FX backend | Python wrapper | FX s | Python s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(outcome: Outcome) -> str:
        return outcome.status + (f" ({outcome.detail})" if outcome.detail else "")

    for case, dynamic, python, fx in results:
        lines.append(
            f"| {case.name} | {case.library} | {dynamic} | {fx.graph_breaks} | {fx.fx_graphs} "
            f"| {fx.unbacked_definitions} | {python.unbacked_definitions} "
            f"| {cell(fx)} | {cell(python)} "
            f"| {fx.seconds:.1f} | {python.seconds:.1f} |"
        )
    needs_gpu = sum("needs GPU" in (p.status, f.status) for _, _, p, f in results)
    # Where both pass, the FX graphs define as many unbacked symbols as the
    # Python wrapper's code does.
    differing = sum(
        p.status == f.status == "pass" and p.unbacked_definitions != f.unbacked_definitions
        for _, _, p, f in results
    )
    if not_run:
        lines += ["", f"Not run (past the time budget): {', '.join(not_run)}"]
    lines += [
        "",
        f"models_cases: {len(results)}",
        f"models_python_wrapper_passed: {sum(p.status == 'pass' for _, _, p, _ in results)}",
        f"models_fx_passed: {sum(f.status == 'pass' for _, _, _, f in results)}",
        f"models_needs_gpu: {needs_gpu}",
        f"models_unbacked_definitions_differ: {differing}",
        f"models_not_run: {2 * len(not_run or [])}",
    ]
    return lines


@contextlib.contextmanager
def sweep_config(device: str) -> Iterator[None]:
    """Dynamo as data-dependent code needs it; no compile caches (each case is
    compiled twice, once per wrapper, and each must really compile)."""
    import torch

    dynamo = torch._dynamo.config.patch(
        capture_scalar_outputs=True,
        capture_dynamic_output_shape_ops=True,
        # The per-expert loop compiles one frame per expert hit; keep them all.
        cache_size_limit=64,
        accumulated_cache_size_limit=512,
    )
    inductor = torch._inductor.config.patch(force_disable_caches=True)
    with dynamo, inductor:
        yield


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    parser.add_argument("--out", default=None, help="markdown report path")
    parser.add_argument("--cases", default=None, help="comma-separated case names, run in order")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds after which no further case starts (the rest is listed as not run)",
    )
    parser.add_argument("--json", default=None, help="also write the rows as JSON (for --merge)")
    parser.add_argument(
        "--merge", nargs="+", default=None, help="JSON files of earlier runs: write one report"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: one small case")
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge, args.out)

    device = harness.chosen_device(args.device)
    by_name = {case.name: case for case in CASES}
    names = args.cases.split(",") if args.cases else list(by_name)
    if args.quick and not args.cases:
        names = ["batched_nms"]
    unknown = [name for name in names if name not in by_name]
    if unknown:
        print(f"unknown cases: {', '.join(unknown)}", file=sys.stderr)
        return 2
    missing = missing_libraries({by_name[name].library for name in names})
    if missing:
        print(f"models needs {', '.join(missing)}: pip install -e '.[models]'", file=sys.stderr)
        return 2

    out = harness.Report(
        args.out, TITLE, harness.environment_lines(device, *library_lines(), *method_lines(device))
    )
    start = time.perf_counter()
    results: list[tuple[Case, bool, Outcome, Outcome]] = []
    not_run: list[str] = []
    for name in names:
        case = by_name[name]
        if args.budget is not None and time.perf_counter() - start > args.budget:
            not_run.append(name)
            continue
        with sweep_config(device):
            rows = run_case(case, device)
        for dynamic, python, fx in rows:
            results.append((case, dynamic, python, fx))
            print(
                f"{case.name} dynamic={dynamic}: fx {fx.status} {fx.detail} "
                f"({fx.seconds:.1f} s), python {python.status} {python.detail}",
                flush=True,
            )
        out.replace(report(results, time.perf_counter() - start, not_run))
        if args.json:
            write_json(args.json, results, device, time.perf_counter() - start, not_run)
    out.replace(report(results, time.perf_counter() - start, not_run))
    print(out.text)
    return 0


def library_lines() -> list[str]:
    versions = ", ".join(
        f"{name} {__import__(name).__version__}"
        for name in LIBRARIES
        if importlib.util.find_spec(name) is not None
    )
    return [f"- Libraries: {versions or 'none installed'}."]


def describe_environment(device: str) -> list[str]:
    """Where and with what the cases ran, alike for every run of one machine and commit
    (``--merge`` checks that the runs it merges agree)."""
    return [*harness.versions_lines(device), *library_lines()]


def write_json(
    path: str,
    results: list[tuple[Case, bool, Outcome, Outcome]],
    device: str,
    seconds: float,
    not_run: list[str],
) -> None:
    import json

    rows = [
        {"case": c.name, "dynamic": d, "python": dataclasses.asdict(p), "fx": dataclasses.asdict(f)}
        for c, d, p, f in results
    ]
    data = {
        "device": device,
        "environment": describe_environment(device),
        "seconds": seconds,
        "rows": rows,
        "not_run": not_run,
    }
    with open(path, "w") as f:
        json.dump(data, f)


def merge(paths: list[str], out: str | None) -> int:
    """One report from the JSON of several runs (cases in the sweep's order)."""
    import json

    by_name = {case.name: case for case in CASES}
    rows: dict[tuple[str, bool], tuple[Case, bool, Outcome, Outcome]] = {}
    seconds, devices, not_run, environments = 0.0, set(), [], set()
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        seconds += data["seconds"]
        devices.add(data["device"])
        environments.add(tuple(data["environment"]))
        not_run += data["not_run"]
        for row in data["rows"]:
            case = by_name[row["case"]]
            rows[(case.name, row["dynamic"])] = (
                case,
                row["dynamic"],
                Outcome(**row["python"]),
                Outcome(**row["fx"]),
            )
    assert len(devices) == 1, f"runs on different devices: {devices}"
    assert len(environments) == 1, f"runs in different environments: {environments}"
    ran = {name for name, _ in rows}
    not_run = [name for name in dict.fromkeys(not_run) if name not in ran]
    order = {case.name: i for i, case in enumerate(CASES)}
    results = sorted(rows.values(), key=lambda r: (order[r[0].name], r[1]))
    device = devices.pop()
    header = [*environments.pop(), f"- Merged from {', '.join(paths)}.", *method_lines(device)]
    merged = harness.Report(out, TITLE, header)
    merged.replace(report(results, seconds, not_run, runs=len(paths)))
    print(merged.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
