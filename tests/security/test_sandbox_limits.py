"""Issue 15 (items 3, 10, 13, 14), the hostile review: what a sandboxed bash may reach and
consume, and what a file tool may cost the daemon.

The first tests are the reviewer's (``review1:tests/security/test_review_findings.py``),
copied unchanged: each ran against a real ``roost run`` as root and failed. The rest pin
down the fixes: the socket filter where bash shares the host's network, the private
``$TMPDIR``, the per-agent limits, and the same isolation for a supervisor run as an
unprivileged user.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
import trio
from roost.kernel import ToolCall
from roost.plugins.tools import _sandbox_exec, landlock_status
from roost.plugins.tools._bash import namespaces_status, network_namespace_status
from security_targets import Daemon, manifest, open_kernel_target

LANDLOCK = landlock_status()
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
MiB = 1024 * 1024
needs_pidns = pytest.mark.skipif(
    not namespaces_status()[0], reason=f"no PID namespace here: {namespaces_status()[1]}"
)


def _alive(daemon: Daemon) -> Daemon:
    if not daemon.alive():
        daemon.stop()
        daemon.start()
    return daemon


def _sysctl(name: str) -> int:
    try:
        return int(Path("/proc/sys", name).read_text())
    except (OSError, ValueError):
        return 0


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


# ---- the reviewer's tests (issue 15, items 3, 10, 13, 14) ------------------------------------


@pytest.mark.skipif(not LANDLOCK.tcp, reason="needs Landlock ABI 4 (TCP rules)")
async def test_bash_mptcp_socket_cannot_bypass_the_tcp_policy(daemon: Daemon, listeners):
    """A plain TCP connect is refused (no ``network.connect`` grant), but the same connect
    on an MPTCP socket (``socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)``) is not filtered by
    Landlock's TCP rules: bash reaches any port, the daemon's own API included."""
    port, _ = listeners
    command = f"""python3 - <<'EOF'
import socket
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)  # IPPROTO_MPTCP
except OSError as exc:
    print("NO-MPTCP", exc)
else:
    try:
        s.connect(("127.0.0.1", {port}))
        print("CONNECTED")
    except OSError as exc:
        print("REFUSED", exc)
EOF"""
    with trio.fail_after(60):
        outcome = await _alive(daemon).call("attacker", "bash", {"command": command})
    if "NO-MPTCP" in outcome.text:
        pytest.skip("this kernel has no MPTCP")
    assert "CONNECTED" not in outcome.text, f"bash reached a TCP port over MPTCP: {outcome}"


@pytest.mark.skipif(not ROOT, reason="roost runs as root only here: bash keeps root's capabilities")
async def test_bash_cannot_sniff_the_api_key_off_loopback(daemon: Daemon):
    """Run as root (a container, this machine), bash keeps CAP_NET_RAW in the host's
    network namespace: an AF_PACKET socket on ``lo`` reads every caller's requests to the
    daemon, ``Authorization: Bearer <key>`` included."""
    d = _alive(daemon)
    command = """python3 - <<'EOF'
import socket, time
try:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(3))
    s.bind(("lo", 0))
except OSError as exc:
    print("NO-PACKET-SOCKET", exc)
    raise SystemExit
s.settimeout(0.2)
end = time.monotonic() + 10
while time.monotonic() < end:
    try:
        packet = s.recv(65535)
    except socket.timeout:
        continue
    i = packet.find(b"Bearer roost-key-")
    if i >= 0:
        print("CAPTURED", packet[i:i + 40].decode(errors="replace"))
        break
