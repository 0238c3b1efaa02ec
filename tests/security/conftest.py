"""Fixtures of the security tests: the real entry points (see ``security_targets``)."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator

import pytest
from security_targets import Daemon, KernelTarget, open_kernel_target


@pytest.fixture(scope="module")
def daemon(tmp_path_factory) -> Iterator[Daemon]:
    """One real daemon for a module's attacks (restarted if an attack stopped it)."""
    holder = Daemon(tmp_path_factory.mktemp("daemon")).start()
    yield holder
    holder.stop()


@pytest.fixture
def listeners(tmp_path) -> Iterator[tuple[int, str]]:
    """A TCP listener on 127.0.0.1 and an abstract unix socket listener, in this process:
    what a sandboxed bash must not reach."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    unix = socket.socket(socket.AF_UNIX)
    name = "roost-security-" + secrets.token_hex(6)
    unix.bind("\0" + name)
    unix.listen(8)
    yield tcp.getsockname()[1], name
    tcp.close()
    unix.close()


@pytest.fixture
async def kernel_target(tmp_path, monkeypatch) -> Iterator[KernelTarget]:
    opener, home, user_home = open_kernel_target(tmp_path, monkeypatch)
    async with opener as kernel:
        target = KernelTarget(kernel, home, user_home)
        target.plant()
        yield target
