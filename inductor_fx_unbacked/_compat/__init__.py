"""Differences between the supported torch releases (2.10 to 2.15), by feature.

Each entry is chosen once, at import, by what the installed torch has (never by
its version string), and names the releases it stands for. Nothing else in the
package asks which torch it runs on.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

import torch
from torch._higher_order_ops import triton_kernel_wrap
from torch._inductor import config, ir
from torch._inductor import custom_graph_pass as _custom_graph_pass
from torch._inductor.codegen import wrapper as _wrapper
from torch._inductor.codegen.wrapper_fxir import FxConverter
from torch._inductor.runtime import runtime_utils
from torch._inductor.sizevars import SizeVarAllocator
from torch._library import triton as triton_library
from torch.utils import _triton as _torch_triton


def ensure_kernel_loaded(tuner: Any) -> None:
    """Make sure a kernel compiled in a worker process has its Python function.

    Parallel compile workers strip ``JITFunction.fn`` before pickling the
    autotuner back; a kernel stored in the Triton side table in that state fails
    at run time inside ``JITFunction.run``. Torch 2.13+ reloads it with
    ``CachingAutotuner._ensure_kernel_loaded``; 2.10 to 2.12 have only the
    stashed ``_reload_kernel`` callback.
    """
    if hasattr(type(tuner), "_ensure_kernel_loaded"):
        tuner._ensure_kernel_loaded()
    elif getattr(tuner.fn, "fn", True) is None:
        tuner.fn = tuner._reload_kernel().fn


# Hints. Torch 2.11+ tunes with ``optimization_hint``; 2.10 has ``size_hint``.
if hasattr(SizeVarAllocator, "optimization_hint"):

    def optimization_hint(
        sizevars: SizeVarAllocator, expr: Any, fallback: int | None = None
    ) -> int:
        return sizevars.optimization_hint(expr, fallback=fallback)

else:

    def optimization_hint(
        sizevars: SizeVarAllocator, expr: Any, fallback: int | None = None
    ) -> int:
        return sizevars.size_hint(expr, fallback=fallback)


# Alignment checks. Torch 2.15 writes an ``AssertAlignmentLine`` (Python and C++
# wrappers); 2.10 to 2.14 write the text ``assert_alignment(...)``, Python only.
_AssertAlignmentLine = getattr(_wrapper, "AssertAlignmentLine", None)


def is_alignment_assert(line: Any) -> bool:
    """Whether a line that upstream wrote is an alignment check (not a comment)."""
    if _AssertAlignmentLine is not None and isinstance(line, _AssertAlignmentLine):
        return True
    return isinstance(line, str) and line.startswith("assert_alignment(")


# The buffer a size check reads. Torch 2.15 asks ``ExternKernel.get_assert_name()``
# (the mutated input of an in-place view op, under the C++ wrapper); 2.10 to 2.14
# check ``get_name()``.
if hasattr(ir.ExternKernel, "get_assert_name"):

    def assert_name(node: Any) -> str:
        return node.get_assert_name()

else:

    def assert_name(node: Any) -> str:
        return node.get_name()


# Compound symbolic graph inputs (``2*s17``, a size a backward graph receives).
# Torch 2.14+ converts them itself (``FxConverter._define_symbol_by_solving``);
# 2.10 to 2.13 raise "Unable to extract buffer from node".
UPSTREAM_CONVERTS_COMPOUND_GRAPH_INPUTS = hasattr(FxConverter, "_define_symbol_by_solving")


# Scalar range checks. Torch 2.15 drops range bounds such as ``u0 >= 0`` under
# ``config.unsafe_skip_scalar_range_asserts``; earlier releases have no such option.
if hasattr(config, "unsafe_skip_scalar_range_asserts"):
    from torch._inductor.sizevars import is_range_bound

    def skips_scalar_assert(node: Any) -> bool:
        return bool(config.unsafe_skip_scalar_range_asserts) and is_range_bound(node.scalar)

else:

    def skips_scalar_assert(node: Any) -> bool:
        return False


# Dtype checks of extern kernel outputs. Torch 2.14+ writes
# ``assert_tensor_metadata(...)`` where 2.10 to 2.13 write ``assert_size_stride``,
# and has the function the Python wrapper calls for it; 2.10 to 2.13 never need it.
if hasattr(runtime_utils, "assert_tensor_metadata"):
    assert_tensor_metadata = runtime_utils.assert_tensor_metadata
else:

    def assert_tensor_metadata(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "torch 2.10 to 2.13 have no runtime_utils.assert_tensor_metadata; "
            "their wrappers never check the dtype of an extern kernel's output"
        )


# Strict numerics: ``config.numerics``, whose "strict" modes ask for eager's order
# of a reduction (present on 2.15; absent on 2.10 and 2.13, which have no such option).
def strict_reduction_numerics() -> bool:
    return getattr(config, "numerics", "default") in ("strict", "strict_reduction")


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


def interpreter_np_dtype() -> Any:
    """The interpreter's map from a Triton dtype to the NumPy dtype of its arrays."""
    from triton.runtime import interpreter

    return interpreter._get_np_dtype


