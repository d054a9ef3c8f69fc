"""Differences between the supported torch releases (2.10 to 2.15), by feature.

Each entry is chosen once, at import, by what the installed torch has (never by
its version string), and names the releases it stands for. Nothing else in the
package asks which torch it runs on.
"""

from __future__ import annotations

import inspect
from typing import Any

from torch._higher_order_ops import triton_kernel_wrap
from torch._inductor import config
from torch._inductor import custom_graph_pass as _custom_graph_pass
from torch._inductor.codegen import wrapper as _wrapper
from torch._inductor.sizevars import SizeVarAllocator
from torch._library import triton as triton_library


def ensure_kernel_loaded(tuner: Any) -> None:
    """Make sure a kernel compiled in a worker process has its Python function.

    Parallel compile workers strip ``JITFunction.fn`` before pickling the
    autotuner back; a kernel stored in the Triton side table in that state fails
    at run time inside ``JITFunction.run``. Torch 2.13+ reloads it with
    ``CachingAutotuner._ensure_kernel_loaded``; 2.10 to 2.12 have only the
    stashed ``_reload_kernel`` callback.
    """
    if hasattr(tuner, "_ensure_kernel_loaded"):
        tuner._ensure_kernel_loaded()
    elif getattr(tuner.fn, "fn", True) is None:
        tuner.fn = tuner._reload_kernel().fn


# Hints. Torch 2.11+ tunes with ``optimization_hint``; 2.10 has ``size_hint``.
if hasattr(SizeVarAllocator, "optimization_hint"):

    def optimization_hint(sizevars: SizeVarAllocator, expr: Any) -> int:
        return sizevars.optimization_hint(expr)

else:

    def optimization_hint(sizevars: SizeVarAllocator, expr: Any) -> int:
        return sizevars.size_hint(expr)


# Alignment checks. Torch 2.15 writes an ``AssertAlignmentLine`` (Python and C++
# wrappers); 2.10 to 2.14 write the text ``assert_alignment(...)``, Python only.
_AssertAlignmentLine = getattr(_wrapper, "AssertAlignmentLine", None)


def is_alignment_assert(line: Any) -> bool:
    """Whether a line that upstream wrote is an alignment check (not a comment)."""
    if _AssertAlignmentLine is not None and isinstance(line, _AssertAlignmentLine):
        return True
    return isinstance(line, str) and line.startswith("assert_alignment(")


# Scalar range checks. Torch 2.15 drops range bounds such as ``u0 >= 0`` under
# ``config.unsafe_skip_scalar_range_asserts``; earlier releases have no such option.
if hasattr(config, "unsafe_skip_scalar_range_asserts"):
    from torch._inductor.sizevars import is_range_bound

    def skips_scalar_assert(node: Any) -> bool:
        return bool(config.unsafe_skip_scalar_range_asserts) and is_range_bound(node.scalar)

else:

    def skips_scalar_assert(node: Any) -> bool:
        return False


# Triton backend options. Torch 2.14+ carries them to the kernel HOP as
# ``launch_kwargs``; earlier HOPs take no such argument.
HOP_LAUNCH_KWARGS = (
    "launch_kwargs"
    in inspect.signature(triton_kernel_wrap.triton_kernel_wrapper_mutation_dense).parameters
)


# Triton's interpreter. Triton 3.6 (pinned by torch 2.10 and 2.11) converts a
# scalar to an index with ``int(array)``, which NumPy 2.4+ refuses for the
# one-element arrays scalars are; Triton 3.7+ squeezes the array first.
def _triton_interpreter_index_needs_squeeze() -> bool:
    import triton
    from torch.torch_version import Version

    return Version(Version(triton.__version__).base_version) < Version("3.7")


TRITON_INTERPRETER_INDEX_NEEDS_SQUEEZE = _triton_interpreter_index_needs_squeeze()


# A device's custom backend pass (``register_backend_for_device``), whose uuid is
# part of the FX graph cache's and AOTAutograd's cache keys. Post-grad applies it
# to the GraphModule (``CustomGraphModulePass``); releases without that class take
# a ``CustomGraphPass``. Checked on 2.10 to 2.15.
CustomBackendPass = getattr(
    _custom_graph_pass, "CustomGraphModulePass", _custom_graph_pass.CustomGraphPass
)


# Storing FX artifacts (inductor_fx_unbacked.caching). Torch's graph pickler, which
# AOTAutograd's cache uses for GraphModules with fake values; with no ops filter
# every operator is allowed (this package's ``fx_unbacked`` ops among them), and
# the fake-value hook with which upstream's converter fills ``meta["val"]``.
# Checked on 2.10 to 2.15.
from torch._export.passes import _node_metadata_hook as _metadata_hook  # noqa: E402
from torch.fx import _graph_pickler  # noqa: E402

GraphPickler = _graph_pickler.GraphPickler
node_metadata_hook = _metadata_hook._node_metadata_hook


def graph_pickler_options() -> Any:
    return _graph_pickler.Options(ops_filter=None)


# User kernels in Triton's interpreter. ``wrap_triton`` hands an
# ``InterpretedFunction`` back as it is on torch 2.13+ (``_is_interpreted_triton_kernel``;
# checked present on 2.13 and 2.15, absent on 2.10, where it raises "wrap_triton only
# works on functions annotated with triton.jit or triton.autotune", in eager too), and
# an autotuner over one on releases with ``_has_interpreted_triton_autotuner`` (2.13,
# 2.15). Where it does not, eager code that calls ``wrap_triton`` on an interpreted
# kernel, and so a ``triton_op``, cannot run in the CPU mode; a kernel called from a
# compiled function through ``wrap_triton`` still compiles (Dynamo drops the call).
WRAP_TRITON_TAKES_INTERPRETED = hasattr(triton_library, "_is_interpreted_triton_kernel")
WRAP_TRITON_TAKES_INTERPRETED_AUTOTUNER = hasattr(
    triton_library, "_has_interpreted_triton_autotuner"
)
