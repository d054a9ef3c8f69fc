# Owner(s): ["module: inductor"]
"""Reductions over a data-dependent length run in two stages under the FX backend.

Upstream keeps a reduction over an unbacked length in one program; the overlay
splits it as upstream splits one of the length's upper bound
(``codegen/reductions.py``). Each program is compared with eager on inputs
whose data-dependent sizes differ, an empty selection among them, and its FX
graph must hold the split: a first-stage kernel over several programs, and a
second that reduces the partial results the first wrote. ``SMALL`` inputs are
just large enough for upstream's heuristic to split (a constant number of
programs); ``LARGE`` ones may exceed ``CHUNK`` elements (``CeilDiv(u0, CHUNK)``
programs). On CPU, the kernels run in Triton's interpreter.
"""

import inspect
import re
import unittest

import torch
from test_fxir_backend import FxirTestCase, kernel_calls
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.codegen.reductions import CHUNK
from inductor_fx_unbacked.codegen.triton_kernels import SCAN_BLOCK
from inductor_fx_unbacked.demo.programs import h1, h4

#: Elements of an input, and the columns of a 2-D one.
SMALL, LARGE, COLUMNS = 12288, 1 << 15, 64
#: Sums of ~10**5 float32 values, in another order than eager's.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-3}


def sum_of_item_rows(x, n):
    rows = n.item()
    torch._check(rows >= 0)
    torch._check(rows <= x.shape[0])
    return x[:rows].sum()


def masked_full_sum(x):
    return x[x[:, 0] > 0].sum()


def masked_var_mean(x):
    return torch.var_mean(x[x > 0])


def masked_amax(x):
    return x[x > 0].amax()


def masked_cumsum(x):
    return x[x > 0].cumsum(0)


def cumsum_of_masked_select(x):
    return torch.masked_select(x, x > 0).reciprocal().abs().cumsum(0)


def masked_cumprod(x):
    # Factors near 1, so that the product of thousands stays finite.
    return (x[x > 0] * 1e-3 + 1).cumprod(0)


def repeated_cumsum(x, repeats):
    return torch.repeat_interleave(x, repeats).cumsum(0)


def kernel_source(call):
    """The Triton source of a kernel call's kernel (a GPU's JIT function, or the CPU
    mode's interpreted one)."""
    kernel = kernel_side_table.get_kernel(call.kwargs["kernel_idx"])
    function = getattr(kernel, "fn", kernel)
    return getattr(function, "src", None) or inspect.getsource(getattr(function, "fn", function))


def pointers(call, prefix):
    return {value for name, value in call.kwargs["kwargs"].items() if name.startswith(prefix)}


def reduction_calls(graphs):
    return [call for call in kernel_calls(graphs) if "r0_numel" in call.kwargs["kwargs"]]


def two_stages(graphs):
    """The (first, second) reduction kernel calls where the second reduces what the
    first wrote."""
    reductions = reduction_calls(graphs)
    return [
        (first, second)
        for first in reductions
        for second in reductions
        if pointers(first, "out_ptr") & pointers(second, "in_ptr")
    ]


