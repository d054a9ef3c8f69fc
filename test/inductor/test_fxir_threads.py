# Owner(s): ["module: inductor"]
"""``fx_backend`` from several threads.

The overlay, a device's registration and Triton's active driver are process-wide;
``fx_backend`` holds them by reference count, so one thread leaving never pulls
the backend from under another that is still compiling, and a second thread
that asks for other options for the same device is refused by name. Each
thread's ``recording_graphs`` receives only that thread's graphs.

Dynamo compiles one frame at a time (its compile lock), so the threads' compiles
interleave rather than run in parallel; their kernels run in parallel (in the
CPU mode, one interpreted launch at a time, see ``integration/cpu_mode.py``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest
import torch
from torch._inductor import config
from torch._inductor.codegen import common

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked import _compat
from inductor_fx_unbacked.artifact.kernels import owned_kernels
from inductor_fx_unbacked.demo.programs import signed

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("CPU mode needs TRITON_INTERPRET=1", allow_module_level=True)

#: How long a thread waits for the other at a barrier before the test fails.
TIMEOUT_S = 600
#: How long one step of a scripted interleaving waits for the other thread's.
STEP_TIMEOUT_S = 60

DYNAMO_CONFIG = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}


@pytest.fixture(autouse=True, scope="module")
def traced_once_in_the_main_thread():
    """Torch 2.10's CUDA builds on a machine without a GPU install a no-op CUDA device
    guard on the first fake-tensor trace, which dies with the thread that traced; a
    later trace in another thread segfaults (docs/upstream.md). A trace in the main
    thread first keeps it alive, as it is in any program that compiled there."""
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))


@pytest.fixture(autouse=True)
def fresh_state():
    # Where configs are process-wide (torch 2.10) the threads see this patch; where
    # they are per thread, each thread sets its own (``compiling_thread``). Dynamo
    # patches ``assume_static_by_default`` around each call of a function compiled
    # with ``dynamic=``; on 2.10 two threads' patches interleave and can leave it
    # changed for the process (docs/upstream.md), so it is put back for later tests.
    dynamo = torch._dynamo.config
    with dynamo.patch(
        **DYNAMO_CONFIG,
        assume_static_by_default=dynamo.assume_static_by_default,
        automatic_dynamic_shapes=dynamo.automatic_dynamic_shapes,
    ):
        torch._dynamo.reset()
        yield
    torch._dynamo.reset()
    ifx.disable()


def masked_sines(x):
    return x[x > 0].sin() * 2


def counted_cosines(x):
    n = (x > 0).sum().item()
    torch._check(n <= x.shape[0])
    return torch.arange(n, device=x.device).float().cos() + x.sum()


def negatives_doubled_abs(x):
    return x[x < 0].abs() * 3


def inputs():
    """Two inputs whose data-dependent sizes differ (5 and 17 positives of 24)."""
    return [signed(24, n, DEVICE, seed=n) for n in (5, 17)]


def registration(device: str = DEVICE):
    return (
        common.device_codegens.get(device),
        common.custom_backend_passes.get(device),
        config.cpu_backend,
    )


def kernel_names(graphs) -> set[str]:
    """The names of the Triton kernels that the graphs own."""
    return {source.kernel_name for gm in graphs for source in owned_kernels(gm).sources().values()}


def defines_a_symbol(gm: torch.fx.GraphModule) -> bool:
    return any("unbacked_symbol" in node.meta for node in gm.graph.nodes)


def compile_and_check(fn) -> None:
    compiled = torch.compile(fn, fullgraph=True, dynamic=True)
    for x in inputs():
        torch.testing.assert_close(compiled(x), fn(x))


def run_threads(*bodies: Callable[[], None]) -> None:
    """Run each body in a thread of its own and re-raise the first failure."""
    errors: list[BaseException] = []

    def compiling_thread(body):
        try:
            # Dynamo's config is per thread on torch 2.13+: set it where Dynamo reads it.
            for name, value in DYNAMO_CONFIG.items():
                setattr(torch._dynamo.config, name, value)
            body()
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    threads = [
        threading.Thread(target=compiling_thread, args=(body,), name=body.__name__)
        for body in bodies
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
        assert not thread.is_alive(), f"thread {thread.name} did not finish"
    if errors:
        raise errors[0]


def test_two_threads_compile_different_programs_at_the_same_time():
    common.init_backend_registration()
    before = registration()
    both_inside = threading.Barrier(2, timeout=TIMEOUT_S)
    both_compiled = threading.Barrier(2, timeout=TIMEOUT_S)
    first_left = threading.Event()
    recorded: dict[str, list[torch.fx.GraphModule]] = {}
    codegens: dict[str, object] = {}

    def compile_beside_the_other(name, program):
        both_inside.wait()
        codegens[name] = common.device_codegens[DEVICE]
        assert config.cpu_backend == ("triton" if DEVICE == "cpu" else before[2])
        compile_and_check(program)
        both_compiled.wait()

    def first():
        with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
            compile_beside_the_other("first", masked_sines)
        recorded["first"] = graphs
        first_left.set()

    def second():
        with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
            compile_beside_the_other("second", counted_cosines)
            assert first_left.wait(TIMEOUT_S)
            # The other thread has left; this one still compiles with the backend.
            assert ifx.is_enabled()
            assert common.device_codegens[DEVICE] is codegens["second"]
            compile_and_check(negatives_doubled_abs)
        recorded["second"] = graphs

    run_threads(first, second)

    # Both threads shared one registration.
    assert codegens["first"] is codegens["second"]
    assert codegens["first"].wrapper_codegen.__name__.endswith("FxWrapperCodegen")
    # Each thread recorded only its own graphs, each defining an unbacked symbol.
    assert len(recorded["first"]) == 1 and len(recorded["second"]) == 2
    assert all(defines_a_symbol(gm) for gms in recorded.values() for gm in gms)
    first_kernels = kernel_names(recorded["first"])
    second_kernels = kernel_names(recorded["second"])
    assert any("sin" in name for name in first_kernels), first_kernels
    assert not any("cos" in name or "abs" in name for name in first_kernels), first_kernels
    assert any("cos" in name for name in second_kernels), second_kernels
    assert any("abs" in name for name in second_kernels), second_kernels
    assert not any("sin" in name for name in second_kernels), second_kernels
    # The last to leave restored everything.
    assert not ifx.is_enabled()
    assert registration() == before


def test_other_options_from_another_thread_are_refused_by_name():
    common.init_backend_registration()
    before = registration()
    inside = threading.Event()
    refused = threading.Event()
    errors: dict[str, BaseException] = {}

    def holder():
        with ifx.fx_backend(DEVICE):
            held = common.device_codegens[DEVICE]
            inside.set()
            assert refused.wait(TIMEOUT_S)
            # The refused entrant changed nothing: this thread's backend still compiles.
            assert common.device_codegens[DEVICE] is held
            compile_and_check(masked_sines)

    def other():
        assert inside.wait(TIMEOUT_S)
        try:
            with ifx.fx_backend(DEVICE, runner="graph"):
                pass
        except ifx.FxBackendConflictError as e:
            errors["other"] = e
        finally:
            refused.set()

    run_threads(holder, other)

    message = str(errors["other"])
    assert f"fx_backend('{DEVICE}', runner='graph', runtime_asserts=True) in thread 'other'" in (
        message
    )
    assert f"thread 'holder' is inside fx_backend('{DEVICE}', runner='lowered'" in message
    assert registration() == before
    assert not ifx.is_enabled()


def test_one_thread_nests_other_options_and_gets_each_back():
    common.init_backend_registration()
    before = registration()
    with ifx.fx_backend(DEVICE):
        outer = common.device_codegens[DEVICE]
        assert outer.wrapper_codegen.runner == "lowered"
        with ifx.fx_backend(DEVICE, runner="graph", runtime_asserts=False):
            inner = common.device_codegens[DEVICE].wrapper_codegen
            assert (inner.runner, inner.runtime_asserts) == ("graph", False)
            with ifx.recording_graphs() as graphs:
                compile_and_check(masked_sines)
            assert not any(
                node.meta.get("runtime_assert") for gm in graphs for node in gm.graph.nodes
            )
        assert common.device_codegens[DEVICE] is outer
        assert ifx.is_enabled()
    assert registration() == before
    assert not ifx.is_enabled()


def test_a_thread_joining_with_the_same_options_shares_the_registration():
    """A second entrant with the same options changes nothing; the first leaving
    first leaves it in place for the second."""
    common.init_backend_registration()
    before = registration()
    entered = threading.Event()
    first_left = threading.Event()
    seen = {}

    def first():
        with ifx.fx_backend(DEVICE):
            seen["first"] = common.device_codegens[DEVICE]
            entered.set()
            assert seen_second.wait(TIMEOUT_S)
        first_left.set()

    seen_second = threading.Event()

    def second():
        assert entered.wait(TIMEOUT_S)
        with ifx.fx_backend(DEVICE):
            seen["second"] = common.device_codegens[DEVICE]
            seen_second.set()
            assert first_left.wait(TIMEOUT_S)
            seen["after_first_left"] = common.device_codegens[DEVICE]
            seen["enabled_after_first_left"] = ifx.is_enabled()

    run_threads(first, second)
    assert seen["first"] is seen["second"] is seen["after_first_left"]
    assert seen["enabled_after_first_left"]
    assert registration() == before
    assert not ifx.is_enabled()


def summed_negatives(x):
    return (x[x < 0].abs() * 3).sum(0, keepdim=True) + x.sum()


def test_two_threads_run_compiled_graphs_at_the_same_time():
    """Calls of compiled graphs overlap; in the CPU mode Triton's interpreter keeps a
    launch's state in module globals, and launches take turns."""
    xs = [signed(4096, n, DEVICE, seed=n) for n in (500, 1700)]
    with ifx.fx_backend(DEVICE):
        compiled = {
            fn: torch.compile(fn, fullgraph=True, dynamic=True)
            for fn in (masked_sines, summed_negatives)
        }
        for compiled_fn in compiled.values():
            compiled_fn(xs[0])
        start = threading.Barrier(2, timeout=TIMEOUT_S)

        def calling(fn):
            def body():
                start.wait()
                for _ in range(10):
                    for x in xs:
                        torch.testing.assert_close(compiled[fn](x), fn(x))

            body.__name__ = fn.__name__
            return body

        run_threads(calling(masked_sines), calling(summed_negatives))


