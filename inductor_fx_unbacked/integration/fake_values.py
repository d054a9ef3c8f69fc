"""Fake values that upstream gets wrong, corrected while the overlay is installed.

``torch.unique``'s fake implementation (``fake_impls._unique``, behind
``_unique2``, ``unique_dim`` and ``unique_consecutive``) gives the inverse indices
and the counts the input's dtype on torch 2.10 and 2.11; the operator returns
them as int64 (2.15 says so too). Of an int32 input, Inductor then compiles the
kernels that read the counts for int32 elements while the counts hold int64:
``torch.unique(x, return_counts=True)[1].float().mean()`` gave 0.75 where eager
gives 1.25, through every wrapper, on the H200 (fuzzer seed 1796310482), and the
compiled program's counts have the wrong dtype on CPU too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


def unique_indices_as_int64(unique: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``fake_impls._unique``: its inverse and counts (the second and third
    values) as int64, as the operator returns them. The distinct values keep the
    input's dtype, and their memoized length."""

    @functools.wraps(unique)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values, inverse, counts = unique(*args, **kwargs)
        return values, _as_int64(inverse), _as_int64(counts)

    return wrapper


def _as_int64(fake: torch.Tensor) -> torch.Tensor:
    if fake.dtype == torch.int64:
        return fake
    return fake.new_empty(fake.shape, dtype=torch.int64)
