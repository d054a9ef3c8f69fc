"""The source of a fused selection's kernel, made from Inductor's predicate kernel.

``fused_selections.py`` fuses a pointwise kernel that stores a predicate with the
selection after it. :func:`fused_source` writes that kernel: the predicate
kernel's own statements, parsed and checked (``ast``), with the store of the
predicate made an assignment, each program's elements taken by its ticket
(``compaction_kernels.ticket``) instead of ``program_id(0)``, and
``compaction_kernels.select_tail`` appended. It writes nothing for a kernel whose
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
from typing import Any

#: The start of a fused kernel's name (then the predicate kernel's).
PREFIX = "ifx_fused_"

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
        "from inductor_fx_unbacked.runner.compaction_kernels import select_tail as ifx_select_tail",
        "from inductor_fx_unbacked.runner.compaction_kernels import ticket as ifx_ticket",
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


def fused_source(src: str, mask_param: str, scalars: list[str]) -> str | None:
    """The module of the fused kernel made from the predicate kernel ``src`` that
    stores the predicate through ``mask_param`` (the module docstring says which
    kernels qualify), or None. ``scalars`` are its integer parameters."""
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
    inputs = [p for p in params if p not in (mask_param, "XBLOCK")]
    fn.name = f"{PREFIX}{fn.name}"
    fn.args.args = [ast.arg(p) for p in inputs] + [
        ast.arg(p) for p in ("ifx_work", "ifx_blocks", "ifx_n", "ifx_values", "ifx_out")
    ]
    fn.args.args += [
        ast.arg(p, annotation=ast.parse("tl.constexpr", mode="eval").body)
        for p in ("XBLOCK", "VALUES", "WINDOW")
    ]
    start = ast.parse("ifx_block = ifx_ticket(ifx_work, ifx_blocks)").body
    # The tail reads values that the kernel may have just stored, from other threads.
    other_stores = any(_called(s.value) == "tl.store" for s in body if isinstance(s, ast.Expr))
    tail = ast.parse(
        "ifx_select_tail(ifx_keep, ifx_block, ifx_n, ifx_work, ifx_blocks, ifx_values, ifx_out,"
        f" XBLOCK, VALUES, WINDOW, {other_stores})"
    ).body
    fn.body = [*start, *body, *tail]
    unspecialised = [p for p in inputs if p in scalars] + ["ifx_blocks", "ifx_n"]
    fn.decorator_list = [
        ast.parse(f"triton.jit(do_not_specialize={unspecialised!r})").body[0].value
    ]
    return f"{_HEADER}\n\n\n{ast.unparse(ast.fix_missing_locations(tree))}\n"


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
    """``tl.program_id(0)`` as the program's ticket (``compaction_kernels.ticket``)."""

    def visit_Call(self, node: ast.Call) -> Any:
        if ast.unparse(node) == "tl.program_id(0)":
            return ast.Name("ifx_block", ast.Load())
        return self.generic_visit(node)
