"""The config of an ahead-of-time compile whose wrapper is an FX graph.

``aot_compile(..., options={"fx_wrapper": True})`` compiles under the C++
wrapper's config (``compile_fx.get_cpp_wrapper_config``), whose
``triton.store_cubin`` keeps each kernel's binary for a C++ wrapper to embed. An
FX graph embeds none: it launches its kernels through their autotuners'
launchers, as a ``torch.compile`` of the same program does. But with
``store_cubin`` set, Inductor refuses its static launcher
(``StaticTritonCompileResult.can_statically_launch``), so every kernel of the AOT
module ran through Triton's own launcher, and ``ifx.compile``'s through the
static one. Under the FX wrapper, ``store_cubin`` keeps the value it has
outside (``False`` unless the user set it); the C++ wrapper keeps upstream's
config.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from torch._inductor import config

CppWrapperConfig = Callable[..., dict[str, Any]]


def keeping_cubins_unstored(get_cpp_wrapper_config: CppWrapperConfig) -> CppWrapperConfig:
    """Wrap ``compile_fx.get_cpp_wrapper_config``: upstream's config, with
    ``triton.store_cubin`` as it is where the wrapper is an FX graph."""

    @functools.wraps(get_cpp_wrapper_config)
    def wrapper(*args: Any, **kwargs: Any) -> dict[str, Any]:
        patches = get_cpp_wrapper_config(*args, **kwargs)
        if config.fx_wrapper and not config.cpp_wrapper:
            patches = {**patches, "triton.store_cubin": config.triton.store_cubin}
        return patches

    return wrapper
