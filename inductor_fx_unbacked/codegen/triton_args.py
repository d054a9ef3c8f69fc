"""Part 5: Triton call args matched to the kernel's signature, with ``triton_meta``'s
constants, by pure functions of plain values (tested directly).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Collection, Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class ReconciledCallArgs:
    """Triton launch arguments, by name.

    ``kernel_kwargs`` are the kernel's own parameters in signature order, config
    kwargs (block sizes) excluded; ``launcher_kwargs`` are Inductor's extra launcher
    arguments, which only the grid reads.
    """

    kernel_kwargs: dict[str, Any]
    launcher_kwargs: dict[str, Any]


def reconcile_triton_call_args(
    signature: Sequence[str],
    constants: Mapping[str, Any],
    call_args: Sequence[Any],
    config_kwargs: Mapping[str, Any],
    extra_launcher_args: Sequence[str] = (),
    constexprs: Collection[str] = (),
) -> ReconciledCallArgs:
    """Match Inductor's positional call args to the kernel signature, by name.

    Inductor passes one value for every parameter that is not a ``tl.constexpr``
    of the kernel (``constexprs``; the config kwargs, such as block sizes, always
    are), in signature order, then the declared extra launcher arguments: for its
    own kernels and for user-written ones alike (it drops a user kernel's
    constexprs from the call, wherever they stand in the signature). A constexpr
    takes its value from the config or from ``constants``; one with neither is
    left to the kernel's own default. Constants from ``triton_meta`` also win
    over a passed value (an equal-to-1 ``xnumel`` is both passed and constant).
    A count of call args that differs from the parameters they stand for means
    the two lists disagree, and fails loudly instead of shifting values onto the
    wrong parameters.
    """
    n_extra = len(extra_launcher_args)
    positional = list(call_args[: len(call_args) - n_extra])
    launcher_values = list(call_args[len(call_args) - n_extra :])
    passed = [name for name in signature if name not in config_kwargs and name not in constexprs]
    assert len(positional) <= len(passed), (
        f"{len(positional)} positional call args for {len(passed)} non-constexpr "
        f"parameters {passed}: value {positional[len(passed)]!r} would land on a "
        f"constexpr or config kwarg of {sorted({*constexprs, *config_kwargs})}"
    )
    missing = [name for name in passed[len(positional) :] if name not in constants]
    assert not missing, f"no call arg or constant for parameters {missing}"
    by_name = dict(zip(passed, positional))
    kernel_kwargs = {}
    for name in signature:
        if name in config_kwargs:
            continue
        if name in constants:
            kernel_kwargs[name] = constants[name]
        elif name in by_name:
            kernel_kwargs[name] = by_name[name]
    return ReconciledCallArgs(
        kernel_kwargs=kernel_kwargs,
        launcher_kwargs=dict(zip(extra_launcher_args, launcher_values)),
    )


def declared_constexprs(fn: Any) -> list[str]:
    """The names of the ``tl.constexpr`` parameters of a Triton kernel function.

    A ``JITFunction`` records them on its parameters; the interpreter's
    ``InterpretedFunction`` does not, so they are read off the annotations of
    the Python function it wraps (what Triton's own parameters do).
    """
    params = getattr(fn, "params", None)
    if params is not None:
        return [param.name for param in params if param.is_constexpr]
    python_fn = getattr(fn, "fn", fn)
    return [
        name
        for name, param in inspect.signature(python_fn).parameters.items()
        if "constexpr" in str(param.annotation)
    ]
