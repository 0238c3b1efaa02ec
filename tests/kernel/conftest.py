"""Fixtures shared by the kernel's tests."""

import pytest
from roost.kernel import default_config


@pytest.fixture
def config(tmp_path):
    """The default config, at home in the test's own folder."""
    return default_config(home=tmp_path)
