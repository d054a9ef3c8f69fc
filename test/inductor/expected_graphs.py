"""Expected FX graphs where upstream's output legitimately differs between releases.

Each entry maps a half-open range of torch releases to the graph that
``fx_outline`` prints there. Differences come from upstream, not from the overlay:

- torch 2.14 lowers ``torch.cond`` to a switch whose branches are stored
  false-first, so the false branch's subgraph is generated first; its Dynamo test
  base class canonicalizes placeholder order; and extern kernel outputs get a
  dtype check (``assert_tensor_metadata``).
- torch 2.14 no longer reuses ``nonzero``'s output buffer in place. Before, the
  kernel writes a view of it; an extern kernel's result may start inside its
  storage, so the view's offset is relative to the result's storage offset.
"""

from __future__ import annotations

import torch
from torch.torch_version import Version

#: Whether upstream generates the false branch of a cond before the true one.
COND_FALSE_BRANCH_FIRST = Version(Version(torch.__version__).base_version) >= Version("2.14")

EXPECTED: dict[str, dict[tuple[str, str], str]] = {
    "nonzero": {
        ("2.10", "2.14"): """\
arg0_1 = placeholder
_make_dep_token_default = aten._make_dep_token.default()
assert_input_size_stride_default = fx_unbacked.assert_input_size_stride.default(arg0_1, [32], [1], 'graph input 0 (arg0_1)', _make_dep_token_default)
buf0 = empty_strided([32], [1], dtype=torch.bool)
triton_kernel(in_ptr0=arg0_1, out_ptr0=buf0)
buf1 = aten.nonzero.default(buf0)
sym_size_int = aten.sym_size.int(buf1, 0)  # defines u0
assert_size_stride_default = fx_unbacked.assert_size_stride.default(buf1, [sym_size_int, 1], [1, sym_size_int], 'torch.ops.aten.nonzero.default', assert_input_size_stride_default)
ge = ge(sym_size_int, 0)
_functional_assert_scalar_default = aten._functional_assert_scalar.default(ge, 'u0 >= 0', assert_size_stride_default)
le = le(sym_size_int, 32)
_functional_assert_scalar_default_1 = aten._functional_assert_scalar.default(le, 'u0 <= 32', _functional_assert_scalar_default)
sym_storage_offset_default = aten.sym_storage_offset.default(buf1)
as_strided = as_strided(buf1, [sym_size_int, 1], [1, 1], sym_storage_offset_default)
triton_kernel(in_out_ptr0=as_strided, xnumel=sym_size_int)
return as_strided""",
        ("2.14", "2.16"): """\
arg0_1 = placeholder
_make_dep_token_default = aten._make_dep_token.default()
assert_input_size_stride_default = fx_unbacked.assert_input_size_stride.default(arg0_1, [32], [1], 'graph input 0 (arg0_1)', _make_dep_token_default)
buf0 = empty_strided([32], [1], dtype=torch.bool)
triton_kernel(in_ptr0=arg0_1, out_ptr0=buf0)
buf1 = aten.nonzero.default(buf0)
sym_size_int = aten.sym_size.int(buf1, 0)  # defines u0
assert_tensor_metadata_default = fx_unbacked.assert_tensor_metadata.default(buf1, [sym_size_int, 1], [1, sym_size_int], torch.int64, 'torch.ops.aten.nonzero.default', assert_input_size_stride_default)
ge = ge(sym_size_int, 0)
_functional_assert_scalar_default = aten._functional_assert_scalar.default(ge, 'u0 >= 0', assert_tensor_metadata_default)
le = le(sym_size_int, 32)
_functional_assert_scalar_default_1 = aten._functional_assert_scalar.default(le, 'u0 <= 32', _functional_assert_scalar_default)
buf4 = empty_strided([sym_size_int, 1], [1, 1], dtype=torch.int64)
triton_kernel(in_ptr0=buf1, out_ptr0=buf4, xnumel=sym_size_int)
return buf4""",
    },
    "cond": {
        ("2.10", "2.14"): """\
true_graph_0_arg0_1 = placeholder
s94 = placeholder
s17 = placeholder
true_graph_0_arg3_1 = placeholder
true_graph_0_arg4_1 = placeholder
sym_sum = sym_sum([-2, s17])
true_graph_0_buf0 = empty_strided([sym_sum, s94], [s94, 1], dtype=torch.float32)
mul = mul(-2, s94)
mul_1 = mul(s17, s94)
sym_sum_1 = sym_sum([mul, mul_1])
triton_kernel(in_ptr0=true_graph_0_arg0_1, out_ptr0=true_graph_0_buf0, ks0=s94, ks1=s17, xnumel=sym_sum_1)
return [true_graph_0_buf0]

false_graph_0_arg0_1 = placeholder
s94 = placeholder
s17 = placeholder
false_graph_0_arg3_1 = placeholder
false_graph_0_arg4_1 = placeholder
false_graph_0_buf0 = empty_strided([2, s94], [s94, 1], dtype=torch.float32)
mul = mul(2, s94)
triton_kernel(in_ptr0=false_graph_0_arg0_1, in_ptr1=false_graph_0_arg4_1, out_ptr0=false_graph_0_buf0, ks0=s17, xnumel=mul)
return [false_graph_0_buf0]

s17 = placeholder
s94 = placeholder
arg2_1 = placeholder
arg3_1 = placeholder
arg4_1 = placeholder
true_graph_0 = self.true_graph_0
false_graph_0 = self.false_graph_0
_make_dep_token_default = aten._make_dep_token.default()
assert_input_size_stride_default = fx_unbacked.assert_input_size_stride.default(arg2_1, [s17, s94], [s94, 1], 'graph input 2 (arg2_1)', _make_dep_token_default)
assert_input_size_stride_default_1 = fx_unbacked.assert_input_size_stride.default(arg3_1, [s17, s94], [s94, 1], 'graph input 3 (arg3_1)', assert_input_size_stride_default)
assert_input_size_stride_default_2 = fx_unbacked.assert_input_size_stride.default(arg4_1, [s17, s94], [s94, 1], 'graph input 4 (arg4_1)', assert_input_size_stride_default_1)
buf1 = empty_strided([], [], dtype=torch.bool)
mul = mul(s17, s94)
triton_kernel(in_ptr0=arg4_1, out_ptr1=buf1, r0_numel=mul)
cond = cond(buf1, true_graph_0, false_graph_0, (arg4_1, s94, s17, s17, arg3_1))
buf3 = getitem(cond, 0)
sym_size_int = aten.sym_size.int(buf3, 0)  # defines u0
assert_size_stride_default = fx_unbacked.assert_size_stride.default(buf3, [sym_size_int, s94], [s94, 1], 'torch.ops.cond', assert_input_size_stride_default_2)
ge = ge(sym_size_int, 0)
_functional_assert_scalar_default = aten._functional_assert_scalar.default(ge, 'u0 >= 0', assert_size_stride_default)
ge_1 = ge(sym_size_int, 0)
_functional_assert_scalar_default_1 = aten._functional_assert_scalar.default(ge_1, '0 <= u0', _functional_assert_scalar_default)
buf6 = empty_strided([], [], dtype=torch.float32)
triton_kernel(in_ptr0=arg2_1, out_ptr0=buf6, r0_numel=mul)
mul_1 = mul(sym_size_int, s94)
triton_kernel(in_out_ptr0=buf3, in_ptr0=buf6, xnumel=mul_1)
return buf3""",
        ("2.14", "2.16"): """\
false_graph_0_arg0_1 = placeholder
s94 = placeholder
s17 = placeholder
false_graph_0_arg3_1 = placeholder
false_graph_0_arg4_1 = placeholder
false_graph_0_buf0 = empty_strided([2, s94], [s94, 1], dtype=torch.float32)
mul = mul(2, s94)
triton_kernel(in_ptr0=false_graph_0_arg0_1, in_ptr1=false_graph_0_arg4_1, out_ptr0=false_graph_0_buf0, ks0=s17, xnumel=mul)
return [false_graph_0_buf0]

true_graph_0_arg0_1 = placeholder
s94 = placeholder
s17 = placeholder
true_graph_0_arg3_1 = placeholder
true_graph_0_arg4_1 = placeholder
sym_sum = sym_sum([-2, s17])
true_graph_0_buf0 = empty_strided([sym_sum, s94], [s94, 1], dtype=torch.float32)
mul = mul(-2, s94)
mul_1 = mul(s17, s94)
sym_sum_1 = sym_sum([mul, mul_1])
triton_kernel(in_ptr0=true_graph_0_arg0_1, out_ptr0=true_graph_0_buf0, ks0=s94, ks1=s17, xnumel=sym_sum_1)
return [true_graph_0_buf0]

arg0_1 = placeholder
arg1_1 = placeholder
s17 = placeholder
s94 = placeholder
arg4_1 = placeholder
false_graph_0 = self.false_graph_0
true_graph_0 = self.true_graph_0
_make_dep_token_default = aten._make_dep_token.default()
assert_input_size_stride_default = fx_unbacked.assert_input_size_stride.default(arg0_1, [s17, s94], [s94, 1], 'graph input 0 (arg0_1)', _make_dep_token_default)
assert_input_size_stride_default_1 = fx_unbacked.assert_input_size_stride.default(arg1_1, [s17, s94], [s94, 1], 'graph input 1 (arg1_1)', assert_input_size_stride_default)
assert_input_size_stride_default_2 = fx_unbacked.assert_input_size_stride.default(arg4_1, [s17, s94], [s94, 1], 'graph input 4 (arg4_1)', assert_input_size_stride_default_1)
buf1 = empty_strided([], [], dtype=torch.bool)
mul = mul(s17, s94)
triton_kernel(in_ptr0=arg0_1, out_ptr1=buf1, r0_numel=mul)
cond = cond(buf1, true_graph_0, false_graph_0, (arg0_1, s94, s17, s17, arg4_1))
buf3 = getitem(cond, 0)
sym_size_int = aten.sym_size.int(buf3, 0)  # defines u0
assert_tensor_metadata_default = fx_unbacked.assert_tensor_metadata.default(buf3, [sym_size_int, s94], [s94, 1], torch.float32, 'torch.ops.cond', assert_input_size_stride_default_2)
ge = ge(sym_size_int, 0)
_functional_assert_scalar_default = aten._functional_assert_scalar.default(ge, 'u0 >= 0', assert_tensor_metadata_default)
ge_1 = ge(sym_size_int, 0)
_functional_assert_scalar_default_1 = aten._functional_assert_scalar.default(ge_1, '0 <= u0', _functional_assert_scalar_default)
buf6 = empty_strided([], [], dtype=torch.float32)
triton_kernel(in_ptr0=arg1_1, out_ptr0=buf6, r0_numel=mul)
mul_1 = mul(sym_size_int, s94)
triton_kernel(in_out_ptr0=buf3, in_ptr0=buf6, xnumel=mul_1)
return buf3""",
    },
}


def for_this_release(name: str) -> str:
    """The expected graph ``name`` for the installed torch."""
    release = Version(Version(torch.__version__).base_version)
    for (low, high), graph in EXPECTED[name].items():
        if Version(low) <= release < Version(high):
            return graph
    raise KeyError(f"no expected graph {name!r} for torch {torch.__version__}")
