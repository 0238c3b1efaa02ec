"""The supervisor an MCP stdio server runs under, so nothing it starts outlives roost.

    python -I -S _pdeathsig.py PPID [--nofile SOFT] -- COMMAND [ARGS...]

A child subreaper asking for a signal when its parent dies, in its own session: everything
the server leaves behind (even after ``setsid``) is re-parented to it. It forks the server
(soft open-file limit ``SOFT`` when roost raised its own) on the inherited pipes, lets go
of its own stdin/stdout (so EOF propagates) and waits. When the server exits it kills and
reaps every descendant and exits with the server's status (128 + signal if killed); on
SIGTERM/SIGINT/SIGHUP or when roost is gone: SIGTERM, ``TERM_GRACE_S``, SIGKILL, reap.

``PR_SET_PDEATHSIG`` fires when the parent *thread* exits (trio forks from a worker thread),
so it only prompts a check of the parent *process*, also polled every ``PARENT_POLL_S``.
Standard library only, run with ``-I -S``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PARENT_DEATH_SIGNAL = signal.SIGUSR1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WATCHED = {signal.SIGCHLD, PARENT_DEATH_SIGNAL, *STOP_SIGNALS}
PARENT_POLL_S = 0.5
TERM_GRACE_S = 1.5  # below the transport's own SIGTERM grace, so we finish the job first
EXEC_FAILED_EXIT_CODE = 127
USAGE_EXIT_CODE = 2
_MAX_REAP_ROUNDS = 10_000


def _prctl(option: int, value: int) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), 0, 0, 0) == 0


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (children first), from /proc."""
    tree: dict[int, list[int]] = {}  # parent pid -> child pids
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1:
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    out: list[int] = []
    pending = list(tree.get(root, ()))
    while pending:
        pid = pending.pop()
        out.append(pid)
        pending.extend(tree.get(pid, ()))
    return out


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_and_reap_all() -> dict[int, int]:
    """SIGKILL and reap every descendant (orphans come to us as they appear); statuses by pid."""
    me = os.getpid()
    reaped: dict[int, int] = {}
    for _ in range(_MAX_REAP_ROUNDS):
        _signal_all(descendants(me), signal.SIGKILL)
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        reaped[pid] = status
    return reaped


def reap_exited(server_pid: int, status: int | None) -> int | None:
    """Collect every child that has exited; returns the server's wait status once known."""
    while True:
        try:
            pid, got = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == server_pid:
            status = got


def supervise(server_pid: int, parent_pid: int) -> int:
    """Wait until the server exits, a stop signal comes or the parent is gone; then end every
    descendant (SIGTERM and a grace first unless the server exited); the exit status to use."""
    status: int | None = None
    while True:
        info = signal.sigtimedwait(WATCHED, PARENT_POLL_S)
        status = reap_exited(server_pid, status)
        stop = info is not None and info.si_signo in STOP_SIGNALS
        if status is not None or stop or os.getppid() != parent_pid:
            break
    fallback = 0
    if status is None:
        fallback = 128 + signal.SIGTERM
        _signal_all(descendants(os.getpid()), signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        while status is None and (left := deadline - time.monotonic()) > 0:
            signal.sigtimedwait({signal.SIGCHLD}, min(left, PARENT_POLL_S))
            status = reap_exited(server_pid, status)
    reaped = kill_and_reap_all()
    if status is None:
        status = reaped.get(server_pid)
    if status is None:
        return fallback
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    """Supervise ``COMMAND``; return the exit status to use."""
    nofile = 0
    if len(argv) > 3 and argv[1] == "--nofile" and argv[2].isdigit():
        nofile = int(argv[2])
        argv = [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        sys.stderr.write("usage: _pdeathsig.py PPID [--nofile SOFT] -- COMMAND [ARGS...]\n")
        return USAGE_EXIT_CODE
    parent_pid = int(argv[0])
    command = argv[2:]
    original_mask = signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    if sys.platform.startswith("linux"):
        if not _prctl(PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL):
            sys.stderr.write(f"prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}\n")
            return USAGE_EXIT_CODE
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # The parent may have died before prctl took effect: then nobody would tell us.
    if os.getppid() != parent_pid:
        return 1
    pid = os.fork()
    if pid == 0:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, original_mask)
            if nofile:
                import resource

                hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
            os.execvp(command[0], command)
        except BaseException as exc:
            os.write(2, f"cannot run {command[0]!r}: {exc}\n".encode())
        os._exit(EXEC_FAILED_EXIT_CODE)
    # Keep no copy of roost's pipes: EOF must reach roost when the server closes them.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return supervise(pid, parent_pid)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
