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
