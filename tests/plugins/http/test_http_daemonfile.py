import json
import os
import ssl
from functools import partial

import trio
from roost.plugins.http import (
    DaemonInfo,
    daemon_file,
    daemon_http_client,
    find_daemon,
    pid_alive,
    read_daemon_file,
    remove_daemon_file,
    write_daemon_file,
)


def test_write_then_read_round_trips(tmp_path):
    info = write_daemon_file(tmp_path / "new-home", "127.0.0.1", 8471)
    assert info.pid == os.getpid()
    assert read_daemon_file(tmp_path / "new-home") == info
    assert info.url == "http://127.0.0.1:8471"
    assert DaemonInfo(1, "::1", 80, 0.0).url == "http://[::1]:80"


def test_missing_or_malformed_file_reads_as_none(tmp_path):
    assert read_daemon_file(tmp_path) is None
    for text in [
        "",
        "{",
        "[]",
        '{"pid": "1", "host": "h", "port": 1}',
        '{"pid": 1, "host": "h", "port": 0}',
        '{"pid": 1, "host": "h"}',
        '{"pid": -5, "host": "h", "port": 8}',
    ]:
        daemon_file(tmp_path).write_text(text)
        assert read_daemon_file(tmp_path) is None, text


def test_remove_leaves_a_file_another_daemon_wrote(tmp_path):
    mine = write_daemon_file(tmp_path, "127.0.0.1", 1000)
    daemon_file(tmp_path).write_text(
        json.dumps({"pid": mine.pid + 1, "host": "127.0.0.1", "port": 2000})
    )
    remove_daemon_file(tmp_path, mine)
    assert daemon_file(tmp_path).exists()
    remove_daemon_file(tmp_path, read_daemon_file(tmp_path))
    assert not daemon_file(tmp_path).exists()
    remove_daemon_file(tmp_path, mine)  # already gone: no error


def test_pid_alive():
    assert pid_alive(os.getpid())
    assert not pid_alive(2**22 + 12345)  # above the default pid_max


def _verify_mode(client) -> ssl.VerifyMode:
    return client._transport._pool._ssl_context.verify_mode  # httpx → httpcore pool


def test_the_daemon_client_skips_tls_verification_only_for_plain_http():
    # What broke: each client to the daemon loaded the CA bundle (~50 ms), twice before
    # `roost mcp` could relay initialize to a running daemon; it has no TLS to verify.
    assert _verify_mode(daemon_http_client("http://127.0.0.1:8471")) == ssl.CERT_NONE
    assert _verify_mode(daemon_http_client("https://example.test")) == ssl.CERT_REQUIRED


async def test_find_daemon_checks_health_over_plain_http(tmp_path):
    async def health(stream):
        request = b""
        while b"\r\n\r\n" not in request:
            request += await stream.receive_some(4096)
        assert request.startswith(b"GET /health ")
        body = b'{"status": "ok"}'
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(body), body)
        )

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, health, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        info = write_daemon_file(tmp_path, "127.0.0.1", port)
        with trio.fail_after(10):
            assert await find_daemon(tmp_path) == info
        nursery.cancel_scope.cancel()
