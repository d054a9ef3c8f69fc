"""The FX backend as Inductor sees it: a wrapper codegen, registered per device.

``fx_backend(device)`` registers :class:`FxWrapperCodegen` as the device's
wrapper codegen (for ``torch.compile`` and for ``aot_compile(..., fx_wrapper=True)``)
with the overlay enabled. Each graph it produces is converted
(``codegen/``), handed out as a self-contained artifact (``artifact/``), given
to ``recording_graphs``, shown in the logs, run by the chosen runner
(``runner/``), and stored in Inductor's caches (``caches.py``).
"""

from __future__ import annotations

import contextlib
import difflib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._inductor import config
from torch._inductor.codegen import common
from torch._inductor.codegen.common import FileBackedGraphModule
from torch._inductor.codegen.wrapper_fxir import FxConverter, WrapperFxCodegen
from torch._inductor.virtualized import V

from .. import _compat
from .. import runner as runners
from ..artifact.kernels import apply_releases, hold_subgraph_kernels, release_unfinished
from ..artifact.store import hand_out
from ..codegen.converters import InterpreterFxConverter, SourcedFxConverter
from ..codegen.fx_checks import strip_runtime_asserts
from ..codegen.kernels import CONVERTED_KERNELS, converted_kernels
from ..runner import cuda_graphs
from . import caches, graph_breaks, logs, overlay
from .cpu_mode import interpreter_driver, require_interpreter
from .recording import record_graphs
from .sharing import BackendOptions, holding

SUPPORTED_DEVICES = ("cuda", "cpu")
log = logging.getLogger(__name__)


class FxWrapperCodegen(WrapperFxCodegen):
    """Upstream's FX wrapper codegen, with a pluggable converter and runner, whose
    graphs are self-contained artifacts that Inductor's caches can store."""

    converter_class: type[FxConverter] = SourcedFxConverter
    #: Inductor's FX graph cache stores the artifact (``caches.py``).
    supports_caching: bool = True
    #: Whether graphs keep the nodes tagged ``meta["runtime_assert"]``.
    runtime_asserts: bool = True
    #: How compiled graphs run (``inductor_fx_unbacked.runner``): ``"lowered"`` or
    #: ``"graph"`` (upstream's default, ``gm.forward``).
    runner: str = "lowered"
    #: Whether the lowered runner replays CUDA graphs; None: under reduce-overhead.
    cuda_graphs: bool | None = None
    #: Whether reductions over masked selections are computed without the selection
    #: (``codegen/masked_reductions.py``), where no data-dependent size escapes.
    sync_free: bool = True

    def compile_graph(self, gm: torch.fx.GraphModule) -> Callable[..., Any]:
        """The callable that runs ``gm``; ``gm`` itself is left as it is."""
        return runners.compile_graph(gm, self.runner, cuda_graphs=self.captures())

    def captures(self) -> bool:
        """Whether the graphs compiled now replay CUDA graphs (``runner/cuda_graphs.py``)."""
        # A subgraph's stretches are made by the graph that holds it, in its branches.
        if self.runner != "lowered" or self.is_subgraph:
            return False
        return cuda_graphs.wanted(self.cuda_graphs)

    def _generate(self, is_inference: bool) -> tuple[FileBackedGraphModule, None]:
        self.run_wrapper_ir_passes(is_inference)
        overlay_enabled = overlay.is_enabled()
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
        if self.is_subgraph:
            # Handed out with the graph that holds it; upstream never runs it alone.
            record_graphs([gm])
            subgraph = _SubgraphModule(gm, self.compile_graph(gm))
            subgraph.kernels = hold_subgraph_kernels(gm)
            return subgraph, None
        hand_out(gm)
        record_graphs([gm])
        compiled = ShownGraphModule(gm, self.compile_graph(gm))
        logs.show_graph(compiled.source, compiled.__file__)
        if V.graph.aot_mode:
            # The AOT module is the graph itself: its calls run through the runner.
            hand_out(gm, runner=compiled.compiled_fn)
        else:
            caches.store_artifact(gm, self.runner, compiled.source, cuda_graphs=self.captures())
        return compiled, None

    def _convert(self) -> torch.fx.GraphModule:
        converter = self.converter_class(
            lines=self.lines,
            prologue="\n".join([self.imports.getvalue(), self.header.getvalue()]),
            graph_inputs=self.get_fx_graph_inputs(),
            graph_outputs=self.get_graph_outputs(),
            subgms=self.subgms,
            is_subgraph=self.is_subgraph,
        )
        try:
            gm = converter.generate()
        except BaseException:
            release_unfinished(converted_kernels(converter))
            raise
        gm.meta[CONVERTED_KERNELS] = converted_kernels(converter)
        return gm


