"""The bash tool: workspace, Landlock confinement, timeout, output cap, clean environment."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import trio
from roost.kernel import SandboxError, ToolCall, ToolContext, ToolsConfig
from roost.plugins.tools import (
    ToolsSettings,
    _sandbox_exec,
    build_tools,
    file_access,
    landlock_status,
)
from roost.plugins.tools._bash import child_environment, command_argv
from waiting import wait_until

BASH = {t.spec.name: t for t in build_tools()}["bash"]
needs_landlock = pytest.mark.skipif(
    not landlock_status().available, reason=f"needs Landlock: {landlock_status().reason}"
)


def context(workspace: Path, sandbox: str = "sandbox", **kw) -> ToolContext:
    return ToolContext(agent="tester", workspace=workspace, sandbox=sandbox, **kw)


async def bash(ctx: ToolContext, command: str, tool=BASH, **arguments):
    return await tool.handler(
        ToolCall(name="bash", arguments={"command": command, **arguments}), ctx
    )


@pytest.fixture
def outside_dir():
    """A directory writable by this (root) user that is neither under the temp dir nor
    the workspace: only Landlock, not file permissions, keeps bash out of it."""
    temp = Path(tempfile.gettempdir()).resolve()
    for parent in (Path.home(), Path("/var/tmp"), Path.cwd()):
        parent = parent.resolve()
        if parent.is_dir() and not parent.is_relative_to(temp) and os.access(parent, os.W_OK):
            path = Path(tempfile.mkdtemp(prefix="roost-outside-", dir=parent))
            break
    else:  # pragma: no cover
        pytest.skip("no writable directory outside the temp dir")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def marked(marker: str) -> list[int]:
    """Host PIDs of processes whose command line holds ``marker`` (bash may run in its own
    PID namespace, where ``$!`` is not the host's PID), zombies included."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


async def wait_until_reaped(marker: str) -> None:
    """Every process marked ``marker`` gone entirely: not running, not a zombie."""
    await wait_until(
        lambda: not marked(marker), lambda: f"processes {marked(marker)} reaped", timeout=5
    )


def unique_sleep() -> str:
    """A ``sleep`` argument no other process has (the marker for ``marked``)."""
    return f"300.{os.getpid()}{int(trio.current_time() * 1e6) % 10**6:06d}"


async def test_runs_in_the_workspace_and_writes_there(tmp_path):
    result = await bash(context(tmp_path), "pwd; echo hi > x; cat x")
    assert not result.is_error
    text = result.as_text()
    assert text.splitlines()[:2] == [str(tmp_path.resolve()), "hi"]
    assert text.endswith("[exit code: 0]")
    assert (tmp_path / "x").read_text() == "hi\n"
    assert result.structured_content == {"exit_code": 0, "timed_out": False, "truncated": False}


async def test_exit_code_and_stderr_are_reported(tmp_path):
    result = await bash(context(tmp_path), "echo out; echo err >&2; exit 3")
    text = result.as_text()
    assert "out" in text and "[stderr]\nerr" in text and text.endswith("[exit code: 3]")
    assert result.structured_content["exit_code"] == 3
    assert not result.is_error  # a failing command is a result, not a tool failure


@needs_landlock
async def test_landlock_blocks_writes_outside_the_workspace_and_temp(tmp_path, outside_dir):
    target = outside_dir / "roost_should_fail"
    result = await bash(context(tmp_path), f"echo pwned > {target}; echo rc=$?")
    assert "Permission denied" in result.as_text()
    assert "rc=1" in result.as_text()
    assert not target.exists()
    for command in (
        f"mkdir {outside_dir}/d",
        f"touch {outside_dir}/t",
        f"ln -s /etc {outside_dir}/l",
    ):
        await bash(context(tmp_path), command)
    assert list(outside_dir.iterdir()) == []


@needs_landlock
async def test_landlock_still_allows_its_temp_dir_dev_null_and_reads(tmp_path):
    result = await bash(
        context(tmp_path),
        'echo t > "$TMPDIR/t" && cat "$TMPDIR/t" && echo ok > /dev/null && '
        "head -c 4 /etc/hostname >/dev/null && echo err >&2 && cat <<EOF\nheredoc works\nEOF",
    )
    assert result.structured_content["exit_code"] == 0, result.as_text()
    assert "t\nheredoc works" in result.as_text() and "err" in result.as_text()


@needs_landlock
async def test_read_only_mode_confines_bash_to_the_temp_dir(outside_dir):
    workspace = outside_dir  # not under the temp dir, which stays writable
    result = await bash(
        context(workspace, "read-only"),
        "echo x > in_workspace; echo rc=$?; f=$(mktemp) && echo y > $f && echo temp-ok; rm -f $f",
    )
    assert "rc=1" in result.as_text() and "temp-ok" in result.as_text()
    assert not (workspace / "in_workspace").exists()


async def test_rwx_mode_is_not_confined(tmp_path, outside_dir):
    target = outside_dir / "free"
    result = await bash(context(tmp_path, "rwx"), f"echo ok > {target}")
    assert result.structured_content["exit_code"] == 0
    assert target.read_text() == "ok\n"


def test_command_argv_runs_bash_under_the_supervisor(tmp_path):
    free = command_argv("ls", file_access(context(tmp_path, "rwx")))
    assert free[-3:][1:] == ["-c", "ls"] and "--tcp" not in free
    assert free[1:6] == ["-I", "-S", _sandbox_exec.__file__, "--parent", str(os.getpid())]
    confined = command_argv("ls", file_access(context(tmp_path)), connect=(443,))
    if landlock_status().available:
        assert "--landlock" in confined and "--no-files" in free
        assert ["--write", str(tmp_path.resolve())] in [
            confined[i : i + 2] for i in range(len(confined))
        ]
        at = confined.index("--tcp")
        assert confined[at : at + 3] == ["--tcp", "--connect", "443"]
    assert confined[confined.index("--") + 1 :][1:] == ["-c", "ls"]


async def test_timeout_kills_the_command(tmp_path):
    result = await bash(context(tmp_path), "echo started; sleep 30; echo never", timeout=0.5)
    text = result.as_text()
    assert result.is_error
    assert "started" in text and "never" not in text
    assert "timed out after 0.5 s" in text
    assert result.structured_content["timed_out"] is True


async def test_backgrounded_child_does_not_outlive_the_call(tmp_path):
    mark = unique_sleep()
    await bash(context(tmp_path), f"sleep {mark} & echo $!")
    await wait_until_reaped(mark), f"background sleep {mark} is still running"


async def test_child_that_left_the_session_is_reaped_too(tmp_path):
    mark = unique_sleep()
    await bash(context(tmp_path), f"setsid sleep {mark} > /dev/null 2>&1 & echo $!")
    await wait_until_reaped(mark), f"setsid sleep {mark} survived the call"


async def test_killed_command_reports_128_plus_the_signal(tmp_path):
    result = await bash(context(tmp_path), "kill -9 $$")
    assert result.structured_content["exit_code"] == 137


async def test_backgrounded_child_holding_the_pipe_is_killed_on_timeout(tmp_path):
    mark = unique_sleep()
    result = await bash(context(tmp_path), f"(sleep {mark}; echo late) & wait", timeout=0.5)
    assert result.structured_content["timed_out"]
    await wait_until_reaped(mark)


async def test_cancelling_the_call_kills_the_process_group(tmp_path):
    mark = unique_sleep()
    with trio.move_on_after(1.0):
        await bash(context(tmp_path), f"sleep {mark} & wait")
    await wait_until_reaped(mark)


async def test_output_is_capped_and_marked(tmp_path):
    tool = {t.spec.name: t for t in build_tools(ToolsSettings(bash_max_output_chars=1000))}["bash"]
    result = await bash(
        context(tmp_path), "yes abcdefghij | head -c 100000; yes ERR | head -c 50000 >&2", tool=tool
    )
    text = result.as_text()
    assert result.structured_content["truncated"] is True
    assert "[output truncated]" in text
    assert len(text) < 1000 + 300
    assert "abcdefghij" in text and "ERR" in text  # both streams get a share


async def test_output_cap_follows_the_context_limit(tmp_path):
    result = await bash(context(tmp_path, max_output_chars=500), "seq 1 100000")
    assert result.structured_content["truncated"] and len(result.as_text()) < 800


async def test_environment_is_cleared_except_the_allowlist(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOST_TEST_SECRET", "s3cret-value")
    monkeypatch.setenv("ROOST_TEST_ALLOWED", "visible")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nope")
    result = await bash(context(tmp_path, env_allowlist=("ROOST_TEST_ALLOWED",)), "env")
    env = dict(line.split("=", 1) for line in result.as_text().splitlines() if "=" in line)
    assert "s3cret-value" not in result.as_text()
    assert "ROOST_TEST_SECRET" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["ROOST_TEST_ALLOWED"] == "visible"
    assert env["HOME"] == str(tmp_path.resolve())
    assert env["PATH"] and env["LANG"]


async def test_settings_allowlist_is_passed_too(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOST_FROM_CONFIG", "yes")
    tool = {
        t.spec.name: t for t in build_tools(ToolsSettings(env_allowlist=("ROOST_FROM_CONFIG",)))
    }["bash"]
    result = await bash(context(tmp_path), "echo $ROOST_FROM_CONFIG", tool=tool)
    assert result.as_text().startswith("yes")


def test_child_environment_has_only_the_base_names(tmp_path, monkeypatch):
    monkeypatch.setenv("SOME_TOKEN", "x")
    assert set(child_environment(tmp_path, ())) == {"PATH", "HOME", "LANG"}
    assert child_environment(tmp_path, ("SOME_TOKEN", "NOT_SET_ANYWHERE"))["SOME_TOKEN"] == "x"


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"command": ""}, "arguments.command"),
        ({"command": "ls", "timeout": -1}, "arguments.timeout"),
        ({"command": "ls", "timeout": "5"}, "arguments.timeout"),
    ],
)
async def test_bad_arguments_are_clear_errors(tmp_path, arguments, needle):
    result = await BASH.handler(ToolCall(name="bash", arguments=arguments), context(tmp_path))
    assert result.is_error and needle in result.as_text()


