"""The README's code runs as written.

Its Python blocks are one session, run in order, as a user pastes them: in a fresh
process (the examples set configs and ``TRITON_INTERPRET``, as a user's script
does), from an empty folder (one of them saves a file), with fresh cache dirs and
the caches on. Its shell blocks install things, which a test does not do; they are
checked for what can go stale: their syntax, the extras and the modules they name,
and the options they pass to the suite.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)


def blocks(language: str) -> list[str]:
    return [code for lang, code in BLOCK.findall(README) if lang == language]


def test_the_readme_has_its_examples():
    """The three examples: torch.compile, ifx.compile with save and load, the graph."""
    python = "\n".join(blocks("python"))
    for call in ("ifx.fx_backend(", "ifx.compile(", "ifx.save(", "ifx.load(", "capture_fx_graphs("):
        assert call in python, f"the README's examples no longer call {call}"
    assert "torch.nn.Linear(" in python, "the direct-call example should compile a real module"
    assert len(README.splitlines()) <= 155, "the README is for users: keep it short"


def test_the_python_examples_run_in_order(tmp_path):
    script = tmp_path / "readme_examples.py"
    script.write_text("\n\n".join(blocks("python")))
    env = {
        key: value
        for key, value in os.environ.items()
        # A user's shell sets neither; the examples set TRITON_INTERPRET themselves.
        if key not in ("TRITON_INTERPRET", "TORCHINDUCTOR_FORCE_DISABLE_CACHES", "PYTHONPATH")
        and not key.startswith("PYTEST_")
    }
    env["PYTHONPATH"] = str(ROOT)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (
        f"the README's examples failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    )
    assert "defines u0" in result.stdout, result.stdout[-3000:]
    assert (work / "keep_confident.ifx").is_file()
    # The examples' own warnings would be every user's: none from this package.
    assert "inductor_fx_unbacked" not in "".join(
        line for line in result.stderr.splitlines(keepends=True) if "Warning" in line
    ), result.stderr[-3000:]


def shell_commands() -> list[list[str]]:
    commands = []
    for code in blocks("bash"):
        for line in code.splitlines():
            line = line.split("#", 1)[0].strip()
            for command in filter(None, (part.strip() for part in line.split("&&"))):
                commands.append(shlex.split(command))
    return commands


def test_the_shell_blocks_parse():
    for code in blocks("bash"):
        subprocess.run(["bash", "-n"], input=code, text=True, check=True)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is new in Python 3.11")
def test_the_shell_blocks_name_extras_modules_and_options_that_exist(pytestconfig):
    import tomllib

    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    for command in shell_commands():
        if command[:2] == ["pip", "install"]:
            for argument in command[2:]:
                named = re.fullmatch(r"\.\[(.*)\]", argument)
                if named:
                    missing = set(named.group(1).split(",")) - extras
                    assert not missing, f"{shlex.join(command)}: no extra {missing}"
        if command[:2] == ["python", "-m"]:
            module = command[2]
            assert importlib.util.find_spec(module) is not None, f"no module {module}"
            if module == "pytest":
                for option in (arg for arg in command[3:] if arg.startswith("--")):
                    try:
                        pytestconfig.getoption(option)
                    except ValueError:
                        pytest.fail(f"{shlex.join(command)}: pytest has no option {option}")


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)[^)]*\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), f"the README links to {target}, which is gone"
