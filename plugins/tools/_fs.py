"""The file tools: ``read``, ``write``, ``edit``, ``list``, ``glob`` and ``grep``.

Each path is checked against the agent's file-access model (``_sandbox.FileAccess``), then
opened beneath its root following no symlink (``_beneath``), so a path swapped after the
check cannot lead elsewhere. Only regular files are opened for content (non-blocking, then
``fstat``-checked: a FIFO is refused, never waited on); ``write`` and ``edit`` refuse a
file with other hard links. Memory stays bounded whatever the file (``MAX_LINE_CHARS``,
``MAX_EDIT_BYTES``, ``MAX_GREP_FILE_BYTES``). The work runs in the agent's own threads
(``agent_thread``), abandoned on cancellation; walks also stop at the call's deadline.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from typing import Any

from roost.kernel import (
    SandboxError,
    Tool,
    ToolArgumentsInvalid,
    ToolCall,
    ToolContext,
    ToolResult,
    ToolSpec,
    validate_arguments,
)

from ._beneath import (
    DIR_FLAGS,
    READ_FLAGS,
    make_dirs_under,
    open_under,
    regular_file_kind,
    walk,
)
from ._sandbox import (
    FileAccess,
    Located,
    agent_thread,
    file_access,
    flag_arg,
    int_arg,
    path_argument,
    string_arg,
    text_arg,
    tool_spec,
)

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000
BINARY_SNIFF_BYTES = 8192
MAX_LISTED = 1000
MAX_GREP_FILE_BYTES = 10_000_000
MAX_EDIT_BYTES = 10 * 1024 * 1024
_READ_CHUNK = 1 << 16
MAX_GREP_LINE_CHARS = 500
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
# Leave the kernel's timeout some room so a walk reports what it found before it.
_WALK_DEADLINE_FRACTION = 0.8
_WRITE_FLAGS = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC


class _Refused(Exception):
    """Why the file cannot be used, as an error result; ``code``: its errno, if any."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def _symlink_on_the_way(loc: Located) -> str:
    """The first component of ``loc`` that is a symlink (for the message only)."""
    path = loc.root
    for part in loc.rel.split("/"):
        path = path / part
        if path.is_symlink():
            return str(path)
    return str(loc.path)


def _explain(exc: OSError, raw: str, loc: Located, verb: str) -> Exception:
    if exc.errno == errno.ELOOP:
        return SandboxError(
            f"cannot {verb} {raw!r}: {_symlink_on_the_way(loc)} is a symbolic link; the file "
            "tools do not follow symlinks (one could lead outside the agent's roots) — use "
            "the path it points to"
        )
    if exc.errno == errno.EXDEV:
        return SandboxError(f"cannot {verb} {raw!r}: the path leads out of {loc.root}")
    if exc.errno == errno.ENOENT:
        text = f"no such file or directory: {raw!r} ({loc.path})"
    elif exc.errno == errno.ENOTDIR:
        text = f"cannot {verb} {raw!r}: a part of {loc.path} is not a directory"
    else:
        text = f"cannot {verb} {raw!r}: {exc.strerror or exc} ({loc.path})"
    return _Refused(text, exc.errno)


def _open(loc: Located, flags: int, raw: str, verb: str, mode: int = 0o666) -> int:
    """Open ``loc`` beneath its root following no symlink (rwx: a plain open)."""
    try:
        if loc.follow:
            return os.open(loc.path, flags | os.O_CLOEXEC, mode)
        return open_under(str(loc.root), loc.rel, flags, mode)
    except OSError as exc:
        raise _explain(exc, raw, loc, verb) from None


def _regular(fd: int, raw: str, verb: str, *, one_link: bool = False) -> os.stat_result:
    """``fd``'s stat if it is a regular file (with ``one_link``: without other hard links);
    else ``fd`` is closed and the file refused."""
    try:
        info = os.fstat(fd)
        kind = regular_file_kind(info.st_mode)
        if kind == "a directory":
            raise _Refused(
                f"{raw!r} is a directory; use the list tool to see its entries", errno.EISDIR
            )
        if kind is not None:
            does = "write" if verb == "write" else "open"
            raise _Refused(
                f"cannot {verb} {raw!r}: it is {kind}; the file tools {does} regular files only"
            )
        if one_link and info.st_nlink > 1:
            raise _Refused(
                f"cannot {verb} {raw!r}: it has {info.st_nlink} hard links, so it may be a file "
                "outside the agent's roots under another name; write a new file instead"
            )
    except BaseException:
        os.close(fd)
        raise
    return info


