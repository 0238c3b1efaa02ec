"""Config typos everywhere are errors at boot: ``[[mcp_servers]]`` (and its ``transport``),
``[[a2a.external_agents]]`` and ``[providers.*]`` are checked by the plugins that read them
(``roost_check_config``) before anything starts, and every message names the real file.

What broke: such a typo was logged and the entry skipped (or ignored), ``roost run`` went on
and exited 0, and the message said ``roost.toml`` whatever the file was called.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio
from roost.kernel import ConfigError, default_config, hookimpl, load_config, open_kernel

ROOST = Path(sys.executable).parent / "roost"

MCP_TYPO = """
[[mcp_servers]]
name = "fs"
timeout_sec = 5
[mcp_servers.transport]
type = "stdio"
command = "npx"
"""
TRANSPORT_TYPO = """
[[mcp_servers]]
name = "fs"
[mcp_servers.transport]
type = "http"
ulr = "http://127.0.0.1:9/mcp"
"""
A2A_TYPO = """
[[a2a.external_agents]]
name = "b1"
ulr = "http://127.0.0.1:9/"
"""
PROVIDER_TYPO = """
[providers.openai]
base_ur = "http://127.0.0.1:9/v1"
"""
PROVIDER_NAME_TYPO = """
[providers.opnai]
timeout_s = 3
"""

CASES = [
    (
        MCP_TYPO,
        "mcp_servers[0]: unknown key 'timeout_sec' — did you mean 'timeout_secs'? "
        "valid keys in [[mcp_servers]]: name, timeout_secs, env, transport",
    ),
    (
        TRANSPORT_TYPO,
        "mcp_servers[0] (fs): unknown key 'transport.ulr' — did you mean 'url'? "
        'valid keys in [mcp_servers.transport] (type = "http"): type, url, headers',
    ),
    (
        A2A_TYPO,
        "a2a.external_agents[0]: unknown key 'ulr' — did you mean 'url'? "
        "valid keys in [[a2a.external_agents]]: name, url, headers",
    ),
    (
        PROVIDER_TYPO,
        "providers.openai: unknown key 'base_ur' — did you mean 'base_url'? "
        "valid keys in [providers.openai]: base_url, api_key_env",
    ),
    (
        PROVIDER_NAME_TYPO,
        "[providers.opnai]: no installed provider is called 'opnai' — "
        "did you mean [providers.openai]?",
    ),
]


def write_config(tmp_path: Path, body: str) -> Path:
    config = tmp_path / "my-settings.toml"
    config.write_text(f'home = "{tmp_path / "home"}"\n[agents]\nbundled = false\n' + body)
    return config


@pytest.mark.parametrize("body, message", CASES)
async def test_a_typo_stops_the_kernel_booting_naming_the_file_the_key_and_the_valid_keys(
    tmp_path, body, message
):
    config = load_config(write_config(tmp_path, body), env={})
    with pytest.raises(ConfigError) as caught:
        async with open_kernel(config):
            pytest.fail("the kernel booted with a typo in the configuration")
    assert str(caught.value).startswith(f"{tmp_path / 'my-settings.toml'}: {message}")
    assert not (tmp_path / "home").exists()  # nothing started


async def run_roost(*args: str, env: dict[str, str] | None = None) -> trio.CompletedProcess:
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (make install)")
    with trio.fail_after(60):
        return await trio.run_process(
            [str(ROOST), *args], capture_stdout=True, capture_stderr=True, check=False, env=env
        )


@pytest.mark.parametrize("body, message", [CASES[0], CASES[2], CASES[3]])
async def test_roost_run_exits_non_zero_before_listening(tmp_path, body, message):
    config = write_config(tmp_path, body)
    done = await run_roost("run", "--port", "0", "--config", str(config))
    stderr = done.stderr.decode()
    assert done.returncode != 0
    assert f"roost: error: {config}: {message}" in stderr
    assert b"listening" not in done.stdout


async def test_a_one_shot_command_names_the_file_from_roost_config(tmp_path):
    import os

    config = write_config(tmp_path, TRANSPORT_TYPO)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")} | {
        "ROOST_CONFIG": str(config)
    }
    done = await run_roost("agents", env=env)
    assert done.returncode != 0
    assert f"roost: error: {config}: {CASES[1][1]}" in done.stderr.decode()


async def test_every_problem_is_reported_at_once(tmp_path):
    config = load_config(write_config(tmp_path, MCP_TYPO + A2A_TYPO + PROVIDER_TYPO), env={})
    with pytest.raises(ConfigError, match=r"^3 problems in the configuration:\n  ") as caught:
        async with open_kernel(config):
            pytest.fail("booted")
    assert str(caught.value).count(str(tmp_path / "my-settings.toml")) == 3


async def test_a_section_of_a_disabled_provider_plugin_is_no_error(tmp_path):
    config = default_config(
        home=tmp_path / "home",
        agents={"bundled": False},
        providers={"gemini": {"timeout_s": 3}},
        plugins={"disabled": ["gemini"]},
    )
    async with open_kernel(config) as kernel:
        assert "gemini" not in kernel.providers


class ThirdPartyPlugin:
    """A plugin outside roost checks its own settings the same way."""

    def __init__(self, fail_with: Exception) -> None:
        self.fail_with = fail_with

    @hookimpl
    def roost_check_config(self, config):
        if "speech" in config.providers and "voice" not in config.providers["speech"]:
            raise self.fail_with


async def test_a_third_party_plugin_checks_its_settings_at_boot(tmp_path):
    config = load_config(write_config(tmp_path, "[providers.speech]\nvoise = 'x'\n"), env={})
    plugin = ThirdPartyPlugin(ConfigError("providers.speech: 'voice' is required"))
    with pytest.raises(
        ConfigError,
        match=rf"^{tmp_path / 'my-settings.toml'}: providers.speech: 'voice' is required",
    ):
        async with open_kernel(config, plugins=[plugin, SpeechProvider()]):
            pytest.fail("booted")


async def test_a_check_that_crashes_is_the_plugins_failure_not_the_configs(tmp_path):
    config = default_config(
        home=tmp_path / "home", agents={"bundled": False}, providers={"scripted": {}}
    )
    plugin = ThirdPartyPlugin(RuntimeError("bug"))
    async with open_kernel(config, plugins=[plugin]) as kernel:
        assert not any(
            "roost_check_config" in f.error for f in kernel.plugins.failures
        )  # not called: no [providers.speech]
    config = default_config(
        home=tmp_path / "home", agents={"bundled": False}, providers={"speech": {}}
    )
    async with open_kernel(config, plugins=[plugin, SpeechProvider()]) as kernel:
        assert any(
            "roost_check_config raised RuntimeError: bug" in f.error
            for f in kernel.plugins.failures
        )


class SpeechProvider:
    @hookimpl
    def roost_providers(self):
        from roost.kernel import ProviderDescriptor

        return [ProviderDescriptor("speech", lambda model, settings: None)]


async def test_a_missing_agents_dir_names_the_config_file(tmp_path):
    config = tmp_path / "my-settings.toml"
    config.write_text(
        f'home = "{tmp_path / "home"}"\n[agents]\nbundled = false\ndirs = ["nowhere"]\n'
    )
    async with open_kernel(load_config(config, env={})) as kernel:
        [error] = kernel.manifest_errors
        assert str(error).endswith(f"agents directory not found; fix [agents].dirs in {config}")
