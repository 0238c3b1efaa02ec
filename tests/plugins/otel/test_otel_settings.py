"""``[telemetry]``: checked at boot like every table (a typo or a bad value stops it, naming
the key), an error naming ``pip install 'roost[otel]'`` when the extra is missing, and
without the table nothing of OpenTelemetry is imported and no span is recorded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from roost.kernel import ConfigError, default_config, load_config, open_kernel
from roost.plugins.otel import TelemetrySettings


def test_without_the_table_telemetry_is_off():
    assert TelemetrySettings.from_config({}) == TelemetrySettings()
    assert not TelemetrySettings.from_config(None).enabled
    off = TelemetrySettings.from_config({"enabled": False})
    assert not off.enabled and off.endpoint == ""


def test_the_table_turns_it_on_with_its_values():
    settings = TelemetrySettings.from_config(
        {
            "endpoint": "http://127.0.0.1:4318/v1/traces",
            "service_name": "mesh-a",
            "sampling": 0.25,
            "timeout_s": 2,
            "headers": {"Authorization": "Bearer k"},
        }
    )
    assert settings == TelemetrySettings(
        True, "http://127.0.0.1:4318/v1/traces", "mesh-a", 0.25, 2.0, {"Authorization": "Bearer k"}
    )
    assert "Bearer" not in repr(settings)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"endpont": "http://x"}, "telemetry: unknown key 'endpont' — did you mean 'endpoint'?"),
        ({"service_name": "x"}, "telemetry.endpoint: expected the OTLP/HTTP traces URL"),
        ({"endpoint": "127.0.0.1:4318"}, "telemetry.endpoint: expected the OTLP/HTTP traces URL"),
        (
            {"endpoint": "http://h", "sampling": 2},
            "telemetry.sampling: expected a ratio from 0 to 1",
        ),
        ({"endpoint": "http://h", "sampling": True}, "telemetry.sampling: expected a ratio"),
        ({"endpoint": "http://h", "timeout_s": 0}, "telemetry.timeout_s: expected seconds"),
        # an integer too big for a float (TOML reads one): an OverflowError before
        ({"endpoint": "http://h", "timeout_s": 10**400}, "telemetry.timeout_s: expected seconds"),
        ({"endpoint": "http://h", "enabled": "yes"}, "telemetry.enabled: expected true or false"),
        (
            {"endpoint": "http://h", "service_name": " "},
            "telemetry.service_name: expected a non-empty",
        ),
        ({"endpoint": "http://h", "headers": {"a b": "c"}}, "telemetry.headers: expected a table"),
        ({"endpoint": "http://h", "headers": {"a": "c\r\nx: y"}}, "telemetry.headers: expected"),
    ],
)
def test_a_bad_value_names_the_key(table, message):
    with pytest.raises(ConfigError) as caught:
        TelemetrySettings.from_config(table)
    assert message in str(caught.value)


async def test_a_typo_in_roost_toml_stops_the_boot_naming_the_file(tmp_path):
    path = tmp_path / "roost.toml"
    path.write_text('[telemetry]\nendpoint = "http://127.0.0.1:4318/v1/traces"\nsample = 0.5\n')
    config = load_config(path, env={"ROOST_HOME": str(tmp_path / "home")})
    with pytest.raises(ConfigError) as caught:
        async with open_kernel(config):
            pass
    assert str(caught.value).startswith(f"{path}: telemetry: unknown key 'sample'")
    assert not (tmp_path / "home").exists()  # nothing started


async def test_configured_without_the_extra_the_error_says_how_to_install_it(tmp_path, monkeypatch):
    # What find_spec reports when the package is not installed.
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    config = default_config(
        home=str(tmp_path / "home"), telemetry={"endpoint": "http://127.0.0.1:4318/v1/traces"}
    )
    with pytest.raises(ConfigError) as caught:
        async with open_kernel(config):
            pass
    assert "run pip install 'roost[otel]'" in str(caught.value)
    assert "opentelemetry.sdk.trace is not installed" in str(caught.value)


NO_TELEMETRY = textwrap.dedent(
    """
    import sys, tempfile, trio
    from roost.kernel import default_config, open_kernel

    async def main():
        with tempfile.TemporaryDirectory() as home:
            async with open_kernel(default_config(home=home)) as kernel:
                names = [name for name, _ in kernel.plugins.list_name_plugin()]
                reply = await kernel.send("coordinator", "Write a haiku")
                assert not reply.is_error, reply.text
                print("otel" in names, "roost.plugins.otel" in sys.modules,
                      kernel.tap.wants("TRACE:SPAN_END"), "otel" in kernel.service_errors)
        print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))

    trio.run(main)
    """
)


def test_without_the_table_nothing_of_opentelemetry_is_imported_and_no_span_recorded(tmp_path):
    # A fresh interpreter: the tests themselves import OpenTelemetry.
    out = subprocess.run(
        [sys.executable, "-c", NO_TELEMETRY],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    loaded, imported, tracing, failed = out.stdout.splitlines()[0].split()
    # the plugin is loaded, runs no service, subscribes to nothing: spans are not recorded
    assert (loaded, imported, tracing, failed) == ("True", "True", "False", "False")
    assert out.stdout.splitlines()[1] == "[]"
