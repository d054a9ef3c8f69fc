"""Seeded generator of small data-dependent programs, each a standalone Python source.

``generate(seed)`` returns a :class:`Program`: the source of a module that defines
``program`` (a function, or an ``nn.Module`` instance) and ``INPUTS``, a list of
input tuples written as literals. Everything is drawn from Python's
``random.Random(seed)`` and every value is a literal in the source, so the same seed
gives the same text on every torch release, with or without Inductor's caches, and
a failing program is its own regression test (``Program.source``).

The inputs of one program have the same shapes (one compile serves them all) and
selections of different lengths (empty and one-element ones among them). Masked-out
positions hold what users put there: NaN, inf, zeros where a divisor is, negatives
under a log or a sqrt, labels and indices out of range (-1, -1000, 10**12), extreme
integers. Kept positions hold ordinary values, so that eager's result is finite and
any leak of a masked-out value shows.

Families (``FAMILIES``): masked chains (a selection by a boolean mask, ``torch.where``
indices, ``nonzero``/``index_select``, ``masked_select``, then an elementwise chain,
then a reduction, a scan, or the selection itself), integer division under a mask,
indices and labels under a mask (``gather``, ``index_select``, ``cross_entropy``,
``nll_loss``), ``.item()``-sized ops, ``unique``, ``repeat_interleave``, an ``nn.Linear`` whose
parameters require grad, sorting and top-k over a selection (``ordered``), and
accumulation into slots by kept indices (``scattered``: ``index_add_``,
``scatter_add``, ``index_put`` with ``accumulate``, ``bincount``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import sys
import types
from collections.abc import Callable

FLOATS = ("float32", "float32", "bfloat16", "float16")
INTS = ("int32", "int64")
#: Values a user leaves at masked-out positions of a float tensor.
FLOAT_JUNK = ("nan", "inf", "-inf", "-1.0", "0.0", "-1000.0", "1e30", "-0.0")
#: Labels and indices a user leaves at masked-out positions.
INDEX_JUNK = (-1, -1000, 255, 10**12, -(10**12), -100)
INT_EXTREMES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}

#: Elementwise ops that keep a positive value positive and finite-ish; the first
#: group faults or gives NaN/inf on what masked-out positions hold.
POSITIVE_FAULTING = (
    "{s}.log()",
    "{s}.sqrt()",
    "{s}.reciprocal()",
    "1.0 / {s}",
    "{s}.rsqrt()",
    "{s}.pow(0.5)",
    "{s}.pow(-1)",
    "{s}.log1p()",
)
POSITIVE_TOTAL = ("{s} * 2 + 1", "torch.sigmoid({s})", "{s}.abs()", "{s}.clamp(min=0.25)")
SIGN_CHANGING = ("{s}.log()", "{s} - 1", "torch.tanh({s} - 1)", "-{s}")


@dataclasses.dataclass(frozen=True)
class Program:
    """A generated program: its seed, family, standalone source, and what it exercises."""

    seed: int
    family: str
    source: str
    #: The lengths of the data-dependent selections of its inputs, one per input tuple.
    sizes: tuple[int, ...]
    #: Reductions and scans over many values get looser float tolerances.
    reduces: bool

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:12]

    def namespace(self) -> dict:
        """Exec the source as a module: its dict, with ``program`` and ``INPUTS`` (on CPU).

        The module is in ``sys.modules``: Dynamo imports a function's module by name
        (torch 2.10)."""
        module = types.ModuleType(f"fuzz_program_{self.seed}")
        sys.modules[module.__name__] = module
        exec(compile(self.source, f"<fuzz program {self.seed}>", "exec"), module.__dict__)
        return module.__dict__


class _Draw:
    """The generator's state for one program: the random source and its inputs."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.reduces = False

    def choice(self, options):
        return options[self.rng.randrange(len(options))]

    def counts(self, n: int, nonempty: bool = False) -> list[int]:
        """Kept counts for three inputs of ``n`` positions: at least two different, one
        of them 0 or 1 (1 where a selection must not be empty, which needs ``n >= 2``)."""
        assert n >= 2 or not nonempty, "a nonempty selection of one position cannot vary"
        small = 1 if nonempty else (0 if n == 1 else self.choice((0, 0, 1)))
        other = self.rng.randint(small + 1, n)
        third = self.choice((n, self.rng.randint(small, n)))
        counts = [small, other, third]
        self.rng.shuffle(counts)
        return counts

    def kept(self, n: int, count: int) -> list[bool]:
        positions = set(self.rng.sample(range(n), count))
        return [i in positions for i in range(n)]

    def positive(self) -> str:
        return repr(round(self.rng.uniform(0.1, 3.0), 2))

    def small_int(self, low: int = -9, high: int = 9) -> str:
        return str(self.rng.randint(low, high))


