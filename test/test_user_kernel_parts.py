"""The pure parts behind user Triton kernels: which launches the runner can take
over, and the ``JITFunction`` twin that tracing uses in the CPU mode."""

import pytest
import torch
from torch._inductor.runtime.triton_heuristics import FixedGrid

from inductor_fx_unbacked.runner.lowering import launcher_args_are_the_grid

interpreting = pytest.mark.skipif(
    torch.cuda.is_available(), reason="the CPU mode: kernels are InterpretedFunctions"
)


def test_inductor_kernels_take_no_extra_launcher_args():
    assert launcher_args_are_the_grid({"grid_type": "Grid1D"})


def test_a_user_kernel_with_one_grid_takes_the_grid():
    assert launcher_args_are_the_grid(FixedGrid.setup_grid_as_args())


def test_an_autotuned_user_kernel_with_config_dependent_grids_takes_sizes():
    # What Inductor writes for ``kernel[lambda meta: (cdiv(n, meta["BLOCK"]),)]``
    # with two configs: the launcher computes each config's grid from ``n``.
    meta = {
        "grid_type": "PrecomputedGrid",
        "precomputed_grids": [],
        "extra_launcher_args": ["_launcher_s0"],
    }
    assert not launcher_args_are_the_grid(meta)


@interpreting
def test_jit_twin_of_an_interpreted_kernel():
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from inductor_fx_unbacked.integration.cpu_mode import interpreted_kernel, jit_twin

    @triton.jit(do_not_specialize=["n"])
    def kernel(x_ptr, n, BLOCK: tl.constexpr):
        pass

    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 4})], key=["n"])(kernel)
    assert isinstance(kernel, InterpretedFunction)
    twin = jit_twin(kernel)
    assert isinstance(twin, JITFunction) and twin.fn is kernel.fn
    assert [p.name for p in twin.params if p.is_constexpr] == ["BLOCK"]
    assert [p.name for p in twin.params if p.do_not_specialize] == ["n"]
    assert jit_twin(kernel) is twin, "one twin per kernel: one kernel-table index"
    assert interpreted_kernel(tuned) and jit_twin(tuned).fn is twin
    assert tuned.fn is kernel, "the kernel the program launches is left alone"
    assert not interpreted_kernel(twin)
    with pytest.raises(TypeError, match="not an interpreted Triton kernel"):
        jit_twin(twin)


def test_interpreter_benchmark_times_one_run():
    from inductor_fx_unbacked.integration.cpu_mode import run_once_benchmark

    calls = []
    timings = run_once_benchmark(lambda: calls.append(1), quantiles=(0.5, 0.2, 0.8))
    assert calls == [1] and len(timings) == 3 and all(t >= 0 for t in timings)


@interpreting
def test_a_device_function_leaves_triton_language_as_it_was():
    """``tl.sum`` is a device function of Triton's own; the interpreter patches the
    language modules it sees for the call, and the CPU mode undoes that afterwards,
    so that later compiles (a user kernel's TTIR) see ``triton.language`` intact."""
    import triton
    import triton.language as tl

    from inductor_fx_unbacked.integration import overlay

    overlay.fix_interpreter()

    @triton.jit
    def row_sums(x_ptr, out_ptr, N: tl.constexpr):
        row = tl.program_id(0)
        tl.store(out_ptr + row, tl.sum(tl.load(x_ptr + row * N + tl.arange(0, N)), 0))

    modules = (tl, tl.core)
    before = [dict(vars(module)) for module in modules]
    x = torch.randn(3, 8)
    out = torch.empty(3)
    row_sums[(3,)](x, out, N=8)
    torch.testing.assert_close(out, x.sum(1))
    for module, values in zip(modules, before):
        changed = sorted(
            name for name, value in vars(module).items() if values.get(name) is not value
        )
        assert not changed, f"{module.__name__}: {len(changed)} names still patched: {changed[:5]}"
