"""Landlock (Linux ≥ 5.13) through ctypes syscalls.

``restrict_self(writable)`` confines the calling process and its future children: the
ruleset handles every filesystem access right of the running kernel's Landlock ABI;
reading and executing are granted everywhere, writing (creating, removing, truncating,
renaming, linking) only beneath the ``writable`` directories and on a few device files
such as ``/dev/null``. ``no_new_privs`` is set first, as Landlock requires.

Standard library only: ``_sandbox_exec`` loads this file in a ``python -I -S`` process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass

# Syscall numbers (the same on these architectures; all use the generic table).
_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446), "arm64": (444, 445, 446)}

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

ACCESS_FS_EXECUTE = 1 << 0
ACCESS_FS_WRITE_FILE = 1 << 1
ACCESS_FS_READ_FILE = 1 << 2
ACCESS_FS_READ_DIR = 1 << 3
ACCESS_FS_REMOVE_DIR = 1 << 4
ACCESS_FS_REMOVE_FILE = 1 << 5
ACCESS_FS_MAKE_CHAR = 1 << 6
ACCESS_FS_MAKE_DIR = 1 << 7
ACCESS_FS_MAKE_REG = 1 << 8
ACCESS_FS_MAKE_SOCK = 1 << 9
ACCESS_FS_MAKE_FIFO = 1 << 10
ACCESS_FS_MAKE_BLOCK = 1 << 11
ACCESS_FS_MAKE_SYM = 1 << 12
ACCESS_FS_REFER = 1 << 13  # ABI 2
ACCESS_FS_TRUNCATE = 1 << 14  # ABI 3
ACCESS_FS_IOCTL_DEV = 1 << 15  # ABI 5
# ABI 4 added network rights, ABI 6 scopes, ABI 7 audit flags: no new filesystem rights.

READ_ACCESS = ACCESS_FS_EXECUTE | ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR
# Rights that may be granted on a regular or device file (not only on directories).
FILE_ACCESS = (
    ACCESS_FS_EXECUTE
    | ACCESS_FS_WRITE_FILE
    | ACCESS_FS_READ_FILE
    | ACCESS_FS_TRUNCATE
    | ACCESS_FS_IOCTL_DEV
)
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/random", "/dev/urandom")


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


@dataclass(frozen=True)
class LandlockStatus:
    """Whether bash can be confined by Landlock here; ``abi`` is 0 when not."""

    available: bool
    abi: int
    reason: str

    def describe(self) -> str:
        if self.available:
            return f"Landlock ABI {self.abi}: bash writes are confined by the kernel"
        return f"Landlock unavailable ({self.reason}): bash writes are NOT confined by the kernel"


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is __attribute__((packed))
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class LandlockError(OSError):
    """Landlock could not be set up."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _syscall_numbers() -> tuple[int, int, int] | None:
    if platform.system() != "Linux":
        return None
    return _SYSCALLS.get(platform.machine())


_status: LandlockStatus | None = None


def landlock_status() -> LandlockStatus:
    """Probe (once) whether this kernel supports Landlock, and which ABI version."""
    global _status
    if _status is not None:
        return _status
    numbers = _syscall_numbers()
    if numbers is None:
        _status = LandlockStatus(
            False, 0, f"not supported on {platform.system()} {platform.machine()}"
        )
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


def restrict_self(writable: list[str], *, abi: int | None = None) -> int:
    """Confine this process (and its future children) to writing only beneath ``writable``.

    Returns the ABI used. Raises ``LandlockError`` if anything fails; nothing is
    half-applied, because the restriction only takes effect in the final syscall.
    """
    numbers = _syscall_numbers()
    status = landlock_status()
    if numbers is None or not status.available:
        raise LandlockError(errno.ENOSYS, status.reason)
    create, add_rule, restrict = numbers
    abi = status.abi if abi is None else abi
    handled = fs_access_for_abi(abi)
    libc = _libc()

    def check(result: int, what: str) -> int:
        if result < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"{what}: {os.strerror(err)}")
        return result

    ruleset = _RulesetAttr(handled)
    ruleset_fd = check(
        libc.syscall(
            ctypes.c_long(create),
            ctypes.byref(ruleset),
            ctypes.c_size_t(ctypes.sizeof(ruleset)),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )
    try:

        def allow(path: str, access: int) -> None:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                return
            try:
                if not os.path.isdir(path):
                    access &= FILE_ACCESS
                rule = _PathBeneathAttr(access & handled, fd)
                if rule.allowed_access == 0:
                    return
                check(
                    libc.syscall(
                        ctypes.c_long(add_rule),
                        ctypes.c_int(ruleset_fd),
                        ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                        ctypes.byref(rule),
                        ctypes.c_uint32(0),
                    ),
                    f"landlock_add_rule({path})",
                )
            finally:
                os.close(fd)

        allow("/", READ_ACCESS)
        allow("/dev", READ_ACCESS | ACCESS_FS_IOCTL_DEV)
        for device in DEVICE_FILES:
            allow(
                device,
                ACCESS_FS_READ_FILE
                | ACCESS_FS_WRITE_FILE
                | ACCESS_FS_TRUNCATE
                | ACCESS_FS_IOCTL_DEV,
            )
        for path in writable:
            allow(path, handled)
        check(
            libc.prctl(ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), 0, 0, 0),
            "prctl(PR_SET_NO_NEW_PRIVS)",
        )
        check(
            libc.syscall(ctypes.c_long(restrict), ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset_fd)
    return abi