def _tensor(values: list[str], dtype: str, shape: tuple[int, ...] | None = None) -> str:
    text = f"torch.tensor([{', '.join(values)}], dtype=torch.{dtype})"
    return f"{text}.reshape{shape}" if shape is not None else text


def _render(
    params: list[str], body: list[str], cases: list[list[str]], module: list[str] | None = None
) -> str:
    """The program's source: imports, ``program`` (a function of ``params`` running
    ``body``, or ``module``'s lines), and ``INPUTS`` from ``cases``' tensor literals."""
    lines = [
        "import torch",
        "import torch.nn.functional as F",
        "",
        'nan, inf = float("nan"), float("inf")',
        "",
    ]
    if module is not None:
        lines += module
    else:
        lines += [f"def program({', '.join(params)}):", *("    " + line for line in body)]
    lines += ["", "", "INPUTS = ["]
    for case in cases:
        lines.append("    (")
        lines += [f"        {tensor}," for tensor in case]
        lines.append("    ),")
    lines.append("]")
    return "\n".join(lines) + "\n"


def _float_tail(draw: _Draw, s: str, dtype: str, nonempty: bool, rows: bool) -> str:
    """The last lines: a reduction, a scan, or the chain itself (a size that escapes)."""
    if rows:
        tails = (
            "{s}.sum(0)",
            "{s}.mean(0)",
            "torch.softmax({s}, 1).sum(0)",
            "{s}.log_softmax(-1).sum()",
            "{s}.amax(1).sum()",
            "{s}",
            "({s}, {s}.sum(0))",
        )
    else:
        tails = (
            "{s}.sum()",
            "{s}.mean()",
            "{s}.prod()",
            "({s} > 1).any()",
            "({s} > 0.5).all()",
            "{s}.sum() * 2",
            "{s}",
            "({s}, {s}.sum())",
            "{s}.cumsum(0)",
            "{s}.cumsum(0).sum()",
        )
        if nonempty:
            tails += ("{s}.amax()", "{s}.amin()")
    tail = draw.choice(tails)
    if "cumsum" in tail and dtype != "float32":
        tail = "{s}.sum()"
    draw.reduces = tail != "{s}"
    return f"return {tail.format(s=s)}"


def _selection(kind: str, base: str, mask: str) -> str:
    return {
        "mask": f"{base}[{mask}]",
        "where": f"{base}[torch.where({mask})]",
        "where0": f"{base}[torch.where({mask})[0]]",
        "masked_select": f"torch.masked_select({base}, {mask})",
        "index_select": f"{base}.index_select(0, {mask}.nonzero().squeeze(1))",
        "nonzero_column": f"{base}[{mask}.nonzero()[:, 0]]",
    }[kind]


