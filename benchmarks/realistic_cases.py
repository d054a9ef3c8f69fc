"""What the realistic benchmark measures: data-dependent code as users write it, at their sizes.

Programs: each is a plain function written from real code (its docstring's
first line says which), with two sizes, ``small`` and ``large`` (``sizes``), and
a tiny pair of the same names for CPU smoke runs (``quick``).
``inputs(device, dims, draw)`` builds one input draw from a seeded generator;
draws 0 and 1 differ in what the program's data-dependent sizes come out as (how
many tokens are labelled, boxes kept, distinct ids, ...).

Real-library cases (:func:`model_cases`): ``benchmarks/models.py``'s builders
given users' sizes (transformers' MoE blocks at hidden 2048, 8 experts, top-2,
4096 tokens, in bf16, in both experts implementations; 20k boxes of 80 classes;
graphs of 1M nodes and 10M edges).

``benchmarks/realistic.py`` measures them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

#: The size names, in order (a CPU smoke run's tiny sizes have the same names).
SIZES = ("small", "large")


@dataclasses.dataclass(frozen=True)
class Size:
    """One size of a program: the dimensions its input factory reads, and how the
    report names them."""

    label: str
    dims: Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    fn: Callable[..., Any]
    #: ``inputs(device, dims, draw)``: one input draw at a size.
    inputs: Callable[[str, Mapping[str, int], int], tuple[Any, ...]]
    #: ``small`` and ``large``: users' sizes.
    sizes: Mapping[str, Size]
    #: ``small`` and ``large`` of a CPU smoke run: tiny.
    quick: Mapping[str, Size]
    #: Reported in GB/s (bytes of its inputs read plus its outputs written) against
    #: the device's copy bandwidth.
    bandwidth: bool = False
    #: Relative tolerance against eager where the dtype's is too tight: a scan over
    #: tens of millions of float32 values adds them in another order.
    rtol: float | None = None

    @property
    def summary(self) -> str:
        """The docstring's first line: what real code the program is written from."""
        return (self.fn.__doc__ or "").strip().splitlines()[0]


def generator(device: str, seed: int) -> torch.Generator:
    """A seeded generator on ``device``: large inputs are made where they are used."""
    return torch.Generator(device=device).manual_seed(seed)


# Losses and pooling over the tokens that count.


def token_nll(logits, labels):
    """Written from transformers' token-classification loss (`active = labels != -100`, `logits[active]`) at an LM's vocabulary: cross-entropy over the labelled tokens, in float32 over bf16 logits."""  # noqa: E501
    labelled = labels != -100
    return F.cross_entropy(logits[labelled].float(), labels[labelled])


def token_nll_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    tokens, vocab = dims["tokens"], dims["vocab"]
    g = generator(device, 10 + draw)
    logits = torch.randn(tokens, vocab, generator=g, device=device, dtype=torch.bfloat16)
    labels = torch.randint(0, vocab, (tokens,), generator=g, device=device)
    padding = torch.rand(tokens, generator=g, device=device) < (0.2, 0.5)[draw]
    return logits, labels.masked_fill(padding, -100)


