"""The process that runs a bash command for the ``bash`` tool: confine, run, reap.

    python -I -S _sandbox_exec.py [--landlock --write DIR ...] -- /usr/bin/bash -c CMD

1. With ``--landlock``, applies Landlock so that the command (and everything it starts)
   can write only beneath the ``--write`` directories; if that fails it exits with 126
   rather than run unconfined.
2. Becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``), so processes the command
   leaves behind are re-parented to it instead of to PID 1 (which, in a container, may
   never reap them).
3. Forks and execs the command, waits for it, then kills and reaps every remaining
   descendant (``sleep 100 &`` included, even one that called ``setsid``), and exits
   with the command's status (128 + signal number if it was killed).
4. On SIGTERM/SIGINT/SIGHUP (roost's timeout or cancellation) it does the same at once
   and exits with 128 + that signal.

Standard library only, run with ``-I -S`` so that it starts fast.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import sys
from pathlib import Path

SANDBOX_EXIT_CODE = 126
EXEC_FAILED_EXIT_CODE = 127
PR_SET_CHILD_SUBREAPER = 36
_MAX_REAP_ROUNDS = 10_000


class _Terminate(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _load_landlock():
    path = Path(__file__).with_name("_landlock.py")
    spec = importlib.util.spec_from_file_location("_roost_landlock", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _children(parent: int) -> list[int]:
    """PIDs whose parent is ``parent`` (from /proc)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == parent:
            out.append(int(entry.name))
    return out


def reap_all() -> None:
    """Kill and reap every descendant: orphans are re-parented to us as they appear."""
    me = os.getpid()
    for _ in range(_MAX_REAP_ROUNDS):
        for pid in _children(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _parse(argv: list[str]) -> tuple[bool, list[str], list[str]]:
    landlock, writable, i = False, [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return landlock, writable, argv[i + 1 :]
        if arg == "--landlock":
            landlock = True
            i += 1
        elif arg == "--write" and i + 1 < len(argv):
            writable.append(argv[i + 1])
            i += 2
        else:
            raise ValueError(f"unexpected argument {arg!r}")
    raise ValueError("missing '--' before the command")


def _raise_terminate(signum: int, _frame) -> None:
    raise _Terminate(signum)


def main(argv: list[str] | None = None) -> int:
    """Run the command confined and supervised; return the exit status to use."""
    try:
        landlock, writable, command = _parse(sys.argv[1:] if argv is None else argv)
        if not command:
            raise ValueError("no command after '--'")
    except ValueError as exc:
        print(
            f"roost sandbox: {exc}; usage: [--landlock --write DIR ...] -- COMMAND ...",
            file=sys.stderr,
        )
        return 2
    if landlock:
        try:
            _load_landlock().restrict_self(writable)
        except Exception as exc:  # fail closed: never run unconfined by accident
            print(
                f"roost sandbox: Landlock could not be applied ({exc}); refusing to run the "
                "command unconfined",
                file=sys.stderr,
            )
            return SANDBOX_EXIT_CODE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(ctypes.c_int(PR_SET_CHILD_SUBREAPER), ctypes.c_ulong(1), 0, 0, 0)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _raise_terminate)
    status = None
    try:
        pid = os.fork()
        if pid == 0:
            try:
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    signal.signal(signum, signal.SIG_DFL)
                os.execv(command[0], command)
            except BaseException as exc:
                os.write(2, f"roost sandbox: cannot run {command[0]!r}: {exc}\n".encode())
            os._exit(EXEC_FAILED_EXIT_CODE)
        _, status = os.waitpid(pid, 0)
    except _Terminate as stop:
        reap_all()
        return 128 + stop.signum
    try:
        reap_all()
    except _Terminate:
        reap_all()
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
