"""The per-agent file-access model: manifest grants, carve-outs, the temp dir, the network
grant and the isolation pieces of the bash supervisor (run for real)."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from roost.kernel import (
    ManifestError,
    ToolCall,
    ToolContext,
    default_config,
    open_kernel,
    parse_manifest,
)
from roost.plugins.tools import (
    _bash,
    _landlock,
    _sandbox,
    _sandbox_exec,
    build_tools,
    file_access,
    landlock_status,
    roost_tools,
)

LANDLOCK = landlock_status()
needs_landlock = pytest.mark.skipif(
    not LANDLOCK.available, reason=f"needs Landlock: {LANDLOCK.reason}"
)
needs_tcp = pytest.mark.skipif(
    not LANDLOCK.tcp, reason=f"needs Landlock ABI 4 (have {LANDLOCK.abi})"
)
TOOLS = ["read", "write", "list", "glob", "grep", "bash"]


def agent(name: str, **extra) -> dict:
    return {
        "name": name,
        "description": name,
        "model": {"provider": "scripted", "script": {"default_reply": "ok"}},
        "capabilities": {"tools": TOOLS},
        **extra,
    }


async def call(kernel, name: str, tool: str, **arguments):
    return await kernel.call_tool(name, ToolCall(name=tool, arguments=arguments))


@pytest.fixture
def shared(tmp_path):
    """A directory outside every agent's roots holding a file and a writable subdir."""
    root = tmp_path / "shared"
    (root / "out").mkdir(parents=True)
    (root / "notes.txt").write_text("shared notes\n")
    return root


# ---- the manifest -------------------------------------------------------------------------


def test_grants_parse_relative_to_the_manifest_and_default_to_none(tmp_path):
    plain = parse_manifest(agent("a"), base_dir=tmp_path)
    assert plain.files.read == () and plain.files.write == () and plain.network.connect == ()
    granted = parse_manifest(
        agent(
            "a",
            files={"read": ["data", "/srv/x"], "write": ["~/out"]},
            network={"connect": [443], "bind": [8080]},
        ),
        base_dir=tmp_path,
    )
    assert granted.files.read == (tmp_path / "data", Path("/srv/x"))
    assert granted.files.write == (Path("~/out").expanduser(),)
    assert (granted.network.connect, granted.network.bind) == ((443,), (8080,))


@pytest.mark.parametrize(
    ("extra", "pointer"),
    [
        ({"files": {"read": "/etc"}}, "/files/read"),
        ({"files": {"read": [""]}}, "/files/read/0"),
        ({"files": {"exec": ["/bin"]}}, "/files/exec"),
        ({"files": {"read": ["a\0b"]}}, "/files/read/0"),
        ({"network": {"connect": [0]}}, "/network/connect/0"),
        ({"network": {"connect": [70000]}}, "/network/connect/0"),
        ({"network": {"connect": ["443"]}}, "/network/connect/0"),
        ({"network": {"hosts": ["example.com"]}}, "/network/hosts"),
    ],
)
def test_bad_grants_name_the_field(tmp_path, extra, pointer):
    with pytest.raises(ManifestError) as info:
        parse_manifest(agent("a", **extra), base_dir=tmp_path)
    assert info.value.pointer == pointer, str(info.value)


# ---- the model ----------------------------------------------------------------------------


def test_data_dir_and_other_workspaces_are_carved_out_of_a_granted_root(tmp_path):
    home = tmp_path / "home"
    other = home / "workspaces" / "other"
    for d in (other, home / "workspaces" / "me"):
        d.mkdir(parents=True)
    (home / "roost.db").write_text("db")
    (tmp_path / "mine.txt").write_text("mine")

    class Kernel:
        config = type("C", (), {"home": home})()
        agents = {
            "me": parse_manifest(agent("me", files={"read": [str(tmp_path)]})),
            "other": parse_manifest(agent("other")),
        }

    access = file_access(
        ToolContext(agent="me", workspace=home / "workspaces" / "me", kernel=Kernel())
    )
    assert access.temp == (home / "tmp" / "me").resolve() and access.temp.is_dir()
    assert access.locate(str(tmp_path / "mine.txt")).root == tmp_path.resolve()
    for path, what in (
        (home / "roost.db", "roost's data directory"),
        (other / "x", "agent 'other''s workspace"),
    ):
        with pytest.raises(Exception, match=what):
            access.locate(str(path))
    # Its own workspace inside the data dir stays its own; bash's temp dir (a private
    # tmpfs per command) is no file tool's root.
    assert access.locate("f.txt").root == (home / "workspaces" / "me").resolve()
    with pytest.raises(Exception, match="roost's data directory"):
        access.locate(str(access.temp / "t"))
    below = access.denied_below(access.locate(str(tmp_path)))
    assert below == {"home", "home/workspaces/other"}