class ShownGraphModule(FileBackedGraphModule):
    """Upstream's compiled FX graph, whose file holds the graph's code and stays.

    Inductor logs this file as "Output code written to"; upstream's temporary
    file is deleted when the process ends. Ours is in Inductor's cache dir, as
    the Python wrapper's code is, and holds the graph, its subgraphs and the
    lowered code that runs (:func:`logs.graph_source`).
    """

    def __post_init__(self) -> None:
        self.source = logs.graph_source(self.gm, self.compiled_fn)
        self._path = logs.write_graph_source(self.source)

    @property
    def __file__(self) -> str:
        return self._path


class _SubgraphModule(FileBackedGraphModule):
    """A subgraph's result: only its graph is read (by the graph that holds it)."""

    def __post_init__(self) -> None:
        pass

    @property
    def __file__(self) -> str:
        raise NotImplementedError("a subgraph of the FX backend has no file of its own")


class InterpreterFxWrapperCodegen(FxWrapperCodegen):
    """The FX wrapper codegen of the CPU mode: kernels run in Triton's interpreter."""

    converter_class = InterpreterFxConverter

    def captures(self) -> bool:
        return False  # Triton's interpreter launches nothing on a GPU


RUNNERS = runners.RUNNERS


#: Inductor's config in the CPU mode: Triton kernels for the CPU, and no compile
#: worker pool. The interpreter runs a kernel from its source, so the pool's
#: workers would compile nothing; starting them cost each process about 8 CPU
#: seconds, and shutting them down about 9 s at exit (torch 2.10, two cores).
CPU_MODE_CONFIG = {"cpu_backend": "triton", "compile_threads": 1}


@contextlib.contextmanager
def fx_backend(
    device: str | torch.device,
    *,
    runtime_asserts: bool = True,
    runner: str = "lowered",
    cuda_graphs: bool | None = None,
    sync_free: bool = True,
) -> Iterator[None]:
    """Compile for ``device`` with Inductor's FX wrapper backend, overlay enabled.

    Registers the FX wrapper codegen in both the JIT wrapper slot (``torch.compile``)
    and the ``fx_wrapper`` slot (``aot_compile(..., fx_wrapper=True)``) of the
    device, keeping its scheduling and C++ wrapper. For ``"cpu"``, Triton kernels
    run in Triton's interpreter, ``config.cpu_backend`` is ``"triton"`` and
    ``config.compile_threads`` is 1 inside the context only (:data:`CPU_MODE_CONFIG`),
    and ``TRITON_INTERPRET=1`` must have been set before Triton was imported.

    The registration, the overlay and Triton's driver are process-wide, and shared
    by reference count (``sharing.py``): threads inside ``fx_backend`` with the same
    options share them, the last one to leave restores the previous registration,
    config, driver and overlay state (also when the body raises), and a thread
    asking for other options for a device that another thread holds gets
    :class:`FxBackendConflictError`. One thread may nest other options.

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

    ``cuda_graphs`` says whether the lowered runner captures the stretches of
    device work between host syncs as CUDA graphs and replays them
    (``runner/cuda_graphs.py``); None (the default) does where the graph is compiled
    under ``mode="reduce-overhead"``. Never in the CPU mode.

    ``sync_free`` computes a reduction over a masked selection (``x[mask].sum()``,
    a mean, a count) over the mask, without the selection and its host sync, where
    no data-dependent size escapes (``codegen/masked_reductions.py``); False keeps
    upstream's graph (for comparison). Part of the artifact's identity.
    """
    options = BackendOptions(device_type(device), runner, runtime_asserts, cuda_graphs, sync_free)
    if runner not in RUNNERS:
        raise ValueError(f"fx_backend supports runners {RUNNERS}, not {runner!r}")
    if cuda_graphs and runner != "lowered":
        raise ValueError(f"fx_backend(cuda_graphs=True) needs runner='lowered', not {runner!r}")
    if options.device == "cpu":
        require_interpreter()
        overlay.fix_interpreter()
    with contextlib.ExitStack() as stack:
        # Graphs dropped since the last write leave the side table: nothing compiles
        # in this thread now, and the update never changes a dict being walked.
        apply_releases()
        stack.callback(apply_releases)
        stack.enter_context(holding(options, _apply_process_wide))
        if options.device == "cpu" and _compat.INDUCTOR_CONFIG_IS_PER_THREAD:
            stack.enter_context(config.patch(CPU_MODE_CONFIG))
        subject = f"torch.compile inside fx_backend({options.device!r})"
        stack.enter_context(graph_breaks.warning_when_breaks_leave_no_symbol(subject))
        yield


