"""Fixtures for the provider tests: a fake vendor server on 127.0.0.1."""

from __future__ import annotations

import pytest
from fake_vendor import FakeVendor


@pytest.fixture
async def vendor(nursery):
    return await FakeVendor().start(nursery)


@pytest.fixture
def closed_port():
    """A 127.0.0.1 port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
