"""The CPU mode's bfloat16 atomics: ``atomic_add`` and ``atomic_xchg`` computed.

Triton's interpreter keeps bfloat16 values as their 16 bits (``uint16``), and its
C++ read-modify-write has no case for them: every bfloat16 ``tl.atomic_add``
raises "Unsupported data type". Inductor emits one for each accumulation into
slots (``index_put(..., accumulate=True)``, ``scatter_add``, ``index_add_``, the
backward of an indexing) of a bfloat16 tensor, so the CPU mode refused programs
that compile and run on a GPU.

The wrapper below computes those two operations itself: the lanes in order, each
reading the value its address holds (the one an earlier lane of the same call
left, where two lanes name one address), adding in float32 and rounding to
bfloat16 to nearest even, as the GPU's bfloat16 atomic add does, and returning
the values read. An interpreted launch runs its programs one at a time, so no
other program writes between the read and the write. Every other dtype and
operation goes to the interpreter as before (it refuses bfloat16 ``max`` and
``min`` itself, as Triton's compiler does).
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import numpy
import torch

F = TypeVar("F")


def _to_float(bits: numpy.ndarray) -> numpy.ndarray:
    return (bits.astype(numpy.uint32) << 16).view(numpy.float32)


def _to_bfloat16(values: numpy.ndarray) -> numpy.ndarray:
    """float32 to bfloat16 bits, rounded to nearest even (NaN stays NaN)."""
    rounded = torch.from_numpy(numpy.ascontiguousarray(values, numpy.float32)).bfloat16()
    return rounded.view(torch.int16).numpy().view(numpy.uint16)


def computing_bfloat16_atomics(original: F) -> F:
    """Wrap ``InterpreterBuilder.create_atomic_rmw`` (the module docstring)."""
    import triton.language as tl
    from triton._C.libtriton import interpreter as _interpreter
    from triton._C.libtriton import ir
    from triton.runtime.interpreter import TensorHandle

    operations = {
        ir.ATOMIC_OP.FADD: lambda old, value: _to_bfloat16(_to_float(old) + _to_float(value)),
        ir.ATOMIC_OP.XCHG: lambda old, value: value,
    }

    @functools.wraps(original)  # type: ignore[arg-type]
    def create_atomic_rmw(
        self: Any, op: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any
    ) -> Any:
        combine = operations.get(op)
        if val.dtype.scalar != tl.bfloat16 or combine is None:
            return original(self, op, ptr, val, mask, sem, scope)  # type: ignore[operator]
        addresses, values, live = numpy.broadcast_arrays(ptr.data, val.data, mask.data)
        read = numpy.zeros(values.shape, dtype=numpy.uint16)
        lanes = numpy.flatnonzero(live)
        if lanes.size:
            at = numpy.ascontiguousarray(addresses.reshape(-1)[lanes])
            everywhere = numpy.ones(at.shape, dtype=numpy.bool_)
            bits = numpy.dtype(numpy.uint16)  # an instance: Triton 3.6's load takes no class
            held = _interpreter.load(at, everywhere, numpy.zeros(at.shape, bits), bits)
            current: dict[int, numpy.ndarray] = {}
            flat_values, flat_read = values.reshape(-1), read.reshape(-1)
            for k, lane in enumerate(lanes):
                address = int(at[k])
                old = current.get(address, held[k : k + 1])
                flat_read[lane] = old[0]
                current[address] = combine(old, flat_values[lane : lane + 1])
            written = numpy.fromiter(current, dtype=numpy.uint64, count=len(current))
            new = numpy.concatenate(list(current.values())).astype(numpy.uint16)
            _interpreter.store(written, new, numpy.ones(written.shape, dtype=numpy.bool_))
        return TensorHandle(read, val.dtype.scalar)

    return create_atomic_rmw  # type: ignore[return-value]
