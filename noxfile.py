"""The test matrix: one session per supported torch release.

    nox -s tests             # every release
    nox -s "tests(torch='2.15.0')"
    nox -s "tests(torch='2.13.0+cpu')"   # a CPU build, as a user installs it
    python -m benchmarks.test_matrix     # every release, then a markdown report

Each session is a fresh virtual environment with that release's CPU-runnable
wheel, the Triton that a user's pip installs beside it, and this package with
its test extra. PyPI's Linux wheels of torch are CUDA builds, which run on CPU
and pin their Triton (``RELEASES``). CPU builds (``CPU_BUILDS``, from the PyTorch
CPU index, ``TORCH_CPU_INDEX``) pin none: there pip takes the newest Triton that
the package's own requirement admits (``triton>=3.6,<3.10`` in pyproject.toml,
the range of the pins below), and so does the session.
"""

from __future__ import annotations

import os

import nox

#: torch release -> the Triton release it pins on Linux x86_64.
RELEASES = {
    "2.10.0": "3.6.0",
    "2.11.0": "3.6.0",
    "2.12.1": "3.7.1",
    "2.13.0": "3.7.1",
    "2.14.1": "3.8.0",
    "2.15.0": "3.9.0",
}

#: CPU builds of torch, which pin no Triton; tested with what pip picks for them.
CPU_BUILDS = ("2.13.0+cpu",)

#: Where pip finds the CPU builds (set it empty where they are found otherwise, such
#: as in a wheel folder that pip's configuration names).
CPU_INDEX = os.environ.get("TORCH_CPU_INDEX", "https://download.pytorch.org/whl/cpu")

OLDEST = min(RELEASES, key=lambda v: tuple(map(int, v.split("."))))

#: torch release -> the torchvision build for it, where the session also runs the
#: model sweep (test/models/, the ``models`` extra); elsewhere test/models skips.
TORCHVISION = {
    "2.15.0": "0.29.2",
}

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
# uv where it is installed (CI installs it beside nox): it fetches a CUDA build of
# torch and its ~20 NVIDIA packages in parallel, in well under a minute where pip
# takes minutes; virtualenv and pip elsewhere.
nox.options.default_venv_backend = "uv|virtualenv"

# A pip configuration may cap torch with a constraint file; the matrix asks for
# exact releases, so it must not apply. (An empty value does not disable it.)
# uv reads no pip configuration. uv writes no bytecode unless asked, where pip
# does: without it every test process compiles torch's sources on import (twice
# the time where PYTHONDONTWRITEBYTECODE is set, as on the CI machines).
INSTALL_ENV = {"PIP_CONSTRAINT": "/dev/null", "UV_COMPILE_BYTECODE": "1"}


@nox.session(python="3.11")
@nox.parametrize("torch", [*RELEASES, *CPU_BUILDS])
def tests(session: nox.Session, torch: str) -> None:
    """Install one torch release and run the test suite on it."""
    torchvision = [f"torchvision=={TORCHVISION[torch]}"] if torch in TORCHVISION else []
    # torch imports setuptools (torch.utils.cpp_extension, Inductor's C++ builds)
    # without requiring it below Python 3.12: pip's virtual environments come with
    # it, uv's do not.
    session.install("setuptools", env=INSTALL_ENV)
    if torch in CPU_BUILDS:
        # No Triton named: the package's requirement decides, as for a user.
        index = ["--extra-index-url", CPU_INDEX] if CPU_INDEX else []
        session.install(f"torch=={torch}", *index, env=INSTALL_ENV)
    else:
        session.install(
            f"torch=={torch}", f"triton=={RELEASES[torch]}", *torchvision, env=INSTALL_ENV
        )
    extras = "test,models" if torchvision else "test"
    session.install("-e", f".[{extras}]", env=INSTALL_ENV)
    # The README's full-tier command, as users run it (Inductor's caches on; each test
    # gets fresh cache dirs). Arguments after -- replace "-n 2 --full".
    pytest_args = session.posargs or ["-n", "2", "--full"]
    if not session.posargs and os.environ.get("IFX_CI") == "1":
        # CI's log names the slowest tests, where its time is won back.
        pytest_args += ["--durations=25"]
    session.run("python", "-m", "pytest", *pytest_args)
