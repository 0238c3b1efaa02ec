"""The tools plugin as the kernel sees it: entry point, hook, specs and settings."""

from __future__ import annotations

import logging
import types

import jsonschema
import pytest
from roost.kernel import ConfigError, PluginManager, Tool, ToolContext, ToolsConfig, normalise_name
from roost.plugins import tools as tools_plugin
from roost.plugins.tools import (
    TOOL_NAMES,
    ToolsSettings,
    _bash,
    _landlock,
    file_access,
    roost_tools,
)

EXPECTED = ["bash", "read", "write", "edit", "list", "glob", "grep", "web_fetch", "artifact"]


def test_hook_returns_every_tool_with_config_none():
    tools = roost_tools(config=None)
    assert [t.spec.name for t in tools] == EXPECTED == list(TOOL_NAMES)
    assert all(isinstance(t, Tool) and t.spec.owner == "tools" for t in tools)
    assert {t.spec.qualified_name for t in tools} == {f"tools:{n}" for n in EXPECTED}


def test_registered_through_the_entry_point_like_any_plugin():
    pm = PluginManager()
    pm.load_entry_points()
    assert "tools" in pm.loaded
    names = [t.spec.name for _, tools in pm.call_each("roost_tools", config=None) for t in tools]
    assert set(EXPECTED) <= set(names)


@pytest.mark.parametrize("tool", roost_tools(None), ids=lambda t: t.spec.name)
def test_specs_are_good_mcp_tools(tool):
    spec = tool.spec
    assert spec.name == normalise_name(spec.name)
    assert spec.title and len(spec.description) > 40
    jsonschema.Draft202012Validator.check_schema(spec.input_schema)
    assert spec.input_schema["type"] == "object"
    assert spec.input_schema.get("additionalProperties") is False
    for name, prop in spec.input_schema["properties"].items():
        assert prop.get("description"), f"{spec.name}.{name} has no description"
    hints = spec.annotations
    assert isinstance(hints["readOnlyHint"], bool) and isinstance(hints["openWorldHint"], bool)
    if not hints["readOnlyHint"]:
        assert isinstance(hints["destructiveHint"], bool)
    mcp = spec.to_mcp()
    assert mcp["name"] == spec.name and mcp["inputSchema"] == dict(spec.input_schema)


def test_read_only_and_open_world_hints_match_what_the_tools_do():
    hints = {t.spec.name: t.spec.annotations for t in roost_tools(None)}
    assert {n for n, h in hints.items() if h["readOnlyHint"]} == {
        "read", "list", "glob", "grep", "web_fetch", "artifact",
    }  # fmt: skip
    assert {n for n, h in hints.items() if h["openWorldHint"]} == {"bash", "web_fetch"}
    assert hints["bash"]["destructiveHint"] and hints["write"]["destructiveHint"]


def test_only_web_fetch_is_untrusted():
    assert [t.spec.name for t in roost_tools(None) if t.spec.untrusted] == ["web_fetch"]


def config_with(**tools):
    return types.SimpleNamespace(tools=types.SimpleNamespace(**tools))


def test_settings_from_the_real_config_class():
    config = types.SimpleNamespace(
        tools=ToolsConfig(bash_timeout_s=30.0, env_allowlist=("GITHUB_TOKEN",))
    )
    settings = ToolsSettings.from_config(config)
    assert settings.bash_timeout_s == 30.0 and settings.env_allowlist == ("GITHUB_TOKEN",)
    bash = {t.spec.name: t for t in roost_tools(config)}["bash"]
    assert bash.spec.input_schema["properties"]["timeout"]["maximum"] == 30.0


def test_settings_tolerate_missing_sections_and_fields():
    assert ToolsSettings.from_config(None) == ToolsSettings()
    assert ToolsSettings.from_config(object()) == ToolsSettings()
    assert ToolsSettings.from_config(config_with(bash_timeout_s=5)).bash_timeout_s == 5.0


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"bash_timeout_s": 0}, "tools.bash_timeout_s"),
        ({"bash_timeout_s": "120"}, "tools.bash_timeout_s"),
        ({"max_output_chars": 1.5}, "tools.max_output_chars"),
        ({"bash_max_output_chars": True}, "tools.bash_max_output_chars"),
        ({"env_allowlist": "HOME"}, "tools.env_allowlist"),
        ({"env_allowlist": ["OK", 3]}, "tools.env_allowlist"),
        ({"allow_private_network": "yes"}, "tools.allow_private_network"),
        ({"web_timeout_s": 10**400}, "tools.web_timeout_s: expected a positive number"),
        ({"timeout_s": float("nan")}, "tools.timeout_s"),
    ],
)
def test_bad_settings_name_the_field(fields, needle):
    with pytest.raises(ConfigError, match=needle):
        roost_tools(config_with(**fields))


def test_missing_landlock_is_warned_about_once(monkeypatch, caplog):
    monkeypatch.setattr(_landlock, "_status", _landlock.LandlockStatus(False, 0, "test says no"))
    monkeypatch.setattr(_bash, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="roost.tools.bash"):
        roost_tools(None)
        roost_tools(None)
    warnings = [r.getMessage() for r in caplog.records if "Landlock unavailable" in r.getMessage()]
    assert len(warnings) == 1
    assert "bash file access is NOT confined by the kernel" in warnings[0]
    assert "test says no" in warnings[0]
    missing = [r.getMessage() for r in caplog.records if "NOT enforced" in r.getMessage()]
    assert any("bash TCP connections" in m for m in missing), missing
    assert tools_plugin.landlock_status().available is False


def test_without_landlock_bash_runs_unwrapped_by_landlock(monkeypatch, tmp_path):
    monkeypatch.setattr(_landlock, "_status", _landlock.LandlockStatus(False, 0, "test says no"))
    monkeypatch.setattr(_bash, "_warned", True)
    argv = _bash.command_argv("ls", file_access(ToolContext(agent="a", workspace=tmp_path)))
    assert "--landlock" not in argv and argv[-2:] == ["-c", "ls"]


def test_an_integer_setting_too_big_for_a_float_is_read_not_a_crash():
    # Regression: roost.toml's [tools] max_output_chars = 1 followed by 400 zeros (the kernel's
    # check takes it) made the tools plugin fail with OverflowError "int too large to convert
    # to float", naming no field: the number check called math.isfinite on the integer.
    huge = 10**400
    assert ToolsSettings.from_config(config_with(max_output_chars=huge)).max_output_chars == huge
