"""The runner's kernel store (``runner/kernel_store.py``): an entry is keyed by
everything its binary depends on, and every entry it cannot use or write is
skipped with the reason on the package's logger (``TORCH_LOGS=inductor_fx_unbacked``).
"""

from __future__ import annotations

import logging
import pickle
import re
from pathlib import Path
from unittest import mock

import pytest
import torch

from inductor_fx_unbacked.runner import compaction, kernel_store

LOGGER = "inductor_fx_unbacked"
KEY = ("count_nonzero", "the rest of a key")


def logged(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER + ".")]


def stored_at(key, data: bytes) -> Path:
    path = Path(kernel_store._path(key))  # in the test's own cache dir (conftest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_no_entry_is_a_quiet_miss(caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert kernel_store.load(KEY, 0) is None
    assert logged(caplog) == []


def test_a_corrupt_entry_is_bypassed_and_says_why(caplog):
    path = stored_at(KEY, b"not a launcher")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert kernel_store.load(KEY, 0) is None
    (message,) = logged(caplog)
    assert re.fullmatch(
        rf"Bypassing the stored launcher of count_nonzero at {re.escape(str(path))} due to "
        r"UnpicklingError\(.*\)",
        message,
    ), message


def test_an_entry_that_does_not_load_is_bypassed_and_says_why(caplog):
    path = stored_at(KEY, pickle.dumps({"not": "a launcher"}))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert kernel_store.load(KEY, 0) is None
    cause, bypassed = logged(caplog)
    assert cause.startswith("Cannot load the static launcher of dict on cuda:0: "), cause
    assert bypassed == f"Bypassing the stored launcher of count_nonzero at {path}: it does not load"


def test_an_entry_that_cannot_be_written_says_why(caplog):
    def local_function():  # pickle refuses a local object
        pass

    with caplog.at_level(logging.INFO, logger=LOGGER):
        kernel_store.store(KEY, local_function)
    (message,) = logged(caplog)
    assert message.startswith("Not storing the launcher of count_nonzero at "), message
    assert not Path(kernel_store._path(KEY)).exists()


def test_a_launcher_that_cannot_be_made_says_why(caplog):
    from inductor_fx_unbacked import _compat

    class Compiled:  # not a compiled Triton kernel
        name = "count_nonzero"

    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert _compat.static_launcher(Compiled()) is None
    (message,) = logged(caplog)
    assert message.startswith("Bypassing StaticallyLaunchedCudaKernel for count_nonzero due to ")


# What a key holds, on a GPU: keys are made for CUDA binaries only.
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def count_nonzero_key():
    kernel, _ = compaction._kernels()["count_nonzero"]
    constexprs = {"BLOCK": compaction.BLOCK, "CHUNK": compaction.CHUNK}
    return kernel_store.entry_key(kernel, ((torch.bool,), (True,)), constexprs, 0)


@needs_cuda
@pytest.mark.caches_on
def test_the_key_holds_tritons_build_and_the_ptxas_version():
    key = count_nonzero_key()
    assert key is not None
    # Another Triton build of the same version (triton_key, not triton.__version__).
    with mock.patch("torch._inductor.runtime.triton_compat.triton_key", lambda: "other build"):
        assert count_nonzero_key() != key
    # Another ptxas (the backend's hash holds its version).
    with mock.patch(
        "triton.backends.nvidia.compiler.get_ptxas_version", lambda arch=80: "ptxas 0.0"
    ):
        assert count_nonzero_key() != key
    assert count_nonzero_key() == key


@needs_cuda
@pytest.mark.caches_on
def test_a_corrupt_entry_is_compiled_again_replaced_and_logged(caplog):
    mask = torch.rand(3 * compaction.BLOCK + 5, device="cuda") < 0.5
    compaction.nonzero(mask)  # compiled and stored
    path = Path(kernel_store._path(count_nonzero_key()))
    path.write_bytes(b"not a launcher")
    compaction._COMPILED.clear()  # as a new process: the store is read again
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert torch.equal(compaction.nonzero(mask), torch.nonzero(mask))
    assert any(
        m.startswith("Bypassing the stored launcher of count_nonzero") for m in logged(caplog)
    )
    assert type(pickle.loads(path.read_bytes())).__name__ == "StaticallyLaunchedCudaKernel"
