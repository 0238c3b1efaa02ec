"""Landlock via ctypes and the ``_sandbox_exec`` supervisor, run as real processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from roost.plugins.tools import _landlock, _sandbox, _sandbox_exec, landlock_status
from waiting import wait_until_sync

needs_landlock = pytest.mark.skipif(
    not landlock_status().available, reason=f"needs Landlock: {landlock_status().reason}"
)
BASH = shutil.which("bash") or "/bin/bash"
# What a confined command needs to run at all: read the system trees.
SYSTEM = tuple(
    arg for root in _sandbox.SYSTEM_READ_ROOTS if os.path.exists(root) for arg in ("--read", root)
)


def supervise(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-S", _sandbox_exec.__file__, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def dirs(tmp_path):
    """An allowed dir and a dir outside every allowed root (not under the temp dir)."""
    temp = Path(tempfile.gettempdir()).resolve()
    parent = next(
        p.resolve()
        for p in (Path.home(), Path("/var/tmp"), Path.cwd())
        if p.is_dir() and not p.resolve().is_relative_to(temp) and os.access(p, os.W_OK)
    )
    outside = Path(tempfile.mkdtemp(prefix="roost-landlock-", dir=parent))
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    yield allowed, outside
    shutil.rmtree(outside, ignore_errors=True)


def test_access_rights_per_abi():
    assert _landlock.fs_access_for_abi(1) == 0x1FFF
    assert _landlock.fs_access_for_abi(2) == 0x1FFF | _landlock.ACCESS_FS_REFER
    assert _landlock.fs_access_for_abi(3) == 0x7FFF
    assert _landlock.fs_access_for_abi(4) == 0x7FFF  # ABI 4 added network rights only
    assert _landlock.fs_access_for_abi(5) == 0xFFFF
    assert _landlock.fs_access_for_abi(7) == 0xFFFF


def test_status_is_cached_and_describes_itself():
    status = landlock_status()
    assert landlock_status() is status
    if status.available:
        assert status.abi >= 1 and "confined" in status.describe()
    else:  # pragma: no cover
        assert "NOT confined" in status.describe() and status.reason


def test_this_machine_supports_landlock():
    # The brief says these hosts support Landlock; if this fails, bash is unconfined here.
    assert landlock_status().available, landlock_status().reason


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "missing '--'"),
        (("--write",), "unexpected argument '--write'"),
        (("--bogus", "--", "true"), "unexpected argument '--bogus'"),
        (("--",), "no command"),
    ],
)
def test_supervisor_rejects_bad_arguments(args, needle):
    done = supervise(*args)
    assert done.returncode == 2
    assert needle in done.stderr and "usage:" in done.stderr


def test_supervisor_passes_the_exit_status_and_output():
    done = supervise("--", BASH, "-c", "echo out; echo err >&2; exit 5")
    assert (done.returncode, done.stdout, done.stderr) == (5, "out\n", "err\n")


def test_supervisor_reports_a_command_that_cannot_run():
    done = supervise("--", "/nonexistent/program")
    assert done.returncode == 127
    assert "cannot run '/nonexistent/program'" in done.stderr


def _namespaces() -> bool:
    from roost.plugins.tools import _bash

    return _bash.namespaces_status()[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # Regression: a limit too big for setrlimit raised OverflowError, and exited 127.
        pytest.param(("--memory", str(2**60)), "resource limits", id="memory-overflow"),
        pytest.param(
            ("--landlock", "--tcp", "--connect", "70000"),
            "Landlock could not be applied",
            marks=pytest.mark.skipif(not landlock_status().tcp, reason="needs Landlock ABI 4"),
            id="landlock",
        ),
        # Regression: ctypes wrapped a port of 2**64 + 80 to 80, and the command ran with it.
        pytest.param(
            ("--landlock", "--read", "/", "--tcp", "--connect", str(2**64 + 80)),
            "Landlock could not be applied",
            marks=pytest.mark.skipif(not landlock_status().tcp, reason="needs Landlock ABI 4"),
            id="landlock-port-wraps",
        ),
        pytest.param(("--nofile", str(2**40)), "resource limits could not be applied", id="rlimit"),
        pytest.param(
            ("--pidns", "--tmp", "/nonexistent/roost-tmp", "16"),
            "cannot mount a tmpfs",
            marks=pytest.mark.skipif(not _namespaces(), reason="needs a PID namespace"),
            id="tmpfs",
        ),
        pytest.param(
            ("--pidns", "--processes", str(2**23)),
            "pid_max",
            marks=pytest.mark.skipif(
                not (_namespaces() and _sandbox_exec.PER_NAMESPACE_PID_MAX),
                reason="needs a PID namespace with its own pid_max (Linux >= 6.14)",
            ),
            id="pid_max",
        ),
    ],
)
def test_a_setup_failure_refuses_to_run_the_command(tmp_path, args, needle):
    """Whatever part of the confinement cannot be applied, the command does not run:
    exit 126 and a reason, never the command with less confinement."""
    ran = tmp_path / "ran"
    done = supervise(*args, "--", "/usr/bin/touch", str(ran))
    assert done.returncode == _sandbox_exec.SANDBOX_EXIT_CODE, done
    assert needle in done.stderr and "refusing" in done.stderr, done.stderr
    assert not ran.exists()


def test_a_path_that_looks_like_an_option_stays_a_path():
    """The table-driven parser takes the word after ``--read``/``--write``/``--deny`` as a
    path whatever it looks like: a root cannot switch a confinement off."""
    opts = _sandbox_exec.parse(
        ["--landlock", "--read", "--no-files", "--write", "--no-scope", "--deny", "--", "--", "x"]
    )
    assert (opts.read, opts.write, opts.deny) == (["--no-files"], ["--no-scope"], ["--"])
    assert (opts.files, opts.scope, opts.command) == (True, True, ["x"])


def test_supervisor_reaps_what_the_command_leaves_behind():
    done = supervise("--", BASH, "-c", "sleep 300 & setsid sleep 300 & echo $!; echo $!")
    assert done.returncode == 0
    for pid in map(int, done.stdout.split()):
        assert not Path(f"/proc/{pid}").exists(), f"{pid} was left behind"


def test_sigterm_kills_and_reaps_the_command_tree(tmp_path):
    pid_file = tmp_path / "pid"
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", _sandbox_exec.__file__, "--", BASH, "-c",
         f"sleep 300 & echo $! > {pid_file}; wait"],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until_sync(
            lambda: pid_file.exists() and pid_file.read_text().strip(), "the command started"
        )
        child = int(pid_file.read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
        assert not Path(f"/proc/{child}").exists()
    finally:
        if proc.poll() is None:  # pragma: no cover
            proc.kill()
            proc.wait(timeout=10)


@needs_landlock
def test_landlock_confines_writes_to_the_allowed_dirs(dirs):
    allowed, outside = dirs
    (outside / "existing").write_text("keep\n")
    script = "; ".join(
        [
            f"echo ok > {allowed}/a && echo wrote-allowed",
            f"mkdir {allowed}/d && rmdir {allowed}/d && echo mkdir-allowed",
            f"ln -s a {allowed}/l && echo symlink-allowed",
            f"echo x > {outside}/new || echo denied-create",
            f"echo x >> {outside}/existing || echo denied-append",
            f": > {outside}/existing || echo denied-truncate",
            f"rm -f {outside}/existing || echo denied-remove",
            f"mkdir {outside}/d || echo denied-mkdir",
            f"mv {allowed}/a {outside}/moved || echo denied-rename-out",
            f"cat {outside}/existing || echo denied-read",
            "echo x > /dev/null && echo devnull-ok",
        ]
    )
    done = supervise("--landlock", *SYSTEM, "--write", str(allowed), "--", BASH, "-c", script)
    out = done.stdout.split()
    for marker in (
        "wrote-allowed", "mkdir-allowed", "symlink-allowed", "denied-create", "denied-append",
        "denied-truncate", "denied-remove", "denied-mkdir", "denied-rename-out", "denied-read",
        "devnull-ok",
    ):  # fmt: skip
        assert marker in out, (marker, done.stdout, done.stderr)
    assert sorted(p.name for p in outside.iterdir()) == ["existing"]
    assert (outside / "existing").read_text() == "keep\n"


@needs_landlock
def test_landlock_with_no_writable_dirs_allows_reads_only(dirs):
    _, outside = dirs
    done = supervise(
        "--landlock",
        *SYSTEM,
        "--",
        BASH,
        "-c",
        f"head -c 1 /etc/passwd; echo x > {outside}/f; echo rc=$?",
    )
    assert "rc=1" in done.stdout and not (outside / "f").exists()


@needs_landlock
def test_nonexistent_writable_dir_is_skipped_not_fatal(dirs):
    allowed, _ = dirs
    done = supervise(
        "--landlock", *SYSTEM, "--write", str(allowed / "missing"), "--write", str(allowed),
        "--", BASH, "-c", f"echo ok > {allowed}/f",
    )  # fmt: skip
    assert done.returncode == 0 and (allowed / "f").read_text() == "ok\n"
