"""A peer that echoes the credentials roost sends it does not hand them on.

Regression: an MCP server or external A2A agent configured with a credential (an
``Authorization`` header, an ``X-Api-Key``, a ``GITHUB_TOKEN`` passed to a stdio server)
could quote it back (a careless debugging peer, a "bad token ..." error, a proxy), and roost
handed it to the model, the audit trail, ``GET /api/mcp/servers`` and so to the agent's own
callers. Now the kernel takes every credential a tool sends out of what the tool answers
(``Tool.secrets``), before the answer is cut; other header values are left alone. Real peer
processes on 127.0.0.1 (the official MCP SDK's server for stdio), a real kernel and store.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
import trio
from roost.kernel import ToolCall, default_config, open_kernel, parse_manifest
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).parents[1] / "fixtures"))
from peer_stub import running_stub  # noqa: E402

SDK_SERVER = str(Path(__file__).parents[1] / "fixtures" / "mcp" / "sdk_server.py")
TOKEN = "tok-0123456789abcdef"
API_KEY = "key-fedcba9876543210"
HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "X-Api-Key": API_KEY,
    "X-Tenant": "tenant-visible-42",  # not a credential: stays
}


def caller():
    return parse_manifest(
        {
            "name": "caller",
            "description": "calls peers",
            "model": {"provider": "scripted", "script": {"rules": []}},
            "capabilities": {"tools": ["a2a_*", "mcp_*"]},
        }
    )


def config(tmp_path: Path, **sections):
    return default_config(
        home=str(tmp_path / "home"), agents={"bundled": False}, http={"port": 0}, **sections
    )


def assert_redacted(text: str) -> None:
    assert TOKEN not in text and API_KEY not in text, text
    # Nor a head of one left by a cut.
    assert TOKEN[:8] not in text and API_KEY[:8] not in text, text
    assert "[redacted]" in text, text


async def call(kernel, tool: str, arguments: dict):
    await wait_until(lambda: tool in kernel.registry, f"the tool {tool}", timeout=20)
    return await kernel.call_tool("caller", ToolCall(tool, arguments), check_capability=False)


async def audit_errors(kernel) -> str:
    rows = await kernel.store.audit(limit=50)
    return json.dumps([row.error for row in rows])


async def test_an_mcp_server_echoing_its_headers_in_a_result_hands_on_no_credential(tmp_path):
    async with running_stub(echo_headers=True) as stub:
        server = {"name": "stub", "transport": {"type": "http", "url": f"{stub}/mcp"}}
        server["transport"]["headers"] = HEADERS
        server["allow_local"] = True
        async with open_kernel(config(tmp_path, mcp_servers=[server]), agents=[caller()]) as kernel:
            result = await call(kernel, "mcp_stub_echo", {"text": "hi"})
            described = kernel.registry.get("mcp_stub_echo").spec.description
    assert not result.is_error, result
    # What the model reads of the tool each turn: tools/list quoted the headers too.
    assert "tenant-visible-42" in described
    assert_redacted(described)
    seen = json.dumps(result.structured_content)
    assert_redacted(result.as_text())
    assert_redacted(seen)
    assert "echo:hi" in result.as_text()
    assert "tenant-visible-42" in result.as_text() and "tenant-visible-42" in seen


async def test_an_mcp_server_refusing_with_its_headers_quoted_shows_no_credential(tmp_path):
    # Every POST refused with a 401 that quotes the credentials: the connection fails, and
    # its error is what GET /api/mcp/servers shows any principal.
    async with running_stub(fail_status=401, fail_body="echo") as stub:
        server = {"name": "stub", "transport": {"type": "http", "url": f"{stub}/mcp"}}
        server["transport"]["headers"] = HEADERS
        server["allow_local"] = True
        async with open_kernel(config(tmp_path, mcp_servers=[server]), agents=[caller()]) as kernel:
            from roost.plugins.mcp._client_plugin import manager_for

            manager = manager_for(kernel)

            def failed():
                status = manager.status(admin=False)["configured"][0]
                return status["error"] and status

            status = await wait_until(failed, "the server's connection error", timeout=20)
    assert "401" in status["error"]
    assert_redacted(status["error"])


async def test_an_a2a_agent_echoing_its_headers_hands_on_no_credential(tmp_path):
    async with running_stub(echo_headers=True) as stub:
        agents = [{"name": "stub", "url": f"{stub}/", "headers": HEADERS}]
        async with open_kernel(
            config(tmp_path, a2a={"external_agents": agents}), agents=[caller()]
        ) as kernel:
            result = await call(kernel, "a2a_stub", {"message": "hi"})
            described = kernel.registry.get("a2a_stub").spec.description
    assert not result.is_error, result
    assert "tenant-visible-42" in described
    assert_redacted(described)  # its card quoted them: what the model reads of the tool
    assert "stub got: hi" in result.as_text()
    assert_redacted(result.as_text())
    assert "tenant-visible-42" in result.as_text()


async def test_an_a2a_agent_refusing_with_its_headers_quoted_shows_no_credential(tmp_path):
    async with running_stub(fail_status=401, fail_body="echo") as stub:
        agents = [{"name": "stub", "url": f"{stub}/", "headers": HEADERS}]
        async with open_kernel(
            config(tmp_path, a2a={"external_agents": agents}), agents=[caller()]
        ) as kernel:
            result = await call(kernel, "a2a_stub", {"message": "hi"})
            audited = await audit_errors(kernel)
    assert result.is_error and "HTTP 401" in result.as_text(), result
    assert_redacted(result.as_text())
    assert TOKEN not in audited and API_KEY not in audited, audited


@pytest.mark.parametrize("max_output_chars", [100, 1000])
async def test_a_stdio_server_echoing_its_token_env_hands_on_none(
    tmp_path, monkeypatch, max_output_chars
):
    # 100: the cut falls inside the token; it is redacted first, so no head of it is left.
    monkeypatch.setenv("ROOST_TEST_API_TOKEN", "x" * 90 + TOKEN)
    monkeypatch.setenv("ROOST_TEST_MODE", "verbose-mode-on")
    server = {
        "name": "sdk",
        "transport": {"type": "stdio", "command": sys.executable, "args": [SDK_SERVER, "stdio"]},
        "env": ["ROOST_TEST_API_TOKEN", "ROOST_TEST_MODE"],
    }
    cfg = config(tmp_path, mcp_servers=[server], tools={"max_output_chars": max_output_chars})
    async with open_kernel(cfg, agents=[caller()]) as kernel:
        token = await call(kernel, "mcp_sdk_show_env", {"name": "ROOST_TEST_API_TOKEN"})
        mode = await call(kernel, "mcp_sdk_show_env", {"name": "ROOST_TEST_MODE"})
    assert not token.is_error, token
    assert_redacted(token.as_text())
    assert "x" * 90 not in token.as_text()
    assert "verbose-mode-on" in mode.as_text()[:max_output_chars]


RAW = str(Path(__file__).parents[1] / "fixtures" / "mcp" / "raw_server.py")


def raw_server(**extra) -> dict:
    server = {
        "name": "raw",
        "transport": {"type": "stdio", "command": sys.executable, "args": [RAW, "legacy"]},
        "env": ["ROOST_TEST_API_TOKEN"],
    }
    return {**server, **extra}


async def test_a_refusal_at_the_depth_limit_quoting_a_token_hands_on_none(tmp_path, monkeypatch):
    # Regression: a peer's depth-limit refusal became a RecursionLimitExceeded raised by the
    # tool, past the redaction: its path reached the result, the audit trail, the span and
    # the KERNEL:BREAKER and EXEC:TOOL_RESULT events whole.
    monkeypatch.setenv("ROOST_TEST_API_TOKEN", TOKEN)
    cfg = config(tmp_path, mcp_servers=[raw_server()])
    async with open_kernel(cfg, agents=[caller()]) as kernel:
        kinds = ("KERNEL:BREAKER", "EXEC:TOOL_RESULT", "TRACE:SPAN_END")
        async with kernel.tap.subscribe(kinds=kinds) as events:
            result = await call(
                kernel, "mcp_raw_leak", {"env": "ROOST_TEST_API_TOKEN", "via": "breaker"}
            )
            seen = []
            with trio.fail_after(10):
                while len(seen) < 3:
                    seen.append((await events.receive()).payload)
        audited = await audit_errors(kernel)
    assert result.is_error and "past the limit" in result.as_text(), result
    assert_redacted(result.as_text())
    assert_redacted(audited)
    assert_redacted(json.dumps(seen, default=str))


async def test_a_server_logging_or_reporting_progress_with_a_token_puts_none_on_the_tap(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("ROOST_TEST_API_TOKEN", TOKEN)
    cfg = config(tmp_path, mcp_servers=[raw_server()])
    async with open_kernel(cfg, agents=[caller()]) as kernel:
        async with kernel.tap.subscribe(kinds=("MCP:LOG", "MCP:PROGRESS")) as events:
            for via in ("log", "progress"):
                await call(kernel, "mcp_raw_leak", {"env": "ROOST_TEST_API_TOKEN", "via": via})
            seen = []
            with trio.fail_after(10):
                while len(seen) < 2:
                    seen.append((await events.receive()).payload)
    assert_redacted(json.dumps(seen))


async def test_a_stdio_servers_stderr_and_server_info_quoting_its_token_show_none(
    tmp_path, monkeypatch, caplog
):
    # Regression: a server's stderr lines went to roost's log whole, and its serverInfo to
    # GET /api/mcp/servers (which any principal may read).
    monkeypatch.setenv("ROOST_TEST_API_TOKEN", TOKEN)
    monkeypatch.setenv("ROOST_TEST_INFO_QUOTES", "ROOST_TEST_API_TOKEN")
    cfg = config(
        tmp_path, mcp_servers=[raw_server(env=["ROOST_TEST_API_TOKEN", "ROOST_TEST_INFO_QUOTES"])]
    )
    caplog.set_level("INFO", logger="roost.mcp.server.raw")

    def logged() -> str:
        return "\n".join(r.getMessage() for r in caplog.records if r.name == "roost.mcp.server.raw")

    async with open_kernel(cfg, agents=[caller()]) as kernel:
        from roost.plugins.mcp._client_plugin import manager_for

        await call(kernel, "mcp_raw_leak", {"env": "ROOST_TEST_API_TOKEN", "via": "stderr"})
        await wait_until(lambda: "debug: token" in logged(), "the server's stderr line")
        info = manager_for(kernel).status(admin=False)["connected"][0]["server_info"]
    assert info["name"] == "raw"
    assert_redacted(info["title"])
    assert_redacted(logged())


async def test_a_server_info_quoting_its_token_across_the_cut_shows_no_head_of_it(
    tmp_path, monkeypatch
):
    # Regression: the client cut serverInfo's texts on arrival (title: 256 characters) and
    # the status page redacted what was left: a token the cut went through kept its head.
    monkeypatch.setenv("ROOST_TEST_API_TOKEN", TOKEN)
    monkeypatch.setenv("ROOST_TEST_INFO_QUOTES", "ROOST_TEST_API_TOKEN")
    monkeypatch.setenv("ROOST_TEST_INFO_PAD", "245")  # "x" * 245 + "raw (" + TOKEN
    variables = ["ROOST_TEST_API_TOKEN", "ROOST_TEST_INFO_QUOTES", "ROOST_TEST_INFO_PAD"]
    cfg = config(tmp_path, mcp_servers=[raw_server(env=variables)])
    async with open_kernel(cfg, agents=[caller()]) as kernel:
        from roost.plugins.mcp._client_plugin import manager_for

        manager = manager_for(kernel)
        await wait_until(lambda: manager.status()["connected"], "the server connected")
        info = manager.status(admin=False)["connected"][0]["server_info"]
    shown = json.dumps(info)
    assert TOKEN[:4] not in shown, shown
    assert info["title"] == "x" * 245 + "raw ([redac"
    assert info["description"].endswith("raw ([red")  # cut at 2,048, 4 characters in


async def test_a_server_sampling_with_a_token_does_not_show_it_to_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOST_TEST_API_TOKEN", TOKEN)
    model = {"rules": [{"match": TOKEN, "reply": "the model saw it"}], "default_reply": "ok"}
    asker = parse_manifest(
        {
            "name": "caller",
            "description": "calls peers",
            "model": {"provider": "scripted", "script": model},
            "capabilities": {"tools": ["mcp_*"]},
        }
    )
    cfg = config(tmp_path, mcp_servers=[raw_server(sampling=True)])
    async with open_kernel(cfg, agents=[asker]) as kernel:
        result = await call(
            kernel, "mcp_raw_leak", {"env": "ROOST_TEST_API_TOKEN", "via": "sample"}
        )
    assert result.as_text() == "model said: ok", result


PASSWORD = "pw-0123456789abcdef"
QUERY_KEY = "qk-fedcba9876543210"


async def test_credentials_in_an_mcp_servers_url_are_redacted_too(tmp_path):
    # The URL's user info (sent as a Basic Authorization) and its api_key query parameter
    # are credentials roost sends as much as a header is.
    async with running_stub(echo_headers=True) as stub:
        url = stub.replace("//", f"//alice:{PASSWORD}@") + f"/mcp?api_key={QUERY_KEY}&v=2"
        server = {"name": "stub", "transport": {"type": "http", "url": url}, "allow_local": True}
        async with open_kernel(config(tmp_path, mcp_servers=[server]), agents=[caller()]) as kernel:
            result = await call(kernel, "mcp_stub_echo", {"text": "hi"})
    text = result.as_text() + json.dumps(result.structured_content)
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert "authorization=" in text and "v=2" in text, text
    for secret in (PASSWORD, QUERY_KEY, basic):
        assert secret not in text and secret[:8] not in text, text


async def test_an_a2a_agents_data_artifact_quoting_a_credential_hands_on_none(tmp_path):
    # Regression: a remote task's data parts became the asking run's outputs (handed on to
    # the agent's own callers as artifacts) without the redaction its text got.
    async with running_stub(echo_task=True) as stub:
        agents = [{"name": "stub", "url": f"{stub}/", "headers": HEADERS}]
        rule = {
            "match": ".",
            "steps": [{"tool": "a2a_stub", "arguments": {"message": "{message}"}}],
            "reply": "done",
        }
        asker = parse_manifest(
            {
                "name": "caller",
                "description": "calls peers",
                "model": {"provider": "scripted", "script": {"rules": [rule]}},
                "capabilities": {"tools": ["a2a_*"]},
            }
        )
        cfg = config(tmp_path, a2a={"external_agents": agents})
        async with open_kernel(cfg, agents=[asker]) as kernel:
            await wait_until(lambda: "a2a_stub" in kernel.registry, "the a2a_stub tool", timeout=20)
            reply = await kernel.send("caller", "hi")
    seen = json.dumps([part.data for output in reply.outputs for part in output.parts])
    assert "tenant-visible-42" in seen, seen
    assert_redacted(seen)