def masked_chain(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """``f(x[m])`` reduced: m from a key or from x itself, x junk where m is false."""
    dtype = draw.choice(FLOATS)
    rows = draw.rng.random() < 0.3
    n = draw.choice((1, 2, 5, 8, 13, 24)) if not rows else draw.choice((1, 3, 6, 9))
    columns = draw.choice((2, 3, 5)) if rows else 1
    kinds = (
        ("mask", "where0", "index_select", "nonzero_column")
        if rows
        else ("mask", "where", "where", "masked_select", "index_select", "nonzero_column")
    )
    kind = draw.choice(kinds)
    # A base longer than its mask, indexed by the mask's positions (not by the mask).
    extra = (
        draw.choice((0, 3, 2 * n + 1))
        if kind in ("where", "where0", "index_select", "nonzero_column")
        else 0
    )
    from_key = bool(draw.rng.random() < 0.6 or extra or rows)
    nonempty = draw.rng.random() < 0.2
    n = max(n, 2) if nonempty else n
    chain = [draw.choice(POSITIVE_FAULTING)] if draw.rng.random() < 0.8 else []
    chain += [
        draw.choice(POSITIVE_TOTAL + POSITIVE_FAULTING) for _ in range(draw.rng.randint(0, 1))
    ]
    if draw.rng.random() < 0.3:
        chain.append(draw.choice(SIGN_CHANGING))
    body = ["m = k > 0" if from_key else "m = x > 0", f"s = {_selection(kind, 'x', 'm')}"]
    for op in chain:
        body.append("s = " + op.format(s="s"))
    body.append(_float_tail(draw, "s", dtype, nonempty, rows))
    counts = draw.counts(n, nonempty)
    cases = []
    for count in counts:
        kept = draw.kept(n, count)
        x_values, k_values = [], []
        for i in range(n + extra):
            keep = i < n and kept[i]
            for _ in range(columns):
                x_values.append(
                    draw.positive()
                    if keep or i >= n and draw.rng.random() < 0.5
                    else draw.choice(
                        FLOAT_JUNK if from_key else ("nan", "-inf", "-1.0", "0.0", "-1e30", "-0.0")
                    )
                )
            if i < n:
                k_values.append(
                    draw.positive() if keep else draw.choice(("-1.0", "0.0", "nan", "-inf"))
                )
        shape = (n + extra, columns) if rows else None
        case = [_tensor(x_values, dtype, shape)]
        if from_key:
            case.append(_tensor(k_values, "float32"))
        cases.append(case)
    params = ["x", "k"] if from_key else ["x"]
    return _render(params, body, cases), tuple(counts)


def integer_division(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """``(a[m] // b[m]).sum()`` and friends with m from the divisor: b is 0 (and -1
    under the most negative numerator) where m is false."""
    dtype = draw.choice(INTS)
    n = draw.choice((1, 4, 9, 16))
    op = draw.choice(
        (
            "a[m] // b[m]",
            "a[m] % b[m]",
            "torch.div(a[m], b[m], rounding_mode='trunc')",
            "torch.remainder(a[m], b[m])",
            "a[m].float() / b[m]",
            "torch.fmod(a[m], b[m])",
        )
    )
    mask = draw.choice(("b != 0", "b > 0"))
    tail = draw.choice(
        (
            "{e}.sum()",
            "{e}",
            "{e}.amax()",
            "({e} > 2).any()",
            "{e}.cumsum(0)",
            "{e}.float().mean()",
            "({e}, {e}.sum())",
        )
    )
    nonempty = "amax" in tail
    n = max(n, 2) if nonempty else n
    draw.reduces = tail != "{e}"
    body = [f"m = {mask}", f"e = {op}", f"return {tail.format(e='e')}"]
    low, high = INT_EXTREMES[dtype]
    cases = []
    counts = draw.counts(n, nonempty)
    for count in counts:
        kept = draw.kept(n, count)
        a_values, b_values = [], []
        for keep in kept:
            if keep:
                a_values.append(draw.small_int(-50, 50))
                b_values.append(
                    draw.choice(("1", "2", "3", "7"))
                    if mask == "b > 0"
                    else draw.choice(("1", "2", "-3", "7", "-2"))
                )
            else:
                junk = draw.choice(("0", "-1")) if mask == "b > 0" else "0"
                a_values.append(
                    str(low) if junk == "-1" else draw.choice((str(low), str(high), "5"))
                )
                b_values.append(junk)
        cases.append([_tensor(a_values, dtype), _tensor(b_values, dtype)])
    return _render(["a", "b"], body, cases), tuple(counts)


def labelled(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """Losses and gathers over labelled positions; labels out of range elsewhere."""
    dtype = draw.choice(FLOATS)
    n, classes = draw.choice((1, 4, 7, 12)), draw.choice((2, 3, 5))
    mask = draw.choice(
        ("(labels >= 0) & (labels < {c})", "labels != PAD", "(labels >= 0) & (labels < {c})")
    )
    pad = draw.choice(INDEX_JUNK) if "PAD" in mask else None
    mask = mask.replace("{c}", str(classes)).replace("PAD", str(pad))
    expression = draw.choice(
        (
            "F.cross_entropy(logits[m], labels[m])",
            "F.cross_entropy(logits[m], labels[m], reduction='sum')",
            "F.nll_loss(logits[m].log_softmax(-1), labels[m], reduction='sum')",
            "logits[m].log_softmax(-1).gather(1, labels[m][:, None]).sum()",
            "logits[m].gather(1, labels[m].unsqueeze(1)).squeeze(1).sum()",
            "(logits[m].log_softmax(-1).argmax(1) == labels[m]).sum()",
            "logits[m].log_softmax(-1).gather(1, labels[m][:, None])",
        )
    )
    draw.reduces = True
    body = [f"m = {mask}", f"return {expression}"]
    cases = []
    counts = draw.counts(n)
    for count in counts:
        kept = draw.kept(n, count)
        logits = [repr(round(draw.rng.uniform(-3, 3), 2)) for _ in range(n * classes)]
        labels = [
            str(draw.rng.randrange(classes))
            if keep
            else str(pad if pad is not None else draw.choice(INDEX_JUNK))
            for keep in kept
        ]
        cases.append([_tensor(logits, dtype, (n, classes)), _tensor(labels, "int64")])
    return _render(["logits", "labels"], body, cases), tuple(counts)


def indexed(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """A tensor indexed by indices kept by a range mask: ``x[idx[m]]``, ``index_select``,
    ``gather``; the indices elsewhere are out of range, huge or negative."""
    dtype = draw.choice(FLOATS + INTS)
    n, count_idx = draw.choice((1, 5, 10)), draw.choice((1, 4, 8))
    op = draw.choice(
        (
            "x[idx[m]]",
            "x.index_select(0, idx[m])",
            "torch.gather(x, 0, idx[m])",
            "torch.take(x, idx[m])",
        )
    )
    chain = "" if dtype in INTS else draw.choice(("", ".log()", ".sqrt()", ".reciprocal()"))
    tail = draw.choice(
        ("{e}.sum()", "{e}", "({e} > 1).any()", "{e}.amax()")
        if dtype in FLOATS[:1] + INTS
        else ("{e}.sum()", "{e}", "({e} > 1).any()", "{e}.float().mean()")
    )
    nonempty = "amax" in tail
    count_idx = max(count_idx, 2) if nonempty else count_idx
    draw.reduces = tail != "{e}"
    body = [f"m = (idx >= 0) & (idx < {n})", f"e = {op}{chain}", f"return {tail.format(e='e')}"]
    cases = []
    counts = draw.counts(count_idx, nonempty)
    x_values = [draw.positive() if dtype in FLOATS else draw.small_int(1, 20) for _ in range(n)]
    for count in counts:
        kept = draw.kept(count_idx, count)
        idx = [
            str(draw.rng.randrange(n)) if keep else str(draw.choice(INDEX_JUNK + (n, 2 * n)))
            for keep in kept
        ]
        cases.append([_tensor(x_values, dtype), _tensor(idx, "int64")])
    return _render(["x", "idx"], body, cases), tuple(counts)


def item_sized(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """Sizes from ``.item()``: ``arange(n)``, ``x[:n]``, ``repeat_interleave`` with
    ``output_size``."""
    n = draw.choice((1, 6, 12))
    kind = draw.choice(("arange", "slice", "slice", "repeat_output_size", "new_ones"))
    dtype = draw.choice(FLOATS)
    count_line = "c = (k > 0).sum().item()"
    body = {
        # An integer of x that no summation order changes (x.sum().long() truncates
        # a float sum, which another order puts on the other side of an integer).
        "arange": [count_line, "return torch.arange(c) * 2 + (x > 1).sum()"],
        "slice": [
            count_line,
            f"return (x[:c]{draw.choice(('.log()', '.sqrt()', ' * 2'))})"
            f"{draw.choice(('.sum()', '', '.cumsum(0)' if dtype == 'float32' else '.mean()'))}",
        ],
        "repeat_output_size": [
            "c = int(r.sum().item())",
            "return torch.repeat_interleave(x, r, output_size=c)"
            + draw.choice(("", ".sum()", " * 2")),
        ],
        "new_ones": [
            count_line,
            "return x.new_ones(c).cumsum(0) + x[0]"
            if dtype == "float32"
            else "return x.new_ones(c) * x[0]",
        ],
    }[kind]
    draw.reduces = True
    counts = draw.counts(n)
    cases = []
    for count in counts:
        kept = draw.kept(n, count)
        x_values = [draw.positive() for _ in range(n)]
        if kind == "repeat_output_size":
            repeats = [str(draw.rng.randint(0, 3)) if keep else "0" for keep in kept]
            cases.append([_tensor(x_values, dtype), _tensor(repeats, "int64")])
        else:
            keys = [
                draw.positive() if keep else draw.choice(("-1.0", "0.0", "nan")) for keep in kept
            ]
            cases.append([_tensor(x_values, dtype), _tensor(keys, "float32")])
    params = ["x", "r"] if kind == "repeat_output_size" else ["x", "k"]
    return _render(params, body, cases), tuple(counts)


def unique(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """``torch.unique`` of a masked selection, with counts and/or the inverse."""
    dtype = draw.choice(INTS + ("bool",))
    n = draw.choice((1, 5, 11))
    options = draw.choice(
        (
            "return_counts=True",
            "return_inverse=True",
            "return_inverse=True, return_counts=True",
            "sorted=True",
        )
    )
    selected = draw.choice(("x[k > 0]", "x"))
    tail = draw.choice(
        ("return u", "return (u[0] * u[-1]).sum()", "return u[0].sum(), u[-1]")
        if "," in options
        else ("return u", "return u[0] * 2, u[1]", "return u[1].float().mean()")
        if options != "sorted=True"
        else ("return u", "return u.sum()")
    )
    if dtype == "bool":
        tail = "return u"
    body = [f"u = torch.unique({selected}, {options})", tail]
    draw.reduces = "sum" in tail or "mean" in tail
    counts = draw.counts(n)
    cases = []
    for count in counts:
        kept = draw.kept(n, count)
        if dtype == "bool":
            x_values = [draw.choice(("True", "False")) for _ in kept]
        else:
            low, high = INT_EXTREMES[dtype]
            x_values = [
                draw.small_int(0, 4)
                if keep or selected == "x"
                else draw.choice((str(low), str(high)))
                for keep in kept
            ]
        keys = [draw.positive() if keep else draw.choice(("-1.0", "nan")) for keep in kept]
        cases.append([_tensor(x_values, dtype), _tensor(keys, "float32")])
    return _render(["x", "k"], body, cases), tuple(counts)


def repeated(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """``repeat_interleave`` by counts that are zero or masked, then a chain."""
    dtype = draw.choice(FLOATS + INTS)
    n = draw.choice((1, 4, 9))
    expression = draw.choice(
        (
            "torch.repeat_interleave(x, r)",
            "torch.repeat_interleave(r)",
            "torch.repeat_interleave(x[r > 0], r[r > 0])",
            "x.repeat_interleave(r)",
        )
    )
    tail = draw.choice(
        ("return e", "return e.sum()", "return e * 2", "return e.float().mean()")
        + (("return e.cumsum(0)",) if dtype in ("float32", "int64") else ())
    )
    draw.reduces = tail != "return e"
    body = [f"e = {expression}", tail]
    counts = draw.counts(n)
    cases = []
    for count in counts:
        kept = draw.kept(n, count)
        x_values = [draw.positive() if dtype in FLOATS else draw.small_int() for _ in range(n)]
        repeats = [str(draw.rng.randint(1, 3)) if keep else "0" for keep in kept]
        cases.append([_tensor(x_values, dtype), _tensor(repeats, "int64")])
    return _render(["x", "r"], body, cases), tuple(counts)


def linear(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """An ``nn.Linear`` (parameters requiring grad, as every module has them) applied
    to the rows a key keeps; masked-out rows hold NaN and inf."""
    dtype = draw.choice(("float32", "float32", "bfloat16"))
    n, fan_in, fan_out = draw.choice((1, 4, 8)), draw.choice((2, 3)), draw.choice((2, 4))
    tail = draw.choice(
        (
            "return y.sum()",
            "return y",
            "return y.relu().mean(0)",
            "return y.log_softmax(-1).sum()",
            "return y.sum(0), y.shape[0] * y.new_ones(1)",
        )
    )
    draw.reduces = tail != "return y"
    weights = [repr(round(draw.rng.uniform(-1, 1), 2)) for _ in range(fan_in * fan_out)]
    bias = [repr(round(draw.rng.uniform(-1, 1), 2)) for _ in range(fan_out)]
    module = [
        "class Program(torch.nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        f"        self.linear = torch.nn.Linear({fan_in}, {fan_out}, dtype=torch.{dtype})",
        "        with torch.no_grad():",
        f"            self.linear.weight.copy_({_tensor(weights, dtype, (fan_out, fan_in))})",
        f"            self.linear.bias.copy_({_tensor(bias, dtype)})",
        "",
        "    def forward(self, x, k):",
        "        y = self.linear(x[k > 0])",
        f"        {tail}",
        "",
        "",
        "program = Program()",
    ]
    counts = draw.counts(n)
    cases = []
    for count in counts:
        kept = draw.kept(n, count)
        x_values = [
            draw.positive() if keep else draw.choice(FLOAT_JUNK)
            for keep in kept
            for _ in range(fan_in)
        ]
        keys = [draw.positive() if keep else draw.choice(("-1.0", "nan")) for keep in kept]
        cases.append([_tensor(x_values, dtype, (n, fan_in)), _tensor(keys, "float32")])
    return _render([], [], cases, module=module), tuple(counts)


def bool_counts(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """Counts and tests over a selected bool tensor."""
    n = draw.choice((1, 5, 14))
    tail = draw.choice(
        ("s.sum()", "s.any()", "s.all()", "s.int().cumsum(0)", "s", "s.float().mean()")
    )
    draw.reduces = tail != "s"
    body = ["s = b[k > 0]", f"return {tail}"]
    counts = draw.counts(n)
    cases = []
    for count in counts:
        kept = draw.kept(n, count)
        cases.append(
            [
                _tensor([draw.choice(("True", "False")) for _ in kept], "bool"),
                _tensor(
                    [draw.positive() if keep else draw.choice(("-1.0", "nan")) for keep in kept],
                    "float32",
                ),
            ]
        )
    return _render(["b", "k"], body, cases), tuple(counts)


def ordered(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """Sorting and top-k over a selection (min-p sampling, confidence filtering,
    detection candidates): ``sort``, ``argsort`` and ``topk`` with ``k`` read by
    ``.item()``. Masked-out positions hold NaN, inf and extremes, which would sort
    first or last if they leaked."""
    dtype = draw.choice(FLOATS + INTS)
    n = draw.choice((1, 2, 5, 9, 16))
    descending = draw.choice(("True", "False"))
    kind = draw.choice(("sort", "sort_values", "argsort", "topk_selected", "topk_all"))
    from_key = kind.startswith("topk") or draw.rng.random() < 0.6
    body = ["m = k > 0" if from_key else "m = x > 0", "s = x[m]"]
    if kind == "sort":
        body.append(f"return torch.sort(s, descending={descending}, stable=True)")
    elif kind == "sort_values":
        tail = draw.choice(
            ("v", "v.cumsum(0)" if dtype in ("float32", "int64") else "v * 2", "v[:1]")
        )
        body += [f"v = s.sort(descending={descending}, stable=True).values", f"return {tail}"]
    elif kind == "argsort":
        body.append(f"return s.argsort(descending={descending}, stable=True)")
    elif kind == "topk_selected":
        # k > 1 keeps a subset of what k > 0 keeps; Dynamo needs that said.
        body = [
            "m = k > 0",
            "s = x[m]",
            "c = (k > 1).sum().item()",
            "torch._check(c <= s.shape[0])",
            "return s.topk(c).values",
        ]
    else:
        # Over all of x, junk included (NaN sorts above everything), as realistic code does.
        body = ["c = (k > 0).sum().item()", "return x.topk(c).values"]
    draw.reduces = "cumsum" in body[-1]
    counts = draw.counts(n)
    cases = []
    for count in counts:
        kept = draw.kept(n, count)
        if dtype in FLOATS:
            junk = FLOAT_JUNK if from_key else ("nan", "-inf", "-1.0", "0.0", "-1e30", "-0.0")
            # Ties among kept values: a stable sort's order of them is defined.
            x_values = [
                draw.choice(("0.5", "1.25", draw.positive())) if keep else draw.choice(junk)
                for keep in kept
            ]
        else:
            low, high = INT_EXTREMES[dtype]
            x_values = [
                draw.small_int(1, 6) if keep else draw.choice((str(low), str(high), "0", "-3"))
                for keep in kept
            ]
        keys = [
            draw.choice(("0.5", "1.5", draw.positive())) if keep else draw.choice(("-1.0", "nan"))
            for keep in kept
        ]
        case = [_tensor(x_values, dtype)]
        if from_key:
            case.append(_tensor(keys, "float32"))
        cases.append(case)
    return _render(["x", "k"] if from_key else ["x"], body, cases), tuple(counts)


def scattered(draw: _Draw) -> tuple[str, tuple[int, ...]]:
    """Accumulation into slots by kept indices (a mixture of experts' combine, segment
    sums, histograms): ``index_add_``, ``scatter_add``, ``index_put`` with
    ``accumulate``, ``bincount``. Masked-out indices are out of range, huge or negative,
    and their values NaN or extreme."""
    dtype = draw.choice(FLOATS + INTS)
    n, slots = draw.choice((1, 4, 9, 14)), draw.choice((1, 3, 5))
    rows = dtype in FLOATS and draw.rng.random() < 0.3
    columns = draw.choice((2, 3)) if rows else 1
    by_key = draw.rng.random() < 0.4
    mask = "w > 0" if by_key else f"(idx >= 0) & (idx < {slots})"
    shape = f"({slots}, {columns})" if rows else f"({slots},)"
    weighted = "x[m] * w[m, None].to(x.dtype)" if rows and by_key else "x[m]"
    kind = draw.choice(
        ("index_add", "scatter_add", "index_put", "bincount") if not rows else ("index_add",)
    )
    accumulate = {
        "index_add": [f"out = x.new_zeros{shape}", f"out.index_add_(0, idx[m], {weighted})"],
        "scatter_add": [f"out = x.new_zeros({slots}).scatter_add(0, idx[m], x[m])"],
        "index_put": [f"out = x.new_zeros({slots}).index_put((idx[m],), x[m], accumulate=True)"],
        "bincount": [f"out = torch.bincount(idx[m], minlength={slots})"],
    }[kind]
    tail = draw.choice(("out", "out.sum(0)", "out * 2", "(out, out.sum(0))"))
    draw.reduces = True
    body = [f"m = {mask}", *accumulate, f"return {tail}"]
    counts = draw.counts(n)
    cases = []
    for count in counts:
        kept = draw.kept(n, count)
        idx = [
            str(draw.rng.randrange(slots)) if keep else str(draw.choice(INDEX_JUNK + (slots,)))
            for keep in kept
        ]
        x_values = []
        for keep in kept:
            for _ in range(columns):
                if dtype in FLOATS:
                    x_values.append(
                        draw.positive() if keep else draw.choice(("nan", "inf", "-1e30"))
                    )
                else:
                    low, high = INT_EXTREMES[dtype]
                    x_values.append(
                        draw.small_int() if keep else draw.choice((str(low), str(high)))
                    )
        weights = [draw.positive() if keep else draw.choice(("0.0", "-1.0")) for keep in kept]
        if by_key:
            # Out-of-range indices only where the weight masks them out.
            idx = [i if keep else str(draw.choice(INDEX_JUNK)) for i, keep in zip(idx, kept)]
        case = [_tensor(x_values, dtype, (n, columns) if rows else None), _tensor(idx, "int64")]
        if by_key:
            case.append(_tensor(weights, "float32"))
        cases.append(case)
    return _render(["x", "idx", "w"] if by_key else ["x", "idx"], body, cases), tuple(counts)


#: family name -> (generator, weight). A program's family is the first draw of its
#: seed (``random.choices`` over these weights, in this order), so a family added
#: later takes part of the first family's weight, at the start of the range: the
#: seed of every program outside that part keeps its program (the seeds kept as
#: regression tests among them).
FAMILIES: dict[str, tuple[Callable[[_Draw], tuple[str, tuple[int, ...]]], float]] = {
    "ordered": (ordered, 0.6),
    "scattered": (scattered, 0.6),
    "masked_chain": (masked_chain, 4.8),
    "integer_division": (integer_division, 2),
    "labelled": (labelled, 2.5),
    "indexed": (indexed, 2),
    "item_sized": (item_sized, 1.5),
    "unique": (unique, 1),
    "repeated": (repeated, 1),
    "linear": (linear, 1.5),
    "bool_counts": (bool_counts, 0.5),
}


def generate(seed: int) -> Program:
    """The program of ``seed``: the same text for the same seed, everywhere."""
    draw = _Draw(seed)
    names = list(FAMILIES)
    family = draw.rng.choices(names, weights=[FAMILIES[name][1] for name in names])[0]
    source, sizes = FAMILIES[family][0](draw)
    header = [f"# Fuzz program {seed} ({family}), from test/fuzz/fuzz_programs.py."]
    return Program(seed, family, "\n".join(header) + "\n" + source, sizes, draw.reduces)


def digest(seeds) -> str:
    """One hash of the sources of ``seeds``: the same on every release (a test checks it)."""
    text = "".join(generate(seed).source for seed in seeds)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
