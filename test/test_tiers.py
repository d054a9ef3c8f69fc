"""The suite's selections: the tiers and the GPU runs' shards (``conftest.py``), read
from pytest's own collection."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
#: Three small files, one of them with a full-tier test.
FILES = ("test/test_compat.py", "test/test_overlay.py", "test/test_misuse.py")


@pytest.fixture(scope="module")
def conftest(request):
    """``test/conftest.py`` as pytest loaded it (``import conftest`` may find another)."""
    module = request.config.pluginmanager.get_plugin(str(ROOT / "test" / "conftest.py"))
    assert module is not None, "pytest did not load test/conftest.py"
    return module


class _Selected:
    """A plugin that keeps the ids a session selects (after every deselection)."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.ids = {item.nodeid for item in session.items}


@functools.cache
def collected(*options: str) -> frozenset[str]:
    """The ids pytest selects from ``FILES`` with ``options``: a collection in this
    process (the test modules are imported already), as ``conftest.py`` selects."""
    selected = _Selected()
    arguments = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    arguments += ["-n", "0", f"--rootdir={ROOT}", *options]
    code = pytest.main([*arguments, *(str(ROOT / name) for name in FILES)], plugins=[selected])
    assert code == pytest.ExitCode.OK, f"pytest {' '.join(options)}: exit code {code}"
    return frozenset(selected.ids)


def test_the_full_tier_adds_to_the_default_tier():
    default, full = collected(), collected("--full")
    assert default < full


@pytest.mark.full
def test_shards_split_the_selection_into_disjoint_parts():
    full = collected("--full")
    shards = [collected("--full", "--shard", f"{k}/3") for k in (1, 2, 3)]
    assert set().union(*shards) == full
    assert sum(map(len, shards)) == len(full)
    assert all(shards), "a shard selected nothing"


@pytest.mark.parametrize("shard", ["0/2", "3/2", "1-2", "a/b", "/2"])
def test_a_malformed_shard_is_refused_naming_the_form(conftest, shard):
    with pytest.raises(argparse.ArgumentTypeError, match="--shard takes K/N with 1 <= K <= N"):
        conftest._shard(shard)
