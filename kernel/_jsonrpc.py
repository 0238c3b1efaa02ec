"""Sans-I/O JSON-RPC 2.0: parse and validate, build replies, correlate ids, frame lines.

The error codes are defined here once; every protocol edge imports them. ``parse`` only
ever raises ``JsonRpcError``, naming the offending field. Batches are the protocol's
choice (``allow_batch``): MCP 2025-06-18 and later forbid them.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from ._errors import InvalidText, _positive_int, check_text, is_mapping, json_type

VERSION = "2.0"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# -32000 .. -32099 are for implementation-defined server errors; roost errors use this one,
SERVER_ERROR = -32000
# and this one when a call chain passes its depth limit (``RecursionLimitExceeded``).
RECURSION_LIMIT = -32010

DEFAULT_MAX_BYTES = 8 * 1024 * 1024

Id = str | int | float | None
Params = Mapping[str, Any] | Sequence[Any] | None

_MISSING: Any = object()


class JsonRpcError(Exception):
    """A JSON-RPC error: raised by ``parse`` for bad input, and by method handlers to
    answer with a specific error. ``id`` is the request's id when it could be read."""

    def __init__(self, code: int, message: str, data: Any = None, *, id: Id = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.id = id

    def to_error(self) -> ErrorObject:
        return ErrorObject(self.code, self.message, self.data)

    def to_response(self, id: Id = _MISSING) -> ErrorResponse:
        """The error response for this error, to ``id`` (default: the id read, or null)."""
        return ErrorResponse(self.id if id is _MISSING else id, self.to_error())

    def __repr__(self) -> str:
        return f"JsonRpcError({self.code}, {self.message!r})"


class UnknownResponseId(JsonRpcError):
    """A response whose id matches no pending request (answered, cancelled or never sent)."""


class TooManyPending(JsonRpcError):
    """The correlator already tracks ``max_pending`` unanswered requests."""


# ---- messages ---------------------------------------------------------------------------


@attrs.frozen
class Request:
    """A call that expects a response."""

    method: str
    params: Params = None
    id: Id = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"jsonrpc": VERSION, "id": self.id, "method": self.method}
        if self.params is not None:
            out["params"] = _plain(self.params)
        return out


@attrs.frozen
class Notification:
    """A call without an id: it gets no response, not even an error."""

    method: str
    params: Params = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"jsonrpc": VERSION, "method": self.method}
        if self.params is not None:
            out["params"] = _plain(self.params)
        return out


@attrs.frozen
class Response:
    """A successful result."""

    id: Id
    result: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {"jsonrpc": VERSION, "id": self.id, "result": self.result}


@attrs.frozen
class ErrorObject:
    """The ``error`` member of an error response."""

    code: int
    message: str
    data: Any = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


@attrs.frozen
class ErrorResponse:
    """A failed call; ``id`` is null when the request's id could not be read."""

    id: Id
    error: ErrorObject

    def to_dict(self) -> dict[str, Any]:
        return {"jsonrpc": VERSION, "id": self.id, "error": self.error.to_dict()}

    def to_exception(self) -> JsonRpcError:
        """The error as an exception a client can raise."""
        return JsonRpcError(self.error.code, self.error.message, self.error.data, id=self.id)


Message = Request | Notification | Response | ErrorResponse


@attrs.frozen
class Batch:
    """A parsed batch: each item is a message, or the ``JsonRpcError`` that item earned."""

    items: tuple[Message | JsonRpcError, ...]


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = f"a {type(value).__name__}"
    return text if len(text) <= 40 else text[:37] + "..."


def _plain(params: Params) -> Any:
    if not isinstance(params, dict) and isinstance(params, Mapping):
        return dict(params)
    if isinstance(params, tuple):
        return list(params)
    return params


# ---- building ---------------------------------------------------------------------------


def response(id: Id, result: Any) -> Response:
    """The success response to request ``id``."""
    return Response(id, result)


