"""Sans-I/O A2A protocol: version negotiation, request parsing and checks.

1.0 (``A2A-Version: 1.0``), 0.3 (no version sent) and the seed's 0.1 shape share one set of
operations: a request becomes an ``Operation`` with typed parameters, or an ``A2AError``
naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from roost.kernel import InvalidInput, check_json_input, is_mapping, jsonrpc, parse_int

from . import _models as m
from ._tasks import DEFAULT_PAGE_SIZE, ListQuery, SendOptions, iso_to_epoch

SUPPORTED_VERSIONS = (m.V1, m.V03)
VERSION_HEADER = "A2A-Version"
MAX_PAGE_SIZE = 100

STREAMING_OPS = frozenset({"stream", "subscribe"})


def negotiate_version(header: str | None, query: str | None = None) -> str:
    """The dialect a request speaks: ``A2A-Version`` header, else the query parameter,
    else 0.3 (the spec's rule for a missing header). Patch versions are ignored."""
    raw = header if header not in (None, "") else query
    if raw is None or not str(raw).strip():
        return m.V03
    text = str(raw).strip()
    try:  # major.minor; "1" is no version, "1.0.7" is 1.0
        version = ".".join(str(parse_int(n, VERSION_HEADER, 0, 99)) for n in text.split(".")[:2])
    except InvalidInput:
        version = ""
    if version in SUPPORTED_VERSIONS:
        return version
    raise m.A2AError(
        m.VERSION_NOT_SUPPORTED,
        f"A2A version {text[:40]!r} is not supported; send A2A-Version: 1.0 (or 0.3)",
    )


def check_content_type(content_type: str | None) -> None:
    """-32005 unless the body is declared JSON: ``application/json`` or any
    ``application/*+json`` (``application/a2a+json``); no Content-Type is read as JSON."""
    if not content_type or content_type == "application/json":
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    raise m.A2AError(
        m.CONTENT_TYPE_NOT_SUPPORTED,
        f"Content-Type {content_type[:80]!r} is not JSON; send the body "
        "as Content-Type: application/json",
    )


@attrs.frozen
class Operation:
    """A parsed request: ``op`` (send, get, ...), its ``params`` and the reply ``dialect``."""

    op: str
    params: Any
    dialect: str
    id: Any = None


@attrs.frozen
class SendParams:
    message: m.Message
    options: SendOptions
    task_id: str | None = None  # 0.1: the client picks the task id
    metadata: Mapping[str, Any] | None = None


@attrs.frozen
class TaskQuery:
    id: str
    history_length: int | None = None


@attrs.frozen
class PushQuery:
    task_id: str
    id: str | None = None


def parse_envelope(body: bytes) -> tuple[Any, str, Any]:
    """Check the JSON-RPC envelope → (id, method, params). Batches are refused (-32600)."""
    try:
        message = jsonrpc.parse(body, allow_batch=False)
    except jsonrpc.JsonRpcError as exc:
        code = m.PARSE_ERROR if exc.code == jsonrpc.PARSE_ERROR else m.INVALID_REQUEST
        err = m.A2AError(code, exc.message)
        err.rpc_id = exc.id
        raise err from None
    if not isinstance(message, jsonrpc.Request):
        raise m.A2AError(
            m.INVALID_REQUEST,
            "expected a JSON-RPC request with an id (notifications and responses are not accepted)",
        )
    return message.id, message.method, message.params


def resolve_method(method: str, version: str) -> tuple[str, str]:
    """(op, dialect) for ``method`` under the negotiated ``version``."""
    if method in m.V1_METHODS:
        if version != m.V1:
            raise m.A2AError(
                m.VERSION_NOT_SUPPORTED,
                f"{method} is a 1.0 method but the request speaks A2A {version} "
                "(no A2A-Version header means 0.3); send the header A2A-Version: 1.0",
            )
        return m.V1_METHODS[method], m.V1
    if method in m.V03_METHODS or method in m.V01_METHODS:
        if version == m.V1:
            raise m.A2AError(
                m.VERSION_NOT_SUPPORTED,
                f"{method} is an A2A 0.3/0.1 method but the request says A2A-Version: 1.0; "
                "use the 1.0 method names or drop the header",
            )
        if method in m.V01_METHODS:
            return m.V01_METHODS[method], m.V01
        return m.V03_METHODS[method], m.V03
    raise m.A2AError(m.METHOD_NOT_FOUND, f"Method not found: {method[:100]!r}")


def parse_params(op: str, params: Any, dialect: str, *, raw: bytes | None = None) -> Any:
    """Typed parameters of ``op``; -32602 naming the field for anything wrong. ``raw``:
    the JSON body they were decoded from, when there is one (it speeds up one check)."""
    if params is None:
        params = {}
    if not is_mapping(params):
        raise m.invalid("params", "must be an object")
    try:  # a lone surrogate (no store could keep it) or NaN / an infinity (no JSON answer
        # could carry it back), wherever it is: refused up front
        check_json_input(params, raw=raw)
    except InvalidInput as exc:
        raise m.invalid(exc.field, exc.problem) from None
    if op in ("send", "stream"):
        return parse_send(params, dialect)
    if op in ("get", "cancel", "subscribe"):
        history = _int(params, "historyLength", 0, 10_000) if op == "get" else None
        return TaskQuery(_task_id(params, "id"), history)
    if op == "list":
        return parse_list(params)
    if op == "push_set":
        return m.push_config_from_json(params)
    if op in ("push_get", "push_delete"):
        if dialect == m.V1:
            return PushQuery(_task_id(params, "taskId"), _task_id(params, "id"))
        # 0.3: {id: taskId, pushNotificationConfigId}
        return PushQuery(_task_id(params, "id"), _opt_id(params, "pushNotificationConfigId"))
    if op == "push_list":
        return PushQuery(_task_id(params, "taskId" if dialect == m.V1 else "id"))
    if op == "card":
        return None
    raise m.A2AError(m.METHOD_NOT_FOUND, f"operation {op!r} is not implemented")


def _task_id(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key)
    if value is None:
        raise m.invalid(key, "is required: the task id")
    if not isinstance(value, str) or not value or len(value) > 256:
        raise m.invalid(key, "must be a non-empty string of at most 256 characters")
    return value


def _opt_id(params: Mapping[str, Any], key: str) -> str | None:
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 256:
        raise m.invalid(key, "must be a string of at most 256 characters")
    return value


def _int(
    params: Mapping[str, Any], key: str, lo: int, hi: int, field: str | None = None
) -> int | None:
    value = params.get(key)
    try:  # a string from a REST query parameter
        return None if value is None else parse_int(value, field or key, lo, hi)
    except InvalidInput as exc:
        raise m.invalid(exc.field, exc.problem) from None


def parse_send(params: Mapping[str, Any], dialect: str) -> SendParams:
    message = m.message_from_json(params.get("message"), "message", dialect=dialect)
    if message.role != m.ROLE_USER:
        raise m.invalid("message.role", "a client's message must have role ROLE_USER ('user')")
    raw_config = params.get("configuration")
    if raw_config is None:
        raw_config = {}
    if not is_mapping(raw_config):
        raise m.invalid("configuration", "must be an object")
    return_immediately = raw_config.get("returnImmediately")
    if return_immediately is None and "blocking" in raw_config:  # 0.3 spelling
        blocking = raw_config["blocking"]
        if not isinstance(blocking, bool):
            raise m.invalid("configuration.blocking", "must be true or false")
        return_immediately = not blocking
    if return_immediately is None:
        return_immediately = False
    if not isinstance(return_immediately, bool):
        raise m.invalid("configuration.returnImmediately", "must be true or false")
    modes = raw_config.get("acceptedOutputModes") or []
    if not isinstance(modes, list) or not all(isinstance(x, str) for x in modes):
        raise m.invalid(
            "configuration.acceptedOutputModes",
            "must be an array of media types such as 'text/plain'",
        )
    push = None
    raw_push = raw_config.get(
        "taskPushNotificationConfig", raw_config.get("pushNotificationConfig")
    )
    if raw_push is not None:
        if not isinstance(raw_push, Mapping):
            raise m.invalid(
                "configuration.taskPushNotificationConfig", "must be an object with a url"
            )
        push = m.push_config_from_json(
            raw_push, "configuration.taskPushNotificationConfig", task_id="pending"
        )
    options = SendOptions(
        return_immediately=return_immediately,
        history_length=_int(raw_config, "historyLength", 0, 10_000, "configuration.historyLength"),
        accepted_output_modes=tuple(modes),
        push=push,
    )
    task_id = None
    if dialect == m.V01:
        task_id = _opt_id(params, "id")
        session = _opt_id(params, "sessionId")
        if session and not message.context_id:
            message = attrs.evolve(message, context_id=session)
    metadata = params.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise m.invalid("metadata", "must be an object")
    return SendParams(message, options, task_id, metadata)


def parse_list(params: Mapping[str, Any]) -> ListQuery:
    context_id = _opt_id(params, "contextId")
    state = params.get("status")
    if state is not None:
        state = m.state_from_json(state, "status")
    page_token = params.get("pageToken")
    if page_token is not None and (not isinstance(page_token, str) or len(page_token) > 512):
        raise m.invalid("pageToken", "must be the nextPageToken string of the previous page")
    after = params.get("statusTimestampAfter")
    updated_after = None
    if after is not None:
        if not isinstance(after, str):
            raise m.invalid("statusTimestampAfter", "must be an ISO 8601 timestamp string")
        updated_after = iso_to_epoch(after, "statusTimestampAfter")
    include = params.get("includeArtifacts", False)
    if isinstance(include, str) and include.lower() in ("true", "false"):
        include = include.lower() == "true"
    if not isinstance(include, bool):
        raise m.invalid("includeArtifacts", "must be true or false")
    return ListQuery(
        context_id=context_id,
        state=state,
        page_size=_int(params, "pageSize", 1, MAX_PAGE_SIZE) or DEFAULT_PAGE_SIZE,
        page_token=page_token or None,
        history_length=_int(params, "historyLength", 0, 10_000),
        updated_after=updated_after,
        include_artifacts=include,
    )


PUSH_OPS = frozenset({"push_set", "push_get", "push_list", "push_delete"})


def parse_jsonrpc(
    body: bytes, version_header: str | None, version_query: str | None = None, *, push: bool = True
) -> Operation:
    """Parse one JSON-RPC request body; errors carry ``rpc_id`` (the request id, if read).
    ``push=False``: push-config methods are -32003 whatever their params."""
    rpc_id, method, params = parse_envelope(body)
    try:
        version = negotiate_version(version_header, version_query)
        op, dialect = resolve_method(method, version)
        if not push and op in PUSH_OPS:
            raise m.push_not_supported()
        return Operation(op, parse_params(op, params, dialect, raw=body), dialect, rpc_id)
    except m.A2AError as exc:
        exc.rpc_id = rpc_id
        exc.dialect = m.V1 if method in m.V1_METHODS else m.V03
        raise


def result_json(rpc_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "result": result}


def error_json(rpc_id: Any, error: m.A2AError, dialect: str = m.V1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "error": error.jsonrpc_error(dialect)}