async def test_missing_workspace_is_a_sandbox_error(tmp_path):
    with pytest.raises(SandboxError, match="does not exist"):
        await bash(context(tmp_path / "missing"), "ls")


async def test_a_timeout_past_the_largest_float_is_capped_not_an_overflow(tmp_path):
    # Regression: the handler converted the timeout to float before capping it, so 10**400
    # (past the schema check when the handler is called directly) raised OverflowError.
    result = await bash(context(tmp_path), "echo capped", timeout=10**400)
    assert not result.is_error and "capped" in result.as_text(), result


def test_timeout_is_capped_by_settings_and_the_spec_outlasts_it():
    tool = {t.spec.name: t for t in build_tools(ToolsSettings.from_config(None))}["bash"]
    assert tool.spec.input_schema["properties"]["timeout"]["maximum"] == 120
    assert tool.spec.timeout_s > 120


async def test_settings_read_from_a_real_config(tmp_path):
    config = type("Config", (), {"tools": ToolsConfig()})()
    settings = ToolsSettings.from_config(config)
    assert settings.bash_timeout_s == ToolsConfig().bash_timeout_s
    assert settings.bash_max_output_chars == ToolsConfig().bash_max_output_chars


def test_the_namespace_probe_runs_no_program_found_on_path(tmp_path, monkeypatch):
    """The probe runs the supervisor without Landlock: a ``true`` planted in a directory on
    roost's PATH (one an agent may write, say) must not run there, nor make bash lose its
    namespaces by failing."""
    from roost.plugins.tools import _bash

    before = _bash.namespaces_status(), _bash.network_namespace_status()
    if not before[0][0]:
        pytest.skip(f"no PID namespace here: {before[0][1]}")
    planted, marker = tmp_path / "bin", tmp_path / "ran"
    planted.mkdir()
    (planted / "true").write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    (planted / "true").chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted}:{os.environ.get('PATH', '')}")
    _bash._probe.cache_clear()
    try:
        status = _bash.namespaces_status(), _bash.network_namespace_status()
    finally:
        monkeypatch.undo()
        _bash._probe.cache_clear()
    assert not marker.exists(), "the probe ran a program planted on PATH"
    assert status == before, status


def test_bash_is_the_system_one_not_one_planted_on_path(tmp_path, monkeypatch):
    """The sandboxed command ran the first ``bash`` on roost's PATH: one planted in a
    directory there (one an agent may write, say) would run every agent's commands. It is
    the system's bash, found on the system's default path."""
    planted = tmp_path / "bin"
    planted.mkdir()
    (planted / "bash").write_text("#!/bin/sh\nexit 0\n")
    (planted / "bash").chmod(0o755)
    monkeypatch.setenv("PATH", f"{planted}:{os.environ.get('PATH', '')}")
    argv = command_argv("echo hi", file_access(context(tmp_path)))
    assert str(planted / "bash") not in argv
    assert any(arg in ("/usr/bin/bash", "/bin/bash") for arg in argv), argv
