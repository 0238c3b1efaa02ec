"""The ``roost`` console script: real subprocesses for a few commands, ``main()`` for errors."""

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from roost.plugins.cli import build_parser, main
from roost.plugins.cli._main import _leaf, describe_error
from waiting import wait_until_sync

ROOST = Path(sys.executable).with_name("roost")


def run_roost(*args, env=None, cwd=None, timeout=60):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [str(ROOST), *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout
    )


def isolated_env(tmp_path):
    """No inherited config or key: a private home, no ROOST_CONFIG."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
    env["ROOST_HOME"] = str(tmp_path / "home")
    return env


def test_help_lists_every_command():
    result = run_roost("--help")
    assert result.returncode == 0
    for command in ["run", "demo", "agents", "tools", "send", "watch", "validate", "version"]:
        assert f"    {command} " in result.stdout
    assert result.stderr == ""


def test_importing_the_cli_loads_no_heavy_modules():
    code = (
        "import sys, roost.plugins.cli\n"
        "heavy = ['trio', 'quart', 'hypercorn', 'httpx', 'roost.kernel', 'logging']\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_version():
    result = run_roost("version")
    assert result.returncode == 0
    assert result.stdout.startswith("roost 0.")


def test_validate_good_and_bad_files(tmp_path):
    good = tmp_path / "good" / "agent.json"
    good.parent.mkdir()
    good.write_text(
        json.dumps(
            {
                "name": "pinger",
                "description": "answers pong",
                "version": "0.1.0",
                "model": {"provider": "scripted", "name": "rules"},
            }
        )
    )
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "Not A Name", "model": {}}')
    ok = run_roost("validate", str(good))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"OK     {good}\n"
    mixed = run_roost("validate", str(good), str(bad), str(tmp_path / "missing.json"))
    assert mixed.returncode == 1
    lines = mixed.stdout.splitlines()
    assert lines[0] == f"OK     {good}"
    assert any(line.startswith(f"ERROR  {bad}: at /name") for line in lines)
    assert any("missing.json" in line for line in lines[1:])
    assert "Traceback" not in mixed.stderr


def test_bad_arguments_exit_2_with_the_reason():
    result = run_roost("run", "--port", "70000")
    assert result.returncode == 2
    assert "port must be from 0 to 65535" in result.stderr
    missing = run_roost("send", "coder")
    assert missing.returncode == 2
    assert "MESSAGE" in missing.stderr


def test_out_of_range_numbers_are_quoted_as_typed_never_a_traceback():
    # A number argparse's type refuses is shown as the user typed it: 1234567 is not
    # "1.23457e+06", and a port of 400 digits (too large for a float) is no OverflowError.
    for typed in ("1234567", "9" * 400):
        result = run_roost("run", "--port", typed)
        assert result.returncode == 2, result.stderr
        assert f"port must be from 0 to 65535 (0 picks a free port), got {typed}" in result.stderr
        assert "Traceback" not in result.stderr
    count = run_roost("watch", "--count", "0")
    assert (
        count.returncode == 2
        and "expected a whole number from 1 to 1000000000, got 0" in count.stderr
    )
    timeout = run_roost("send", "coder", "hi", "--timeout", "7200")
    assert timeout.returncode == 2
    assert "expected seconds between 0 and 3600, got 7200" in timeout.stderr


def test_config_error_is_one_line_and_debug_shows_the_traceback(tmp_path):
    env = isolated_env(tmp_path)
    missing = str(tmp_path / "nope.toml")
    plain = run_roost("--config", missing, "agents", env=env)
    assert plain.returncode == 1
    assert plain.stderr.startswith("roost: error: config file")
    assert len(plain.stderr.strip().splitlines()) == 1
    debug = run_roost("agents", "--config", missing, "--debug", env=env)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr
    assert "ConfigError" in debug.stderr


def test_main_reports_errors_in_one_line(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("ROOST_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ROOST_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = main(["watch"], out=out, err=err)
    assert code == 1
    assert err.getvalue().startswith("roost: error: no roost daemon is running")
    assert err.getvalue().count("\n") == 1
    bad_toml = tmp_path / "roost.toml"
    bad_toml.write_text("[http]\nport = 'eighty'\n")
    err = io.StringIO()
    assert main(["agents"], out=out, err=err) == 1
    assert "http.port" in err.getvalue()


def test_error_descriptions():
    from roost.kernel import ConfigError

    group = ExceptionGroup("outer", [ExceptionGroup("inner", [ConfigError("bad port")])])
    assert isinstance(_leaf(group), ConfigError)
    assert describe_error(_leaf(group)) == "bad port"
    assert describe_error(ConnectionRefusedError("refused")) == "refused"
    assert "run again with --debug" in describe_error(ZeroDivisionError("x"))


HOSTILE = ["٨٠", "²", "+80", " 80", "8_0", "-1", "1e3", "0x50", "9" * 5000, ""]


def test_a_number_option_not_in_ascii_digits_is_refused_as_typed(capsys):
    # Regression: int() read "٨٠" (80), "+80", " 80" and "8_0"; float() read "١٢" (12).
    parser = build_parser()
    for argv, why in (
        (["run", "--port"], "port must be from 0 to 65535 (0 picks a free port)"),
        (["watch", "--count"], "expected a whole number from 1 to 1000000000"),
        (["send", "coder", "hi", "--timeout"], "expected seconds between 0 and 3600"),
    ):
        for typed in [*HOSTILE, *(["nan", "inf", "١٢"] if "seconds" in why else [])]:
            if "seconds" in why and typed in ("+80", " 80", "8_0", "1e3"):
                continue  # seconds are Python's float syntax, in ASCII
            try:
                parser.parse_args([*argv, typed])
            except SystemExit as exc:
                assert exc.code == 2, typed
            else:
                raise AssertionError(f"{argv[-1]} {typed!r} was accepted")
            assert f"{why}, got {typed}" in capsys.readouterr().err
    assert parser.parse_args(["run", "--port", "08470"]).port == 8470
    assert parser.parse_args(["watch", "--count", "3"]).count == 3
    assert parser.parse_args(["send", "coder", "hi", "--timeout", "2.5"]).timeout == 2.5


def test_global_options_work_before_or_after_the_command():
    parser = build_parser()
    before = parser.parse_args(["--config", "a.toml", "--debug", "agents"])
    after = parser.parse_args(["agents", "--config", "a.toml", "--debug"])
    assert (before.config, before.debug) == (after.config, after.debug) == ("a.toml", True)
    watch = parser.parse_args(["watch", "--kinds", "EXEC:,AGENT:REPLY", "KERNEL:"])
    from roost.plugins.cli._main import _kinds

    assert _kinds(watch.kinds) == ["EXEC:", "AGENT:REPLY", "KERNEL:"]


# ---- with the real kernel -------------------------------------------------------------


def write_project(tmp_path):
    agent = tmp_path / "agents" / "pinger" / "agent.json"
    agent.parent.mkdir(parents=True)
    agent.write_text(
        json.dumps(
            {
                "name": "pinger",
                "description": "answers pong",
                "version": "0.1.0",
                "model": {
                    "provider": "scripted",
                    "name": "rules",
                    "script": {"rules": [{"match": ".", "reply": "pong: {message}"}]},
                },
            }
        )
    )
    config = tmp_path / "roost.toml"
    config.write_text(
        f'home = "{tmp_path / "home"}"\n[agents]\ndirs = ["{tmp_path / "agents"}"]\n'
        "bundled = false\n"
    )
    return config


def test_send_in_process_with_the_real_kernel(tmp_path):
    config = write_project(tmp_path)
    result = run_roost(
        "--config", str(config), "send", "pinger", "hello", env=isolated_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "pong: hello\n"
    assert "booting kernel" in result.stderr
    as_json = run_roost(
        "--config", str(config), "send", "pinger", "hi", "--json", env=isolated_env(tmp_path)
    )
    assert json.loads(as_json.stdout)["reply"] == "pong: hi"
    unknown = run_roost("--config", str(config), "send", "nobody", "hi", env=isolated_env(tmp_path))
    assert unknown.returncode == 1
    assert "unknown agent 'nobody'; known agents: pinger" in unknown.stderr


def test_run_serves_then_stops_on_sigterm(tmp_path):
    config = write_project(tmp_path)
    env = isolated_env(tmp_path)
    daemon_json = tmp_path / "home" / "daemon.json"
    proc = subprocess.Popen(
        [str(ROOST), "--config", str(config), "run", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:

        def started() -> bool:
            assert proc.poll() is None, proc.communicate()
            return daemon_json.exists()

        wait_until_sync(started, "the daemon started", timeout=30)
        sent = run_roost("--config", str(config), "send", "pinger", "via daemon", env=env)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout == "pong: via daemon\n"
        assert "via the daemon at" in sent.stderr
        agents = run_roost("--config", str(config), "agents", env=env)
        assert agents.stdout.splitlines()[1].startswith("pinger")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "listening on http://127.0.0.1:" in out
    assert "agents (1): pinger" in out
    assert "received SIGTERM" in err
    assert not daemon_json.exists()


def test_a_count_past_its_bound_is_refused_naming_the_bound(capsys):
    # Regression: parse_int gave --count a top of 10**9, but the refusal still said "expected
    # a positive whole number" of a positive whole number.
    parser = build_parser()
    assert parser.parse_args(["watch", "--count", "1000000000"]).count == 10**9
    with pytest.raises(SystemExit):
        parser.parse_args(["watch", "--count", "1000000001"])
    err = capsys.readouterr().err
    assert "expected a whole number from 1 to 1000000000, got 1000000001" in err, err
