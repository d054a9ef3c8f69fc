"""The CPU mode's combines of an arg reduction's (value, index) pairs.

Inductor's ``maximum_with_index`` and ``minimum_with_index`` (``triton_helpers``)
take a NaN over a number with ``a_isnan & (not b_isnan)``. Compiled by Triton,
``not`` of a tensor is elementwise; run by Triton's interpreter it is Python's
``not`` of the whole block, one boolean. So in the CPU mode ``argmax`` and
``argmin`` over a NaN gave the index of the last NaN, or of no NaN at all, where
eager gives the first (``x.argmax()`` of a static length as much as of a
selection). These combines say the same thing elementwise; the CPU mode puts
them in ``triton_helpers`` for its interpreted kernels only.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _first_best(a_value, a_index, b_value, b_index, a_better):
    # a wins: it is better, or NaN against a number, or ties (NaN with NaN too)
    # at a lower index.
    a_nan = a_value != a_value
    better = a_better | (a_nan & (b_value == b_value))
    tied = (a_value == b_value) | (a_nan & (b_value != b_value))
    a_wins = better | (tied & (a_index < b_index))
    return tl.where(a_wins, a_value, b_value), tl.where(a_wins, a_index, b_index)


@triton.jit
def maximum_with_index(a_value, a_index, b_value, b_index):
    return _first_best(a_value, a_index, b_value, b_index, a_value > b_value)


@triton.jit
def minimum_with_index(a_value, a_index, b_value, b_index):
    return _first_best(a_value, a_index, b_value, b_index, a_value < b_value)
