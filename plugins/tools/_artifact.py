"""The ``artifact`` tool: an agent hands over text, JSON data or a file beside its answer.

Each call adds one part to the artifact ``name``. The run's reply carries them: an A2A task gets
them as artifacts, an MCP caller as content blocks and ``structuredContent.artifacts``. Files come
from the agent's workspace only (what the agent made, not whatever the process can read): the path
is walked without following symbolic links, and a file with other hard links is refused.
"""

from __future__ import annotations

import errno
import mimetypes
import os
import re
import stat
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from roost.kernel import (
    MAX_FILE_BYTES,
    OutputPart,
    Tool,
    ToolArgumentsInvalid,
    ToolCall,
    ToolContext,
    ToolResult,
)

from ._beneath import READ_FLAGS, open_under
from ._sandbox import agent_thread, text_arg, tool_spec, workspace_of

_MEDIA_TYPE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
)
_KINDS = ("text", "data", "path", "url")
MAX_NAME_CHARS = 200
MAX_URL_CHARS = 8192

ARTIFACT_SPEC = tool_spec(
    name="artifact",
    title="Hand over an artifact",
    description=(
        "Hand over an output beside your answer: exactly one of `text`, `data` (any JSON "
        "value), `path` (a file in your workspace, at most 4 MiB) or `url` (a file by "
        "reference), under an artifact `name`. Calling again with the same name adds "
        "another part to that artifact. A2A callers receive artifacts as task artifacts, "
        "MCP callers as content."
    ),
    properties={
        "name": text_arg("The artifact's name, e.g. report.pdf or summary"),
        "description": text_arg("What the artifact is (optional)"),
        "text": text_arg("Text content"),
        "data": {"description": "Structured content: any JSON value"},
        "path": text_arg("A file in your workspace to hand over"),
        "url": text_arg("An http(s) URL of a file"),
        "media_type": text_arg("e.g. application/pdf; guessed from the file name if left out"),
        "filename": text_arg("The file's name for the receiver (default: the path's name)"),
    },
    required=["name"],
    readOnlyHint=True,
)


def _optional_str(arguments: Any, key: str, *, limit: int = MAX_NAME_CHARS) -> str | None:
    value = arguments.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise ToolArgumentsInvalid(
            f"arguments.{key}: expected a non-empty string of at most "
            f"{limit} characters, got {value!r:.80}"
        )
    return value


def _media_type(arguments: Any, filename: str | None) -> str | None:
    if (media := _optional_str(arguments, "media_type")) is not None:
        if not _MEDIA_TYPE.match(media):
            raise ToolArgumentsInvalid(
                f"arguments.media_type: {media!r} is not a media type; "
                "write it like text/csv or image/png"
            )
        return media.lower()
    return mimetypes.guess_type(filename, strict=False)[0] if filename else None


def _outside(raw: str, root: Path) -> ToolArgumentsInvalid:
    return ToolArgumentsInvalid(
        f"arguments.path: {raw!r} is outside your workspace ({root}); an artifact file must be one "
        "you wrote there (use the write tool, or hand over a url)"
    )


def _open_in_workspace(raw: str, root: Path) -> int:
    """Open ``raw`` beneath the workspace without following any symlink, so nothing swapped in
    meanwhile can lead outside it; non-blocking, so a FIFO never waits."""
    if "\0" in raw:
        raise ToolArgumentsInvalid("arguments.path: contains a NUL character; give a file path")
    path = Path(os.path.normpath(raw))
    if path.is_absolute():
        if not path.is_relative_to(root):
            raise _outside(raw, root)
        path = path.relative_to(root)
    parts = path.parts
    if not parts or parts == (".",):
        raise ToolArgumentsInvalid(f"arguments.path: {raw!r} is a directory; name one file")
    if parts[0] == "..":
        raise _outside(raw, root)
    return open_under(str(root), "/".join(parts), READ_FLAGS)


