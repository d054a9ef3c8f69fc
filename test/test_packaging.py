"""The Triton requirement: every supported torch release's pin, and what pip installs."""

import ast
import importlib.metadata
import re

import pytest

from benchmarks.harness import ROOT

tomllib = pytest.importorskip("tomllib")


def version(text):
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def triton_range():
    """The package's ``triton>=LOW,<HIGH`` requirement, as version tuples."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    (requirement,) = [d for d in dependencies if re.match(r"triton\b", d)]
    match = re.fullmatch(r"triton>=([\d.]+),<([\d.]+)", requirement.replace(" ", ""))
    assert match, f"expected triton>=LOW,<HIGH, got {requirement!r}"
    return version(match.group(1)), version(match.group(2))


def release_pins():
    """``noxfile.RELEASES`` (read, not imported: test sessions do not install nox)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(getattr(target, "id", None) == "RELEASES" for target in targets):
                return ast.literal_eval(node.value)
    raise AssertionError("noxfile.py defines no RELEASES")


def test_triton_requirement_spans_exactly_the_pins_of_the_supported_releases():
    low, high = triton_range()
    pins = sorted(version(pin) for pin in release_pins().values())
    assert low == pins[0][: len(low)]
    # Up to the newest pin's minor release: nothing newer is installed untested.
    assert high == (pins[-1][0], pins[-1][1] + 1)
    assert all(low <= pin < high for pin in pins)


def test_installed_triton_is_one_the_requirement_admits():
    low, high = triton_range()
    installed = importlib.metadata.version("triton")
    assert low <= version(installed) < high, (
        f"Triton {installed} is outside the package's requirement "
        f"(>={'.'.join(map(str, low))},<{'.'.join(map(str, high))})"
    )
