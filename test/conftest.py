"""Test setup for every test file, and for each pytest-xdist worker.

- CPU mode runs Triton kernels in Triton's interpreter, which needs
  ``TRITON_INTERPRET=1`` before Triton's own ``@triton.jit`` helpers are defined
  (docs/reference.md says when that is, per Triton release); set here, before
  any test module imports Triton.
- Each pytest-xdist worker gets a cache dir of its own, so that no worker reads
  what another is writing (a run that sets ``TORCHINDUCTOR_CACHE_DIR`` keeps it),
  and each test fresh Inductor and Triton cache dirs of its own (``fresh_caches``):
  with the caches on, as users run the suite, no test is served what another
  test compiled (``InductorTestCase`` does the same for its tests).
- Without a GPU, Inductor starts no compile workers (``TORCHINDUCTOR_COMPILE_THREADS=1``).
- ``test/corpus`` is importable from every test file, so that the corpus's
  programs and custom ops are defined once (``programs``), whichever file uses
  them first.
- pytest's log capture stays off torch's structured-trace logger (below).
"""

import logging
import os
import sys
import tempfile

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # No compile workers without a GPU: ``fx_backend("cpu")`` needs none, and for the
    # Python wrapper's small C++ kernels starting them costs each pytest worker and
    # each child process more than it saves (read when Inductor's config is first
    # imported; children inherit it). Cache keys leave compile_threads out.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker is not None and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"inductor-{_worker}-")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "corpus"))
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def leaves_no_process_state():
    """Fail a test that leaves process-wide state changed (``process_state.py``): in
    a user's process, that state would change what every later compile does."""
    import process_state

    before = process_state.snapshot()
    yield
    changed = process_state.changes(before, process_state.snapshot())
    if changed:
        pytest.fail("the test left process-wide state changed:\n" + "\n".join(changed))


@pytest.fixture(autouse=True)
def fresh_caches():
    """Fresh Inductor and Triton cache dirs for each test, removed after it.

    Inductor's ``fresh_cache`` also empties the in-memory caches that remember
    compiled modules and the cache dir.
    """
    from torch._inductor.utils import fresh_cache

    with fresh_cache():
        yield


# Tests marked ``caches_on`` run with Inductor's caches on. TORCHINDUCTOR_FORCE_DISABLE_CACHES
# overrides any config patch (``env_name_force``), so under that variable such a
# test runs in a child pytest process without it, one per module (started in the
# background at collection), and passes or fails with the child.
FORCE_DISABLE_CACHES = ("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCH_COMPILE_FORCE_DISABLE_CACHES")


#: torch's structured trace (``TORCH_TRACE``): always at DEBUG, never propagating;
#: torch builds a trace record only while this logger has a handler.
TRACE_LOG = logging.getLogger("torch.__trace")


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_setup(item):
    _keep_log_capture_off_the_trace()
    yield


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item):
    _keep_log_capture_off_the_trace()
    yield


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item):
    _keep_log_capture_off_the_trace()
    yield


def _keep_log_capture_off_the_trace():
    """Take pytest's log handlers off the structured-trace logger.

    pytest attaches them, for each phase of a test, to every logger that does not
    propagate. On that one they would make torch build every trace record
    (graphs, guards, code: compiles take about 15% longer) and capture each as a
    blank DEBUG line, hundreds in a failing test's report. This hook runs inside
    pytest's (``trylast``), after it attached them; torch's own handler stays.
    """
    for handler in list(TRACE_LOG.handlers):
        if type(handler).__module__.startswith("_pytest."):
            TRACE_LOG.removeHandler(handler)


def pytest_report_header(config):
    """The releases under test, first in every log (CI's among them)."""
    import numpy
    import triton

    return f"torch {torch.__version__}, triton {triton.__version__}, numpy {numpy.__version__}"


def pytest_addoption(parser):
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help="run the full tier: also the tests marked 'full' (CI and the GPU runs do)",
    )
    parser.addoption(
        "--ci-release",
        choices=("oldest", "newest"),
        default=None,
        help="CI's share of the tests for this release (.ci/run; see CI_ON_BOTH_RELEASES)",
    )
    parser.addoption(
        "--shard",
        type=_shard,
        default=None,
        metavar="K/N",
        help="run the K-th of N disjoint parts of the selection (by a stable hash of each "
        "test's id), for machines that run one part per call",
    )


def _shard(text: str) -> tuple[int, int]:
    import argparse

    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise argparse.ArgumentTypeError(f"--shard takes K/N with 1 <= K <= N, not {text!r}")
    return int(k), int(n)


def pytest_configure(config):
    _child_tier[:] = ["--full"] if config.getoption("--full") else []
    config.addinivalue_line("markers", "caches_on: the test needs Inductor's caches on")
    # Two tiers. The default (``python -m pytest -n 2``) keeps at least one
    # end-to-end test of every behaviour, from every test file; ``--full`` adds the
    # tests marked ``full``: the rest of the corpus's programs and modes, the other
    # model cases, and most tests that start fresh processes.
    config.addinivalue_line("markers", "full: in the full tier only (--full)")
    # CI shares the full tier between the oldest and the newest release
    # (``--ci-release``, ``pytest_collection_modifyitems``); these markers pin a test
    # to one of them.
    config.addinivalue_line("markers", "ci_oldest: in CI, run on the oldest release only")
    config.addinivalue_line("markers", "ci_newest: in CI, run on the newest release only")


