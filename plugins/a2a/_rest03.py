"""The 0.3 HTTP+JSON binding (the ``/v1/...`` paths): its shapes, sans I/O.

A2A 0.3's REST binding speaks the proto JSON of the 0.3 ``a2a.proto``, which differs from
1.0 in a few places: a message carries its parts in ``content`` (not ``parts``); a file
part is ``{"file": {"fileWithBytes" | "fileWithUri", "mimeType", "name"}}`` and a data
part ``{"data": {"data": {...}}}``; the cancelled state is spelled
``TASK_STATE_CANCELLED``; a status update says whether it is ``final``. Everything else
(``{"task": ...}`` replies, ``statusUpdate`` / ``artifactUpdate`` stream events, the
``TASK_STATE_*`` and ``ROLE_*`` enums) is as in 1.0.

So the server works in 1.0 JSON and these functions translate at the edge: requests in
(``send_body_in``) before the 1.0 parser sees them, results and events out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import _models as m

CANCELLED_03 = "TASK_STATE_CANCELLED"
_FINAL_STATES = frozenset(
    {m.COMPLETED, m.CANCELED, m.FAILED, m.REJECTED, *m.INTERRUPTED_STATES}
)


# ---- requests: 0.3 → 1.0 JSON -------------------------------------------------------------


def _part_in(part: Any) -> Any:
    if not isinstance(part, Mapping):
        return part  # the 1.0 parser names the field and the problem
    out = {k: v for k, v in part.items() if k not in ("file", "data")}
    file = part.get("file")
    if isinstance(file, Mapping) and ("fileWithBytes" in file or "fileWithUri" in file):
        if "fileWithBytes" in file:
            out["raw"] = file["fileWithBytes"]
        else:
            out["url"] = file["fileWithUri"]
        if file.get("mimeType") is not None:
            out["mediaType"] = file["mimeType"]
        if file.get("name") is not None:
            out["filename"] = file["name"]
        return out
    data = part.get("data")
    if isinstance(data, Mapping) and set(data) == {"data"}:
        out["data"] = data["data"]
        return out
    return part


def message_in(message: Any) -> Any:
    """A 0.3 proto-JSON message as 1.0 JSON (``content`` → ``parts``, part shapes)."""
    if not isinstance(message, Mapping) or "content" not in message or "parts" in message:
        return message
    out = {k: v for k, v in message.items() if k != "content"}
    content = message["content"]
    out["parts"] = [_part_in(p) for p in content] if isinstance(content, list) else content
    return out


def send_body_in(body: Mapping[str, Any]) -> dict[str, Any]:
    """A 0.3 ``message:send`` / ``message:stream`` body as the 1.0 body."""
    out = dict(body)
    if "message" in out:
        out["message"] = message_in(out["message"])
    config = out.get("configuration")
    if isinstance(config, Mapping) and "pushNotification" in config and "pushNotificationConfig" not in config:
        config = dict(config)
        config["pushNotificationConfig"] = config.pop("pushNotification")
        out["configuration"] = config
    return out


# ---- results and events: 1.0 → 0.3 JSON --------------------------------------------------


def _part_out(part: Mapping[str, Any]) -> dict[str, Any]:
    if "raw" in part or "url" in part:
        file: dict[str, Any] = {"fileWithBytes": part["raw"]} if "raw" in part else {"fileWithUri": part["url"]}
        if "mediaType" in part:
            file["mimeType"] = part["mediaType"]
        if "filename" in part:
            file["name"] = part["filename"]
        out: dict[str, Any] = {"file": file}
    elif "data" in part:
        out = {"data": {"data": part["data"]}}
    else:
        out = {"text": part.get("text", "")}
    if "metadata" in part:
        out["metadata"] = part["metadata"]
    return out


def message_out(message: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in message.items() if k != "parts"}
    out["content"] = [_part_out(p) for p in message.get("parts", ())]
    return out


def _status_out(status: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(status)
    if out.get("state") == m.CANCELED:
        out["state"] = CANCELLED_03
    if isinstance(out.get("message"), Mapping):
        out["message"] = message_out(out["message"])
    return out


def _artifact_out(artifact: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(artifact)
    out["parts"] = [_part_out(p) for p in artifact.get("parts", ())]
    return out


def task_out(task: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 task as 0.3 proto JSON."""
    out = dict(task)
    if isinstance(out.get("status"), Mapping):
        out["status"] = _status_out(out["status"])
    if "history" in out:
        out["history"] = [message_out(x) for x in out["history"]]
    if "artifacts" in out:
        out["artifacts"] = [_artifact_out(a) for a in out["artifacts"]]
    return out


def event_out(event: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 stream event (``{"task"|"message"|"statusUpdate"|"artifactUpdate": ...}``,
    also a SendMessage result) as its 0.3 counterpart."""
    if "task" in event:
        return {"task": task_out(event["task"])}
    if "message" in event:
        return {"message": message_out(event["message"])}
    if "statusUpdate" in event:
        update = dict(event["statusUpdate"])
        state = update.get("status", {}).get("state")
        update["status"] = _status_out(update.get("status", {}))
        update["final"] = state in _FINAL_STATES
        return {"statusUpdate": update}
    if "artifactUpdate" in event:
        update = dict(event["artifactUpdate"])
        update["artifact"] = _artifact_out(update["artifact"])
        return {"artifactUpdate": update}
    return dict(event)


def result_out(op: str, result: Any) -> Any:
    """The result of operation ``op`` (rendered in 1.0) as the 0.3 binding answers it."""
    if op == "send":
        return event_out(result)
    if op in ("get", "cancel"):
        return task_out(result)
    if op == "list" and isinstance(result, Mapping):
        return {**result, "tasks": [task_out(t) for t in result.get("tasks", ())]}
    return result
