# Owner(s): ["module: inductor"]
"""``argmax``/``argmin`` over a data-dependent length run in chunks under the FX backend.

Upstream keeps an arg reduction in one program; over a selection longer than a
chunk the overlay takes each chunk's best value and first best index, then the
first chunk holding the best value (``codegen/arg_reductions.py``). The inputs
hold what decides an arg reduction: the best value in several chunks (ties: the
first wins), NaN (the best for both), infinities, integer extremes, and one kept
element; every result must be eager's index exactly. In the CPU mode NaN needs
the CPU mode's own combines (``integration/cpu_index_combines.py``).
"""

import torch
from test_fxir_backend import FxirTestCase
from test_fxir_reductions import reduction_calls, two_stages

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.codegen.reductions import CHUNK

#: Elements of an input: two chunks when every one is kept. Triton's interpreter
#: runs an arg reduction's combine lane by lane, so the CPU mode takes seconds a call.
N = CHUNK + 1000


def arg_of_kept(x, keep):
    kept = x[keep]
    return kept.argmax(), kept.argmin()


def kept(n: int, fraction: float, seed: int) -> torch.Tensor:
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)) < fraction


class ChunkedArgReductionTest(FxirTestCase):
    def run_chunked(self, fn, inputs):
        with ifx.fx_backend(self.device, sync_free=False), ifx.recording_graphs() as graphs:
            compiled = torch.compile(fn, fullgraph=True)
            for x, keep in inputs:
                x, keep = x.to(self.device), keep.to(self.device)
                self.assertEqual(compiled(x, keep), fn(x, keep), atol=0, rtol=0)
        self.check_meta(graphs)
        return graphs

    def assert_chunked(self, graphs):
        """A reduction of ``CHUNK`` elements per program, over ``CeilDiv(u0, CHUNK)``
        programs, whose results a reduction over those programs reads."""
        pairs = two_stages(graphs)
        self.assertTrue(pairs, "no reduction reads what another one wrote: one program")
        first, second = pairs[-1]
        self.assertEqual(first.kwargs["kwargs"]["r0_numel"], CHUNK)
        self.assertIsInstance(first.kwargs["kwargs"]["xnumel"], torch.fx.Node)
        self.assertIs(second.kwargs["kwargs"]["r0_numel"], first.kwargs["kwargs"]["xnumel"])

    def test_ties_nan_and_infinities_in_float32(self):
        x = torch.randn(N, generator=torch.Generator().manual_seed(0))
        # The best values in both chunks, the first chunk's first: it wins ...
        x[[CHUNK + 5, 11, CHUNK + 600]] = 9.0
        x[[CHUNK + 9, 40]] = -float("inf")
        # ... unless NaN is kept: the first kept NaN wins both.
        nan = x.clone()
        nan[[5, CHUNK + 100, CHUNK + 700]] = float("nan")
        keep_nan = torch.ones(N, dtype=torch.bool)
        keep_nan[5] = False
        inputs = [(x, kept(N, 0.97, 1)), (nan, keep_nan), (x, torch.arange(N) == CHUNK + 3)]
        self.assert_chunked(self.run_chunked(arg_of_kept, inputs))

    def test_integer_extremes(self):
        x = torch.randint(-100, 100, (N,), generator=torch.Generator().manual_seed(3))
        x = x.to(torch.int32)
        info = torch.iinfo(torch.int32)
        # The masked tail of the last chunk holds these extremes: real ones win.
        x[[CHUNK + 4, N - 2]] = info.max
        x[[4, N - 1]] = info.min
        inputs = [(x, kept(N, 0.98, 4)), (x, torch.ones(N, dtype=torch.bool))]
        self.assert_chunked(self.run_chunked(arg_of_kept, inputs))

    def test_a_selection_of_at_most_one_chunk_stays_one_program(self):
        x = torch.randn(2000, generator=torch.Generator().manual_seed(9))
        x[[3, 700]] = float("nan")
        graphs = self.run_chunked(arg_of_kept, [(x, kept(2000, 0.5, 10)), (x, x > 0)])
        self.assertFalse(two_stages(graphs))
        self.assertTrue(reduction_calls(graphs))

    def test_an_empty_selection_raises_as_eager_does(self):
        x = torch.randn(64, device=self.device)
        nothing = torch.zeros(64, dtype=torch.bool, device=self.device)
        with self.assertRaisesRegex(IndexError, "numel\\(\\) == 0"):
            arg_of_kept(x, nothing)
        with ifx.fx_backend(self.device, sync_free=False):
            compiled = torch.compile(arg_of_kept, fullgraph=True)
            self.assertEqual(compiled(x, x > 0), arg_of_kept(x, x > 0))
            # Dynamo's check that the selection is not empty, as a graph node.
            with self.assertRaisesRegex(RuntimeError, "u0, 0"):
                compiled(x, nothing)


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