def error_response(id: Id, code: int, message: str, data: Any = None) -> ErrorResponse:
    """The error response to request ``id`` (None when it could not be read)."""
    return ErrorResponse(id, ErrorObject(code, message, data))


def make_encoder(
    *,
    separators: tuple[str, str] = (",", ":"),
    default: Callable[[Any], Any] | None = None,
    allow_nan: bool = False,
    check_circular: bool = False,
) -> Callable[[Any], str]:
    """``json.JSONEncoder(ensure_ascii=False, ...).encode``, built once to reuse (without
    ``check_circular``, a circular value raises RecursionError)."""
    return json.JSONEncoder(
        ensure_ascii=False,
        separators=separators,
        default=default,
        allow_nan=allow_nan,
        check_circular=check_circular,
    ).encode


_ENCODE_STRICT = make_encoder()
_ENCODE_LENIENT = make_encoder(allow_nan=True)


def dumps(value: Any, *, allow_nan: bool = False) -> str:
    """Compact JSON text, non-ASCII kept; raises as ``json.dumps`` (NaN only with ``allow_nan``)."""
    return (_ENCODE_LENIENT if allow_nan else _ENCODE_STRICT)(value)


def value_error_text(exc: ValueError) -> str:
    """What a ``ValueError`` of ``json.loads`` says, for whoever sent the JSON: an integer
    past Python's digit limit is named as such, without Python's hint (not theirs to act on)."""
    said = str(exc)
    if "integer string conversion" in said:
        return f"a number has more than {sys.get_int_max_str_digits()} digits"
    return said


def loads(text: str) -> Any:
    """``json.loads(text)``, beside ``dumps``."""
    return json.loads(text)


def encode(message: Message | Iterable[Message]) -> bytes:
    """Compact UTF-8 JSON of a message or batch; JsonRpcError(INTERNAL_ERROR) if not JSON."""
    if isinstance(message, (Request, Notification, Response, ErrorResponse)):
        obj: Any = message.to_dict()
    else:
        obj = [m.to_dict() for m in message]
    try:
        text = dumps(obj)
    except (TypeError, ValueError, RecursionError) as exc:
        raise JsonRpcError(
            INTERNAL_ERROR, f"the message cannot be encoded as JSON: {exc}"
        ) from None
    # A lone surrogate (legal in JSON escapes, not in UTF-8) goes out as its escape.
    return text.encode("utf-8", "backslashreplace")


# ---- parsing ----------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every parse: ``json.loads`` with ``parse_constant`` builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _loads(data: bytes | bytearray | memoryview | str, max_bytes: int | None) -> Any:
    if isinstance(data, str):
        size = len(data) if max_bytes is None or len(data) * 4 <= max_bytes else None
        if size is None:
            size = len(data.encode("utf-8", "surrogatepass"))
        text = data
    else:
        size = len(data) if not isinstance(data, memoryview) else data.nbytes
        text = None
    if max_bytes is not None and size > max_bytes:
        raise JsonRpcError(
            INVALID_REQUEST,
            f"message is {size} bytes, over the limit of {max_bytes} (max_bytes); "
            "send a smaller message",
        )
    if text is None:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonRpcError(
                PARSE_ERROR, f"parse error: the message is not UTF-8 (byte {exc.start})"
            ) from None
    try:
        if text.startswith("\ufeff"):  # as json.loads does
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise JsonRpcError(
            PARSE_ERROR,
            f"parse error: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
        ) from None
    except ValueError as exc:  # NaN / Infinity, or an integer past Python's digit limit
        raise JsonRpcError(PARSE_ERROR, f"parse error: {value_error_text(exc)}") from None
    except RecursionError:
        raise JsonRpcError(PARSE_ERROR, "parse error: the JSON is nested too deeply") from None