def test_carves_are_resolved_once_and_follow_an_agent_added_or_moved(tmp_path):
    # Regression: every file tool and bash call resolved every agent's workspace and
    # manifest (20,000 realpaths at 10,000 agents, on the event loop); now once per set of
    # agents, and a change of agents or of their paths is carved on the next call.
    home = tmp_path / "home"
    (home / "workspaces" / "me").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    class Kernel:
        config = type("C", (), {"home": home})()
        agents = {"me": parse_manifest(agent("me", files={"read": [str(tmp_path)]}))}
        extensions: dict = {}

    kernel = Kernel()
    ctx = ToolContext(agent="me", workspace=home / "workspaces" / "me", kernel=kernel)
    first = file_access(ctx)
    assert file_access(ctx).deny == first.deny
    (cached,) = kernel.extensions.values()
    assert file_access(ctx).deny == first.deny and kernel.extensions[_sandbox._CARVES] is cached
    kernel.agents["new"] = parse_manifest(agent("new", workspace=str(elsewhere / "new")))
    with pytest.raises(Exception, match="agent 'new''s workspace"):
        file_access(ctx).locate(str(elsewhere / "new" / "x"))
    kernel.agents["new"] = parse_manifest(agent("new", workspace=str(elsewhere / "moved")))
    access = file_access(ctx)
    with pytest.raises(Exception, match="agent 'new''s workspace"):
        access.locate(str(elsewhere / "moved" / "x"))
    assert access.locate(str(elsewhere / "new" / "x")).root == tmp_path.resolve()


def test_carves_follow_a_symlink_swapped_in_another_agents_workspace_path(tmp_path):
    # Regression: the carves were cached by the manifests' lexical paths, so an agent that
    # could write the directory holding a symlink in another agent's workspace path (here
    # "me" via bash under files.write) could point it into its own root, and the stale
    # real path kept carving the old target: the other agent's new files were readable.
    home = tmp_path / "home"
    (home / "workspaces" / "me").mkdir(parents=True)
    data, outside = tmp_path / "data", tmp_path / "outside"
    (outside / "b").mkdir(parents=True)
    data.mkdir()
    (data / "links").symlink_to(outside)

    class Kernel:
        config = type("C", (), {"home": home})()
        agents = {
            "me": parse_manifest(agent("me", files={"write": [str(data)]})),
            "b": parse_manifest(agent("b", workspace=str(data / "links" / "b"))),
        }
        extensions: dict = {}

    ctx = ToolContext(agent="me", workspace=home / "workspaces" / "me", kernel=Kernel())
    assert (outside / "b").resolve() in {p for p, _ in file_access(ctx).deny}
    (data / "links").unlink()
    (data / "y" / "b").mkdir(parents=True)
    (data / "links").symlink_to(data / "y")
    with pytest.raises(Exception, match="agent 'b''s workspace"):
        file_access(ctx).locate(str(data / "y" / "b" / "secret"))


