# Owner(s): ["module: inductor"]
"""Slices of unbacked lengths whose length Dynamo gave a symbol of its own.

``x[m][:1]`` with ``m`` of one element: the fake slice cannot decide the clamp
and binds a new symbol ``u1`` to the result's length, which Inductor's lowering
must define. On torch 2.10 and 2.11 it proves the slice a no-op and defines
nothing, so every compile failed ("failed OrderedSet([]) >= OrderedSet([u1])
(inductor >= fx)"), the Python wrapper's too; the overlay defines it
(``codegen/slice_sizes.py``). Found by the fuzzer on the H100 (seed 1850002178).
"""

import torch
from test_fxir_backend import FxirTestCase, symbol_definitions
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

import inductor_fx_unbacked as ifx

#: (name, program): a selection of ``x`` by ``k > 0``, then a slice of it.
PROGRAMS = {
    "head": lambda x, k: x[k > 0][:1] * 2,
    "sorted_head": lambda x, k: x[k > 0].sort(descending=True, stable=True).values[:1],
    "scan_head": lambda x, k: x[k > 0].cumsum(0)[:1],
    "nonzero_head": lambda x, k: torch.nonzero(k > 0)[:1],
    "tail": lambda x, k: x[k > 0][-1:] + 1,
    "strided": lambda x, k: x[k > 0][::2] + 1,
    "past_the_end": lambda x, k: x[k > 0][0:5] * 3,
}


@instantiate_parametrized_tests
class UnbackedSliceLengthTest(FxirTestCase):
    def inputs(self, n):
        """Inputs of ``n`` elements whose selections keep all, none and one of them."""
        x = torch.arange(1.0, n + 1, device=self.device)
        masks = ([1.0] * n, [-1.0] * n, [1.0] + [-1.0] * (n - 1))
        return [(x, torch.tensor(m, device=self.device)) for m in masks]

    @parametrize("name", list(PROGRAMS))
    @parametrize("n", [1, 3])
    def test_fx_backend(self, name, n):
        graphs = self.run_fx(PROGRAMS[name], self.inputs(n))
        definitions = symbol_definitions(graphs)
        self.assertIn("u0", definitions)
        # Where the trace bound the slice's length to a symbol of its own (2.10,
        # 2.11), a node computes it from u0 and the bounds: no tensor's size.
        for symbol, node in definitions.items():
            if symbol != "u0":
                self.assertNotIn("sym_size", node, definitions)

    @parametrize("name", ["head", "sorted_head", "nonzero_head"])
    def test_python_wrapper_with_the_overlay(self, name):
        # Inductor's own wrapper runs them too (it defines the length from the same
        # IR node); wrapper_code compares with eager.
        for args in self.inputs(1):
            self.wrapper_code(PROGRAMS[name], args, overlay=True)

    def test_direct_call(self):
        program = PROGRAMS["sorted_head"]
        inputs = self.inputs(1)
        artifact = ifx.compile(program, *inputs[0])
        for args in inputs:
            self.assertEqual(artifact(*args), program(*args))
