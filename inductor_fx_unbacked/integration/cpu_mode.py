"""The CPU mode: Inductor's FX wrapper backend on a machine without a GPU.

With ``TRITON_INTERPRET=1``, ``@triton.jit`` kernels become ``InterpretedFunction``
objects that run on CPU tensors with NumPy. What stands between that and the FX
backend, this module supplies (the converter's part is
``codegen/converters.py``):

1. Triton needs one active driver that reports a target and a device; a CPU-only
   machine has none. :func:`interpreter_driver` makes a stand-in the active one.
2. The interpreter itself needs fixes on some Triton releases (atomics over
   broadcast operands, float arguments, indices under NumPy 2.4); the overlay
   installs them (``interpreter_patches`` in ``overlay.py``), and they are
   defined here.
3. User kernels (``@triton.jit`` or ``@triton.autotune`` over it, called from a
   compiled function or from a ``torch.library.triton_op``) are
   ``InterpretedFunction`` objects, which Dynamo and ``wrap_triton`` do not take
   for Triton kernels: Dynamo traces into the interpreter's launcher, and tracing a
   ``triton_op`` runs the interpreter on fake tensors. Both trace the kernel's
   :func:`jit_twin` instead, a ``JITFunction`` over the same Python function, which
   carries everything Inductor reads from a user kernel (parameters, source);
   Inductor writes the kernel's source into its wrapper code, and importing that
   in interpreter mode makes it an ``InterpretedFunction`` again, which runs.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy
import torch
from torch._higher_order_ops.triton_kernel_wrap import TraceableTritonKernelWrapper

from .. import _compat

INTERPRET_ENV = "TRITON_INTERPRET"

#: A function of Triton's interpreter that a wrapper below keeps the signature of.
F = TypeVar("F", bound=Callable[..., Any])


class InterpreterNotEnabledError(RuntimeError):
    """CPU mode was asked for, but Triton was not started in interpreter mode."""


def require_interpreter() -> None:
    """Raise :class:`InterpreterNotEnabledError` unless ``TRITON_INTERPRET=1`` is in
    the environment."""
    if os.environ.get(INTERPRET_ENV) != "1":
        raise InterpreterNotEnabledError(
            "the FX backend on CPU runs Triton kernels with Triton's interpreter, "
            f"which needs {INTERPRET_ENV}=1 in the environment before Triton is "
            f"imported; start Python with {INTERPRET_ENV}=1 "
            "(python -m inductor_fx_unbacked demo sets it itself)"
        )
    if _jitted_before_interpret():
        raise InterpreterNotEnabledError(
            f"{INTERPRET_ENV}=1 was set after Triton was imported: Triton's own "
            "@triton.jit helpers (tl.sum, tl.max, tl.cumsum, ...) were then made for a "
            'GPU, and an interpreted kernel that calls them fails with "Cannot call '
            f"@triton.jit'd outside of the scope of a kernel\"; set {INTERPRET_ENV}=1 "
            "before anything imports Triton"
        )


def _jitted_before_interpret() -> bool:
    """Whether Triton's standard library was jitted for a GPU (``TRITON_INTERPRET``
    was unset when Triton was imported): ``@triton.jit`` reads it when it runs."""
    standard = sys.modules.get("triton.language.standard")
    if standard is None:
        return False
    from triton.runtime.jit import JITFunction

    return any(isinstance(value, JITFunction) for value in vars(standard).values())


def _make_driver() -> Any:
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class InterpreterDriver(DriverBase):
        """A Triton driver for the interpreter: CPU device, a CUDA-shaped target.

        Inductor asks the driver for a target to pick a compiler backend and hash
        its options; the interpreter never compiles, so any installed backend that
        accepts the target will do. Triton wheels ship the NVIDIA one.
        """

        @classmethod
        def is_active(cls) -> bool:
            return True

        def map_python_to_cpp_type(self, ty: str) -> str:
            return ty

        def get_current_target(self) -> Any:
            return GPUTarget("cuda", 80, 32)

        def get_active_torch_device(self) -> torch.device:
            return torch.device("cpu")

        def get_benchmarker(self) -> Any:
            return run_once_benchmark

        def get_device_interface(self) -> Any:
            return torch.cpu

        def get_current_device(self) -> int:
            return 0

        def set_current_device(self, device: int) -> None:
            pass

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

    driver = InterpreterDriver()
    driver.runs_the_cpu_mode = True
    return driver


def interpreter_is_active() -> bool:
    """Whether Triton's active driver is the CPU mode's (:func:`interpreter_driver`)."""
    return getattr(_compat.active_triton_driver(), "runs_the_cpu_mode", False)


def stating_fp_fusion(extern_libs_key: F) -> F:
    """Wrap ``torch.utils._triton._extern_libs_key``, which Inductor's FX graph cache
    calls on every store and hit: in the CPU mode it asks the backend of the stand-in
    target for its options with FP fusion stated as Triton's own default.

    Asked without it, Triton 3.9 warns that ``TRITON_DEFAULT_FP_FUSION`` is unset on
    every CPU-mode run, though nothing is compiled with those options (the
    interpreter runs the kernels; the key reads only the extern libraries). Elsewhere,
    and for every kernel compiled for a GPU, Triton's warning stays.
    """

    @functools.wraps(extern_libs_key)
    def _extern_libs_key(backend: Any) -> str:
        if not interpreter_is_active():
            return extern_libs_key(backend)
        return extern_libs_key(_StatedFpFusion(backend))

    return _extern_libs_key  # type: ignore[return-value]


class _StatedFpFusion:
    """A Triton backend whose options are parsed with FP fusion at Triton's default."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def parse_options(self, options: dict[str, Any]) -> Any:
        from triton import knobs

        default = knobs.language.default_fp_fusion
        return self.backend.parse_options({"enable_fp_fusion": default, **options})


