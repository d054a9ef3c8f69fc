"""Test setup for every test file, and for each pytest-xdist worker.

- CPU mode runs Triton kernels in Triton's interpreter, which needs
  ``TRITON_INTERPRET=1`` before Triton's own ``@triton.jit`` helpers are defined
  (docs/reference.md says when that is, per Triton release); set here, before
  any test module imports Triton.
- ``test/corpus`` is importable from every test file, so that the corpus's
  programs and custom ops are defined once (``programs``), whichever file uses
  them first.
"""

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "corpus"))
