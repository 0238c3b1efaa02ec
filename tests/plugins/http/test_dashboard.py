"""The dashboard's server side: its static files (public, under a strict policy), the
recent traces it opens with (``/api/traces``, admins only), and the event stream's key
passed as a websocket subprotocol. The browser half is test_dashboard_browser.py."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
import trio
from roost.kernel import default_config, open_kernel
from roost.plugins.http import open_daemon
from roost.plugins.http._traces import MAX_KEPT_SPANS, MAX_SPANS, TraceLog
from trio_websocket import ConnectionRejected, open_websocket_url

ADMIN_KEY = "admin-key-for-the-dashboard-test"
BOB_KEY = "bob-key-for-the-dashboard-test"


@pytest.fixture
def keyed(tmp_path, monkeypatch):
    monkeypatch.setenv("DASH_TEST_BOB_KEY", BOB_KEY)
    return default_config(
        home=str(tmp_path / "home"),
        http={"port": 0, "api_key": ADMIN_KEY, "keys": {"bob": {"key_env": "DASH_TEST_BOB_KEY"}}},
    )


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def subprotocol(key: str) -> str:
    return "roost.bearer." + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


async def test_the_page_and_its_files_are_public_under_a_strict_policy(keyed):
    async with open_kernel(keyed) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            page = await http.get("/")
            script = await http.get("/dashboard/app.js")
            style = await http.get("/dashboard/style.css")
            missing = await http.get("/dashboard/secret.py")
            api = await http.get("/api/agents")  # the data itself still needs the key
    assert page.status_code == script.status_code == style.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert script.headers["content-type"].startswith("text/javascript")
    assert style.headers["content-type"].startswith("text/css")
    policy = page.headers["content-security-policy"]
    assert (
        "default-src 'none'" in policy
        and "script-src 'self';" in policy
        and "'unsafe-inline'" not in policy
    )
    host = url.removeprefix("http://")
    assert f"connect-src 'self' ws://{host} wss://{host};" in policy
    assert (
        page.headers["x-frame-options"] == "DENY"
        and page.headers["referrer-policy"] == "no-referrer"
    )
    assert '<script src="/dashboard/app.js"' in page.text and "<script>" not in page.text
    assert "innerHTML" not in script.text and "insertAdjacentHTML" not in script.text
    assert missing.status_code == 404 and api.status_code == 401


async def test_recent_traces_are_served_to_admins_as_trees_of_spans(keyed):
    async with open_kernel(keyed) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            sent = await http.post(
                "/api/agents/coordinator/message", json={"message": "hi"}, headers=bearer(ADMIN_KEY)
            )
            trace_id = sent.json()["trace_id"]
            with trio.fail_after(10):
                while True:
                    held = await http.get(f"/api/traces/{trace_id}", headers=bearer(ADMIN_KEY))
                    if held.status_code == 200 and all(
                        s["status"] != "running" for s in held.json()["spans"]
                    ):
                        break
                    await trio.sleep(0.05)
            recent = (await http.get("/api/traces?limit=5", headers=bearer(ADMIN_KEY))).json()
            unknown = await http.get("/api/traces/" + "0" * 32, headers=bearer(ADMIN_KEY))
            bad_limit = await http.get("/api/traces?limit=0", headers=bearer(ADMIN_KEY))
            not_admin = await http.get("/api/traces", headers=bearer(BOB_KEY))
            not_admin_one = await http.get(f"/api/traces/{trace_id}", headers=bearer(BOB_KEY))
    spans = held.json()["spans"]
    names = [(s["kind"], s["name"]) for s in spans if s["kind"] in ("agent", "tool")]
    assert names[:3] == [("agent", "coordinator"), ("tool", "agent_worker"), ("agent", "worker")]
    by_id = {s["span_id"]: s for s in spans}
    reviewer = next(s for s in spans if s["name"] == "reviewer")
    assert by_id[reviewer["parent_span_id"]]["name"] == "agent_reviewer"
    assert recent["traces"][0]["trace_id"] == trace_id and recent["history"] == 100
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "trace_not_found"
    assert bad_limit.status_code == 400 and "limit" in bad_limit.json()["error"]["message"]
    assert not_admin.status_code == not_admin_one.status_code == 403


async def test_a_traces_limit_not_in_ascii_digits_is_a_400_naming_it(keyed):
    hostile = ["١٢", "²", "+1", " 1", "1_000", "-1", "1e3", "9" * 5000, "", "0", "10001"]
    async with open_kernel(keyed) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url, headers=bearer(ADMIN_KEY)) as http:
            for limit in hostile:
                r = await http.get("/api/traces", params={"limit": limit})
                error = r.json()["error"]
                assert r.status_code == 400 and error["field"] == "limit", (limit, r.text)
                assert (
                    error["message"].startswith(
                        "query parameter limit: expected an integer from 1 to 10000"
                    )
                    and len(error["message"]) < 200
                ), (limit, error)
            for limit in ("0005", "10000"):  # leading zeros are fine
                r = await http.get("/api/traces", params={"limit": limit})
                assert r.status_code == 200 and r.json()["kept"] == 0, r.text


async def test_the_event_stream_takes_the_key_as_a_subprotocol_and_never_echoes_it(keyed):
    async with open_kernel(keyed) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        ws = url.replace("http://", "ws://") + "/api/events?kinds=TRACE:"
        async with open_websocket_url(ws, subprotocols=["roost", subprotocol(ADMIN_KEY)]) as socket:
            assert socket.subprotocol == "roost"
            await kernel.send("reviewer", "review this")
            with trio.fail_after(5):
                event = json.loads(await socket.get_message())
            assert event["kind"] == "TRACE:SPAN_START"
        for protocols, status in (
            (["roost", subprotocol("wrong key")], 401),
            (["roost"], 401),
            (["roost", subprotocol(BOB_KEY)], 403),  # not an admin
            (["roost", "roost.bearer.!!not-base64!!"], 401),
        ):
            with pytest.raises(ConnectionRejected) as refused:
                async with open_websocket_url(ws, subprotocols=protocols):
                    pass
            assert refused.value.status_code == status, protocols
            assert ADMIN_KEY not in refused.value.body.decode()


async def test_without_a_trace_history_nothing_is_kept_and_spans_cost_nothing(tmp_path):
    config = default_config(home=str(tmp_path / "home"), http={"port": 0, "trace_history": 0})
    async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        assert kernel.tap.subscriber_count == 0  # nobody follows the spans: none are made
        async with httpx.AsyncClient(base_url=url) as http:
            listed = (await http.get("/api/traces")).json()
    assert listed == {"traces": [], "kept": 0, "history": 0}


def span(trace: str, span_id: str, status: str = "ok", start: float = 0.0) -> dict:
    return {"trace_id": trace, "span_id": span_id, "status": status, "start": start}


def test_the_trace_log_keeps_the_newest_traces_and_a_span_s_latest_record():
    log = TraceLog(max_traces=2)
    log.add(span("t1", "a", "running"))
    log.add(span("t1", "a", "ok"))
    log.add(span("t1", "b", start=-1.0))
    log.add("not a record")
    log.add({"trace_id": 7, "span_id": "x"})
    assert [s["span_id"] for s in log.spans("t1")] == ["b", "a"]  # in the order they began
    assert log.spans("t1")[1]["status"] == "ok"
    log.add(span("t2", "c"))
    log.add(span("t3", "d"))
    assert log.spans("t1") is None and len(log) == 2
    assert [t["trace_id"] for t in log.recent(5)] == ["t3", "t2"]
    for i in range(MAX_SPANS + 10):
        log.add(span("t3", f"s{i}"))
    assert len(log.spans("t3")) == MAX_SPANS


def test_the_trace_log_holds_a_bounded_number_of_spans_in_all():
    # One caller can fill every trace it starts to MAX_SPANS (a breaker refusal is cheap):
    # the history must not hold max_traces * MAX_SPANS records.
    log = TraceLog(max_traces=100)
    for t in range(100):
        for i in range(MAX_SPANS):
            log.add(span(f"t{t}", f"s{i}"))
    held = [t["trace_id"] for t in log.recent(100)]
    assert sum(len(log.spans(t)) for t in held) <= MAX_KEPT_SPANS
    assert held[0] == "t99" and len(log.spans("t99")) == MAX_SPANS  # the newest, whole
    assert log.spans("t0") is None  # the oldest went first
    # the oldest trace, still growing, makes room by dropping the next oldest
    log = TraceLog(max_traces=100)
    log.add(span("slow", "first"))
    for i in range(MAX_KEPT_SPANS - 1):
        log.add(span(f"busy{i // MAX_SPANS}", f"s{i}"))
    log.add(span("slow", "second", start=1.0))
    assert [s["span_id"] for s in log.spans("slow")] == ["first", "second"]
    assert log.spans("busy0") is None and log.spans("busy1") is not None


async def test_a_callers_refused_calls_keep_small_records_in_the_history(keyed):
    # bob (no admin) claims a 64-hop path of 128-character names in MCP _meta: the breaker
    # refuses at once, and the refusal's span names that path (three times, uncut: 16 KB a
    # span, so 100 traces of 2,000 such calls held 3 GB).
    path = [f"hop{i:02d}".ljust(128, "y") for i in range(64)]
    trace_id = "ab" * 16
    meta = {
        "traceparent": f"00-{trace_id}-{'cd' * 8}-01",
        "io.roost/trace-depth": 64,
        "io.roost/trace-path": path,
    }
    mcp = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    async with open_kernel(keyed) as kernel, open_daemon(kernel, graceful_timeout=1) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            bob = {**bearer(BOB_KEY), **mcp}
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "bob", "version": "1"},
                },
            }
            opened = await http.post("/agents/worker/mcp", json=init, headers=bob)
            bob["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
            params = {"name": "message", "arguments": {"message": "hi"}, "_meta": meta}
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
            refused = await http.post("/agents/worker/mcp", json=call, headers=bob)
            assert "past the limit of 5" in refused.text
            with trio.fail_after(10):
                while True:
                    held = await http.get(f"/api/traces/{trace_id}", headers=bearer(ADMIN_KEY))
                    if held.status_code == 200 and held.json()["spans"][0]["end"] is not None:
                        break
                    await trio.sleep(0.05)
    (record,) = held.json()["spans"]
    (mark,) = record["marks"]
    assert (record["kind"], mark["kind"], mark["depth"]) == ("mcp.server", "breaker", 65)
    assert len(json.dumps(record)) < 4_000