def run_once_benchmark(
    kernel_call: Any, quantiles: Any = None, return_mode: str = "mean", **options: Any
) -> Any:
    """The interpreter driver's benchmarker (``triton.autotune`` times each config
    with it): one run, timed on the host clock.

    Triton's ``do_bench`` wants device events and a cache to flush, which the
    interpreter has not; interpreted timings say nothing about a GPU anyway, so
    one run per config is enough to pick one.
    """
    start = time.perf_counter()
    kernel_call()
    milliseconds = (time.perf_counter() - start) * 1e3
    return [milliseconds] * len(quantiles) if quantiles else milliseconds


@contextlib.contextmanager
def interpreter_driver() -> Iterator[None]:
    """Make the interpreter driver Triton's active driver, and restore the previous one."""
    from triton.runtime.driver import driver

    previous = _compat.active_triton_driver()
    driver.set_active(_make_driver())
    try:
        with warnings.catch_warnings():
            # Kernel modules warn on import that no CPU backend can compile them;
            # the interpreter never compiles, so the warning only misleads here.
            warnings.filterwarnings("ignore", "Could not find an active CPU backend")
            yield
    finally:
        _compat.restore_triton_driver(previous)


def patch_lang_tensor(original: F) -> F:
    """Wrap the interpreter's ``_patch_lang_tensor`` so that ``tl.tensor.__index__``
    accepts the one-element arrays that scalars are.

    Converting with ``int(array)`` fails under NumPy 2.4 for arrays of one
    dimension (``only 0-dimensional arrays can be converted to Python scalars``)
    on every loop with a runtime bound; this squeezes first. Installed only on the
    Triton releases that need it (``_compat.TRITON_INTERPRETER_INDEX_NEEDS_SQUEEZE``).
    The interpreter restores the attribute with the rest of its patches after
    each launch.
    """

    @functools.wraps(original)
    def _patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    return _patch_lang_tensor


def contiguous_operands(original: F) -> F:
    """Wrap an ``InterpreterBuilder`` atomic so that its operands are contiguous.

    Triton's semantic layer broadcasts a scalar value to the pointer's shape, which
    in the interpreter is a NumPy view with stride 0; the interpreter's C++ atomics
    read their operands as contiguous arrays, so ``tl.atomic_add(ptrs, scalar)``
    (Inductor's ``index_put`` with accumulation, e.g. the backward of an indexing)
    stored whatever memory followed the scalar (found by the corpus; the releases
    it affects are in docs/upstream.md).
    """
    from triton.runtime.interpreter import TensorHandle

    def contiguous(value: Any) -> Any:
        if isinstance(value, TensorHandle) and not value.data.flags.c_contiguous:
            return TensorHandle(numpy.ascontiguousarray(value.data), value.dtype)
        return value

    @functools.wraps(original)
    def atomic(self: Any, *args: Any) -> Any:
        return original(self, *(contiguous(arg) for arg in args))

    return atomic


def converting_floats(original: F) -> F:
    """Wrap the interpreter's ``_implicit_cvt`` so that a float argument becomes a
    scalar tensor, as an int does.

    Triton compiles a Python float argument as an ``fp32`` scalar; the interpreter
    passes it on as a Python float, and a kernel that converts it
    (``ks0.to(tl.float32)``, Inductor's code for a float from ``.item()``) fails
    with ``'float' object has no attribute 'to'``.
    """
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    @functools.wraps(original)
    def _implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, float):
            return tl.tensor(
                TensorHandle(numpy.array([arg], dtype=numpy.float32), tl.float32), tl.float32
            )
        return original(arg)

    return _implicit_cvt


#: Held by every interpreted launch (and TTIR generation) in the process.
_interpreter_lock = threading.RLock()


