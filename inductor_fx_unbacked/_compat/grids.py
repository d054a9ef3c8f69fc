"""Inductor's launch grids, as the FX graph's expressions and as its launchers run them."""

from __future__ import annotations

from typing import Any

import sympy


def eval_grid(inductor_meta: dict[str, Any], config: Any, values: dict[str, Any]) -> Any:
    """A kernel's launch grid for ``config`` and argument ``values``, as expressions.

    A 2-D grid whose y programs may overflow into z (``Grid2DWithYZOverflow``)
    divides its y programs by its z programs, which are 0 for an empty y range:
    with a symbolic ``ynumel`` (an unbacked row count, which is 0 for an empty
    selection) upstream's expression divides by zero at run time, where newer
    releases' launchers give 0 (torch 2.15). The z count is 0 only when the y count is,
    so dividing by at least 1 gives upstream's grid everywhere and 0 rows there."""
    from torch._inductor.runtime.triton_heuristics import Grid2DWithYZOverflow, GridExpr

    grid = GridExpr.from_meta(inductor_meta, config)
    if not isinstance(grid, Grid2DWithYZOverflow):
        return grid.eval_slow(values)
    scope = dict(values)
    for line in grid.prefix:
        exec(line, scope)
    z = scope[YZ_DIVISOR]
    scope[YZ_DIVISOR] = max(z, 1) if isinstance(z, int) else sympy.Max(z, 1)
    return _grid_value(grid.x_grid, scope), _grid_value(grid.y_grid, scope), z


#: The name of ``Grid2DWithYZOverflow``'s z count in its y expression.
YZ_DIVISOR = "y_grid_div_"


def _yz_overflow_grid_divides_by_zero() -> bool:
    """Whether upstream's launcher grid for a 2-D kernel whose y programs may
    overflow into z divides by zero for an empty y range (torch 2.10, 2.11)."""
    from torch._inductor.runtime.triton_heuristics import Grid2DWithYZOverflow

    grid = Grid2DWithYZOverflow({}, "python")
    grid.generate({"XBLOCK": 2, "YBLOCK": 2})
    try:
        grid.eval_slow({"xnumel": 1, "ynumel": 0})
    except ZeroDivisionError:
        return True
    return False


YZ_OVERFLOW_GRID_DIVIDES_BY_ZERO = _yz_overflow_grid_divides_by_zero()


def _grid_value(expr: Any, scope: dict[str, Any]) -> Any:
    return eval(expr, scope) if isinstance(expr, str) else expr
