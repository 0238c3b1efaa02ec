"""What an agent hands over beside its answer: artifacts of text, JSON data or files.

An agent adds outputs during a run with the ``artifact`` tool (or any tool, through
``ToolContext.outputs``); ``AgentReply.outputs`` carries them to the surface that asked: A2A
task artifacts, MCP content blocks plus ``structuredContent.artifacts``, HTTP API JSON.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import attrs

from ._errors import ToolArgumentsInvalid
from ._trace import new_call_id

# A file travels base64-encoded (4/3 of its size) once in one protocol message (MCP stdio's
# limit: 10 MiB): 6 MiB of outputs are 8 MiB on the wire, with room for the answer.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_RUN_BYTES = 6 * 1024 * 1024
MAX_RUN_PARTS = 64
ARTIFACT_URI = "roost://artifacts/"


def _base64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


@attrs.frozen
class OutputPart:
    """One piece of an output: exactly one of ``text``, ``data`` (any JSON value, flagged by
    ``has_data``), ``raw`` (file bytes) or ``url`` (a file by reference)."""

    text: str | None = None
    data: Any = None
    has_data: bool = False
    raw: bytes | None = None
    url: str | None = None
    media_type: str | None = None
    filename: str | None = None

    @property
    def size(self) -> int:
        """Roughly what the part weighs on the wire (bytes)."""
        if self.raw is not None:
            return len(self.raw)
        if self.text is not None:
            return len(self.text.encode("utf-8", "surrogatepass"))
        if self.has_data:
            return len(json.dumps(self.data, ensure_ascii=False, default=repr))
        return len(self.url or "")

    def to_json(self) -> dict[str, Any]:
        """JSON in the A2A 1.0 ``Part`` shape (``text`` | ``data`` | ``raw`` (base64) | ``url``)."""
        if self.text is not None:
            out: dict[str, Any] = {"text": self.text}
        elif self.has_data:
            out = {"data": self.data}
        elif self.raw is not None:
            out = {"raw": _base64(self.raw)}
        else:
            out = {"url": self.url}
        if self.filename is not None:
            out["filename"] = self.filename
        if self.media_type is not None:
            out["mediaType"] = self.media_type
        return out

    def to_mcp(self, output: Output) -> dict[str, Any]:
        """The MCP content block: text, image/audio, an embedded resource or a resource link."""
        if self.text is not None:
            return {"type": "text", "text": self.text}
        if self.has_data:
            return {"type": "text", "text": json.dumps(self.data, ensure_ascii=False)}
        media = self.media_type or "application/octet-stream"
        if self.raw is not None:
            encoded = _base64(self.raw)
            if media.startswith(("image/", "audio/")):
                return {"type": media.split("/", 1)[0], "data": encoded, "mimeType": media}
            return {
                "type": "resource",
                "resource": {"uri": output.part_uri(self), "mimeType": media, "blob": encoded},
            }
        link: dict[str, Any] = {
            "type": "resource_link",
            "uri": self.url,
            "name": self.filename or output.name,
        }
        if self.media_type is not None:
            link["mimeType"] = self.media_type
        return link


@attrs.frozen
class Output:
    """One artifact: a name and its parts, in the order they were added."""

    name: str
    parts: tuple[OutputPart, ...]
    description: str | None = None
    id: str = attrs.field(factory=new_call_id)

    @property
    def uri(self) -> str:
        """``roost://artifacts/<id>``: what an MCP client reads with ``resources/read``."""
        return ARTIFACT_URI + self.id

    def part_uri(self, part: OutputPart) -> str:
        """The URI of one file part: ``roost://artifacts/<id>/<file name>``."""
        return f"{self.uri}/{quote(part.filename or self.name, safe='')}"

    @staticmethod
    def id_in_uri(uri: str) -> str | None:
        """The artifact id an artifact URI (``uri`` or ``part_uri``) names, else None."""
        if not uri.startswith(ARTIFACT_URI):
            return None
        ident = uri[len(ARTIFACT_URI) :].split("/", 1)[0]
        return ident or None

    def resource_contents(self, uri: str) -> list[dict[str, Any]]:
        """``resources/read`` contents: all parts for ``uri``, one for its ``part_uri``, else []."""
        whole = uri == self.uri
        out = []
        for part in self.parts:
            part_uri = self.part_uri(part)
            if not whole and uri != part_uri:
                continue
            if part.raw is not None:
                media = part.media_type or "application/octet-stream"
                out.append({"uri": part_uri, "mimeType": media, "blob": _base64(part.raw)})
                continue
            if part.text is not None:
                media, text = part.media_type or "text/plain", part.text
            elif part.has_data:
                media, text = "application/json", json.dumps(part.data, ensure_ascii=False)
            else:
                media, text = "text/uri-list", part.url or ""
            out.append({"uri": self.uri, "mimeType": media, "text": text})
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"artifactId": self.id, "name": self.name}
        if self.description is not None:
            out["description"] = self.description
        out["parts"] = [p.to_json() for p in self.parts]
        return out

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)


