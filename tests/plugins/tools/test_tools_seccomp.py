"""The socket filter of bash (``_seccomp``): which sockets it lets a process create."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from roost.plugins.tools import _seccomp

needs_filter = pytest.mark.skipif(
    not _seccomp.available(), reason="no seccomp filter for this machine"
)

# (name, socket arguments); what each gets is in EXPECTED.
SOCKETS = {
    "unix": (1, 1, 0),
    "tcp": (2, 1, 0),
    "tcp6-explicit-cloexec": (10, 1 | 0o2000000, 6),
    "udp": (2, 2, 0),
    "udp6-explicit": (10, 2, 17),
    "route-netlink": (16, 3, 0),
    "mptcp": (2, 1, 262),
    "sctp": (2, 1, 132),
    "sctp-seqpacket": (2, 5, 132),
    "icmp": (2, 2, 1),
    "raw": (2, 3, 1),
    "packet": (17, 3, 0),
    "vsock": (40, 1, 0),
    "diag-netlink": (16, 3, 4),
    "alg": (38, 5, 0),
}
ALLOWED = {"unix", "tcp", "tcp6-explicit-cloexec", "udp", "udp6-explicit", "route-netlink"}

PROBE = """
import ctypes, errno, json, socket, sys
sys.path.insert(0, sys.argv[1])
import _seccomp
_seccomp.install(own_netns=sys.argv[2] == "1")
out = {}
for name, args in json.loads(sys.argv[3]).items():
    try:
        socket.socket(*args).close()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
try:
    socket.socketpair(socket.AF_UNIX).__len__()
    out["socketpair-unix"] = "ok"
except OSError as exc:
    out["socketpair-unix"] = errno.errorcode.get(exc.errno)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ok = libc.syscall(425, 8, ctypes.create_string_buffer(120)) >= 0
out["io_uring_setup"] = "ok" if ok else errno.errorcode.get(ctypes.get_errno())
print(json.dumps(out))
"""


@pytest.mark.parametrize("machine", sorted(_seccomp.ARCHES))
def test_the_filter_assembles_for_each_architecture(machine):
    program = _seccomp.socket_filter(machine, own_netns=False)
    assert len(program) % 8 == 0 and 20 < len(program) // 8 < 64


@needs_filter
@pytest.mark.parametrize("own_netns", [False, True], ids=["host-network", "own-network"])
def test_only_sockets_the_policy_can_judge_are_created(own_netns):
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            PROBE,
            str(Path(_seccomp.__file__).parent),
            str(int(own_netns)),
            json.dumps(SOCKETS),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    allowed = ALLOWED | ({"mptcp"} if own_netns else set())
    for name in SOCKETS:
        if name in ("unix", "tcp", "udp", "route-netlink"):
            assert got[name] == "ok", (name, got)
        elif name in allowed:  # allowed by the filter; the kernel may lack it (MPTCP, IPv6)
            assert got[name] in ("ok", "EPROTONOSUPPORT", "EAFNOSUPPORT"), (name, got)
        elif name in ("packet", "vsock", "alg"):
            assert got[name] == "EAFNOSUPPORT", (name, got)
        else:
            assert got[name] == "EPROTONOSUPPORT", (name, got)
    if not own_netns:
        assert got["mptcp"] == "EPROTONOSUPPORT", got
    assert got["socketpair-unix"] == "ok" and got["io_uring_setup"] == "ENOSYS", got
