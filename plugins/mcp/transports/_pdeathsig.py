"""Exec wrapper: ``python -m roost.plugins.mcp.transports._pdeathsig <ppid> -- cmd args``.

Asks Linux to send SIGKILL to this process when its parent dies (``PR_SET_PDEATHSIG``),
then replaces itself with ``cmd``. The setting survives ``execve``, so an MCP server
started by roost never outlives roost, even when roost is killed with SIGKILL.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: python -m roost.plugins.mcp.transports._pdeathsig PPID -- COMMAND [ARGS...]\n")
        return 2
    expected_parent = int(argv[0])
    command = argv[2:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            sys.stderr.write(f"prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}\n")
            return 2
        # The parent may have died before prctl took effect: then nobody would kill us.
        if os.getppid() != expected_parent:
            return 1
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"cannot run {command[0]!r}: {exc.strerror}\n")
        return 127
    return 0  # pragma: no cover (execvp does not return)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
