"""Differences between the supported torch releases, by feature, in one place."""

from __future__ import annotations

from typing import Any


def ensure_kernel_loaded(tuner: Any) -> None:
    """Make sure a kernel compiled in a worker process has its Python function.

    Parallel compile workers strip ``JITFunction.fn`` before pickling the
    autotuner back; a kernel stored in the Triton side table in that state fails
    at run time inside ``JITFunction.run``. Torch 2.13 reloads it with
    ``CachingAutotuner._ensure_kernel_loaded``; torch 2.11 has only the stashed
    ``_reload_kernel`` callback.
    """
    if hasattr(tuner, "_ensure_kernel_loaded"):
        tuner._ensure_kernel_loaded()
    elif getattr(tuner.fn, "fn", True) is None:
        tuner.fn = tuner._reload_kernel().fn
