"""Graphs that upstream's FX wrapper codegen converts while the overlay is enabled.

The overlay puts each Triton kernel it converts in upstream's side table at an
index of its own (``codegen/kernels.py``), which Dynamo's reset never empties. This
package's codegen hands its graphs out owning theirs (``backend.FxWrapperCodegen``);
a graph of upstream's ``WrapperFxCodegen`` owns them through :func:`generating`, so
that they leave the table when it is dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch._inductor.codegen.wrapper_fxir import FxConverter

from ..artifact.kernels import own_kernels, release_unfinished
from ..codegen.converters import SourcedFxConverter
from ..codegen.kernels import CONVERTED_KERNELS, converted_kernels
from ..codegen.wrapper_fxir import ignoring_fresh_unbacked_symbols


def generating(generate: Callable[..., Any]) -> Callable[..., Any]:
    """The overlay's ``FxConverter.generate``: upstream's, creating no pending unbacked
    symbols (``ignoring_fresh_unbacked_symbols``), and for a converter of upstream's
    FX codegen, a graph that owns the kernels the overlay placed for it.

    The overlay puts each Triton kernel it converts in upstream's side table at an
    index of its own (``codegen/kernels.py``), which Dynamo's reset never empties.
    This package's codegen hands its graphs out owning theirs
    (``backend.FxWrapperCodegen._convert``); a graph that upstream's ``WrapperFxCodegen``
    converts with the overlay enabled owns them here, so that they leave the table
    when it is dropped, and a conversion that raises releases them. A subgraph's go
    to the graph that holds it.
    """
    quiet = ignoring_fresh_unbacked_symbols(generate)

    @functools.wraps(generate)
    def method(self: FxConverter) -> torch.fx.GraphModule:
        if isinstance(self, SourcedFxConverter):
            return quiet(self)
        try:
            gm = quiet(self)
        except BaseException:
            release_unfinished(converted_kernels(self))
            raise
        gm.meta[CONVERTED_KERNELS] = converted_kernels(self)
        if not self.is_subgraph:
            own_kernels(gm)
        return gm

    return method
