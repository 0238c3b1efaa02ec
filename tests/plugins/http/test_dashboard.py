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
from roost.plugins.http._traces import MAX_SPANS, TraceLog
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
