"""Does Triton compile an in-place update inside a looped reduction right?

A hand-written kernel of the form Inductor emits for ``s = -buf; return s,
s.sum(0)`` when the negation updates ``buf`` in place (``in_out_ptr0``): each
program loads a ``(XBLOCK, R0_BLOCK)`` tile of a ``(rows, 3)`` buffer, negates
it, stores it back and sums it over the rows. Each tile shape runs on 1 to 8
rows, 50 random inputs each, in place and, as a control, out of place (the load
from a copy); the report counts the calls whose sum or stored buffer differs
from eager's. ``reductions.keeping_reductions_out_of_place`` exists because of
what this measures on a GPU.

    python -m benchmarks.inplace_probe --out benchmarks/results/DATE-h200-inplace-probe.md
    python -m benchmarks.inplace_probe --device cpu     # Triton's interpreter
"""

from __future__ import annotations

import argparse
import os

from benchmarks import harness

#: (XBLOCK, R0_BLOCK, num_warps, looped, in place)
CASES = [
    (4, 4, 1, True, True),
    (4, 4, 1, True, False),
    (4, 4, 8, True, True),
    (4, 8, 1, False, True),
    (4, 8, 1, True, True),
    (2, 4, 1, True, True),
    (8, 4, 1, True, True),
    (4, 16, 1, True, True),
    (4, 2, 1, True, True),
    (2, 2, 1, True, True),
    (8, 8, 1, False, True),
    (4, 32, 4, True, True),
]
ROWS = range(1, 9)
TRIALS = 50


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton
    import triton.language as tl

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")

    @triton.jit
    def neg_sum(in_ptr, io_ptr, out_ptr, xnumel, rnumel, XBLOCK: tl.constexpr,
                R0_BLOCK: tl.constexpr, LOOP: tl.constexpr):  # fmt: skip
        x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
        xmask = x < xnumel
        rbase = tl.arange(0, R0_BLOCK)[None, :]
        acc = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
        if LOOP:
            for r0 in tl.range(0, rnumel, R0_BLOCK):
                r = r0 + rbase
                m = (r < rnumel) & xmask
                t = -tl.load(in_ptr + (x + 3 * r), m, other=0.0)
                acc = tl.where(m, acc + t, acc)
                tl.store(io_ptr + (x + 3 * r), t, m)
        else:
            m = (rbase < rnumel) & xmask
            t = -tl.load(in_ptr + (x + 3 * rbase), m, other=0.0)
            acc = tl.where(m, acc + t, acc)
            tl.store(io_ptr + (x + 3 * rbase), t, m)
        tl.store(out_ptr + x, tl.sum(acc, 1)[:, None], xmask)

    torch.manual_seed(0)
    lines = [
        "# An in-place update inside a looped reduction, compiled by Triton",
        "",
        *harness.environment_lines(device),
        "",
        f"Each row: rows 1 to {ROWS[-1]}, {TRIALS} random inputs each; wrong calls per "
        "row count (sum wrong / stored buffer wrong).",
        "",
        "| XBLOCK | R0_BLOCK | warps | looped | in place | wrong (rows: sum/buffer) |",
        "|---|---|---|---|---|---|",
    ]
    for xblock, rblock, warps, loop, inplace in CASES:
        wrong: dict[int, list[int]] = {}
        for rows in ROWS:
            for _ in range(TRIALS):
                base = torch.randn(rows, 3, device=device)
                io, out = base.clone(), torch.empty(3, device=device)
                neg_sum[(triton.cdiv(3, xblock),)](
                    io if inplace else base, io, out, 3, rows,
                    XBLOCK=xblock, R0_BLOCK=rblock, LOOP=loop, num_warps=warps, num_stages=1,
                )  # fmt: skip
                bad_sum = not torch.allclose(out, -base.sum(0), atol=1e-5)
                bad_buffer = not torch.equal(io, -base)
                if bad_sum or bad_buffer:
                    counts = wrong.setdefault(rows, [0, 0])
                    counts[0] += bad_sum
                    counts[1] += bad_buffer
        found = ", ".join(f"{rows}: {s}/{b}" for rows, (s, b) in wrong.items()) or "none"
        lines.append(f"| {xblock} | {rblock} | {warps} | {loop} | {inplace} | {found} |")
        print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
