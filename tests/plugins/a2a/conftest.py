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


@pytest.fixture
async def bundled(tmp_path):
    """A real daemon on 127.0.0.1 with the default config: the three bundled agents
    (coordinator, reviewer, worker; scripted provider) and no ``a2a.default_agent``.
    Yields the daemon's base URL."""
    from roost.kernel import default_config

    async with serve(default_config(env={}, home=str(tmp_path / "home"), http={"port": 0})) as (
        kernel,
        url,
    ):
        assert sorted(a for a, man in kernel.agents.items() if man.a2a.enabled) == [
            "coordinator",
            "reviewer",
            "worker",
        ]
        yield url.rstrip("/")
