"""The benchmark's load generator reads responses right however they arrive."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from bench._a2a_load import BlockingConnection, LoadError, ResponseReader

BODY = json.dumps({"result": {"ok": True}}).encode()
PLAIN = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n" % (5, BODY[:5])
    + b"%x;ext=1\r\n%s\r\n" % (len(BODY) - 5, BODY[5:])
    + b"0\r\n\r\n"
)


@pytest.mark.parametrize("response", [PLAIN, CHUNKED], ids=["content-length", "chunked"])
def test_a_reply_fed_byte_by_byte_is_read_once_whole(response):
    reader = ResponseReader()
    replies = []
    for i in range(len(response)):
        reader.feed(response[i : i + 1])
        reply = reader.next_reply()
        if reply is not None:
            replies.append((i, reply))
    assert replies == [(len(response) - 1, ({"result": {"ok": True}}, False))]


def test_two_pipelined_replies_are_read_in_order_and_close_is_reported():
    reader = ResponseReader()
    closing = PLAIN.replace(b"Content-Type", b"Connection: close\r\nContent-Type")
    reader.feed(CHUNKED + closing)
    assert reader.next_reply() == ({"result": {"ok": True}}, False)
    assert reader.next_reply() == ({"result": {"ok": True}}, True)
    assert reader.next_reply() is None


def test_errors_name_what_is_wrong():
    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy")
    with pytest.raises(LoadError, match="HTTP 503"):
        reader.next_reply()
    with pytest.raises(LoadError, match="closed the connection"):
        ResponseReader().feed(b"")
    reader = ResponseReader()
    reader.feed(b"HTTP/1.1 200 OK\r\n\r\n")
    with pytest.raises(LoadError, match="Content-Length"):
        reader.next_reply()


def test_the_blocking_connection_posts_and_reads_over_a_real_socket():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(5)
        port = listener.getsockname()[1]
        received = []

        def receive(conn: socket.socket) -> bytes:
            chunk = conn.recv(65536)
            if not chunk:
                raise ConnectionError("the client closed the connection")
            return chunk

        def serve() -> None:
            conn, _ = listener.accept()
            conn.settimeout(5)
            with conn:
                data = b""
                for _ in range(2):  # two requests on one keep-alive connection
                    while b"\r\n\r\n" not in data:
                        data += receive(conn)
                    head, _, rest = data.partition(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                    while len(rest) < length:
                        rest += receive(conn)
                    received.append((head.split(b"\r\n")[0], json.loads(rest[:length])))
                    data = rest[length:]
                    conn.sendall(PLAIN)

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        client = BlockingConnection(f"http://127.0.0.1:{port}/rpc", {"A2A-Version": "1.0"})
        try:
            assert client.post_json({"n": 1}) == {"result": {"ok": True}}
            assert client.post_json({"n": 2}) == {"result": {"ok": True}}
        finally:
            client.close()
            server.join(10)
    assert received == [(b"POST /rpc HTTP/1.1", {"n": 1}), (b"POST /rpc HTTP/1.1", {"n": 2})]


def test_any_status_is_read_whole_with_its_headers_and_sse_events():
    reader = ResponseReader()
    stream = (
        b'event: message\r\ndata: {"a": 1}\r\n\r\n: keepalive\r\n\r\n'
        b'id: 7\r\ndata: {"b":\r\ndata: 2}\r\n\r\n'
    )
    reader.feed(
        b"HTTP/1.1 429 Too Many\r\nRetry-After: 1\r\nContent-Length: 2\r\n\r\n{}"
        + (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(stream), stream)
    )
    refused = reader.next_response()
    assert (refused.status, refused.headers["retry-after"], refused.json()) == (429, "1", {})
    events = reader.next_response()
    assert events.headers["content-type"] == "text/event-stream"
    assert events.sse_data() == [{"a": 1}, {"b": 2}]
