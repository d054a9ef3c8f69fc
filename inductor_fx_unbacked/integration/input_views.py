"""Dynamo's graphs that return views of their inputs, called without AOTAutograd's
wrappers.

A graph break often falls just before a reshape: transformers' MoE blocks flatten
their hidden states (``hidden_states.view(-1, hidden)``) in the graph before the
per-expert loop and reshape the result in the graph after it. Each of those graphs
returns a view of one of its inputs, and AOTAutograd's runtime wrappers then make
that output again as a view of the caller's tensor (``gen_alias_from_base``): for
such a graph that is all they do, and each call through them costs tens of
microseconds of host time.

:func:`input_views` finds such outputs, ``direct_sources.aot_wrapper_work`` whether
the wrappers have other work, and where not, :func:`direct_call` calls the
graph's lowered runner and makes each such output
``caller.as_strided(out.size(), out.stride(), start)`` of the caller's tensor, as
AOTAutograd does for an output whose view it cannot replay. Why nothing changes:

- the FX graph computes the output as a view of that input's placeholder
  (``views.view_of``), or returns the placeholder, so the runner's output lies in
  the storage of the tensor it was given for that input, and its sizes, strides and
  start there are those AOTAutograd reads from it. That tensor is the caller's, or,
  where the graph's kernels need an input aligned and the caller's is not, an
  aligned copy with the same strides (``compiled.realigned_inputs``): the same
  start relative to the copy's is then the same place in the caller's tensor, as
  AOTAutograd finds it after Inductor's own copy of a misaligned input;
- the result is a view of the caller's tensor (its version counter and ``_base``),
  where the runner's ``reinterpret_tensor`` is only an alias;
- the direct call runs with gradients off, where AOTAutograd's wrappers detach an
  alias of an input that requires grad: neither requires grad.

Any other work of the wrappers (an updated input, an output aliasing an
intermediate, effect tokens) keeps them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .. import runner as runners
from ..codegen import views
from .compiled import aligned_inputs, realigned_inputs

#: (output index, input index) pairs.
Pairs = tuple[tuple[int, int], ...]


def input_views(fw_metadata: Any, graph: torch.fx.GraphModule) -> Pairs:
    """(output, input) for each output of ``graph`` that AOTAutograd's wrappers make
    again as a view of an input, where the FX graph computes it as a view of that
    input's placeholder (the module docstring says why this module can make it
    then). Whether the wrappers have other work is ``aot_wrapper_work``'s to say."""
    if fw_metadata is None:
        return ()
    placeholders = graph.graph.find_nodes(op="placeholder")
    returned = graph.graph.output_node().args[0]
    if not isinstance(returned, (tuple, list)):
        returned = (returned,)
    if len(returned) != len(fw_metadata.output_info):
        return ()
    return tuple(
        (index, info.base_idx)
        for index, info in enumerate(fw_metadata.output_info)
        if info.output_type.name == "alias_of_input"
        and isinstance(info.base_idx, int)
        and info.base_idx < len(placeholders)
        and _returns_view_of(returned[index], placeholders[info.base_idx])
    )


def _returns_view_of(node: Any, placeholder: torch.fx.Node) -> bool:
    """Whether the graph returns ``node`` as a view of ``placeholder`` (Inductor returns
    the input itself for a view of the same sizes and strides)."""
    if node is placeholder:
        return True
    view = views.view_of(node) if isinstance(node, torch.fx.Node) else None
    return view is not None and view.base is placeholder


def direct_call(
    graph: torch.fx.GraphModule,
    cuda_graphs: bool,
    views_of_inputs: Sequence[tuple[int, int]] = (),
) -> Callable[..., Any]:
    """Dynamo's compiled function for ``graph``: its lowered runner, given Dynamo's
    graph inputs (the FX graph's, in order), returning a sequence of outputs, each of
    ``views_of_inputs`` (:func:`input_views`) made a view of its input."""
    run = runners.compile_graph(graph, "lowered", cuda_graphs=cuda_graphs)
    aligned = aligned_inputs(graph)
    returns_sequence = isinstance(graph.graph.output_node().args[0], (tuple, list))
    if not aligned and returns_sequence and not views_of_inputs:
        return run

    def call(*inputs: Any) -> Any:
        given = realigned_inputs(inputs, aligned)
        outputs = run(*given)
        outputs = list(outputs) if returns_sequence else [outputs]
        for output, base in views_of_inputs:
            out, caller = outputs[output], inputs[base]
            start = out.storage_offset() - given[base].storage_offset()
            outputs[output] = caller.as_strided(
                out.size(), out.stride(), caller.storage_offset() + start
            )
        return outputs

    return call
