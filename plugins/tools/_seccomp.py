"""A seccomp filter that limits which sockets a sandboxed ``bash`` may create.

Landlock's TCP rules cover TCP only, not MPTCP, SCTP, raw, packet or vsock sockets.
``install(own_netns)`` loads a classic-BPF program allowing ``socket()``/``socketpair()``
only for ``AF_UNIX``; ``AF_INET``/``AF_INET6`` TCP (MPTCP too in a network namespace of its
own, where it reaches nothing) and UDP; ``AF_NETLINK`` route (``getaddrinfo``, ``ip``).
Anything else fails with ``EAFNOSUPPORT``/``EPROTONOSUPPORT``; ``io_uring_setup`` (which can
make sockets without ``socket``) with ``ENOSYS``; a system call of another ABI (x32, 32-bit
``int 0x80``, AArch32: numbers the filter cannot check) kills the process. x86_64 and
aarch64 only (``available()``). Standard library only: the supervisor loads this file.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCK_STREAM, SOCK_DGRAM = 1, 2
SOCK_TYPE_MASK = 0xF  # without SOCK_NONBLOCK / SOCK_CLOEXEC
IPPROTO_TCP, IPPROTO_UDP, IPPROTO_MPTCP = 6, 17, 262
NETLINK_ROUTE = 0

# machine -> (AUDIT_ARCH_*, socket, socketpair, io_uring_setup, first number of another ABI)
ARCHES = {
    "x86_64": (0xC000003E, 41, 53, 425, 0x40000000),  # x32 numbers have bit 30 set
    "aarch64": (0xC00000B7, 198, 199, 425, None),
}
ARCHES["arm64"] = ARCHES["aarch64"]

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
_NR, _ARCH, _ARG0, _ARG1, _ARG2 = 0, 4, 16, 24, 32  # args: their low 32 bits (little endian)

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_AND_K = 0x54
_RET_K = 0x06


def available() -> bool:
    """Whether this machine's architecture is one the filter knows."""
    return sys.platform.startswith("linux") and os.uname().machine in ARCHES


class _Program:
    """A classic BPF program with symbolic jump targets (resolved by ``assemble``)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: str | None, false: str | None) -> None:
        """``op`` against ``k``; ``None`` as a target is the next instruction."""
        self.code.append((op, true, false, k))

    def ret(self, value: int) -> None:
        self.code.append((_RET_K, 0, 0, value))

    def assemble(self) -> bytes:
        out = b""
        for i, (op, true, false, k) in enumerate(self.code):
            offsets = []
            for target in (true, false):
                if isinstance(target, str):
                    offset = self.labels[target] - i - 1
                    assert 0 <= offset < 256, target
                    offsets.append(offset)
                else:
                    offsets.append(target or 0)
            out += struct.pack("=HBBI", op, offsets[0], offsets[1], k)
        return out


def socket_filter(machine: str, *, own_netns: bool) -> bytes:
    """The filter program (``struct sock_filter`` array) for ``machine``."""
    arch, nr_socket, nr_socketpair, nr_io_uring_setup, foreign = ARCHES[machine]
    p = _Program()
    p.load(_ARCH)
    p.jump(_JEQ_K, arch, None, "kill")
    p.load(_NR)
    if foreign is not None:
        p.jump(_JGE_K, foreign, "kill", None)
    p.jump(_JEQ_K, nr_io_uring_setup, "enosys", None)
    p.jump(_JEQ_K, nr_socket, "socket", None)
    p.jump(_JEQ_K, nr_socketpair, "socket", "allow")
    p.label("socket")
    p.load(_ARG0)
    p.jump(_JEQ_K, AF_UNIX, "allow", None)
    p.jump(_JEQ_K, AF_INET, "inet", None)
    p.jump(_JEQ_K, AF_INET6, "inet", None)
    p.jump(_JEQ_K, AF_NETLINK, None, "eafnosupport")
    p.load(_ARG2)
    p.jump(_JEQ_K, NETLINK_ROUTE, "allow", "eprotonosupport")
    p.label("inet")
    p.load(_ARG1)
    p.code.append((_AND_K, 0, 0, SOCK_TYPE_MASK))
    p.jump(_JEQ_K, SOCK_STREAM, None, "dgram")
    p.load(_ARG2)
    p.jump(_JEQ_K, 0, "allow", None)
    if own_netns:
        p.jump(_JEQ_K, IPPROTO_MPTCP, "allow", None)
    p.jump(_JEQ_K, IPPROTO_TCP, "allow", "eprotonosupport")
    p.label("dgram")
    p.jump(_JEQ_K, SOCK_DGRAM, None, "eprotonosupport")
    p.load(_ARG2)
    p.jump(_JEQ_K, 0, "allow", None)
    p.jump(_JEQ_K, IPPROTO_UDP, "allow", "eprotonosupport")
    p.label("allow")
    p.ret(SECCOMP_RET_ALLOW)
    p.label("kill")
    p.ret(SECCOMP_RET_KILL_PROCESS)
    p.label("enosys")
    p.ret(SECCOMP_RET_ERRNO | errno.ENOSYS)
    p.label("eafnosupport")
    p.ret(SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT)
    p.label("eprotonosupport")
    p.ret(SECCOMP_RET_ERRNO | errno.EPROTONOSUPPORT)
    return p.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(*, own_netns: bool) -> None:
    """Load the filter into this process (and its future children); raises ``OSError``."""
    machine = os.uname().machine
    if not available():
        raise OSError(errno.ENOSYS, f"no seccomp filter for {sys.platform} {machine}")
    program = socket_filter(machine, own_netns=own_netns)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    for option, value, arg in (
        (PR_SET_NO_NEW_PRIVS, 1, 0),  # required to load a filter without CAP_SYS_ADMIN
        (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog)),
    ):
        if libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(arg), 0, 0):
            err = ctypes.get_errno()
            raise OSError(err, f"prctl({option}): {os.strerror(err)}")
