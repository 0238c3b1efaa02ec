"""A2A on one keep-alive connection: pipelined requests, a streamed (SSE) answer among
them, and what follows it."""

import json
from urllib.parse import urlsplit

import trio


def rpc(method, params, rid):
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()
    return (
        b"POST /a2a/agents/echo/jsonrpc HTTP/1.1\r\nHost: localhost\r\nA2A-Version: 1.0\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )


def message(text, mid):
    return {"message": {"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}]}}


async def read_response(stream, buffer):
    """(status, headers, body, rest of buffer); chunked bodies are de-chunked."""

    async def fill():
        nonlocal buffer
        data = await stream.receive_some(65536)
        assert data, f"connection closed early: {buffer[:200]!r}"
        buffer += data

    while b"\r\n\r\n" not in buffer:
        await fill()
    head, buffer = buffer.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
    }
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in buffer:
                await fill()
            size_line, buffer = buffer.split(b"\r\n", 1)
            size = int(size_line, 16)
            while len(buffer) < size + 2:
                await fill()
            body, buffer = body + buffer[:size], buffer[size + 2 :]
            if size == 0:
                break
    else:
        length = int(headers["content-length"])
        while len(buffer) < length:
            await fill()
        body, buffer = buffer[:length], buffer[length:]
    return int(lines[0].split(" ")[1]), headers, body, buffer


async def test_pipelined_send_stream_and_get_on_one_connection(daemon):
    _, url = daemon
    parts = urlsplit(url)
    stream = await trio.open_tcp_stream(parts.hostname, parts.port)
    with trio.fail_after(20):
        await stream.send_all(
            rpc("SendMessage", message("one", "m-1"), 1)
            + rpc("SendStreamingMessage", message("two", "m-2"), 2)
            + rpc("SendMessage", message("three", "m-3"), 3)
        )
        buffer = b""
        status, headers, body, buffer = await read_response(stream, buffer)
        assert status == 200 and headers["content-type"] == "application/json"
        first = json.loads(body)
        assert (
            first["id"] == 1
            and first["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        )

        status, headers, body, buffer = await read_response(stream, buffer)
        assert status == 200 and headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line[6:]) for line in body.decode().split("\n") if line.startswith("data: ")
        ]
        assert all(e["id"] == 2 for e in events)
        assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert any("artifactUpdate" in e["result"] for e in events)

        status, _, body, buffer = await read_response(stream, buffer)
        third = json.loads(body)
        assert third["id"] == 3 and third["result"]["task"]["artifacts"][0]["parts"] == [
            {"text": "echo: three"}
        ]

        task_id = first["result"]["task"]["id"]
        await stream.send_all(rpc("GetTask", {"id": task_id}, 4))
        status, _, body, buffer = await read_response(stream, buffer)
        assert json.loads(body)["result"]["id"] == task_id
    await stream.aclose()


async def test_streaming_first_then_fast_requests_on_fresh_connections(daemon):
    import httpx

    _, url = daemon
    async with httpx.AsyncClient(base_url=url, timeout=10, headers={"A2A-Version": "1.0"}) as http:
        async with http.stream(
            "POST", "/a2a/agents/echo/rest/message:stream", json=message("sse", "m-s")
        ) as response:
            assert response.status_code == 200
            lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
        assert (
            json.loads(lines[-1][6:])["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        )
        sent = await http.post("/a2a/agents/echo/rest/message:send", json=message("rest", "m-r"))
        assert sent.status_code == 200 and sent.headers["content-type"] == "application/a2a+json"
        assert sent.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        listed = await http.get("/a2a/agents/echo/rest/tasks", params={"pageSize": "1"})
        assert listed.status_code == 200 and listed.json()["pageSize"] == 1
        card = await http.get("/.well-known/agent-card.json")
        assert card.status_code == 200 and card.json()["url"].startswith(url)
        again = await http.get(
            "/.well-known/agent-card.json", headers={"If-None-Match": card.headers["etag"]}
        )
        assert again.status_code == 304 and again.content == b""
