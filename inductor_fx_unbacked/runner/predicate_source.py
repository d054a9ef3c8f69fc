"""The source of a fused selection's kernel, made from Inductor's predicate kernel.

``fused_selections.py`` fuses a pointwise kernel that stores a predicate with the
selection after it. :func:`fused_source` writes that kernel: the predicate
kernel's own statements, parsed and checked (``ast``), with the store of the
predicate made an assignment, as a function of one tile of ``XBLOCK`` elements
(the tile's index where they read ``program_id(0)``) that returns the predicate;
then the kernel, whose programs take ``TILES`` tiles each in the order of their
tickets (``compaction_kernels.ticket``): it counts its tiles' kept elements, learns
the count before it (``program_start``), and writes each tile's (``write_tile``),
computing the tile again where ``TILES > 1``. It writes nothing for a kernel whose
meaning it cannot keep so: anything but straight-line assignments and stores, a
second statement that names the predicate's buffer, a store of it anywhere but its
contiguous index, programs given elements otherwise than ``XBLOCK`` of them at
``program_id(0) * XBLOCK``, atomics, or a name that the kernel's module does not
import.
"""

from __future__ import annotations

import ast
import builtins
import textwrap
from typing import Any, NamedTuple

#: The start of a fused kernel's name (then the predicate kernel's): the one-pass
#: kernel, and the two passes' count and write kernels.
PREFIX = "ifx_fused_"
COUNT_PREFIX = "ifx_count_pass_"
WRITE_PREFIX = "ifx_write_pass_"

#: The names a predicate's body may read besides its own: those of the modules
#: Inductor's kernels import, and builtins.
_MODULES = {
    "triton": "import triton",
    "tl": "import triton.language as tl",
    "triton_helpers": "from torch._inductor.runtime import triton_helpers",
    "libdevice": "from torch._inductor.runtime.triton_helpers import libdevice",
    "tl_math": "from torch._inductor.runtime.triton_helpers import math as tl_math",
}
_HEADER = "\n".join(
    [
        *_MODULES.values(),
        "from inductor_fx_unbacked.runner.compaction_kernels import (",
        "    program_start as ifx_program_start,",
        "    publish as ifx_publish,",
        "    ticket as ifx_ticket,",
        "    tile_count as ifx_tile_count,",
        "    write_tile as ifx_write_tile,",
        ")",
    ]
)
#: Calls that may stand alone as statements: element by element, whichever program
#: takes an element (Inductor's bounds checks of indirect indices among them).
_ELEMENTWISE_CALLS = ("tl.store", "tl.device_assert")
#: The statements that give each program its elements, as Inductor writes them.
_OFFSETS = {
    ast.dump(ast.parse(text).body[0])
    for text in (
        "xoffset = tl.program_id(0) * XBLOCK",
        "xindex = xoffset + tl.arange(0, XBLOCK)[:]",
        "xindex = xoffset + tl.arange(0, XBLOCK)",
    )
}
_MASKS = {
    ast.dump(ast.parse(text).body[0])
    for text in ("xmask = xindex < xnumel", "xmask = tl.full([XBLOCK], True, tl.int1)")
}


class FusedSource(NamedTuple):
    """A fused kernel's module, and what its predicate kernel does besides: whether
    it stores other buffers (its body then runs once per element: one tile a
    program), whether it loads the selected values itself (then written from its
    registers), and whether it gathers (loads at an address computed from values it
    loaded, as an indirect index does)."""

    source: str
    stores: bool
    loads_values: bool
    gathers: bool
    #: The parameters the predicate kernel stores through (besides the predicate's)
    #: and those it loads through.
    stored: frozenset[str] = frozenset()
    loaded: frozenset[str] = frozenset()


