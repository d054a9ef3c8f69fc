# Owner(s): ["module: inductor"]
"""Accumulation into slots by the indices a mask keeps, in every dtype.

A mixture of experts' combine, segment sums and histograms add the rows a mask
keeps into slots named by indices (``index_add_``, ``scatter_add``, ``index_put``
with ``accumulate``, ``bincount``); where the mask is false the indices are out of
range and the values NaN or extreme. Inductor writes ``index_put`` with
``accumulate`` as a kernel of ``tl.atomic_add`` over an unbacked length, in every
float dtype (the others as such a kernel or an ATen fallback, by op, dtype and
release). In the
CPU mode, Triton's interpreter
had no bfloat16 atomic add (found by the fuzzer's ``scattered`` family):
``integration/cpu_atomics.py`` computes it.
"""

import numpy
import torch
from test_fxir_backend import FxirTestCase
from test_fxir_reductions import kernel_source
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

import inductor_fx_unbacked as ifx

DTYPES = ["float32", "float16", "bfloat16", "int64"]
JUNK_INDICES = [-1, -1000, 10**12, 5, -(10**12)]


def add_rows(x, idx, w):
    m = w > 0
    out = x.new_zeros(5, x.shape[1])
    out.index_add_(0, idx[m], x[m] * w[m, None].to(x.dtype))
    return out


def scatter(x, idx, w):
    m = w > 0
    return x.new_zeros(5).scatter_add(0, idx[m], x[m])


def put(x, idx, w):
    m = (idx >= 0) & (idx < 5)
    return x.new_zeros(5).index_put((idx[m],), x[m], accumulate=True) * 2


def histogram(x, idx, w):
    return torch.bincount(idx[w > 0], minlength=5)


PROGRAMS = {"index_add": add_rows, "scatter_add": scatter, "index_put": put, "bincount": histogram}


@instantiate_parametrized_tests
class AccumulateKeptTest(FxirTestCase):
    def inputs(self, dtype, kept, seed):
        """20 positions, ``kept`` of them kept (duplicate slots among them); junk
        indices and values elsewhere."""
        g = torch.Generator().manual_seed(seed)
        keep = torch.zeros(20, dtype=torch.bool)
        keep[torch.randperm(20, generator=g)[:kept]] = True
        idx = torch.randint(0, 5, (20,), generator=g)
        junk = torch.tensor(JUNK_INDICES)[torch.randint(0, len(JUNK_INDICES), (20,), generator=g)]
        idx = torch.where(keep, idx, junk)
        w = torch.where(keep, torch.rand(20, generator=g) + 0.5, -torch.rand(20, generator=g))
        if dtype == "int64":
            values = torch.randint(-9, 10, (20, 3), generator=g)
            junk_values = torch.tensor(torch.iinfo(torch.int64).max)
        else:
            values = torch.rand(20, 3, generator=g) * 3
            junk_values = torch.tensor(float("nan"))
        x = torch.where(keep[:, None], values, junk_values).to(getattr(torch, dtype))
        return tuple(t.to(self.device) for t in (x, idx, w))

    @parametrize("dtype", DTYPES)
    @parametrize("program", list(PROGRAMS))
    def test_accumulates_what_eager_does(self, program, dtype):
        fn = PROGRAMS[program]

        def sliced(x, idx, w):
            # The 1-D programs take a column.
            return fn(x if program == "index_add" else x[:, 0].contiguous(), idx, w)

        inputs = [self.inputs(dtype, kept, seed) for seed, kept in enumerate((7, 0, 1, 20))]
        graphs = self.run_fx(sliced, inputs, dynamic=True)
        calls = [
            node
            for gm in graphs
            for node in gm.graph.nodes
            if node.target is torch.ops.higher_order.triton_kernel_wrapper_mutation
        ]
        if program == "index_put" and dtype != "int64":  # int64: ATen's on torch 2.10
            self.assertTrue(
                any("tl.atomic_add(" in kernel_source(call) for call in calls),
                [kernel_source(call) for call in calls],
            )
        self.assertTrue(
            any(n.meta.get("unbacked_symbol") is not None for gm in graphs for n in gm.graph.nodes)
        )
        artifact = ifx.compile(sliced, *inputs[0], dynamic=True)
        for args in inputs:
            self.assertEqual(artifact(*args), sliced(*args))


def test_bfloat16_atomic_add_in_the_interpreter_rounds_each_add_as_the_gpu_does():
    """The CPU mode's bfloat16 add, lane by lane: two lanes of one address see each
    other's sums, each rounded to bfloat16; masked lanes neither read nor write."""
    import triton.language as tl
    from triton._C.libtriton import ir
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    from inductor_fx_unbacked.integration.cpu_atomics import computing_bfloat16_atomics

    def refused(*args):
        raise AssertionError("a bfloat16 add went to the interpreter's own atomic")

    rmw = computing_bfloat16_atomics(refused)
    out = torch.tensor([1.0, 256.0, 0.0], dtype=torch.bfloat16)
    values = torch.tensor([1.0, 1.0, 0.5, 3.0], dtype=torch.bfloat16)
    slots = numpy.array([1, 1, 0, 2])
    base = out.data_ptr()
    pointers = TensorHandle((base + 2 * slots).astype(numpy.uint64), tl.pointer_type(tl.bfloat16))
    value = TensorHandle(values.view(torch.int16).numpy().view(numpy.uint16), tl.bfloat16)
    mask = TensorHandle(numpy.array([True, True, True, False]), tl.int1)
    read = rmw(InterpreterBuilder(), ir.ATOMIC_OP.FADD, pointers, value, mask, None, None)
    # 256 + 1 rounds to 256 in bfloat16 (8 bits of mantissa), twice.
    assert out.tolist() == [1.5, 256.0, 0.0]
    read_values = torch.from_numpy(read.data.view(numpy.int16)).view(torch.bfloat16)
    assert read_values.tolist() == [256.0, 256.0, 1.0, 0.0]
