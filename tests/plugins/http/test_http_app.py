"""The REST API against a real daemon on 127.0.0.1 (a fake kernel behind it)."""

import json

import pytest
from http_fakes import serving
from roost.kernel import ActorStopped, AskTimeout, RoostError, ToolDenied, TraceContext
from roost.plugins.http import status_for


def error_of(response) -> dict:
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert {"code", "message"} <= set(body["error"])
    return body["error"]


async def test_health_reports_status_agent_count_and_version(make_kernel):
    async with serving(make_kernel()) as client:
        response = await client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["agents"] == 2
    assert body["version"]


async def test_agents_list_and_detail(make_kernel):
    async with serving(make_kernel()) as client:
        listing = await client.get("/api/agents")
        detail = await client.get("/api/agents/coder")
    assert [a["name"] for a in listing.json()["agents"]] == ["echo", "coder"]
    assert detail.status_code == 200
    assert detail.json()["name"] == "coder"
    assert detail.json()["model"] == "echo-1"


async def test_unknown_agent_is_404_naming_the_known_agents(make_kernel):
    async with serving(make_kernel()) as client:
        for response in [
            await client.get("/api/agents/nobody"),
            await client.post("/api/agents/nobody/message", json={"message": "hi"}),
            await client.get("/api/tools", params={"agent": "nobody"}),
        ]:
            assert response.status_code == 404
            error = error_of(response)
            assert error["code"] == "agent_not_found"
            assert "nobody" in error["message"]
            assert "coder, echo" in error["message"]


async def test_message_round_trip(make_kernel):
    kernel = make_kernel()
    async with serving(kernel) as client:
        response = await client.post(
            "/api/agents/echo/message",
            json={"message": "hello", "session_id": "s-42", "timeout": 30},
        )
    assert response.status_code == 200
    body = response.json()
    assert body["agent"] == "echo"
    assert body["reply"] == "echo: hello"
    assert body["session_id"] == "s-42"
    assert body["is_error"] is False
    assert response.headers["x-roost-trace-id"] == body["trace_id"]
    assert kernel.sent[0]["message"] == "hello"
    assert kernel.sent[0]["timeout"] == 30.0


async def test_message_continues_the_callers_trace_from_headers(make_kernel):
    kernel = make_kernel()
    caller = TraceContext.new("outside-agent")
    async with serving(kernel) as client:
        response = await client.post(
            "/api/agents/echo/message", json={"message": "hi"}, headers=caller.to_headers()
        )
        openstarry = await client.post(
            "/api/agents/echo/message",
            json={"message": "hi"},
            headers={"X-OpenStarry-Trace-ID": "0af7651916cd43dd8448eb211c80319c"},
        )
    assert response.status_code == 200
    assert response.json()["trace_id"] == caller.trace_id
    trace = kernel.sent[0]["trace"]
    assert trace.path == ("outside-agent", "echo")
    assert trace.depth == 2
    assert openstarry.json()["trace_id"] == "0af7651916cd43dd8448eb211c80319c"


async def test_trace_at_max_depth_trips_the_breaker_with_508(make_kernel):
    kernel = make_kernel()
    headers = {"X-Roost-Trace-Depth": "5", "X-Roost-Trace-Path": "a,b,c,d,e"}
    async with serving(kernel) as client:
        response = await client.post(
            "/api/agents/echo/message", json={"message": "hi"}, headers=headers
        )
    assert response.status_code == 508
    error = error_of(response)
    assert error["code"] == "recursion_limit"
    assert error["path"] == ["a", "b", "c", "d", "e", "echo"]


async def test_malformed_trace_ids_are_ignored_and_a_malformed_depth_is_refused(make_kernel):
    kernel = make_kernel()
    headers = {"traceparent": "00-zz-yy-01", "X-Roost-Trace-Id": "x" * 5000}
    async with serving(kernel) as client:
        response = await client.post(
            "/api/agents/echo/message", json={"message": "hi"}, headers=headers
        )
        refused = await client.post(
            "/api/agents/echo/message",
            json={"message": "hi"},
            headers={**headers, "X-Roost-Trace-Depth": "-3"},
        )
    assert response.status_code == 200
    assert kernel.sent[0]["trace"].depth == 1
    # Issue 15: a bad depth was read as none, restarting the count; now it is refused.
    assert refused.status_code == 400 and len(kernel.sent) == 1
    assert error_of(refused)["field"] == "X-Roost-Trace-Depth"
    assert "whole number" in error_of(refused)["message"]


@pytest.mark.parametrize(
    ("content", "field", "phrase"),
    [
        (b"", "body", "empty"),
        (b"   ", "body", "empty"),
        (b"{bad", "body", "not valid JSON"),
        (b"\xff\xfe{}", "body", "UTF-8"),
        (b"[1, 2]", "body", "must be a JSON object"),
        (b'"hello"', "body", "got a string"),
        (b"[" * 200_000, "body", "nested too deeply"),
        (b"{}", "message", "required"),
        (b'{"message": 5}', "message", "must be a string"),
        (b'{"message": null}', "message", "must be a string"),
        (b'{"message": "  "}', "message", "must not be empty"),
        (b'{"message": "hi", "session_id": 7}', "session_id", "must be a string"),
        (b'{"message": "hi", "session_id": ""}', "session_id", "printable"),
        (b'{"message": "hi", "session_id": "a\\nb"}', "session_id", "printable"),
        (b'{"message": "hi", "mesage": "typo"}', "mesage", "unknown field"),
        (b'{"message": "hi", "timeout": -1}', "timeout", "seconds"),
        (b'{"message": "hi", "timeout": true}', "timeout", "seconds"),
        # 1e999 is JSON syntax that decodes to infinity; NaN is no JSON but json.loads takes it
        (b'{"message": "hi", "timeout": 1e999}', "timeout", "finite number"),
        (b'{"message": "hi", "timeout": NaN}', "timeout", "finite number"),
    ],
)
async def test_bad_message_body_is_400_naming_the_field(make_kernel, content, field, phrase):
    kernel = make_kernel()
    async with serving(kernel) as client:
        response = await client.post(
            "/api/agents/echo/message",
            content=content,
            headers={"Content-Type": "application/json"},
        )
        health = await client.get("/health")
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["code"] == "invalid_request"
    assert error["field"] == field
    assert phrase in error["message"]
    assert kernel.sent == []
    assert health.status_code == 200


