"""Per-route request body caps (``RouteDescriptor.max_body_bytes``)."""

import json

import trio
from http_fakes import serving
from roost.kernel import RouteDescriptor, hookimpl
from roost.plugins.http import PlainResponse

DAEMON_CAP = 1000
ROUTE_CAP = 5000


async def size_of_body(request, **_path_args):
    return PlainResponse.json({"size": len(request.body)})


async def ignore_body(request):
    return PlainResponse.json({"ignored": True})


class BigBodyPlugin:
    @hookimpl
    def roost_http_routes(self, kernel):
        return [
            RouteDescriptor("/big", size_of_body, methods=("POST",), max_body_bytes=ROUTE_CAP),
            RouteDescriptor(
                "/big/<name>", size_of_body, methods=("POST",), max_body_bytes=ROUTE_CAP
            ),
            RouteDescriptor(
                "/big-ignored", ignore_body, methods=("POST",), max_body_bytes=ROUTE_CAP
            ),
            RouteDescriptor("/small", size_of_body, methods=("POST",)),
        ]


class BadCapPlugin:
    @hookimpl
    def roost_http_routes(self, kernel):
        return [
            RouteDescriptor("/zero", size_of_body, methods=("POST",), max_body_bytes=0),
            RouteDescriptor("/text", size_of_body, methods=("POST",), max_body_bytes="10MB"),
        ]


def chunked(total: int, piece: int = 500):
    async def chunks():
        sent = 0
        while sent < total:
            size = min(piece, total - sent)
            sent += size
            yield b"x" * size

    return chunks()


def make(make_kernel):
    kernel = make_kernel(max_body_bytes=DAEMON_CAP)
    kernel.plugins.register(BigBodyPlugin(), name="big")
    return kernel


async def test_route_cap_admits_bodies_over_the_daemon_cap(make_kernel):
    async with serving(make(make_kernel)) as client:
        plain = await client.post("/big", content=b"x" * 4000)
        with_param = await client.post("/big/agent", content=b"x" * 4000)
        streamed = await client.post("/big", content=chunked(4000))
    assert plain.json() == {"size": 4000}
    assert with_param.json() == {"size": 4000}
    assert "content-length" not in streamed.request.headers
    assert streamed.json() == {"size": 4000}


async def test_route_cap_rejects_bigger_bodies_with_413_naming_the_limit(make_kernel):
    async with serving(make(make_kernel)) as client:
        plain = await client.post("/big", content=b"x" * (ROUTE_CAP + 1))
        streamed = await client.post("/big", content=chunked(ROUTE_CAP * 3))
        ignored = await client.post("/big-ignored", content=chunked(ROUTE_CAP * 3))
        after = await client.post("/big", content=b"ok")
    for response in (plain, streamed):
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert error["code"] == "body_too_large"
        assert error["limit_bytes"] == ROUTE_CAP
        assert f"{ROUTE_CAP} bytes" in error["message"]
    # A route that ignores its body: the body is refused at the cap all the same.
    assert ignored.status_code == 413
    assert after.json() == {"size": 2}


async def test_routes_without_a_cap_keep_the_daemon_cap(make_kernel):
    async with serving(make(make_kernel)) as client:
        small = await client.post("/small", content=b"x" * 4000)
        small_streamed = await client.post("/small", content=chunked(4000))
        api = await client.post("/api/agents/echo/message", content=b"x" * 4000)
    for response in (small, small_streamed, api):
        assert response.status_code == 413
        assert response.json()["error"]["limit_bytes"] == DAEMON_CAP
        assert "http.max_body_bytes" in response.json()["error"]["message"]


async def test_bad_route_cap_is_a_recorded_failure_naming_the_field(make_kernel):
    kernel = make_kernel(max_body_bytes=DAEMON_CAP)
    kernel.plugins.register(BadCapPlugin(), name="badcap")
    async with serving(kernel) as client:
        missing = await client.post("/zero", content=b"x")
    assert missing.status_code == 404
    errors = json.dumps([f.error for f in kernel.plugins.failures if f.name == "badcap"])
    assert "/zero max_body_bytes must be a positive integer" in errors
    assert "/text max_body_bytes must be a positive integer" in errors


async def test_oversize_raw_chunked_body_is_drained_and_the_connection_answers(make_kernel):
    # Regression (per-route caps): a chunked body over a route's cap must not wedge the
    # connection: the 413 goes out and the daemon still serves new connections.
    async with serving(make(make_kernel)) as client:
        host, port = client.roost_url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            head = b"POST /big HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
            chunks = b"".join(b"200\r\n" + b"y" * 512 + b"\r\n" for _ in range(40))
            await stream.send_all(head + chunks + b"0\r\n\r\n")
            received = b""
            with trio.fail_after(10):
                while chunk := await stream.receive_some():
                    received += chunk
        health = await client.get("/health")
    assert received.startswith(b"HTTP/1.1 413 "), received[:200]
    assert health.status_code == 200
