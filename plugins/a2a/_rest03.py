"""The 0.3 HTTP+JSON binding (the ``/v1/...`` paths): its shapes, sans I/O.

It speaks the 0.3 proto's JSON, unlike 1.0 in a few places: a message's parts are its
``content``; file parts are ``{"file": {"fileWithBytes" | "fileWithUri", "mimeType",
"name"}}``, data parts ``{"data": {"data": {...}}}``; ``TASK_STATE_CANCELLED``; status
updates say ``final``; a push config is the resource ``{"name":
"tasks/{id}/pushNotificationConfigs/{cid}", "pushNotificationConfig": {...}}``.

Requests become 1.0 JSON here; results and events are written by the models (dialect
``m.REST03``), the card by ``card_out``. A field may come by its JSON or its proto name
(``request``, ``message_id``: what the a2a-sdk's 0.3 REST client sends); errors name it
as the client wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import _models as m
from . import _protocol as p

# ---- requests: 0.3 → 1.0 JSON -------------------------------------------------------------
# Each function notes in ``names`` under which name the client wrote each field the 1.0
# parser reads (1.0 path → the client's path), so that errors name it that way.

_MESSAGE_FIELDS = (("messageId", "message_id"), ("contextId", "context_id"), ("taskId", "task_id"))
_CONFIG_FIELDS = (
    ("acceptedOutputModes", "accepted_output_modes"),
    ("historyLength", "history_length"),
)
_FILE_FIELDS = (  # 0.3 FilePart: JSON name, proto name, the 1.0 part field
    ("fileWithBytes", "file_with_bytes", "raw"),
    ("fileWithUri", "file_with_uri", "url"),
    ("mimeType", "mime_type", "mediaType"),
    ("name", "name", "filename"),
)


def _key(obj: Mapping[str, Any], camel: str, snake: str, path: str) -> str | None:
    """The key under which ``obj`` holds a proto field: its JSON name ``camel`` or its
    proto name ``snake``; None if neither. Both at once is refused (as protobuf does)."""
    if camel in obj and snake != camel and snake in obj:
        field = f"{path}.{snake}" if path else snake
        raise m.invalid(
            field, f"is the proto name of {camel!r}, which is given too; send one of them"
        )
    return camel if camel in obj else snake if snake in obj else None


def _part_in(part: Any, path: str, names: dict[str, str], ten: str) -> Any:
    """A 0.3 part (``path`` as the client wrote it, ``ten`` its 1.0 path) as a 1.0 part."""
    names[ten] = path
    if not isinstance(part, Mapping) or "kind" in part or "raw" in part or "url" in part:
        return part  # not the 0.3 proto shape: the 1.0 parser reads it, naming any problem
    present = [k for k in ("text", "file", "data") if part.get(k) is not None]
    if len(present) != 1:
        got = f"; got {', '.join(present)}" if present else ""
        raise m.invalid(
            path,
            f'a part holds exactly one of text, file or data{got}: {{"text": "..."}}, '
            '{"file": {"fileWithBytes": "<base64>" | "fileWithUri": "https://...", '
            '"mimeType": ...}} or {"data": {"data": {...}}}',
        )
    out = {k: v for k, v in part.items() if k not in ("file", "data")}
    file = part.get("file")
    if isinstance(file, Mapping) and "bytes" not in file and "uri" not in file:
        where = f"{path}.file"
        for camel, snake, field in _FILE_FIELDS:
            key = _key(file, camel, snake, where)
            if key is not None and file[key] is not None:
                out[field] = file[key]
                names[f"{ten}.{field}"] = f"{where}.{key}"
        if "raw" in out and "url" in out:
            raise m.invalid(
                where, "has both fileWithBytes and fileWithUri; a file part carries one of them"
            )
        if "raw" not in out and "url" not in out:
            raise m.invalid(
                where,
                "needs fileWithBytes (the content, base64) or fileWithUri (a URL to it); "
                "proto names file_with_bytes, file_with_uri",
            )
        return out
    data = part.get("data")
    if isinstance(data, Mapping) and set(data) == {"data"}:
        out["data"] = data["data"]
        names[f"{ten}.data"] = f"{path}.data.data"
        return out
    return part


def message_in(message: Any, path: str = "message", names: dict[str, str] | None = None) -> Any:
    """A 0.3 proto-JSON message (written at ``path``) as 1.0 JSON: proto names → JSON names,
    ``content`` → ``parts``, the 0.3 part shapes. A 1.0 message (``parts``) passes unchanged."""
    names = {} if names is None else names
    names["message"] = path
    if not isinstance(message, Mapping) or "parts" in message:
        return message
    out = dict(message)
    for camel, snake in _MESSAGE_FIELDS:
        key = _key(message, camel, snake, path)
        if key is not None:
            out[camel] = out.pop(key)
        # a missing field is named in the client's spelling: proto names if it wrote `request`
        names[f"message.{camel}"] = f"{path}.{key or (snake if path == 'request' else camel)}"
    names["message.parts"] = f"{path}.content"
    if "content" in out:
        content = out.pop("content")
        if isinstance(content, list):
            content = [
                _part_in(p, f"{path}.content[{i}]", names, f"message.parts[{i}]")
                for i, p in enumerate(content)
            ]
        out["parts"] = content
    return out


def send_body_in(body: Mapping[str, Any], names: dict[str, str] | None = None) -> dict[str, Any]:
    """A 0.3 ``SendMessageRequest`` (the message as ``message`` or ``request``) as 1.0."""
    names = {} if names is None else names
    out = dict(body)
    key = _key(body, "message", "request", "")
    if key is None or not isinstance(body[key], Mapping):
        raise m.invalid(
            key or "message",
            ("must be an object" if key else "is required") + ": the message to send, as "
            '{"messageId": "...", "role": "ROLE_USER", "content": [{"text": "..."}]}',
        )
    out["message"] = message_in(out.pop(key), key, names)
    config = body.get("configuration")
    if isinstance(config, Mapping):
        config = dict(config)
        for camel, snake in _CONFIG_FIELDS:
            key = _key(config, camel, snake, "configuration")
            if key is not None:
                config[camel] = config.pop(key)
                names[f"configuration.{camel}"] = f"configuration.{key}"
        key = _key(config, "pushNotification", "push_notification", "configuration")
        if (
            key is not None
            and "pushNotificationConfig" not in config
            and "taskPushNotificationConfig" not in config
        ):
            config["pushNotificationConfig"] = config.pop(key)
            names["configuration.taskPushNotificationConfig"] = f"configuration.{key}"
        elif "pushNotificationConfig" in config and "taskPushNotificationConfig" not in config:
            names["configuration.taskPushNotificationConfig"] = (
                "configuration.pushNotificationConfig"
            )
        out["configuration"] = config
    return out


def _as_written(field: str, names: Mapping[str, str]) -> str:
    """``field`` (a 1.0 path) as the client wrote it: its longest renamed prefix replaced."""
    best = max(
        (ten for ten in names if field == ten or field.startswith((f"{ten}.", f"{ten}["))),
        key=len,
        default=None,
    )
    return field if best is None else names[best] + field[len(best) :]


def parse_send(op: str, body: Mapping[str, Any]) -> Any:
    """The typed parameters of a 0.3 ``message:send`` / ``message:stream`` body, read by
    the 1.0 parser; errors name each field as the client wrote it
    (``request.content[0].file.file_with_bytes``, not ``message.parts[0].raw``)."""
    names: dict[str, str] = {}
    try:
        return p.parse_params(op, send_body_in(body, names), m.V1)
    except m.A2AError as exc:
        if not exc.fields:
            raise
        fields = [(_as_written(f, names), problem) for f, problem in exc.fields]
        said = "; ".join(f"{f}: {problem}" for f, problem in exc.fields)
        message = exc.message
        if message.endswith(said):
            message = message.removesuffix(said) + "; ".join(f"{f}: {why}" for f, why in fields)
        raise m.A2AError(exc.code, message, fields=fields) from None


def push_config_in(body: Mapping[str, Any], task_id: str) -> m.PushConfig:
    """The config of a 0.3 ``POST /v1/tasks/{task_id}/pushNotificationConfigs``: ``body``
    is the ``CreateTaskPushNotificationConfigRequest`` (``parent``, ``configId``, ``config``;
    what 0.3 clients send) or just its ``config`` (the proto's HTTP rule: ``body: "config"``);
    a ``parent``, ``config.name`` or ``configId`` contradicting the path or ``id`` is refused."""
    if "config" in body:
        config, where = body["config"], "config"
        if not isinstance(config, Mapping):
            raise m.invalid("config", 'must be an object: {"pushNotificationConfig": {"url": ...}}')
        parent = body.get("parent")
        if parent not in (None, "") and parent != f"tasks/{task_id}":
            raise m.invalid(
                "parent",
                f"must be 'tasks/{task_id}', the task in the path; got {str(parent)[:300]!r}",
            )
        id_key = _key(body, "configId", "config_id", "") or "configId"
        config_id = body.get(id_key)
    elif isinstance(
        body.get("pushNotificationConfig", body.get("push_notification_config")), Mapping
    ):
        config, where, config_id, id_key = body, "body", None, "configId"
    else:
        raise m.invalid(
            "config",
            'is required: the push-notification config to create, as {"parent": "tasks/<id>", '
            '"config": {"pushNotificationConfig": {"url": ...}}}',
        )
    inner_key = (
        _key(config, "pushNotificationConfig", "push_notification_config", where)
        or "pushNotificationConfig"
    )
    inner, inner_field = config.get(inner_key), f"{where}.{inner_key}"
    if not isinstance(inner, Mapping):
        raise m.invalid(
            inner_field, 'is required: an object such as {"url": "https://..."} (the webhook)'
        )
    name = config.get("name")
    if name not in (None, "") and not (
        isinstance(name, str) and name.startswith(f"tasks/{task_id}/pushNotificationConfigs/")
    ):
        raise m.invalid(
            f"{where}.name",
            f"must be 'tasks/{task_id}/pushNotificationConfigs/<config id>'; "
            f"got {str(name)[:300]!r}",
        )
    inner = dict(inner)
    if config_id not in (None, ""):
        if not isinstance(config_id, str):
            raise m.invalid(id_key, "must be a string: the id of the new config")
        if inner.get("id") not in (None, "", config_id):
            raise m.invalid(
                id_key, f"differs from {inner_field}.id ({str(inner['id'])[:300]!r}); send one id"
            )
        inner["id"] = config_id
    return m.push_config_from_json(inner, inner_field, task_id=task_id)


_CARD_FIELDS_03 = (
    "protocolVersion",
    "name",
    "description",
    "url",
    "preferredTransport",
    "provider",
    "version",
    "documentationUrl",
    "securitySchemes",
    "defaultInputModes",
    "defaultOutputModes",
    "signatures",
    "iconUrl",
)
_SKILL_FIELDS_03 = ("id", "name", "description", "tags", "examples", "inputModes", "outputModes")


def card_out(card: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 agent card (with its 0.3 fields) as the 0.3 ``AgentCard``: the 0.3 interfaces
    (and HTTP+JSON, which serves 0.3 under ``/v1``) as ``additionalInterfaces``."""
    out = {k: card[k] for k in _CARD_FIELDS_03 if k in card}
    interfaces: list[dict[str, Any]] = []
    for interface in card.get("supportedInterfaces", ()):
        binding = interface.get("protocolBinding")
        if interface.get("protocolVersion") == m.V03 or binding == "HTTP+JSON":
            entry = {"url": interface.get("url"), "transport": binding}
            if entry not in interfaces:
                interfaces.append(entry)
    if interfaces:
        out["additionalInterfaces"] = interfaces
    caps = card.get("capabilities") or {}
    out["capabilities"] = {
        k: caps[k] for k in ("streaming", "pushNotifications", "extensions") if k in caps
    }
    out["supportsAuthenticatedExtendedCard"] = bool(caps.get("extendedAgentCard"))
    if "securityRequirements" in card:
        out["security"] = card["securityRequirements"]
    skills = []
    for skill in card.get("skills", ()):
        entry = {k: skill[k] for k in _SKILL_FIELDS_03 if k in skill}
        if "securityRequirements" in skill:
            entry["security"] = skill["securityRequirements"]
        skills.append(entry)
    out["skills"] = skills
    return out
