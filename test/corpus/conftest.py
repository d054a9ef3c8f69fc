"""Setup shared by the corpus's test files."""

import pytest
from programs import data_dependent_dynamo

import inductor_fx_unbacked as ifx


@pytest.fixture(autouse=True)
def dynamo_config():
    """Dynamo keeps .item() and data-dependent shapes in the graph; fresh per test."""
    with data_dependent_dynamo():
        yield
    ifx.disable()
