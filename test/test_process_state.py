"""The suite's guard against leaked process state (``process_state.py``): what it
reports, and what a process's first GPU compile sets that it accepts."""

from __future__ import annotations

import collections
import os

import process_state


def test_a_variable_set_by_a_test_is_reported_by_its_name(monkeypatch):
    before = process_state.snapshot()
    monkeypatch.setenv("TORCHINDUCTOR_SOMETHING_NEW", "1")
    changed = process_state.changes(before, process_state.snapshot())
    assert changed == ["environment TORCHINDUCTOR_SOMETHING_NEW: '<absent>' -> '1'"]


def test_a_config_changed_by_a_test_is_reported():
    import torch._inductor.config

    before = process_state.snapshot()
    with torch._inductor.config.patch(max_autotune=True):
        changed = process_state.changes(before, process_state.snapshot())
    assert changed == ["torch._inductor.config.max_autotune: False -> True"]


def test_what_upstreams_first_gpu_compile_sets_is_accepted():
    before = {"grad mode": True}
    after = {
        "grad mode": True,
        "CUDA device": 0,
        "CUDA stream": 0,
        "CUDA stream capturing": False,
        "environment TRITON_LIBDEVICE_PATH": "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc",
    }
    assert process_state.changes(before, after) == []


def test_the_packages_ptxas_is_accepted_with_inductors_value_only(monkeypatch):
    """The package sets ``TRITON_PTXAS_PATH`` itself (``use_inductors_ptxas``), to the
    value upstream's compile workers set: any other value is a leak."""
    key = "environment TRITON_PTXAS_PATH"
    monkeypatch.setattr(process_state, "inductors_ptxas", lambda: "/venv/torch/bin/ptxas")
    assert process_state.changes({}, {key: "/venv/torch/bin/ptxas"}) == []
    assert process_state.changes({}, {key: "/opt/other/ptxas"}) == [
        "environment TRITON_PTXAS_PATH: '<absent>' -> '/opt/other/ptxas'"
    ]
    # A build without a ptxas of its own: the package sets nothing.
    monkeypatch.setattr(process_state, "inductors_ptxas", lambda: None)
    assert process_state.changes({}, {key: "/venv/torch/bin/ptxas"}) != []


def test_inductors_ptxas_leaves_the_environment_as_it_was(monkeypatch):
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/somewhere/ptxas")
    before = dict(os.environ)
    first = process_state.inductors_ptxas()
    assert dict(os.environ) == before
    # Read again, the same (upstream caches its function on some releases).
    assert process_state.inductors_ptxas() == first


def test_compaction_kernels_left_interpreted_are_reported(monkeypatch):
    from inductor_fx_unbacked.runner import compaction

    before = process_state.snapshot()
    monkeypatch.setattr(compaction, "INTERPRETED", not compaction.INTERPRETED)
    changed = process_state.changes(before, process_state.snapshot())
    assert [line.split(":")[0] for line in changed] == ["compaction kernels interpreted"]


def test_cuda_graphs_kept_past_the_test_are_reported(monkeypatch):
    from inductor_fx_unbacked.runner import cuda_graphs

    before = process_state.snapshot()
    monkeypatch.setattr(cuda_graphs.MEMORY, "total_bytes", cuda_graphs.MEMORY.total_bytes + 512)
    changed = process_state.changes(before, process_state.snapshot())
    assert [line.split(":")[0] for line in changed] == ["CUDA graphs kept"], changed


def test_a_side_table_entry_that_no_graph_owns_is_reported(monkeypatch):
    from inductor_fx_unbacked.artifact import kernels as owned
    from inductor_fx_unbacked.codegen.kernels import STABLE_INDEX_BASE, update_side_table

    index = STABLE_INDEX_BASE + 12345
    before = process_state.snapshot()
    update_side_table(kernels={index: object()})
    try:
        changed = process_state.changes(before, process_state.snapshot())
        assert changed == [f"kernel side table entries no graph owns: [] -> [{index}]"]
        # Owned by a live graph, or named by a dropped graph's queued release: no leak.
        monkeypatch.setitem(owned._users, ("kernel", index), 1)
        assert process_state.changes(before, process_state.snapshot()) == []
        monkeypatch.delitem(owned._users, ("kernel", index))
        monkeypatch.setattr(owned, "_dropped", collections.deque([[("kernel", index)]]))
        assert process_state.changes(before, process_state.snapshot()) == []
    finally:
        update_side_table(released_kernels=[index])
    assert process_state.changes(before, process_state.snapshot()) == []


def test_cuda_initialised_on_another_device_or_stream_is_reported():
    after = {"CUDA device": 1, "CUDA stream": 94_000_000}
    assert process_state.changes({}, after) == [
        "CUDA device: '<absent>' -> 1",
        "CUDA stream: '<absent>' -> 94000000",
    ]
