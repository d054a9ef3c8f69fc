"""The process-wide state that one compile can leave for the next, as plain values.

Users compile many programs in one process, so nothing a test does through the
package may change what a later compile does: ``conftest.py`` takes a
:func:`snapshot` before and after every test and fails the test that changed
one (:func:`changes`). What is compared: the package's own process-wide state
(``fx_backend``'s held layers, the overlay, the recording blocks of this
thread, the CUDA-graph limits), upstream's that the package uses (each device's
wrapper codegen registration and custom backend passes, Triton's active
driver), every config a compile reads (Inductor's, Dynamo's, AOTAutograd's,
``torch.compiler``'s) and the environment variables torch and Triton read, with
Dynamo's stance and callback, the tracing and dispatch contexts (the fake,
functional and proxy modes, upstream's process-wide flags of them and Dynamo's
eval-frame override, FX's symbolic tracing), grad mode, deterministic
algorithms, the default dtype and the CUDA device and stream; the runner's
compaction kernels (where they run), the CUDA graphs the
runner keeps captured, and upstream's kernel side table (the package's entries
that no graph owns: :func:`_unowned_side_table_entries`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

#: The fake, functional and proxy modes' slots, outside the dispatch mode stack.
_INFRA_MODE_KEYS = tuple(torch._C._TorchDispatchModeKey.__members__.values())


def snapshot() -> dict[str, Any]:
    """The state, by name; values compare with ``==`` (objects by identity)."""
    from torch._inductor.codegen import common

    from inductor_fx_unbacked.integration import overlay, recording, sharing, thread_flags
    from inductor_fx_unbacked.runner import compaction, cuda_graphs

    # The registration every compile makes first, once per process.
    common.init_backend_registration()
    state: dict[str, Any] = {
        "fx_backend layers": {
            device: [str(layer.options) for layer in layers]
            for device, layers in sharing._layers.items()
        },
        "overlay enabled": overlay.is_enabled(),
        "recording blocks in this thread": len(recording._thread_sinks()),
        "CUDA-graph limits": repr(cuda_graphs.LIMITS),
        # Captured graphs hold device memory, and the room left decides whether a
        # later stretch captures: a test releases what it captured.
        "CUDA graphs kept": (len(cuda_graphs.MEMORY.entries), cuda_graphs.MEMORY.total_bytes),
        # The compaction kernels keep one ticket per stream, zero between
        # launches (a test that leaves one non-zero broke a later call's count);
        # their launchers are a cache keyed by all a launch depends on, which
        # fresh_cache() forgets.
        "compaction kernels interpreted": compaction.INTERPRETED,
        "compaction tickets not at zero": sorted(
            str(key) for key, ticket in compaction._TICKETS.items() if ticket.item() != 0
        ),
        "kernel side table entries no graph owns": _unowned_side_table_entries(),
        "device codegens": _by_identity(common.device_codegens),
        "custom backend passes": _by_identity(common.custom_backend_passes),
        "custom backend codegen configs": _by_identity(common.custom_backend_codegen_configs),
        "grad mode": torch.is_grad_enabled(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "default dtype": torch.get_default_dtype(),
        "dynamo stance": repr(getattr(torch._dynamo.eval_frame, "_stance", None)),
        "dynamo eval-frame callback": repr(torch._C._dynamo.eval_frame.get_eval_frame_callback()),
        "tracing context": repr(torch._guards.TracingContext.try_get()),
        "compile context": repr(torch._guards.CompileContext.try_get()),
        "dispatch modes": len(torch.utils._python_dispatch._get_current_dispatch_mode_stack()),
        "infra dispatch modes": [
            type(mode).__name__
            for mode in map(torch._C._get_dispatch_mode, _INFRA_MODE_KEYS)
            if mode is not None
        ],
        # Process-wide, set and restored around calls; Dynamo skips frames while set.
        "upstream's thread flags": thread_flags.flags(),
        "FX symbolic tracing": torch.fx._symbolic_trace.is_fx_symbolic_tracing(),
        "torch function modes": torch._C._len_torch_function_stack(),
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "Inductor's virtualized handlers set": sorted(_set_virtualized()),
        "TF32 matmuls": torch.backends.cuda.matmul.allow_tf32,
        "cuDNN flags": (
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark,
            torch.backends.cudnn.deterministic,
        ),
    }
    state.update(
        (f"environment {name}", value)
        for name, value in os.environ.items()
        if name.startswith(("TORCH", "TRITON", "PYTORCH", "CUDA", "INDUCTOR"))
    )
    if torch.cuda.is_initialized():
        state["CUDA device"] = torch.cuda.current_device()
        state["CUDA stream"] = torch.cuda.current_stream().cuda_stream
        state["CUDA stream capturing"] = torch.cuda.is_current_stream_capturing()
    for name, module in _configs().items():
        state.update({f"{name}.{key}": value for key, value in _config_values(module).items()})
    if "triton" in sys.modules:
        from triton.runtime import driver

        state["Triton's active driver"] = _active_driver(driver)
    return state


#: What a process's first CUDA use sets, as CUDA sets it: a test that initialises
#: CUDA (absent before) and leaves these values has changed nothing a compile reads.
CUDA_AS_INITIALISED = {"CUDA device": 0, "CUDA stream": 0, "CUDA stream capturing": False}
#: Variables that upstream's first Triton compile for a GPU sets once per process
#: (``torch/_inductor/runtime/compile_tasks.py``: the libdevice that matches torch's
#: CUDA, for its compile workers to inherit): appearing, they are not a leak.
SET_ONCE_BY_UPSTREAM = frozenset({"environment TRITON_LIBDEVICE_PATH"})
#: Set once per process by the package itself, to the value upstream's compile
#: workers set (``_compat.use_inductors_ptxas``, where the FX wrapper is registered for
#: CUDA, where the compaction kernels compile and where an artifact loads): accepted
#: with exactly that value (:func:`inductors_ptxas`), reported with any other.
SET_ONCE_BY_THE_PACKAGE = "environment TRITON_PTXAS_PATH"


def inductors_ptxas() -> str | None:
    """The ``TRITON_PTXAS_PATH`` that upstream's ``_set_triton_ptxas_path`` (which
    the package calls) sets in a process where it is unset: torch's own ptxas, or
    None where this build has none. Read by running it on a scratch environment."""
    from torch._inductor.runtime import compile_tasks

    set_ptxas_path = compile_tasks._set_triton_ptxas_path
    # Cached (runs once per process) on some releases: its body is what decides.
    set_ptxas_path = getattr(set_ptxas_path, "__wrapped__", set_ptxas_path)
    saved = dict(os.environ)
    try:
        os.environ.pop("TRITON_PTXAS_PATH", None)
        set_ptxas_path()
        return os.environ.get("TRITON_PTXAS_PATH")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _appears_as_expected(key: str, value: Any) -> bool:
    if key in CUDA_AS_INITIALISED:
        return value == CUDA_AS_INITIALISED[key]
    if key == SET_ONCE_BY_THE_PACKAGE:
        return value is not None and value == inductors_ptxas()
    return key in SET_ONCE_BY_UPSTREAM


def _unowned_side_table_entries() -> list[int]:
    """The indices of upstream's kernel side table at which the package placed a kernel
    or constant arguments that no live graph owns and no dropped graph's release
    names: nothing will ever release them.

    The table grows with every compile and a dropped graph's entries are released
    at the package's next write (``artifact/kernels.py``), after its finalizer ran,
    whenever the collector gets to it: counting entries would depend on that
    timing. An entry that no owner counts and no queued release names does not:
    it stays for the life of the process (a compile that placed kernels and handed
    out no graph). Upstream's own entries (positions below the package's indices)
    are Dynamo's: its reset empties them.
    """
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    from inductor_fx_unbacked.artifact import kernels as owned
    from inductor_fx_unbacked.codegen.kernels import RELEASED, STABLE_INDEX_BASE

    pending = {key for keys in list(owned._dropped) for key in keys}
    unowned = []
    for kind, table in (
        ("kernel", dict(kernel_side_table.id_to_kernel)),
        ("constant_args", dict(kernel_side_table.constant_args)),
    ):
        for index, entry in table.items():
            key = (kind, index)
            if index < STABLE_INDEX_BASE or entry is RELEASED:
                continue
            if owned._users.get(key, 0) <= 0 and key not in pending:
                unowned.append(index)
    return sorted(unowned)


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What differs between two snapshots, one line each."""
    lines = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key, "<absent>"), after.get(key, "<absent>")
        if key not in before and _appears_as_expected(key, new):
            continue
        if not _same(old, new):
            lines.append(f"{key}: {_short(old)} -> {_short(new)}")
    return lines


