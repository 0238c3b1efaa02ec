"""The A2A and MCP endpoints of a real daemon (real kernel, scripted agent, 127.0.0.1) as
clients nobody here wrote meet them: trailing slashes, the daemon's own errors in each
protocol's shape (read with the official SDKs' models), and no self-throttling on one host."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
from a2a.server.jsonrpc_models import JSONRPCError as A2AJsonRpcError
from google.protobuf import any_pb2, json_format
from google.rpc import code_pb2, error_details_pb2
from mcp.types import JSONRPCError as McpJsonRpcError
from roost.kernel import default_config, open_kernel

KEY = "protocol-key"
A2A = {"A2A-Version": "1.0"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
WORKER = "/a2a/agents/worker"


def send_message(text: str, rpc_id: int = 1, method: str = "SendMessage") -> dict:
    message = {"messageId": f"m-{rpc_id}", "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {"message": message}}


def get_task(task_id: str, rpc_id: int = 1) -> dict:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "GetTask", "params": {"id": task_id}}


def make_config(tmp_path, **http):
    agents = tmp_path / "agents"
    path = agents / "worker" / "agent.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "name": "worker",
                "description": "worker (scripted)",
                "version": "0.1.0",
                "model": {
                    "provider": "scripted",
                    "name": "rules",
                    "script": {"rules": [{"match": ".", "reply": "done: {message}"}]},
                },
                "a2a": {"enabled": True},
            }
        )
    )
    return default_config(
        home=str(tmp_path / "home"),
        agents={"dirs": [str(agents)], "bundled": False},
        http={"port": 0, **http},
    )


@asynccontextmanager
async def daemon(config):
    from roost.plugins.http import open_daemon

    async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client


def error_info(detail: dict) -> error_details_pb2.ErrorInfo:
    """A ``google.rpc.ErrorInfo`` read by protobuf's own JSON parser (so it is well formed)."""
    packed = json_format.ParseDict(detail, any_pb2.Any())
    info = error_details_pb2.ErrorInfo()
    assert packed.Unpack(info), detail
    return info


def a2a_jsonrpc(
    response: httpx.Response, status: int, rpc_code: int
) -> error_details_pb2.ErrorInfo:
    """An A2A JSON-RPC error with ``id`` null and the ErrorInfo ``data`` array; HTTP status kept."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None, body
    error = A2AJsonRpcError.model_validate(body["error"])
    assert error.code == rpc_code and error.message
    info = error_info(error.data[0])
    assert info.metadata["httpStatus"] == str(status)
    return info


def a2a_rest(response: httpx.Response, status: int, canonical: str) -> error_details_pb2.ErrorInfo:
    """An AIP-193 error object: ``code`` the HTTP status, ``status`` a google.rpc.Code name."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status
    assert error["status"] == canonical and canonical in code_pb2.Code.keys()
    assert error["message"]
    return error_info(error["details"][0])


def mcp_error(response: httpx.Response, status: int, rpc_code: int) -> McpJsonRpcError:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = McpJsonRpcError.model_validate(response.json())
    assert error.id is None and error.error.code == rpc_code
    return error


async def test_a2a_and_mcp_endpoints_answer_with_a_trailing_slash_as_without(tmp_path):
    async with daemon(make_config(tmp_path)) as client:
        # A2A JSON-RPC, as a conformance kit joins base URL and "/"
        bare = await client.post(f"{WORKER}/jsonrpc", json=send_message("one"), headers=A2A)
        async with httpx.AsyncClient(
            base_url=f"{client.base_url}{WORKER}/jsonrpc", timeout=10
        ) as kit:
            slashed = await kit.post("/", json=send_message("one"), headers=A2A)
        assert str(slashed.request.url).endswith("/jsonrpc/")
        task_id = slashed.json()["result"]["task"]["id"]
        got = await client.post(f"{WORKER}/jsonrpc/", json=get_task(task_id), headers=A2A)
        # A2A HTTP+JSON
        rest_sent = await client.post(
            f"{WORKER}/rest/message:send/", json=send_message("two")["params"], headers=A2A
        )
        rest_got = await client.get(f"{WORKER}/rest/tasks/{task_id}/", headers=A2A)
        # a streamed A2A answer, and MCP
        streamed = await client.post(
            f"{WORKER}/jsonrpc/",
            json=send_message("three", method="SendStreamingMessage"),
            headers=A2A,
        )
        mcp_bare = await client.post("/mcp", json=MCP_INIT, headers=MCP_HEADERS)
        mcp_slashed = await client.post("/mcp/", json=MCP_INIT, headers=MCP_HEADERS)
        agent_mcp = await client.post("/agents/worker/mcp/", json=MCP_INIT, headers=MCP_HEADERS)
    for reply in (bare, slashed):
        assert reply.status_code == 200
        task = reply.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["parts"][0]["text"] == "done: one"
    assert got.status_code == 200 and got.json()["result"]["id"] == task_id
    assert rest_sent.status_code == 200
    assert rest_sent.json()["task"]["artifacts"][0]["parts"][0]["text"] == "done: two"
    assert rest_got.status_code == 200 and rest_got.json()["id"] == task_id
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert "done: three" in streamed.text
    for reply in (mcp_bare, mcp_slashed, agent_mcp):
        assert reply.status_code == 200, reply.text
        assert reply.json()["result"]["protocolVersion"] == "2025-11-25"
        assert reply.headers["mcp-session-id"]
    assert mcp_bare.json()["result"]["serverInfo"] == mcp_slashed.json()["result"]["serverInfo"]


