# Owner(s): ["module: inductor"]
"""Data-dependent selections fuse into what reads them under the FX backend.

Four choices that upstream makes badly once a size is unbacked, and that the
overlay makes again while a graph compiles for the FX wrapper:

- ``x[mask]`` is ``nonzero`` and a gather that fuses into its consumers, not
  ATen's ``index``, which writes the selected rows out (``codegen/indexing.py``);
- two selections by one mask share one ``nonzero``, so that their lengths are
  one symbol (``indexing.nonzero_once``);
- a reduction over the rows of such a selection fuses with what it reads and
  what reads it, and is persistent where its row is short, as for a static
  number of rows (``codegen/reductions.py``);
- the runner reads the scalars of ``t.tolist()`` with one copy to the host, not
  one sync per element (``runner/items.py``).

Each program is compared with eager on inputs whose data-dependent sizes differ,
and its FX graph must show the choice.
"""

import operator

import torch
from test_fxir_backend import FxirTestCase, kernel_calls, symbol_definitions
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.runner import compile_graph
from inductor_fx_unbacked.runner.items import item_runs

aten = torch.ops.aten
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def normalized_rows(x):
    y = x[x[:, 0] > 0]
    return (y - y.amax(-1, keepdim=True)) / y.abs().sum(-1, keepdim=True)


def column_sums(x):
    return x[x[:, 0] > 0].sum(dim=0)


def masked_columns(x, mask):
    return x[:, mask] * 2


def rows_of_a_mask(mask, x):
    return x[mask] + 1


def sums_of_splits(x, lengths):
    return torch.stack([chunk.sum() for chunk in torch.split(x, lengths.tolist())])


def any_gathered_by_valid_indices(x, idx):
    valid = (idx >= 0) & (idx < x.shape[0])
    return (torch.gather(x, 0, idx[valid]) > 1).any()


def indices_and_values(q, valid):
    return valid.nonzero(), q[valid] * 2


def best_valid_index(q, valid):
    idx = valid.nonzero().squeeze(1)
    return idx.index_select(0, q[valid].argmax().view(1)), idx.shape[0] + q[valid].shape[0]


def two_selections_and_their_positions(x, y):
    m = x > 0
    (positions,) = torch.where(m)
    return x[m].sin(), y[m] * 3, positions


def selections_around_a_write_to_the_mask(x):
    m = x > 0
    before = x[m] * 2
    m[0] = ~m[0]
    return before, x[m] * 3, m.nonzero()


def nonzero_twice(x):
    m = x > 0
    return m.nonzero(), torch.argwhere(m)


def positions_and_a_masked_sum(x):
    m = x > 0
    return m.nonzero(), x[m].sum()


def kernel_names(graphs):
    return [
        kernel_side_table.get_kernel(call.kwargs["kernel_idx"]).fn.__name__
        for call in kernel_calls(graphs)
    ]


def targets(graphs):
    return [node.target for gm in graphs for node in gm.graph.nodes if node.op == "call_function"]


class SelectionTestCase(FxirTestCase):
    def compile_and_compare(self, fn, inputs):
        # Without the sync-free rewrite, which would reduce over the mask instead of
        # the selection these tests look at.
        with ifx.fx_backend(self.device, sync_free=False), ifx.recording_graphs() as graphs:
            compiled = torch.compile(fn, fullgraph=True)
            for args in inputs:
                self.assertEqual(compiled(*args), fn(*args), **TOLERANCE)
        self.check_meta(graphs)
        return graphs

    def rows(self, n, positive_rows, columns, seed=0):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, columns, generator=g).to(self.device)
        x[:, 0] = self.signed(n, positive_rows, seed)
        return x

    def assert_gathered(self, graphs):
        """``nonzero`` defines the selection's length; no ATen ``index`` writes it out."""
        found = targets(graphs)
        self.assertIn(aten.nonzero.default, found)
        self.assertNotIn(aten.index.Tensor, found)
        self.assertIn("nonzero", symbol_definitions(graphs).get("u0", ""))