def _set_virtualized() -> list[str]:
    """Inductor's virtualized handlers (``V.graph``, ``V.ops``, ...) that hold something
    other than their default in this thread, by name and type: set during a compile."""
    from torch._inductor import virtualized

    found = []
    for name, value in vars(virtualized).items():
        if not isinstance(value, virtualized.Virtualized):
            continue
        held = getattr(virtualized.threadlocal, value._key, None)
        if held is None or isinstance(held, virtualized.NullHandler):
            continue
        default = value._default
        if default is not virtualized.NullHandler and type(held) is type(default()):
            continue
        found.append(f"{name}: {type(held).__name__}")
    return found


def _configs() -> dict[str, Any]:
    import torch._functorch.config
    import torch._inductor.config
    import torch.compiler.config

    return {
        "torch._inductor.config": torch._inductor.config,
        "torch._dynamo.config": torch._dynamo.config,
        "torch._functorch.config": torch._functorch.config,
        "torch.compiler.config": torch.compiler.config,
    }


def _config_values(module: Any) -> dict[str, Any]:
    values = module.get_config_copy()
    return {key: _comparable(value) for key, value in values.items() if not key.startswith("_")}


def _comparable(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str, type(None), tuple, frozenset)):
        return value
    if isinstance(value, set):
        return frozenset(map(repr, value))
    if isinstance(value, (list, dict)):
        return repr(value) if len(repr(value)) < 2000 else ("<object>", id(value))
    return ("<object>", id(value))


def _by_identity(table: dict[str, Any]) -> dict[str, Any]:
    return {key: id(value) for key, value in table.items()}


def _active_driver(driver: Any) -> str:
    """Which driver Triton launches with, read without choosing one (``driver.active``
    would): the default (none chosen yet, or reset to it) or another, by type."""
    active = getattr(driver, "_active", None)
    if active is None or active is getattr(driver, "_default", None):
        return "default"
    return type(active).__name__


def _same(old: Any, new: Any) -> bool:
    try:
        return bool(old == new)
    except Exception:  # noqa: BLE001 - values that cannot compare are compared by identity
        return old is new


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 200 else text[:197] + "..."