def fused_source(
    src: str, mask_param: str, scalars: list[str], values_param: str | None = None
) -> FusedSource | None:
    """The fused kernel made from the predicate kernel ``src`` that stores the
    predicate through ``mask_param`` (the module docstring says which kernels
    qualify), or None. ``scalars`` are its integer parameters; ``values_param`` the
    one that takes ``masked_select``'s values, where the kernel takes them."""
    try:
        tree = ast.parse(textwrap.dedent(src))
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    fn = tree.body[0]
    arguments = fn.args
    if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or arguments.defaults:
        return None
    params = [a.arg for a in arguments.args]
    constexprs = [a.arg for a in arguments.args if a.annotation is not None]
    if constexprs != ["XBLOCK"] or params[-1] != "XBLOCK" or mask_param not in params:
        return None
    at = [i for i, statement in enumerate(fn.body) if _mentions(statement, mask_param)]
    if len(at) != 1:
        return None
    rest = fn.body[: at[0]] + fn.body[at[0] + 1 :]
    keep = _stored_predicate(fn.body[at[0]], mask_param, rest)
    if keep is None:
        return None
    predicate = ast.Assign([ast.Name("ifx_keep", ast.Store())], keep)
    body = [*fn.body[: at[0]], predicate, *fn.body[at[0] + 1 :]]
    if not _straight_line(body, params):
        return None
    if sum(ast.dump(s) in _OFFSETS for s in body) != 2:
        return None
    for statement in body:
        _ProgramId().visit(statement)
    stores = [s.value for s in body if isinstance(s, ast.Expr) and _called(s.value) == "tl.store"]
    loaded = _loaded_values(body, values_param, stores)
    inputs = [p for p in params if p not in (mask_param, "XBLOCK")]
    tile_fn = f"ifx_tile_{fn.name}"
    fn.name = f"{PREFIX}{fn.name}"
    fn.args.args = [ast.arg(p) for p in inputs] + [
        ast.arg(p) for p in ("ifx_work", "ifx_blocks", "ifx_n", "ifx_values", "ifx_out")
    ]
    fn.args.args += [_constexpr(p) for p in ("XBLOCK", "VALUES", "WINDOW", "TILES")]
    tile = ast.FunctionDef(
        tile_fn,
        ast.arguments(
            [],
            [*(ast.arg(p) for p in inputs), ast.arg("ifx_tile"), _constexpr("XBLOCK")],
            None,
            [],
            [],
            None,
            [],
        ),
        [*body, ast.parse(f"return ifx_keep, {loaded or 'ifx_keep'}").body[0]],
        [ast.parse("triton.jit").body[0].value],
        None,
        type_params=[],
    )
    call = f"{tile_fn}({''.join(f'{p}, ' for p in inputs)}"
    # A tile's writes read values that the kernel may have just stored, from other
    # threads.
    write = (
        "ifx_write_tile(ifx_keep, ifx_loaded, {tile}, ifx_start, ifx_n, ifx_values, ifx_out,"
        f" XBLOCK, VALUES, {loaded is not None}, {bool(stores)})"
    )
    fn.body = ast.parse(
        f"""
ifx_program = ifx_ticket(ifx_work, ifx_blocks)
ifx_first = ifx_program * TILES
ifx_keep, ifx_loaded = {call}ifx_first, XBLOCK)
ifx_count = ifx_tile_count(ifx_keep, ifx_first, ifx_n, XBLOCK)
for ifx_t in tl.static_range(1, TILES):
    ifx_more, ifx_unused = {call}ifx_first + ifx_t, XBLOCK)
    ifx_count += ifx_tile_count(ifx_more, ifx_first + ifx_t, ifx_n, XBLOCK)
ifx_start = ifx_program_start(ifx_count, ifx_program, ifx_work, ifx_blocks, WINDOW)
ifx_start = {write.format(tile="ifx_first")}
for ifx_t in range(1, TILES):
    ifx_keep, ifx_loaded = {call}ifx_first + ifx_t, XBLOCK)
    ifx_start = {write.format(tile="ifx_first + ifx_t")}
"""
    ).body
    unspecialised = [p for p in inputs if p in scalars] + ["ifx_blocks", "ifx_n"]
    fn.decorator_list = [
        ast.parse(f"triton.jit(do_not_specialize={unspecialised!r})").body[0].value
    ]
    # The two passes: the count, by the predicate kernel's own statements (its other
    # stores among them, each element's once); then the write, which computes the
    # predicate again without those stores.
    keep_fn = f"ifx_keep_{tile_fn[len('ifx_tile_') :]}" if stores else tile_fn
    keep_only = ast.FunctionDef(
        keep_fn,
        tile.args,
        [s for s in tile.body if not (isinstance(s, ast.Expr) and _called(s.value) == "tl.store")],
        tile.decorator_list,
        None,
        type_params=[],
    )
    name = fn.name[len(PREFIX) :]
    args = "".join(f"{p}, " for p in inputs)
    passes = ast.parse(
        f"""
@triton.jit(do_not_specialize={unspecialised!r})
def {COUNT_PREFIX}{name}(
    {args}ifx_work, ifx_ticket, ifx_blocks, ifx_n, XBLOCK: tl.constexpr, CHUNK: tl.constexpr
):
    ifx_keep, ifx_unused = {tile_fn}({args}tl.program_id(0), XBLOCK)
    ifx_count = ifx_tile_count(ifx_keep, tl.program_id(0), ifx_n, XBLOCK)
    ifx_publish(ifx_count, ifx_work, ifx_ticket, ifx_blocks, CHUNK)


@triton.jit(do_not_specialize={unspecialised[:-2] + ["ifx_n"]!r})
def {WRITE_PREFIX}{name}(
    {args}ifx_work, ifx_n, ifx_values, ifx_out, XBLOCK: tl.constexpr, VALUES: tl.constexpr
):
    ifx_keep, ifx_loaded = {keep_fn}({args}tl.program_id(0), XBLOCK)
    ifx_start = tl.load(ifx_work + tl.program_id(0))
    ifx_unused = ifx_write_tile(
        ifx_keep, ifx_loaded, tl.program_id(0), ifx_start, ifx_n, ifx_values, ifx_out,
        XBLOCK, VALUES, {loaded is not None}, False
    )
"""
    ).body
    tree.body = [tile, *([keep_only] if stores else []), fn, *passes]
    source = f"{_HEADER}\n\n\n{ast.unparse(ast.fix_missing_locations(tree))}\n"
    return FusedSource(
        source,
        bool(stores),
        loaded is not None,
        _gathers(body),
        _pointers(body, "tl.store") & set(inputs),
        _pointers(body, "tl.load") & set(inputs),
    )