def parse(
    data: bytes | bytearray | memoryview | str | Mapping[str, Any] | Sequence[Any],
    *,
    allow_batch: bool = False,
    max_bytes: int | None = DEFAULT_MAX_BYTES,
) -> Message | Batch:
    """One JSON-RPC message (or, with ``allow_batch``, a ``Batch``) from JSON text or a
    decoded object; else JsonRpcError (PARSE_ERROR / INVALID_REQUEST, with the id if read).
    A batch's invalid items are JsonRpcErrors inside it, as the spec asks."""
    if isinstance(data, (bytes, bytearray, memoryview, str)):
        obj = _loads(data, max_bytes)
    else:
        obj = data
    if isinstance(obj, list):
        if not allow_batch:
            raise JsonRpcError(
                INVALID_REQUEST,
                "batches (JSON arrays) are not accepted by this protocol; "
                "send one JSON-RPC object per message",
            )
        if not obj:
            raise JsonRpcError(INVALID_REQUEST, "empty batch: a batch needs at least one message")
        items: list[Message | JsonRpcError] = []
        for index, item in enumerate(obj):
            try:
                items.append(parse_message(item, where=f"[{index}]"))
            except JsonRpcError as exc:
                items.append(exc)
        return Batch(tuple(items))
    return parse_message(obj)


def _check_id(value: Any, where: str) -> Id:
    if value is None:
        return value
    if isinstance(value, str):
        if not value.isascii():  # echoed in the response, which must be UTF-8
            _check_unicode(value, f"{where}id")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise JsonRpcError(
            INVALID_REQUEST,
            f"{where}id: expected a string, a number or null, got {json_type(value)}",
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise JsonRpcError(INVALID_REQUEST, f"{where}id: must be a finite number")
    return value


def _check_unicode(text: str, field: str, msg_id: Id = None) -> None:
    """INVALID_REQUEST naming ``field`` if ``text`` holds a lone surrogate."""
    try:
        check_text(text, field)
    except InvalidText as exc:
        raise JsonRpcError(INVALID_REQUEST, str(exc), {"field": exc.field}, id=msg_id) from None


def _invalid(msg_id: Id, text: str) -> JsonRpcError:
    return JsonRpcError(INVALID_REQUEST, text, id=msg_id)


def parse_message(obj: Any, *, where: str = "") -> Message:
    """One decoded JSON value as a message; ``where`` prefixes field names in errors."""
    if not is_mapping(obj):
        raise JsonRpcError(
            INVALID_REQUEST,
            f"{where or 'message'}: expected a JSON-RPC object, got {json_type(obj)}",
        )
    prefix = f"{where}." if where else ""
    # Read the id first so that errors about the other fields can still be answered to it.
    msg_id: Id = None
    id_error: JsonRpcError | None = None
    if "id" in obj:
        try:
            msg_id = _check_id(obj["id"], prefix)
        except JsonRpcError as exc:
            id_error = exc

    version = obj.get("jsonrpc", _MISSING)
    if version is _MISSING:
        raise _invalid(msg_id, f'{prefix}jsonrpc: missing; every message needs "jsonrpc": "2.0"')
    if version != VERSION or not isinstance(version, str):
        raise _invalid(msg_id, f'{prefix}jsonrpc: expected "2.0", got {_show(version)}')
    if id_error is not None:
        raise id_error

    if "method" in obj:
        method = obj["method"]
        if not isinstance(method, str):
            raise _invalid(msg_id, f"{prefix}method: expected a string, got {json_type(method)}")
        if not method:
            raise _invalid(msg_id, f"{prefix}method: must not be empty")
        if not method.isascii():
            _check_unicode(method, f"{prefix}method", msg_id)
        if "result" in obj or "error" in obj:
            raise _invalid(
                msg_id,
                f"{prefix}method: a request must not carry result or error; "
                "send requests and responses as separate messages",
            )
        params = obj.get("params", _MISSING)
        if params is _MISSING:
            params = None
        elif not is_mapping(params) and not isinstance(params, list):
            raise _invalid(
                msg_id,
                f"{prefix}params: expected an object or an array (omit it when there are "
                f"none), got {json_type(params)}",
            )
        if "id" in obj:
            return Request(method, params, msg_id)
        return Notification(method, params)

    has_result = "result" in obj
    has_error = "error" in obj
    if not has_result and not has_error:
        raise _invalid(
            msg_id,
            f"{where or 'message'}: expected a request (with method) or a response "
            "(with result or error)",
        )
    if has_result and has_error:
        raise _invalid(msg_id, f"{prefix}result: a response has either result or error, not both")
    if "id" not in obj:
        raise _invalid(msg_id, f"{prefix}id: missing; a response must carry the id of its request")
    if has_result:
        return Response(msg_id, obj["result"])
    error = obj["error"]
    if not isinstance(error, Mapping):
        raise _invalid(msg_id, f"{prefix}error: expected an object, got {json_type(error)}")
    code = error.get("code", _MISSING)
    if code is _MISSING:
        raise _invalid(msg_id, f"{prefix}error.code: missing; an error needs an integer code")
    if isinstance(code, float) and math.isfinite(code) and code.is_integer():
        code = int(code)  # tolerate 1.0-style integers from sloppy encoders, nothing fractional
    elif isinstance(code, bool) or not isinstance(code, int):
        raise _invalid(msg_id, f"{prefix}error.code: expected an integer, got {json_type(code)}")
    message = error.get("message", _MISSING)
    if message is _MISSING:
        raise _invalid(msg_id, f"{prefix}error.message: missing; an error needs a message string")
    if not isinstance(message, str):
        raise _invalid(
            msg_id, f"{prefix}error.message: expected a string, got {json_type(message)}"
        )
    return ErrorResponse(msg_id, ErrorObject(code, message, error.get("data")))


# ---- params -----------------------------------------------------------------------------

_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    dict: "an object",
    list: "an array",
    type(None): "null",
}


