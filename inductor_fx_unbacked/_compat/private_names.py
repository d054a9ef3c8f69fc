"""Every private attribute of torch or Triton that the package reads, calls,
overrides or wraps, with the releases it was checked on."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

# ``test/test_compat.py`` resolves each entry on the installed
# releases and fails on the first that is gone, and it fails too when the package
# uses a private upstream name that is not listed. Names used in more than one
# place, or in an expression worth naming, also get an accessor below, so that a
# rename is fixed in one place.

#: The releases each entry was checked on: read in the 2.10 and 2.15 sources, run on
#: 2.13, and used by code that passes the test matrix on every release.
ALL_RELEASES = "2.10 2.11 2.12 2.13 2.14 2.15"


@dataclasses.dataclass(frozen=True)
class Private:
    """A private upstream attribute: ``owner`` is ``module:qualname`` (or a module).

    ``on`` says where it lives: ``"class"`` (resolvable on the owner itself),
    ``"instance"`` (set by the owner's ``__init__``; the test builds an instance),
    ``"cuda"`` (on the owner, in CUDA builds of torch only) or ``"worker"`` (set
    only on autotuners that a compile worker sends back; read in the sources).
    """

    owner: str
    name: str
    checked_on: str = ALL_RELEASES
    on: str = "class"

    def resolve(self, target: Any = None) -> Any:
        """The attribute, on ``target`` (default: the owner); AttributeError if gone."""
        return getattr(self.owner_object() if target is None else target, self.name)

    def owner_object(self) -> Any:
        module_name, _, qualname = self.owner.partition(":")
        value: Any = importlib.import_module(module_name)
        for part in qualname.split(".") if qualname else ():
            value = getattr(value, part)
        return value


_FX_CONVERTER = "torch._inductor.codegen.wrapper_fxir:FxConverter"
_AUTOTUNER = "torch._inductor.runtime.triton_heuristics:CachingAutotuner"

PRIVATE_NAMES: tuple[Private, ...] = (
    # FX graphs, and the hooks of a module (a graph module's own).
    Private("torch.fx:Graph", "_root", on="instance"),
    Private("torch.nn:Module", "_forward_hooks", on="instance"),
    Private("torch.nn:Module", "_forward_pre_hooks", on="instance"),
    # Steps of the sources Dynamo reads a module's state from (the direct call names them).
    Private("torch.nn:Module", "_modules", on="instance"),
    Private("torch.nn:Module", "_parameters", on="instance"),
    Private("torch.nn:Module", "_buffers", on="instance"),
    Private("torch.fx:Node", "_rename"),
    # An ATen operator (a dtype or device copy), matched by the sync-free rewrite.
    Private("torch:ops.aten", "_to_copy"),
    # Inductor's wrapper codegen: methods the overlay calls, overrides or wraps.
    Private("torch._inductor.codegen.wrapper:PythonWrapperCodegen", "_format_kernel_definition"),
    Private(
        "torch._inductor.codegen.wrapper:PythonWrapperCodegen",
        "_codegen_unbacked_symbol_defs_for_outputs",
    ),
    Private("torch._inductor.codegen.wrapper_fxir:WrapperFxCodegen", "_generate"),
    # The graph's output names, which upstream's trailing-free pass compares with.
    Private("torch._inductor.graph:GraphLowering", "_get_output_names"),
    Private("torch._inductor.codegen.triton:TritonKernel", "_has_constant_mask"),
    # torch.unique's fake implementation, whose inverse and counts the overlay types.
    Private("torch._subclasses.fake_impls", "_unique"),
    *(
        Private(_FX_CONVERTER, name)
        for name in (
            "_generate_sym_node",
            "_generate_sym_nodes",
            "_generate_buffer",
            "_generate_outputs",
            "_get_buffer",
            "_generate_size_proxy",
            "_record_allocation",
            "_sympy_interp",
            "_get_subgm_attr",
            "_generate_unbacked_symbol_defs",
            "_generate_dynamic_scalar",
            "_generate_kernel_definition",
            "_generate_kernel_call",
            "_generate_triton_call",
            "_generate_extern_kernel_common",
            "_generate_fallback_call",
            "_generate_multi_output",
            "_generate_graph_inputs",
            "_generate_graph_input_shapes",
        )
    ),
    # Probed, not called: their presence says what a release does.
    Private(_FX_CONVERTER, "_define_symbol_by_solving", checked_on="2.14 2.15"),
    Private("torch._library.triton", "_is_interpreted_triton_kernel", checked_on="2.13 2.15"),
    Private("torch._library.triton", "_has_interpreted_triton_autotuner", checked_on="2.13 2.15"),
    # Inductor's Triton autotuner.
    Private(_AUTOTUNER, "compile_results", on="instance"),
    Private(_AUTOTUNER, "launchers", on="instance"),
    Private(_AUTOTUNER, "_make_launchers"),
    Private(_AUTOTUNER, "_ensure_kernel_loaded", checked_on="2.13 2.14 2.15"),
    Private(_AUTOTUNER, "_reload_kernel", checked_on="2.10 2.11 2.12", on="worker"),
    Private("torch._inductor.runtime.triton_heuristics:GridExpr", "eval_slow"),
    # Operators and bindings.
    Private("torch._ops:OpOverload", "_schema", on="instance"),
    Private("torch.ops:aten", "_assert_scalar"),
    Private("torch.ops:aten", "_functional_assert_scalar"),
    Private("torch.ops:aten", "_make_dep_token"),
    Private("torch.ops:aten", "_unique2"),
    # Grouped matrix products, computed by their definition in the self-check's
    # float64 reference (integration/widened.py).
    Private("torch.ops:aten", "_grouped_mm"),
    Private("torch.ops:aten", "_softmax"),
    Private("torch.ops:aten", "_log_softmax"),
    # torch._logging: the structured trace's handlers, set up again once the
    # package's logger is registered (``integration/logs.py``).
    Private("torch._logging._internal", "_init_logs"),
    # The Python wrapper's fast entry points, which straight-line code calls too.
    Private("torch._C._dynamo.guards", "_reinterpret_tensor"),
    Private("torch._C._dynamo.guards", "_empty_strided_cpu"),
    Private("torch._C._dynamo.guards", "_empty_strided_cuda"),
    # Dispatch modes: a thread's stack and infra slots, and the process-wide flags
    # beside them that ``integration/thread_flags.py`` keeps true to the thread.
    Private("torch.utils._python_dispatch", "_get_current_dispatch_mode_stack"),
    Private("torch._C", "_get_dispatch_mode"),
    Private("torch._C", "_TorchDispatchModeKey"),
    Private("torch.utils._python_dispatch", "_is_in_torch_dispatch_mode"),
    Private("torch.utils._python_dispatch", "_is_in_non_infra_torch_dispatch_mode"),
    Private("torch.utils._python_dispatch", "_is_in_any_mode_without_ignore_compile_internals"),
    # Dynamo's eval-frame override, set around calls of fullgraph=True functions.
    Private("torch._C._dynamo.eval_frame", "set_eval_frame_override", checked_on="2.11"),
    # Frame execution strategies: the direct call of a program with breaks can run
    # the callees of a frame whose rest Dynamo left to Python without Dynamo
    # (_compat/frames.py, called by integration/python_rests.py).
    Private("torch._C._dynamo.eval_frame", "_FrameExecStrategy"),
    Private("torch._C._dynamo.eval_frame", "_FrameAction"),
    Private("torch._C._dynamo.eval_frame", "_EvalFrameOverride", checked_on="2.11"),
    # Dynamo: how a value becomes a variable (the CPU mode's user kernels).
    Private("torch._dynamo.variables.builder:VariableBuilder", "_wrap"),
    # Inductor's IR: the masked loader of a split reduction's first stage.
    Private("torch._inductor.ir:Reduction", "_multilayer_wrap_loader"),
    # The current stream's handle, for the runner's own kernels (``runner/compaction.py``).
    Private("torch._C", "_cuda_getCurrentRawStream", on="cuda"),
    # The ptxas that Inductor's compiles use, set for the runner's own (``use_inductors_ptxas``).
    Private("torch._inductor.runtime.compile_tasks", "_set_triton_ptxas_path"),
    # Grad mode's setter, around a direct call (``integration/compiled.py``).
    Private("torch._C", "_set_grad_enabled"),
    # Sizes 0 and 1 kept symbolic by ``ifx.compile(..., dynamic=True)``.
    Private("torch.fx.experimental._config", "backed_size_oblivious"),
    # Higher-order operators: while_loop's own eager implementation.
    Private("torch._higher_order_ops.while_loop", "while_loop_dense"),
    # Triton.
    Private("triton.runtime.driver:driver", "_active", checked_on="Triton 3.6 3.7 3.8 3.9"),
    # What Triton keys its compiles by, for the runner's kernel store (``launching.py``).
    Private(
        "triton._C.libtriton",
        "get_cache_invalidating_env_vars",
        checked_on="Triton 3.6 3.9",
    ),
    Private("triton.runtime.interpreter", "_implicit_cvt", checked_on="Triton 3.6 3.7 3.8 3.9"),
    Private(
        "triton.runtime.interpreter", "_patch_lang_tensor", checked_on="Triton 3.6 3.7 3.8 3.9"
    ),
    Private("triton.runtime.interpreter", "_patch_lang", checked_on="Triton 3.6 3.9"),
    Private("triton.runtime.interpreter", "_get_np_dtype", checked_on="Triton 3.6 3.9"),
)
