"""Test setup: CPU mode needs TRITON_INTERPRET=1 before Triton is imported."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