async def test_daemon_errors_on_a2a_and_mcp_routes_are_in_the_protocol_shape(tmp_path):
    config = make_config(tmp_path, api_key=KEY, max_body_bytes=4096)
    auth = {"Authorization": f"Bearer {KEY}"}
    async with daemon(config) as client:
        # 401: no bearer token
        rpc_401 = await client.post(f"{WORKER}/jsonrpc", json=get_task("x"), headers=A2A)
        rest_401 = await client.get(f"{WORKER}/rest/tasks/x", headers=A2A)
        mcp_401 = await client.post("/mcp", json=MCP_INIT, headers=MCP_HEADERS)
        # 403: an Origin that is not allowed
        evil = {**auth, "Origin": "http://evil.example"}
        rpc_403 = await client.post(
            f"{WORKER}/jsonrpc", json=get_task("x"), headers={**A2A, **evil}
        )
        rest_403 = await client.get(f"{WORKER}/rest/tasks/x", headers={**A2A, **evil})
        mcp_403 = await client.post("/mcp", json=MCP_INIT, headers={**MCP_HEADERS, **evil})
        # 413: over http.max_body_bytes (A2A) or the MCP message limit
        big = send_message("x" * 8000)
        rpc_413 = await client.post(f"{WORKER}/jsonrpc", json=big, headers={**A2A, **auth})
        rest_413 = await client.post(
            f"{WORKER}/rest/message:send", json=big["params"], headers={**A2A, **auth}
        )
        # 404 (no such route under the protocol's prefix) and 405 (wrong method)
        rpc_404 = await client.post(
            f"{WORKER}/jsonrpx", json=get_task("x"), headers={**A2A, **auth}
        )
        rpc_405 = await client.get(f"{WORKER}/jsonrpc", headers={**A2A, **auth})
        mcp_404 = await client.post("/mcp/extra", json=MCP_INIT, headers={**MCP_HEADERS, **auth})
        mcp_405 = await client.put("/mcp", json=MCP_INIT, headers={**MCP_HEADERS, **auth})
        api_404 = await client.get("/api/nothing", headers=auth)
        # the MCP endpoint's own HTTP errors: an unknown agent, GET without a session
        mcp_ghost = await client.post(
            "/agents/ghost/mcp", json=MCP_INIT, headers={**MCP_HEADERS, **auth}
        )
        mcp_get = await client.get("/mcp", headers={"Accept": "text/event-stream", **auth})

    assert (
        rpc_401.headers["www-authenticate"]
        == rest_401.headers["www-authenticate"]
        == 'Bearer realm="roost"'
    )
    assert a2a_jsonrpc(rpc_401, 401, -32000).reason == "UNAUTHORIZED"
    assert a2a_rest(rest_401, 401, "UNAUTHENTICATED").reason == "UNAUTHORIZED"
    assert "Authorization: Bearer" in mcp_error(mcp_401, 401, -32000).error.message
    assert mcp_401.headers["www-authenticate"] == 'Bearer realm="roost"'

    assert a2a_jsonrpc(rpc_403, 403, -32000).reason == "ORIGIN_FORBIDDEN"
    assert a2a_rest(rest_403, 403, "PERMISSION_DENIED").reason == "ORIGIN_FORBIDDEN"
    assert "http.allowed_origins" in mcp_error(mcp_403, 403, -32000).error.message

    info = a2a_jsonrpc(rpc_413, 413, -32600)
    assert (info.reason, info.domain, info.metadata["roostCode"]) == (
        "INVALID_REQUEST",
        "a2a-protocol.org",
        "body_too_large",
    )
    assert a2a_rest(rest_413, 413, "INVALID_ARGUMENT").metadata["roostCode"] == "body_too_large"

    assert a2a_jsonrpc(rpc_404, 404, -32601).reason == "METHOD_NOT_FOUND"
    assert a2a_jsonrpc(rpc_405, 405, -32600).metadata["roostCode"] == "method_not_allowed"
    mcp_error(mcp_404, 404, -32601)
    mcp_error(mcp_405, 405, -32600)
    assert mcp_error(mcp_ghost, 404, -32000).error.data["code"] == "agent_not_found"
    assert mcp_error(mcp_get, 405, -32600).error.data["code"] == "method_not_allowed"
    # roost's own REST API keeps roost's shape
    assert api_404.json()["error"]["code"] == "not_found"


