"""The suite's guard against leaked process state (``process_state.py``): what it
reports, and what a process's first GPU compile sets that it accepts."""

from __future__ import annotations

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
        "environment TRITON_PTXAS_PATH": "/venv/torch/bin/ptxas",
    }
    assert process_state.changes(before, after) == []


def test_cuda_initialised_on_another_device_or_stream_is_reported():
    after = {"CUDA device": 1, "CUDA stream": 94_000_000}
    assert process_state.changes({}, after) == [
        "CUDA device: '<absent>' -> 1",
        "CUDA stream: '<absent>' -> 94000000",
    ]