EOF"""
    done = trio.Event()
    outcome = None

    async def sniff() -> None:
        nonlocal outcome
        outcome = await d.call("attacker", "bash", {"command": command})
        done.set()

    async def legitimate_caller() -> None:  # another client using the daemon meanwhile
        async with httpx.AsyncClient(
            base_url=d.url, headers={"Authorization": f"Bearer {d.api_key}"}
        ) as http:
            while not done.is_set():
                await http.get("/api/agents")
                with trio.move_on_after(0.1):
                    await done.wait()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sniff)
            nursery.start_soon(legitimate_caller)
    assert d.api_key not in outcome.text, (
        f"a sandboxed bash read the daemon's API key off the wire: {outcome}"
    )


@pytest.mark.skipif(not ROOT, reason="roost runs as root only here: bash keeps root's capabilities")
async def test_bash_has_no_capabilities_when_roost_runs_as_root(daemon: Daemon):
    """Only CAP_SYS_PTRACE is dropped: bash keeps CAP_NET_ADMIN (it can add and remove
    addresses on the host's ``lo``), CAP_NET_RAW, CAP_SYS_ADMIN, CAP_SYS_TIME, CAP_BPF,
    CAP_MKNOD... A sandboxed command needs none of them."""
    with trio.fail_after(60):
        outcome = await _alive(daemon).call(
            "attacker", "bash", {"command": "grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status"}
        )
    for line in outcome.text.splitlines():
        if line.startswith(("CapEff:", "CapPrm:")):
            assert line.split()[1] == "0000000000000000", f"bash runs with capabilities: {outcome}"


@pytest.mark.parametrize(
    "tool,arguments",
    [
        ("read", {"path": "sparse.txt", "limit": 1}),
        ("edit", {"path": "sparse.txt", "old_string": "zzz", "new_string": "y"}),
    ],
    ids=["read", "edit"],
)
async def test_a_sparse_file_does_not_balloon_the_daemon(daemon: Daemon, tool, arguments):
    """A 512 MiB sparse file (8 KiB of text, then a hole: 12 KiB on disk, made by the
    agent's own bash with ``truncate``) is one 512 MiB "line": ``read`` holds the whole line
    in memory to show 2,000 characters of it, ``edit`` reads the whole file. The daemon's
    peak RSS grew by ~1.2 GB for ``read``; a 20 GiB hole kills it (OOM)."""
    d = _alive(daemon)
    path = d.workspace("attacker") / "sparse.txt"
    path.write_bytes(b"a" * 8192)
    os.truncate(path, 512 * MiB)
    try:
        Path(f"/proc/{d.pid}/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        before = _status_kib(d.pid, "VmHWM")
        with trio.fail_after(120):
            outcome = await d.call("attacker", tool, arguments)
        grew = (_status_kib(d.pid, "VmHWM") - before) * 1024
    finally:
        path.unlink()
    assert grew < 200 * MiB, (
        f"{tool} of a sparse file raised the daemon's peak RSS by {grew // MiB} MiB: {outcome}"
    )


async def test_bash_memory_is_bounded(daemon: Daemon):
    """No RLIMIT_AS, no memory cgroup: a command may map (and then touch) as much memory as
    the host has, and its ``oom_score_adj`` is the daemon's, so the OOM killer may pick the
    daemon. (The mapping here is never touched: harmless to the host.)"""
    command = "python3 -c 'import mmap; m = mmap.mmap(-1, 16 << 30); print(\"MAPPED-16-GIB\")'"
    with trio.fail_after(60):
        outcome = await _alive(daemon).call("attacker", "bash", {"command": command})
    assert "MAPPED-16-GIB" not in outcome.text, f"bash mapped 16 GiB: {outcome}"


async def test_bash_is_the_oom_killers_first_choice(daemon: Daemon):
    d = _alive(daemon)
    with trio.fail_after(60):
        outcome = await d.call("attacker", "bash", {"command": "cat /proc/self/oom_score_adj"})
    mine = int(outcome.text.split()[0])
    daemons = int(Path(f"/proc/{d.pid}/oom_score_adj").read_text())
    assert mine > daemons and mine >= 500, f"bash's oom_score_adj is {mine}, the daemon's {daemons}"


async def test_bash_process_count_is_bounded(daemon: Daemon):
    """Nothing bounds the processes of one command (no pids cgroup; RLIMIT_NPROC does not
    bind root): 1,100 processes start, and a fork bomb runs the host out of PIDs for the
    whole ``bash_timeout_s``. (They all end with the command: the PID namespace.)"""
    command = """python3 - <<'EOF'
import os
started = 0
try:
    for _ in range(1100):
        os.posix_spawn("/usr/bin/sleep", ["sleep", "600"], {})
        started += 1
except OSError as exc:
    print("REFUSED", exc)
print("STARTED", started)
EOF"""
    with trio.fail_after(120):
        outcome = await _alive(daemon).call("attacker", "bash", {"command": command, "timeout": 60})
    started = int(outcome.text.split("STARTED", 1)[1].split()[0])
    assert started < 1024, f"one bash command started {started} processes: {outcome.text[:300]}"


@pytest.mark.skipif(not ROOT, reason="mounting a small tmpfs as the data directory needs root")
async def test_a_full_temp_dir_does_not_stop_the_other_agents(tmp_path):
    """The agents' temp dirs live in the data directory, on the disk of roost's stores, with
    no quota: one sandboxed agent's ``dd`` into ``$TMPDIR`` (kept after the command) makes
    every other agent's requests fail with "storage failed … database or disk is full"."""
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(home)], check=True)
    daemon = Daemon(tmp_path)
    try:
        daemon.start()
        with trio.fail_after(60):
            fill = await daemon.call(
                "attacker",
                "bash",
                {"command": "dd if=/dev/zero of=$TMPDIR/fill bs=1M count=128; df -h ."},
            )
            async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as http:
                response = await http.post(
                    "/api/agents/victim/message",
                    json={"message": "hello"},
                    headers={"Authorization": f"Bearer {daemon.api_key}"},
                )
        assert response.status_code == 200, (
            f"after {fill.text[-200:]!r}: {response.status_code} {response.text}"
        )
    finally:
        daemon.stop()
        subprocess.run(["umount", "-l", str(home)], check=False)


