"""A call's argument structure against the one an artifact was compiled for, in
words: where it first departs (``args[1]['s'] is a tuple of 2; the artifact was
compiled for a list of 2 there``), not as two pytree specs."""

from __future__ import annotations

from typing import Any

from torch.utils import _pytree as pytree


def departure(args: tuple[Any, ...], expected: pytree.TreeSpec) -> str:
    """Where ``args``' structure first departs from ``expected``, in words."""
    return _departure(args, expected, "args") or "the arguments' structure differs"


def _departure(value: Any, spec: pytree.TreeSpec, path: str) -> str | None:
    got = pytree.tree_structure(value)
    if got == spec:
        return None
    if spec.is_leaf():
        return f"{path} is {_kind(got)}; the artifact was compiled for one value there"
    if path == "args" and got.num_children != spec.num_children:
        count = spec.num_children
        return f"the artifact takes {count} argument{'s' * (count != 1)}; got {got.num_children}"
    if (got.type, got.num_children, _keys(got)) != (spec.type, spec.num_children, _keys(spec)):
        return f"{path} is {_kind(got)}; the artifact was compiled for {_kind(spec)} there"
    if not isinstance(value, (list, tuple, dict)):
        return f"{path} is {_kind(got)} whose contents differ from what it was compiled for"
    keys = list(value) if isinstance(value, dict) else range(spec.num_children)
    children = value.values() if isinstance(value, dict) else value
    for key, child, child_spec in zip(keys, children, spec.children()):
        departure = _departure(child, child_spec, f"{path}[{key!r}]")
        if departure is not None:
            return departure
    return None


def _kind(spec: pytree.TreeSpec) -> str:
    """``a tuple of 2``, ``a dict with keys ['x']``, ``one value``."""
    if spec.is_leaf():
        return "one value"
    name = spec.type.__name__
    article = "an" if name[0] in "aeiou" else "a"
    keys = _keys(spec)
    if keys is not None:
        return f"{article} {name} with keys {keys}"
    return f"{article} {name} of {spec.num_children}"


def _keys(spec: pytree.TreeSpec) -> list[Any] | None:
    """A mapping's keys, as its spec holds them."""
    return spec.context if isinstance(spec.context, list) else None
