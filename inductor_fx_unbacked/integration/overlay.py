"""Install and remove the overlay: the only module that touches upstream objects.

The overlay is a table of (upstream owner, attribute, our implementation).
Each row is built by ``replace`` (ours instead of upstream's) or ``wrap`` (ours
built around upstream's). ``enable()`` saves each original from the owner's own
``__dict__`` and sets ours; ``disable()`` puts the identical original objects
back. Everything else in the package is ordinary code that can be read and
tested without patching anything.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
from typing import Any

import torch
from torch.torch_version import Version

#: Inclusive lower bound and exclusive upper bound of the supported torch releases.
SUPPORTED_TORCH = ("2.10", "2.16")


class UnsupportedTorchVersionError(RuntimeError):
    """The installed torch is outside the range the overlay was written against."""


@dataclasses.dataclass(frozen=True)
class Patch:
    owner: Any
    name: str
    replacement: Any
    #: If set, ``replacement(original)`` builds what is installed: ours runs
    #: around upstream's, which stays the only definition of its own part.
    wraps: bool = False

    def build(self, original: Any) -> Any:
        if not self.wraps:
            return self.replacement
        if original is _MISSING:
            # Inherited: wrap what the owner resolves to.
            original = getattr(self.owner, self.name)
        return self.replacement(original)


def replace(owner: Any, fn: Any, name: str | None = None) -> Patch:
    """A row that installs ``fn`` as ``owner.<name>``; ``name`` defaults to ``fn.__name__``."""
    return Patch(owner, name or fn.__name__, fn)


def wrap(owner: Any, wrapper: Any, name: str | None = None) -> Patch:
    """A row that installs ``wrapper(original)`` around ``owner.<name>``, upstream's or
    inherited; ``name`` defaults to ``wrapper.__name__``."""
    return Patch(owner, name or wrapper.__name__, wrapper, wraps=True)


_MISSING = object()
_lock = threading.Lock()
_saved: dict[tuple[type, str], Any] = {}
#: What ``_apply`` installed, by (owner, name), while it is installed.
_installed: dict[tuple[Any, str], Any] = {}
#: (what was installed, upstream's original) of attributes that were replaced on
#: top of the overlay when it was disabled: the replacement may put ours back.
_left_behind: dict[tuple[Any, str], tuple[Any, Any]] = {}


def check_torch_version(version: str | None = None) -> None:
    """Raise :class:`UnsupportedTorchVersionError` unless torch is in the supported range."""
    version = torch.__version__ if version is None else version
    low, high = SUPPORTED_TORCH
    # Compare the release only, so that 2.14.0a0 nightlies count as 2.14.
    release = Version(Version(version).base_version)
    if not Version(low) <= release < Version(high):
        raise UnsupportedTorchVersionError(
            f"inductor-fx-unbacked supports torch>={low},<{high}; the installed torch is {version}"
        )


def patches() -> list[Patch]:
    """The overlay, declaratively: which upstream attribute each of ours replaces or wraps.

    Attributes that upstream lacks (new converter methods) are added, and
    removed again by ``disable()``.
    """
    from torch._dynamo.variables.builder import VariableBuilder
    from torch._inductor import compile_fx, ir
    from torch._inductor.codegen.multi_kernel import MultiKernel
    from torch._inductor.codegen.triton import TritonKernel
    from torch._inductor.codegen.triton_split_scan import TritonSplitScanKernel
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.codegen.wrapper_fxir import FxConverter, WrapperFxCodegen
    from torch._inductor.graph import GraphLowering
    from torch._inductor.runtime.triton_heuristics import Grid2DWithYZOverflow
    from torch._inductor.scheduler import BaseSchedulerNode
    from torch._subclasses import fake_impls

    from .. import _compat
    from ..codegen import (
        check_lines,
        indexing,
        masked_reductions,
        reductions,
        slice_sizes,
        triton_kernels,
    )
    from ..codegen import fx_checks as checks
    from ..codegen import fx_control as control
    from ..codegen import fx_symbols as symbols
    from ..codegen import fx_triton as kernels
    from ..codegen import wrapper as w
    from ..codegen import wrapper_fxir as fx
    from . import aot_config, cpu_mode, fake_values, partitions, upstream_graphs

    return [
        # Part 1 and 2: the line, and its text.
        replace(PythonWrapperCodegen, w.codegen_unbacked_symbol_defs_for_outputs),
        replace(PythonWrapperCodegen, w._codegen_unbacked_symbol_defs_for_outputs),
        # Part 3: FX definitions, on the KeyPath walk.
        replace(FxConverter, symbols._generate_unbacked_symbol_defs),
        replace(FxConverter, symbols._generate_dynamic_scalar),
        # Parts 4 and 5: the Triton call.
        replace(FxConverter, kernels._generate_kernel_definition),
        replace(FxConverter, kernels._generate_triton_call),
        # C++ kernels of a graph's CPU part (codegen/fx_cpp.py).
        replace(FxConverter, kernels._generate_kernel_call),
        # Fake values for meta["val"] leave no pending unbacked symbols behind; a
        # graph of upstream's FX codegen owns the kernels placed for it.
        wrap(FxConverter, upstream_graphs.generating, "generate"),
        # Symbolic arguments of extern kernels and fallbacks, as nodes; a fallback's
        # keyword arguments.
        wrap(FxConverter, fx.converting_extern_kernel_args, "_generate_extern_kernel_common"),
        wrap(FxConverter, fx.materializing_symbolic_args, "_generate_fallback_call"),
        # Views of bases that may start inside their storage, relative to the base.
        wrap(FxConverter, fx.writing_views_relative_to_their_base, "_create_as_strided"),
        # Outputs nested in lists.
        replace(FxConverter, fx._generate_multi_output),
        # Graph inputs: upstream's, without a placeholder name twice.
        wrap(FxConverter, fx.deduplicating_graph_inputs, "_generate_graph_inputs"),
        # Checks of the graph inputs, once their shapes are defined.
        wrap(FxConverter, checks.checking_graph_inputs, "_generate_graph_input_shapes"),
        # Runtime checks as wrapper IR for the FX wrapper; upstream's for the others.
        wrap(ir.AssertScalar, check_lines.codegen_scalar_assert, "codegen"),
        wrap(ir.ExternKernel, check_lines.codegen_size_asserts),
        wrap(ir.ExternKernel, check_lines.codegen_alignment_asserts),
        wrap(TritonKernel, check_lines.codegen_nan_check),
        wrap(MultiKernel, check_lines.codegen_multi_kernel_nan_check, "codegen_nan_check"),
        replace(FxConverter, checks._generate_scalar_assert),
        replace(FxConverter, checks._generate_size_stride_assert),
        replace(FxConverter, checks._generate_alignment_assert),
        replace(FxConverter, checks._generate_nan_check),
        # Graph outputs: constants of every form, and NaN checks (nan_asserts).
        wrap(FxConverter, fx.converting_constant_buffers, "_generate_buffer"),
        wrap(FxConverter, fx.checking_outputs, "_generate_outputs"),
        # The remaining raw-text definition sites, as lines for the FX wrapper.
        wrap(PythonWrapperCodegen, w.codegen_dynamic_select_index),
        wrap(PythonWrapperCodegen, w.codegen_dynamic_slice_size),
        replace(WrapperFxCodegen, w.codegen_while_loop_fx, "codegen_while_loop"),
        replace(FxConverter, symbols._generate_dynamic_select_index),
        replace(FxConverter, symbols._generate_dynamic_slice_size),
        replace(FxConverter, control._generate_while_loop),
        # Workspaces zeroed before their kernel (the split scan's look-back flags).
        replace(WrapperFxCodegen, w.make_zero_buffer_fx, "make_zero_buffer"),
        # ... and freed last, where upstream's trailing-free pass cannot name them.
        wrap(WrapperFxCodegen, w.dropping_trailing_workspace_frees, "memory_plan_reuse"),
        replace(FxConverter, fx._generate_zero_buffer),
        # Reductions over unbacked lengths in two stages, under the FX wrapper.
        wrap(ir.Reduction, reductions.splitting_unbacked_lengths, "num_splits"),
        wrap(ir.Reduction, reductions.chunking_unbacked_inner_reductions, "create"),
        # Kernel text over unbacked lengths: masks of lengths that may be 0, the split
        # scan's block index, and its blocks long enough for the look-back's chain.
        wrap(
            TritonKernel,
            triton_kernels.masking_lengths_that_may_be_0,
            "_has_constant_mask",
        ),
        wrap(TritonSplitScanKernel, triton_kernels.scanning_split, "scan"),
        wrap(TritonSplitScanKernel, triton_kernels.launching_long_scan_blocks, "codegen_kernel"),
        wrap(ir.View, reductions.unflattening_unbacked_sizes, "dynamic_reshape_indexer"),
        wrap(GraphLowering, reductions.sizing_unbacked_dependencies, "get_dep_size_hint"),
        # ... and no reduction kernel updates in place what it reads.
        wrap(
            BaseSchedulerNode,
            reductions.keeping_reductions_out_of_place,
            "decide_inplace_update",
        ),
        # A slice's unbacked length that the lowering left undefined (2.10, 2.11: a
        # slice it proves a no-op), defined as later releases do.
        wrap(GraphLowering, slice_sizes.defining_slice_sizes, "call_function"),
        # Boolean-mask indexing as nonzero and a gather that fuses, under the FX wrapper.
        replace(compile_fx, indexing.select_decomp_table),
        # Reductions over masked selections without the selection (no host sync).
        wrap(compile_fx, masked_reductions.rewriting_masked_reductions, "post_grad_passes"),
        # AOT compiles with an FX wrapper keep the static launcher (no stored cubins).
        wrap(compile_fx, aot_config.keeping_cubins_unstored, "get_cpp_wrapper_config"),
        # No graph partitions under the FX wrapper (mode="reduce-overhead").
        wrap(compile_fx, partitions.without_graph_partitions, "maybe_disable_graph_partition"),
        # torch.unique's inverse and counts are int64 in fake tensors too (2.10, 2.11).
        wrap(fake_impls, fake_values.unique_indices_as_int64, "_unique"),
        # User Triton kernels in the CPU mode: Dynamo traces interpreted kernels.
        wrap(VariableBuilder, cpu_mode.tracing_interpreted_kernels, "_wrap"),
        # Launchers of 2-D kernels over an empty y range (2.10, 2.11).
        *(
            [
                wrap(
                    Grid2DWithYZOverflow,
                    triton_kernels.launching_empty_yz_overflow_grids,
                    "generate",
                )
            ]
            if _compat.YZ_OVERFLOW_GRID_DIVIDES_BY_ZERO
            else []
        ),
    ]


def is_enabled() -> bool:
    """Whether the overlay is installed."""
    return bool(_saved)


def _apply(table: list[Patch], saved: dict[tuple[Any, str], Any]) -> None:
    """Install ``table``, recording each original in ``saved``; a no-op if ``saved`` is set.

    An attribute that still holds what an earlier ``_apply`` installed (someone
    put it back after ``_revert``, as a mock does when it stops) is not taken
    for upstream's: the original recorded then is used, so nothing is wrapped twice.
    """
    with _lock:
        if saved:
            return
        for patch in table:
            key = (patch.owner, patch.name)
            original = vars(patch.owner).get(patch.name, _MISSING)
            if key in _left_behind and original is _left_behind[key][0]:
                original = _left_behind.pop(key)[1]
            saved[key] = original
            installed = patch.build(original)
            _installed[key] = installed
            setattr(patch.owner, patch.name, installed)


def _revert(saved: dict[tuple[Any, str], Any]) -> None:
    """Put back every original recorded in ``saved``, as the identical object.

    An attribute that no longer holds what ``_apply`` installed was replaced on
    top of the overlay (a test's ``mock.patch.object``, still active); putting
    upstream's back drops that replacement, so a warning names it.
    """
    with _lock:
        for key, original in reversed(list(saved.items())):
            owner, name = key
            installed = _installed.pop(key, None)
            current = vars(owner).get(name, _MISSING)
            if current is not installed:
                warnings.warn(
                    f"inductor_fx_unbacked.disable(): {owner.__qualname__}.{name} was replaced "
                    f"after the overlay was enabled ({current!r}); restoring upstream's "
                    "drops that replacement. Enable and disable the overlay outside any "
                    "patch of the same attribute.",
                    stacklevel=3,
                )
                _left_behind[key] = (installed, original)
            if original is _MISSING:
                if current is not _MISSING:
                    delattr(owner, name)
            else:
                setattr(owner, name, original)
        saved.clear()


#: The key of the overlay's entry among Inductor's custom backend passes: never a device.
IDENTITY_KEY = "inductor_fx_unbacked"


def enable() -> None:
    """Install the overlay onto upstream Inductor. Idempotent.

    The overlay changes code that Inductor's wrappers write (the Python wrapper's
    checks of divided sizes, every FX graph), so while it is enabled it is part of
    the keys of Inductor's caches: an entry among the custom backend passes, whose
    uuids every key holds and which only runs for its key's device (none).
    """
    from torch._inductor.codegen import common

    check_torch_version()
    if not _saved:
        _apply(patches(), _saved)
        # Devices first, so that the entries' order, which the keys see, is stable.
        common.init_backend_registration()
        common.custom_backend_passes[IDENTITY_KEY] = _overlay_identity()


def disable() -> None:
    """Restore every upstream attribute the overlay replaced, as the identical object."""
    from torch._inductor.codegen import common

    _revert(_saved)
    common.custom_backend_passes.pop(IDENTITY_KEY, None)


def _overlay_identity() -> Any:
    from .._compat import CustomBackendPass
    from ..artifact.identity import artifact_identity

    class OverlayIdentity(CustomBackendPass):
        """The overlay, in cache keys: a pass that changes nothing."""

        def __call__(self, graph: Any) -> None:
            pass

        def uuid(self) -> Any:
            return artifact_identity(overlay=True)

    return OverlayIdentity()


# Triton's interpreter, for the CPU mode. Interpreted kernels run whenever a
# compiled graph is called, long after ``fx_backend`` has exited, so these fixes
# stay installed for the process once the CPU mode is first used.
_interpreter_saved: dict[tuple[Any, str], Any] = {}


def interpreter_patches() -> list[Patch]:
    """The fixes the CPU mode needs in the installed Triton's interpreter."""
    from torch._higher_order_ops import triton_kernel_wrap
    from triton.runtime import autotuner as triton_autotuner
    from triton.runtime import interpreter as triton_interpreter

    from .. import _compat
    from . import cpu_atomics, cpu_comparisons, cpu_libdevice, cpu_mode

    def rmw(original: Any) -> Any:
        # One row per attribute: contiguous operands, and the bfloat16 operations
        # (accumulation into slots) that the interpreter lacks.
        return cpu_atomics.computing_bfloat16_atomics(cpu_mode.contiguous_operands(original))

    table = [
        wrap(
            triton_interpreter.InterpreterBuilder, cpu_mode.contiguous_operands, "create_atomic_cas"
        ),
        wrap(triton_interpreter.InterpreterBuilder, rmw, "create_atomic_rmw"),
    ]
    table.append(wrap(triton_interpreter, cpu_mode.converting_floats, "_implicit_cvt"))
    # Launches of user kernels inside a traced ``triton_op`` record the kernel call.
    table += [
        wrap(owner, cpu_mode.tracing_kernel_launches, "run")
        for owner in (
            triton_interpreter.InterpretedFunction,
            triton_autotuner.Autotuner,
            triton_autotuner.Heuristics,
        )
    ]
    # One interpreted launch at a time; device functions undo their patches.
    table += [
        wrap(triton_interpreter.GridExecutor, cpu_mode.one_at_a_time, "__call__"),
        wrap(triton_kernel_wrap, cpu_mode.one_at_a_time, "generate_ttir"),
        wrap(triton_interpreter.InterpretedFunction, cpu_mode.restoring_lang_patches, "__call__"),
    ]
    if _compat.TRITON_INTERPRETER_INDEX_NEEDS_SQUEEZE:
        table.append(wrap(triton_interpreter, cpu_mode.patch_lang_tensor, "_patch_lang_tensor"))
    table.append(
        wrap(triton_interpreter.InterpreterBuilder, cpu_comparisons.comparing_as_int1, "binary_op")
    )
    # Kernels that call libdevice (rsqrt, erf, tanh, pow, ...).
    table += [
        wrap(triton_interpreter, cpu_libdevice.binding_libdevice, "_patch_lang"),
        wrap(
            triton_interpreter.InterpreterBuilder,
            cpu_libdevice.computing_externs,
            "create_extern_elementwise",
        ),
    ]
    # NaN in argmax/argmin: Inductor's combines use ``not``, which the interpreter
    # takes for the whole block.
    from torch._inductor.runtime import triton_helpers

    from . import cpu_index_combines

    table += [
        replace(triton_helpers, getattr(cpu_index_combines, name), name)
        for name in ("maximum_with_index", "minimum_with_index")
    ]
    # Inductor's cache keys ask the stand-in target's backend for its options.
    if _compat.INDUCTOR_KEYS_EXTERN_LIBS and _compat.TRITON_WARNS_UNSET_FP_FUSION:
        from torch.utils import _triton as torch_triton

        table.append(wrap(torch_triton, cpu_mode.stating_fp_fusion, "_extern_libs_key"))
    return table


def fix_interpreter() -> None:
    """Install the interpreter fixes (``interpreter_patches``). Idempotent."""
    if not _interpreter_saved:
        _apply(interpreter_patches(), _interpreter_saved)
