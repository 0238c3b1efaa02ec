"""Opening files beneath a directory without ever following a symbolic link.

After the lexical check against the agent's roots, the open happens relative to the root's
directory fd so nothing swapped in meanwhile can lead it elsewhere: ``openat2`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` (Linux ≥ 5.6), else a walk
one ``O_NOFOLLOW`` component at a time. A symlink anywhere fails with ``ELOOP``. Files open
``O_NONBLOCK`` (a FIFO never blocks); callers ``fstat`` and refuse what is not regular.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from collections.abc import Iterator

SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _RESOLVE)
    fd = _libc.syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return fd


def _probe_openat2() -> bool:
    if SYS_OPENAT2 is None or platform.system() != "Linux":
        return False
    try:
        os.close(_openat2(-100, "/", DIR_FLAGS, 0))  # AT_FDCWD
    except OSError as exc:
        # "/" is absolute, so RESOLVE_BENEATH refuses it (EXDEV) where openat2 exists.
        return exc.errno == errno.EXDEV
    return True


USE_OPENAT2 = _probe_openat2()


def _open_nofollow(name: str, flags: int, mode: int, dir_fd: int) -> int:
    """Open the single component ``name`` beneath ``dir_fd`` without following it."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except NotADirectoryError:
        # O_DIRECTORY|O_NOFOLLOW on a symlink says ENOTDIR; say ELOOP as openat2 does. (A
        # directory here now was swapped in after the open saw something else.)
        try:
            now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except OSError:
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), name) from None
        if flags & os.O_DIRECTORY and (stat.S_ISLNK(now) or stat.S_ISDIR(now)):
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


def _walk_open(dir_fd: int, rel: str, flags: int, mode: int) -> int:
    parts = rel.split("/")
    fd = dir_fd
    try:
        for name in parts[:-1]:
            step = _open_nofollow(name, DIR_FLAGS, 0, fd)
            if fd != dir_fd:
                os.close(fd)
            fd = step
        return _open_nofollow(parts[-1], flags, mode, fd)
    finally:
        if fd != dir_fd:
            os.close(fd)


def split(rel: str) -> str:
    """``rel`` checked: relative, normalised, no ``..``, no empty parts ('.' for the root)."""
    if rel in ("", "."):
        return "."
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"not a normalised relative path: {rel!r}")
    return rel


def open_beneath(dir_fd: int, rel: str, flags: int, mode: int = 0o666) -> int:
    """Open ``rel`` (normalised, relative) beneath ``dir_fd`` following no symlink."""
    rel = split(rel)
    if USE_OPENAT2:
        return _openat2(dir_fd, rel, flags | os.O_CLOEXEC, mode)
    if rel == ".":
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    return _walk_open(dir_fd, rel, flags, mode)


def open_under(root: str, rel: str, flags: int, mode: int = 0o666) -> int:
    """``open_beneath`` the directory ``root`` (trusted: reached through symlinks if any)."""
    fd = os.open(root, DIR_FLAGS)
    try:
        return open_beneath(fd, rel, flags, mode)
    finally:
        os.close(fd)


def make_dirs_under(root: str, rel: str) -> int:
    """The fd of directory ``rel`` beneath ``root``, missing ones created (``mkdir -p``)
    without following a symlink; the caller closes it."""
    rel = split(rel)
    fd = os.open(root, DIR_FLAGS)
    if rel == ".":
        return fd
    try:
        for name in rel.split("/"):
            try:
                step = open_beneath(fd, name, DIR_FLAGS)
            except FileNotFoundError:
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass  # made meanwhile (or a symlink: the open below says ELOOP)
                step = open_beneath(fd, name, DIR_FLAGS)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _entries(fd: int) -> list[os.DirEntry]:
    with os.scandir(fd) as it:
        return sorted(it, key=lambda e: e.name)


def _subdirs(entries: list[os.DirEntry]) -> Iterator[str]:
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                yield entry.name
        except OSError:
            continue


def _kept(rel: str, entries: list[os.DirEntry], denied: frozenset[str]) -> list[os.DirEntry]:
    if not denied:
        return entries
    return [e for e in entries if (f"{rel}/{e.name}" if rel else e.name) not in denied]


def walk(
    top_fd: int,
    skip: frozenset[str] = frozenset(),
    denied: frozenset[str] = frozenset(),
    *,
    max_depth: int | None = None,
) -> Iterator[tuple[str, int, list[os.DirEntry]]]:
    """Depth-first ``(rel_dir, dir_fd, entries)`` below ``top_fd`` (readable, not ``O_PATH``),
    one fd per level, no symlink followed; not entered: ``skip``, ``denied``, past ``max_depth``;
    a ``denied`` file is left out of ``entries``."""
    stack: list[tuple[str, int, Iterator[str]]] = []
    try:
        fd = os.dup(top_fd)
        stack.append(("", fd, iter(())))
        entries = _kept("", _entries(fd), denied)
        stack[-1] = ("", fd, _subdirs(entries))
        yield "", fd, entries
        while stack:
            rel, fd, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                os.close(fd)
                continue
            child = f"{rel}/{name}" if rel else name
            if name in skip or child in denied:
                continue
            if max_depth is not None and child.count("/") + 2 > max_depth:
                continue
            try:
                sub = os.open(name, READ_FLAGS | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:
                continue
            stack.append((child, sub, iter(())))
            try:
                entries = _kept(child, _entries(sub), denied)
            except OSError:
                continue
            stack[-1] = (child, sub, _subdirs(entries))
            yield child, sub, entries
    finally:
        for _, fd, _ in stack:
            os.close(fd)


def regular_file_kind(mode: int) -> str | None:
    """None for a regular file, else what it is, in words."""
    if stat.S_ISREG(mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((word for test, word in kinds if test(mode)), "not a regular file")
