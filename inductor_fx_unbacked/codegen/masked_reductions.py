"""Reductions over a masked selection, without the selection: no host sync where no
data-dependent size escapes.

``(x[x > 0] * 2).sum()`` selects, so Inductor binds the selection's length to an
unbacked symbol, which the host learns from the device (``nonzero`` syncs), and
then reduces it: the length never leaves the graph. Where a selection (``x[mask]``,
``masked_select``, ``nonzero`` that only indexes) is read only by operations that
compute each selected element (or row) on its own and end in reductions over the
selected dimension, this pass, run on the ATen graph Inductor lowers, computes
them over the whole base and masks the reduction instead:
``where(mask, x * 2, 0).sum()``. The symbol, its ``nonzero`` and the checks that
hold by construction (``u0 >= 0``, ``u0 <= numel``) go; Inductor then chooses
and fuses the kernels as for any reduction.

Element by element (or row by row): pointwise operations, other selections by the
same mask (``y[mask]``), and, on selected rows, operations along the other
dimensions (a softmax or a sum along a row, ``gather`` in a row), each of them
one that ``masked_safety`` knows to be safe where the mask is false (total there,
or with the operand that could trap guarded: ``gather``'s index, an integer
divisor), since the rewrite runs them there too. The mask must cover the leading
dimensions of every base exactly, symbolically. The reductions:
sums, means (the count is the mask's; an empty selection gives NaN, as eager
does), products, ``any`` and ``all``, over the selected dimension and any others.
It leaves, and logs why (``TORCH_LOGS=inductor_fx_unbacked``): a selection whose
size escapes (it reaches the graph's output, a host value reads it), one read by
an operation without a masked form or not known to be safe at masked-out
positions, one whose mask is not known to cover its base, any under
``config.nan_asserts`` (it checks masked-out positions too), ``amax``/``amin``
(eager raises on an empty selection), ``var``/``std`` (eager warns below their
correction), random operations (drawing for every element changes what eager
draws), and a selection whose length a check other than those by construction
reads (a user's ``torch._check`` needs the host).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import operator
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch.fx import Node
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from .. import _compat
from .masked_safety import TABLES, Guard, Verdict, checks_every_buffer, verdict
from .selections import Selection, is_pointwise, masked_selections
from .selections import shape as shape_of

aten = torch.ops.aten
prims = torch.ops.prims
log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

#: Reductions with a masked form, and the value a masked-out element takes.
IDENTITY = {"sum": 0, "mean": 0, "prod": 1, "any": False, "all": True}
#: Reductions over the selected dimension that stay, and why.
REFUSED = {
    **dict.fromkeys(("amax", "amin", "max", "min"), "eager raises on an empty selection"),
    **dict.fromkeys(
        ("var", "std", "var_mean", "std_mean"),
        "eager warns where the selection is no larger than the correction",
    ),
}
#: Operations along the other dimensions of selected rows: the argument positions
#: that hold dimensions.
ROW_WISE = {
    op: (1,)
    for op in (
        aten.sum.dim_IntList,
        aten.mean.dim,
        aten.amax.default,
        aten.amin.default,
        aten.prod.dim_int,
        aten.any.dim,
        aten.any.dims,
        aten.all.dim,
        aten.all.dims,
        aten.logsumexp.default,
        aten._softmax.default,
        aten._log_softmax.default,
        aten.cumsum.default,
        aten.gather.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.unsqueeze.default,
    )
}


@dataclasses.dataclass
class Outcome:
    """What became of one selection: rewritten, or kept and why."""

    selection: str
    rewritten: bool
    why: str = ""


def rewriting_masked_reductions(post_grad_passes: F) -> F:
    """Wrap ``compile_fx.post_grad_passes``: rewrite the graph's masked reductions
    first, where it compiles for this package's FX wrapper with ``sync_free`` on."""

    @functools.wraps(post_grad_passes)
    def wrapper(gm: torch.fx.GraphModule, is_inference: bool) -> Any:
        if _sync_free(gm):
            rewrite_masked_reductions(gm)
        return post_grad_passes(gm, is_inference)

    return wrapper  # type: ignore[return-value]