def _apply_process_wide(options: BackendOptions, undo: contextlib.ExitStack) -> None:
    """Register the FX wrapper codegen of ``options`` and, for the CPU mode, make
    Triton's interpreter the driver (and set :data:`CPU_MODE_CONFIG` where Inductor's
    config is process-wide); ``undo`` puts back what was there."""
    common.init_backend_registration()
    undo.callback(_restore_registration(options.device))
    codegen = FxWrapperCodegen if options.device == "cuda" else InterpreterFxWrapperCodegen
    register_fx_wrapper(
        options.device,
        codegen,
        runner=options.runner,
        runtime_asserts=options.runtime_asserts,
        cuda_graphs=options.cuda_graphs,
        sync_free=options.sync_free,
    )
    if options.device == "cpu":
        if not _compat.INDUCTOR_CONFIG_IS_PER_THREAD:
            undo.enter_context(config.patch(CPU_MODE_CONFIG))
        undo.enter_context(interpreter_driver())


def register_fx_wrapper(
    device: str,
    codegen: type[FxWrapperCodegen],
    *,
    runner: str,
    runtime_asserts: bool,
    cuda_graphs: bool | None = None,
    sync_free: bool = True,
) -> None:
    """Register ``codegen`` (with ``runner``, ``runtime_asserts``, ``cuda_graphs`` and
    ``sync_free``) as ``device``'s JIT and ``fx_wrapper`` codegen, keeping the device's
    scheduling and C++ wrapper, and its artifact identity as the device's custom
    backend pass (``caches.py``)."""
    options = {
        "runtime_asserts": runtime_asserts,
        "runner": runner,
        "cuda_graphs": cuda_graphs,
        "sync_free": sync_free,
    }
    if any(getattr(codegen, name) != value for name, value in options.items()):
        codegen = type(codegen.__name__, (codegen,), options)
    if device == "cuda":
        # Before anything in this process reads Triton's ptxas version: Triton's
        # cache keys hold it (read once per process), and Inductor points Triton at
        # torch's ptxas (13.0 for torch 2.11+cu130; Triton 3.6's own is 12.8) only
        # where it compiles. A warm start's first cache hit reads it before any
        # wrapper is made; without this, cold and warm processes would give the
        # runner's kernels different keys.
        _compat.use_inductors_ptxas()
    previous = common.device_codegens[device]
    # The artifact's identity goes into Inductor's and AOTAutograd's cache
    # keys through the device's custom backend pass (caches.py).
    identity = caches.FxArtifactIdentity(
        device,
        runner,
        runtime_asserts,
        common.custom_backend_passes.get(device),
        cuda_graphs,
        sync_free,
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
    supported = " and ".join(map(repr, SUPPORTED_DEVICES))
    name = device.split(":")[0].strip().lower() if isinstance(device, str) else None
    if name in _OTHER_ACCELERATORS:
        raise ValueError(
            f"fx_backend supports {supported}, not {device!r}: Inductor's FX wrapper backend "
            "compiles Triton kernels for CUDA GPUs (and, in the CPU mode, runs them in "
            "Triton's interpreter)"
        )
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"fx_backend got {device!r}, which is not a device: it supports {supported} "
            f"(a device type, or a device such as 'cuda:1'){_did_you_mean(device)}"
        ) from None
    kind = parsed.type
    if kind not in SUPPORTED_DEVICES:
        raise ValueError(f"fx_backend supports devices {SUPPORTED_DEVICES}, not {device!r}")
    if kind == "cpu" and parsed.index not in (None, 0):
        raise ValueError(
            f"fx_backend got {device!r}: the CPU mode runs Triton's interpreter on the host, "
            "which has no CPU devices to choose from; use 'cpu'"
        )
    if kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"fx_backend({device!r}): this machine has no CUDA device (torch "
            f"{torch.__version__}, CUDA build: {torch.version.cuda is not None}); "
            "use fx_backend('cpu') to run Triton kernels in Triton's interpreter"
        )
    return kind


#: Names people use for a GPU, which torch calls "cuda" (on AMD GPUs too).
_GPU_NAMES = ("gpu", "nvidia", "amd", "rocm", "triton")
#: Other accelerators: never a misspelling of "cpu" or "cuda".
_OTHER_ACCELERATORS = ("tpu", "xla", "xpu", "hpu", "ipu", "npu", "mps", "mtia", "privateuseone")


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


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"