def param(
    params: Params, name: str, expected: type | tuple[type, ...], *, default: Any = _MISSING
) -> Any:
    """``params[name]`` checked against ``expected`` (``float`` takes integers, ``int`` no
    booleans); INVALID_PARAMS naming it if wrong, or missing without ``default``."""
    types = expected if isinstance(expected, tuple) else (expected,)
    if params is None:
        params = {}
    if not is_mapping(params):
        raise JsonRpcError(
            INVALID_PARAMS,
            f"params: expected an object with {name!r}, got {json_type(params)}",
        )
    if name not in params:
        if default is not _MISSING:
            return default
        raise JsonRpcError(INVALID_PARAMS, f"params.{name}: required ({_wanted(types)})")
    value = params[name]
    for t in types:
        if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        if t is int and isinstance(value, bool):
            continue
        if t is dict and is_mapping(value) or isinstance(value, t):
            return value
    raise JsonRpcError(
        INVALID_PARAMS, f"params.{name}: expected {_wanted(types)}, got {json_type(value)}"
    )


def _wanted(types: tuple[type, ...]) -> str:
    return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)


# ---- framing: one JSON text per line (NDJSON) -------------------------------------------


@attrs.frozen
class Oversize:
    """A message of at least ``size`` bytes, over ``limit``: skipped, the stream goes on."""

    size: int
    limit: int


