"""The attacks of issue 15 as a table: every attack × every real entry point.

Entry points: ``kernel`` (the file tools and bash called through ``Kernel.call_tool``, the
kernel hosted by this test process) and ``daemon`` (``tools/call`` over Streamable HTTP on
a real ``roost run`` at ``/agents/<name>/mcp``, its environment holding API keys). Each
row says what the attacker sends and what must hold afterwards; nothing is mocked.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import trio
from roost.plugins.tools import landlock_status
from roost.plugins.tools._bash import namespaces_status
from security_targets import Daemon, KernelTarget, Outcome, Target

LANDLOCK = landlock_status()


@dataclass(frozen=True)
class Attack:
    name: str
    tool: str
    arguments: Callable[[Target], dict]
    # Strings that must not appear in the answer (what would have leaked).
    leaks: Callable[[Target], list[str]] = lambda t: []
    # A string the refusal must contain (file tools name what was refused and why).
    refusal: str | None = None
    # Checked after the call: the harm did not happen.
    harmless: Callable[[Target], bool] = lambda t: True
    setup: Callable[[Target], None] = lambda t: None
    agent: str = "attacker"
    needs: tuple[str, ...] = field(default=())  # "tcp", "scopes", "pidns", "landlock"


def _fifo(t: Target) -> None:
    path = t.workspace("attacker") / "pipe"
    if not path.exists():
        os.mkfifo(path)


def _symlink(t: Target) -> None:
    link = t.workspace("attacker") / "victim-link"
    if not link.is_symlink():
        link.symlink_to(t.workspace("victim") / "secret.txt")


def _hardlink(t: Target) -> None:
    link = t.workspace("attacker") / "hard.txt"
    if not link.exists():
        os.link(t.workspace("victim") / "secret.txt", link)


_OUTSIDE_TMP = f"/tmp/roost-security-{secrets.token_hex(6)}"

ATTACKS = [
    # ---- the file tools -------------------------------------------------------------
    Attack("read /etc/passwd", "read", lambda t: {"path": "/etc/passwd"},
           leaks=lambda t: ["root:x:0:0"], refusal='"files.read"'),
    Attack("read ~/.ssh via HOME", "read",
           lambda t: {"path": str(t.user_home / ".ssh" / "id_ed25519")},
           leaks=lambda t: [t.secret], refusal='"files.read"'),
    Attack("read the data dir's sqlite", "read", lambda t: {"path": str(t.home / "roost.db")},
           refusal='"files.read"'),
    Attack("read the sqlite by ..", "read", lambda t: {"path": "../../roost.db"},
           refusal='"files.read"'),
    Attack("read another agent's workspace", "read", lambda t: {"path": "../victim/secret.txt"},
           leaks=lambda t: [t.secret]),
    Attack("read another agent's temp dir", "read",
           lambda t: {"path": str(t.temp("victim") / "secret.txt")},
           leaks=lambda t: [t.secret]),
    Attack("read through a symlink", "read", lambda t: {"path": "victim-link"}, setup=_symlink,
           leaks=lambda t: [t.secret], refusal="symbolic link"),
    Attack("list /", "list", lambda t: {"path": "/"}, leaks=lambda t: ["etc/"],
           refusal='"files.read"'),
    Attack("glob /etc", "glob", lambda t: {"pattern": "*", "path": "/etc"},
           leaks=lambda t: ["passwd"], refusal='"files.read"'),
    Attack("grep /etc/passwd", "grep", lambda t: {"pattern": "root", "path": "/etc/passwd"},
           leaks=lambda t: ["root:x:0:0"], refusal='"files.read"'),
    Attack("grep the data dir", "grep", lambda t: {"pattern": "victim-secret", "path": str(t.home)},
           leaks=lambda t: [t.secret], refusal='"files.read"'),
    Attack("write the shared /tmp", "write", lambda t: {"path": _OUTSIDE_TMP, "content": "x"},
           refusal='"files.write"', harmless=lambda t: not os.path.exists(_OUTSIDE_TMP)),
    Attack("write through a hard link", "write", lambda t: {"path": "hard.txt", "content": "PWNED"},
           setup=_hardlink, refusal="hard links",
           harmless=lambda t: (
               (t.workspace("victim") / "secret.txt").read_text() == t.secret + "\n")),
    Attack("read a FIFO", "read", lambda t: {"path": "pipe"}, setup=_fifo,
           refusal="named pipe (FIFO)"),
    Attack("grep a FIFO", "grep", lambda t: {"pattern": "x", "path": "pipe"}, setup=_fifo,
           refusal="named pipe (FIFO)"),
    # ---- bash -----------------------------------------------------------------------
    Attack("bash reads the host's /proc/<pid>/environ", "bash",
           lambda t: {"command": f"tr '\\0' '\\n' < /proc/{t.pid}/environ"},
           leaks=lambda t: [t.environ_marker()]),
    Attack("bash signals the host process", "bash",
           lambda t: {"command": f"kill {'-9' if t.kind == 'daemon' else '-0'} {t.pid} "
                                 "&& echo SIGNAL-SENT"},
           leaks=lambda t: ["SIGNAL-SENT"], harmless=lambda t: t.alive(), needs=("scopes",)),
    Attack("bash reads ~/.ssh", "bash", lambda t: {"command": f"cat {t.user_home}/.ssh/id_ed25519"},
           leaks=lambda t: [t.secret], needs=("landlock",)),
    Attack("bash reads the data dir's sqlite", "bash",
           lambda t: {"command": f"head -c 15 {t.home}/roost.db"},
           leaks=lambda t: ["SQLite format"], needs=("landlock",)),
    Attack("bash reads another agent's workspace and temp", "bash",
           lambda t: {"command": f"cat ../victim/secret.txt {t.temp('victim')}/secret.txt"},
           leaks=lambda t: [t.secret], needs=("landlock",)),
    Attack("bash writes the shared /tmp", "bash", lambda t: {"command": f"echo x > {_OUTSIDE_TMP}"},
           harmless=lambda t: not os.path.exists(_OUTSIDE_TMP), needs=("landlock",)),
    Attack("bash in read-only mode touches a file", "bash", lambda t: {"command": "touch y.txt"},
           agent="auditor", harmless=lambda t: not (t.workspace("auditor") / "y.txt").exists(),
           needs=("landlock",)),
    Attack("bash connects to a local TCP service", "bash",
           lambda t: {"command": f"exec 3<>/dev/tcp/127.0.0.1/{t.tcp_port} && echo CONNECTED"},
           leaks=lambda t: ["CONNECTED"], needs=("tcp",)),
    Attack("bash connects to an abstract unix socket", "bash",
           lambda t: {"command": "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                                 f"s.connect('\\0{t.abstract_name}'); print('CONNECTED')\""},
           leaks=lambda t: ["CONNECTED"], needs=("scopes",)),
    Attack("bash lists other processes", "bash",
           lambda t: {"command": f"ls -d /proc/{t.pid} && echo VISIBLE"},
           leaks=lambda t: ["VISIBLE"], needs=("pidns",)),
]  # fmt: skip


def _unavailable(attack: Attack) -> str | None:
    reasons = {
        "landlock": (LANDLOCK.available, f"needs Landlock: {LANDLOCK.reason}"),
        "tcp": (LANDLOCK.tcp, f"needs Landlock ABI 4 for TCP rules (have {LANDLOCK.abi})"),
        "scopes": (LANDLOCK.scopes, f"needs Landlock ABI 6 for scopes (have {LANDLOCK.abi})"),
        "pidns": namespaces_status(),
    }
    for need in attack.needs:
        ok, why = reasons[need]
        if not ok:
            return why or f"needs {need}"
    return None


async def _attack(target: Target, attack: Attack, listeners: tuple[int, str]) -> Outcome:
    reason = _unavailable(attack)
    if reason:
        pytest.skip(reason)
    target.tcp_port, target.abstract_name = listeners
    attack.setup(target)
    fifo = target.workspace("attacker") / "pipe"
    try:
        with trio.fail_after(30):
            outcome = await target.call(attack.agent, attack.tool, attack.arguments(target))
    finally:
        if fifo.exists():  # were a reader stuck on it, let it go
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    return outcome


def _check(target: Target, attack: Attack, outcome: Outcome) -> None:
    for leak in attack.leaks(target):
        assert leak not in outcome.text, f"{attack.name}: leaked {leak!r}: {outcome}"
    if attack.refusal is not None:
        assert outcome.is_error, f"{attack.name}: not refused: {outcome}"
        assert attack.refusal in outcome.text, f"{attack.name}: unclear refusal: {outcome}"
    assert attack.harmless(target), f"{attack.name}: the harm was done: {outcome}"


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
async def test_attack_through_the_kernel(kernel_target: KernelTarget, attack: Attack, listeners):
    outcome = await _attack(kernel_target, attack, listeners)
    _check(kernel_target, attack, outcome)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
async def test_attack_through_a_daemon_over_mcp(daemon: Daemon, attack: Attack, listeners):
    if not daemon.alive():  # an earlier attack stopped it: that one failed already
        daemon.stop()
        daemon.start()
    outcome = await _attack(daemon, attack, listeners)
    _check(daemon, attack, outcome)


async def test_bundled_workers_read_over_mcp_cannot_read_etc_passwd(daemon: Daemon):
    # The issue's own reproduction: /mcp on a daemon with the bundled agents.
    if not daemon.alive():
        daemon.stop()
        daemon.start()
    with trio.fail_after(30):
        outcome = await daemon.mcp("/mcp", "worker_read", {"path": "/etc/passwd"})
    assert outcome.is_error and "root:x:0:0" not in outcome.text, outcome
    assert "outside what agent 'worker' may read" in outcome.text and '"files.read"' in outcome.text