# ---- the fixes, pinned down -----------------------------------------------------------------


@pytest.mark.skipif(not ROOT, reason="roost runs as root only here")
async def test_bash_as_root_cannot_mknod_change_addresses_or_read_the_kernel_log(kernel_target):
    """What the reviewer did with root's capabilities, each refused now."""
    command = (
        "mknod dev c 1 3 || echo NO-MKNOD; ip addr add 127.77.77.77/32 dev lo || echo NO-ADDR; "
        "dmesg >/dev/null 2>&1 || echo NO-DMESG; head -1 /proc/kallsyms | cut -c1-16"
    )
    with trio.fail_after(60):
        outcome = await kernel_target.call("attacker", "bash", {"command": command})
    refused = ["NO-MKNOD", "NO-ADDR"]
    if _sysctl("kernel/dmesg_restrict") == 1:  # else anyone may read it
        refused.append("NO-DMESG")
    if _sysctl("kernel/kptr_restrict") >= 1:  # else the addresses depend on perf_event_paranoid
        refused.append("0000000000000000")
    for text in refused:
        assert text in outcome.text, outcome
    assert not (kernel_target.workspace("attacker") / "dev").exists()


MPTCP_CONNECT = """python3 - <<'EOF'
import errno, socket
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
except OSError as exc:
    print("SOCKET-REFUSED", errno.errorcode.get(exc.errno))
else:
    try:
        s.connect(("127.0.0.1", {port}))
        print("CONNECTED")
    except OSError as exc:
        print("CONNECT-REFUSED", exc)
EOF"""


@needs_pidns
async def test_without_granted_ports_bash_has_a_network_of_its_own(kernel_target, listeners):
    """No port granted: bash's network namespace has only its own ``lo``; a port listening
    on the host's loopback is not there, by TCP or any other protocol."""
    if not network_namespace_status()[0]:
        pytest.skip(f"no network namespace here: {network_namespace_status()[1]}")
    port, _ = listeners
    command = f"ip -o link | cut -d: -f2; {MPTCP_CONNECT.format(port=port)}"
    with trio.fail_after(60):
        outcome = await kernel_target.call("attacker", "bash", {"command": command})
    assert outcome.text.split()[0] == "lo" and "CONNECTED" not in outcome.text, outcome
    assert "Connection refused" in outcome.text, outcome  # its own lo, where nothing listens