async def test_mcp_body_over_the_message_limit_is_a_jsonrpc_error(tmp_path):
    from roost.plugins.mcp import _protocol as p

    async with daemon(make_config(tmp_path)) as client:
        port = client.base_url.port
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(
                b"POST /mcp/ HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\n"
                b"Content-Length: %d\r\n\r\n{" % (p.MAX_MESSAGE_BYTES + 10)
            )
            data = b""
            while (more := await stream.receive_some(65536)) and b"}}" not in data + more:
                data += more
            data += more
            await stream.aclose()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    error = McpJsonRpcError.model_validate(json.loads(body))
    assert error.id is None and error.error.code == -32600


async def test_rate_limit_answers_on_a2a_and_mcp_routes_are_in_the_protocol_shape(tmp_path):
    config = make_config(
        tmp_path, rate_limit_per_s=0.001, rate_limit_burst=1, rate_limit_loopback=True
    )
    async with daemon(config) as client:
        assert (
            await client.post(f"{WORKER}/jsonrpc", json=get_task("x"), headers=A2A)
        ).status_code == 200
        rpc = await client.post(f"{WORKER}/jsonrpc", json=get_task("x"), headers=A2A)
        rest = await client.get(f"{WORKER}/rest/tasks/x", headers=A2A)
        mcp = await client.post("/mcp", json=MCP_INIT, headers=MCP_HEADERS)
    for limited in (rpc, rest, mcp):
        assert int(limited.headers["retry-after"]) >= 1
    info = a2a_jsonrpc(rpc, 429, -32000)
    assert (info.reason, info.domain) == ("RATE_LIMITED", "roost")
    assert a2a_rest(rest, 429, "RESOURCE_EXHAUSTED").reason == "RATE_LIMITED"
    assert mcp_error(mcp, 429, -32000).error.data == {"code": "rate_limited", "httpStatus": 429}


async def test_an_unhandled_exception_on_a2a_and_mcp_routes_is_a_protocol_500(
    tmp_path, monkeypatch
):
    from a2a.client import ClientConfig, ClientFactory
    from a2a.client.card_resolver import A2ACardResolver
    from a2a.types import GetTaskRequest
    from a2a.utils.errors import InternalError
    from roost.plugins.a2a import _server as a2a_server
    from roost.plugins.mcp import _http_server as mcp_http

    def crash(*args, **kwargs):
        raise RuntimeError("kaboom: secret detail")

    async with daemon(make_config(tmp_path)) as client:
        card = await A2ACardResolver(client, f"{client.base_url}{WORKER}").get_agent_card()
        rest_ifaces = [i for i in card.supported_interfaces if i.protocol_binding == "HTTP+JSON"]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(rest_ifaces)
        sdk = ClientFactory(
            ClientConfig(streaming=False, supported_protocol_bindings=["HTTP+JSON"])
        ).create(card)
        monkeypatch.setattr(a2a_server.A2AService, "execute", crash)
        monkeypatch.setattr(mcp_http, "hub_for", crash)
        try:
            rpc = await client.post(f"{WORKER}/jsonrpc", json=get_task("x"), headers=A2A)
            rest = await client.get(f"{WORKER}/rest/tasks/x", headers=A2A)
            streamed = await client.post(
                f"{WORKER}/jsonrpc",
                json=send_message("s", method="SendStreamingMessage"),
                headers=A2A,
            )
            mcp = await client.post("/mcp", json=MCP_INIT, headers=MCP_HEADERS)
            # the official a2a-sdk HTTP+JSON client reads it as A2A's InternalError
            with trio.fail_after(10), pytest.raises(InternalError):
                await sdk.get_task(GetTaskRequest(id="x"))
        finally:
            await sdk.close()
    for response in (rpc, streamed):
        info = a2a_jsonrpc(response, 500, -32603)
        assert (info.reason, info.domain) == ("INTERNAL_ERROR", "a2a-protocol.org")
    assert a2a_rest(rest, 500, "INTERNAL").reason == "INTERNAL_ERROR"
    assert mcp_error(mcp, 500, -32603)
    assert all("kaboom" not in r.text for r in (rpc, streamed, rest, mcp))


async def test_a_rapid_local_run_of_500_a2a_requests_is_never_throttled(tmp_path):
    """A default daemon: one local client, 500 A2A requests as fast as it can send them."""
    statuses: list[int] = []
    async with daemon(make_config(tmp_path)) as client:
        with trio.fail_after(60):
            for i in range(250):
                rpc = await client.post(
                    f"{WORKER}/jsonrpc", json=get_task(f"nope-{i}", i), headers=A2A
                )
                rest = await client.get(f"{WORKER}/rest/tasks/nope-{i}", headers=A2A)
                statuses += [rpc.status_code, rest.status_code]
                assert rpc.json()["error"]["code"] == -32001  # TaskNotFound, from the A2A handler
    assert 429 not in statuses
    assert statuses.count(200) == 250 and statuses.count(404) == 250