def caches_forced_off() -> bool:
    with torch.compiler.config.patch(force_disable_caches=False):
        return bool(torch.compiler.config.force_disable_caches)


#: The outcome of each marked test of a module run in a child process, by node id,
#: and the child's output: one child per module and test run, not per test.
_child_runs: dict[str, tuple[dict[str, str], str]] = {}
#: The tier the children select from: this run's.
_child_tier: list[str] = []

#: Runs a child pytest (its arguments follow the result path) and writes its
#: outcomes as JSON to the result path, atomically.
_CHILD = """
import json, os, re, subprocess, sys
result, args = sys.argv[1], sys.argv[2:]
child = subprocess.run([sys.executable, "-m", "pytest", *args], capture_output=True, text=True)
outcomes = dict(
    (nodeid, outcome)
    for outcome, nodeid in re.findall(
        r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\\S+)", child.stdout, re.M
    )
)
with open(result + ".tmp", "w") as f:
    json.dump([outcomes, child.stdout + child.stderr], f)
os.replace(result + ".tmp", result)
"""


def _result_path(module: str) -> str:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    folder = os.path.join(tempfile.gettempdir(), f"ifx-caches-on-{run}")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, module.replace("/", "_") + ".json")


def _start_child(module: str) -> None:
    """Start the child for ``module`` in the background, unless a worker of this run
    already did (the first to create its marker file starts it)."""
    import subprocess
    import sys
    from pathlib import Path

    result = _result_path(module)
    try:
        os.close(os.open(result + ".started", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    env = {k: v for k, v in os.environ.items() if k not in FORCE_DISABLE_CACHES}
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "PYTEST_XDIST_WORKER_COUNT"):
        env.pop(name, None)
    args = ["-q", "-rA", "-p", "no:cacheprovider", "-m", "caches_on", *_child_tier, module]
    subprocess.Popen(
        [sys.executable, "-c", _CHILD, result, *args], cwd=Path(__file__).parents[1], env=env
    )


def pytest_collection_finish(session):
    """Where the environment forces caches off, start the children of the modules
    with marked tests now, so that they run beside the other tests."""
    if not caches_forced_off():
        return
    modules = {
        item.nodeid.split("::", 1)[0]
        for item in session.items
        if item.get_closest_marker("caches_on") is not None
    }
    for module in sorted(modules):
        _start_child(module)


def _run_module_in_child(module: str) -> tuple[dict[str, str], str]:
    """The outcomes of the module's marked tests in its child, waiting for them."""
    import json
    import time

    if module not in _child_runs:
        _start_child(module)  # a no-op where the collection started it
        result = _result_path(module)
        deadline = time.monotonic() + 1800
        while not os.path.exists(result):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the child pytest of {module} gave no result in 30 minutes")
            time.sleep(0.5)
        with open(result) as f:
            outcomes, output = json.load(f)
        _child_runs[module] = (outcomes, output)
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


#: The files whose default-tier tests CI runs on both releases: the overlay's rows and
#: the private names it reads, which change between releases and are cheap to check;
#: the fuzzer's fixed seeds (about 60 to 90 s a release), whose programs meet each
#: release's Inductor. The rest, upstream's test file in this package's form, upstream's defects, the
#: corpus, caching and text parity included, runs on one release each
#: (``ci_release``): CI's 12 minutes hold no more (measured at 723 s with upstream's
#: test file and the defects on both). ``nox`` and the tier runs cover every release.
CI_ON_BOTH_RELEASES = frozenset(
    {
        "test/test_compat.py",
        "test/test_overlay.py",
        "test/fuzz/test_fuzz.py",
    }
)


def _hash(item) -> int:
    import zlib

    return zlib.crc32(item.nodeid.encode())


def ci_release(item) -> str | None:
    """The release CI runs ``item`` on ("oldest" or "newest"), or None for both:
    a ``ci_oldest``/``ci_newest`` marker, else both for the default-tier tests of
    ``CI_ON_BOTH_RELEASES``, else one chosen by a stable hash of the test's id, so
    that each test of the full tier runs in CI, and each run picks the same."""
    for release in ("oldest", "newest"):
        if item.get_closest_marker(f"ci_{release}") is not None:
            return release
    if item.nodeid.split("::", 1)[0] in CI_ON_BOTH_RELEASES and not item.get_closest_marker("full"):
        return None
    return ("oldest", "newest")[_hash(item) % 2]


def pytest_collection_modifyitems(config, items):
    """Without ``--full``, deselect the tests marked ``full``; with ``--ci-release``,
    the tests CI runs on the other release; with ``--shard``, the other shards'."""
    release = config.getoption("--ci-release")
    shard = config.getoption("--shard")
    kept = [
        item
        for item in items
        if (config.getoption("--full") or item.get_closest_marker("full") is None)
        and (release is None or ci_release(item) in (None, release))
        and (shard is None or _hash(item) % shard[1] == shard[0] - 1)
    ]
    if len(kept) < len(items):
        kept_ids = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept_ids])
        items[:] = kept