class MaskIndexingTest(SelectionTestCase):
    def test_indices_selected_from_one_element_never_index_when_masked_out(self):
        # A mask over a dimension of size 1: fused, the gather's index would be the
        # masked-out element itself (Inductor makes the index into a dimension of 1
        # the constant 0), read without the selection's bound (SIGSEGV on CPU, an
        # illegal address on a GPU). Invalid indices are what the mask is for.
        x = torch.linspace(0, 3, 10, device=self.device)
        inputs = [(x, torch.tensor([i], device=self.device)) for i in (7, 10**12, -100, -1)]
        graphs = self.compile_and_compare(any_gathered_by_valid_indices, inputs)
        self.assertIn(aten.index.Tensor, targets(graphs))

    # 2.10 runs these fused row kernels as loops, each of its tuning configs
    # interpreted (about 15 s each there, 2 s on 2.15).
    def test_selected_rows_are_gathered_where_they_are_read(self):
        inputs = [(self.rows(16, p, 256),) for p in (3, 12)]
        graphs = self.compile_and_compare(normalized_rows, inputs)
        self.assert_gathered(graphs)
        # The gather is in the kernel that reduces the rows.
        self.assertTrue(any("index" in name and "sum" in name for name in kernel_names(graphs)))

    def test_mask_over_a_middle_dimension(self):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(2, 6, 300, generator=g).to(self.device)
        inputs = [(x, (torch.rand(6, generator=g) > p).to(self.device)) for p in (0.2, 0.8)]
        self.assert_gathered(self.compile_and_compare(masked_columns, inputs))

    def test_two_dimensional_mask(self):
        g = torch.Generator().manual_seed(2)
        x = torch.randn(3, 4, 256, generator=g).to(self.device)
        inputs = [(x[..., 0] > shift, x) for shift in (0.5, -0.5)]
        self.assert_gathered(self.compile_and_compare(rows_of_a_mask, inputs))

    def test_short_rows_keep_atens_index(self):
        """A gather of short rows into a reduction over them is slower than ATen's
        copy (``gathers_rows``): the selection stays ``index``."""
        inputs = [(self.rows(24, p, 64),) for p in (5, 18)]
        graphs = self.compile_and_compare(column_sums, inputs)
        self.assertIn(aten.index.Tensor, targets(graphs))
        self.assertNotIn(aten.nonzero.default, targets(graphs))

    def test_python_wrapper_keeps_atens_index(self):
        """Outside ``fx_backend`` the overlay leaves upstream's decompositions alone."""
        x = self.rows(16, 6, 256)
        code = self.wrapper_code(normalized_rows, (x,), overlay=True, tolerance=TOLERANCE)
        self.assertIn("aten.index.Tensor", code)


class RowReductionFusionTest(SelectionTestCase):
    # 2.10 runs these fused row kernels as loops, each of its tuning configs
    # interpreted (about 15 s each there, 2 s on 2.15).
    def test_reductions_over_selected_rows_fuse_into_one_kernel(self):
        inputs = [(self.rows(16, p, 256),) for p in (3, 12)]
        graphs = self.compile_and_compare(normalized_rows, inputs)
        names = kernel_names(graphs)
        # The mask, then amax and sum in one kernel: upstream runs each alone, and
        # the normalisation after them (4 kernels). 2.13 and 2.15 fuse the
        # normalisation in too (persistent in the CPU mode; 2.11's GPU heuristics
        # loop over the row); 2.10 runs it as a kernel of its own.
        fused = [name for name in names if "amax" in name and "sum" in name]
        self.assertEqual(len(fused), 1, names)
        self.assertLessEqual(len(names), 3, names)