class LineFramer:
    """Newline framing (NDJSON, MCP stdio): feed bytes, get complete lines (a CR before
    LF dropped, blank lines skipped). A line over ``max_bytes`` is skipped and reported in
    its place as ``Oversize``. Each byte is searched once, however it is chunked."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = _positive_int(max_bytes, "max_bytes", ValueError)
        self._partial = bytearray()  # the start of a line whose end has not come
        self._skipped = 0  # bytes of an oversize line dropped so far (0: not skipping one)

    @property
    def pending(self) -> bool:
        """True when part of a line is held (a stream that ends here cut a line short)."""
        return bool(self._partial) or self._skipped > 0

    def feed(self, data: bytes) -> list[bytes | Oversize]:
        """Add bytes read from the peer; return the lines (and ``Oversize``) they complete."""
        out: list[bytes | Oversize] = []
        start = 0
        if self._skipped or self._partial:
            newline = data.find(b"\n")
            if newline < 0:
                self._hold(data)
                return out
            if self._skipped:
                out.append(Oversize(self._skipped + newline + 1, self.max_bytes))
                self._skipped = 0
            else:
                self._partial += data[:newline]
                self._line(bytes(self._partial), out)
                self._partial.clear()
            start = newline + 1
        newline = data.find(b"\n", start)
        while newline >= 0:
            self._line(data[start:newline], out)
            start = newline + 1
            newline = data.find(b"\n", start)
        if start < len(data):
            self._hold(data[start:] if start else data)
        return out

    def _hold(self, rest: bytes) -> None:
        """Keep the start of a line (or count it, past ``max_bytes``: a CR may follow)."""
        if self._skipped:
            self._skipped += len(rest)
        elif len(self._partial) + len(rest) > self.max_bytes + 1:
            self._skipped = len(self._partial) + len(rest)
            self._partial.clear()
        else:
            self._partial += rest

    def _line(self, line: bytes, out: list[bytes | Oversize]) -> None:
        if line[-1:] == b"\r":
            line = line[:-1]
        if len(line) > self.max_bytes:
            out.append(Oversize(len(line), self.max_bytes))
        elif line and not line.isspace():
            out.append(line)


# ---- client side: ids and correlation ---------------------------------------------------


class Correlator:
    """Allocates request ids and matches responses to the (≤ ``max_pending``) pending ones."""

    def __init__(self, *, max_pending: int = 1024, first_id: int = 1) -> None:
        self.max_pending = _positive_int(max_pending, "max_pending", ValueError)
        self._next_id = first_id
        self._pending: dict[Id, Request] = {}

    def new_request(self, method: str, params: Params = None) -> Request:
        """A request with a fresh id, now pending until ``feed`` or ``forget``."""
        if not isinstance(method, str) or not method:
            raise ValueError(f"method: expected a non-empty string, got {method!r}")
        if params is not None and not isinstance(params, (dict, list, tuple, Mapping)):
            raise ValueError(
                f"params: expected a mapping or a sequence (or None), got {type(params).__name__}"
            )
        if len(self._pending) >= self.max_pending:
            raise TooManyPending(
                INTERNAL_ERROR,
                f"{len(self._pending)} requests are already awaiting a response (max_pending="
                f"{self.max_pending}); wait for replies or raise max_pending",
            )
        request_id = self._next_id
        self._next_id += 1
        request = Request(method, params, request_id)
        self._pending[request_id] = request
        return request

    def feed(self, message: Response | ErrorResponse) -> Request:
        """The pending request ``message`` answers (no longer pending); else UnknownResponseId."""
        if not isinstance(message, (Response, ErrorResponse)):
            raise TypeError(
                f"message: expected a Response or ErrorResponse, got {type(message).__name__}"
            )
        msg_id = message.id
        request = (
            self._pending.pop(msg_id, None)
            if isinstance(msg_id, (str, int, float)) and not isinstance(msg_id, bool)
            else None
        )
        if request is None:
            if msg_id is None and isinstance(message, ErrorResponse):
                raise UnknownResponseId(
                    INVALID_REQUEST,
                    "error response with a null id: the peer could not read one of our "
                    f"requests ({message.error.code}: {message.error.message})",
                    message.error.data,
                )
            raise UnknownResponseId(
                INVALID_REQUEST,
                f"response id {msg_id!r} matches no pending request (already answered, "
                "forgotten after a timeout, or never sent)",
                id=msg_id,
            )
        return request

    def forget(self, request_id: Id) -> Request | None:
        """Stop waiting for ``request_id``; a late answer is then unknown."""
        return self._pending.pop(request_id, None)

    def forget_all(self) -> list[Request]:
        """Forget every pending request (the connection is gone) and return them."""
        pending = list(self._pending.values())
        self._pending.clear()
        return pending

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._pending

    def __len__(self) -> int:
        return len(self._pending)