def _write_all(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(fd, view[offset:], offset)


def _binary(data: bytes) -> bool:
    """Whether a file starting with ``data`` is binary: a NUL in its first BINARY_SNIFF_BYTES."""
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def _shown(path: Any, access: FileAccess) -> str:
    """``path`` relative to the workspace when inside it, else absolute."""
    rel = os.path.relpath(path, access.workspace)
    return str(path) if rel == ".." or rel.startswith("../") else rel


def _deadline(ctx: ToolContext) -> float:
    return time.monotonic() + max(0.5, ctx.timeout_s * _WALK_DEADLINE_FRACTION)


async def _in_thread(ctx: ToolContext, fn: Callable[[FileAccess], ToolResult]) -> ToolResult:
    """Blocking file work in the agent's threads; a refusal or OS error: an error result."""

    def guarded() -> ToolResult:
        access = file_access(ctx)
        try:
            return fn(access)
        except _Refused as exc:
            return ToolResult.error(str(exc))
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            return ToolResult.error(f"{exc.strerror or exc}{where}")

    return await agent_thread(ctx, guarded)


READ_SPEC = tool_spec(
    name="read",
    title="Read a file",
    description=(
        "Read a text file and return its lines numbered like `cat -n` (number, tab, line). "
        f"Returns up to {DEFAULT_READ_LINES} lines from `offset`; use `offset` and `limit` "
        "to page through long files. Binary files are refused. Paths are relative to the "
        "workspace unless absolute; only the workspace and roots the agent's manifest "
        "grants can be read, and symbolic links are not followed."
    ),
    properties={
        "path": string_arg("File to read."),
        "offset": int_arg("First line to return (1-based, default 1).", 1, 10**9),
        "limit": int_arg(f"How many lines to return (default {DEFAULT_READ_LINES}).", 1, 100000),
    },
    required=["path"],
    readOnlyHint=True,
)


def _lines(f: Any, keep: int, deadline: float, what: str) -> Iterator[tuple[bytes, bool]]:
    """``(bytes, cut)`` per line (end stripped), cut to ``keep`` bytes, the rest skipped unread
    so memory stays bounded; ``_Refused`` past ``deadline``."""

    def line(size: int) -> bytes:
        if time.monotonic() > deadline:
            raise _Refused(f"{what}: reading the file ran out of time; give a smaller offset")
        return f.readline(size)

    while data := line(keep + 1):
        if data.endswith(b"\n"):
            yield data[:-1].removesuffix(b"\r"), False
        elif len(data) <= keep:
            yield data, False  # the last line, without an end
        else:
            yield data[:keep], True
            while (rest := line(_READ_CHUNK)) and not rest.endswith(b"\n"):
                pass


async def read(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    raw = path_argument(args)
    # int(): the schema's "integer" lets 2.0 through too.
    offset, limit = int(args.get("offset", 1)), int(args.get("limit", DEFAULT_READ_LINES))
    budget = ctx.max_output_chars
    deadline = _deadline(ctx)

    def work(access: FileAccess) -> ToolResult:
        fd = _open(access.locate(raw), READ_FLAGS, raw, "read")
        info = _regular(fd, raw, "read")
        with os.fdopen(fd, "rb") as f:
            if _binary(f.read(BINARY_SNIFF_BYTES)):
                return ToolResult.error(
                    f"{raw!r} is a binary file ({info.st_size} bytes); read shows text files only"
                )
            f.seek(0)
            out: list[str] = []
            used = 0
            last = offset - 1
            more = False
            # Up to 4 bytes a character: enough bytes for MAX_LINE_CHARS characters.
            lines = _lines(f, MAX_LINE_CHARS * 4, deadline, repr(raw))
            for number, (data, cut) in enumerate(lines, start=1):
                if number < offset:
                    continue
                line = data.decode("utf-8", errors="replace")
                if cut or len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + " … [line truncated]"
                entry = f"{number:>6}\t{line}"
                out.append(entry)
                used += len(entry) + 1
                last = number
                if number + 1 >= offset + limit or used >= budget:
                    # Whatever follows (the rest of a cut line included) is "more".
                    more = bool(f.peek(1))
                    break
        if not out:
            if info.st_size == 0:
                return ToolResult.text(f"{raw!r} is empty (0 bytes)")
            return ToolResult.text(
                f"{raw!r} has fewer than {offset} lines; nothing to show at offset {offset}"
            )
        if more:
            out.append(
                f"[showing lines {offset}-{last}; more follow — read again with offset={last + 1}]"
            )
        return ToolResult.text("\n".join(out))

    return await _in_thread(ctx, work)


WRITE_SPEC = tool_spec(
    name="write",
    title="Write a file",
    description=(
        "Create or overwrite a text file with `content` (UTF-8), creating parent directories "
        "as needed. In sandbox mode only paths inside the workspace or roots the agent's "
        "manifest grants can be written; in read-only mode nothing can. Prefer `edit` for "
        "changing part of a file."
    ),
    properties={
        "path": string_arg("File to write."),
        "content": text_arg("The complete new file content."),
    },
    required=["path", "content"],
    readOnlyHint=False,
    destructiveHint=True,
    idempotentHint=True,
)


def _open_for_write(loc: Located, raw: str) -> tuple[int, bool]:
    """An fd to write ``loc`` and whether the file existed: parents created beneath the root,
    no symlink followed, never a file with other hard links."""
    parent, name = os.path.split(loc.rel)
    if loc.rel == "." or not name:
        raise _Refused(f"{raw!r} is a directory; give a file path to write")
    try:
        if loc.follow:
            os.makedirs(loc.path.parent, exist_ok=True)
            dir_fd = os.open(loc.path.parent, DIR_FLAGS)
        else:
            dir_fd = make_dirs_under(str(loc.root), parent or ".")
    except OSError as exc:
        raise _explain(exc, raw, loc, "write") from None
    try:
        try:
            fd = os.open(name, _WRITE_FLAGS | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=dir_fd)
            existed = False
        except FileExistsError:
            fd, existed = os.open(name, _WRITE_FLAGS, dir_fd=dir_fd), True
    except IsADirectoryError:
        raise _Refused(f"{raw!r} is a directory; give a file path to write") from None
    except OSError as exc:
        raise _explain(exc, raw, loc, "write") from None
    finally:
        os.close(dir_fd)
    _regular(fd, raw, "write", one_link=True)
    return fd, existed


async def write(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    raw = path_argument(args)
    content = args["content"]

    def work(access: FileAccess) -> ToolResult:
        loc = access.locate(raw, write=True)
        data = content.encode("utf-8")
        fd, existed = _open_for_write(loc, raw)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
        verb = "overwrote" if existed else "created"
        return ToolResult.text(
            f"{verb} {_shown(loc.path, access)} ({len(data)} bytes, {lines} lines)"
        )

    return await _in_thread(ctx, work)


EDIT_SPEC = tool_spec(
    name="edit",
    title="Edit a file",
    description=(
        "Replace an exact string in a text file. `old_string` must match the file exactly "
        "(whitespace and indentation included) and occur exactly once, unless `replace_all` "
        "is true. Read the file first and copy the text without the line-number prefix."
    ),
    properties={
        "path": string_arg("File to edit."),
        "old_string": string_arg("The exact text to replace."),
        "new_string": text_arg("The text to put in its place."),
        "replace_all": flag_arg("Replace every occurrence instead of exactly one (default false)."),
    },
    required=["path", "old_string", "new_string"],
    readOnlyHint=False,
    destructiveHint=True,
    idempotentHint=False,
)


def _line_numbers(text: str, needle: str, limit: int = 10) -> list[int]:
    out, start = [], 0
    while len(out) < limit:
        i = text.find(needle, start)
        if i < 0:
            break
        out.append(text.count("\n", 0, i) + 1)
        start = i + 1
    return out


def _snippet(text: str, first_line: int, changed_lines: int, context: int = 3) -> str:
    lines = text.split("\n")
    lo = max(1, first_line - context)
    hi = min(len(lines), first_line + changed_lines - 1 + context)
    return "\n".join(f"{n:>6}\t{lines[n - 1]}" for n in range(lo, hi + 1))


async def edit(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    raw = path_argument(args)
    old, new = args["old_string"], args["new_string"]
    replace_all = args.get("replace_all", False)
    if old == new:
        raise ToolArgumentsInvalid(
            "arguments.new_string: is identical to old_string, so the edit would change "
            "nothing; give the replacement text"
        )

    def work(access: FileAccess) -> ToolResult:
        loc = access.locate(raw, write=True)
        try:
            fd = _open(loc, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY, raw, "edit")
            info = _regular(fd, raw, "edit", one_link=True)
        except _Refused as exc:
            what = {errno.ENOENT: "does not exist", errno.EISDIR: "is a directory"}.get(exc.code)
            if what is None:
                raise
            raise _Refused(f"cannot edit {raw!r}: it {what}; use write to create a file") from None
        with os.fdopen(fd, "r+b") as f:
            if info.st_size > MAX_EDIT_BYTES:
                raise _Refused(
                    f"cannot edit {raw!r}: it is {info.st_size} bytes, over edit's limit of "
                    f"{MAX_EDIT_BYTES // (1024 * 1024)} MiB; change it with bash (e.g. sed) instead"
                )
            data = f.read(MAX_EDIT_BYTES + 1)
            if len(data) > MAX_EDIT_BYTES:  # it grew since fstat
                return ToolResult.error(
                    f"cannot edit {raw!r}: it is over edit's limit of "
                    f"{MAX_EDIT_BYTES // (1024 * 1024)} MiB; change it with bash (e.g. sed) instead"
                )
            if _binary(data):
                return ToolResult.error(f"cannot edit {raw!r}: it is a binary file")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                return ToolResult.error(
                    f"cannot edit {raw!r}: it is not valid UTF-8 ({exc.reason} at byte {exc.start})"
                )
            count = text.count(old)
            if count == 0:
                hint = ""
                if old.strip() and old.strip() in text:
                    hint = " (a match differing only in leading/trailing whitespace exists)"
                return ToolResult.error(
                    f"old_string was not found in {raw!r}{hint}; read the file and copy the exact "
                    "text, including whitespace and indentation, without line numbers"
                )
            if count > 1 and not replace_all:
                lines = ", ".join(map(str, _line_numbers(text, old)))
                return ToolResult.error(
                    f"old_string occurs {count} times in {raw!r} (lines {lines}); include more "
                    "surrounding text to make it unique, or set replace_all to true"
                )
            first_line = text.count("\n", 0, text.find(old)) + 1
            updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
            _write_all(f.fileno(), updated.encode("utf-8"))
        replaced = count if replace_all else 1
        noun = "occurrence" if replaced == 1 else "occurrences"
        snippet = _snippet(updated, first_line, new.count("\n") + 1)
        return ToolResult.text(
            f"replaced {replaced} {noun} in {_shown(loc.path, access)}; "
            f"around line {first_line} now:\n" + snippet
        )

    return await _in_thread(ctx, work)


LIST_SPEC = tool_spec(
    name="list",
    title="List a directory",
    description=(
        "List the entries of a directory: directories end in `/`, symlinks show their "
        "target, files show their size in bytes. Hidden entries (starting with `.`) are "
        f"left out unless `include_hidden` is true. At most {MAX_LISTED} entries."
    ),
    properties={
        "path": string_arg("Directory to list (default: the workspace)."),
        "include_hidden": flag_arg("Also list entries whose name starts with `.` (default false)."),
    },
    readOnlyHint=True,
)


def _open_dir(loc: Located, raw: str, verb: str) -> int:
    """A readable fd of the directory at ``loc``; a file or anything else is refused."""
    try:
        return _open(loc, READ_FLAGS | os.O_DIRECTORY, raw, verb)
    except _Refused as exc:
        if exc.code == errno.ENOENT:
            raise _Refused(f"no such directory: {raw!r} ({loc.path})", exc.code) from None
        if exc.code == errno.ENOTDIR and os.path.lexists(loc.path) and not os.path.isdir(loc.path):
            raise _Refused(
                f"{raw!r} is a file, not a directory; use read to see it", exc.code
            ) from None
        raise


async def list_directory(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    raw = path_argument(args, default=".")
    hidden = args.get("include_hidden", False)

    def work(access: FileAccess) -> ToolResult:
        loc = access.locate(raw)
        denied = access.denied_below(loc)
        fd = _open_dir(loc, raw, "list")
        try:
            with os.scandir(fd) as it:
                entries = [e for e in it if e.name not in denied]
            if not hidden:
                entries = [e for e in entries if not e.name.startswith(".")]
            entries.sort(key=lambda e: e.name)
            lines = []
            for entry in entries[:MAX_LISTED]:
                try:
                    if entry.is_symlink():
                        lines.append(f"{entry.name} -> {os.readlink(entry.name, dir_fd=fd)}")
                    elif entry.is_dir(follow_symlinks=False):
                        lines.append(f"{entry.name}/")
                    else:
                        size = entry.stat(follow_symlinks=False).st_size
                        lines.append(f"{entry.name}  ({size} bytes)")
                except OSError:
                    lines.append(f"{entry.name}  (unreadable)")
        finally:
            os.close(fd)
        header = f"{_shown(loc.path, access)}: {len(entries)} entries"
        if len(entries) > MAX_LISTED:
            lines.append(f"[{len(entries) - MAX_LISTED} more entries not shown; use glob]")
        if not entries:
            return ToolResult.text(header + " (empty)")
        return ToolResult.text(header + "\n" + "\n".join(lines))

    return await _in_thread(ctx, work)


GLOB_SPEC = tool_spec(
    name="glob",
    title="Find files by pattern",
    description=(
        "Find files and directories matching a glob pattern under `path` (default: the "
        "workspace), e.g. `**/*.py` or `src/*.json`; `**` matches any number of directories. "
        f"Returns paths relative to `path`, sorted, at most {MAX_LISTED}."
    ),
    properties={
        "pattern": string_arg("Glob pattern relative to `path`, e.g. `**/*.md`."),
        "path": string_arg("Directory to search from (default: the workspace)."),
    },
    required=["pattern"],
    readOnlyHint=True,
)


async def glob(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    pattern = args["pattern"]
    if pattern.startswith("/") or os.path.isabs(pattern):
        raise ToolArgumentsInvalid(
            "arguments.pattern: must be relative; put the directory in arguments.path "
            "and the pattern (e.g. '**/*.py') in arguments.pattern"
        )
    raw = path_argument(args, default=".")
    try:
        regex = glob_to_regex(pattern)
    except re.error as exc:
        raise ToolArgumentsInvalid(f"arguments.pattern: {exc}") from None
    # Without '**' a match is at most as deep as the pattern: no need to walk further.
    max_depth = None if "**" in pattern else pattern.count("/") + 1
    deadline = _deadline(ctx)

    def work(access: FileAccess) -> ToolResult:
        loc = access.locate(raw)
        fd = _open_dir(loc, raw, "glob")
        found: list[str] = []
        stopped = ""
        try:
            for rel_dir, _dir_fd, entries in walk(
                fd, SKIPPED_DIRS, access.denied_below(loc), max_depth=max_depth
            ):
                if time.monotonic() > deadline:
                    stopped = "the search ran out of time"
                    break
                for entry in entries:
                    rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                    if entry.name in SKIPPED_DIRS or not regex.match(rel):
                        continue
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    found.append(rel + ("/" if is_dir else ""))
                if len(found) > MAX_LISTED:
                    stopped = f"more than {MAX_LISTED} matches"
                    break
        finally:
            os.close(fd)
        found.sort()
        if not found:
            return ToolResult.text(f"no matches for {pattern!r} under {_shown(loc.path, access)}")
        lines = found[:MAX_LISTED]
        if stopped:
            lines.append(f"[stopped: {stopped}; narrow the pattern]")
        return ToolResult.text("\n".join(lines))

    return await _in_thread(ctx, work)


GREP_SPEC = tool_spec(
    name="grep",
    title="Search file contents",
    description=(
        "Search files for lines matching a regular expression (Python `re` syntax) under "
        "`path` (a directory or one file; default: the workspace). `glob` limits which files "
        "are searched (e.g. `*.py` or `src/**/*.ts`). Returns `path:line: text` for each "
        "match. Binary files, files over 10 MB and VCS directories are skipped."
    ),
    properties={
        "pattern": string_arg("Regular expression to search for."),
        "path": string_arg("Directory or file to search (default: the workspace)."),
        "glob": string_arg("Only search files whose name or relative path matches this glob."),
        "case_insensitive": flag_arg("Ignore case (default false)."),
        "max_matches": int_arg("Stop after this many matching lines (default 200).", 1, 5000),
    },
    required=["pattern"],
    readOnlyHint=True,
)


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a path glob: ``*`` and ``?`` stay within one path segment, ``**`` spans
    segments (``**/`` also matches no directory), ``[...]`` is a character class."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _glob_filter(pattern: str | None) -> Callable[[str], bool]:
    if pattern is None:
        return lambda _rel: True
    regex = glob_to_regex(pattern)
    # A pattern without a slash matches the file name at any depth, as in ripgrep.
    if "/" not in pattern:
        return lambda rel: regex.match(rel.rsplit("/", 1)[-1]) is not None
    return lambda rel: regex.match(rel) is not None


def _read_capped(fd: int, size: int) -> bytes | None:
    """A file's content, None past the grep cap (rechecked while read: it may grow). Read in
    chunks: one read of the whole cap would allocate it for every small file."""
    if size > MAX_GREP_FILE_BYTES:
        return None
    chunks, total = [], 0
    while chunk := os.read(fd, _READ_CHUNK):
        total += len(chunk)
        if total > MAX_GREP_FILE_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _grep_files(
    fd: int, name: str, skip_below: frozenset[str], deadline: float
) -> Iterator[tuple[str, bytes | None]]:
    """``(rel path, content)`` per regular file under ``fd``, None over the cap, to the deadline."""
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode):
        yield name, _read_capped(fd, info.st_size)
        return
    for rel_dir, dir_fd, entries in walk(fd, SKIPPED_DIRS, skip_below):
        for entry in entries:
            if time.monotonic() > deadline:
                return
            try:
                if not entry.is_file(follow_symlinks=False):
                    continue  # directories are walked; links, FIFOs, devices never opened
                file_fd = os.open(entry.name, READ_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                info = os.fstat(file_fd)
                data = _read_capped(file_fd, info.st_size) if stat.S_ISREG(info.st_mode) else None
            except OSError:
                data = None
            finally:
                os.close(file_fd)
            yield (f"{rel_dir}/{entry.name}" if rel_dir else entry.name), data


async def grep(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    pattern = args["pattern"]
    flags = re.IGNORECASE if args.get("case_insensitive", False) else 0
    try:
        regex = re.compile(pattern, flags)
    except re.error as exc:
        raise ToolArgumentsInvalid(
            f"arguments.pattern: invalid regular expression ({exc}); escape special "
            "characters such as ( [ . * with a backslash, or fix the syntax"
        ) from None
    file_glob = args.get("glob")
    max_matches = int(args.get("max_matches", 200))  # 2.0 passes the schema too
    raw = path_argument(args, default=".")
    accept = _glob_filter(file_glob)
    deadline = _deadline(ctx)
    budget = ctx.max_output_chars

    def work(access: FileAccess) -> ToolResult:
        loc = access.locate(raw)
        fd = _open(loc, READ_FLAGS, raw, "grep")
        out: list[str] = []
        used = files_matched = files_searched = 0
        stopped = ""
        try:
            kind = regular_file_kind(os.fstat(fd).st_mode)
            if kind not in (None, "a directory"):
                raise _Refused(
                    f"cannot grep {raw!r}: it is {kind}; grep searches "
                    "regular files and directories"
                )
            files = _grep_files(fd, loc.path.name, access.denied_below(loc), deadline)
            for rel, data in files:
                if not accept(rel) or data is None or _binary(data):
                    continue
                files_searched += 1
                text = data.decode("utf-8", errors="replace")
                before = len(out)
                for number, line in enumerate(text.splitlines(), start=1):
                    if not regex.search(line):
                        continue
                    if len(line) > MAX_GREP_LINE_CHARS:
                        line = line[:MAX_GREP_LINE_CHARS] + " …"
                    entry = f"{rel}:{number}: {line}"
                    out.append(entry)
                    used += len(entry) + 1
                    if len(out) >= max_matches:
                        stopped = f"reached max_matches={max_matches}"
                        break
                    if used >= budget:
                        stopped = "output limit reached; narrow the pattern, path or glob"
                        break
                files_matched += len(out) > before
                if stopped:
                    break
            if not stopped and time.monotonic() > deadline:
                stopped = "the search ran out of time; narrow path or glob"
        finally:
            os.close(fd)
        if not out:
            return ToolResult.text(
                f"no matches for {pattern!r} in {files_searched} files under "
                f"{_shown(loc.path, access)}" + (f" ({stopped})" if stopped else "")
            )
        summary = f"[{len(out)} matches in {files_matched} files"
        summary += f"; stopped: {stopped}]" if stopped else "]"
        return ToolResult.text("\n".join(out) + "\n" + summary)

    return await _in_thread(ctx, work)


def _checked(spec: ToolSpec, handler: Any) -> Tool:
    """``handler``, its arguments checked against ``spec`` when no kernel checks them."""

    async def checked(call: ToolCall, ctx: ToolContext) -> ToolResult:
        if ctx.kernel is None:
            validate_arguments(spec, call.arguments)
        return await handler(call, ctx)

    return Tool(spec, checked)


def fs_tools() -> list[Tool]:
    """The file tool descriptors."""
    return [
        _checked(READ_SPEC, read),
        _checked(WRITE_SPEC, write),
        _checked(EDIT_SPEC, edit),
        _checked(LIST_SPEC, list_directory),
        _checked(GLOB_SPEC, glob),
        _checked(GREP_SPEC, grep),
    ]
