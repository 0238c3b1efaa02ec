"""Landlock (Linux ≥ 5.13) through ctypes syscalls.

``restrict_self(rules)`` confines the calling process and its future children with one
ruleset from ``rules`` (the supervisor's options): every filesystem right of the running ABI
handled, read and execute beneath ``read``, everything beneath ``write``, a few device files,
and ``deny`` paths carved out of any root that strictly contains them (``carve``); with
``tcp``, TCP connect/bind only to the listed ports (ABI 4); with ``scope``, no signals or
abstract unix sockets out (ABI 6). A right the ABI does not know is not enforced;
``LandlockStatus`` says which. Standard library only: the supervisor loads this file.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import os
import stat
import sys

# Syscall numbers (the same on these architectures; all use the generic table).
_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446), "arm64": (444, 445, 446)}

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2
PR_SET_NO_NEW_PRIVS = 38

# ABI 1 knows bits 0 to 12: execute, write/read file, read dir, remove dir/file, make
# char/dir/reg/sock/fifo/block/sym; only those granted by name are named here.
ACCESS_FS_EXECUTE = 1 << 0
ACCESS_FS_WRITE_FILE = 1 << 1
ACCESS_FS_READ_FILE = 1 << 2
ACCESS_FS_READ_DIR = 1 << 3
ACCESS_FS_MAKE_SYM = 1 << 12
ACCESS_FS_REFER = 1 << 13  # ABI 2
ACCESS_FS_TRUNCATE = 1 << 14  # ABI 3
ACCESS_FS_IOCTL_DEV = 1 << 15  # ABI 5
ACCESS_NET_BIND_TCP = 1 << 0  # ABI 4
ACCESS_NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

NET_ABI = 4
SCOPE_ABI = 6

READ_ACCESS = ACCESS_FS_EXECUTE | ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom")
DEVICE_ACCESS = (
    ACCESS_FS_READ_FILE | ACCESS_FS_WRITE_FILE | ACCESS_FS_TRUNCATE | ACCESS_FS_IOCTL_DEV
)
# Rights that may be granted on a regular or device file (not only on directories).
FILE_ACCESS = DEVICE_ACCESS | ACCESS_FS_EXECUTE


def fs_access_for_abi(abi: int) -> int:
    """Every filesystem access right that Landlock ABI ``abi`` knows."""
    access = (ACCESS_FS_MAKE_SYM << 1) - 1  # ABI 1: bits 0..12
    if abi >= 2:
        access |= ACCESS_FS_REFER
    if abi >= 3:
        access |= ACCESS_FS_TRUNCATE
    if abi >= 5:
        access |= ACCESS_FS_IOCTL_DEV
    return access


class LandlockStatus(collections.namedtuple("LandlockStatus", "available abi reason")):
    """Whether bash can be confined by Landlock here; ``abi`` is 0 when not. (Not a dataclass:
    importing ``dataclasses`` would slow every bash call; ``collections`` is loaded already.)"""

    __slots__ = ()

    @property
    def tcp(self) -> bool:
        """TCP connect/bind rules (ABI 4)."""
        return self.abi >= NET_ABI

    @property
    def scopes(self) -> bool:
        """Signal and abstract unix socket scoping (ABI 6)."""
        return self.abi >= SCOPE_ABI

    def missing(self) -> list[str]:
        """What this kernel's Landlock cannot enforce, in words (empty when everything)."""
        if not self.available:
            return [
                "bash file access (reads and writes outside the workspace)",
                "bash TCP connections",
                "bash signals and abstract unix sockets to other processes",
            ]
        out = []
        if not self.tcp:
            out.append(f"bash TCP connections (needs Landlock ABI {NET_ABI}, have {self.abi})")
        if not self.scopes:
            out.append(
                "bash signals and abstract unix sockets to other processes "
                f"(needs Landlock ABI {SCOPE_ABI}, have {self.abi})"
            )
        return out

    def describe(self) -> str:
        if self.available:
            return f"Landlock ABI {self.abi}: bash file access is confined by the kernel"
        return (
            f"Landlock unavailable ({self.reason}): bash file access is NOT confined by the kernel"
        )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is __attribute__((packed))
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class LandlockError(OSError):
    """Landlock could not be set up."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _syscall_numbers() -> tuple[int, int, int] | None:
    return _SYSCALLS.get(os.uname().machine) if sys.platform.startswith("linux") else None


_status: LandlockStatus | None = None


def landlock_status() -> LandlockStatus:
    """Probe (once) whether this kernel supports Landlock, and which ABI version."""
    global _status
    if _status is not None:
        return _status
    numbers = _syscall_numbers()
    if numbers is None:
        _status = LandlockStatus(False, 0, f"not supported on {sys.platform} {os.uname().machine}")
        return _status
    libc = _libc()
    abi = libc.syscall(
        ctypes.c_long(numbers[0]),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION),
    )
    if abi < 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            reason = "the kernel was built without Landlock"
        elif err == errno.EOPNOTSUPP:
            reason = "Landlock is disabled at boot (add it to the lsm= kernel parameter)"
        else:
            reason = f"landlock_create_ruleset failed: {os.strerror(err)}"
        _status = LandlockStatus(False, 0, reason)
    else:
        _status = LandlockStatus(True, int(abi), "")
    return _status


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def carve(root: str, deny: tuple[str, ...] | list[str]) -> list[str]:
    """Paths covering ``root`` but the ``deny`` paths strictly inside it: a root holding one
    becomes its entries, recursively, symlinks left out (their targets have their own root,
    if any). A deny path at or above ``root`` does not cut it: naming a root grants it."""
    inside = [d for d in deny if d != root and _beneath(d, root)]
    if not inside:
        return [root]
    out: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        child = os.path.join(root, entry.name)
        if child in inside:
            continue
        try:
            if entry.is_symlink():
                continue
        except OSError:
            continue
        out.extend(carve(child, inside))
    return out


def restrict_self(rules: object) -> None:
    """Confine this process (and its future children) to ``rules``. Raises ``LandlockError``
    if anything fails; nothing is half-applied: only the final syscall restricts."""
    numbers = _syscall_numbers()
    status = landlock_status()
    if numbers is None or not status.available:
        raise LandlockError(errno.ENOSYS, status.reason)
    create, add_rule, restrict = numbers
    abi = status.abi
    handled_fs = fs_access_for_abi(abi) if rules.files else 0
    handled_net = (
        ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP if rules.tcp and abi >= NET_ABI else 0
    )
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if rules.scope and abi >= SCOPE_ABI else 0
    libc = _libc()

    def check(result: int, what: str) -> int:
        if result < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"{what}: {os.strerror(err)}")
        return result

    if not (handled_fs or handled_net or scoped):
        return  # nothing this kernel can enforce was asked for
    check(
        libc.prctl(ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), 0, 0, 0),
        "prctl(PR_SET_NO_NEW_PRIVS)",
    )
    ruleset = _RulesetAttr(handled_fs, handled_net, scoped)
    # An older kernel knows a shorter struct; pass only the fields it knows.
    size = 8 if abi < NET_ABI else 16 if abi < SCOPE_ABI else ctypes.sizeof(ruleset)
    ruleset_fd = check(
        libc.syscall(
            ctypes.c_long(create),
            ctypes.byref(ruleset),
            ctypes.c_size_t(size),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )
    try:

        def add(rule_type: int, rule: ctypes.Structure, what: str) -> None:
            check(
                libc.syscall(
                    ctypes.c_long(add_rule),
                    ctypes.c_int(ruleset_fd),
                    ctypes.c_int(rule_type),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                ),
                f"landlock_add_rule({what})",
            )

        def allow(path: str, access: int) -> None:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:  # missing, or not reachable: nothing to grant
                return
            try:
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    access &= FILE_ACCESS
                rule = _PathBeneathAttr(access & handled_fs, fd)
                if rule.allowed_access:
                    add(LANDLOCK_RULE_PATH_BENEATH, rule, path)
            finally:
                os.close(fd)

        if handled_fs:
            for root in rules.read:
                for path in carve(root, rules.deny):
                    allow(path, READ_ACCESS)
            for device in DEVICE_FILES:
                allow(device, DEVICE_ACCESS)
            for root in rules.write:
                for path in carve(root, rules.deny):
                    allow(path, handled_fs)

        def allow_port(access: int, port: int, what: str) -> None:
            # ctypes would wrap 2**64 + 80 to 80, a port never asked for: refuse past 65535 first
            if not 0 <= port <= 0xFFFF:
                raise LandlockError(errno.EINVAL, f"landlock_add_rule({what}): not a TCP port")
            add(LANDLOCK_RULE_NET_PORT, _NetPortAttr(access, port), what)

        if handled_net:
            for port in rules.connect:
                allow_port(ACCESS_NET_CONNECT_TCP, port, f"connect {port}")
            for port in rules.bind:
                allow_port(ACCESS_NET_BIND_TCP, port, f"bind {port}")
        check(
            libc.syscall(ctypes.c_long(restrict), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset_fd)
