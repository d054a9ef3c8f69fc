"""``ifx.compile(..., fullgraph=False)``: the direct call of a program that Dynamo
breaks into several graphs.

Real-library code breaks its graph where Python needs a value read from a tensor:
a loop over the experts a batch routes to, a size check on a data-dependent count.
Dynamo keeps that Python (the *glue*) and calls each graph; through
``torch.compile`` each graph is reached through AOTAutograd's and Inductor's
runtime wrappers, tens of microseconds per graph per call. Here each graph is
compiled as ``torch.compile`` compiles it (the FX backend), and where the
wrappers have nothing to do for it (no input updated, no output a view of an
input or of another output, no effect tokens, as in ``ifx.compile``'s one-graph
contract), Dynamo calls the graph's lowered runner itself: the same kernels,
without the wrappers. A graph whose wrappers have work keeps them.

What it assumes, and keeps:

- Where Dynamo meets a graph break it cannot resume from (one inside a loop over
  a tensor's values, as transformers' per-expert loop), it compiles the frame up
  to the last point it can resume from and leaves the rest of the frame to Python
  (all of it, where it gives the frame up: torchvision's per-class NMS loop); but
  it still intercepts every function that rest calls, and compiles those it can:
  each expert's activation became a graph entered once per expert per call. The
  artifact can run what such a rest calls as Python runs it, Dynamo's strategy
  for that frame's code set to skip its callees for the call and put back as
  Dynamo set it after: the rest then runs exactly as eager runs it. Which way is
  faster depends on the callees (a small activation against its region's entry,
  a whole model against eager), so it times both, frame by frame, on the example
  when compiling and keeps the faster.
- Dynamo's guards stay, frame by frame: a branch of the glue on a value read
  from a tensor is decided on every call, and a call that fails a frame's guards
  recompiles it, as ``torch.compile`` would (at most Dynamo's cache size limit;
  beyond, that frame runs eager). Skipping them would save a few microseconds
  per graph and could run a graph compiled for other sizes.
- Inference: gradients off for the whole call, as for the one-graph artifact.
- Each call's arguments are checked (their structure, each tensor's device,
  dtype and rank, its sizes where ``dynamic=False``) and a mismatch raises
  :class:`InputError` naming the argument; the glue itself is not re-checked.
- The program runs on copies of the example's tensors while it compiles; one
  that updates an argument or its module's state in place is refused, with the
  caller's tensors as they were.
- It cannot be saved or pickled: the glue is bytecode that Dynamo generated in
  this process.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .. import _compat
from .._compat import frames
from . import python_rests, self_check, structures
from .backend import fx_backend
from .compiled import CompileError, InputError
from .direct_sources import aot_wrapper_work
from .input_views import direct_call, input_views
from .logs import log
from .recording import recording_graphs

#: Dynamo's settings that keep ``.item()`` and ops of data-dependent output sizes
#: inside its graphs (without them, each is one more break).
_DYNAMO_CAPTURE = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}


class CompiledWithBreaks:
    """What ``ifx.compile(fn, ..., fullgraph=False)`` returns for a program of
    several graphs: called like the program, through Dynamo's glue, each graph run
    directly where nothing of AOTAutograd's wrappers is needed.

    ``graphs`` holds the FX graphs compiled so far (a recompile adds its own);
    ``dynamo_graphs`` counts Dynamo's graphs; ``wrapped`` says why each graph that
    kept AOTAutograd's wrappers kept them; ``python_rests`` names the functions
    whose rest Dynamo leaves to Python (after a graph break it cannot resume from,
    or the whole frame where it gave the frame up); ``python_callees`` names those
    whose callees run as Python, not intercepted by Dynamo (the faster on the
    example, ``rest_seconds`` each way: :meth:`choose_rests`);
    ``rests_as_python`` says whether that is all of them, and set, makes it all or
    none.
    """

    def __init__(
        self,
        compiled: Callable[..., Any],
        backend: DirectGraphs,
        names: list[str],
        in_spec: pytree.TreeSpec,
        examples: list[Any],
        out_spec: pytree.TreeSpec,
        *,
        dynamic: bool,
        settings: dict[str, bool],
    ) -> None:
        self._compiled = compiled
        self._settings = settings
        self._backend = backend
        self.names = names
        self.in_spec = in_spec
        self.out_spec = out_spec
        self.dynamic = dynamic
        self._flat = in_spec == pytree.tree_flatten(tuple(names))[1]
        #: (index, device, dtype, rank, sizes or None) of each tensor argument.
        self._tensors = [
            (i, t.device, t.dtype, t.dim(), None if dynamic else tuple(t.shape))
            for i, t in enumerate(examples)
            if isinstance(t, torch.Tensor)
        ]
        #: (index, type) of each Python scalar argument.
        self._scalars = [(i, type(v)) for i, v in enumerate(examples) if not _is_tensor(v)]
        #: The frames whose callees run as Python, and whether each runs its graphs.
        self._as_python = dict(backend.python_rests)
        #: Median seconds of a call on the example, for each frame of ``python_rests``
        #: timed, by whether its callees ran as Python.
        self.rest_seconds: dict[str, dict[bool, float]] = {}

    @property
    def graphs(self) -> list[torch.fx.GraphModule]:
        return list(self._backend.graphs)

    @property
    def dynamo_graphs(self) -> int:
        return self._backend.dynamo_graphs

    @property
    def wrapped(self) -> list[str]:
        return list(self._backend.wrapped)

    @property
    def python_rests(self) -> list[str]:
        return [code.co_qualname for code in self._backend.python_rests]

    @property
    def python_callees(self) -> list[str]:
        return [code.co_qualname for code in self._as_python]

    @property
    def rests_as_python(self) -> bool:
        return len(self._as_python) == len(self._backend.python_rests)

    @rests_as_python.setter
    def rests_as_python(self, as_python: bool) -> None:
        self._as_python = dict(self._backend.python_rests) if as_python else {}

    def __call__(self, *args: Any) -> Any:
        if self._flat and len(args) == len(self.names):
            leaves: Sequence[Any] = args
        else:
            leaves, spec = pytree.tree_flatten(args)
            if spec != self.in_spec:
                raise InputError(structures.departure(args, self.in_spec))
        self._check(leaves)
        grad = torch.is_grad_enabled()
        if grad:
            _compat.set_grad_enabled(False)
        try:
            with _capturing(self._settings), python_rests.callees_as_python(self._as_python):
                outputs = self._compiled(*leaves)
        finally:
            if grad:
                _compat.set_grad_enabled(True)
        return pytree.tree_unflatten(list(outputs), self.out_spec)

    def choose_rests(self, example_inputs: tuple[Any, ...], budget_s: float = 1.0) -> None:
        """Run the callees of each frame of ``python_rests`` as Python or as Dynamo
        compiles them, whichever the example times faster (:func:`python_rests.chosen`)."""

        def call(as_python: dict[types.CodeType, bool]) -> None:
            self._as_python = as_python
            self(*example_inputs)

        rests, device = self._backend.python_rests, self._backend.device
        self._as_python, self.rest_seconds = python_rests.chosen(rests, call, device, budget_s)

    def _check(self, leaves: Sequence[Any]) -> None:
        for index, device, dtype, rank, sizes in self._tensors:
            value = leaves[index]
            if (
                not isinstance(value, torch.Tensor)
                or value.dtype != dtype
                or value.device != device
                or value.dim() != rank
                or value.requires_grad
                or (sizes is not None and tuple(value.shape) != sizes)
            ):
                raise InputError(self._mismatch(index, value, device, dtype, rank, sizes))
        for index, kind in self._scalars:
            if type(leaves[index]) is not kind:
                raise InputError(
                    f"{self.names[index]} is a {type(leaves[index]).__name__}; the artifact was "
                    f"compiled for a Python {kind.__name__} there"
                )

    def _mismatch(
        self, index: int, value: Any, device: Any, dtype: Any, rank: int, sizes: Any
    ) -> str:
        name = self.names[index]
        wanted = f"a {dtype} tensor of {rank} dimensions on {device}"
        if not isinstance(value, torch.Tensor):
            return f"{name} is a {type(value).__name__}; the artifact takes {wanted} there"
        if value.requires_grad:
            return f"{name} requires grad; the artifact is for inference: pass {name}.detach()"
        got = f"a {value.dtype} tensor of {value.dim()} dimensions on {value.device}"
        if (value.dtype, value.device, value.dim()) != (dtype, device, rank):
            return f"{name} is {got}; the artifact takes {wanted}"
        return (
            f"{name} has sizes {tuple(value.shape)}; the artifact was compiled for {sizes} "
            "(compile it with dynamic=True for other sizes)"
        )

    def __reduce__(self) -> Any:
        raise TypeError(
            "an ifx.compile artifact of a program with graph breaks holds Dynamo's glue "
            "between its graphs, which cannot be saved or pickled; make the program one graph "
            "(ifx.compile with fullgraph=True saves), or compile it again where it runs"
        )

    def __repr__(self) -> str:
        return (
            f"<ifx.compile artifact of {self.dynamo_graphs} graphs with Dynamo's glue, "
            f"{len(self.wrapped)} of them through AOTAutograd's wrappers>"
        )


class DirectGraphs:
    """The Dynamo backend of a program with breaks: each graph compiled with the FX
    backend, then called directly (its lowered runner) where AOTAutograd's runtime
    wrappers have nothing to do for it."""

    def __init__(self, device: str, cuda_graphs: bool) -> None:
        self.device = device
        self.cuda_graphs = cuda_graphs
        self.graphs: list[torch.fx.GraphModule] = []
        self.dynamo_graphs = 0
        self.wrapped: list[str] = []
        self.accumulates = False
        #: The code of each frame whose rest Dynamo leaves to Python, in the order
        #: found, and whether the frame runs graphs: True where Dynamo compiled it up
        #: to a graph break it cannot resume from, False where it gave it up whole.
        self.python_rests: dict[types.CodeType, bool] = {}

    def __call__(self, gm: torch.fx.GraphModule, examples: list[Any]) -> Callable[..., Any]:
        from torch._functorch import config as functorch_config
        from torch._guards import TracingContext
        from torch._inductor.compile_fx import compile_fx

        self.dynamo_graphs += 1
        self.accumulates = self.accumulates or self_check.accumulates(gm)
        if frames.leaves_rest_to_python(gm):
            code = frames.dynamo_frame_code()
            if code is not None:
                self.python_rests[code] = True
        with contextlib.ExitStack() as stack:
            stack.enter_context(fx_backend(self.device))
            graphs = stack.enter_context(recording_graphs())
            # AOTAutograd's cache would serve the graph without its metadata.
            stack.enter_context(functorch_config.patch(enable_autograd_cache=False))
            compiled = compile_fx(gm, examples)
        fw_metadata = getattr(TracingContext.try_get(), "fw_metadata", None)
        views_of_inputs = input_views(fw_metadata, graphs[-1]) if graphs else ()
        work = aot_wrapper_work(fw_metadata, [output for output, _ in views_of_inputs])
        if work is None and not graphs:
            work = "the FX backend produced no graph"
        if work is not None:
            log.info(
                "ifx.compile: graph %d keeps AOTAutograd's wrappers: %s", self.dynamo_graphs, work
            )
            self.wrapped.append(f"graph {self.dynamo_graphs}: {work}")
            return compiled
        self.graphs.extend(graphs)
        return direct_call(graphs[-1], self.cuda_graphs, views_of_inputs)

    def gave_up(self, code: types.CodeType) -> None:
        """Dynamo gave up on a frame of ``code``: it runs as Python, its callees intercepted."""
        self.python_rests.setdefault(code, False)


def compile_with_breaks(
    fn: Callable[..., Any],
    flat_function: Callable[[], Callable[..., Any]],
    names: list[str],
    in_spec: pytree.TreeSpec,
    leaves: list[Any],
    device: str,
    *,
    dynamic: bool,
    cuda_graphs: bool,
    example_inputs: tuple[Any, ...],
) -> CompiledWithBreaks:
    """Compile ``fn`` over the inputs' leaves (a new function from ``flat_function``
    for each trace) with Dynamo's breaks, run it once on copies of ``leaves``, and
    check the artifact against eager.

    With ``.item()`` and data-dependent output sizes kept in the graphs first; where
    Dynamo then cannot go on (``.tolist()`` of a selection raises where it would
    break), with them as breaks."""
    for capture in (True, False):
        settings = dict.fromkeys(_DYNAMO_CAPTURE, capture)
        backend = DirectGraphs(device, cuda_graphs)
        compiled = torch.compile(flat_function(), backend=backend, fullgraph=False, dynamic=dynamic)
        try:
            with frames.recording_given_up(backend.gave_up):
                _run_example(compiled, fn, names, leaves, settings)
        except _DataDependent as e:
            if not capture:
                raise CompileError(f"Dynamo cannot trace this program: {e}") from e
            log.info("ifx.compile: %s; tracing again with .item() and nonzero as breaks", e)
            continue
        break
    with torch.no_grad():
        expected = fn(*example_inputs)
    artifact = CompiledWithBreaks(
        compiled,
        backend,
        names,
        in_spec,
        leaves,
        pytree.tree_flatten(expected)[1],
        dynamic=dynamic,
        settings=settings,
    )
    artifact.choose_rests(example_inputs)
    self_check.check(
        artifact(*example_inputs),
        expected,
        accumulates=backend.accumulates,
        inputs=leaves,
        in_float32=lambda: self_check.run_in_float32(fn, example_inputs),
        in_float64=lambda: self_check.run_in_float64(fn, example_inputs),
    )
    return artifact


class _DataDependent(Exception):
    """Dynamo raised on a data-dependent value where it would not break the graph."""


def _run_example(
    compiled: Callable[..., Any],
    fn: Callable[..., Any],
    names: list[str],
    leaves: list[Any],
    settings: dict[str, bool],
) -> None:
    """Run ``compiled`` on copies of ``leaves`` (compiling its graphs); refuse a
    program that updates an argument or its module's state."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    copies = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    state = _state_tensors(fn)
    versions = [t._version for t in [*copies, *state]]
    with torch.no_grad(), _capturing(settings), torch._dynamo.config.patch(suppress_errors=False):
        try:
            compiled(*copies)
        except torch._dynamo.exc.BackendCompilerFailed as e:
            inner = e.inner_exception
            first = str(inner).strip().splitlines()[0] if str(inner).strip() else ""
            raise CompileError(
                f"Inductor cannot compile a graph of this program: {type(inner).__name__}: {first}"
            ) from e
        except (GuardOnDataDependentSymNode, torch._dynamo.exc.UserError) as e:
            raise _DataDependent(str(e).strip().splitlines()[0]) from e
    changed = [
        names[i] if i < len(copies) else "the module's state"
        for i, (t, v) in enumerate(zip([*copies, *state], versions))
        if t._version != v
    ]
    if changed:
        raise CompileError(
            f"the program updates {changed[0]} in place; ifx.compile refuses programs that "
            "mutate their inputs or state (torch.compile runs them): compute a new tensor "
            "instead (x + 1, not x.add_(1))"
        )


@contextlib.contextmanager
def _capturing(settings: dict[str, bool]) -> Any:
    """Dynamo's capture ``settings``, for the frames it compiles (on a recompile
    too); set only where they differ, and put back after. Set one by one, not by
    ``config.patch``, which builds a class on each call (13 µs of a call's host
    time on a CPU of this project's CI)."""
    config = torch._dynamo.config
    before = {name: getattr(config, name) for name in settings}
    changed = [name for name, value in settings.items() if before[name] != value]
    for name in changed:
        setattr(config, name, settings[name])
    try:
        yield
    finally:
        for name in changed:
            setattr(config, name, before[name])


def _state_tensors(fn: Any) -> list[torch.Tensor]:
    if isinstance(fn, torch.nn.Module):
        return [*fn.parameters(), *fn.buffers()]
    return []


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)