class SharedNonzeroTest(SelectionTestCase):
    """A mask's ``nonzero`` is traced once per graph (``indexing.nonzero_once``):
    selections by the mask and its ``nonzero`` share it, one host sync."""

    def masks(self, n=40):
        # Empty, one element, some, all: what the selection's length takes.
        return [self.signed(n, p, seed=p) > 0 for p in (0, 1, 13, n)]

    def assert_one_nonzero(self, graphs):
        found = targets(graphs)
        self.assertEqual(found.count(aten.nonzero.default), 1, found)
        self.assertEqual(list(symbol_definitions(graphs)), ["u0"])

    def test_a_masks_nonzero_and_its_selection_share_one(self):
        q = self.signed(40, 20, seed=5)
        inputs = [(q, mask) for mask in self.masks()]
        self.assert_one_nonzero(self.compile_and_compare(indices_and_values, inputs))

    def test_both_lengths_are_one_symbol(self):
        # Dynamo gives the two lengths two symbols; sharing makes them one, and
        # their sum 2 * u0. An empty selection has no argmax: eager raises.
        q = self.signed(40, 20, seed=5)
        inputs = [(q, mask) for mask in self.masks()[1:]]
        graphs = self.compile_and_compare(best_valid_index, inputs)
        self.assert_one_nonzero(graphs)

    def test_selections_by_one_mask_and_where_share_one(self):
        inputs = [(self.signed(40, p, seed=p), self.signed(40, 20, seed=9)) for p in (0, 1, 27)]
        graphs = self.compile_and_compare(two_selections_and_their_positions, inputs)
        self.assert_one_nonzero(graphs)

    def test_a_mask_written_between_gets_a_nonzero_of_its_own(self):
        # The write flips the first element: the selections after it differ.
        inputs = [(self.signed(40, p, seed=p),) for p in (0, 1, 13)]
        graphs = self.compile_and_compare(selections_around_a_write_to_the_mask, inputs)
        self.assertEqual(targets(graphs).count(aten.nonzero.default), 2)

    def test_shared_results_are_copies(self):
        x = self.signed(40, 13, seed=3)
        with ifx.fx_backend(self.device, sync_free=False), ifx.recording_graphs() as graphs:
            first, second = torch.compile(nonzero_twice, fullgraph=True)(x)
        self.assert_one_nonzero(graphs)
        self.assertEqual(first, second)
        self.assertNotEqual(first.data_ptr(), second.data_ptr())
        first.fill_(-1)
        self.assertEqual(second, torch.argwhere(x > 0))

    def test_with_the_sync_free_rewrite(self):
        # The rewrite takes the sum over the mask; the positions keep ``nonzero``.
        inputs = [(self.signed(40, p, seed=p),) for p in (0, 1, 13)]
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            compiled = torch.compile(positions_and_a_masked_sum, fullgraph=True)
            for args in inputs:
                self.assertEqual(compiled(*args), positions_and_a_masked_sum(*args), **TOLERANCE)
        self.check_meta(graphs)
        self.assertEqual(targets(graphs).count(aten.nonzero.default), 1)

    def test_direct_call_with_dynamic_sizes(self):
        q = self.signed(40, 20, seed=5)
        artifact = ifx.compile(indices_and_values, q, self.masks()[2], dynamic=True)
        for n in (7, 40, 100):
            q = self.signed(n, n // 2, seed=n)
            for mask in self.masks(n):
                self.assertEqual(artifact(q, mask), indices_and_values(q, mask), **TOLERANCE)

    def test_python_wrapper_keeps_atens_index_and_one_nonzero(self):
        """Outside ``fx_backend`` the overlay leaves upstream's decompositions alone:
        ``aten.index`` selects, and the one explicit ``nonzero`` stays."""
        q, mask = self.signed(40, 20, seed=5), self.masks()[2]
        code = self.wrapper_code(indices_and_values, (q, mask), overlay=True, tolerance=TOLERANCE)
        self.assertEqual(code.count("aten.nonzero.default("), 1, code)
        self.assertIn("aten.index.Tensor", code)


class ItemRunsTest(FxirTestCase):
    def test_tolist_is_one_copy(self):
        x = torch.randn(100, device=self.device)
        inputs = [
            (x, torch.tensor(lengths, device=self.device)) for lengths in ([30, 50, 20], [1, 1, 98])
        ]
        with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
            compiled = torch.compile(sums_of_splits, fullgraph=True)
            for args in inputs:
                self.assertEqual(compiled(*args), sums_of_splits(*args), **TOLERANCE)
        (gm,) = graphs
        # The graph keeps one item per length; the runner copies them once.
        self.assertEqual(targets(graphs).count(aten.item.default), 3)
        source = compile_graph(gm, "lowered").source
        self.assertEqual(source.count(".tolist()"), 1, source)
        self.assertNotIn(".item()", source)

    def test_a_run_ends_where_memory_may_be_written(self):
        graph = torch.fx.Graph()
        base = graph.placeholder("base")
        start = graph.call_function(aten.sym_storage_offset.default, (base,))

        def item_at(offset):
            # A 0-d view of an input, as the converter writes it: from the input's start.
            at = graph.call_function(operator.add, (start, offset)) if offset else start
            return graph.call_function(
                aten.item.default, (graph.call_function(torch.as_strided, (base, (), (), at)),)
            )

        first, second = item_at(0), item_at(1)
        written = graph.call_function(torch.Tensor.add_, (base, 1))
        third, fourth = item_at(2), item_at(3)
        graph.output((graph.call_function(operator.add, (first, second)), written, third, fourth))
        runs = item_runs(graph)
        self.assertEqual(
            [(run.items, run.offsets) for run in runs],
            [([first, second], [0, 1]), ([third, fourth], [2, 3])],
        )


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
