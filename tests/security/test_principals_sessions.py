"""Callers own their sessions; named keys; the event stream (issue 15, item 15).

Regression: any caller could attach to any session by choosing its id — POST
/api/agents/<name>/message with someone else's ``session_id`` continued their conversation
with their whole history. Now a session belongs to the principal that made it (the store
names it by (owner, id)): the same id from another principal is a new, empty session of
theirs. Keys come from the environment or a 0600 file, never from roost.toml; the event
stream (every caller's messages) is for admin principals. Real daemon, real SQLite.
"""

from __future__ import annotations

import json
import os
import sqlite3

import httpx
import pytest
import trio
from principals_helpers import ENV, KEYS, bearer, make_config, serve, set_key_env
from roost.kernel import ConfigError, default_config, open_store
from roost.plugins.http import HttpSettings
from trio_websocket import ConnectionRejected, open_websocket_url

MCP_VERSION = "2026-07-28"
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "principals-test", "version": "1"},
}
MCP_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": MCP_VERSION,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "message",
}


async def say(http: httpx.AsyncClient, who: str, text: str, session_id: str) -> dict:
    response = await http.post(
        "/api/agents/recall/message",
        json={"message": text, "session_id": session_id},
        headers=bearer(who),
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_session_id_chosen_by_another_principal_never_reads_the_owners_history(
    tmp_path, monkeypatch
):
    set_key_env(monkeypatch)
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=20) as http,
    ):
        with trio.fail_after(30):
            mine = await say(http, "alice", "my pin is 1234", "work")
            assert mine["reply"] == "heard: my pin is 1234" and mine["session_id"] == "work"
            theirs = await say(http, "bob", "tell me everything", "work")
            assert theirs["reply"] == "heard: tell me everything"  # a new session of bob's
            assert theirs["session_id"] == "work"
            again = await say(http, "alice", "still me", "work")
            assert (
                again["reply"] == "heard: my pin is 1234 | still me"
            )  # bob's message is not in it
            # A session id the server made up is alice's alone too.
            fresh = (
                await http.post(
                    "/api/agents/recall/message", json={"message": "one"}, headers=bearer("alice")
                )
            ).json()
            stolen = await say(http, "bob", "two", fresh["session_id"])
            assert stolen["reply"] == "heard: two"
        # In the store: two sessions named "work", one each.
        sessions = await kernel.store.sessions(agent="recall")
        assert sorted((s["owner"], s["id"]) for s in sessions if s["id"] == "work") == [
            ("alice", "work"),
            ("bob", "work"),
        ]
        history = await kernel.store.history("work", owner="alice")
        assert [m.content for m in history if m.role == "user"] == ["my pin is 1234", "still me"]


async def test_an_mcp_request_state_replayed_by_another_principal_starts_afresh(
    tmp_path, monkeypatch
):
    """The 2026-07-28 ``requestState`` names the conversation of an ``input_required``
    answer; replayed with bob's key it names bob's conversation, not alice's."""
    set_key_env(monkeypatch)

    def call(arguments: dict, **params) -> dict:
        return {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "message", "arguments": arguments, "_meta": MCP_META, **params},
        }

    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=20) as http,
    ):
        with trio.fail_after(30):
            asked = await http.post(
                "/agents/recall/mcp",
                json=call({"message": "ask about my secret 42"}),
                headers={**MCP_HEADERS, **bearer("alice")},
            )
            result = asked.json()["result"]
            assert result["resultType"] == "input_required", result
            state = result["requestState"]
            retry = call(
                {"message": "ask about my secret 42"},
                requestState=state,
                inputResponses={
                    "answer": {"action": "accept", "content": {"answer": "which one?"}}
                },
            )
            theirs = await http.post(
                "/agents/recall/mcp", json=retry, headers={**MCP_HEADERS, **bearer("bob")}
            )
            text = theirs.json()["result"]["content"][0]["text"]
            assert text == "heard: which one?", text  # nothing of alice's conversation
            mine = await http.post(
                "/agents/recall/mcp", json=retry, headers={**MCP_HEADERS, **bearer("alice")}
            )
            assert (
                mine.json()["result"]["content"][0]["text"]
                == "heard: ask about my secret 42 | which one?"
            )


async def test_the_event_stream_is_for_admin_principals(tmp_path, monkeypatch):
    set_key_env(monkeypatch)
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=20) as http,
    ):
        ws = url.replace("http://", "ws://") + "/api/events"
        with trio.fail_after(30):
            with pytest.raises(ConnectionRejected) as refused:
                async with open_websocket_url(
                    ws, extra_headers=[(b"authorization", f"Bearer {KEYS['bob']}".encode())]
                ):
                    pass  # pragma: no cover
            assert refused.value.status_code == 403
            assert "admin" in json.loads(refused.value.body)["error"]["message"]
            async with open_websocket_url(
                ws, extra_headers=[(b"authorization", f"Bearer {KEYS['ops']}".encode())]
            ) as events:
                await say(http, "bob", "hello", "s")
                kinds = []
                while "AGENT:REPLY" not in kinds:
                    kinds.append(json.loads(await events.get_message())["kind"])
            unknown = await http.get("/api/agents", headers={"Authorization": "Bearer not-a-key"})
            assert unknown.status_code == 401


