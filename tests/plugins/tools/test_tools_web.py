"""web_fetch against a real HTTP server on 127.0.0.1: SSRF checks per hop, caps, taint."""

from __future__ import annotations

import functools
import gzip
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from roost.kernel import (
    TAINT_UNTRUSTED,
    AddressPins,
    ToolCall,
    ToolContext,
    UrlRefused,
    validate_arguments,
)
from roost.plugins.tools import ToolsSettings, _web, build_tools, html_to_text

Route = Callable[[str, dict[str, str]], tuple[int, dict[str, str], bytes]]


class Server:
    """A tiny HTTP/1.1 server: ``routes[path](path, headers) -> (status, headers, body)``."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            with trio.move_on_after(5):
                while b"\r\n\r\n" not in data:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return
                    data += chunk
            head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
            path = head[0].split(" ")[1]
            headers = {
                k.lower(): v.strip() for k, v in (h.split(":", 1) for h in head[1:] if ":" in h)
            }
            self.requests.append((path, headers))
            route = self.routes.get(path.split("?")[0])
            status, extra, body = route(path, headers) if route else (404, {}, b"not here")
            reason = {200: "OK", 302: "Found", 404: "Not Found"}.get(status, "Status")
            lines = [
                f"HTTP/1.1 {status} {reason}",
                f"Content-Length: {len(body)}",
                "Connection: close",
            ]
            lines += [f"{k}: {v}" for k, v in extra.items()]
            try:
                await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            except trio.BrokenResourceError:
                pass


@pytest.fixture
async def server(nursery):
    srv = Server()
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, srv.handle, 0, host="127.0.0.1")
    )
    srv.port = listeners[0].socket.getsockname()[1]
    return srv


def fetcher(**settings):
    return {t.spec.name: t for t in build_tools(ToolsSettings(**settings))}["web_fetch"]


LOCAL = fetcher(allow_private_network=True)


async def fetch(url: str, tool=LOCAL, **arguments):
    arguments = {"url": url, **arguments}
    validate_arguments(tool.spec, arguments)
    ctx = ToolContext(agent="tester", workspace=Path("."))
    return await tool.handler(ToolCall(name="web_fetch", arguments=arguments), ctx)


PAGE = b"""<!doctype html><html><head><title>Roost  Test</title>
<style>body{color:red}</style><script>alert('x')</script></head>
<body><h1>Hello</h1><p>First <b>para</b>graph with a <a href="/next">link</a>.</p>
<ul><li>one</li><li>two</li></ul><pre>  keep   spacing</pre></body></html>"""


async def test_loopback_is_refused_by_default(server):
    server.routes["/"] = lambda p, h: (200, {"Content-Type": "text/plain"}, b"secret")
    with pytest.raises(UrlRefused) as info:
        await fetch(server.base + "/", tool=fetcher())
    assert info.value.rule == "loopback"
    assert "tools.allow_private_network = true" in str(info.value)
    assert server.requests == []  # refused before any connection


async def test_fetches_html_as_text_and_marks_it_untrusted(server):
    server.routes["/page"] = lambda p, h: (200, {"Content-Type": "text/html; charset=utf-8"}, PAGE)
    result = await fetch(server.base + "/page")
    text = result.as_text()
    assert not result.is_error
    assert TAINT_UNTRUSTED in result.taint
    assert text.startswith(f"URL: {server.base}/page\nStatus: 200 OK\nContent-Type: text/html")
    assert "Title: Roost Test" in text and "# Hello" in text
    assert "First paragraph with a link (/next)." in text
    assert "- one\n- two" in text and "  keep   spacing" in text
    assert "alert" not in text and "color:red" not in text


async def test_spec_is_untrusted_and_open_world():
    spec = LOCAL.spec
    assert spec.untrusted and spec.annotations["openWorldHint"] is True
    assert spec.annotations["readOnlyHint"] is True


async def test_host_header_keeps_the_name_while_connecting_to_the_checked_address(server):
    server.routes["/"] = lambda p, h: (200, {"Content-Type": "text/plain"}, h["host"].encode())
    result = await fetch(f"http://localhost:{server.port}/")
    assert result.as_text().endswith(f"localhost:{server.port}")


async def test_connection_goes_to_the_checked_address_not_a_second_lookup(server, monkeypatch):
    # The name exists only in the guard's resolver: if httpx resolved it again, it would fail.
    async def resolver(host, port):
        assert host == "pinned.roost.invalid"
        return ["127.0.0.1"]

    monkeypatch.setattr(_web, "AddressPins", functools.partial(AddressPins, resolver=resolver))
    server.routes["/"] = lambda p, h: (200, {"Content-Type": "text/plain"}, h["host"].encode())
    result = await fetch(f"http://pinned.roost.invalid:{server.port}/")
    assert not result.is_error, result.as_text()
    assert result.as_text().endswith(f"pinned.roost.invalid:{server.port}")


async def test_redirects_are_followed_and_each_hop_is_checked(server):
    server.routes["/a"] = lambda p, h: (302, {"Location": "/b"}, b"")
    server.routes["/b"] = lambda p, h: (200, {"Content-Type": "text/plain"}, b"arrived")
    result = await fetch(server.base + "/a")
    assert result.as_text().startswith(f"URL: {server.base}/b") and "arrived" in result.as_text()
    assert [p for p, _ in server.requests] == ["/a", "/b"]


@pytest.mark.parametrize(
    "location",
    ["http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "file:///etc/passwd"],
)
async def test_redirect_to_a_forbidden_target_is_refused(server, location):
    server.routes["/go"] = lambda p, h: (302, {"Location": location}, b"")
    with pytest.raises(UrlRefused) as info:
        await fetch(server.base + "/go")
    assert location in str(info.value)


async def test_too_many_redirects_are_refused(server):
    server.routes["/loop"] = lambda p, h: (302, {"Location": "/loop"}, b"")
    with pytest.raises(UrlRefused, match="more than 5 redirects"):
        await fetch(server.base + "/loop")
    assert len(server.requests) == 6


async def test_body_is_capped_in_bytes_and_characters(server):
    server.routes["/big"] = lambda p, h: (200, {"Content-Type": "text/plain"}, b"x" * 200_000)
    capped = await fetch(
        server.base + "/big", tool=fetcher(allow_private_network=True, web_max_bytes=1000)
    )
    body = capped.as_text().split("\n\n", 1)[1]
    assert body.count("x") == 1000 and "body larger than 1000 bytes" in body
    short = await fetch(server.base + "/big", max_chars=500)
    body = short.as_text().split("\n\n", 1)[1]
    assert body.count("x") == 500 and body.endswith("[output truncated]")


async def test_compressed_bodies_are_decoded(server):
    body = gzip.compress(b"unzipped text")
    server.routes["/gz"] = lambda p, h: (
        200,
        {"Content-Type": "text/plain", "Content-Encoding": "gzip"},
        body,
    )
    assert (await fetch(server.base + "/gz")).as_text().endswith("unzipped text")


async def test_http_errors_and_binary_content(server):
    missing = await fetch(server.base + "/missing")
    assert missing.is_error and "Status: 404 Not Found" in missing.as_text()
    server.routes["/img"] = lambda p, h: (200, {"Content-Type": "image/png"}, b"\x89PNG\0\0")
    image = await fetch(server.base + "/img")
    assert "[6 bytes of image/png content not shown: not text]" in image.as_text()


async def test_connection_refused_is_a_clear_error():
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = await fetch(f"http://127.0.0.1:{port}/")
    assert result.is_error and "failed: ConnectError" in result.as_text()


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [({"url": ""}, "arguments.url"), ({"url": "http://x/", "max_chars": 5}, "arguments.max_chars")],
)
async def test_bad_arguments_are_clear_errors(arguments, needle):
    ctx = ToolContext(agent="tester", workspace=Path("."))
    result = await LOCAL.handler(ToolCall(name="web_fetch", arguments=arguments), ctx)
    assert result.is_error and needle in result.as_text()


def test_html_to_text_skips_scripts_and_keeps_structure():
    text = html_to_text("<p>a &amp; b</p><script>x()</script><h2>T</h2><br>c")
    assert text == "a & b\n\n## T\n\nc"
    code = html_to_text("<pre>def f():\n    return  1\n</pre>")
    assert code == "def f():\n    return  1"