def _read_workspace_file(raw: str, ctx: ToolContext) -> tuple[bytes, str]:
    """The bytes of ``raw`` (inside the workspace) and its name; raises clear errors."""
    root = workspace_of(ctx)
    try:
        fd = _open_in_workspace(raw, root)
    except FileNotFoundError:
        raise ToolArgumentsInvalid(
            f"arguments.path: no such file in your workspace: {raw!r}"
        ) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ToolArgumentsInvalid(
                f"arguments.path: {raw!r} passes through a symbolic link or a non-directory; "
                "hand over a file you wrote in your workspace, by its own path"
            ) from None
        raise ToolArgumentsInvalid(
            f"arguments.path: cannot open {raw!r}: {exc.strerror or exc}"
        ) from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise ToolArgumentsInvalid(f"arguments.path: {raw!r} is a directory; name one file")
        if not stat.S_ISREG(info.st_mode):
            raise ToolArgumentsInvalid(f"arguments.path: {raw!r} is not a regular file")
        if info.st_nlink > 1:
            raise ToolArgumentsInvalid(
                f"arguments.path: {raw!r} has other hard links, so it may be a file "
                "from outside your workspace; hand over a copy"
            )
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ToolArgumentsInvalid(
            f"arguments.path: {raw!r} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB; "
            "hand over a url to it instead, or a smaller file"
        )
    return data, Path(raw).name


async def artifact(call: ToolCall, ctx: ToolContext) -> ToolResult:
    arguments = call.arguments
    if ctx.outputs is None:
        return ToolResult.error(
            "artifact: only an agent's run can hand over artifacts (this call is not part of one)"
        )
    name = _optional_str(arguments, "name")
    if name is None:
        raise ToolArgumentsInvalid("arguments.name: required; name the artifact, e.g. report.pdf")
    description = _optional_str(arguments, "description", limit=8192)
    given = [k for k in _KINDS if arguments.get(k) is not None]
    if len(given) != 1:
        what = f"got {', '.join(given)}" if given else "got none"
        raise ToolArgumentsInvalid(
            f"arguments: give exactly one of text, data, path or url ({what})"
        )
    kind = given[0]
    filename = _optional_str(arguments, "filename")
    if kind == "text":
        text = arguments["text"]
        if not isinstance(text, str):
            raise ToolArgumentsInvalid(
                f"arguments.text: expected a string, got {type(text).__name__}"
            )
        part = OutputPart(text=text, media_type=_media_type(arguments, None), filename=filename)
    elif kind == "data":
        part = OutputPart(
            data=arguments["data"],
            has_data=True,
            media_type=_media_type(arguments, None),
            filename=filename,
        )
    elif kind == "path":
        raw_path = arguments["path"]
        if not isinstance(raw_path, str) or not raw_path.strip():
            raise ToolArgumentsInvalid(
                f"arguments.path: expected a file path in your workspace, got {raw_path!r:.80}"
            )
        data, shown = await agent_thread(ctx, lambda: _read_workspace_file(raw_path, ctx))
        filename = filename or shown
        part = OutputPart(
            raw=data,
            media_type=_media_type(arguments, filename) or "application/octet-stream",
            filename=filename,
        )
    else:
        url = _optional_str(arguments, "url", limit=MAX_URL_CHARS)
        assert url is not None
        split = urlsplit(url)
        if split.scheme not in ("http", "https") or not split.netloc:
            raise ToolArgumentsInvalid(f"arguments.url: expected an http(s) URL, got {url!r:.80}")
        filename = filename or (split.path.rsplit("/", 1)[-1] or None)
        part = OutputPart(url=url, media_type=_media_type(arguments, filename), filename=filename)
    output = ctx.outputs.add(name, part, description=description)
    what = {
        "text": "text",
        "data": "data",
        "path": f"file {filename} ({len(part.raw or b'')} bytes)",
        "url": f"link {part.url}",
    }[kind]
    return ToolResult.text(f"artifact {output.name!r}: added {what} (part {len(output.parts)})")


def artifact_tool() -> Tool:
    return Tool(ARTIFACT_SPEC, artifact)
