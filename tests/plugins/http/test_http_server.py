"""Serving: bound port, daemon.json, graceful shutdown, connection hygiene."""

import json
import os
from functools import partial

import trio
from http_fakes import serving
from roost.plugins.http import create_app, daemon_file, read_daemon_file, serve
from trio_websocket import ConnectionClosed, open_websocket_url


async def test_port_0_reports_the_bound_port_and_daemon_json_tracks_it(make_kernel):
    kernel = make_kernel()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(
            partial(
                serve,
                kernel,
                host="127.0.0.1",
                port=0,
                shutdown_trigger=stop.wait,
                graceful_timeout=1,
            )
        )
        assert host == "127.0.0.1"
        assert port > 0
        info = read_daemon_file(kernel.config.home)
        assert (info.pid, info.host, info.port) == (os.getpid(), "127.0.0.1", port)
        stream = await trio.open_tcp_stream(host, port)  # really listening
        await stream.aclose()
        stop.set()
    assert not daemon_file(kernel.config.home).exists()


async def test_daemon_json_is_removed_when_serving_is_cancelled(make_kernel):
    kernel = make_kernel()
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve, kernel, host="127.0.0.1", port=0))
        assert daemon_file(kernel.config.home).exists()
        nursery.cancel_scope.cancel()
    assert not daemon_file(kernel.config.home).exists()


async def test_port_in_use_is_an_oserror_not_a_hang(make_kernel):
    kernel = make_kernel()
    async with serving(kernel) as client:
        port = int(client.roost_url.rsplit(":", 1)[1])
        other = make_kernel()
        try:
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    await nursery.start(
                        partial(serve, other, host="127.0.0.1", port=port, write_daemon_json=False)
                    )
        except* OSError:
            pass
        else:
            raise AssertionError("binding a used port should fail")


async def test_shutdown_closes_event_streams_with_1001(make_kernel):
    kernel = make_kernel()
    stop = trio.Event()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(
                partial(
                    serve,
                    kernel,
                    host="127.0.0.1",
                    port=0,
                    shutdown_trigger=stop.wait,
                    graceful_timeout=5,
                )
            )
            async with open_websocket_url(f"ws://{host}:{port}/api/events") as ws:
                stop.set()
                try:
                    await ws.get_message()
                except ConnectionClosed as closed:
                    assert closed.reason.code == 1001
                else:
                    raise AssertionError("expected the stream to close")


async def test_shutdown_deadline_cuts_off_a_request_that_never_ends(make_kernel):
    kernel = make_kernel()
    started = trio.Event()

    async def never_answers(agent, message, **kwargs):
        started.set()
        await trio.sleep_forever()

    kernel.send = never_answers
    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            async with serving(kernel) as client:

                async def post():
                    try:
                        await client.post("/api/agents/echo/message", json={"message": "hi"})
                    except Exception:
                        pass  # the daemon went away mid-request, as it should

                outer.start_soon(post)
                await started.wait()
            outer.cancel_scope.cancel()


async def test_unread_request_body_does_not_wedge_the_connection(make_kernel):
    # Regression: answering without reading a many-chunk body left hypercorn's reader
    # blocked on a full queue, so the connection (and its task) never ended.
    kernel = make_kernel(max_body_bytes=1000)
    async with serving(kernel) as client:
        port = int(client.roost_url.rsplit(":", 1)[1])
        for path in [b"/nowhere", b"/api/agents/echo/message"]:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            head = b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            chunks = b"".join(b"40\r\n" + b"x" * 64 + b"\r\n" for _ in range(200))
            await stream.send_all(head + chunks + b"0\r\n\r\n")
            received = b""
            with trio.fail_after(10):
                while chunk := await stream.receive_some():
                    received += chunk
            await stream.aclose()
            status = received.split(b"\r\n", 1)[0]
            assert status in (b"HTTP/1.1 404 ", b"HTTP/1.1 413 "), received[:200]
            assert b"connection: close" in received.lower()
            body = json.loads(received.split(b"\r\n\r\n", 1)[1])
            assert body["error"]["code"] in ("not_found", "body_too_large")
        assert (await client.get("/health")).status_code == 200


async def test_keep_alive_is_kept_when_the_body_was_read(make_kernel):
    async with serving(make_kernel()) as client:
        response = await client.post("/api/agents/echo/message", json={"message": "hi"})
    assert response.status_code == 200
    assert response.headers.get("connection", "").lower() != "close"


async def test_bad_http_settings_fail_at_create_app_naming_the_field(make_kernel):
    import pytest
    from roost.kernel import ConfigError

    for settings, field in [
        ({"rate_limit_per_s": 0}, "http.rate_limit_per_s"),
        ({"rate_limit_burst": 0}, "http.rate_limit_burst"),
        ({"max_body_bytes": -1}, "http.max_body_bytes"),
        ({"allowed_origins": ("not a url",)}, "http.allowed_origins[0]"),
    ]:
        with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
            create_app(make_kernel(**settings))
