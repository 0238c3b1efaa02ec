"""The daemon's own errors on A2A routes (401, 403, 404/405, 413, 429, 500, answered before
an A2A handler runs), in A2A 1.0's shapes (``RouteDescriptor.render_error``): on JSON-RPC
routes a JSON-RPC error (``id`` null, the code from ``jsonrpc_error_code``), elsewhere an
AIP-193 error object in the route's media type. Its ``ErrorInfo`` carries A2A's reason where
A2A names the code, else roost's code upper-cased (domain ``roost``), and in its metadata
the HTTP status and roost's code (``httpStatus``, ``roostCode``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from roost.plugins.http import jsonrpc_error_code

from . import _models as m

ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
A2A_JSON = "application/a2a+json"  # the 1.0 HTTP+JSON binding's media type
ROOST_DOMAIN = "roost"

# google.rpc.Code names for HTTP statuses (AIP-193 / google/rpc/code.proto).
_CANONICAL = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_A2A_CODES = frozenset({m.INVALID_REQUEST, m.METHOD_NOT_FOUND, m.INTERNAL_ERROR})


def _error(status: int, code: str, message: str) -> tuple[int, list[dict[str, Any]]]:
    """``(JSON-RPC code, [ErrorInfo])`` of one daemon error."""
    rpc_code = jsonrpc_error_code(status, code)
    if rpc_code in _A2A_CODES:
        details = m.A2AError(rpc_code, message).details()[:1]
    else:
        reason = re.sub(r"[^A-Z0-9]+", "_", code.upper()).strip("_") or "ERROR"
        details = [
            {"@type": ERROR_INFO_TYPE, "reason": reason, "domain": ROOST_DOMAIN, "metadata": {}}
        ]
    details[0]["metadata"] = {"httpStatus": str(status), "roostCode": code}  # was {}: no fields
    return rpc_code, details


def media_type(binding: str) -> str:
    """``application/a2a+json`` on 1.0 HTTP+JSON routes (``rest``), else ``application/json``."""
    return A2A_JSON if binding == "rest" else "application/json"


def render_error(binding: str, status: int, code: str, message: str) -> tuple[bytes, str]:
    """A daemon error on a route of ``binding`` (bound with ``partial``): (body, media type)."""
    rpc_code, details = _error(status, code, message)
    if binding == "jsonrpc":
        error = {"code": rpc_code, "message": message, "data": details}
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": None, "error": error}
    else:
        status_name = _CANONICAL.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
        body = {
            "error": {"code": status, "status": status_name, "message": message, "details": details}
        }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(), media_type(binding)
