"""Setup shared by the corpus's test files."""

import pytest
import torch

import inductor_fx_unbacked as ifx


@pytest.fixture(autouse=True)
def dynamo_config():
    """Dynamo keeps .item() and data-dependent shapes in the graph; fresh per test."""
    with torch._dynamo.config.patch(
        capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True, cache_size_limit=64
    ):
        torch._dynamo.reset()
        yield
    ifx.disable()
