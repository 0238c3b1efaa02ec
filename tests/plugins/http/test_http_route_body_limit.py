"""Per-route request body caps (``RouteDescriptor.max_body_bytes``)."""

import json

import h2.config
import h2.connection
import h2.events
import pytest
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


HOSTILE_LENGTHS = ["١٢".encode(), b"\xb2", b"+2", b"1_2", b"-1", b"1e3", b"9" * 5000, b""]


async def _h2_post(
    url: str, length: bytes, *, path: str = "/big", end_stream: bool = True
) -> tuple[bytes | None, h2.events.Event | None]:
    """POST ``path`` over HTTP/2 (prior knowledge) declaring ``length`` and sending 2 bytes
    (the whole body with ``end_stream``): the answer's status (None before one) and the event
    that ended the stream or the connection (None: the connection just closed)."""
    host, port = url.removeprefix("http://").split(":")
    config = h2.config.H2Configuration(client_side=True, validate_outbound_headers=False)
    conn = h2.connection.H2Connection(config)
    conn.initiate_connection()
    head = [(b":method", b"POST"), (b":path", path.encode()), (b":scheme", b"http")]
    conn.send_headers(1, [*head, (b":authority", b"localhost"), (b"content-length", length)])
    conn.send_data(1, b"xx", end_stream=end_stream)
    status = None
    ended = (h2.events.StreamEnded, h2.events.StreamReset, h2.events.ConnectionTerminated)
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        await stream.send_all(conn.data_to_send())
        with trio.fail_after(10):
            while raw := await stream.receive_some():
                for event in conn.receive_data(raw):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = dict(event.headers)[b":status"]
                    if isinstance(event, ended):
                        return status, event
                await stream.send_all(conn.data_to_send())
    return status, None


@pytest.mark.parametrize("length", HOSTILE_LENGTHS)
async def test_a_content_length_not_in_ascii_digits_is_refused_never_a_500(make_kernel, length):
    # Over HTTP/1.1 (h11) and HTTP/2 (h2, as hypercorn speaks it on a plain socket) the server's
    # parser refuses it before a route sees it: a 400, or the h2 connection closed with
    # PROTOCOL_ERROR. ASCII digits with leading zeros are read.
    async with serving(make(make_kernel)) as client:
        host, port = client.roost_url.removeprefix("http://").split(":")
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            head = b"POST /big HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + length
            await stream.send_all(head + b"\r\n\r\nxx")
            with trio.fail_after(10):
                answer = await stream.receive_some()
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        _, refused = await _h2_post(client.roost_url, length)
        assert isinstance(refused, h2.events.ConnectionTerminated) and refused.error_code == 1
        status, ended = await _h2_post(client.roost_url, b"002")
        assert status == b"200" and isinstance(ended, h2.events.StreamEnded)
        leading_zeros = await client.post("/big", content=b"xx", headers={"Content-Length": "02"})
        assert leading_zeros.json() == {"size": 2}


@pytest.mark.parametrize("path", ["/big", "/small"])
async def test_an_h2_content_length_past_20_digits_is_a_413_not_a_500(make_kernel, path, caplog):
    # Regression: h2 passes a Content-Length of any number of ASCII digits (h11 stops at 20);
    # parse_int's bound refused the 30 digits with InvalidInput, out of the route as a 500
    # with a traceback in the log. It declares more than any cap: a 413, as before.
    async with serving(make(make_kernel)) as client:
        status, _ = await _h2_post(client.roost_url, b"9" * 30, path=path, end_stream=False)
        assert status == b"413"
    assert "Traceback" not in caplog.text and "Error in ASGI" not in caplog.text
