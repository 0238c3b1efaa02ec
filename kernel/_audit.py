"""The audit trail: one ``AuditRecord`` per tool call, stored in the ``audit`` table before
the call's result is returned (``Store.record_tool_call``)."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import attrs

from ._errors import escape_lone_surrogates
from ._sqlite import StoreError

OUTCOMES = ("ok", "error", "denied", "timeout", "cancelled")
MAX_AUDIT_CHARS = 8192
TRUNCATED_MARK = "…[truncated]"

AUDIT_COLUMNS = (
    "ts",
    "trace_id",
    "span_id",
    "agent",
    "tool",
    "arguments",
    "duration_ms",
    "outcome",
    "error",
    "session_id",
)
INSERT_AUDIT = (
    f"INSERT INTO audit ({', '.join(AUDIT_COLUMNS)}) VALUES ({', '.join('?' * len(AUDIT_COLUMNS))})"
)


def _truncate(text: str, limit: int = MAX_AUDIT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - len(TRUNCATED_MARK)] + TRUNCATED_MARK


def _audit_arguments(value: Any) -> str:
    if not isinstance(value, str):
        # The audit log must not lose a record because an argument is odd; repr it.
        value = json.dumps(value, ensure_ascii=False, default=repr, sort_keys=True)
    return _truncate(value)


def _optional_text(value: Any) -> str | None:
    return None if value is None else _truncate(str(value))


def _required_text(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise StoreError(
            f"{type(instance).__name__}.{attribute.name}: expected "
            f"a non-empty string, got {value!r}"
        )


def _known_outcome(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value not in OUTCOMES:
        raise StoreError(
            f"AuditRecord.outcome: expected one of {', '.join(OUTCOMES)}; got {value!r}"
        )


@attrs.frozen(kw_only=True)
class AuditRecord:
    """One tool call in the audit log. ``arguments`` is JSON text, truncated if huge."""

    ts: float = attrs.field(factory=time.time)
    trace_id: str | None = None
    span_id: str | None = None
    agent: str = attrs.field(validator=_required_text)
    tool: str = attrs.field(validator=_required_text)
    arguments: str = attrs.field(default="{}", converter=_audit_arguments)
    duration_ms: float = 0.0
    outcome: str = attrs.field(default="ok", validator=_known_outcome)
    error: str | None = attrs.field(default=None, converter=_optional_text)
    session_id: str | None = None


def storable(text: str | None) -> str | None:
    """``text`` as SQLite can store it: a lone surrogate would fail the whole statement."""
    return None if text is None else escape_lone_surrogates(text)


def audit_row(record: Any) -> tuple:
    """``record``'s row for ``INSERT_AUDIT``; StoreError if it is not an AuditRecord."""
    if not isinstance(record, AuditRecord):
        raise StoreError(f"record: expected an AuditRecord, got {type(record).__name__}")
    return (
        record.ts,
        storable(record.trace_id),
        storable(record.span_id),
        storable(record.agent),
        storable(record.tool),
        storable(record.arguments),
        float(record.duration_ms),
        record.outcome,
        storable(record.error),
        storable(record.session_id),
    )


def read_audit(
    conn: sqlite3.Connection, where: list[str], params: list[Any], limit: int
) -> list[AuditRecord]:
    """Audit records matching ``where`` (SQL conditions joined by AND), newest first."""
    sql = (
        f"SELECT {', '.join(AUDIT_COLUMNS)} FROM audit"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY id DESC LIMIT ?"
    )
    names = [f.name for f in attrs.fields(AuditRecord)]
    return [
        AuditRecord(**dict(zip(names, row, strict=True)))
        for row in conn.execute(sql, (*params, limit))
    ]
