"""SSRF: the MCP HTTP and SSE client transports connect to the address the guard checked.

Regression: the URL was checked after DNS, but httpx resolved the name again when it
connected, so a DNS-rebinding name could pass the check and then reach a private address.
The names used here exist only in the injected resolver: a second, system lookup fails.
"""

from __future__ import annotations

import functools

import pytest
import trio
from roost.kernel import UrlRefused
from roost.plugins.http import HttpSettings, create_app, open_daemon
from roost.plugins.mcp._client import ClientOptions, open_mcp_client
from roost.plugins.mcp.transports._base import TransportClosed, TransportError
from roost.plugins.mcp.transports.http import open_http_transport
from roost.plugins.mcp.transports.sse import open_sse_transport

NAME = "mcp.roost.invalid"


class RebindingResolver:
    """Answers loopback first, then a cloud-metadata address (a rebinding attack)."""

    def __init__(self, first: str = "127.0.0.1", later: str = "169.254.169.254") -> None:
        self.first = first
        self.later = later
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        return [self.first if len(self.calls) == 1 else self.later]


@pytest.fixture
async def daemon_port(kernel):
    # The daemon serves requests naming NAME only when told to (its DNS-rebinding guard).
    app = create_app(kernel, settings=HttpSettings(allowed_hosts=(NAME,)))
    async with open_daemon(kernel, app=app) as url:
        yield int(url.rsplit(":", 1)[1])


async def test_http_transport_uses_the_checked_address_for_every_request(daemon_port):
    resolver = RebindingResolver()
    url = f"http://{NAME}:{daemon_port}/mcp"
    async with open_http_transport(
        url, allow_loopback=True, timeout_secs=10, resolver=resolver
    ) as transport:
        async with open_mcp_client(transport, ClientOptions(protocol="2025-11-25")) as client:
            names = [tool["name"] for tool in await client.list_tools()]
            result = await client.call_tool("echo", {"text": "pinned"})
            await client.list_tools()
    assert "agent_alpha" in names
    assert result["content"][0]["text"] == "echo:pinned:alpha"
    # One lookup for the whole connection: the rebinding answer was never asked for.
    assert resolver.calls == [(NAME, daemon_port)]


async def test_http_transport_refuses_a_name_that_resolves_to_a_forbidden_address(daemon_port):
    resolver = RebindingResolver(first="169.254.169.254")
    with pytest.raises(UrlRefused) as info:
        async with open_http_transport(
            f"http://{NAME}:{daemon_port}/mcp", allow_loopback=True, resolver=resolver
        ):
            pass
    assert info.value.rule == "metadata"


async def test_loopback_needs_allow_local_even_through_a_resolver(daemon_port):
    for opener in (open_http_transport, open_sse_transport):
        with pytest.raises(UrlRefused) as info:
            async with opener(f"http://{NAME}:{daemon_port}/mcp", resolver=RebindingResolver()):
                pass
        assert info.value.rule == "loopback" and "allow_local = true" in str(info.value)


class TinySseServer:
    """A legacy HTTP+SSE endpoint: GET /sse names /messages; POSTs are recorded (202)."""

    def __init__(self, endpoint: str = "/messages", answer_posts: bool = True) -> None:
        self.requests: list[tuple[str, str]] = []  # (request line, Host header)
        self.port = 0
        self.endpoint = endpoint
        self.answer_posts = answer_posts  # False: a POST's connection is closed unanswered

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
            host = next(
                (h.split(":", 1)[1].strip() for h in head[1:] if h.lower().startswith("host:")), ""
            )
            self.requests.append((head[0], host))
            if head[0].startswith("GET /sse"):
                await stream.send_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Cache-Control: no-cache\r\n\r\nevent: endpoint\ndata: "
                    + self.endpoint.format(port=self.port).encode()
                    + b"\n\n"
                )
                await trio.sleep_forever()
            if not self.answer_posts:
                return
            await stream.send_all(
                b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )


async def test_sse_transport_uses_the_checked_address_and_keeps_the_host_header(nursery):
    server = TinySseServer()
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
    )
    server.port = listeners[0].socket.getsockname()[1]
    resolver = RebindingResolver()
    url = f"http://{NAME}:{server.port}/sse"
    async with open_sse_transport(
        url, allow_loopback=True, timeout_secs=10, resolver=resolver
    ) as transport:
        assert transport.endpoint == f"http://{NAME}:{server.port}/messages"
        await transport.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert [line.split(" ")[:2] for line, _ in server.requests] == [
        ["GET", "/sse"],
        ["POST", "/messages"],
    ]
    assert {host for _, host in server.requests} == {f"{NAME}:{server.port}"}
    assert resolver.calls == [(NAME, server.port)]


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://169.254.169.254/messages",
        "//127.0.0.1:{port}/messages",  # same address, another host name
        "http://mcp.roost.invalid:1/messages",  # same name, another port
        "https://mcp.roost.invalid:{port}/messages",  # same name and port, another scheme
    ],
)
async def test_sse_endpoint_on_another_origin_is_refused_before_any_post(nursery, endpoint):
    server = TinySseServer(endpoint)
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
    )
    server.port = listeners[0].socket.getsockname()[1]
    with pytest.raises(TransportError, match="another origin"):
        async with open_sse_transport(
            f"http://{NAME}:{server.port}/sse",
            allow_loopback=True,
            timeout_secs=10,
            resolver=RebindingResolver(),
        ):
            pass
    assert [line.split(" ")[:2] for line, _ in server.requests] == [["GET", "/sse"]]


async def test_a_failed_sse_post_names_its_endpoint_without_the_urls_user_info(nursery):
    """Regression: the endpoint is joined onto the configured URL, user info and all, and
    a POST that got no answer named it whole in an error the calling agent reads."""
    server = TinySseServer("/messages?session_id=1", answer_posts=False)
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1")
    )
    server.port = listeners[0].socket.getsockname()[1]
    url = f"http://roost:s3cret@{NAME}:{server.port}/sse"
    async with open_sse_transport(
        url, allow_loopback=True, timeout_secs=10, resolver=RebindingResolver()
    ) as transport:
        with trio.fail_after(10), pytest.raises(TransportClosed) as info:
            await transport.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert f"POST to http://{NAME}:{server.port}/messages failed" in str(info.value)
    assert "s3cret" not in str(info.value)
