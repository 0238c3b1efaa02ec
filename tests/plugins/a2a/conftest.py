"""Fixtures: a real kernel with scripted agents, served by the real daemon on 127.0.0.1."""

import pytest
from a2a_helpers import make_config, serve


@pytest.fixture
def config(tmp_path):
    return make_config(tmp_path)


@pytest.fixture
async def daemon(config):
    async with serve(config) as (kernel, url):
        yield kernel, url
