"""Files sent to an agent over A2A, saved in its workspace for its tools to open.

A message's file parts with bytes go to ``<workspace>/inbox/<folder>/<name>``: the folder
a hash of the task id (a client may choose ``..`` as an id), the name made safe and unique.
Everything is opened from the workspace down with directory fds and ``O_NOFOLLOW``, so a
link an agent puts in place of ``inbox`` or a folder leads nowhere outside. Bounded per
message (``MAX_FILES_PER_MESSAGE``) and per task (``MAX_TASK_FILES``, ``MAX_TASK_BYTES``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import _models as m

MAX_FILES_PER_MESSAGE = 64
MAX_TASK_FILES = 256
MAX_TASK_BYTES = 16 * 1024 * 1024
_UNSAFE = re.compile(r"[^\w.-]+")
_MAX_STEM_BYTES = 150
_MAX_SUFFIX_CHARS = 16


def folder_of(task_id: str) -> str:
    """The inbox folder of ``task_id``: never ``.``/``..``, never shared by two ids."""
    return "t-" + hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def safe_name(filename: str | None, index: int) -> str:
    """A file name without separators, leading dots or control characters, that keeps its
    suffix (``отчёт.pdf`` stays ``отчёт.pdf``) and fits a file system's 255 bytes."""
    base = (filename or "").replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, suffix = base.rpartition(".")
    if not dot:
        stem, suffix = base, ""
    stem = _UNSAFE.sub("_", stem).strip("._")
    suffix = _UNSAFE.sub("_", suffix).strip("._")[:_MAX_SUFFIX_CHARS]
    while len(stem.encode()) > _MAX_STEM_BYTES:
        stem = stem[:-1]
    stem = stem or f"file-{index + 1}"
    return f"{stem}.{suffix}" if suffix else stem


def _open_dir(name: str, parent: int, *, create: bool) -> int:
    if create:
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)


def _open_inbox(workspace: Path, *, create: bool) -> int:
    """``<workspace>/inbox`` (made if ``create``), opened without following a link."""
    root = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _open_dir("inbox", root, create=create)
    finally:
        os.close(root)


def save_files(workspace: Path, task_id: str, parts: Sequence[m.Part]) -> list[str | None]:
    """Save the parts with bytes; for each part its workspace-relative path, a note in
    brackets saying why it was not saved, or None (not a file with bytes)."""
    out: list[str | None] = [None] * len(parts)
    wanted = [i for i, p in enumerate(parts) if p.raw is not None]
    if not wanted:
        return out
    folder = folder_of(task_id)
    inbox = _open_inbox(workspace, create=True)
    try:
        task_dir = _open_dir(folder, inbox, create=True)
    finally:
        os.close(inbox)
    try:
        taken: dict[str, int] = {}
        files = total = 0
        for entry in os.scandir(task_dir):
            taken[entry.name] = 1
            files += 1
            total += entry.stat(follow_symlinks=False).st_size
        for n, i in enumerate(wanted):
            raw = parts[i].raw or b""
            if n >= MAX_FILES_PER_MESSAGE or files >= MAX_TASK_FILES:
                out[i] = (
                    f"(not saved: at most {MAX_FILES_PER_MESSAGE} files "
                    f"a message and {MAX_TASK_FILES} a task)"
                )
                continue
            if total + len(raw) > MAX_TASK_BYTES:
                out[i] = (
                    "(not saved: a task's files may total at most "
                    f"{MAX_TASK_BYTES // (1024 * 1024)} MiB)"
                )
                continue
            base = safe_name(parts[i].filename, i)
            name = base
            while name in taken:  # a counter per name: each clash costs one step, not a search
                taken[base] = taken.get(base, 1) + 1
                name = f"{taken[base]}-{base}"
            taken[name] = 1
            fd = os.open(
                name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=task_dir,
            )
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
            files += 1
            total += len(raw)
            out[i] = f"inbox/{folder}/{name}"
    finally:
        os.close(task_dir)
    return out


def remove_task_folders(workspaces: Iterable[Path], task_ids: Sequence[str]) -> None:
    """Remove the inbox folders of ``task_ids`` from ``workspaces`` (best effort; never
    through a link; a workspace or inbox that does not exist is skipped)."""
    folders = [folder_of(t) for t in task_ids]
    for workspace in workspaces:
        try:
            inbox = _open_inbox(workspace, create=False)
        except OSError:
            continue
        try:
            for folder in folders:
                try:
                    info = os.stat(folder, dir_fd=inbox, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(folder, dir_fd=inbox, ignore_errors=True)
        finally:
            os.close(inbox)
