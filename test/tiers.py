"""The test tiers: which parameters of a parametrized test run in the default tier.

``python -m pytest`` runs the default tier, ``--full`` every test (``conftest.py``).
A parametrized test keeps a few of its cases in the default tier, chosen to cover
what the others cover (one of each kind of data-dependent operation); the rest are
marked ``full``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

#: Corpus programs in the default tier: nonzero and masks (1-d, rows, masked_select,
#: reductions), unique, repeat_interleave, ``.tolist()`` splits, ``.item()`` sizes,
#: indices and floats, each kind of ``cond`` and ``while_loop``, custom ops with
#: KeyPaths, gradients, and the real-code programs.
DEFAULT_TIER_PROGRAMS = frozenset(
    {
        "nonzero_1d",
        "mask_2d",
        "row_mask",
        "masked_select",
        "mask_sum",
        "unique_counts",
        "repeat_interleave_tensor",
        "split_with_sizes_tolist",
        "arange_item",
        "select_item",
        "scale_by_float_item",
        "cond_mismatched_lengths",
        "cond_masked_branch",
        "while_loop_then_mask",
        "custom_op_divide_by_key",
        "custom_op_nested_outputs",
        "masked_mse_backward",
        "detection_postprocess",
        "token_dropping",
        "masked_mse_loss",
        "per_class_counts",
        "masked_token_nll",
    }
)


def tiered(
    values: Iterable[Any], in_default: Callable[[Any], bool], ids: Callable[[Any], str]
) -> list[Any]:
    """``values`` as ``pytest.param``s, those not ``in_default`` marked ``full``."""
    return [
        pytest.param(value, id=ids(value), marks=() if in_default(value) else pytest.mark.full)
        for value in values
    ]


def programs(corpus: Iterable[Any]) -> list[Any]:
    """Corpus programs as parameters: :data:`DEFAULT_TIER_PROGRAMS` in the default tier."""
    return tiered(corpus, lambda p: p.name in DEFAULT_TIER_PROGRAMS, lambda p: p.name)