class _NonInfraMode(torch.utils._python_dispatch.TorchDispatchMode):
    """A user's mode (not infra, does not ignore compile internals)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def leave_dispatch_mode_flags_set() -> None:
    """Two threads' modes interleaved as two compiles can interleave them: the user
    mode enters, the fake mode saves the flags it set, the user mode leaves, and the
    fake mode puts the saved flags back, with no mode active in any thread."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    user_in, fake_in, user_out = (threading.Event() for _ in range(3))

    def user():
        try:
            with _NonInfraMode():
                user_in.set()
                assert fake_in.wait(STEP_TIMEOUT_S)
        finally:
            user_in.set()  # a failure here does not leave the other thread waiting
            user_out.set()

    def fake():
        try:
            assert user_in.wait(STEP_TIMEOUT_S)
            with FakeTensorMode():
                fake_in.set()
                assert user_out.wait(STEP_TIMEOUT_S)
        finally:
            fake_in.set()

    run_threads(user, fake)


def doubled_then_masked(x):
    y = x * 2
    torch._dynamo.graph_break()
    return masked_sines(y)


def test_dispatch_mode_flags_left_set_by_other_threads_do_not_stop_a_compile():
    """Upstream keeps "inside a dispatch mode" flags for the whole process; Dynamo
    skips every frame while they are set. ``fx_backend`` sets them to the compiling
    thread's modes, so the compile captures its frames and hands out its graphs."""
    from inductor_fx_unbacked.integration import thread_flags

    leave_dispatch_mode_flags_set()
    assert any(thread_flags.dispatch_mode_flags().values()) and not thread_flags.active_modes()
    with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
        flags_inside = thread_flags.dispatch_mode_flags()
        compiled = torch.compile(doubled_then_masked)
        for x in inputs():
            torch.testing.assert_close(compiled(x), doubled_then_masked(x))
    # Both frames, before and after the break, were compiled; the second one's graph
    # defines the mask's length.
    assert len(graphs) >= 2
    assert any(defines_a_symbol(gm) for gm in graphs)
    assert not any(flags_inside.values())
    # Left as the thread's modes say for the compiles that come after.
    assert not any(thread_flags.dispatch_mode_flags().values())


@pytest.mark.skipif(
    _compat.eval_frame_override() is None, reason="this torch has no eval-frame override (2.11 has)"
)
def test_an_eval_frame_override_left_by_other_threads_does_not_stop_a_compile():
    """Each call of a ``fullgraph=True`` function sets Dynamo's process-wide override
    to skip the frames its compiled code calls, and restores what it found; two
    threads' calls can leave it at "skip" (as here). ``fx_backend`` clears it, so
    the compile captures the frame after the break too."""
    from inductor_fx_unbacked.integration import thread_flags

    _compat.set_eval_frame_override("SKIP")
    with ifx.fx_backend(DEVICE), ifx.recording_graphs() as graphs:
        override_inside = thread_flags.flags()["eval-frame override"]
        compiled = torch.compile(doubled_then_masked)
        for x in inputs():
            torch.testing.assert_close(compiled(x), doubled_then_masked(x))
    assert len(graphs) >= 2
    assert any(defines_a_symbol(gm) for gm in graphs)
    assert override_inside == "NONE"
    assert thread_flags.flags()["eval-frame override"] == "NONE"