# Inductor's and Dynamo's configs. On torch 2.10 a value set (``config.patch``) in
# one thread is seen by every thread; on 2.13 and 2.15 (checked) each thread sees
# only what it set itself, and a new thread starts from the defaults.
def _config_is_per_thread() -> bool:
    other = "cpp" if config.cpu_backend == "triton" else "triton"
    seen = []
    with config.patch(cpu_backend=other):
        thread = threading.Thread(target=lambda: seen.append(config.cpu_backend))
        thread.start()
        thread.join()
    return seen != [other]


INDUCTOR_CONFIG_IS_PER_THREAD = _config_is_per_thread()


# A device's custom backend pass (``register_backend_for_device``), whose uuid is
# part of the FX graph cache's and AOTAutograd's cache keys. Post-grad applies it
# to the GraphModule (``CustomGraphModulePass``); releases without that class take
# a ``CustomGraphPass``. Checked on 2.10 to 2.15.
CustomBackendPass = getattr(
    _custom_graph_pass, "CustomGraphModulePass", _custom_graph_pass.CustomGraphPass
)


# Storing FX artifacts (artifact/store.py). Torch's graph pickler, which
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


# Launch grids as expressions (``grids.py``).
from .grids import YZ_DIVISOR, YZ_OVERFLOW_GRID_DIVIDES_BY_ZERO, eval_grid  # noqa: E402,F401

# The runner's own kernels: compiled and launched as Inductor's (``launching.py``).
from .launching import (  # noqa: E402,F401
    load_static_launcher,
    static_launcher,
    triton_cache_invalidating_env_vars,
    triton_compile_key,
    use_inductors_ptxas,
)

# Private upstream names: the table of every one the package uses (``private_names.py``).
from .private_names import ALL_RELEASES, PRIVATE_NAMES, Private  # noqa: E402,F401


def reinterpret_tensor() -> Any:
    """The Python wrapper's ``reinterpret_tensor`` (a view without the argument
    parser), or None where this build lacks it."""
    from torch._C._dynamo import guards

    return getattr(guards, "_reinterpret_tensor", None)


def fast_empty_strided(device_type: str) -> Any:
    """The Python wrapper's allocator for ``device_type`` (``empty_strided_cuda``), or
    None where this build has none for it."""
    from torch._C._dynamo import guards

    return getattr(guards, f"_empty_strided_{device_type}", None)


def set_grad_enabled(mode: bool) -> None:
    """Grad mode's setter itself, without ``torch.set_grad_enabled``'s object (a
    direct call sets it twice per call)."""
    torch._C._set_grad_enabled(mode)


def current_raw_stream(device_index: int) -> int:
    """The current CUDA stream of a device, as the handle that launchers take."""
    return torch._C._cuda_getCurrentRawStream(device_index)


def while_loop_dense(*args: Any, **kwargs: Any) -> Any:
    """``while_loop``'s own eager implementation."""
    from torch._higher_order_ops.while_loop import while_loop_dense as run

    return run(*args, **kwargs)


def op_schema(op: torch._ops.OpOverload) -> torch.FunctionSchema:
    """An operator overload's schema: its arguments and returns, with their aliasing."""
    return op._schema


def multilayer_wrap_loader(reduction: type[ir.Reduction], *args: Any) -> Any:
    """The loader of a split reduction's first stage: the element of each program's
    block, masked past the length (``Reduction._multilayer_wrap_loader``)."""
    return reduction._multilayer_wrap_loader(*args)


def graph_root(graph: torch.fx.Graph) -> torch.fx.Node:
    """The sentinel node that closes ``graph``'s node list (``Graph._root``)."""
    return graph._root


def rename_node(node: torch.fx.Node, name: str) -> None:
    """Rename ``node``, keeping names unique in its graph (``Node._rename``)."""
    node._rename(name)


def format_kernel_definition(name: str, body: str, metadata: Any) -> str:
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    return PythonWrapperCodegen._format_kernel_definition(name, body, metadata=metadata)


def compile_results(tuner: Any) -> list[Any]:
    """The compile results of an autotuner (in the CPU mode, one holding its first config)."""
    return getattr(tuner, "compile_results", None) or []