class Outputs:
    """The outputs of one agent run. Adding a part to a name already used extends that
    artifact. Bounded: at most ``MAX_RUN_PARTS`` parts and ``MAX_RUN_BYTES`` per run."""

    def __init__(self) -> None:
        self._by_name: dict[str, Output] = {}
        self._parts = 0
        self._bytes = 0

    def add(self, name: str, part: OutputPart, *, description: str | None = None) -> Output:
        """Add ``part`` to the artifact ``name``; raises ToolArgumentsInvalid past the bounds."""
        size = part.size  # a data part's size is its JSON: measure it once
        old = self._by_name.get(name)  # first: a name it cannot take costs no room
        self._reserve(1, size)
        if old is None:
            new = Output(name, (part,), description)
        else:
            new = attrs.evolve(
                old, parts=old.parts + (part,), description=description or old.description
            )
        self._by_name[name] = new
        return new

    def adopt(self, output: Output) -> None:
        """Take over ``output`` (from an agent this run asked) as it is, id too (a link to it
        still names it): all of it, or past the bounds none (ToolArgumentsInvalid)."""
        if any(o.id == output.id for o in self._by_name.values()):
            return
        # Kept apart from an artifact of this run with the same name (they are two).
        key = output.name if output.name not in self._by_name else f"{output.name}\0{output.id}"
        self._reserve(len(output.parts), output.size)
        self._by_name[key] = output

    def _reserve(self, parts: int, size: int) -> None:
        if self._parts + parts > MAX_RUN_PARTS:
            raise ToolArgumentsInvalid(
                f"this run already handed over {self._parts} of the {MAX_RUN_PARTS} artifact "
                "parts one answer may carry; put more into one file or one data part"
            )
        if self._bytes + size > MAX_RUN_BYTES:
            raise ToolArgumentsInvalid(
                "the artifacts of one answer may weigh at most "
                f"{MAX_RUN_BYTES // (1024 * 1024)} MiB; this ({size} bytes) does not fit "
                f"(already {self._bytes} bytes): hand over a URL instead"
            )
        self._parts += parts
        self._bytes += size

    def snapshot(self) -> tuple[Output, ...]:
        return tuple(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)


def outputs_to_json(outputs: tuple[Output, ...]) -> list[dict[str, Any]]:
    return [o.to_json() for o in outputs]


def outputs_to_mcp(
    outputs: tuple[Output, ...], first_index: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The content blocks of ``outputs`` (at ``first_index`` on in the result's ``content``)
    and their ``structuredContent.artifacts``, a file's bytes as ``{"content": <index>}``."""
    blocks: list[dict[str, Any]] = []
    artifacts = []
    for output in outputs:
        artifact = output.to_json()
        for shape, part in zip(artifact["parts"], output.parts, strict=True):
            if part.raw is not None:
                del shape["raw"]
                shape.update(content=first_index + len(blocks), size=len(part.raw))
            blocks.append(part.to_mcp(output))
        artifacts.append(artifact)
    return blocks, artifacts


def output_from_json(value: Any, content: Any = ()) -> Output | None:
    """An ``Output`` back from ``Output.to_json`` or a ``structuredContent.artifacts`` entry
    (file parts referring to blocks of ``content``); None if ``value`` is not one."""
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("name"), str)
        or not isinstance(value.get("parts"), list)
    ):
        return None
    parts = []
    for raw in value["parts"]:
        if not isinstance(raw, dict):
            return None
        meta = {"filename": raw.get("filename"), "media_type": raw.get("mediaType")}
        if not all(v is None or isinstance(v, str) for v in meta.values()):
            return None
        if isinstance(raw.get("text"), str):
            parts.append(OutputPart(text=raw["text"], **meta))
        elif "data" in raw:
            parts.append(OutputPart(data=raw["data"], has_data=True, **meta))
        elif isinstance(raw.get("url"), str):
            parts.append(OutputPart(url=raw["url"], **meta))
        elif isinstance(raw.get("raw"), str) or isinstance(raw.get("content"), int):
            encoded = raw["raw"] if "raw" in raw else _block_bytes(content, raw["content"])
            if not isinstance(encoded, str):
                return None
            try:
                parts.append(OutputPart(raw=base64.b64decode(encoded, validate=True), **meta))
            except ValueError:
                return None
        else:
            return None
    description = value.get("description")
    ident = value.get("artifactId")
    return Output(
        value["name"],
        tuple(parts),
        description if isinstance(description, str) else None,
        ident if isinstance(ident, str) and ident else new_call_id(),
    )


def _block_bytes(content: Any, index: int) -> str | None:
    """The base64 bytes of the MCP content block ``content[index]`` (image, audio, resource)."""
    if not isinstance(content, (list, tuple)) or not 0 <= index < len(content):
        return None
    block = content[index]
    if not isinstance(block, dict):
        return None
    if block.get("type") in ("image", "audio"):
        return block.get("data")
    resource = block.get("resource") if block.get("type") == "resource" else None
    return resource.get("blob") if isinstance(resource, dict) else None
