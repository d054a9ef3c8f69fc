"""The package's logs and the FX graphs it shows, through ``torch._logging``.

- The package's own messages go to the logger ``inductor_fx_unbacked`` (and its
  children, one per module), registered with ``torch._logging`` so that
  ``TORCH_LOGS=inductor_fx_unbacked`` (INFO) or ``TORCH_LOGS=+inductor_fx_unbacked``
  (DEBUG) switches them on, as ``torch._logging.set_logs(inductor_fx_unbacked=...)``
  does; warnings print by default, formatted as torch's.
- Each FX graph the backend produces is shown where Inductor shows the code it
  generates: the ``output_code`` artifact (``TORCH_LOGS=output_code``), a file
  that stays after the process ends (the path that Inductor logs as
  "Output code written to"), and the structured trace (``TORCH_TRACE``, read by
  tlparse) as the artifact :data:`GRAPH_ARTIFACT`.

Importing this module imports neither Inductor nor Triton.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

#: The logger of the package, and the name ``TORCH_LOGS`` knows it by.
LOG_NAME = "inductor_fx_unbacked"
#: The name of the structured-trace artifact holding an FX graph's code.
GRAPH_ARTIFACT = "inductor_fx_unbacked_graph"

log = logging.getLogger(LOG_NAME)


def register_log() -> None:
    """Make ``TORCH_LOGS`` and ``set_logs`` know the package's logger. Idempotent.

    ``torch._logging`` reads ``TORCH_LOGS`` when torch is imported, before this
    package is; ``TORCH_LOGS=inductor_fx_unbacked`` still works then, because
    torch accepts module names (and imports the package while it parses them).
    Registered afterwards, the logger gets torch's handler and formatting once
    ``torch._logging`` sets its logs up again, which this does unless torch is
    still doing so itself (it is when it imports the package to parse
    ``TORCH_LOGS``; it then sets up the handler itself).
    """
    from torch._logging import _internal

    if _internal.log_registry.is_log(LOG_NAME):
        return
    _internal.register_log(LOG_NAME, LOG_NAME)
    if _internal.LOG_TRACE_HANDLER is not None:
        _internal._init_logs()


def graph_source(gm: torch.fx.GraphModule, compiled_fn: Any) -> str:
    """The code of an FX graph, its subgraphs and, if it runs lowered, of what runs.

    ``compiled_fn`` is what ``compile_graph`` returned for ``gm``: the function
    that :func:`inductor_fx_unbacked.runner.straightline.compile_lowered` writes (its
    text is its ``source``), or ``gm.forward`` itself.
    """
    parts = ["# The FX graph (inductor-fx-unbacked)", _module_code(gm)]
    runs = getattr(compiled_fn, "source", None)
    if isinstance(runs, str):
        parts += ["# What runs: inductor_fx_unbacked.runner.straightline.compile_lowered(gm)", runs]
    return "\n".join(parts)


def _module_code(gm: torch.fx.GraphModule) -> str:
    """``gm.code``, preceded by the code of each subgraph it holds (cond branches)."""
    parts = []
    for name, child in gm.named_children():
        if isinstance(child, torch.fx.GraphModule):
            body = _module_code(child).strip("\n").replace("\n", "\n    ")
            parts.append(f"class {name}:\n    {body}\n")
    parts.append(gm.code.strip("\n") + "\n")
    return "\n".join(parts)


def write_graph_source(source: str) -> str:
    """Write ``source`` to Inductor's cache dir, as the Python wrapper's code is, and
    return the path. The file stays after the process ends."""
    from torch._inductor.codecache import PyCodeCache

    _, path = PyCodeCache.write(source)
    return path


def show_graph(source: str, path: str) -> None:
    """Show an FX graph's code in the ``output_code`` log and in the structured trace."""
    from torch._inductor.codecache import output_code_log

    output_code_log.debug("Output code (FX graph): \n%s", source)
    torch._logging.trace_structured(
        "artifact",
        metadata_fn=lambda: {"name": GRAPH_ARTIFACT, "encoding": "string", "filename": path},
        payload_fn=lambda: source,
    )
