"""agent.json ``mcp_servers[]`` entries take the client options roost.toml has:
``protocol``, ``sampling`` and ``allow_local`` (regression: they were refused or dropped)."""

from __future__ import annotations

import sys

from roost.kernel import McpServerDescriptor, ToolCall, open_kernel
from roost.plugins.mcp._client_plugin import manager_for
from roost.plugins.mcp._manager import collect_server_configs, parse_server_config
from test_manager import RAW, agent, make_config, wait_until


def stdio_raw(name, mode="legacy", **options):
    return {
        "name": name,
        "timeout_secs": 10,
        "transport": {"type": "stdio", "command": sys.executable, "args": [RAW, mode]},
        **options,
    }


def test_agent_json_schema_protocol_choices_match_the_client():
    from roost.kernel import manifest_schema
    from roost.plugins.mcp._client import PROTOCOL_CHOICES

    choices = manifest_schema()["$defs"]["mcp_server"]["properties"]["protocol"]["enum"]
    assert sorted(choices) == sorted(PROTOCOL_CHOICES)


def test_descriptor_options_reach_the_server_config():
    desc = McpServerDescriptor(
        "remote",
        {"type": "http", "url": "http://127.0.0.1:1/mcp"},
        protocol="2025-06-18",
        sampling=True,
        allow_local=True,
    )
    cfg = parse_server_config(desc, origin="agent:a", agent="a")
    assert (cfg.protocol, cfg.sampling, cfg.allow_local) == ("2025-06-18", True, True)
    assert cfg.public()["allow_local"] is True


def test_descriptor_defaults_stay_backward_compatible():
    cfg = parse_server_config(McpServerDescriptor("plain", {"type": "stdio", "command": "srv"}))
    assert (cfg.protocol, cfg.sampling, cfg.allow_local) == ("auto", False, False)


def test_bad_descriptor_option_names_the_field():
    desc = McpServerDescriptor("x", {"type": "stdio", "command": "srv"}, protocol="latest")
    try:
        parse_server_config(desc, where="agent a: mcp_servers[0]")
    except Exception as exc:  # ConfigError
        assert "agent a: mcp_servers[0] (x): protocol: expected one of auto" in str(exc)
    else:
        raise AssertionError("a bad protocol was accepted")


async def test_agent_manifest_protocol_and_sampling_are_used(tmp_path):
    servers = [
        stdio_raw("modern", "modern", protocol="2026-07-28"),
        # Pinned to a version this legacy server does not speak: the pin must be honoured
        # (the connection is refused with a message naming the option), not ignored.
        stdio_raw("mispinned", "legacy", protocol="2025-06-18"),
        stdio_raw("sampler", "legacy", sampling=True),
        stdio_raw("plain", "legacy"),
    ]
    owner = agent(
        "owner",
        rules=[{"match": "capital", "reply": "Paris, from the owner's model"}],
        servers=servers,
    )
    async with open_kernel(make_config(tmp_path, []), agents=[owner]) as kernel:
        configs, errors = collect_server_configs(kernel)
        assert errors == []
        by_name = {c.name: c for c in configs}
        assert (by_name["modern"].protocol, by_name["sampler"].sampling) == ("2026-07-28", True)
        assert (by_name["plain"].protocol, by_name["plain"].sampling) == ("auto", False)
        manager = manager_for(kernel)
        await wait_until(
            lambda: (
                all(f"mcp_{n}_sample" in kernel.registry for n in ("sampler", "plain"))
                and "mcp_modern_confirm" in kernel.registry
            )
        )
        await wait_until(lambda: manager.states["mispinned"].last_error)
        connected = {c["name"]: c for c in manager.status()["connected"]}
        assert connected["modern"]["protocol_version"] == "2026-07-28"
        assert "mispinned" not in connected
        assert "protocol = '2025-06-18' is configured" in manager.states["mispinned"].last_error
        on = await kernel.call_tool("owner", ToolCall("mcp_sampler_sample", {}))
        assert on.as_text() == "model said: Paris, from the owner's model"
        off = await kernel.call_tool("owner", ToolCall("mcp_plain_sample", {}))
        assert off.is_error and "sampling is disabled" in off.as_text()


async def test_agent_manifest_allow_local_lets_a_loopback_http_server_through(tmp_path, kernel):
    from roost.plugins.http import open_daemon

    async with open_daemon(kernel) as url:
        servers = [
            {
                "name": "local",
                "timeout_secs": 10,
                "allow_local": True,
                "transport": {"type": "http", "url": url + "/mcp"},
            },
            {
                "name": "guarded",
                "timeout_secs": 10,
                "transport": {"type": "http", "url": url + "/mcp"},
            },
        ]
        caller = agent("caller", servers=servers)
        async with open_kernel(make_config(tmp_path / "b", []), agents=[caller]) as other:
            manager = manager_for(other)
            await wait_until(lambda: "mcp_local_agent_alpha" in other.registry)
            await wait_until(lambda: manager.states["guarded"].last_error)
            assert not any(spec.name.startswith("mcp_guarded_") for spec in other.registry.specs())
            assert "allow_local = true" in manager.states["guarded"].last_error
