"""Bearer auth, rate limiting and the Origin check, through the real daemon."""

import logging

import pytest
from http_fakes import serving
from trio_websocket import ConnectionRejected, open_websocket_url

KEY = "k-7f3a9c0e1d2b4a68"


def ws_url(client, path="/api/events"):
    return client.roost_url.replace("http://", "ws://") + path


async def test_without_a_key_everything_is_open(make_kernel):
    async with serving(make_kernel()) as client:
        assert (await client.get("/api/agents")).status_code == 200


async def test_key_required_on_api_but_not_on_health(make_kernel):
    async with serving(make_kernel(api_key=KEY)) as client:
        missing = await client.get("/api/agents")
        wrong = await client.get("/api/agents", headers={"Authorization": "Bearer nope"})
        basic = await client.get("/api/agents", headers={"Authorization": f"Basic {KEY}"})
        in_query = await client.get("/api/agents", params={"token": KEY})
        right = await client.get("/api/agents", headers={"Authorization": f"Bearer {KEY}"})
        health = await client.get("/health")
        unknown = await client.get("/nowhere")
    for refused in (missing, wrong, basic, in_query, unknown):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.json()["error"]["code"] == "unauthorized"
        assert KEY not in refused.text
    assert "missing" in missing.json()["error"]["message"]
    assert "wrong" in wrong.json()["error"]["message"]
    assert right.status_code == 200
    assert health.status_code == 200


async def test_key_from_the_environment_variable(make_kernel, monkeypatch):
    monkeypatch.setenv("ROOST_TEST_KEY_VAR", KEY)
    async with serving(make_kernel(api_key_env="ROOST_TEST_KEY_VAR")) as client:
        assert (await client.get("/api/tools")).status_code == 401
        ok = await client.get("/api/tools", headers={"Authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200


async def test_websocket_auth_by_header_or_token_query(make_kernel):
    async with serving(make_kernel(api_key=KEY)) as client:
        with pytest.raises(ConnectionRejected) as missing:
            async with open_websocket_url(ws_url(client)):
                pass
        assert missing.value.status_code == 401
        with pytest.raises(ConnectionRejected) as wrong:
            async with open_websocket_url(ws_url(client, "/api/events?token=nope")):
                pass
        assert wrong.value.status_code == 401
        headers = [(b"Authorization", f"Bearer {KEY}".encode())]
        async with open_websocket_url(ws_url(client), extra_headers=headers) as ws:
            assert not ws.closed
        async with open_websocket_url(ws_url(client, f"/api/events?token={KEY}")) as ws:
            assert not ws.closed


async def test_the_key_never_reaches_the_logs(make_kernel, caplog):
    caplog.set_level(logging.DEBUG)
    async with serving(make_kernel(api_key=KEY)) as client:
        await client.get("/api/agents", headers={"Authorization": f"Bearer {KEY}"})
        await client.get("/api/agents", headers={"Authorization": f"Bearer {KEY}x"})
        async with open_websocket_url(ws_url(client, f"/api/events?token={KEY}")):
            pass
    server_side = [r for r in caplog.records if r.name.startswith(("roost", "hypercorn", "quart"))]
    assert any(r.name == "roost.http.access" for r in server_side)  # the log did run
    # (The websocket client library logs its own URL; only the daemon's logs are ours.)
    assert not [r for r in server_side if KEY in r.getMessage()]


async def test_a_key_in_an_encoded_query_never_reaches_the_access_log(make_kernel, caplog):
    # Regression: the access log's request line is the decoded path, so a key sent with
    # its "?" percent-encoded (a client that encoded the whole URL) was logged whole.
    caplog.set_level(logging.INFO, logger="roost.http.access")
    async with serving(make_kernel(api_key=KEY)) as client:
        for path in (
            f"/api/events%3Ftoken={KEY}",
            f"/api/events%3ftoken%3D{KEY}",
            f"/api/agents;token={KEY}",
            f"/api/agents?x=1&token={KEY}",
        ):
            assert (await client.get(path)).status_code == 401
    lines = [r.getMessage() for r in caplog.records if r.name == "roost.http.access"]
    # (Now and then hypercorn logs a request twice, once without its status.)
    assert len(lines) >= 4 and all('"GET /api/' in line for line in lines), lines
    assert not [line for line in lines if KEY in line], lines


async def test_rate_limit_answers_429_with_retry_after(make_kernel):
    async with serving(
        make_kernel(rate_limit_per_s=0.5, rate_limit_burst=3, rate_limit_loopback=True)
    ) as client:
        statuses = [(await client.get("/api/agents")).status_code for _ in range(3)]
        limited = await client.get("/api/agents")
        health = [(await client.get("/health")).status_code for _ in range(10)]
    assert statuses == [200, 200, 200]
    assert limited.status_code == 429
    assert limited.json()["error"]["code"] == "rate_limited"
    retry_after = limited.headers["retry-after"]
    assert retry_after.isdigit() and int(retry_after) >= 1
    assert health == [200] * 10


async def test_failed_auth_attempts_are_rate_limited_too(make_kernel):
    kernel = make_kernel(
        api_key=KEY, rate_limit_per_s=0.5, rate_limit_burst=2, rate_limit_loopback=True
    )
    async with serving(kernel) as client:
        bad = {"Authorization": "Bearer guess"}
        statuses = [(await client.get("/api/agents", headers=bad)).status_code for _ in range(3)]
    assert statuses == [401, 401, 429]


async def test_rate_limit_applies_to_websocket_handshakes(make_kernel):
    async with serving(
        make_kernel(rate_limit_per_s=0.5, rate_limit_burst=1, rate_limit_loopback=True)
    ) as client:
        async with open_websocket_url(ws_url(client)):
            pass
        with pytest.raises(ConnectionRejected) as refused:
            async with open_websocket_url(ws_url(client)):
                pass
    assert refused.value.status_code == 429


@pytest.mark.parametrize(
    ("origin", "allowed", "status"),
    [
        ("http://evil.example", (), 403),
        ("null", (), 403),
        ("http://localhost:5173", (), 200),
        ("http://127.0.0.1:8470", (), 200),
        ("https://dash.example", ("https://dash.example",), 200),
        ("https://other.example", ("https://dash.example",), 403),
    ],
)
async def test_origin_check(make_kernel, origin, allowed, status):
    async with serving(make_kernel(allowed_origins=allowed)) as client:
        response = await client.get("/api/agents", headers={"Origin": origin})
        health = await client.get("/health", headers={"Origin": origin})
    assert response.status_code == status
    assert health.status_code == status  # DNS rebinding protection covers every route
    if status == 403:
        assert response.json()["error"]["code"] == "origin_forbidden"
        assert "http.allowed_origins" in response.json()["error"]["message"]
    else:
        assert response.headers["access-control-allow-origin"] == origin


async def test_foreign_origin_websocket_is_refused(make_kernel):
    async with serving(make_kernel()) as client:
        with pytest.raises(ConnectionRejected) as refused:
            async with open_websocket_url(
                ws_url(client), extra_headers=[(b"Origin", b"http://evil.example")]
            ):
                pass
    assert refused.value.status_code == 403


async def test_cors_preflight_needs_no_token(make_kernel):
    async with serving(
        make_kernel(api_key=KEY, allowed_origins=("https://dash.example",))
    ) as client:
        response = await client.options(
            "/api/agents/echo/message",
            headers={"Origin": "https://dash.example", "Access-Control-Request-Method": "POST"},
        )
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "https://dash.example"
    assert "Authorization" in response.headers["access-control-allow-headers"]
