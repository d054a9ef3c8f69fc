"""Test setup for every test file, and for each pytest-xdist worker.

- CPU mode runs Triton kernels in Triton's interpreter, which needs
  ``TRITON_INTERPRET=1`` before Triton's own ``@triton.jit`` helpers are defined
  (docs/reference.md says when that is, per Triton release); set here, before
  any test module imports Triton.
- Each pytest-xdist worker gets a cache dir of its own, so that no worker reads
  what another is writing (a run that sets ``TORCHINDUCTOR_CACHE_DIR`` keeps it).
- ``test/corpus`` is importable from every test file, so that the corpus's
  programs and custom ops are defined once (``programs``), whichever file uses
  them first.
"""

import os
import sys
import tempfile

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker is not None and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"inductor-{_worker}-")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "corpus"))

# Tests marked ``caches_on`` run with Inductor's caches on. Torch 2.10 to 2.12 let
# TORCHINDUCTOR_FORCE_DISABLE_CACHES override any config patch
# (``env_name_force``), so under that variable such a test runs in a child pytest
# process without it, and passes or fails with the child.
FORCE_DISABLE_CACHES = ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCH_COMPILE_FORCE_DISABLE_CACHES")


def pytest_configure(config):
    config.addinivalue_line("markers", "caches_on: the test needs Inductor's caches on")


def caches_forced_off() -> bool:
    with torch.compiler.config.patch(force_disable_caches=False):
        return bool(torch.compiler.config.force_disable_caches)


def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("caches_on") is None or not caches_forced_off():
        return None
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k not in FORCE_DISABLE_CACHES}
    root = Path(__file__).parents[1]
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", pyfuncitem.nodeid],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert child.returncode == 0, (
        f"{pyfuncitem.nodeid} failed in a child process with the caches on:\n"
        + child.stdout[-6000:]
    )
    return True