def launchers(tuner: Any) -> list[Any]:
    """An autotuner's launchers, made from its compile results when there are none yet."""
    if not tuner.launchers:
        tuner._make_launchers()
    return tuner.launchers


def sole_launcher(tuner: Any) -> Any:
    """The launcher an autotuner has settled on (tuning leaves one), or None."""
    found = getattr(tuner, "launchers", None) or []
    return found[0] if len(found) == 1 else None


def chosen_config(tuner: Any) -> Any:
    """The config an autotuner runs a kernel with, unless its first call tunes it.

    That is its one launcher's config where it has one: tuning (at compile time)
    keeps one launcher; 2.13 and 2.15 also prune the compile results to the
    winner, but 2.10 leaves every compile result (checked in the 2.10, 2.13 and
    2.15 sources), and coordinate descent (each of them) keeps a launcher of a
    config that no compile result has. Otherwise the first compile result's, whose
    launcher comes first.
    """
    launcher = sole_launcher(tuner)
    return launcher.config if launcher is not None else compile_results(tuner)[0].config


def active_triton_driver() -> Any:
    """Triton's active driver object, or None where none is set yet."""
    from triton.runtime.driver import driver

    return driver._active


def restore_triton_driver(previous: Any) -> None:
    from triton.runtime.driver import driver

    driver._active = previous


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


# User kernels in the CPU mode. Torch 2.15 checks a user kernel's keyword launch
# arguments against the device's Triton backend while writing its definition
# (``try_filter_backend_options_for_target``, after
# ``CpuInterface.raise_if_triton_unavailable``); Triton's wheels have no CPU
# backend, so there a user kernel called with keyword arguments does not compile
# in the CPU mode (``TritonUnavailableError``). Absent on 2.10 to 2.14.
def _user_kernel_options_need_a_device_backend() -> bool:
    from torch._inductor.runtime import triton_helpers

    return hasattr(triton_helpers, "try_filter_backend_options_for_target")


USER_KERNEL_OPTIONS_NEED_A_DEVICE_BACKEND = _user_kernel_options_need_a_device_backend()


# Inductor's FX graph cache keys the extern libraries of the Triton backend's options
# (torch 2.15; ``torch.utils._triton._extern_libs_key``), and Triton 3.9 warns when
# those options are parsed without FP fusion stated (``knobs.language.default_fp_fusion``
# reads TRITON_DEFAULT_FP_FUSION; Triton 3.6 to 3.8 have no such warning).
INDUCTOR_KEYS_EXTERN_LIBS = hasattr(_torch_triton, "_extern_libs_key")


def _triton_warns_unset_fp_fusion() -> bool:
    try:
        from triton import _utils as triton_utils
    except ImportError:
        return False
    return hasattr(triton_utils, "FP_FUSION_DEFAULT_WARNING")


TRITON_WARNS_UNSET_FP_FUSION = _triton_warns_unset_fp_fusion()


def forward_hooks(module: torch.nn.Module) -> tuple[dict[int, Any], dict[int, Any]]:
    """A module's forward hooks and forward pre-hooks (``nn.Module`` keeps them privately)."""
    return module._forward_hooks, module._forward_pre_hooks


# Dynamo's eval-frame override (torch 2.11; 2.10, 2.13 and 2.15 have none): each
# call of a ``fullgraph=True`` function sets it, process-wide, to skip the frames
# its compiled code calls, and restores the value it found. Setting it returns
# the previous value, which is the only way to read it.
_SET_EVAL_FRAME_OVERRIDE = getattr(torch._C._dynamo.eval_frame, "set_eval_frame_override", None)


def eval_frame_override() -> str | None:
    """The override's name (``NONE``, ``SKIP``, ``ERROR``), or None where the release
    has no override."""
    if _SET_EVAL_FRAME_OVERRIDE is None:
        return None
    none = torch._C._dynamo.eval_frame._EvalFrameOverride.NONE
    current = _SET_EVAL_FRAME_OVERRIDE(none)
    _SET_EVAL_FRAME_OVERRIDE(current)
    return current.name


def clear_eval_frame_override() -> str | None:
    """Set the override to none; the name of what it was where that differed, else None."""
    if _SET_EVAL_FRAME_OVERRIDE is None:
        return None
    none = torch._C._dynamo.eval_frame._EvalFrameOverride.NONE
    previous = _SET_EVAL_FRAME_OVERRIDE(none)
    return None if previous == none else previous.name


def set_eval_frame_override(name: str) -> None:
    """Set the override by name (tests leave it as another thread's call would)."""
    assert _SET_EVAL_FRAME_OVERRIDE is not None, "this release has no eval-frame override"
    _SET_EVAL_FRAME_OVERRIDE(getattr(torch._C._dynamo.eval_frame._EvalFrameOverride, name))