def _sync_free(gm: torch.fx.GraphModule) -> bool:
    """Whether the wrapper codegen registered for the graph's device is an FX one that
    asks for the rewrite (``fx_backend(sync_free=True)``, the default)."""
    from torch._inductor import config
    from torch._inductor.codegen.common import get_wrapper_codegen_for_device

    devices = {
        value.device.type
        for node in gm.graph.find_nodes(op="placeholder")
        if isinstance(value := node.meta.get("val"), torch.Tensor)
    }
    device = next((d for d in sorted(devices) if d not in ("cpu", "meta")), "cpu")
    codegen = get_wrapper_codegen_for_device(device, config.cpp_wrapper, config.fx_wrapper)
    return bool(getattr(codegen, "sync_free", False))


def rewrite_masked_reductions(gm: torch.fx.GraphModule) -> list[Outcome]:
    """Rewrite every selection of ``gm`` that qualifies (module docstring); return
    what became of each, and log the ones kept."""
    outcomes: list[Outcome] = []
    tried: set[str] = set()
    while True:
        selections = masked_selections(gm.graph)
        found = [s for s in selections if s.node.name not in tried]
        if not found:
            break
        plan = _Plan(gm.graph, found[0], selections)
        tried.update(root.node.name for root in plan.roots)
        why = plan.analyse()
        name = ", ".join(root.node.name for root in plan.roots)
        if why is None:
            plan.rewrite()
            outcomes.append(Outcome(name, True))
            whys = "; ".join(f"{n.name} ({n.target}): {v.why}" for n, v in plan.verdicts.items())
            log.debug("the selection %s is reduced over its mask; where false: %s", name, whys)
        else:
            outcomes.append(Outcome(name, False, why))
            log.info("the selection %s keeps its host sync: %s", name, why)
    if any(outcome.rewritten for outcome in outcomes):
        gm.graph.lint()
        gm.recompile()
    return outcomes


def _kind(node: Node) -> str | None:
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target.overloadpacket.__name__
    return None


def _dims(node: Node) -> list[int] | None:
    """The dimensions a row-wise operation names (normalised), or None for all."""
    positions = ROW_WISE.get(node.target)
    if positions is None:
        return None
    rank = len(shape_of(node.args[0])) + (node.target is aten.unsqueeze.default)
    named = node.args[positions[0]] if len(node.args) > positions[0] else None
    if named is None or named == []:
        return None
    return [d % rank for d in (named if isinstance(named, (list, tuple)) else [named])]


