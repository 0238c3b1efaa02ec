"""Streamable HTTP at /mcp and /agents/<name>/mcp on a real daemon socket (127.0.0.1)."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
from mcp_server_fixtures import INITIALIZE
from roost.plugins.http import open_daemon
from roost.plugins.mcp import _protocol as p

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MODERN_META = p.stateless_meta({"name": "t", "version": "1"})


@pytest.fixture
async def base_url(kernel):
    async with open_daemon(kernel) as url:
        yield url


def sse_messages(text):
    out = []
    for block in text.split("\n\n"):
        data = [line[5:].strip() for line in block.splitlines() if line.startswith("data:")]
        if data and "".join(data):
            out.append(json.loads("".join(data)))
    return out


async def open_session(client, url, path="/mcp"):
    r = await client.post(url + path, json=INITIALIZE, headers=ACCEPT)
    assert r.status_code == 200, r.text
    sid = r.headers[p.HEADER_SESSION_ID]
    headers = {**ACCEPT, p.HEADER_SESSION_ID: sid, p.HEADER_PROTOCOL_VERSION: "2025-11-25"}
    r = await client.post(
        url + path, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    assert r.status_code == 202
    return headers


def modern(method, params=None, request_id=1):
    params = p.with_meta(params, MODERN_META)
    headers = {**ACCEPT, p.HEADER_PROTOCOL_VERSION: "2026-07-28", p.HEADER_METHOD: method}
    if "name" in params or "uri" in params:
        headers[p.HEADER_NAME] = p.encode_header_value(params.get("name", params.get("uri")))
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, headers


async def test_session_lifecycle_json_and_sse_and_delete(base_url):
    async with httpx.AsyncClient(timeout=10) as client:
        headers = await open_session(client, base_url)
        r = await client.post(
            base_url + "/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers=headers,
        )
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        names = [t["name"] for t in r.json()["result"]["tools"]]
        assert "agent_alpha" in names and not any("secret" in n for n in names)
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        }
        r = await client.post(base_url + "/mcp", json=call, headers=headers)
        assert r.headers["content-type"].startswith("text/event-stream")
        replies = [m for m in sse_messages(r.text) if m.get("id") == 3]
        assert replies[0]["result"]["content"][0]["text"] == "echo:hi:alpha"
        r = await client.delete(base_url + "/mcp", headers=headers)
        assert r.status_code == 204
        r = await client.post(
            base_url + "/mcp", json={"jsonrpc": "2.0", "id": 4, "method": "ping"}, headers=headers
        )
        assert r.status_code == 404


async def test_session_header_rules(base_url):
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.post(
            base_url + "/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers=ACCEPT,
        )
        assert r.status_code == 400 and "Mcp-Session-Id" in r.json()["error"]["message"]
        r = await client.post(
            base_url + "/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**ACCEPT, p.HEADER_SESSION_ID: "nope"},
        )
        assert r.status_code == 404
        headers = await open_session(client, base_url)
        r = await client.post(
            base_url + "/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
            headers={**headers, p.HEADER_PROTOCOL_VERSION: "1999-01-01"},
        )
        assert r.status_code == 400
        r = await client.post(
            base_url + "/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
            headers={**headers, p.HEADER_PROTOCOL_VERSION: "2025-06-18"},
        )
        assert r.status_code == 400 and "negotiated" in r.json()["error"]["message"]
        # a session opened at /mcp is not valid at an agent's endpoint
        r = await client.post(
            base_url + "/agents/beta/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
            headers=headers,
        )
        assert r.status_code == 404


async def test_bad_bodies_are_rejected_with_json_rpc_errors(base_url):
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.post(base_url + "/mcp", content=b"{not json", headers=ACCEPT)
        assert r.status_code == 400 and r.json()["error"]["code"] == -32700
        r = await client.post(base_url + "/mcp", json=[INITIALIZE], headers=ACCEPT)
        assert r.status_code == 400 and r.json()["error"]["code"] == -32600
        r = await client.post(
            base_url + "/mcp", content=b"{}", headers={**ACCEPT, "Content-Type": "text/plain"}
        )
        assert r.status_code == 415
        r = await client.post(
            base_url + "/mcp", json=INITIALIZE, headers={**ACCEPT, "Origin": "https://evil.example"}
        )
        assert r.status_code == 403
        r = await client.post(base_url + "/agents/nobody/mcp", json=INITIALIZE, headers=ACCEPT)
        assert r.status_code == 404


async def test_agent_endpoint_serves_message_and_exposed_tools_only(base_url):
    async with httpx.AsyncClient(timeout=10) as client:
        headers = await open_session(client, base_url, "/agents/alpha/mcp")
        r = await client.post(
            base_url + "/agents/alpha/mcp",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers=headers,
        )
        names = [t["name"] for t in r.json()["result"]["tools"]]
        assert names == ["echo", "message", "shared", "sleepy", "steps"]
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "secret", "arguments": {}},
        }
        r = await client.post(
            base_url + "/agents/alpha/mcp",
            json=call,
            headers={**headers, "Accept": "application/json"},
        )
        assert r.json()["error"]["code"] == -32602


async def test_stateless_requests_on_the_same_endpoint(base_url):
    async with httpx.AsyncClient(timeout=10) as client:
        body, headers = modern("server/discover", {})
        r = await client.post(base_url + "/mcp", json=body, headers=headers)
        assert r.status_code == 200 and p.HEADER_SESSION_ID not in r.headers
        assert "2026-07-28" in r.json()["result"]["supportedVersions"]
        body, headers = modern("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        r = await client.post(base_url + "/mcp", json=body, headers=headers)
        reply = (
            [m for m in sse_messages(r.text) if "id" in m][0]
            if r.headers["content-type"].startswith("text/event-stream")
            else r.json()
        )
        assert reply["result"]["resultType"] == "complete"
        body, headers = modern("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        r = await client.post(
            base_url + "/mcp", json=body, headers={**headers, p.HEADER_NAME: "other"}
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == -32020
        body, headers = modern("tools/list", {})
        body["params"]["_meta"][p.META_PROTOCOL_VERSION] = "2099-01-01"
        r = await client.post(
            base_url + "/mcp",
            json=body,
            headers={**headers, p.HEADER_PROTOCOL_VERSION: "2099-01-01"},
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == -32022
        body, headers = modern("nope/nothing", {})
        r = await client.post(base_url + "/mcp", json=body, headers=headers)
        assert r.status_code == 404 and r.json()["error"]["code"] == -32601
        r = await client.get(base_url + "/mcp", headers={"Accept": "text/event-stream"})
        assert r.status_code == 405


async def test_get_stream_delivers_list_changed(base_url, kernel):
    from roost.kernel import Tool, ToolResult, ToolSpec

    async def noop(call, ctx):
        return ToolResult.text("ok")

    async with httpx.AsyncClient(timeout=10) as client:
        headers = await open_session(client, base_url)
        async with client.stream(
            "GET", base_url + "/mcp", headers={**headers, "Accept": "text/event-stream"}
        ) as r:
            assert r.status_code == 200
            r2 = await client.get(
                base_url + "/mcp", headers={**headers, "Accept": "text/event-stream"}
            )
            assert (
                r2.status_code == 409
            )  # the GET stream is registered (its session watches since opened)
            kernel.add_tool(Tool(ToolSpec("latecomer", owner="mcptest"), noop))
            with trio.fail_after(5):
                async for line in r.aiter_lines():
                    if line.startswith("data:") and "list_changed" in line:
                        assert json.loads(line[5:])["method"] == "notifications/tools/list_changed"
                        break


async def test_sse_stream_resumes_with_last_event_id(base_url):
    async with httpx.AsyncClient(timeout=10) as client:
        headers = await open_session(client, base_url)
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {"name": "steps", "arguments": {}, "_meta": {"progressToken": 1}},
        }
        r = await client.post(base_url + "/mcp", json=call, headers=headers)
        ids = [line[3:].strip() for line in r.text.splitlines() if line.startswith("id:")]
        assert len(ids) >= 3
        first_real = ids[1]  # ids[0] primes the stream
        r = await client.get(
            base_url + "/mcp",
            headers={**headers, "Accept": "text/event-stream", "Last-Event-ID": first_real},
        )
        replayed = sse_messages(r.text)
        assert replayed and replayed[-1]["id"] == 7
        assert [
            m["params"]["progress"] for m in replayed if m.get("method") == "notifications/progress"
        ] == [2, 3]


# Sent as latin-1 bytes, as a header is: "²" (0xB2) passes str.isdigit(); "١٢" arrives as mojibake.
@pytest.mark.parametrize(
    "seq", ["9" * 5000, "²", "١٢", "+1", " 1", "1_000", "-1", "1e3", "", "1" * 19, "2.5"]
)
async def test_a_last_event_id_number_not_in_ascii_digits_is_a_404_not_a_500(base_url, seq):
    # Regression: the event number of Last-Event-ID went to int() unbounded; past Python's
    # 4300-digit limit int() raised and the daemon answered 500.
    async with httpx.AsyncClient(timeout=10) as client:
        headers = await open_session(client, base_url)
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
        call["params"] = {"name": "echo", "arguments": {"text": "hi"}}
        r = await client.post(base_url + "/mcp", json=call, headers=headers)
        stream_id = r.text.splitlines()[0][3:].strip().rpartition(".")[0]  # the priming id
        resume = {**headers, "Accept": "text/event-stream"}
        last = f"{stream_id}.{seq}"
        last = last.encode("latin-1") if max(last) <= "\xff" else last.encode()
        r = await client.get(base_url + "/mcp", headers={**resume, "Last-Event-ID": last})
        assert r.status_code == 404 and r.json()["error"]["code"] == -32600, r.text
        assert "Last-Event-ID" in r.json()["error"]["message"]
        assert len(r.json()["error"]["message"]) < 200
        r = await client.get(
            base_url + "/mcp", headers={**resume, "Last-Event-ID": f"{stream_id}.0"}
        )
        assert r.status_code == 200, r.text  # the stream itself resumes


async def test_stateless_client_disconnect_cancels_the_work(base_url, tools_plugin):
    body, headers = modern("tools/call", {"name": "sleepy", "arguments": {}})
    async with httpx.AsyncClient(timeout=10) as client:
        async with trio.open_nursery() as nursery:

            async def call():
                async with client.stream(
                    "POST", base_url + "/mcp", json=body, headers=headers
                ) as r:
                    await r.aread()

            nursery.start_soon(call)
            with trio.fail_after(5):
                await tools_plugin.sleepy_started.wait()
            nursery.cancel_scope.cancel()  # drop the connection mid-call
    with trio.fail_after(5):
        await tools_plugin.sleepy_cancelled.wait()


async def test_delete_ends_the_session_and_cancels_its_work(base_url, tools_plugin):
    async with httpx.AsyncClient(timeout=10) as client:
        headers = await open_session(client, base_url)
        call = {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "sleepy", "arguments": {}},
        }
        async with trio.open_nursery() as nursery:

            async def run():
                async with client.stream(
                    "POST", base_url + "/mcp", json=call, headers=headers
                ) as r:
                    await r.aread()

            nursery.start_soon(run)
            with trio.fail_after(5):
                await tools_plugin.sleepy_started.wait()
            r = await client.delete(base_url + "/mcp", headers=headers)
            assert r.status_code == 204
            with trio.fail_after(5):
                await tools_plugin.sleepy_cancelled.wait()
            nursery.cancel_scope.cancel()


async def test_stateless_headers_are_required_and_checked(base_url):
    async with httpx.AsyncClient(timeout=10) as client:
        body, headers = modern("tools/list", {})
        del headers[p.HEADER_METHOD]
        r = await client.post(base_url + "/mcp", json=body, headers=headers)
        assert r.status_code == 400 and r.json()["error"]["code"] == -32020
        body, headers = modern("tools/list", {})
        r = await client.post(
            base_url + "/mcp", json=body, headers={**headers, p.HEADER_METHOD: "prompts/list"}
        )
        assert r.status_code == 400 and "Mcp-Method" in r.json()["error"]["message"]
        body, headers = modern("tools/list", {})
        del body["params"]["_meta"]
        r = await client.post(base_url + "/mcp", json=body, headers=headers)
        assert r.status_code == 400 and r.json()["error"]["code"] == -32602
        body, headers = modern("initialize", {})
        r = await client.post(base_url + "/mcp", json=body, headers=headers)
        assert r.status_code == 404 and r.json()["error"]["code"] == -32601


async def test_a_lone_surrogate_in_a_resource_uri_is_refused_naming_the_field_not_a_500(
    base_url,
):
    # Regression: resources/read echoed its uri into "Resource not found: ..."; a lone
    # surrogate there (JSON "\\ud800") could not be encoded as UTF-8 and the daemon answered
    # 500. Refused like tools/call's text: -32602 naming the field.
    read = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "resources/read",
        "params": {"uri": "roost://nothing/\ud800"},
    }
    async with httpx.AsyncClient(timeout=10) as client:
        headers = await open_session(client, base_url)
        body = json.dumps(read).encode()  # "\\ud800" escaped, as JSON can carry it
        r = await client.post(base_url + "/mcp", content=body, headers=headers)
        assert r.status_code == 200, r.text
        error = r.json()["error"]
        assert error["code"] == -32602 and error["data"] == {"field": "params.uri"}
        assert error["message"].startswith("params.uri: contains a lone surrogate (U+D800)")
        r = await client.post(
            base_url + "/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers=headers
        )
        assert r.json()["result"] == {}


async def test_a_tool_answer_holding_a_lone_surrogate_reaches_the_client_as_utf8(tmp_path):
    # Regression: a tool's text with a lone surrogate (a plugin's, decoding bytes with
    # "surrogateescape") could not be encoded as UTF-8: the JSON answer was a 500 and the
    # SSE stream broke off before the answer. It goes as the "\\udcff" escape JSON reads
    # back as sent.
    from mcp_server_fixtures import make_agent
    from roost.kernel import Tool, ToolResult, ToolSpec, default_config, hookimpl, open_kernel

    class Garbled:
        @hookimpl
        def roost_tools(self, config):
            async def garbled(call, ctx):
                return ToolResult.text(b"ok \xff".decode("utf-8", "surrogateescape"))

            return [Tool(ToolSpec("garbled", "Undecodable bytes", owner="t"), garbled)]

    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    agent = make_agent("gamma", expose=["garbled"], tools=["garbled"])
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    call["params"] = {"name": "garbled", "arguments": {}}
    async with (
        open_kernel(config, agents=[agent], plugins=[Garbled()]) as kernel,
        open_daemon(kernel) as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        headers = await open_session(client, url)
        for accept in ("application/json", "application/json, text/event-stream"):
            r = await client.post(url + "/mcp", json=call, headers={**headers, "Accept": accept})
            assert r.status_code == 200, r.text
            text = r.content.decode("utf-8")  # strict
            reply = (
                sse_messages(text)[-1] if "event-stream" in r.headers["content-type"] else r.json()
            )
            assert reply["result"]["content"][0]["text"] == "ok \udcff", text


async def test_a_stateless_notification_whose_meta_is_not_an_object_gets_a_400_not_a_crash(
    base_url,
):
    # Regression: a session-less notification naming 2026-07-28 in its header with a
    # non-object _meta reached .get() on a list: the daemon answered 500.
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"_meta": [1]}}
    headers = {**ACCEPT, p.HEADER_PROTOCOL_VERSION: "2026-07-28"}
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.post(base_url + "/mcp", json=note, headers=headers)
    assert r.status_code == 400 and r.json()["error"]["code"] == p.HEADER_MISMATCH


async def test_sse_stream_ends_with_events_that_came_while_the_consumer_was_sending():
    # Regression: events appended (and the stream closed) while the SSE body was busy
    # sending an earlier event were held back until the 15 s keep-alive.
    from roost.plugins.mcp._http_server import EventLog

    log = EventLog("s")
    log.append({"n": 1})
    seen = []
    with trio.fail_after(2):
        async for item in log.follow(0, keepalive_s=60):
            seen.append(json.loads(item[1])["n"])
            if len(seen) == 1:  # as if the response were being written meanwhile
                log.append({"n": 2})
                log.append({"n": 3})
                log.close()
    assert seen == [1, 2, 3]


async def test_a_session_keeps_only_its_latest_finished_streams(base_url, kernel):
    """Every streamed tools/call left its finished stream (and its events) in the session
    for resumption, up to 256 per session: a thousand busy sessions held a quarter of a
    million. A session keeps the last few finished ones; the latest still resumes."""
    from roost.plugins.mcp._http_server import FINISHED_STREAMS_KEPT, hub_for

    calls = FINISHED_STREAMS_KEPT + 24
    async with httpx.AsyncClient(timeout=10) as client:
        headers = await open_session(client, base_url)
        first_ids = []
        for i in range(calls):
            call = {
                "jsonrpc": "2.0",
                "id": 100 + i,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": str(i)}},
            }
            r = await client.post(base_url + "/mcp", json=call, headers=headers)
            assert r.headers["content-type"].startswith("text/event-stream")
            first_ids.append(
                [line[3:].strip() for line in r.text.splitlines() if line.startswith("id:")][0]
            )
        session = hub_for(kernel).sessions[headers[p.HEADER_SESSION_ID]]
        assert len(session.streams) == FINISHED_STREAMS_KEPT
        resume = {**headers, "Accept": "text/event-stream"}
        r = await client.get(base_url + "/mcp", headers={**resume, "Last-Event-ID": first_ids[-1]})
        assert r.status_code == 200 and sse_messages(r.text)[-1]["id"] == 100 + calls - 1
        r = await client.get(base_url + "/mcp", headers={**resume, "Last-Event-ID": first_ids[0]})
        assert r.status_code == 404


def _open_seconds(hub, server, bound: int, extra: int = 500) -> float:
    """Seconds to open ``extra`` sessions on a hub full at ``bound`` (each one closes the
    least recently used idle session to make room)."""
    import time

    hub.max_sessions = hub.per_caller = bound
    for sid in list(hub.sessions):
        hub.close_session(sid)
    for _ in range(bound):
        hub.open_session(server, None, owner="local", caller=("addr", "127.0.0.1"))
    start = time.perf_counter()
    for _ in range(extra):
        hub.open_session(server, None, owner="local", caller=("addr", "127.0.0.1"))
    seconds = time.perf_counter() - start
    assert len(hub.sessions) == bound
    return seconds


async def test_opening_a_session_at_the_bound_does_not_walk_every_session(kernel):
    """Each initialize listed the caller's sessions, looked through all of them for expired
    ones and, at the bound, for the least recently used idle one: with 1,000 sessions the
    handshakes of 1,000 new MCP callers took seconds (p99 4.9 s under load). Opening one at
    a bound of 2,000 costs about what it costs at 200."""
    from roost.plugins.mcp._http_server import hub_for

    hub = hub_for(kernel)
    server = hub.server_for(None)
    small = min(_open_seconds(hub, server, 200) for _ in range(2))
    large = min(_open_seconds(hub, server, 2000) for _ in range(2))
    assert large / small < 3, f"at 10x the sessions an initialize took {large / small:.1f}x as long"


async def test_a_stateless_header_without_its_body_field_names_the_field_not_none(base_url):
    # Regression: a 2026-07-28 header whose body field was missing was answered "header
    # value 'x' does not match body value None": Python's None, never the field to add.
    body, headers = modern("tools/call", {"arguments": {}})
    headers[p.HEADER_NAME] = "echo"
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    note_headers = {**ACCEPT, p.HEADER_PROTOCOL_VERSION: "2026-07-28"}
    async with httpx.AsyncClient(timeout=10) as client:
        with trio.fail_after(10):
            unnamed = await client.post(base_url + "/mcp", json=body, headers=headers)
            bare = await client.post(base_url + "/mcp", json=note, headers=note_headers)
    for answer, field in [
        (unnamed, "params.name"),
        (bare, f"params._meta['{p.META_PROTOCOL_VERSION}']"),
    ]:
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == p.HEADER_MISMATCH, error
        assert field in error["message"] and "None" not in error["message"], error
