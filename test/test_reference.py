"""Inductor's Python wrapper as the reference (``integration/reference.py``).

On CPU the reference runs Triton kernels in Triton's interpreter. An interpreted
reduction helper patches ``triton.language.core`` (its ``atomic_add``, ``arange``,
...) and, without the CPU mode's fixes, leaves it patched for the process: a user
kernel launched later then adds into nothing (its result is 0; found by the suite
on torch 2.10, where a corpus reference of ``torch.cond`` ran before a user
kernel). The fixes are process-wide once installed, so the check runs in a fresh
process.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[1]

SCRIPT = """
import torch
import triton.language.core as core
from inductor_fx_unbacked.integration.reference import python_wrapper_reference

before = dict(vars(core))
x = torch.randn(64)
with python_wrapper_reference("cpu"):
    fn = torch.compile(lambda x: torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, (x,)))
    assert torch.equal(fn(x), x * 2 if x.sum() > 0 else x - 1)
after = dict(vars(core))
changed = [name for name in before.keys() | after.keys() if before.get(name) is not after.get(name)]
print(sorted(changed))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="only the CPU reference interprets")
def test_the_reference_leaves_triton_language_as_it_found_it():
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == "[]", done.stdout