class _Plan:
    """A selection and the others by the same mask (``roots``): which nodes compute on
    them element by element (``chain``), which reduce them (``reductions``), which
    check their length by construction (``checks``)."""

    def __init__(self, graph: torch.fx.Graph, first: Selection, all_: list[Selection]) -> None:
        self.graph = graph
        self.roots = [s for s in all_ if s.node is first.node or s.same_mask(first)]
        self.by_node = {root.node: root for root in self.roots}
        self.mask_dims = first.mask_dims
        self.symbols = {root.symbol for root in self.roots}
        self.makers = [maker for root in self.roots for maker in root.makers]
        self.chain: dict[Node, None] = dict.fromkeys(self.by_node)
        #: Why each chain node is safe at masked-out positions, with the guards of its
        #: operands (``masked_safety``).
        self.verdicts: dict[Node, Verdict] = {}
        self.reductions: list[Node] = []
        self.checks: list[Node] = []

    def analyse(self) -> str | None:
        """Why the selections cannot be rewritten (the most telling reason), or None.

        Users are taken until nothing changes: an operation that reads two values
        computed on the selections (``gather`` of a row by a selected index) is
        taken once both are."""
        for why in (checks_every_buffer(), *(root.mismatch for root in self.roots)):
            if why is not None:
                return why
        reasons: dict[tuple[Node, Node], tuple[int, str]] = {}
        progress = True
        while progress:
            progress, reasons = False, {}
            for node in [*self.chain, *self.makers]:
                for user in node.users:
                    if user in self.chain or user in self.makers or user in self.checks:
                        continue
                    if user in self.reductions:
                        continue
                    reason = self._take(node, user)
                    if reason is None:
                        progress = True
                    else:
                        reasons[node, user] = reason
        if not reasons:
            reason = self._length_read_elsewhere()
            if reason is not None:
                reasons[None, None] = reason  # type: ignore[index]
        return min(reasons.values())[1] if reasons else None

    def _take(self, node: Node, user: Node) -> tuple[int, str] | None:
        if user.op == "output":
            return 1, "it reaches the graph's output, so its size escapes"
        if user.target is aten.sym_size.int:
            return self._take_length(user)
        if node in self.makers:
            return 2, f"{user.name} reads its indices ({user.target})"
        kind, dims = _kind(user), _dims(user)
        reduces_selection = bool(user.args) and user.args[0] is node and (dims is None or 0 in dims)
        if kind in REFUSED and reduces_selection:
            return 0, f"{kind} reduces it ({user.name}): {REFUSED[kind]}"
        if kind in IDENTITY and reduces_selection:
            return self._take_reduction(user)
        looks_up = user.target in TABLES and user.args[TABLES[user.target][1]] is node
        if is_pointwise(user) or looks_up or (user.target in ROW_WISE and dims and 0 not in dims):
            return self._take_elementwise(user)
        return 2, f"{user.name} ({user.target}) has no masked form"

    def _take_elementwise(self, user: Node) -> tuple[int, str] | None:
        if torch.Tag.nondeterministic_seeded in getattr(user.target, "tags", ()):
            return 2, f"{user.name} ({user.target}) draws random numbers for the selection only"
        safety = verdict(user)
        if not safety.safe:
            return 2, safety.why
        rest, tables = len(shape_of(user)) - 1, [user.args[p] for p in safety.tables]
        if any(table in self.chain for table in tables):
            return 2, f"{user.name} ({user.target}) looks up in the selection"
        for argument in user.all_input_nodes:
            if argument in self.chain:
                continue
            shape = shape_of(argument)
            beside = len(shape) > rest and argument not in tables
            if any(free_unbacked_symbols(s) for s in shape) or beside:
                return 2, f"{user.name} reads {argument.name} beside the selection, not broadcast"
        self.chain[user] = None
        self.verdicts[user] = safety
        return None

    def _take_reduction(self, user: Node) -> tuple[int, str] | None:
        _, keepdim = _reduced(user)
        if keepdim and self.mask_dims != 1:
            return 2, f"{user.name} keeps the dimensions of a mask of several"
        self.reductions.append(user)
        return None

    def _take_length(self, size: Node) -> tuple[int, str] | None:
        """A read of a selection's length: only checks that hold by construction."""
        if size.args[1:] != (0,):
            return 2, f"{size.name} reads another size"
        bound = 1
        for extent in shape_of(next(iter(self.by_node.values())).mask):
            bound = bound * extent if isinstance(extent, int) and bound is not None else None
        for compare in size.users:
            holds = (
                (compare.target is operator.ge and compare.args == (size, 0))
                or (
                    compare.target is operator.le
                    and compare.args[0] is size
                    and bound is not None
                    and isinstance(compare.args[1], int)
                    and compare.args[1] >= bound
                )
                # Two selections by one mask have one length.
                or (compare.target is operator.eq and self._lengths(compare.args))
            )
            if not holds or not all(_is_assert(u) for u in compare.users):
                return 1, f"{compare.name} reads its length: {compare.format_node()}"
            self.checks += [*compare.users, compare]
        self.checks.append(size)
        return None

    def _lengths(self, values: Any) -> bool:
        """Whether ``values`` are all lengths of this plan's selections."""
        sources = {*self.by_node, *(m for m in self.makers if m.target is aten.nonzero.default)}
        return all(
            isinstance(v, Node) and v.target is aten.sym_size.int and v.args[0] in sources
            for v in values
        )

    def _length_read_elsewhere(self) -> tuple[int, str] | None:
        known = {*self.chain, *self.reductions, *self.checks, *self.makers}
        for node in self.graph.nodes:
            value = node.meta.get("val")
            if node in known or value is None:
                continue
            if self.symbols & free_unbacked_symbols(value):
                return 1, f"{node.name} reads its length: {node.format_node()}"
        return None

    def rewrite(self) -> None:
        """Compute each reduction over the whole bases, masked; drop the selections."""
        full: dict[Node, Node] = {root.node: root.base for root in self.roots}
        fake_mode = _fake_mode(self.graph)
        for node in self.chain:
            if node in full:
                continue
            with self.graph.inserting_before(node):
                args = list(torch.fx.map_arg(node.args, lambda a: full.get(a, a)))
                kwargs = torch.fx.map_arg(node.kwargs, lambda a: full.get(a, a))
                dims = _dims(node)
                if dims is not None:
                    position = ROW_WISE[node.target][0]
                    shifted = [d + self.mask_dims - 1 for d in dims]
                    named = node.args[position]
                    args[position] = shifted if isinstance(named, (list, tuple)) else shifted[0]
                rank = len(shape_of(node)) + self.mask_dims - 1
                for guard in self.verdicts[node].guards:
                    operand = args[guard.position]
                    own = rank if operand is node.args[guard.position] else len(shape_of(operand))
                    args[guard.position] = self._guarded(operand, guard, own, fake_mode)
                full[node] = self._add(node.target, tuple(args), kwargs, fake_mode)
        for reduction in self.reductions:
            with self.graph.inserting_before(reduction):
                replacement = self._masked(reduction, full[reduction.args[0]], fake_mode)
            reduction.replace_all_uses_with(replacement)
            self.graph.erase_node(reduction)
        doomed = {*self.chain, *self.checks, *self.makers}
        for node in reversed(list(self.graph.nodes)):
            if node in doomed and not node.users:
                self.graph.erase_node(node)

    def _mask_of_rank(self, rank: int, fake_mode: Any) -> Node:
        """The mask, with trailing dimensions of size 1 up to ``rank``."""
        mask = next(iter(self.by_node.values())).mask
        for _ in range(rank - self.mask_dims):
            mask = self._add(aten.unsqueeze.default, (mask, -1), {}, fake_mode)
        return mask

    def _guarded(self, operand: Node, guard: Guard, rank: int, fake_mode: Any) -> Node:
        """``operand`` where the mask is true, ``guard.safe`` where it is false: at
        selected positions the operation reads what eager's does."""
        rank = max(rank, len(shape_of(operand)))
        mask = self._mask_of_rank(rank, fake_mode)
        safe = self._add(aten.where.ScalarOther, (mask, operand, guard.safe), {}, fake_mode)
        if guard.dtype is None or guard.dtype == safe.meta["val"].dtype:
            return safe
        return self._add(prims.convert_element_type.default, (safe, guard.dtype), {}, fake_mode)

    def _masked(self, reduction: Node, values: Node, fake_mode: Any) -> Node:
        kind = _kind(reduction)
        rank = len(shape_of(reduction.args[0]))
        dims, keepdim = _reduced(reduction)
        # The selected dimension is the mask's dimensions; the others follow them.
        full_dims = [*range(self.mask_dims), *(d + self.mask_dims - 1 for d in sorted(dims) if d)]
        mask = self._mask_of_rank(rank + self.mask_dims - 1, fake_mode)
        masked = self._add(aten.where.ScalarOther, (mask, values, IDENTITY[kind]), {}, fake_mode)
        dtype = reduction.kwargs.get("dtype")
        extra = {"dtype": dtype} if dtype is not None else {}
        if kind in ("any", "all"):
            target: Any = getattr(aten, kind).dims
            reduced = self._add(target, (masked, full_dims, keepdim), {}, fake_mode)
        elif kind == "prod":
            reduced = masked
            for dim in reversed(full_dims):
                reduced = self._add(aten.prod.dim_int, (reduced, dim, keepdim), extra, fake_mode)
        else:
            arguments = (masked, full_dims, keepdim)
            reduced = self._add(aten.sum.dim_IntList, arguments, extra, fake_mode)
        if kind != "mean":
            return reduced
        selected = self._add(aten.expand_as.default, (mask, values), {}, fake_mode)
        count = self._add(aten.sum.dim_IntList, (selected, full_dims, keepdim), {}, fake_mode)
        return self._add(aten.div.Tensor, (reduced, count), {}, fake_mode)

    def _add(self, target: Any, args: Any, kwargs: Any, fake_mode: Any) -> Node:
        node = self.graph.call_function(target, args, kwargs)
        _compat.node_metadata_hook(node, fake_mode=fake_mode)
        return node


def _reduced(reduction: Node) -> tuple[set[int], bool]:
    """The dimensions a reduction over a selection reduces (normalised; all, where it
    names none), and its ``keepdim``."""
    rank = len(shape_of(reduction.args[0]))
    dims = _dims(reduction)
    keepdim = reduction.args[2] if len(reduction.args) > 2 else reduction.kwargs.get("keepdim")
    return (set(range(rank)) if dims is None else set(dims)), bool(keepdim)


def _is_assert(node: Node) -> bool:
    targets = {aten._assert_scalar.default}
    constrain = getattr(aten, "sym_constrain_range_for_size", None)
    if constrain is not None:
        targets.add(constrain.default)
    return node.target in targets


def _fake_mode(graph: torch.fx.Graph) -> Any:
    from torch._guards import detect_fake_mode

    values = [node.meta.get("val") for node in graph.nodes if node.op == "placeholder"]
    return detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])
