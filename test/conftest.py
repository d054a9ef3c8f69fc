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


#: The outcome of each test of a module run in a child process, by node id, and
#: the child's output; one child per module (per xdist worker), not per test.
_child_runs: dict[str, tuple[dict[str, str], str]] = {}


def _run_module_in_child(module: str) -> tuple[dict[str, str], str]:
    import re
    import subprocess
    import sys
    from pathlib import Path

    if module not in _child_runs:
        env = {k: v for k, v in os.environ.items() if k not in FORCE_DISABLE_CACHES}
        env.pop("PYTEST_XDIST_WORKER", None)
        child = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", module],
            cwd=Path(__file__).parents[1],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        outcomes = dict(
            (nodeid, outcome)
            for outcome, nodeid in re.findall(
                r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", child.stdout, re.M
            )
        )
        _child_runs[module] = (outcomes, child.stdout + child.stderr)
    return _child_runs[module]


def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("caches_on") is None or not caches_forced_off():
        return None
    import pytest

    module = pyfuncitem.nodeid.split("::", 1)[0]
    outcomes, output = _run_module_in_child(module)
    outcome = outcomes.get(pyfuncitem.nodeid)
    if outcome == "SKIPPED":
        pytest.skip("skipped in the child process with the caches on")
    assert outcome == "PASSED", (
        f"{pyfuncitem.nodeid}: {outcome or 'no result'} in a child process with the caches "
        f"on:\n{output[-6000:]}"
    )
    return True
