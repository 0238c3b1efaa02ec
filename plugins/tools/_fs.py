"""The file tools: ``read``, ``write``, ``edit``, ``list``, ``glob`` and ``grep``.

Paths are relative to the agent's workspace (absolute paths are allowed). Reads go
anywhere the process can read; writes obey the sandbox mode (see ``_sandbox``). The
blocking file work runs in a worker thread; long walks (``glob``, ``grep``) stop by
themselves at the call's deadline rather than leaving a thread behind.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import trio
from roost.kernel import Tool, ToolArgumentsInvalid, ToolCall, ToolContext, ToolResult, ToolSpec

from ._sandbox import path_argument, resolve, workspace_of, writable_path

DEFAULT_READ_LINES = 2000
MAX_LINE_CHARS = 2000
BINARY_SNIFF_BYTES = 8192
MAX_LISTED = 1000
MAX_GREP_FILE_BYTES = 10_000_000
MAX_GREP_LINE_CHARS = 500
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
# Leave the kernel's timeout some room so a walk reports what it found before it.
_WALK_DEADLINE_FRACTION = 0.8


def _int_arg(arguments: Any, name: str, default: int, *, minimum: int, maximum: int) -> int:
    value = arguments.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ToolArgumentsInvalid(
            f"arguments.{name}: expected an integer from {minimum} to {maximum}, got {value!r}"
        )
    return value


def _bool_arg(arguments: Any, name: str, default: bool) -> bool:
    value = arguments.get(name, default)
    if not isinstance(value, bool):
        raise ToolArgumentsInvalid(f"arguments.{name}: expected true or false, got {value!r}")
    return value


def _str_arg(arguments: Any, name: str, *, allow_empty: bool = False) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or (not allow_empty and value == ""):
        need = "a string" if allow_empty else "a non-empty string"
        raise ToolArgumentsInvalid(f"arguments.{name}: expected {need}, got {value!r}")
    return value


def _write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to an already-resolved path without following a symlink placed there
    after the sandbox check (that fails with ELOOP instead)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


def _shown(path: Path, ctx: ToolContext) -> str:
    """``path`` relative to the workspace when inside it, else absolute."""
    workspace = workspace_of(ctx)
    try:
        return str(path.relative_to(workspace)) or "."
    except ValueError:
        return str(path)


def _deadline(ctx: ToolContext) -> float:
    return time.monotonic() + max(0.5, ctx.timeout_s * _WALK_DEADLINE_FRACTION)


async def _in_thread(fn: Callable[[], ToolResult]) -> ToolResult:
    """Run blocking file work in a thread; an OS error becomes a clear error result."""

    def guarded() -> ToolResult:
        try:
            return fn()
        except OSError as exc:
            where = f": {exc.filename}" if exc.filename else ""
            return ToolResult.error(f"{exc.strerror or exc}{where}")

    return await trio.to_thread.run_sync(guarded)


# --------------------------------------------------------------------------------------
# read
# --------------------------------------------------------------------------------------

READ_SPEC = ToolSpec(
    name="read",
    title="Read a file",
    description=(
        "Read a text file and return its lines numbered like `cat -n` (number, tab, line). "
        f"Returns up to {DEFAULT_READ_LINES} lines from `offset`; use `offset` and `limit` "
        "to page through long files. Binary files are refused. Paths are relative to the "
        "workspace unless absolute."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File to read."},
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "First line to return (1-based, default 1).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100000,
                "description": f"How many lines to return (default {DEFAULT_READ_LINES}).",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    annotations={"title": "Read a file", "readOnlyHint": True, "openWorldHint": False},
)


async def read(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    raw = path_argument(args)
    offset = _int_arg(args, "offset", 1, minimum=1, maximum=10**9)
    limit = _int_arg(args, "limit", DEFAULT_READ_LINES, minimum=1, maximum=100_000)
    path = resolve(raw, ctx)
    budget = ctx.max_output_chars

    def work() -> ToolResult:
        if not path.exists():
            return ToolResult.error(f"no such file: {raw!r} (resolved to {path})")
        if path.is_dir():
            return ToolResult.error(f"{raw!r} is a directory; use the list tool to see its entries")
        size = path.stat().st_size
        with open(path, "rb") as f:
            if _is_binary(f.read(BINARY_SNIFF_BYTES)):
                return ToolResult.error(
                    f"{raw!r} is a binary file ({size} bytes); read shows text files only"
                )
        out: list[str] = []
        used = 0
        last = offset - 1
        more = False
        with open(path, encoding="utf-8", errors="replace", newline=None) as f:
            for number, line in enumerate(f, start=1):
                if number < offset:
                    continue
                if number >= offset + limit or used >= budget:
                    more = True
                    break
                line = line.rstrip("\n")
                if len(line) > MAX_LINE_CHARS:
                    line = line[:MAX_LINE_CHARS] + " … [line truncated]"
                text = f"{number:>6}\t{line}"
                out.append(text)
                used += len(text) + 1
                last = number
        if not out:
            if size == 0:
                return ToolResult.text(f"{raw!r} is empty (0 bytes)")
            return ToolResult.text(
                f"{raw!r} has fewer than {offset} lines; nothing to show at offset {offset}"
            )
        if more:
            out.append(
                f"[showing lines {offset}-{last}; more follow — read again with offset={last + 1}]"
            )
        return ToolResult.text("\n".join(out))

    return await _in_thread(work)


# --------------------------------------------------------------------------------------
# write
# --------------------------------------------------------------------------------------

WRITE_SPEC = ToolSpec(
    name="write",
    title="Write a file",
    description=(
        "Create or overwrite a text file with `content` (UTF-8), creating parent directories "
        "as needed. In sandbox mode only paths inside the workspace or the temp dir can be "
        "written; in read-only mode nothing can. Prefer `edit` for changing part of a file."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File to write."},
            "content": {"type": "string", "description": "The complete new file content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    annotations={
        "title": "Write a file",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    },
)


async def write(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    raw = path_argument(args)
    content = _str_arg(args, "content", allow_empty=True)
    path = writable_path(raw, ctx)

    def work() -> ToolResult:
        if path.is_dir():
            return ToolResult.error(f"{raw!r} is a directory; give a file path to write")
        existed = path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        _write_bytes(path, data)
        lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
        verb = "overwrote" if existed else "created"
        return ToolResult.text(f"{verb} {_shown(path, ctx)} ({len(data)} bytes, {lines} lines)")

    return await _in_thread(work)


# --------------------------------------------------------------------------------------
# edit
# --------------------------------------------------------------------------------------

EDIT_SPEC = ToolSpec(
    name="edit",
    title="Edit a file",
    description=(
        "Replace an exact string in a text file. `old_string` must match the file exactly "
        "(whitespace and indentation included) and occur exactly once, unless `replace_all` "
        "is true. Read the file first and copy the text without the line-number prefix."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "description": "File to edit."},
            "old_string": {
                "type": "string",
                "minLength": 1,
                "description": "The exact text to replace.",
            },
            "new_string": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of exactly one (default false).",
            },
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    },
    annotations={
        "title": "Edit a file",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": False,
    },
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
    old = _str_arg(args, "old_string")
    new = _str_arg(args, "new_string", allow_empty=True)
    replace_all = _bool_arg(args, "replace_all", False)
    if old == new:
        raise ToolArgumentsInvalid(
            "arguments.new_string: is identical to old_string, so the edit would change "
            "nothing; give the replacement text"
        )
    path = writable_path(raw, ctx)

    def work() -> ToolResult:
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "does not exist"
            return ToolResult.error(f"cannot edit {raw!r}: it {what}; use write to create a file")
        data = path.read_bytes()
        if _is_binary(data[:BINARY_SNIFF_BYTES]):
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
        _write_bytes(path, updated.encode("utf-8"))
        replaced = count if replace_all else 1
        noun = "occurrence" if replaced == 1 else "occurrences"
        snippet = _snippet(updated, first_line, new.count("\n") + 1)
        return ToolResult.text(
            f"replaced {replaced} {noun} in {_shown(path, ctx)}; around line {first_line} now:\n"
            + snippet
        )

    return await _in_thread(work)


# --------------------------------------------------------------------------------------
# list
# --------------------------------------------------------------------------------------

LIST_SPEC = ToolSpec(
    name="list",
    title="List a directory",
    description=(
        "List the entries of a directory: directories end in `/`, symlinks show their "
        "target, files show their size in bytes. Hidden entries (starting with `.`) are "
        f"left out unless `include_hidden` is true. At most {MAX_LISTED} entries."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "Directory to list (default: the workspace).",
            },
            "include_hidden": {
                "type": "boolean",
                "description": "Also list entries whose name starts with `.` (default false).",
            },
        },
        "additionalProperties": False,
    },
    annotations={"title": "List a directory", "readOnlyHint": True, "openWorldHint": False},
)


async def list_directory(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    raw = path_argument(args, default=".")
    hidden = _bool_arg(args, "include_hidden", False)
    path = resolve(raw, ctx)

    def work() -> ToolResult:
        if not path.exists():
            return ToolResult.error(f"no such directory: {raw!r} (resolved to {path})")
        if not path.is_dir():
            return ToolResult.error(f"{raw!r} is a file, not a directory; use read to see it")
        with os.scandir(path) as it:
            entries = sorted(
                (e for e in it if hidden or not e.name.startswith(".")), key=lambda e: e.name
            )
        lines = []
        for entry in entries[:MAX_LISTED]:
            try:
                if entry.is_symlink():
                    lines.append(f"{entry.name} -> {os.readlink(entry.path)}")
                elif entry.is_dir():
                    lines.append(f"{entry.name}/")
                else:
                    lines.append(f"{entry.name}  ({entry.stat().st_size} bytes)")
            except OSError:
                lines.append(f"{entry.name}  (unreadable)")
        header = f"{_shown(path, ctx)}: {len(entries)} entries"
        if len(entries) > MAX_LISTED:
            lines.append(f"[{len(entries) - MAX_LISTED} more entries not shown; use glob]")
        if not entries:
            return ToolResult.text(header + " (empty)")
        return ToolResult.text(header + "\n" + "\n".join(lines))

    return await _in_thread(work)


# --------------------------------------------------------------------------------------
# glob
# --------------------------------------------------------------------------------------

GLOB_SPEC = ToolSpec(
    name="glob",
    title="Find files by pattern",
    description=(
        "Find files and directories matching a glob pattern under `path` (default: the "
        "workspace), e.g. `**/*.py` or `src/*.json`; `**` matches any number of directories. "
        f"Returns paths relative to `path`, sorted, at most {MAX_LISTED}."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "description": "Glob pattern relative to `path`, e.g. `**/*.md`.",
            },
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "Directory to search from (default: the workspace).",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    annotations={"title": "Find files by pattern", "readOnlyHint": True, "openWorldHint": False},
)


async def glob(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    pattern = _str_arg(args, "pattern")
    if pattern.startswith("/") or os.path.isabs(pattern):
        raise ToolArgumentsInvalid(
            "arguments.pattern: must be relative; put the directory in arguments.path "
            "and the pattern (e.g. '**/*.py') in arguments.pattern"
        )
    raw = path_argument(args, default=".")
    root = resolve(raw, ctx)
    deadline = _deadline(ctx)

    def work() -> ToolResult:
        if not root.is_dir():
            return ToolResult.error(f"no such directory: {raw!r} (resolved to {root})")
        found: list[str] = []
        stopped = ""
        try:
            for match in root.glob(pattern):
                if time.monotonic() > deadline:
                    stopped = "the search ran out of time"
                    break
                rel = match.relative_to(root).as_posix()
                if any(part in SKIPPED_DIRS for part in match.relative_to(root).parts):
                    continue
                found.append(rel + ("/" if match.is_dir() else ""))
                if len(found) > MAX_LISTED:
                    stopped = f"more than {MAX_LISTED} matches"
                    break
        except ValueError as exc:
            raise ToolArgumentsInvalid(f"arguments.pattern: {exc}") from None
        found.sort()
        if not found:
            return ToolResult.text(f"no matches for {pattern!r} under {_shown(root, ctx)}")
        lines = found[:MAX_LISTED]
        if stopped:
            lines.append(f"[stopped: {stopped}; narrow the pattern]")
        return ToolResult.text("\n".join(lines))

    return await _in_thread(work)


# --------------------------------------------------------------------------------------
# grep
# --------------------------------------------------------------------------------------

GREP_SPEC = ToolSpec(
    name="grep",
    title="Search file contents",
    description=(
        "Search files for lines matching a regular expression (Python `re` syntax) under "
        "`path` (a directory or one file; default: the workspace). `glob` limits which files "
        "are searched (e.g. `*.py` or `src/**/*.ts`). Returns `path:line: text` for each "
        "match. Binary files, files over 10 MB and VCS directories are skipped."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "description": "Regular expression to search for.",
            },
            "path": {
                "type": "string",
                "minLength": 1,
                "description": "Directory or file to search (default: the workspace).",
            },
            "glob": {
                "type": "string",
                "minLength": 1,
                "description": "Only search files whose name or relative path matches this glob.",
            },
            "case_insensitive": {
                "type": "boolean",
                "description": "Ignore case (default false).",
            },
            "max_matches": {
                "type": "integer",
                "minimum": 1,
                "maximum": 5000,
                "description": "Stop after this many matching lines (default 200).",
            },
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
    annotations={"title": "Search file contents", "readOnlyHint": True, "openWorldHint": False},
)


def _walk_files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in sorted(filenames):
            yield Path(dirpath) / name


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


def _glob_filter(pattern: str | None, base: Path) -> Callable[[Path], bool]:
    if pattern is None:
        return lambda _path: True
    regex = glob_to_regex(pattern)
    # A pattern without a slash matches the file name at any depth, as in ripgrep.
    by_name = "/" not in pattern

    def accept(path: Path) -> bool:
        if by_name:
            return regex.match(path.name) is not None
        try:
            rel = path.relative_to(base).as_posix()
        except ValueError:
            rel = path.name
        return regex.match(rel) is not None

    return accept


async def grep(call: ToolCall, ctx: ToolContext) -> ToolResult:
    args = call.arguments
    pattern = _str_arg(args, "pattern")
    flags = re.IGNORECASE if _bool_arg(args, "case_insensitive", False) else 0
    try:
        regex = re.compile(pattern, flags)
    except re.error as exc:
        raise ToolArgumentsInvalid(
            f"arguments.pattern: invalid regular expression ({exc}); escape special "
            "characters such as ( [ . * with a backslash, or fix the syntax"
        ) from None
    file_glob = args.get("glob")
    if file_glob is not None and (not isinstance(file_glob, str) or not file_glob):
        raise ToolArgumentsInvalid(
            f"arguments.glob: expected a glob string like '*.py', got {file_glob!r}"
        )
    max_matches = _int_arg(args, "max_matches", 200, minimum=1, maximum=5000)
    raw = path_argument(args, default=".")
    root = resolve(raw, ctx)
    deadline = _deadline(ctx)
    budget = ctx.max_output_chars

    def work() -> ToolResult:
        if not root.exists():
            return ToolResult.error(f"no such file or directory: {raw!r} (resolved to {root})")
        base = root if root.is_dir() else root.parent
        accept = _glob_filter(file_glob, base)
        out: list[str] = []
        used = files_matched = files_searched = 0
        stopped = ""
        for path in _walk_files(root):
            if time.monotonic() > deadline:
                stopped = "the search ran out of time; narrow path or glob"
                break
            if not accept(path):
                continue
            try:
                if path.is_symlink() or path.stat().st_size > MAX_GREP_FILE_BYTES:
                    continue
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if _is_binary(data[:BINARY_SNIFF_BYTES]):
                continue
            files_searched += 1
            text = data.decode("utf-8", errors="replace")
            hit = False
            for number, line in enumerate(text.splitlines(), start=1):
                if not regex.search(line):
                    continue
                hit = True
                shown = (
                    line if len(line) <= MAX_GREP_LINE_CHARS else line[:MAX_GREP_LINE_CHARS] + " …"
                )
                entry = f"{path.relative_to(base).as_posix()}:{number}: {shown}"
                out.append(entry)
                used += len(entry) + 1
                if len(out) >= max_matches:
                    stopped = f"reached max_matches={max_matches}"
                    break
                if used >= budget:
                    stopped = "output limit reached; narrow the pattern, path or glob"
                    break
            files_matched += hit
            if stopped:
                break
        if not out:
            return ToolResult.text(
                f"no matches for {pattern!r} in {files_searched} files under {_shown(root, ctx)}"
                + (f" ({stopped})" if stopped else "")
            )
        summary = f"[{len(out)} matches in {files_matched} files"
        summary += f"; stopped: {stopped}]" if stopped else "]"
        return ToolResult.text("\n".join(out) + "\n" + summary)

    return await _in_thread(work)


def fs_tools() -> list[Tool]:
    """The file tool descriptors."""
    return [
        Tool(READ_SPEC, read),
        Tool(WRITE_SPEC, write),
        Tool(EDIT_SPEC, edit),
        Tool(LIST_SPEC, list_directory),
        Tool(GLOB_SPEC, glob),
        Tool(GREP_SPEC, grep),
    ]
