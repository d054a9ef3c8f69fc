"""Public entry points: register the FX wrapper backend, and capture what it produces."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.codegen import common
from torch._inductor.codegen.common import FileBackedGraphModule
from torch._inductor.codegen.wrapper_fxir import FxConverter, WrapperFxCodegen
from torch._inductor.virtualized import V
from torch.utils import _pytree as pytree

from . import _logging, _overlay, caching
from .caching import ArtifactIdentity
from .interpreter import InterpreterFxConverter, interpreter_driver, require_interpreter
from .straightline import compile_lowered

SUPPORTED_DEVICES = ("cuda", "cpu")
log = logging.getLogger(__name__)

# Lists that receive every GraphModule the converter produces, while capturing.
_graph_sinks: list[list[torch.fx.GraphModule]] = []


class FxWrapperCodegen(WrapperFxCodegen):
    """Upstream's FX wrapper codegen, with a pluggable converter and graph capture."""

    converter_class: type[FxConverter] = FxConverter
    #: Inductor's FX graph cache stores the artifact (``inductor_fx_unbacked.caching``).
    supports_caching: bool = True
    #: Whether graphs keep the nodes tagged ``meta["runtime_assert"]``.
    runtime_asserts: bool = True
    #: How compiled graphs run: ``"lowered"`` (:func:`inductor_fx_unbacked.runner.lower`)
    #: or ``"graph"`` (upstream's default, ``gm.forward``).
    runner: str = "lowered"

    def compile_graph(self, gm: torch.fx.GraphModule) -> Callable[..., Any]:
        """The callable that runs ``gm``; ``gm`` itself is left as it is."""
        return compile_graph_with(self.runner, gm)

    def _generate(self, is_inference: bool) -> tuple[FileBackedGraphModule, None]:
        self.run_wrapper_ir_passes(is_inference)
        overlay_enabled = _overlay.is_enabled()
        try:
            gm = self._convert()
        except Exception as e:
            if overlay_enabled:
                raise
            raise RuntimeError(
                f"FX conversion failed: {type(e).__name__}: {e}\n\nThe inductor-fx-unbacked "
                "overlay was disabled inside fx_backend, so upstream's converter ran, and "
                "it cannot convert this graph. Call inductor_fx_unbacked.enable() again, or "
                "turn the assert flags off."
            ) from e
        if not self.runtime_asserts:
            strip_runtime_asserts(gm)
        record_graphs([gm])
        if not self.is_subgraph and not V.graph.aot_mode:
            _store_artifact(gm, self.runner)
        compiled = ShownGraphModule(gm, self.compile_graph(gm))
        if not self.is_subgraph:
            # A subgraph's code is shown with the graph that holds it.
            _logging.show_graph(compiled.source, compiled.__file__)
        return compiled, None

    def _convert(self) -> torch.fx.GraphModule:
        return self.converter_class(
            lines=self.lines,
            prologue="\n".join([self.imports.getvalue(), self.header.getvalue()]),
            graph_inputs=self.get_fx_graph_inputs(),
            graph_outputs=self.get_graph_outputs(),
            subgms=self.subgms,
            is_subgraph=self.is_subgraph,
        ).generate()