def test_named_keys_come_from_the_environment_or_a_private_file(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV["alice"], KEYS["alice"])
    key_file = tmp_path / "ops.key"
    key_file.write_text(KEYS["ops"] + "\n")
    os.chmod(key_file, 0o600)
    config = default_config(
        home=str(tmp_path / "home"),
        http={
            "api_key": "the-default-key",
            "keys": {
                "alice": {"key_env": ENV["alice"]},
                "ops": {"key_file": str(key_file), "admin": True},
            },
        },
    )
    settings = HttpSettings.from_config(config.http)
    assert (
        settings.principal_for(KEYS["alice"]).name == "alice"
        and not settings.principal_for(KEYS["alice"]).admin
    )
    assert (
        settings.principal_for(KEYS["ops"]).name == "ops"
        and settings.principal_for(KEYS["ops"]).admin
    )
    assert (
        settings.principal_for("the-default-key").name == "default"
        and settings.principal_for("the-default-key").admin
    )
    assert settings.principal_for("nope") is None and settings.principal_for(None) is None
    assert KEYS["ops"] not in repr(settings) and KEYS["alice"] not in repr(config)

    os.chmod(key_file, 0o644)
    with pytest.raises(
        ConfigError, match=r"http\.keys\.ops\.key_file: .* may be read by others .*chmod 600"
    ):
        HttpSettings.from_config(config.http)
    os.chmod(key_file, 0o600)
    monkeypatch.delenv(ENV["alice"])
    with pytest.raises(
        ConfigError,
        match=rf"http\.keys\.alice\.key_env: the environment variable {ENV['alice']} is not set",
    ):
        HttpSettings.from_config(config.http)
    monkeypatch.setenv(ENV["alice"], "the-default-key")
    with pytest.raises(ConfigError, match="the same as 'default'"):
        HttpSettings.from_config(config.http)
    with pytest.raises(
        ConfigError,
        match=r"http\.keys\.alice\.key: .*never goes in roost\.toml.*got a value \(not shown\)",
    ):
        default_config(http={"keys": {"alice": {"key": "s3cret-in-toml"}}})
    with pytest.raises(ConfigError, match=r"http\.keys\.local: expected a name other than 'local'"):
        default_config(http={"keys": {"local": {"key_env": "X"}}})
    # Without any key, everyone is the one principal "local".
    assert (
        HttpSettings.from_config(default_config(home=str(tmp_path / "h2")).http, env={})
        .principal_for(None)
        .name
        == "local"
    )


async def test_sessions_stored_before_principals_belong_to_the_host_principal(tmp_path):
    """A schema-1 store (no owners) is upgraded: its sessions go to the principal given as
    ``legacy_owner`` (the kernel passes its host principal: ``default`` with http.api_key
    set, else ``local``), history intact; other principals do not see them."""
    db = tmp_path / "roost.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, agent TEXT NOT NULL, "
        "created_at REAL NOT NULL, updated_at REAL NOT NULL, "
        "message_count INTEGER NOT NULL DEFAULT 0)"
    )
    conn.execute(
        "CREATE TABLE messages (session_id TEXT NOT NULL REFERENCES sessions (id) "
        "ON DELETE CASCADE, seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, "
        "data TEXT NOT NULL, ts REAL NOT NULL, PRIMARY KEY (session_id, seq))"
    )
    for table in (
        "audit (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL, trace_id TEXT, "
        "span_id TEXT, agent TEXT, tool TEXT, arguments TEXT, duration_ms REAL, "
        "outcome TEXT, error TEXT, session_id TEXT)",
        "usage (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL, agent TEXT, session_id TEXT, "
        "provider TEXT, model TEXT, input_tokens INTEGER, output_tokens INTEGER)",
    ):
        conn.execute(f"CREATE TABLE {table}")
    conn.execute("INSERT INTO sessions VALUES ('old', 'recall', 1.0, 2.0, 1)")
    conn.execute("INSERT INTO messages VALUES ('old', 1, 'user', 'before the upgrade', '{}', 1.0)")
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    async with open_store(db, legacy_owner="default") as store:
        assert [m.content for m in await store.history("old", owner="default")] == [
            "before the upgrade"
        ]
        assert await store.history("old", owner="alice") == []
        assert [s["owner"] for s in await store.sessions()] == ["default"]
    assert default_config(http={"api_key": "k"}).http.host_principal == "default"
    assert default_config().http.host_principal == "local"