def _pointers(body: list[ast.stmt], called: str) -> frozenset[str]:
    """The names in the pointer arguments of ``body``'s calls of ``called``."""
    return frozenset(
        n.id
        for statement in body
        for node in ast.walk(statement)
        if _called(node) == called and node.args
        for n in ast.walk(node.args[0])
        if isinstance(n, ast.Name)
    )


def _constexpr(name: str) -> ast.arg:
    return ast.arg(name, annotation=ast.parse("tl.constexpr", mode="eval").body)


def _loaded_values(body: list[ast.stmt], values_param: str | None, stores: list[Any]) -> str | None:
    """The name the kernel gives its load of ``values_param`` at each of its elements
    (``tl.load(values + xindex, ...)``, or a name assigned ``xindex``), where no
    statement stores through that parameter; else None."""
    if values_param is None or any(_mentions(ast.Expr(s), values_param) for s in stores):
        return None
    contiguous = {"xindex"} | {
        s.targets[0].id
        for s in body
        if isinstance(s, ast.Assign) and ast.unparse(s.value) == "xindex"
    }
    for statement in body:
        value = statement.value if isinstance(statement, ast.Assign) else None
        if value is None or _called(value) != "tl.load" or not value.args:
            continue
        pointer = value.args[0]
        if (
            isinstance(pointer, ast.BinOp)
            and isinstance(pointer.op, ast.Add)
            and ast.unparse(pointer.left) == values_param
            and isinstance(pointer.right, ast.Name)
            and pointer.right.id in contiguous
        ):
            return statement.targets[0].id
    return None