def compile_graph_with(runner: str, gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """The callable that runs ``gm`` with ``runner`` (see ``fx_backend``)."""
    if runner == "graph":
        return gm.forward
    return compile_lowered(gm)


def recording() -> bool:
    """Whether a ``recording_graphs`` (or ``capture_fx_graphs``) is open."""
    return bool(_graph_sinks)


def record_graphs(graphs: list[torch.fx.GraphModule]) -> None:
    """Hand graphs to every ``recording_graphs`` that is open."""
    for sink in _graph_sinks:
        sink.extend(graphs)


def _store_artifact(gm: torch.fx.GraphModule, runner: str) -> None:
    """Give Inductor the source of the module that its caches store for ``gm``.

    A graph that cannot be stored gets a module that is a cache miss when loaded
    (``caching.ArtifactNotStored``), so it is compiled again, never served wrong.
    """
    from torch._inductor.codecache import PyCodeCache

    try:
        source = caching.artifact_source(gm, runner)
    except caching.ArtifactNotStored as e:
        log.info("Not storing the FX artifact in Inductor's caches: %s", e)
        source = caching.unstorable_artifact_source(str(e))
    key, path = PyCodeCache.write(source)
    V.graph.cache_key, V.graph.cache_path, V.graph.cache_linemap = key, path, []


class ShownGraphModule(FileBackedGraphModule):
    """Upstream's compiled FX graph, whose file holds the graph's code and stays.

    Inductor logs this file as "Output code written to"; upstream's temporary
    file is deleted when the process ends. Ours is in Inductor's cache dir, as
    the Python wrapper's code is, and holds the graph, its subgraphs and the
    lowered code that runs (:func:`inductor_fx_unbacked._logging.graph_source`).
    """

    def __post_init__(self) -> None:
        self.source = _logging.graph_source(self.gm, self.compiled_fn)
        self._path = _logging.write_graph_source(self.source)

    @property
    def __file__(self) -> str:
        return self._path


class InterpreterFxWrapperCodegen(FxWrapperCodegen):
    """The FX wrapper codegen of the CPU mode: kernels run in Triton's interpreter."""

    converter_class = InterpreterFxConverter


def strip_runtime_asserts(gm: torch.fx.GraphModule) -> int:
    """Remove the nodes tagged ``meta["runtime_assert"]``; return how many.

    For consumers that verify shapes themselves. Only the tagged nodes go (the
    checks and their token chain); the values they checked stay, as other nodes
    may use them.
    """
    asserts = [node for node in gm.graph.nodes if node.meta.get("runtime_assert")]
    for node in reversed(asserts):
        tokens = [arg for arg in node.args if isinstance(arg, torch.fx.Node) and arg in asserts]
        # A check's users are later checks, through the token: give them its own.
        node.replace_all_uses_with(tokens[-1] if tokens else None)
        gm.graph.erase_node(node)
    if asserts:
        gm.recompile()
    return len(asserts)


RUNNERS = ("lowered", "graph")


@contextlib.contextmanager
def fx_backend(
    device: str | torch.device, *, runtime_asserts: bool = True, runner: str = "lowered"
) -> Iterator[None]:
    """Compile for ``device`` with Inductor's FX wrapper backend, overlay enabled.

    Registers the FX wrapper codegen in both the JIT wrapper slot (``torch.compile``)
    and the ``fx_wrapper`` slot (``aot_compile(..., options={"fx_wrapper": True})``)
    of the device, keeping its scheduling and C++ wrapper. For ``"cpu"``, Triton
    kernels run in Triton's interpreter, ``config.cpu_backend`` is ``"triton"``
    inside the context only, and ``TRITON_INTERPRET=1`` must have been set before
    Triton was imported. On exit, the previous registration, config, Triton
    driver and overlay state are restored, also when the body raises.

    Runtime checks (value ranges of unbacked symbols, ``torch._check``, output
    size/stride and alignment) are FX nodes tagged ``meta["runtime_assert"]``;
    ``runtime_asserts=False`` leaves them out, for consumers that verify shapes
    themselves.

    ``device`` is a device type or a device (``"cuda"``, ``"cuda:1"``,
    ``torch.device("cuda")``); the backend is registered for the whole type.

    ``runner`` says how compiled graphs run: ``"lowered"`` (the default) runs a
    lowered copy of each graph that launches Inductor's precompiled kernels and
    branches in Python (:func:`inductor_fx_unbacked.runner.lower`); ``"graph"``
    runs ``gm.forward`` as upstream does. Either way the graphs themselves, as
    ``capture_fx_graphs`` and ``recording_graphs`` return them, are the same.
    """
    device = device_type(device)
    if runner not in RUNNERS:
        raise ValueError(f"fx_backend supports runners {RUNNERS}, not {runner!r}")
    if device == "cpu":
        require_interpreter()
        _overlay.fix_interpreter()
    common.init_backend_registration()
    with contextlib.ExitStack() as stack:
        if not _overlay.is_enabled():
            _overlay.enable()
            stack.callback(_overlay.disable)
        stack.callback(_restore_registration(device))
        codegen = FxWrapperCodegen if device == "cuda" else InterpreterFxWrapperCodegen
        register_fx_wrapper(device, codegen, runner=runner, runtime_asserts=runtime_asserts)
        if device == "cpu":
            stack.enter_context(config.patch(cpu_backend="triton"))
            stack.enter_context(interpreter_driver())
        yield


def register_fx_wrapper(
    device: str, codegen: type[FxWrapperCodegen], *, runner: str, runtime_asserts: bool
) -> None:
    """Register ``codegen`` (with ``runner`` and ``runtime_asserts``) as ``device``'s JIT
    and ``fx_wrapper`` codegen, keeping the device's scheduling and C++ wrapper, and
    its artifact identity as the device's custom backend pass (``caching``)."""
    if not runtime_asserts or runner != codegen.runner:
        options = {"runtime_asserts": runtime_asserts, "runner": runner}
        codegen = type(codegen.__name__, (codegen,), options)
    previous = common.device_codegens[device]
    # The artifact's identity goes into Inductor's and AOTAutograd's cache
    # keys through the device's custom backend pass (inductor_fx_unbacked.caching).
    identity = ArtifactIdentity(
        device, runner, runtime_asserts, common.custom_backend_passes.get(device)
    )
    common.register_backend_for_device(
        device,
        previous.scheduling,
        codegen,
        previous.cpp_wrapper_codegen,
        codegen,
        identity,
        common.custom_backend_codegen_configs.get(device),
    )


def device_type(device: str | torch.device) -> str:
    """The device type ``fx_backend`` registers for, checked: a supported type, and
    for CUDA, one that this machine has."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise ValueError(
            f"fx_backend got {device!r}, which is not a device: it supports "
            f"{' and '.join(map(repr, SUPPORTED_DEVICES))} (a device type, or a device such "
            f"as 'cuda:1'){_did_you_mean(device)}"
        ) from None
    if kind not in SUPPORTED_DEVICES:
        raise ValueError(f"fx_backend supports devices {SUPPORTED_DEVICES}, not {device!r}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"fx_backend({device!r}): this machine has no CUDA device (torch "
            f"{torch.__version__}, CUDA build: {torch.version.cuda is not None}); "
            "use fx_backend('cpu') to run Triton kernels in Triton's interpreter"
        )
    return kind


#: Names people use for a GPU, which torch calls "cuda" (on AMD GPUs too).
_GPU_NAMES = ("gpu", "nvidia", "amd", "rocm", "triton")


def _did_you_mean(device: Any) -> str:
    if not isinstance(device, str):
        return ""
    name = device.split(":")[0].strip().lower()
    if name in _GPU_NAMES:
        return f"; for a GPU, use {'cuda' + device.strip()[len(name) :]!r}"
    close = difflib.get_close_matches(name, SUPPORTED_DEVICES, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _restore_registration(device: str) -> Callable[[], None]:
    """Return a callback that puts back the device's registration exactly as it is now."""
    tables: list[dict[str, Any]] = [
        common.device_codegens,
        common.custom_backend_passes,
        common.custom_backend_codegen_configs,
    ]
    missing = object()
    saved = [table.get(device, missing) for table in tables]

    def restore() -> None:
        for table, value in zip(tables, saved):
            if value is missing:
                table.pop(device, None)
            else:
                table[device] = value

    return restore


@dataclasses.dataclass
class CapturedGraphs:
    """The result of one compiled call, and every FX graph compiled for it."""

    outputs: Any
    graphs: list[torch.fx.GraphModule]


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def capture_fx_graphs(
    fn: Callable[..., Any], *args: Any, device: str | None = None, **compile_kwargs: Any
) -> CapturedGraphs:
    """Compile ``fn`` with the FX backend, call it on ``args``, and return the graphs.

    ``graphs`` holds every ``GraphModule`` the FX converter produced for the call,
    in the order it produced them: subgraphs (such as ``torch.cond`` branches)
    before the graph that uses them, forward before backward. ``compile_kwargs``
    go to ``torch.compile``. The caller's Inductor config is used as it is. To
    make sure the call compiles afresh, Dynamo's caches are reset first.
    """
    if not callable(fn):
        raise TypeError(f"capture_fx_graphs needs a function or module to compile, not {fn!r}")
    device = device_type(device or default_device())
    breaks_before = dict(counters["graph_break"])
    with fx_backend(device), recording_graphs() as graphs:
        torch._dynamo.reset()
        outputs = torch.compile(fn, **compile_kwargs)(*args)
    if not graphs:
        raise RuntimeError(_why_no_graph(fn, args, device, compile_kwargs))
    breaks = [
        reason
        for reason, count in counters["graph_break"].items()
        if count > breaks_before.get(reason, 0)
    ]
    if breaks and not any(_defined_symbols(gm) for gm in graphs):
        warnings.warn(NoUnbackedSymbolWarning(_why_no_symbol(fn, breaks)), stacklevel=2)
    return CapturedGraphs(outputs, graphs)


class NoUnbackedSymbolWarning(UserWarning):
    """A capture defines no unbacked symbol because Dynamo split the function."""


def _defined_symbols(gm: torch.fx.GraphModule) -> list[Any]:
    return [node for node in gm.graph.nodes if node.meta.get("unbacked_symbol") is not None]


def _why_no_symbol(fn: Any, breaks: list[str]) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    reasons = "; ".join(sorted({reason.strip().splitlines()[0] for reason in breaks}))
    return (
        f"capture_fx_graphs({name}) defines no unbacked symbol: Dynamo split the function "
        f"at a graph break ({reasons}), so the data-dependent operation ran eagerly. "
        "Pass fullgraph=True to see the error at the break; for nonzero, boolean masks "
        "and unique, set torch._dynamo.config.capture_dynamic_output_shape_ops = True, "
        "and for .item(), torch._dynamo.config.capture_scalar_outputs = True."
    )


def _why_no_graph(fn: Any, args: tuple[Any, ...], device: str, compile_kwargs: dict) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    devices = sorted(
        {
            str(leaf.device.type)
            for leaf in pytree.tree_leaves(args)
            if isinstance(leaf, torch.Tensor)
        }
    )
    if not devices:
        reason = "its arguments hold no tensor, so there was nothing for Inductor to compile"
    elif device not in devices:
        reason = (
            f"its tensors are on {', '.join(devices)}, not {device}, so Inductor compiled "
            f"them with another backend (pass device={devices[0]!r})"
        )
    elif compile_kwargs.get("fullgraph"):
        reason = "Dynamo compiled it, but no graph reached Inductor (it computes nothing)"
    else:
        reason = "Dynamo ran it eagerly (pass fullgraph=True to see why)"
    return f"compiling {name!r} for {device} produced no FX graph: {reason}"


@contextlib.contextmanager
def recording_graphs() -> Iterator[list[torch.fx.GraphModule]]:
    """Collect every GraphModule that the FX backends of this package produce inside."""
    graphs: list[torch.fx.GraphModule] = []
    _graph_sinks.append(graphs)
    try:
        yield graphs
    finally:
        _graph_sinks.remove(graphs)