@pytest.mark.skipif(not LANDLOCK.tcp, reason="needs Landlock ABI 4 (TCP rules)")
async def test_with_a_granted_port_mptcp_and_raw_sockets_are_refused(
    tmp_path, monkeypatch, listeners
):
    """A granted port puts bash on the host's network, where Landlock filters TCP only: the
    socket filter refuses MPTCP (and SCTP, packet, vsock...) sockets there, so a grant of
    one port reaches no other; TCP to the granted port still works."""
    port, _ = listeners
    granted = manifest("granted", "sandbox", network={"connect": [port]})
    opener, _, _ = open_kernel_target(tmp_path, monkeypatch, agents=[granted])
    probe = """python3 - <<'EOF'
import errno, socket
for name, args in [("sctp", (socket.AF_INET, socket.SOCK_STREAM, 132)),
                   ("packet", (socket.AF_PACKET, socket.SOCK_RAW, 0)),
                   ("vsock", (socket.AF_VSOCK, socket.SOCK_STREAM, 0)),
                   ("raw", (socket.AF_INET, socket.SOCK_RAW, 1))]:
    try:
        socket.socket(*args).close()
        print(name, "OPENED")
    except OSError as exc:
        print(name, "REFUSED", errno.errorcode.get(exc.errno))
EOF"""
    async with opener as kernel:
        with trio.fail_after(60):
            mptcp = await kernel.call_tool(
                "granted",
                ToolCall(
                    name="bash",
                    arguments={
                        "command": MPTCP_CONNECT.format(port=port + 1 if port < 65535 else port - 1)
                    },
                ),
            )
            others = await kernel.call_tool(
                "granted", ToolCall(name="bash", arguments={"command": probe})
            )
            tcp = await kernel.call_tool(
                "granted",
                ToolCall(
                    name="bash",
                    arguments={"command": f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo TCP-OK"},
                ),
            )
    assert "SOCKET-REFUSED EPROTONOSUPPORT" in mptcp.as_text(), mptcp.as_text()
    assert "OPENED" not in others.as_text() and others.as_text().count("REFUSED") == 4, (
        others.as_text()
    )
    assert "TCP-OK" in tcp.as_text(), tcp.as_text()


@needs_pidns
async def test_tmpdir_is_private_to_each_command_and_capped(tmp_path, monkeypatch):
    """$TMPDIR is a tmpfs of ``limits.bash_tmp_mb`` mounted for the command alone: writing
    past it fails with "No space left", and nothing stays on roost's disk or for the next
    command."""
    small = manifest("small", "sandbox", limits={"bash_tmp_mb": 8})
    opener, home, _ = open_kernel_target(tmp_path, monkeypatch, agents=[small])
    async with opener as kernel:

        async def bash(command: str) -> str:
            with trio.fail_after(60):
                return (
                    await kernel.call_tool(
                        "small", ToolCall(name="bash", arguments={"command": command})
                    )
                ).as_text()

        filled = await bash(
            "echo kept > $TMPDIR/note; dd if=/dev/zero of=$TMPDIR/fill bs=1M count=16; ls $TMPDIR"
        )
        later = await bash("ls -A $TMPDIR; echo listed")
    assert "No space left on device" in filled and "note" in filled, filled
    assert later.split()[0] == "listed", later
    assert not any((home / "tmp" / "small").iterdir())


@needs_pidns
async def test_the_manifest_sets_bash_memory_and_process_limits(tmp_path, monkeypatch):
    """``limits.bash_memory_mb`` is each process's address space; ``limits.bash_processes``
    bounds the processes of one command (exactly with RLIMIT_NPROC in a user namespace; as
    root by the namespace's pid_max: at most 300 more)."""
    small = manifest("small", "sandbox", limits={"bash_memory_mb": 256, "bash_processes": 64})
    opener, _, _ = open_kernel_target(tmp_path, monkeypatch, agents=[small])
    command = """python3 - <<'EOF'
import mmap, os
try:
    mmap.mmap(-1, 300 << 20)
    print("MAPPED")
except OSError as exc:
    print("NOT-MAPPED", exc)
started = 0
try:
    for _ in range(600):
        os.posix_spawn("/usr/bin/sleep", ["sleep", "600"], {})
        started += 1
except OSError as exc:
    print("REFUSED", exc)
print("STARTED", started)
EOF"""
    async with opener as kernel:
        with trio.fail_after(60):
            outcome = (
                await kernel.call_tool(
                    "small", ToolCall(name="bash", arguments={"command": command})
                )
            ).as_text()
    assert "NOT-MAPPED" in outcome, outcome
    started = int(outcome.split("STARTED", 1)[1].split()[0])
    assert started < 64 + _sandbox_exec.RESERVED_PIDS, outcome


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(not LANDLOCK.available, reason="needs Landlock")
async def test_a_grant_holding_roost_toml_does_not_show_its_keys(tmp_path):
    """roost.toml may hold ``http.api_key`` and names ``[http.keys]`` key files; agent.json
    may hold MCP headers with keys. Like the data directory, they are carved out of a granted
    root holding them (as of /etc, which bash reads, when they live in /etc/roost), for bash
    and the file tools alike."""
    key_file = tmp_path / "ops.key"
    key_file.write_text("key-file-secret-" + os.urandom(6).hex())
    key_file.chmod(0o600)
    (tmp_path / "notes.txt").write_text("the rest of the grant stays readable")
    granted = manifest("granted", "sandbox", files={"read": [str(tmp_path)]})
    daemon = Daemon(tmp_path, extra_agents=[granted])
    toml_secret = "toml-secret-" + os.urandom(6).hex()
    toml = daemon.config.read_text().replace("[http]\n", f'[http]\napi_key = "{toml_secret}"\n')
    daemon.config.write_text(f'{toml}[http.keys.ops]\nkey_file = "{key_file}"\n')
    try:
        daemon.start()
        with trio.fail_after(60):
            shown = [
                await daemon.call(
                    "granted", "bash", {"command": f"cat {daemon.config} {key_file}"}
                ),
                await daemon.call("granted", "read", {"path": str(daemon.config)}),
                await daemon.call("granted", "read", {"path": str(key_file)}),
                await daemon.call("granted", "grep", {"pattern": "secret", "path": str(tmp_path)}),
            ]
            # The rest of the grant is still readable.
            notes = await daemon.call("granted", "bash", {"command": f"cat {tmp_path}/notes.txt"})
            agents = tmp_path / "agents"
            manifests = await daemon.call(
                "granted",
                "bash",
                {"command": f"cat {agents}/victim/agent.json {agents}/granted/agent.json"},
            )
    finally:
        daemon.stop()
    for outcome in shown:
        assert toml_secret not in outcome.text, outcome
        assert key_file.read_text() not in outcome.text, outcome
    assert "the rest of the grant" in notes.text, notes
    assert "for the security tests" not in manifests.text, manifests  # headers may hold keys


@pytest.mark.skipif(
    not ROOT or not shutil.which("setpriv"), reason="needs root and setpriv to become nobody"
)
@pytest.mark.skipif(
    not Path(SYSTEM_PYTHON).exists(), reason=f"needs {SYSTEM_PYTHON} (readable by nobody)"
)
@needs_pidns
def test_the_same_isolation_holds_for_an_unprivileged_user():
    """roost run by a normal user: the supervisor (here as ``nobody``) creates a user
    namespace, and the command still ends with no capabilities, its own network, the
    memory and process limits (RLIMIT_NPROC binds there, exactly), its private $TMPDIR and
    the socket filter."""
    root = Path(tempfile.mkdtemp(prefix="roost-nobody-"))  # pytest's tmp_path is 0700
    try:
        _run_as_nobody(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_as_nobody(root: Path) -> None:
    exec_file = Path(_sandbox_exec.__file__)
    plugin_copy = root / "tools"
    plugin_copy.mkdir()
    for name in (
        "_sandbox_exec.py",
        "_landlock.py",
        "_seccomp.py",
    ):  # the tree may be closed to nobody
        shutil.copy(exec_file.with_name(name), plugin_copy / name)
    tmp = root / "tmpdir"
    tmp.mkdir()
    for path in (root, plugin_copy, tmp):
        path.chmod(0o777)
    script = """
grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status
ip -o link | cut -d: -f2 | tr -d ' ' | tr '\\n' ' '; echo
echo "AS $(ulimit -v) NPROC $(ulimit -u)"
dd if=/dev/zero of=$TMPDIR/f bs=1M count=32 2>&1 | grep -o 'No space left on device'
python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132)' 2>&1 | tail -1
python3 -c '
import os
n = 0
try:
    for _ in range(200):
        os.posix_spawn("/usr/bin/sleep", ["sleep", "60"], {}); n += 1
except OSError: pass
print("STARTED", n)'
"""
    argv = [
        "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
        SYSTEM_PYTHON, "-I", "-S",
        str(plugin_copy / "_sandbox_exec.py"), "--pidns", "--netns", "--tmp", str(tmp), "16",
        "--memory", "512", "--processes", "64", "--sockets", "--", "/bin/bash", "-c", script,
    ]  # fmt: skip
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp)},
        cwd=tmp,
    )
    out = done.stdout
    assert done.returncode == 0, (done.returncode, out, done.stderr)
    caps = [
        line.split()[1]
        for line in out.splitlines()
        if line.startswith(("CapEff", "CapPrm", "CapBnd"))
    ]
    assert caps == ["0000000000000000"] * 3, out
    assert out.splitlines()[3].split() == ["lo"], out
    assert "AS 524288 NPROC 64" in out and "No space left on device" in out, out
    assert "Protocol not supported" in out, out
    started = int(out.split("STARTED", 1)[1].split()[0])
    assert 50 <= started < 64, out


def test_an_unknown_architecture_syscall_kills_instead_of_passing_the_filter(tmp_path):
    """x32 system calls (bit 30 set on x86_64) have their own numbers: the filter cannot
    check them, so it kills the process rather than let one through."""
    from roost.plugins.tools import _seccomp

    if os.uname().machine != "x86_64":
        pytest.skip("x32 is an x86_64 ABI")
    code = (
        f"import sys; sys.path.insert(0, {str(Path(_seccomp.__file__).parent)!r}); "
        "import _seccomp, ctypes; "
        "_seccomp.install(own_netns=False); print('installed', flush=True); "
        "ctypes.CDLL(None).syscall(0x40000000 | 39)"  # x32 getpid
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30
    )
    assert done.stdout.strip() == "installed" and done.returncode == -signal.SIGSYS, (
        done.returncode,
        done.stdout,
        done.stderr,
    )
