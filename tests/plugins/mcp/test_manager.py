"""The MCP client manager inside a real kernel: config validation, tool registration,
supervision (restart with tools removed and re-added), trace propagation, the API route."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import pytest
import trio
from roost.kernel import (
    ConfigError,
    EventKind,
    ToolCall,
    TraceContext,
    default_config,
    open_kernel,
    parse_manifest,
)
from roost.plugins.mcp._client_plugin import manager_for
from roost.plugins.mcp._manager import collect_server_configs, parse_server_config
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).parents[2] / "fixtures"))
from peer_stub import running_stub  # noqa: E402

RAW = str(Path(__file__).parents[2] / "fixtures" / "mcp" / "raw_server.py")


def agent(name, tools=("mcp_*",), rules=(), servers=()):
    data = {
        "name": name,
        "description": f"test agent {name}",
        "model": {
            "provider": "scripted",
            "script": {"rules": list(rules), "default_reply": "{message}"},
        },
        "capabilities": {"tools": list(tools)},
    }
    if servers:
        data["mcp_servers"] = list(servers)
    return parse_manifest(data)


def make_config(tmp_path, servers, **extra):
    return default_config(
        home=tmp_path / "home", agents={"bundled": False}, mcp_servers=list(servers), **extra
    )


TIME_SERVER = {
    "name": "time",
    "timeout_secs": 20,
    "transport": {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
    },
}


def raw(name="raw", mode="legacy", **extra):
    return {
        "name": name,
        "timeout_secs": 10,
        "transport": {"type": "stdio", "command": sys.executable, "args": [RAW, mode]},
        **extra,
    }


# ---- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw_config, message",
    [
        ({"transport": {"type": "stdio", "command": "x"}}, r"name: expected 1-64 letters"),
        (  # "$" in a pattern also matched before a trailing line break
            {"name": "fs\n", "transport": {"type": "stdio", "command": "x"}},
            r"name: expected 1-64 letters",
        ),
        ({"name": "a"}, r"transport: missing; add a \[mcp_servers.transport\] table"),
        (
            {"name": "a", "transport": {"type": "ftp"}},
            r"transport.type: expected \"stdio\", \"http\" or \"sse\", got 'ftp'",
        ),
        ({"name": "a", "transport": {"type": "stdio"}}, r"transport.command: missing"),
        (
            {"name": "a", "transport": {"type": "stdio", "command": "../bin/evil"}},
            r"transport.command: '../bin/evil' contains '..'",
        ),
        (
            {"name": "a", "transport": {"type": "stdio", "command": "x", "args": "-y"}},
            r"transport.args: expected an array of strings",
        ),
        (
            {"name": "a", "transport": {"type": "http"}},
            r"transport.url: missing; an http transport needs url",
        ),
        (
            {"name": "a", "transport": {"type": "sse", "url": "ftp://x"}},
            r"transport.url: expected an absolute http",
        ),
        (
            {"name": "a", "transport": {"type": "http", "url": "http://x", "headers": {"A": 1}}},
            r"transport.headers: expected a table",
        ),
        (
            {"name": "a", "timeout_secs": -1, "transport": {"type": "stdio", "command": "x"}},
            r"timeout_secs: expected a number of seconds above 0",
        ),
        (
            {"name": "a", "env": ["BAD-NAME"], "transport": {"type": "stdio", "command": "x"}},
            r"env: expected an array of environment variable names",
        ),
        (
            {"name": "a", "protocol": "v9", "transport": {"type": "stdio", "command": "x"}},
            r"protocol: expected one of auto",
        ),
        (
            {"name": "a", "sampling": "yes", "transport": {"type": "stdio", "command": "x"}},
            r"sampling: expected true or false",
        ),
        (
            {"name": "a", "colour": "red", "transport": {"type": "stdio", "command": "x"}},
            r"unknown key 'colour' — valid keys in \[\[mcp_servers\]\]: name, ",
        ),
        (
            {"name": "a", "transport": {"type": "stdio", "command": "x", "url": "http://x"}},
            r"unknown key 'transport.url' — valid keys in \[mcp_servers.transport\] "
            r"\(type = \"stdio\"\): type, command",
        ),
        ("just a string", r"expected a table with name and transport"),
    ],
)
def test_bad_server_config_names_the_field_and_the_fix(raw_config, message):
    with pytest.raises(ConfigError, match=message):
        parse_server_config(raw_config, where="mcp_servers[0]")


def test_good_server_configs_parse():
    cfg = parse_server_config(
        {
            "name": "github",
            "timeout_secs": 30,
            "env": ["GITHUB_TOKEN"],
            "transport": {"type": "stdio", "command": "npx", "args": ["-y", "srv"]},
        }
    )
    assert (cfg.transport, cfg.command, cfg.args, cfg.env, cfg.protocol, cfg.sampling) == (
        "stdio",
        "npx",
        ("-y", "srv"),
        ("GITHUB_TOKEN",),
        "auto",
        False,
    )
    cfg = parse_server_config(
        {
            "name": "remote",
            "protocol": "2026-07-28",
            "transport": {
                "type": "http",
                "url": "https://h/mcp",
                "headers": {"Authorization": "Bearer s"},
            },
        }
    )
    assert cfg.url == "https://h/mcp" and cfg.public()["headers"] == [
        "Authorization"
    ]  # values never shown


@pytest.mark.parametrize(
    "servers, message",
    [
        (
            [raw("dup"), raw("dup")],
            r"^roost.toml: mcp_servers\[1\]: name: 'dup' is already used by mcp_servers\[0\]",
        ),
        (
            [raw("ok"), {"name": "broken", "transport": {"type": "nope"}}],
            r"^roost.toml: mcp_servers\[1\] \(broken\): transport.type",
        ),
    ],
)
async def test_a_bad_or_duplicate_config_entry_stops_the_boot(tmp_path, servers, message):
    # What broke: these were logged, the entry skipped, and the kernel booted all the same.
    with pytest.raises(ConfigError, match=message):
        async with open_kernel(make_config(tmp_path, servers), agents=[agent("a")]):
            pytest.fail("the kernel booted with a bad [[mcp_servers]] entry")


async def test_a_name_an_agent_reuses_is_reported_and_boot_goes_on(tmp_path):
    manifest = agent(
        "a",
        servers=[
            {
                "name": "dup",
                "transport": {"type": "stdio", "command": sys.executable, "args": [RAW, "legacy"]},
            }
        ],
    )
    async with open_kernel(make_config(tmp_path, [raw("dup")]), agents=[manifest]) as kernel:
        manager = manager_for(kernel)
        assert list(manager.states) == ["dup"]
        assert any("'dup' is already used" in e for e in manager.status()["errors"])
        await wait_until(lambda: manager.states["dup"].status == "connected")


async def test_a_server_that_cannot_start_is_logged_and_boot_goes_on(tmp_path):
    servers = [
        {
            "name": "ghost",
            "timeout_secs": 5,
            "transport": {"type": "stdio", "command": "/nonexistent/mcp-server"},
        }
    ]
    async with open_kernel(make_config(tmp_path, servers), agents=[agent("a")]) as kernel:
        manager = manager_for(kernel)
        await wait_until(lambda: manager.states["ghost"].restarts >= 1)
        ghost = manager.states["ghost"]
        assert ghost.status in ("failed", "connecting")  # waiting for its next attempt, or in it
        assert ghost.last_error
        assert kernel.service_errors == {}


# ---- mcp-server-time from PyPI -------------------------------------------------------------


async def test_mcp_server_time_tools_through_the_kernel(tmp_path):
    rules = [
        {
            "match": "^time",
            "steps": [{"tool": "mcp_time_get_current_time", "arguments": {"timezone": "UTC"}}],
            "reply": "now: {result}",
        }
    ]
    async with open_kernel(
        make_config(tmp_path, [TIME_SERVER]), agents=[agent("clock", rules=rules)]
    ) as kernel:
        manager = manager_for(kernel)
        await wait_until(lambda: "mcp_time_get_current_time" in kernel.registry)
        spec = kernel.registry.get("mcp_time_get_current_time").spec
        assert (
            spec.original_name == "get_current_time" and spec.owner == "mcp:time" and spec.untrusted
        )
        assert "mcp_time_convert_time" in [s.name for s in kernel.list_tools("clock")]
        result = await kernel.call_tool(
            "clock", ToolCall("mcp_time_get_current_time", {"timezone": "UTC"})
        )
        assert not result.is_error
        assert json.loads(result.as_text())["timezone"] == "UTC"
        assert "untrusted" in result.taint
        reply = await kernel.send("clock", "time please", timeout=30)
        assert reply.text.startswith("now: ") and '"timezone": "UTC"' in reply.text
        connected = manager.status()["connected"]
        assert connected[0]["name"] == "time" and connected[0]["tools_count"] == 2
        assert sorted(connected[0]["tools"]) == [
            "mcp_time_convert_time",
            "mcp_time_get_current_time",
        ]


# ---- supervision ---------------------------------------------------------------------------


async def test_dead_server_is_restarted_and_its_tools_come_back(tmp_path):
    async with open_kernel(make_config(tmp_path, [raw()]), agents=[agent("a")]) as kernel:
        manager = manager_for(kernel)
        await wait_until(lambda: "mcp_raw_alpha" in kernel.registry)
        assert "mcp_raw_beta_tool" in kernel.registry  # from the second page, normalised
        removed = trio.Event()
        async with kernel.tap.subscribe(kinds=[EventKind.KERNEL_TOOLS_CHANGED]) as events:
            with trio.fail_after(10):
                result = await kernel.call_tool("a", ToolCall("mcp_raw_exit", {}))
            assert result.is_error and "exited with code 5" in result.as_text()
            with trio.fail_after(10):
                async for event in events:
                    if "mcp_raw_alpha" in event.payload.get("removed", ()):
                        removed.set()
                    if removed.is_set() and "mcp_raw_alpha" in event.payload.get("added", ()):
                        break
        assert manager.states["raw"].restarts == 1
        result = await kernel.call_tool("a", ToolCall("mcp_raw_alpha", {"text": "back"}))
        assert result.as_text() == "alpha:back"


async def test_list_changed_adds_the_new_tool(tmp_path):
    async with open_kernel(make_config(tmp_path, [raw()]), agents=[agent("a")]) as kernel:
        await wait_until(lambda: "mcp_raw_grow" in kernel.registry)
        await kernel.call_tool("a", ToolCall("mcp_raw_grow", {}))
        await wait_until(lambda: "mcp_raw_gamma" in kernel.registry)
        assert (await kernel.call_tool("a", ToolCall("mcp_raw_gamma", {}))).as_text() == "gamma"


async def test_caller_trace_rides_in_meta(tmp_path):
    async with open_kernel(make_config(tmp_path, [raw()]), agents=[agent("a")]) as kernel:
        await wait_until(lambda: "mcp_raw_meta" in kernel.registry)
        trace = TraceContext.new("a").child("b")
        async with kernel.tap.subscribe(kinds=("TRACE:SPAN_END",)) as spans:
            call = ToolCall("mcp_raw_meta", {}, caller="b", trace=trace)
            result = await kernel.call_tool("a", call)
            with trio.fail_after(5):
                span = (await spans.receive()).payload
        meta = json.loads(result.as_text())
        assert meta["io.roost/trace-path"] == ["a", "b"]
        assert meta["io.roost/trace-depth"] == 2
        # The server sees the tool call's span as its parent: a child of the caller's span.
        assert meta["traceparent"] == f"00-{trace.trace_id}-{span['span_id']}-01"
        assert (span["name"], span["parent_span_id"]) == ("mcp_raw_meta", trace.span_id)
        assert (span["attributes"]["peer"], span["attributes"]["peer_name"]) == ("mcp", "raw")


async def test_sampling_uses_the_calling_agents_provider_only_when_enabled(tmp_path):
    servers = [raw("on", sampling=True), raw("off")]
    sampler = agent(
        "sampler", rules=[{"match": "capital", "reply": "Paris, says the scripted model"}]
    )
    async with open_kernel(make_config(tmp_path, servers), agents=[sampler]) as kernel:
        await wait_until(
            lambda: "mcp_on_sample" in kernel.registry and "mcp_off_sample" in kernel.registry
        )
        on = await kernel.call_tool("sampler", ToolCall("mcp_on_sample", {}))
        assert on.as_text() == "model said: Paris, says the scripted model"
        off = await kernel.call_tool("sampler", ToolCall("mcp_off_sample", {}))
        assert off.is_error and "sampling is disabled" in off.as_text()


@pytest.mark.parametrize(
    "max_tokens", [True, 0, -5, 2.5, "20", "١٢", 10**400, 1e300, float("inf"), float("nan")]
)
async def test_a_sampling_request_with_a_bad_max_tokens_is_refused_naming_it(tmp_path, max_tokens):
    # Regression: true, 0 or a negative maxTokens reached the vendor, which refused the call.
    sampler = agent("sampler", rules=[{"match": ".", "reply": "sampled"}])
    servers = [raw("on", sampling=True)]
    async with open_kernel(make_config(tmp_path, servers), agents=[sampler]) as kernel:
        await wait_until(lambda: "mcp_on_sample" in kernel.registry)
        bad = await kernel.call_tool(
            "sampler", ToolCall("mcp_on_sample", {"maxTokens": max_tokens})
        )
        good = await kernel.call_tool("sampler", ToolCall("mcp_on_sample", {"maxTokens": 5}))
    assert "sampling refused: params.maxTokens: expected an integer from 1" in bad.as_text()
    assert f"got {max_tokens!r:.40}" in bad.as_text()  # as sent: "20" is not 20
    assert good.as_text() == "model said: sampled"


async def test_a_sampling_request_without_max_tokens_is_refused_naming_it(tmp_path):
    # Regression: the spec requires maxTokens; a request without one went to the vendor
    # with no cap on what it may generate.
    sampler = agent("sampler", rules=[{"match": ".", "reply": "sampled"}])
    servers = [raw("on", sampling=True)]
    async with open_kernel(make_config(tmp_path, servers), agents=[sampler]) as kernel:
        await wait_until(lambda: "mcp_on_sample" in kernel.registry)
        result = await kernel.call_tool("sampler", ToolCall("mcp_on_sample", {"maxTokens": None}))
    assert result.as_text() == (
        "sampling refused: params.maxTokens: expected an integer from 1 to 1000000, missing"
    )


async def test_a_sampling_request_with_max_tokens_written_as_100_0_is_taken(tmp_path):
    # Regression: 100.0 (JSON Schema's integer; a PHP server's json_encode writes a float
    # so) was refused as not an integer, where it had been taken before the range check.
    sampler = agent("sampler", rules=[{"match": ".", "reply": "sampled"}])
    servers = [raw("on", sampling=True)]
    async with open_kernel(make_config(tmp_path, servers), agents=[sampler]) as kernel:
        await wait_until(lambda: "mcp_on_sample" in kernel.registry)
        result = await kernel.call_tool("sampler", ToolCall("mcp_on_sample", {"maxTokens": 100.0}))
    assert result.as_text() == "model said: sampled"


async def test_roots_are_the_calling_agents_workspace(tmp_path):
    async with open_kernel(make_config(tmp_path, [raw()]), agents=[agent("a")]) as kernel:
        await wait_until(lambda: "mcp_raw_roots" in kernel.registry)
        result = await kernel.call_tool("a", ToolCall("mcp_raw_roots", {}))
        roots = json.loads(result.as_text())
        workspace = kernel.workspace_for(kernel.agents["a"]).resolve()
        assert roots == [{"uri": workspace.as_uri(), "name": "a workspace"}]


async def test_an_elicitation_handler_set_while_a_connection_opens_is_offered(tmp_path):
    # The connection's options (the client capabilities initialize offers) are read once its
    # transport is open: a handler set while the server has not yet named its endpoint counts.
    async def decline(params, ctx):
        return {"action": "decline"}

    async with running_stub(hold_endpoint=True) as url:
        held = {
            "name": "held",
            "timeout_secs": 10,
            "allow_local": True,
            "transport": {"type": "sse", "url": url + "/sse"},
        }
        async with open_kernel(make_config(tmp_path, [held]), agents=[agent("a")]) as kernel:
            manager = manager_for(kernel)
            await wait_until(lambda: manager.states["held"].status == "connecting")
            manager.elicitation_handler = decline
            async with httpx.AsyncClient(trust_env=False) as http:
                with trio.fail_after(10):
                    await http.get(url + "/release")
                await wait_until(lambda: manager.states["held"].status == "connected")
                with trio.fail_after(10):
                    seen = (await http.get(url + "/seen")).json()
    assert seen["initialize"]["capabilities"].get("elicitation") == {"form": {}}


async def test_agent_manifest_servers_are_connected(tmp_path):
    own = agent(
        "owner",
        servers=[
            {
                "name": "mine",
                "transport": {"type": "stdio", "command": sys.executable, "args": [RAW]},
            }
        ],
    )
    async with open_kernel(make_config(tmp_path, []), agents=[own]) as kernel:
        configs, errors = collect_server_configs(kernel)
        assert [(c.name, c.origin) for c in configs] == [("mine", "agent:owner")] and errors == []
        await wait_until(lambda: "mcp_mine_alpha" in kernel.registry)


async def test_api_route_lists_configured_and_connected(tmp_path):
    from roost.plugins.http import open_daemon

    config = make_config(
        tmp_path,
        [
            TIME_SERVER,
            {"name": "ghost", "transport": {"type": "stdio", "command": "/nonexistent/x"}},
        ],
        http={"port": 0},
    )
    async with (
        open_kernel(config, agents=[agent("a")]) as kernel,
        open_daemon(kernel, graceful_timeout=1) as url,
    ):
        await wait_until(lambda: "mcp_time_get_current_time" in kernel.registry)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            body = (await http.get("/api/mcp/servers")).json()
        assert [c["name"] for c in body["configured"]] == ["time", "ghost"]
        (time_server,) = body["connected"]
        assert time_server["name"] == "time" and time_server["tools_count"] == 2
        assert time_server["protocol_version"] in ("2025-11-25", "2026-07-28")


async def test_auto_mode_probes_on_a_throwaway_process_and_picks_each_era(tmp_path):
    servers = [raw("modern", "modern"), raw("strict", "strict-legacy")]
    async with open_kernel(make_config(tmp_path, servers), agents=[agent("a")]) as kernel:
        manager = manager_for(kernel)
        await wait_until(
            lambda: (
                "mcp_modern_confirm" in kernel.registry and "mcp_strict_alpha" in kernel.registry
            )
        )
        assert manager.states["modern"].era == "modern" and manager.states["strict"].era == "legacy"
        status = {c["name"]: c for c in manager.status()["connected"]}
        assert status["modern"]["protocol_version"] == "2026-07-28"
        assert status["strict"]["protocol_version"] == "2025-11-25"
        # The strict legacy server exited on the probe, yet the real process never restarted.
        assert manager.states["strict"].restarts == 0
        assert (
            await kernel.call_tool("a", ToolCall("mcp_strict_alpha", {"text": "x"}))
        ).as_text() == "alpha:x"
        # Elicitation is denied by default: the modern server's input request cannot be met.
        denied = await kernel.call_tool("a", ToolCall("mcp_modern_confirm", {}))
        assert denied.is_error and "elicitation" in denied.as_text()


async def test_modern_server_list_changes_arrive_through_subscriptions_listen(tmp_path):
    # The modern fixture only announces list changes on an open subscriptions/listen.
    async with open_kernel(
        make_config(tmp_path, [raw("modern", "modern")]), agents=[agent("a")]
    ) as kernel:
        await wait_until(lambda: "mcp_modern_grow" in kernel.registry)
        await kernel.call_tool("a", ToolCall("mcp_modern_grow", {}))
        await wait_until(lambda: "mcp_modern_gamma" in kernel.registry)