def test_carve_grants_a_root_around_what_is_denied(tmp_path):
    for rel in ("etc/passwd", "etc/shadow", "etc/ssl/certs/ca.pem", "etc/ssl/private/key.pem"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    (tmp_path / "etc" / "link").symlink_to("/")
    etc = str(tmp_path / "etc")
    parts = _landlock.carve(etc, [f"{etc}/shadow", f"{etc}/ssl/private"])
    assert sorted(os.path.relpath(p, etc) for p in parts) == ["passwd", "ssl/certs"]
    assert _landlock.carve(etc, [etc]) == [etc]  # naming the root grants it


def test_bash_path_keeps_only_directories_bash_may_read(tmp_path):
    access = file_access(ToolContext(agent="a", workspace=tmp_path))
    path = f"/usr/bin:{tmp_path}/bin:/root/.local/bin:/home/someone/bin:/bin"
    assert access.bash_path(path) == f"/usr/bin:{tmp_path.resolve()}/bin:/bin"


def test_missing_landlock_features_are_listed_per_abi():
    assert _landlock.LandlockStatus(True, 7, "").missing() == []
    old = _landlock.LandlockStatus(True, 3, "").missing()
    assert any("TCP" in m and "ABI 4" in m for m in old) and any(
        "signals" in m and "ABI 6" in m for m in old
    )
    assert len(_landlock.LandlockStatus(False, 0, "no").missing()) == 3


def test_the_process_hosting_the_tools_is_not_dumpable():
    roost_tools(None)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE


# ---- grants, through a kernel -------------------------------------------------------------


@needs_landlock
async def test_a_read_grant_opens_a_root_to_the_file_tools_and_bash_but_not_for_writing(
    tmp_path, shared
):
    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    agents = [
        parse_manifest(agent("granted", files={"read": [str(shared)]})),
        parse_manifest(agent("plain")),
    ]
    async with open_kernel(config, agents=agents) as kernel:
        path = str(shared / "notes.txt")
        assert "shared notes" in (await call(kernel, "granted", "read", path=path)).as_text()
        refused = await call(kernel, "plain", "read", path=path)
        assert refused.is_error and '"files.read"' in refused.as_text()
        ran = await call(
            kernel, "granted", "bash", command=f"cat {path}; echo x > {shared}/out/new; echo rc=$?"
        )
        assert "shared notes" in ran.as_text() and "rc=1" in ran.as_text()
        written = await call(kernel, "granted", "write", path=f"{shared}/out/new", content="x")
        assert written.is_error and '"files.write"' in written.as_text()
        assert not (shared / "out" / "new").exists()


@needs_landlock
async def test_a_write_grant_lets_the_file_tools_and_bash_write_there(tmp_path, shared):
    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    agents = [parse_manifest(agent("writer", files={"write": [str(shared / "out")]}))]
    async with open_kernel(config, agents=agents) as kernel:
        assert not (
            await call(kernel, "writer", "write", path=f"{shared}/out/a", content="a")
        ).is_error
        ran = await call(kernel, "writer", "bash", command=f"echo b > {shared}/out/b && echo wrote")
        assert "wrote" in ran.as_text()
        assert (shared / "out" / "a").read_text() == "a" and (
            shared / "out" / "b"
        ).read_text() == "b\n"


async def test_each_agent_has_its_own_temp_dir_as_tmpdir(tmp_path):
    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    async with open_kernel(
        config, agents=[parse_manifest(agent("a")), parse_manifest(agent("b"))]
    ) as kernel:
        a = (await call(kernel, "a", "bash", command="echo $TMPDIR")).as_text().splitlines()[0]
        b = (await call(kernel, "b", "bash", command="echo $TMPDIR")).as_text().splitlines()[0]
    home = (tmp_path / "home").resolve()
    assert (a, b) == (str(home / "tmp" / "a"), str(home / "tmp" / "b"))
    assert oct(os.stat(a).st_mode & 0o777) == "0o700"


@needs_tcp
async def test_a_network_grant_allows_exactly_its_ports(tmp_path):
    allowed, other = socket.socket(), socket.socket()
    for s in (allowed, other):
        s.bind(("127.0.0.1", 0))
        s.listen(4)
    ports = [s.getsockname()[1] for s in (allowed, other)]
    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    manifest = parse_manifest(agent("net", network={"connect": [ports[0]]}))
    try:
        async with open_kernel(config, agents=[manifest]) as kernel:
            command = "; ".join(f"(exec 3<>/dev/tcp/127.0.0.1/{p}) && echo open-{p}" for p in ports)
            text = (await call(kernel, "net", "bash", command=command)).as_text()
    finally:
        allowed.close()
        other.close()
    assert f"open-{ports[0]}" in text and f"open-{ports[1]}" not in text, text


# ---- the supervisor's isolation, as real processes ------------------------------------------


def supervise(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-S", _sandbox_exec.__file__, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_supervisor_whose_parent_is_already_gone_runs_nothing(tmp_path):
    # "--parent 1": not our parent, as if roost died before prctl(PR_SET_PDEATHSIG).
    done = supervise("--parent", "1", "--", "/usr/bin/touch", str(tmp_path / "ran"))
    assert done.returncode == 128 + 9 and not (tmp_path / "ran").exists()


def test_supervisor_pid_namespace_shows_only_the_commands_own_processes():
    ok, why = _bash.namespaces_status()
    if not ok:
        pytest.skip(f"no PID namespace here: {why}")
    done = supervise("--pidns", "--", "/bin/sh", "-c", "echo $$; ls /proc | grep -c '^[0-9]'")
    pid, count = done.stdout.split()
    assert done.returncode == 0 and pid == "2" and int(count) <= 4, done


async def test_file_tools_and_bash_use_the_same_temp_dir_outside_a_kernel(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(_sandbox, "_fallback_temp", tmp_path / "tmp")
    ctx = ToolContext(agent="solo", workspace=tmp_path)
    assert file_access(ctx).temp == tmp_path / "tmp" / "solo"
    bash = {t.spec.name: t for t in build_tools()}["bash"]
    with trio.fail_after(30):
        result = await bash.handler(
            ToolCall(name="bash", arguments={"command": "echo $TMPDIR"}), ctx
        )
    assert result.as_text().startswith(str(tmp_path / "tmp" / "solo"))