def padded_batch(device: str, dims: Mapping[str, int], draw: int, seed: int) -> tuple[Any, ...]:
    """Hidden states (batch, seq, hidden) in bf16 and an attention mask of 0s and 1s
    whose rows have random lengths (shorter ones in draw 1)."""
    batch, seq, hidden = dims["batch"], dims["seq"], dims["hidden"]
    g = generator(device, seed + draw)
    states = torch.randn(batch, seq, hidden, generator=g, device=device, dtype=torch.bfloat16)
    shortest = (seq // 2, seq // 8)[draw]
    lengths = torch.randint(shortest, seq + 1, (batch, 1), generator=g, device=device)
    mask = (torch.arange(seq, device=device) < lengths).to(torch.int64)
    return states, mask


def mean_pool_tokens(hidden, attention_mask):
    """Written from sentence-embedding code that pools the states of a batch's real tokens (`hidden[attention_mask.bool()].mean(0)`), in float32."""  # noqa: E501
    return hidden[attention_mask.bool()].float().mean(0)


def unpad_layer_norm(hidden, attention_mask, weight, bias):
    """Written from flash-attn's `bert_padding.unpad_input` (the real tokens' indices by `nonzero`, `cu_seqlens` by a cumsum of the lengths), then a LayerNorm over the packed tokens."""  # noqa: E501
    seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    packed = hidden.flatten(0, 1)[indices]
    return F.layer_norm(packed, weight.shape, weight, bias), indices, cu_seqlens


def unpad_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    states, mask = padded_batch(device, dims, draw, seed=30)
    g = generator(device, 35)
    weight, bias = torch.randn(2, dims["hidden"], generator=g, device=device).bfloat16()
    return states, mask, weight, bias


# Detection post-processing.

NUM_CLASSES = 80
SCORE_THRESH = 0.05
TOPK_CANDIDATES = 1000
#: torchvision's ``BoxCoder`` clamp of the log size deltas: ``log(1000 / 16)``.
BBOX_XFORM_CLIP = math.log(1000.0 / 16)


def detection_candidates(scores, deltas, anchors):
    """Written from torchvision's `RetinaNet.postprocess_detections` (one level): scores over the threshold, the best k = min(1000, kept) of them, their classes and decoded boxes."""  # noqa: E501
    num_classes = scores.shape[1]
    flat = scores.flatten()
    keep = flat > SCORE_THRESH
    kept = flat[keep]
    candidates = torch.where(keep)[0]
    k = min(TOPK_CANDIDATES, candidates.size(0))
    top, order = kept.topk(k)
    candidates = candidates[order]
    anchor_idx = torch.div(candidates, num_classes, rounding_mode="floor")
    labels = candidates % num_classes
    return decode_boxes(deltas[anchor_idx], anchors[anchor_idx]), top, labels


def decode_boxes(deltas, boxes):
    """torchvision's ``BoxCoder.decode_single`` with unit weights."""
    widths = boxes[:, 2] - boxes[:, 0]
    heights = boxes[:, 3] - boxes[:, 1]
    ctr_x = boxes[:, 0] + 0.5 * widths
    ctr_y = boxes[:, 1] + 0.5 * heights
    dx, dy = deltas[:, 0], deltas[:, 1]
    dw = deltas[:, 2].clamp(max=BBOX_XFORM_CLIP)
    dh = deltas[:, 3].clamp(max=BBOX_XFORM_CLIP)
    pred_ctr_x, pred_ctr_y = dx * widths + ctr_x, dy * heights + ctr_y
    pred_w, pred_h = torch.exp(dw) * widths, torch.exp(dh) * heights
    return torch.stack(
        (
            pred_ctr_x - 0.5 * pred_w,
            pred_ctr_y - 0.5 * pred_h,
            pred_ctr_x + 0.5 * pred_w,
            pred_ctr_y + 0.5 * pred_h,
        ),
        dim=1,
    )


def detection_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    """Per-class scores of ``boxes`` anchors: background below the threshold, and a
    fraction (2% or 5%) above it with distinct values, so that no two candidates
    tie (a tie would let two correct top-k orders differ)."""
    boxes = dims["boxes"]
    g = generator(device, 40 + draw)
    count = boxes * NUM_CLASSES
    scores = torch.rand(count, generator=g, device=device) * SCORE_THRESH
    above = torch.rand(count, generator=g, device=device) < (0.02, 0.05)[draw]
    kept = int(above.sum())
    ranks = torch.randperm(kept, generator=g, device=device).to(torch.float32)
    scores[above] = SCORE_THRESH + (1 - SCORE_THRESH) * (ranks + 1) / (kept + 1)
    corners = torch.rand(boxes, 2, generator=g, device=device) * 800
    extents = torch.rand(boxes, 2, generator=g, device=device) * 200 + 8
    anchors = torch.cat([corners, corners + extents], dim=1)
    deltas = torch.randn(boxes, 4, generator=g, device=device) * 0.2
    return scores.view(boxes, NUM_CLASSES), deltas, anchors


# Unique, scans, sorting.


def unique_ids(ids):
    """Written from node-id relabelling in graph samplers (PyG's and DGL's `torch.unique(ids, return_inverse=True)`), with the counts a vocabulary count takes."""  # noqa: E501
    return torch.unique(ids, return_inverse=True, return_counts=True)


def unique_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    n = dims["n"]
    distinct = max(n // (4, 16)[draw], 2)
    return (
        torch.randint(0, distinct, (n,), generator=generator(device, 50 + draw), device=device),
    )


def returns_over_valid_steps(rewards, valid):
    """Written from return computation over the valid steps of a flattened rollout (`rewards[valid].cumsum(0)`)."""  # noqa: E501
    return rewards[valid].cumsum(0)


def valid_steps_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    g = generator(device, 60 + draw)
    rewards = torch.rand(dims["n"], generator=g, device=device)
    return rewards, torch.rand(dims["n"], generator=g, device=device) < (0.5, 0.8)[draw]


def expanded_scan(values, repeats):
    """Written from jagged-tensor code (torchrec's lengths to offsets, PyG's batch vectors) that expands per-segment values to their elements, then scans them (`torch.repeat_interleave(values, repeats).cumsum(0)`)."""  # noqa: E501
    return torch.repeat_interleave(values, repeats).cumsum(0)


def segments_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    segments = dims["segments"]
    g = generator(device, 70 + draw)
    values = torch.randint(0, 100, (segments,), generator=g, device=device)
    # Lengths of mean 4 (draw 0) or about 3 (draw 1): 4 or 3 elements per segment.
    repeats = torch.randint(0, (9, 7)[draw], (segments,), generator=g, device=device)
    return values, repeats


def topk_over_threshold(scores):
    """Written from confidence filtering that keeps every score over a threshold, best first (`k = (scores > t).sum().item()`, `scores.topk(k)`)."""  # noqa: E501
    k = (scores > 0.9).sum().item()
    return torch.topk(scores, k).values


def scores_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    """Scores in [0, 1); draw 1's are the square roots of draw 0's kind: 19% over
    0.9 rather than 10%."""
    scores = torch.rand(dims["n"], generator=generator(device, 80 + draw), device=device)
    return (scores if draw == 0 else scores.sqrt(),)


def sort_kept(probs):
    """Written from min-p / top-p sampling, which sorts the probabilities that survive a floor (`probs[probs > floor].sort(descending=True)`), stably."""  # noqa: E501
    return torch.sort(probs[probs > 0.5], descending=True, stable=True)


def best_valid_action(q, valid):
    """Written from masked action selection in reinforcement learning and constrained decoding: the best of the allowed actions (`q[valid].argmax()`), as an index into all of them."""  # noqa: E501
    allowed = valid.nonzero().squeeze(1)
    return allowed.index_select(0, q[valid].argmax().view(1))


def actions_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    """Normal action values, 30% of them allowed (draw 0) or 60% (draw 1)."""
    g = generator(device, 110 + draw)
    q = torch.randn(dims["n"], generator=g, device=device)
    return q, torch.rand(dims["n"], generator=g, device=device) < (0.3, 0.6)[draw]


# Graphs and compaction.


def edges_between_kept_nodes(edge_index, edge_weight, node_mask):
    """Written from torch_geometric's `subgraph` (relabel_nodes=False): the edges whose two ends are kept (`edge_index[:, mask]`), and their weights."""  # noqa: E501
    edge_mask = node_mask[edge_index[0]] & node_mask[edge_index[1]]
    return edge_index[:, edge_mask], edge_weight[edge_mask]


def graph_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    nodes, edges = dims["nodes"], dims["edges"]
    g = generator(device, 90 + draw)
    edge_index = torch.randint(0, nodes, (2, edges), generator=g, device=device)
    weight = torch.rand(edges, generator=g, device=device)
    return edge_index, weight, torch.rand(nodes, generator=g, device=device) < (0.7, 0.4)[draw]


def active_coordinates(x):
    """Written from the conversion of an activation map or pruning mask to sparse coordinates (`torch.nonzero(x > t)`, as `to_sparse` and sparse convolutions take them)."""  # noqa: E501
    return torch.nonzero(x > 0.5)


def compressed_gradient(grad):
    """Written from gradient sparsification before communication (Deep Gradient Compression: `grad.masked_select(grad.abs() > threshold)`)."""  # noqa: E501
    return torch.masked_select(grad, grad.abs() > 1.5)


def elements_inputs(device: str, dims: Mapping[str, int], draw: int) -> tuple[Any, ...]:
    """Normal values: 31% over 0.5 and 13% over 1.5 in absolute value (draw 0), or
    with twice the spread (draw 1) 40% and 45%."""
    g = generator(device, 100 + draw)
    return (torch.randn(dims["n"], generator=g, device=device) * (1.0, 2.0)[draw],)


# The programs and their sizes.

M = 1 << 20


def sizes(*both: Size) -> dict[str, Size]:
    """``small`` and ``large``."""
    return dict(zip(SIZES, both))


def elements(n: int) -> Size:
    """A size of ``n`` elements, labelled ``4M elements`` or ``1000 elements``."""
    count = f"{n // M}M" if n >= M and n % M == 0 else str(n)
    return Size(f"{count} elements", {"n": n})


def batch(b: int, s: int, h: int) -> Size:
    return Size(f"{b}x{s} tokens x {h} bf16", {"batch": b, "seq": s, "hidden": h})


#: The bandwidth programs first: their lines close the report.
PROGRAMS = [
    Program(
        "active_coordinates",
        active_coordinates,
        elements_inputs,
        sizes(elements(64 * M), elements(256 * M)),
        sizes(elements(1000), elements(4000)),
        bandwidth=True,
    ),
    Program(
        "compressed_gradient",
        compressed_gradient,
        elements_inputs,
        sizes(elements(64 * M), elements(256 * M)),
        sizes(elements(1000), elements(4000)),
        bandwidth=True,
    ),
    Program(
        "token_nll",
        token_nll,
        token_nll_inputs,
        sizes(
            Size("2k tokens x 32k vocab bf16", {"tokens": 2048, "vocab": 32000}),
            Size("16k tokens x 32k vocab bf16", {"tokens": 16384, "vocab": 32000}),
        ),
        sizes(
            Size("16 tokens x 64", {"tokens": 16, "vocab": 64}),
            Size("64 tokens x 64", {"tokens": 64, "vocab": 64}),
        ),
    ),
    Program(
        "detection_candidates",
        detection_candidates,
        detection_inputs,
        sizes(
            Size("20k boxes x 80 classes", {"boxes": 20_000}),
            Size("250k boxes x 80 classes", {"boxes": 250_000}),
        ),
        sizes(Size("100 boxes x 80", {"boxes": 100}), Size("400 boxes x 80", {"boxes": 400})),
    ),
    Program(
        "mean_pool_tokens",
        mean_pool_tokens,
        lambda device, dims, draw: padded_batch(device, dims, draw, seed=20),
        sizes(batch(8, 512, 1024), batch(32, 1024, 2048)),
        sizes(batch(2, 16, 8), batch(4, 32, 8)),
    ),
    Program(
        "unpad_layer_norm",
        unpad_layer_norm,
        unpad_inputs,
        sizes(batch(8, 512, 1024), batch(32, 1024, 2048)),
        sizes(batch(2, 16, 8), batch(4, 32, 8)),
    ),
    Program(
        "unique_ids",
        unique_ids,
        unique_inputs,
        sizes(elements(4 * M), elements(64 * M)),
        sizes(elements(1000), elements(4000)),
    ),
    Program(
        "returns_over_valid_steps",
        returns_over_valid_steps,
        valid_steps_inputs,
        sizes(elements(4 * M), elements(64 * M)),
        sizes(elements(1000), elements(4000)),
        rtol=1e-3,
    ),
    Program(
        "expanded_scan",
        expanded_scan,
        segments_inputs,
        sizes(
            Size("1M segments (about 4M elements)", {"segments": M}),
            Size("16M segments (about 64M elements)", {"segments": 16 * M}),
        ),
        sizes(Size("250 segments", {"segments": 250}), Size("1000 segments", {"segments": 1000})),
    ),
    Program(
        "topk_over_threshold",
        topk_over_threshold,
        scores_inputs,
        sizes(elements(4 * M), elements(64 * M)),
        sizes(elements(1000), elements(4000)),
    ),
    Program(
        "sort_kept",
        sort_kept,
        scores_inputs,
        sizes(elements(4 * M), elements(64 * M)),
        sizes(elements(1000), elements(4000)),
    ),
    Program(
        "best_valid_action",
        best_valid_action,
        actions_inputs,
        sizes(elements(4 * M), elements(64 * M)),
        sizes(elements(1000), elements(4000)),
    ),
    Program(
        "edges_between_kept_nodes",
        edges_between_kept_nodes,
        graph_inputs,
        sizes(
            Size("200k nodes, 2M edges", {"nodes": 200_000, "edges": 2 * M}),
            Size("2M nodes, 32M edges", {"nodes": 2 * M, "edges": 32 * M}),
        ),
        sizes(
            Size("100 nodes, 1000 edges", {"nodes": 100, "edges": 1000}),
            Size("400 nodes, 4000 edges", {"nodes": 400, "edges": 4000}),
        ),
    ),
]

BY_NAME = {program.name: program for program in PROGRAMS}


# Real-library cases: the model sweep's builders at users' sizes.

#: The experts implementations of transformers 5: its per-expert loop (``eager``) and
#: its grouped matrix products (``grouped_mm``, the default where it can dispatch).
EXPERTS_IMPLEMENTATIONS = ("eager", "grouped_mm")
#: An MoE layer at OLMoE-1B-7B's widths (hidden 2048, experts of 1024), 8 experts, top-2.
MOE_CONFIG = {
    "hidden_size": 2048,
    "intermediate_size": 1024,
    "moe_intermediate_size": 1024,
    "num_local_experts": 8,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "hidden_act": "silu",
}
MOE_TOKENS = 4096
#: A graph of 1M nodes and 10M edges, twice (the draws differ in edges and mask).
GRAPH = ((1 << 20, 10 * (1 << 20)),) * 2


def model_cases(quick: bool) -> list[tuple[Any, str]]:
    """The model sweep's cases (``models.Case``) at users' sizes, in bf16 where the
    model uses it, each with its sizes in words; ``quick``: the sweep's tiny sizes."""
    import functools

    from benchmarks import models

    def case(name: str, library: str, build: Callable[..., Any], sizes: str, **dims: Any):
        built = build if quick else functools.partial(build, **dims)
        return models.Case(name, library, built), "the sweep's tiny sizes" if quick else sizes

    moe = {} if quick else {"config": MOE_CONFIG, "dtype": torch.bfloat16}
    tokens = {} if quick else {"tokens": (MOE_TOKENS,) * 2}
    moe_sizes = f"hidden 2048, experts of 1024, 8 experts, top-2, {MOE_TOKENS} tokens, bf16"

    def blocks(experts: str) -> list[tuple[Any, str]]:
        return [
            case(
                f"{models.block_name(architecture)}_block[{experts}]",
                "transformers",
                models.moe_block(architecture, experts=experts, **moe, **tokens),
                moe_sizes,
            )
            for architecture in models.MOE_ARCHITECTURES
        ]

    graph = "1M nodes, 10M edges"
    # The per-expert loop first (data-dependent sizes), the grouped products (sizes
    # fixed, counts data-dependent) after the other libraries, the whole model last:
    # its compiles are the longest.
    cases = blocks("eager")
    cases += [
        case(
            "batched_nms",
            "torchvision",
            models.batched_nms,
            "20k boxes, 80 classes, an 800-pixel image",
            boxes=(20_000,) * 2,
            classes=80,
            image=800,
        ),
        case(
            "box_filtering",
            "torchvision",
            models.box_filtering,
            "250k boxes clipped to 800 pixels",
            boxes=(250_000,) * 2,
            image=800,
            extent=1000,
        ),
        case(
            "fasterrcnn_postprocess_detections",
            "torchvision",
            models.detection_postprocess,
            "20k proposals, 80 classes and the background, score 0.05, 100 detections",
            proposals=(20_000,) * 2,
            classes=81,
            image=800,
            score_thresh=0.05,
            detections=100,
        ),
        case(
            "rpn_filter_proposals",
            "torchvision",
            models.rpn_filter_proposals,
            "250k anchors, 2000 before NMS, 1000 after",
            anchors=(250_000,) * 2,
            image=800,
            extent=900,
            pre_nms=2000,
            post_nms=1000,
        ),
        case("pyg_subgraph", "torch_geometric", models.pyg_subgraph, graph, graphs=GRAPH),
        case(
            "pyg_remove_self_loops",
            "torch_geometric",
            models.pyg_remove_self_loops,
            graph,
            graphs=GRAPH,
        ),
        case(
            "pyg_sage_on_masked_graph",
            "torch_geometric",
            models.pyg_gnn_masked,
            f"{graph}, channels 32, 32, 16",
            graphs=GRAPH,
            channels=(32, 32, 16),
        ),
    ]
    cases += blocks("grouped_mm")
    lengths = {} if quick else {"lengths": (MOE_TOKENS,) * 2}
    for experts in EXPERTS_IMPLEMENTATIONS:
        forward = models.moe_forward("mixtral", experts=experts, **moe, **lengths)
        name = f"mixtral_forward[{experts}]"
        sizes = "one layer, vocabulary 32000, " + moe_sizes
        case = models.Case(name, "transformers", forward)
        cases.append((case, "the sweep's tiny sizes" if quick else sizes))
    return cases
