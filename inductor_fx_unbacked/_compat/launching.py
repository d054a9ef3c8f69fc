"""How the runner's own Triton kernels compile and launch as Inductor's do: with
Inductor's ptxas and its static launcher, on every supported release."""

from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

log = logging.getLogger(__name__)


def use_inductors_ptxas() -> None:
    """Point Triton at the ptxas Inductor compiles with (torch's own), as Inductor's
    compile workers do when they start, before this process first reads its version:
    Triton's cache keys hold it (read once per process), so a kernel compiled in
    one process gets the same key in the next."""
    from torch._inductor.runtime import compile_tasks

    compile_tasks._set_triton_ptxas_path()


class _CompiledWithoutCubinFile:
    """A kernel that Triton's JIT compiled, as Inductor's static launcher reads it:
    with no cubin file (Inductor records one for the kernels it compiles)."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        self._cubin_path = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)


def static_launcher(kernel: Any) -> Any:
    """Inductor's static launcher (``StaticallyLaunchedCudaKernel``) for ``kernel``,
    compiled by Triton's JIT, not yet loaded: it holds the binary and pickles (as
    Inductor's cache stores it). None where it cannot launch the kernel (hooks,
    scratch memory, a ROCm or older build)."""
    from torch._inductor.runtime.triton_heuristics import StaticallyLaunchedCudaKernel

    try:
        return StaticallyLaunchedCudaKernel(_CompiledWithoutCubinFile(kernel))
    except Exception as e:  # noqa: BLE001 - Triton's own launcher serves instead
        log.info("Bypassing StaticallyLaunchedCudaKernel for %s due to %s", kernel.name, e)
        return None


def load_static_launcher(static: Any, device_index: int) -> bool:
    """Load a static launcher that holds its binary onto the device; then its
    ``run(grid_x, grid_y, grid_z, stream, *args)`` takes the arguments but the
    constexprs. False where that fails, with the reason logged."""
    try:
        with tempfile.TemporaryDirectory() as directory:
            static.reload_cubin_from_raw(os.path.join(directory, f"{static.name}.cubin"))
            static.load_kernel(device_index)
    except Exception as e:  # noqa: BLE001 - the caller compiles or launches otherwise
        name = getattr(static, "name", type(static).__name__)
        log.info("Cannot load the static launcher of %s on cuda:%s: %s", name, device_index, e)
        return False
    return True


def triton_compile_key(device_index: int) -> tuple[str, str, str]:
    """What Triton keys a compile by, besides the kernel's source, its arguments'
    specialization, its constexprs and the environment: Triton's build
    (``triton_key()``: its compiler, backends, language and ``libtriton``), the
    backend's hash (the ptxas version and the architecture) and that of the options
    a launch without options compiles with (ptxas options, libdevice and the
    defaults they come from), read as Triton's JIT reads them for the device."""
    import torch
    from torch._inductor.runtime.triton_compat import triton_key
    from triton.compiler.compiler import make_backend
    from triton.runtime.driver import driver

    with torch.cuda.device(device_index):
        target = driver.active.get_current_target()
    backend = make_backend(target)
    return triton_key(), backend.hash(), backend.parse_options({}).hash()


def triton_cache_invalidating_env_vars() -> dict[str, str]:
    """The environment variables, set in this process, that Triton keys its compiles by."""
    from triton._C.libtriton import get_cache_invalidating_env_vars

    return dict(get_cache_invalidating_env_vars())
