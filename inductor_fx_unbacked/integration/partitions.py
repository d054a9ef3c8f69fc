"""Graph partitions, which the FX wrapper cannot take.

``mode="reduce-overhead"`` asks Inductor for CUDA graphs, which it applies per
graph partition. A partitioned graph is the Python wrapper's: partition
functions called by name from its text, their inputs taken as buffers with layouts, CUDA
graphs applied to its module. The FX wrapper compiles whole graphs instead.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable

from torch._inductor import config
from torch._inductor.codegen import common

from ..codegen.wrapper_fxir import registered_wrapper_is_fx

log = logging.getLogger(__name__)

MaybeDisable = Callable[[bool, bool], contextlib.AbstractContextManager[None]]


def without_graph_partitions(
    maybe_disable_graph_partition: MaybeDisable,
) -> MaybeDisable:
    """Wrap ``compile_fx.maybe_disable_graph_partition``: no graph partitions where
    an FX wrapper codegen is registered, as upstream does for the C++ wrapper and AOT.

    Inductor asks before it lowers, with the wrapper flags only: the graph's
    devices are not known yet. So partitions are off while any device's codegen
    for those flags is an FX one. Only a graph with GPU kernels is partitioned;
    inside ``fx_backend("cuda")`` the FX wrapper compiles it, and inside
    ``fx_backend("cpu")`` a CUDA graph, which the Python wrapper compiles, loses
    its partitions too (and with them Inductor's CUDA graphs).
    """

    @functools.wraps(maybe_disable_graph_partition)
    def wrapper(cpp_wrapper: bool, aot_mode: bool) -> contextlib.AbstractContextManager[None]:
        fx_devices = [
            device
            for device in common.device_codegens
            if registered_wrapper_is_fx(
                device, cpp_wrapper=cpp_wrapper, fx_wrapper=config.fx_wrapper
            )
        ]
        if not fx_devices:
            return maybe_disable_graph_partition(cpp_wrapper, aot_mode)
        if config.triton.cudagraphs and config.graph_partition:
            log.info(
                "the FX wrapper (%s) compiles without graph partitions, so Inductor applies "
                "no CUDA graphs to this graph",
                ", ".join(fx_devices),
            )
        return config.patch(graph_partition=False)

    return wrapper