def _stored_predicate(statement: ast.stmt, mask_param: str, body: list[ast.stmt]) -> Any:
    """The value ``statement`` stores if it is ``tl.store(mask + index, value[, mask])``
    at the contiguous index (``xindex``, or a name assigned ``xindex``), under
    ``xmask`` or none."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if call is None or _called(call) != "tl.store":
        return None
    if call.keywords or len(call.args) not in (2, 3):
        return None
    pointer, value, *mask = call.args
    if mask and ast.unparse(mask[0]) not in ("xmask", "None"):
        return None
    if mask and ast.unparse(mask[0]) == "xmask" and not any(ast.dump(s) in _MASKS for s in body):
        return None
    if not (
        isinstance(pointer, ast.BinOp)
        and isinstance(pointer.op, ast.Add)
        and ast.unparse(pointer.left) == mask_param
        and isinstance(pointer.right, ast.Name)
    ):
        return None
    index = pointer.right.id
    contiguous = f"{index} = xindex"
    if index != "xindex" and not any(ast.unparse(s) == contiguous for s in body):
        return None
    return value


def _gathers(body: list[ast.stmt]) -> bool:
    """Whether a load of ``body`` (straight-line code) reads at an address computed
    from loaded values: the names assigned a load, or anything computed from one,
    are data; an address that mentions data is a gather."""
    data: set[str] = set()
    for statement in body:
        value = statement.value
        loads = [node for node in ast.walk(value) if _called(node) == "tl.load"]
        if any(_reads(load.args[0], data) for load in loads if load.args):
            return True
        if isinstance(statement, ast.Assign) and (loads or _reads(value, data)):
            data.add(statement.targets[0].id)
    return False


def _reads(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _mentions(statement: ast.stmt, name: str) -> bool:
    return any(isinstance(node, ast.Name) and node.id == name for node in ast.walk(statement))


def _straight_line(body: list[ast.stmt], params: list[str]) -> bool:
    """Whether ``body`` is straight-line assignments, each of a new name, stores and
    bounds checks (element by element: the elements a program takes change
    nothing), reads only parameters, its own names and Inductor's modules, and
    gives programs their elements by ``program_id(0)`` alone."""
    assigned: set[str] = set()
    for statement in body:
        if isinstance(statement, ast.Assign):
            target = statement.targets[0] if len(statement.targets) == 1 else None
            if not isinstance(target, ast.Name) or target.id in assigned or target.id in params:
                return False
            value = statement.value
        elif isinstance(statement, ast.Expr) and _called(statement.value) in _ELEMENTWISE_CALLS:
            value = statement.value
        else:
            return False
        for node in ast.walk(value):
            if isinstance(node, ast.Name) and not (
                node.id in params
                or node.id in assigned
                or node.id in _MODULES
                or hasattr(builtins, node.id)
            ):
                return False
            if isinstance(node, (ast.Lambda, ast.NamedExpr)):
                return False
            name = _called(node)
            if name.startswith("tl.atomic") or name == "tl.num_programs":
                return False
            if name == "tl.program_id" and ast.unparse(node) != "tl.program_id(0)":
                return False
            if name in _ELEMENTWISE_CALLS and node is not value:
                return False
        if isinstance(statement, ast.Assign):
            assigned.add(statement.targets[0].id)
    return True


def _called(node: ast.AST) -> str:
    """The function ``node`` calls, as written (empty if it is no call)."""
    return ast.unparse(node.func) if isinstance(node, ast.Call) else ""


class _ProgramId(ast.NodeTransformer):
    """``tl.program_id(0)`` as the tile's index (a fused kernel's programs take tiles
    in the order of their tickets, ``compaction_kernels.ticket``)."""

    def visit_Call(self, node: ast.Call) -> Any:
        if ast.unparse(node) == "tl.program_id(0)":
            return ast.Name("ifx_tile", ast.Load())
        return self.generic_visit(node)
