"""A2A push webhooks connect to the address the SSRF check approved (issue 15, item 8).

Regression: the dispatcher checked the webhook URL after DNS, then posted to it by name,
so httpx resolved the name again when it connected: a name that answered the check with a
public address and the connection with 127.0.0.1 delivered a task's events to a
loopback-only service. Here the check's resolver answers a public address first and
127.0.0.1 after that, and the name is ``localhost`` (which the system resolves to
127.0.0.1), with a real listener there that must receive nothing. Nothing leaves the
machine: the transport under the pinned connection refuses any host but loopback.
"""

from __future__ import annotations

import functools
import types

import httpx
import trio
from roost.plugins.a2a import _models as m
from roost.plugins.a2a._push import PushDispatcher, PushSettings
from waiting import wait_until

PUBLIC = "93.184.216.34"  # a public address the check approves; never connected to here


class RebindingResolver:
    """Answers ``first`` on the first lookup and ``later`` on every later one."""

    def __init__(self, first: str, later: str) -> None:
        self.first, self.later = first, later
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        return [self.first if len(self.calls) == 1 else self.later]


class LoopbackOnly(httpx.AsyncBaseTransport):
    """Records the host of every connection asked for; connects only to loopback names."""

    def __init__(self) -> None:
        self.hosts: list[str] = []
        self._real = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.hosts.append(request.url.host)
        if request.url.host not in ("localhost", "127.0.0.1"):
            raise httpx.ConnectError(
                f"test transport: {request.url.host} is off limits", request=request
            )
        return await self._real.handle_async_request(request)

    async def aclose(self) -> None:
        await self._real.aclose()


async def test_push_delivery_connects_only_to_the_checked_address_not_a_rebound_one(nursery):
    accepted: list[str] = []

    async def record(stream: trio.SocketStream) -> None:
        accepted.append("connection")
        async with stream:
            await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")

    listeners = await nursery.start(functools.partial(trio.serve_tcp, record, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    resolver = RebindingResolver(first=PUBLIC, later="127.0.0.1")
    transport = LoopbackOnly()
    dispatcher = PushDispatcher(
        None, PushSettings(retries=3, backoff_s=0.01), transport=transport, resolver=resolver
    )
    await nursery.start(dispatcher.run)

    config = m.PushConfig(task_id="t1", id="c1", url=f"http://localhost:{port}/hook")
    task = m.Task("t1", "ctx", m.TaskStatus(m.WORKING, None, m.now_iso()), (), ())
    live = types.SimpleNamespace(push=[config], dialect=m.V1, task=task)
    await dispatcher.notify(live, m.StatusUpdate("t1", "ctx", task.status))
    await wait_until(lambda: dispatcher.delivered + dispatcher.failed >= 1, "the delivery ended")
    await transport.aclose()

    assert accepted == [], "the webhook reached the loopback-only listener"
    assert dispatcher.delivered == 0 and dispatcher.failed == 1
    # Every attempt (first and retries) went to the checked public address, looked up once.
    assert transport.hosts == [PUBLIC] * 3
    assert resolver.calls == [("localhost", port)]


async def test_push_delivery_to_an_allowed_loopback_webhook_still_arrives(nursery):
    received: list[bytes] = []

    async def record(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some(65536)
            received.append(data)
            await stream.send_all(b"HTTP/1.1 204 No Content\r\n\r\n")

    listeners = await nursery.start(functools.partial(trio.serve_tcp, record, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    dispatcher = PushDispatcher(
        None, PushSettings(retries=1, allow_private=True, allow_loopback=True)
    )
    config = m.PushConfig(task_id="t1", id="c1", url=f"http://localhost:{port}/hook", token="tok")
    from roost.plugins.a2a._push import Delivery

    with trio.fail_after(10):
        ok = await dispatcher.deliver(Delivery(config, {"x": 1}))
    assert ok and len(received) == 1
    head = received[0].decode("latin-1").lower()
    assert f"host: localhost:{port}" in head and "x-a2a-notification-token: tok" in head