class ReductionSplitTest(FxirTestCase):
    def rows(self, n, positive_rows, seed=0):
        """``n // COLUMNS`` rows, ``positive_rows`` of them with a positive first column."""
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n // COLUMNS, COLUMNS, generator=g).to(self.device)
        x[:, 0] = self.signed(n // COLUMNS, positive_rows, seed)
        return x

    def run_split(self, fn, inputs, **compile_kwargs):
        """Compile ``fn`` once, check it against eager on every input, return the graphs.

        Without the sync-free rewrite, which computes a reduction over a masked
        selection over the mask (no unbacked length to split): the reductions here
        are over selections, as where the selection's size escapes."""
        with ifx.fx_backend(self.device, sync_free=False), ifx.recording_graphs() as graphs:
            compiled = torch.compile(fn, fullgraph=True, **compile_kwargs)
            for args in inputs:
                self.assertEqual(compiled(*args), fn(*args), **TOLERANCE)
        self.check_meta(graphs)
        return graphs

    def assert_two_stages(self, graphs, *, chunked):
        """The last reduction reads partial results of a first stage over several
        programs: ``CHUNK`` elements each (INNER), or a constant count (OUTER)."""
        pairs = two_stages(graphs)
        self.assertTrue(pairs, "no reduction reads what another one wrote: not split")
        first, second = pairs[-1]
        first_sizes, second_sizes = first.kwargs["kwargs"], second.kwargs["kwargs"]
        if chunked:
            # CeilDiv(u0, CHUNK) programs, symbolic, whose partials the second reduces.
            self.assertEqual(first_sizes["r0_numel"], CHUNK)
            self.assertIsInstance(first_sizes["xnumel"], torch.fx.Node)
            self.assertIs(second_sizes["r0_numel"], first_sizes["xnumel"])
            self.assertEqual(second_sizes["xnumel"], 1)
        else:
            # A constant number of programs per output, each over a symbolic block.
            self.assertIsInstance(first_sizes["r0_numel"], torch.fx.Node)
            self.assertIsInstance(second_sizes["r0_numel"], int)
            self.assertGreater(second_sizes["r0_numel"], 1)

    def test_sum_of_a_long_masked_selection_is_chunked(self):
        # h1: (x[x > 0].sin() * 2).sum()
        inputs = [(self.signed(LARGE, p),) for p in (LARGE // 3, LARGE - 5, 0)]
        graphs = self.run_split(h1, inputs)
        self.assert_two_stages(graphs, chunked=True)

    def test_sum_of_a_short_masked_selection_splits_in_constant_programs(self):
        inputs = [(self.signed(SMALL, p),) for p in (SMALL // 3, SMALL - 5, 0)]
        graphs = self.run_split(h1, inputs)
        self.assert_two_stages(graphs, chunked=False)

    def test_column_sums_over_masked_rows_split_outer(self):
        # h4: x[x[:, 0] > 0].sum(dim=0)
        graphs = self.run_split(h4, [(self.rows(SMALL, p),) for p in (150, 40, 0)])
        self.assert_two_stages(graphs, chunked=False)

    def test_sum_of_a_selection_from_a_symbolic_size_is_chunked(self):
        # The selection's bound is the int64 limit, which bounds nothing: chunks,
        # whose number follows the length.
        inputs = [(self.signed(SMALL, p),) for p in (SMALL // 3, 0)]
        graphs = self.run_split(h1, inputs, dynamic=True)
        self.assert_two_stages(graphs, chunked=True)

    def test_column_sums_over_rows_selected_from_a_symbolic_count_stay_whole(self):
        # A constant number of programs would be chosen for a length of no bound.
        inputs = [(self.rows(SMALL, 150),), (self.rows(SMALL // 2, 0),)]
        graphs = self.run_split(h4, inputs, dynamic=True)
        self.assertEqual(two_stages(graphs), [])
        self.assertEqual(len(reduction_calls(graphs)), 1)

    def test_full_sum_over_masked_rows_flattens_and_is_chunked(self):
        inputs = [(self.rows(LARGE, p),) for p in (1500, 400, 0)]
        graphs = self.run_split(masked_full_sum, inputs)
        self.assert_two_stages(graphs, chunked=True)

    def test_sum_over_item_rows_is_chunked(self):
        x = torch.randn(LARGE // COLUMNS, COLUMNS, device=self.device)
        inputs = [(x, torch.tensor(rows)) for rows in (LARGE // COLUMNS, LARGE // COLUMNS // 3, 0)]
        graphs = self.run_split(sum_of_item_rows, inputs)
        self.assert_two_stages(graphs, chunked=True)

    def test_var_mean_of_a_masked_selection_splits(self):
        # Inductor's Welford mean of nothing is 0 where eager's is NaN, split or
        # not: no empty selection here.
        inputs = [(self.signed(SMALL, p),) for p in (SMALL // 3, SMALL - 5)]
        graphs = self.run_split(masked_var_mean, inputs)
        self.assert_two_stages(graphs, chunked=False)

    def test_amax_of_a_long_masked_selection_is_chunked(self):
        inputs = [(self.signed(LARGE, p),) for p in (LARGE // 3, 7)]
        graphs = self.run_split(masked_amax, inputs)
        self.assert_two_stages(graphs, chunked=True)

    def test_split_sum_is_deterministic(self):
        x = self.signed(LARGE, LARGE // 2)
        old = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            with ifx.fx_backend(self.device, sync_free=False), ifx.recording_graphs() as graphs:
                compiled = torch.compile(h1, fullgraph=True)
                first, second = compiled(x), compiled(x)
        finally:
            torch.use_deterministic_algorithms(old)
        self.assert_two_stages(graphs, chunked=True)
        self.assertTrue(torch.equal(first, second), (first, second))
        self.assertEqual(first, h1(x), **TOLERANCE)

    def assert_split_scan(self, graphs):
        """The scan is upstream's split kernel: its programs follow the length, and
        they hand their prefixes on through a workspace zeroed before the launch."""
        self.assertTrue(graphs)
        for gm in graphs:  # one per recompile on new sizes
            zeroed = [
                node.args[0]
                for node in gm.graph.nodes
                if node.target is torch.ops.aten.zero_.default
            ]
            scans = [
                call
                for call in kernel_calls([gm])
                if any(arg in zeroed for arg in call.kwargs["kwargs"].values())
            ]
            self.assertEqual(len(scans), 1, gm.code)

    def assert_symbolic_scan_length(self, graphs):
        for gm in graphs:
            scan = kernel_calls([gm])[-1]
            self.assertIsInstance(scan.kwargs["kwargs"]["r0_numel"], torch.fx.Node, gm.code)

    def test_the_split_scans_look_back_takes_a_32_bit_block_index(self):
        # The kernel indexes in int64 (a length without a bound); upstream's
        # look-back helper does not compile on a GPU with an int64 block index.
        g = torch.Generator().manual_seed(1)
        inputs = [
            (torch.randn(n, generator=g), torch.randint(0, 4, (n,), generator=g))
            for n in (2000, 300)
        ]
        inputs = [tuple(t.to(self.device) for t in case) for case in inputs]
        graphs = self.run_split(repeated_cumsum, inputs)
        scans = [
            text
            for text in map(kernel_source, kernel_calls(graphs))
            if "exclusive_scan_decoupled_lookback" in text
        ]
        self.assertTrue(scans)
        for text in scans:
            self.assertIn("tl.int64", text)
            # The helper's arguments, one per line: the scratch, the block's value, its index.
            self.assertRegex(text, r"decoupled_lookback\w*\(\n.*\n.*\n\s*tl\.program_id\(0\),\n")

    @unittest.skipIf(not torch.cuda.is_available(), "the CPU mode keeps this mask on every release")
    def test_a_persistent_reduction_over_a_length_of_0_or_1_keeps_its_mask(self):
        # The length's bound is 1, a multiple of the block of 1: torch 2.10 and 2.11
        # drop the mask on a GPU, and an empty selection reads its element 0 (an
        # illegal memory access).
        x = torch.arange(30.0, device=self.device)
        inputs = [(x, torch.full((1,), sign, device=self.device)) for sign in (1.0, -1.0)]
        graphs = self.run_split(lambda x, k: x[torch.where(k > 0)].sum(), inputs)
        (text,) = [t for t in map(kernel_source, kernel_calls(graphs)) if "def triton_per" in t]
        self.assertIn("r0_mask = r0_index < r0_numel", text)

    def test_cumsum_of_a_masked_selection_is_a_split_scan(self):
        inputs = [(self.signed(LARGE, p),) for p in (LARGE // 3, LARGE - 5, 1, 0)]
        graphs = self.run_split(masked_cumsum, inputs)
        self.assert_split_scan(graphs)
        self.assert_symbolic_scan_length(graphs)

    def test_a_split_scan_that_ends_the_graph(self):
        # Its workspace is freed last: upstream's pass that drops the trailing frees
        # cannot name a workspace (fuzz seed 1796353589 raised AttributeError).
        inputs = [(self.signed(LARGE, p, seed=p),) for p in (LARGE // 3, 1, 0)]
        graphs = self.run_split(cumsum_of_masked_select, inputs)
        self.assert_split_scan(graphs)
        self.assert_symbolic_scan_length(graphs)

    def test_cumprod_of_a_masked_selection_is_a_split_scan(self):
        inputs = [(self.signed(LARGE, p, seed=p),) for p in (LARGE // 2, 3, 0)]
        graphs = self.run_split(masked_cumprod, inputs)
        self.assert_split_scan(graphs)
        self.assert_symbolic_scan_length(graphs)

    def test_cumsum_of_an_unbounded_length_is_a_split_scan(self):
        # repeat_interleave's length has no bound: the split kernel's programs follow
        # it, whatever it is; int64 counts, summed exactly. Repeats of 0 only (the
        # last input) repeat nothing. (Inductor fails to lower repeat_interleave of
        # inputs of size 0, with or without the FX backend.)
        g = torch.Generator().manual_seed(0)
        inputs = [
            (torch.randint(-50, 50, (n,), generator=g), torch.randint(0, k, (n,), generator=g))
            for n, k in ((3000, 5), (700, 2), (1, 2), (5, 1))
        ]
        inputs = [tuple(t.to(self.device) for t in case) for case in inputs]
        graphs = self.run_split(repeated_cumsum, inputs)
        self.assert_split_scan(graphs)
        self.assert_symbolic_scan_length(graphs)

    def test_cumsum_of_a_long_static_length_converts(self):
        # Upstream splits this scan itself; its workspace's zeroing was raw text,
        # which the FX converter refused.
        inputs = [(self.signed(LARGE, p, seed=p),) for p in (LARGE // 3, 5)]
        graphs = self.run_split(lambda x: x.cumsum(0), inputs)
        self.assert_split_scan(graphs)
        for gm in graphs:
            self.assertIsInstance(kernel_calls([gm])[-1].kwargs["kwargs"]["r0_numel"], int)

    def assert_scan_block(self, graphs, block):
        """The split scan launches blocks of ``block`` elements (its grid divides the
        length by it), and keeps upstream's look-back workspace, a slot per 256
        elements (``min_split_scan_rblock``): no shorter launch can overflow it."""
        for gm in graphs:
            (scan,) = [
                call
                for call in kernel_calls([gm])
                if "exclusive_scan_decoupled_lookback" in kernel_source(call)
            ]
            self.assertEqual(scan.kwargs["kwargs"]["R0_BLOCK"], block, gm.code)
            self.assertIn(f"'min_split_scan_rblock': {block}", kernel_source(scan))
            divisors = {int(d) for d in re.findall(r" // (\d+)", gm.code) if int(d) >= 256}
            self.assertEqual(divisors, {block, 256}, gm.code)

    def test_a_split_scan_takes_long_blocks_by_its_dtype(self):
        # An int64 scan's look-back costs the most per block: 16384 elements a block
        # (3 of them for the first input), a float32 scan 4096 (4 for the first).
        # Lengths crossing the blocks, one element, none.
        g = torch.Generator().manual_seed(3)
        counts = [
            (torch.randint(-50, 50, (n,), generator=g), torch.randint(0, k, (n,), generator=g))
            for n, k in ((10000, 9), (1, 2), (7, 1))
        ]
        counts = [tuple(t.to(self.device) for t in case) for case in counts]
        graphs = self.run_split(repeated_cumsum, counts, dynamic=True)
        self.assert_split_scan(graphs)
        self.assert_scan_block(graphs, SCAN_BLOCK[64])

        values = [(self.signed(LARGE, p, seed=p),) for p in (LARGE // 2, 1, 0)]
        graphs = self.run_split(masked_cumsum, values)
        self.assert_split_scan(graphs)
        self.assert_scan_block(graphs, SCAN_BLOCK[32])

    def test_a_split_scan_shorter_than_a_long_block_keeps_upstreams_block(self):
        # An int64 selection from SMALL static elements, fewer than SCAN_BLOCK[64]:
        # long enough for upstream to split, too short for a block of that size.
        values = [((self.signed(SMALL, p, seed=p) * 100).long(),) for p in (SMALL - 5, 0)]
        graphs = self.run_split(masked_cumsum, values)
        self.assert_split_scan(graphs)
        for call in kernel_calls(graphs):
            if "exclusive_scan_decoupled_lookback" in kernel_source(call):
                self.assertLess(call.kwargs["kwargs"]["R0_BLOCK"], SCAN_BLOCK[64])

    def test_python_wrapper_keeps_upstreams_scan_block(self):
        """Upstream splits a long static scan itself; outside ``fx_backend`` its
        block stays upstream's."""
        x = self.signed(LARGE, LARGE // 3)
        code = self.wrapper_code(lambda x: x.cumsum(0), (x,), overlay=True, tolerance=TOLERANCE)
        self.assertIn("exclusive_scan_decoupled_lookback", code)
        self.assertIn("'min_split_scan_rblock': 256", code)

    def test_python_wrapper_keeps_one_program(self):
        """Outside ``fx_backend`` the overlay leaves upstream's reductions alone."""
        x = self.signed(SMALL, SMALL // 3)
        code = self.wrapper_code(h1, (x,), overlay=True, tolerance=TOLERANCE)
        reductions = code.count("def triton_red_") + code.count("def triton_per_")
        self.assertEqual(reductions, 1, code)


def negated_rows_and_column_sums(x, k):
    # Fuzz seed 1796352046: on an H200 the in-place kernel summed some rows twice negated.
    s = -x[k > 0]
    return s, s.sum(0)


def relu_of_selected_products_and_row_sums(x, k, w):
    z = (x[k > 0] @ w).relu()
    return z, z.sum(1)


def negated_products_and_row_sums(x, w):
    z = -(x @ w)
    return z, z.sum(1)


class OutOfPlaceReductionTest(FxirTestCase):
    """No reduction kernel under the FX backend stores into a buffer it loads
    (``reductions.keeping_reductions_out_of_place``): Triton reorders such a
    kernel's loads after its stores on a GPU."""

    def compile_and_check(self, fn, inputs):
        with ifx.fx_backend(self.device, sync_free=False), ifx.recording_graphs() as graphs:
            compiled = torch.compile(fn, fullgraph=True)
            for args in inputs:
                self.assertEqual(compiled(*args), fn(*args), **TOLERANCE)
        self.check_meta(graphs)
        return reduction_calls(graphs)

    def rows(self, positive_rows, columns=40, seed=0):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(6, columns, generator=g).to(self.device)
        return x, self.signed(6, positive_rows, seed)

    def test_no_reduction_kernel_updates_in_place(self):
        w = torch.randn(40, 24, generator=torch.Generator().manual_seed(1)).to(self.device)
        programs = [
            (negated_rows_and_column_sums, [self.rows(p, 3) for p in (1, 4, 6, 0)]),
            (
                relu_of_selected_products_and_row_sums,
                [(*self.rows(p, seed=p), w) for p in (5, 2, 0)],
            ),
            (negated_products_and_row_sums, [(self.rows(0, seed=s)[0], w) for s in (0, 1)]),
        ]
        fused = 0
        for fn, inputs in programs:
            for call in self.compile_and_check(fn, inputs):
                arguments = call.kwargs["kwargs"]
                self.assertFalse([a for a in arguments if a.startswith("in_out_ptr")], fn)
                # A reduction kernel that also writes the pointwise result it sums.
                fused += len([a for a in arguments if a.startswith("out_ptr")]) > 1
        # Upstream makes an in-place update of these fused kernels (the next test).
        self.assertGreater(fused, 0)

    def test_python_wrapper_keeps_its_in_place_reductions(self):
        """Outside ``fx_backend`` the overlay leaves upstream's in-place updates alone."""
        w = torch.randn(40, 24).to(self.device)
        x = self.rows(0)[0]
        code = self.wrapper_code(
            negated_products_and_row_sums, (x, w), overlay=True, tolerance=TOLERANCE
        )
        self.assertRegex(code, r"def triton_(red|per)_\w+\(in_out_ptr0")


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