async def test_a_timeout_too_big_for_a_float_is_400_not_a_crash(make_kernel):
    # On main, an integer past the largest float reached math.isfinite, whose OverflowError
    # answered 500; it is a bad timeout like any other.
    kernel = make_kernel()
    content = b'{"message": "hi", "timeout": 1' + b"0" * 400 + b"}"
    async with serving(kernel) as client:
        response = await client.post(
            "/api/agents/echo/message",
            content=content,
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 400, response.text
    assert error_of(response)["field"] == "timeout"
    assert kernel.sent == []


async def test_body_over_the_cap_is_413_and_the_daemon_keeps_serving(make_kernel):
    kernel = make_kernel(max_body_bytes=1000)
    async with serving(kernel) as client:
        big = json.dumps({"message": "x" * 5000}).encode()
        response = await client.post("/api/agents/echo/message", content=big)
        after = await client.post("/api/agents/echo/message", json={"message": "small"})
    assert response.status_code == 413
    assert error_of(response)["code"] == "body_too_large"
    assert "1000 bytes" in error_of(response)["message"]
    assert after.status_code == 200
    assert [s["message"] for s in kernel.sent] == ["small"]


async def test_chunked_body_over_the_cap_is_413(make_kernel):
    kernel = make_kernel(max_body_bytes=1000)

    async def chunks():
        yield b'{"message": "'
        for _ in range(100):
            yield b"x" * 100
        yield b'"}'

    async with serving(kernel) as client:
        response = await client.post("/api/agents/echo/message", content=chunks())
        health = await client.get("/health")
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert error_of(response)["code"] == "body_too_large"
    assert health.status_code == 200
    assert kernel.sent == []


async def test_unknown_route_is_404_json(make_kernel):
    async with serving(make_kernel()) as client:
        response = await client.get("/no/such/thing")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"
    assert "/no/such/thing" in error_of(response)["message"]


async def test_wrong_method_is_405_json_with_allow(make_kernel):
    async with serving(make_kernel()) as client:
        response = await client.delete("/api/agents")
        get_message = await client.get("/api/agents/echo/message")
    assert response.status_code == 405
    assert "GET" in response.headers["allow"]
    assert error_of(response)["code"] == "method_not_allowed"
    assert get_message.status_code == 405
    assert "POST" in error_of(get_message)["message"]


async def test_plain_http_to_the_websocket_endpoint_is_a_json_error(make_kernel):
    async with serving(make_kernel()) as client:
        response = await client.get("/api/events")
    assert response.status_code == 400
    assert "websocket" in error_of(response)["message"]


async def test_unexpected_error_is_500_without_details_or_traceback(make_kernel, caplog):
    kernel = make_kernel()
    kernel.fail_with = ZeroDivisionError("secret internal detail")
    async with serving(kernel) as client:
        response = await client.post("/api/agents/echo/message", json={"message": "hi"})
        after = await client.get("/health")
    assert response.status_code == 500
    assert error_of(response)["code"] == "internal_error"
    assert "secret" not in response.text
    assert "Traceback" not in response.text
    assert after.status_code == 200
    assert any("secret internal detail" in (r.exc_text or str(r.exc_info)) for r in caplog.records)


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (AskTimeout("agent echo did not answer within 1 s"), 504, "ask_timeout"),
        (ActorStopped("agent echo is stopped"), 503, "actor_stopped"),
        (ToolDenied("not allowed"), 403, "tool_denied"),
        (RoostError("agent 'echo' is unavailable: no API key"), 500, "roost_error"),
    ],
)
async def test_roost_errors_keep_their_code_and_message(make_kernel, error, status, code):
    kernel = make_kernel()
    kernel.fail_with = error
    async with serving(kernel) as client:
        response = await client.post("/api/agents/echo/message", json={"message": "hi"})
    assert response.status_code == status == status_for(error)
    assert error_of(response) == {"code": code, "message": str(error)}


async def test_tools_all_and_per_agent(make_kernel):
    async with serving(make_kernel()) as client:
        everything = await client.get("/api/tools")
        for_echo = await client.get("/api/tools", params={"agent": "echo"})
        blank = await client.get("/api/tools", params={"agent": " "})
    assert [t["name"] for t in everything.json()["tools"]] == ["read", "bash", "agent_echo"]
    tool = for_echo.json()["tools"][0]
    assert tool["name"] == "read"
    assert tool["inputSchema"] == {"type": "object", "properties": {}}
    assert tool["owner"] == "tools"
    assert blank.status_code == 400
    assert error_of(blank)["field"] == "agent"


async def test_health_says_stopping_once_shutdown_begins(make_kernel):
    from roost.plugins.http import create_app, daemon_state

    kernel = make_kernel()
    app = create_app(kernel)
    async with serving(kernel, app=app) as client:
        daemon_state(app).closing.set()
        response = await client.get("/health")
    assert response.status_code == 503
    assert response.json()["status"] == "stopping"
