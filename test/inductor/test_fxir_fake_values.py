# Owner(s): ["module: inductor"]
"""Fake values the overlay corrects: what Inductor compiles for is what runs.

``torch.unique``'s inverse indices and counts are int64 whatever the input's
dtype; torch 2.10 and 2.11 give their fake tensors the input's dtype, so kernels
compiled for int32 elements read int64 counts (fuzzer seeds 1796310482 and
1796310713 on the H200: 0.75 where eager gives 1.25).
"""

import itertools

import torch
from test_fxir_backend import FxirTestCase

import inductor_fx_unbacked as ifx


def unique_summary(x):
    values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
    return values, inverse, counts, (values * counts).sum(), counts.float().mean()


def unique_counts(x):
    values, counts = torch.unique(x, return_counts=True)
    return counts, (values * counts).sum(), counts.float().mean()


def unique_inverse(x):
    values, inverse = torch.unique(x, return_inverse=True)
    return inverse, values[inverse].sum(), inverse.float().mean()


class UniqueIndicesTest(FxirTestCase):
    def inputs(self, dtype):
        return [
            torch.tensor([3, 4, 0, 2, 2], dtype=dtype, device=self.device),
            torch.tensor([0, 3, 3, 3, 2], dtype=dtype, device=self.device),
            torch.tensor([7, 7, 7, 7, 7], dtype=dtype, device=self.device),
        ]

    def test_the_inverse_and_counts_of_int32_values_are_int64_and_right(self):
        for program, dtype in itertools.product(
            (unique_summary, unique_counts, unique_inverse), (torch.int32, torch.int16, torch.int64)
        ):
            torch._dynamo.reset()
            with (
                torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True),
                ifx.fx_backend(self.device),
                ifx.recording_graphs() as graphs,
            ):
                compiled = torch.compile(program, fullgraph=True)
                for x in self.inputs(dtype):
                    got, want = compiled(x), program(x)
                    self.assertEqual([t.dtype for t in got], [t.dtype for t in want])
                    self.assertEqual(got, want, exact_dtype=True)
            self.check_meta(graphs)

    def test_a_direct_call_counts_as_eager_does(self):
        x, *others = self.inputs(torch.int32)
        artifact = ifx.compile(unique_counts, x, dynamic=True)
        for other in others:
            self.assertEqual(artifact(other), unique_counts(other), exact_dtype=True)