def one_at_a_time(original: F) -> F:
    """Wrap an interpreted launch (``GridExecutor.__call__``), or anything that reads
    ``triton.language`` as Triton defines it (``generate_ttir``), so that one runs at
    a time in the process.

    A launch patches ``triton.language`` and keeps the program id in the interpreter's
    module globals until it returns; two threads launching at once read each other's
    program ids and undo each other's patches (``x >= grid_dim[0]``, "Did you forget
    to add @triton.jit ?").
    """

    @functools.wraps(original)
    def serialized(*args: Any, **kwargs: Any) -> Any:
        with _interpreter_lock:
            return original(*args, **kwargs)

    return serialized  # type: ignore[return-value]


def restoring_lang_patches(call: F) -> F:
    """Wrap ``InterpretedFunction.__call__`` (a device function that a kernel calls,
    such as ``tl.sum``) so that its patches of ``triton.language`` end with the call.

    Triton patches the builtins of the language modules the function sees and drops
    the scope that would undo that. A kernel sees ``triton.language``, which its
    launch restores; Triton's own helpers see ``triton.language.core``, which then
    stays patched for the process, and a later user kernel's TTIR (Inductor's
    mutation analysis) fails with "'ir.value' object has no attribute 'dtype'" and
    the kernel's mutations are guessed (docs/upstream.md). Patching the same
    modules before the call and undoing that after it puts back what was there
    before.
    """
    from triton.runtime import interpreter

    @functools.wraps(call)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        scope = interpreter._patch_lang(self.fn)
        try:
            return call(self, *args, **kwargs)
        finally:
            scope.restore()

    return __call__  # type: ignore[return-value]


# User kernels.

_twins: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def interpreted_kernel(value: Any) -> bool:
    """Whether ``value`` is a user kernel in interpreter mode: an
    ``InterpretedFunction``, or autotuners and heuristics over one."""
    try:
        from triton.runtime.autotuner import Autotuner, Heuristics
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return False
    seen = set()
    while isinstance(value, (Autotuner, Heuristics)) and id(value) not in seen:
        seen.add(id(value))
        value = value.fn
    return isinstance(value, InterpretedFunction)


def jit_twin(kernel: Any) -> Any:
    """The ``JITFunction`` twin of an interpreted user kernel, for tracing.

    An ``InterpretedFunction`` gets a ``JITFunction`` over the same Python function
    and the same ``@triton.jit`` options; an autotuner or heuristics over one gets a
    copy of itself over the twin of what it wraps. The twin is made once per kernel,
    so the kernel keeps one index in the kernel side table. It is never launched:
    the graph's kernels are imported from Inductor's wrapper code, interpreted.
    """
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    twin = _twins.get(kernel)
    if twin is not None:
        return twin
    if isinstance(kernel, InterpretedFunction):
        twin = JITFunction(kernel.fn, **getattr(kernel, "kwargs", {}))
    elif isinstance(kernel, (Autotuner, Heuristics)):
        twin = copy.copy(kernel)
        twin.fn = jit_twin(kernel.fn)
    else:
        raise TypeError(f"{kernel!r} is not an interpreted Triton kernel")
    _twins[kernel] = twin
    return twin


def tracing_interpreted_kernels(wrap: Any) -> Any:
    """Wrap Dynamo's ``VariableBuilder._wrap`` so that an interpreted user kernel
    becomes a ``TritonKernelVariable`` over its :func:`jit_twin`, as a compiled
    kernel does, guarded on the kernel object itself."""

    @functools.wraps(wrap)
    def _wrap(self: Any, value: Any) -> Any:
        if not interpreted_kernel(value):
            return wrap(self, value)
        from torch._dynamo.guards import GuardBuilder
        from torch._dynamo.variables.functions import TritonKernelVariable

        self.install_guards(GuardBuilder.ID_MATCH)
        return TritonKernelVariable(jit_twin(value), None, None, source=self.source)

    return _wrap


def _traced(values: Any) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return any(
        isinstance(leaf, torch.Tensor) and is_fake(leaf)
        for leaf in torch.utils._pytree.tree_leaves(values)
    )


def tracing_kernel_launches(run: Any) -> Any:
    """Wrap the ``run`` of interpreted kernels (``kernel[grid](...)``) so that a launch
    on fake tensors with ``wrap_triton`` enabled (tracing a ``triton_op``, whose
    ``wrap_triton`` hands interpreted kernels back as they are) records the kernel
    call, as ``wrap_triton`` does for a compiled kernel, instead of running the
    interpreter on tensors that have no data."""

    @functools.wraps(run)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        from torch._library.triton import is_wrap_triton_enabled

        if not (is_wrap_triton_enabled() and interpreted_kernel(self) and _traced((args, kwargs))):
            return run(self, *args, **kwargs)
        grid = kwargs.pop("grid")
        kwargs.pop("warmup", None)
        return TraceableTritonKernelWrapper(jit_twin(self), None, grid)(*args, **kwargs)

    return method
