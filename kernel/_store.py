"""The app store: sessions and their history, the tool-call audit log and token usage.

``Store`` is the protocol; ``SqliteStore`` the default: every write returns after its
commit, a tool call's audit row before the call's result. A session is named by
``(owner, id)`` (``owner``: a principal; before schema 2, ``open_store``'s
``legacy_owner``), so two principals never share one, and stays with its agent (else
``SessionConflict``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

from ._audit import INSERT_AUDIT, AuditRecord, audit_row, read_audit
from ._errors import InvalidText, SessionConflict, _shown, check_text, number_setting
from ._jsonrpc import make_encoder
from ._sqlite import SqliteDatabase, StoreError

_MESSAGE_KEYS = ("role", "content", "data")
_MAX_ID_CHARS = 256


def _unicode_checked(name: str, value: Any) -> None:
    """StoreError naming ``name`` (and where inside it) if ``value`` holds a lone surrogate."""
    try:
        check_text(value, name)
    except InvalidText as exc:
        raise StoreError(f"{exc}; it cannot be stored") from None


# Migration i takes the schema from version i to i + 1. Append, never edit.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX sessions_by_agent ON sessions (agent, updated_at)",
        "CREATE INDEX sessions_by_update ON sessions (updated_at)",
        """CREATE TABLE messages (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            data TEXT NOT NULL,
            ts REAL NOT NULL,
            PRIMARY KEY (session_id, seq)
        )""",
        """CREATE TABLE audit (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts REAL NOT NULL,
            trace_id TEXT,
            span_id TEXT,
            agent TEXT NOT NULL,
            tool TEXT NOT NULL,
            arguments TEXT NOT NULL,
            duration_ms REAL NOT NULL,
            outcome TEXT NOT NULL,
            error TEXT,
            session_id TEXT
        )""",
        "CREATE INDEX audit_by_agent ON audit (agent, id)",
        "CREATE INDEX audit_by_trace ON audit (trace_id, id)",
        """CREATE TABLE usage (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            ts REAL NOT NULL,
            agent TEXT NOT NULL,
            session_id TEXT,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            input_tokens INTEGER NOT NULL,
            output_tokens INTEGER NOT NULL
        )""",
        "CREATE INDEX usage_by_agent ON usage (agent)",
    ),
    # 2: sessions belong to a principal; (owner, id) names a session. Existing ones are
    # given :legacy_owner. (The tables are rebuilt: SQLite cannot change a primary key.)
    (
        """CREATE TABLE sessions_v2 (
            owner TEXT NOT NULL,
            id TEXT NOT NULL,
            agent TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            message_count INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (owner, id)
        )""",
        "INSERT INTO sessions_v2 (owner, id, agent, created_at, updated_at, message_count) "
        "SELECT :legacy_owner, id, agent, created_at, updated_at, message_count FROM sessions",
        """CREATE TABLE messages_v2 (
            owner TEXT NOT NULL,
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            content TEXT NOT NULL,
            data TEXT NOT NULL,
            ts REAL NOT NULL,
            PRIMARY KEY (owner, session_id, seq),
            FOREIGN KEY (owner, session_id) REFERENCES sessions_v2 (owner, id) ON DELETE CASCADE
        )""",
        "INSERT INTO messages_v2 (owner, session_id, seq, role, content, data, ts) "
        "SELECT :legacy_owner, session_id, seq, role, content, data, ts FROM messages",
        "DROP TABLE messages",
        "DROP TABLE sessions",
        "ALTER TABLE sessions_v2 RENAME TO sessions",
        "ALTER TABLE messages_v2 RENAME TO messages",
        "CREATE INDEX sessions_by_agent ON sessions (agent, updated_at)",
        "CREATE INDEX sessions_by_update ON sessions (updated_at)",
    ),
)

DEFAULT_OWNER = "local"
"""The owner of a session when the caller names none (the principal of a daemon without keys)."""


# ---- records ---------------------------------------------------------------------------


@attrs.frozen
class StoredMessage:
    """One message of a session's history, numbered from 1 by ``seq``."""

    session_id: str
    seq: int
    role: str
    content: str
    data: Mapping[str, Any]
    ts: float


@runtime_checkable
class Store(Protocol):
    """What the kernel needs from persistence; ``SqliteStore`` is the default."""

    async def ensure_session(
        self, session_id: str, agent: str, *, owner: str = DEFAULT_OWNER
    ) -> None: ...

    async def session_agent(self, session_id: str, *, owner: str = DEFAULT_OWNER) -> str | None: ...

    async def append_messages(
        self,
        session_id: str,
        agent: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        owner: str = DEFAULT_OWNER,
    ) -> None: ...

    async def start_exchange(
        self, session_id: str, agent: str, message: Mapping[str, Any], *, owner: str = DEFAULT_OWNER
    ) -> list[StoredMessage]: ...

    async def finish_exchange(
        self,
        session_id: str,
        agent: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        usage: tuple[str, str, int, int] | None = None,
        shield: bool = False,
        owner: str = DEFAULT_OWNER,
    ) -> None: ...

    async def history(
        self, session_id: str, *, limit: int | None = None, owner: str = DEFAULT_OWNER
    ) -> list[StoredMessage]: ...

    async def sessions(
        self, *, agent: str | None = None, limit: int = 100, owner: str | None = None
    ) -> list[dict]: ...

    async def record_tool_call(self, record: AuditRecord) -> None: ...

    async def audit(
        self, *, agent: str | None = None, trace_id: str | None = None, limit: int = 100
    ) -> list[AuditRecord]: ...

    async def record_usage(
        self,
        agent: str,
        session_id: str | None,
        provider: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
        *,
        wait: bool = True,
    ) -> None: ...

    async def usage_by_agent(self) -> dict[str, dict]: ...


# ---- argument checks (in the calling task, before any thread or SQL) -------------------


def _check_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise StoreError(f"{name}: expected a non-empty string, got {value!r}")
    if len(value) > _MAX_ID_CHARS:
        raise StoreError(f"{name}: expected at most {_MAX_ID_CHARS} characters, got {len(value)}")
    if not value.isascii():
        _unicode_checked(name, value)
    return value


def _check_ids(**ids: Any) -> None:
    for name, value in ids.items():
        _check_id(name, value)


def _filters(**columns: Any) -> tuple[list[str], list[Any]]:
    """``column = ?`` conditions and their checked ids, for the columns given (not None)."""
    where, params = [], []
    for column, value in columns.items():
        if value is not None:
            where.append(f"{column} = ?")
            params.append(_check_id(column, value))
    return where, params


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > _MAX_ID_CHARS:
        raise StoreError(
            f"{name}: expected a string of at most {_MAX_ID_CHARS} characters, got {value!r}"
        )
    if not value.isascii():
        _unicode_checked(name, value)
    return value


_MAX_INTEGER = 2**63 - 1  # SQLite's largest INTEGER; a larger int cannot be bound


def _check_int(name: str, value: Any, low: int) -> int:
    if number_setting(value, low, _MAX_INTEGER, integer=True, closed=True) is None:
        top = f" and ≤ {_MAX_INTEGER}" if isinstance(value, int) and value > _MAX_INTEGER else ""
        raise StoreError(f"{name}: expected an integer ≥ {low}{top}, got {_shown(value)}")
    return value


# Checks for circular data (else only the recursion limit stops it, and past a raised limit a
# crash); shared safely, as each call has markers of its own.
_encode_data = make_encoder(allow_nan=False, check_circular=True)


def _encode_messages(messages: Any) -> list[tuple[str, str, str]]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise StoreError(
            "messages: expected a list of {role, content, data} dicts, "
            f"got {type(messages).__name__}"
        )
    rows = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping):
            raise StoreError(f"{where}: expected a dict with role, content, data; got {message!r}")
        extra = [k for k in message if k not in _MESSAGE_KEYS]
        if extra:
            raise StoreError(
                f"{where}: unknown key {extra[0]!r}; allowed keys: role, content, data "
                "(put anything else, such as tool_calls, under 'data')"
            )
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise StoreError(f"{where}.role: expected a non-empty string, got {role!r}")
        if not role.isascii():
            _unicode_checked(f"{where}.role", role)
        content = message.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise StoreError(
                f"{where}.content: expected a string, got {type(content).__name__}; "
                "put structured content under 'data'"
            )
        if not content.isascii():
            _unicode_checked(f"{where}.content", content)
        data = message.get("data")
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise StoreError(f"{where}.data: expected a dict, got {type(data).__name__}")
        try:
            encoded = _encode_data(data if type(data) is dict else dict(data))
        except (TypeError, ValueError, RecursionError) as exc:
            reason = "nested too deep" if isinstance(exc, RecursionError) else exc
            raise StoreError(
                f"{where}.data: not JSON-serialisable ({reason}); use only dicts, lists, strings, "
                "numbers, booleans and None (e.g. turn sets into sorted lists)"
            ) from None
        if not encoded.isascii():
            _unicode_checked(f"{where}.data", data)
        rows.append((role, content, encoded))
    return rows


# ---- the SQLite store ------------------------------------------------------------------


def _usage_row(
    agent: str,
    session_id: str | None,
    provider: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
) -> tuple:
    return (
        time.time(),
        _check_id("agent", agent),
        None if session_id is None else _check_id("session_id", session_id),
        _check_id("provider", provider),
        _check_text("model", model),
        _check_int("input_tokens", input_tokens, 0),
        _check_int("output_tokens", output_tokens, 0),
    )


def _session_agent(conn: sqlite3.Connection, owner: str, session_id: str) -> str | None:
    row = conn.execute(
        "SELECT agent FROM sessions WHERE owner = ? AND id = ?", (owner, session_id)
    ).fetchone()
    return None if row is None else row[0]


def _messages(
    conn: sqlite3.Connection, owner: str, session_id: str, limit: int = -1
) -> list[StoredMessage]:
    """The session's messages in order; the last ``limit`` of them (-1: all)."""
    rows = conn.execute(
        "SELECT session_id, seq, role, content, data, ts FROM messages "
        "WHERE owner = ? AND session_id = ? ORDER BY seq DESC LIMIT ?",
        (owner, session_id, limit),
    ).fetchall()
    return [
        StoredMessage(sid, seq, role, content, json.loads(data), ts)
        for sid, seq, role, content, data, ts in reversed(rows)
    ]


_INSERT_USAGE = (
    "INSERT INTO usage (ts, agent, session_id, provider, model, input_tokens, output_tokens) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class SqliteStore(SqliteDatabase):
    """The SQLite ``Store``. Create it with ``open_store``; every method is async."""

    migrations = _MIGRATIONS

    # -- sessions and history --

    @staticmethod
    def _ensure(
        conn: sqlite3.Connection,
        owner: str,
        session_id: str,
        agent: str,
        now: float,
        messages: int = 0,
    ) -> bool:
        """Create the session (counting ``messages`` to add) if needed; True if it is new."""
        agent_now = _session_agent(conn, owner, session_id)
        if agent_now is None:
            conn.execute(
                "INSERT INTO sessions (owner, id, agent, created_at, updated_at, message_count) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (owner, session_id, agent, now, now, messages),
            )
            return True
        if agent_now != agent:  # the caller's mistake, not a storage failure
            raise SessionConflict(session_id, agent, agent_now)
        return False

    async def session_agent(self, session_id: str, *, owner: str = DEFAULT_OWNER) -> str | None:
        """The agent ``owner``'s session ``session_id`` belongs to; None if there is none."""
        _check_ids(session_id=session_id, owner=owner)
        return await self.read("read a session", lambda c: _session_agent(c, owner, session_id))

    async def ensure_session(
        self, session_id: str, agent: str, *, owner: str = DEFAULT_OWNER
    ) -> None:
        """Create ``owner``'s session for ``agent`` if missing (else ``SessionConflict``)."""
        _check_ids(session_id=session_id, agent=agent, owner=owner)
        now = time.time()
        await self.write(
            "ensure a session", lambda c: self._ensure(c, owner, session_id, agent, now)
        )

    def _append(
        self,
        conn: sqlite3.Connection,
        owner: str,
        session_id: str,
        agent: str,
        rows: list,
        now: float,
    ) -> None:
        """Append ``rows``, creating the session if needed."""
        if self._ensure(conn, owner, session_id, agent, now, len(rows)):
            last = 0  # a new session: created counting these rows, with none before them
        else:
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE owner = ? AND session_id = ?",
                (owner, session_id),
            ).fetchone()
            conn.execute(
                "UPDATE sessions SET updated_at = ?, message_count = message_count + ? "
                "WHERE owner = ? AND id = ?",
                (now, len(rows), owner, session_id),
            )
        conn.executemany(
            "INSERT INTO messages (owner, session_id, seq, role, content, data, ts) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (owner, session_id, last + i, role, content, data, now)
                for i, (role, content, data) in enumerate(rows, start=1)
            ],
        )

    async def append_messages(
        self,
        session_id: str,
        agent: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        owner: str = DEFAULT_OWNER,
    ) -> None:
        """Append messages (role, content, data), all or none, creating the session if needed."""
        _check_ids(session_id=session_id, agent=agent, owner=owner)
        rows = _encode_messages(messages)
        now = time.time()
        await self.write(
            "append messages", lambda c: self._append(c, owner, session_id, agent, rows, now)
        )

    async def start_exchange(
        self,
        session_id: str,
        agent: str,
        message: Mapping[str, Any],
        *,
        owner: str = DEFAULT_OWNER,
    ) -> list[StoredMessage]:
        """In one transaction: ensure the session, append ``message``; the history before it."""
        _check_ids(session_id=session_id, agent=agent, owner=owner)
        rows = _encode_messages([message])
        now = time.time()

        def work(conn: sqlite3.Connection) -> list[StoredMessage]:
            history = _messages(conn, owner, session_id)  # none yet for a new session
            self._append(conn, owner, session_id, agent, rows, now)
            return history

        return await self.write("start an exchange", work)

    async def finish_exchange(
        self,
        session_id: str,
        agent: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        usage: tuple[str, str, int, int] | None = None,
        shield: bool = False,
        owner: str = DEFAULT_OWNER,
    ) -> None:
        """In one transaction: append ``messages`` and the ``usage`` (provider, model,
        input_tokens, output_tokens); ``shield``: even if the caller is cancelled."""
        _check_ids(session_id=session_id, agent=agent, owner=owner)
        rows = _encode_messages(messages)
        usage_row = None if usage is None else _usage_row(agent, session_id, *usage)
        now = time.time()

        def work(conn: sqlite3.Connection) -> None:
            if rows:
                self._append(conn, owner, session_id, agent, rows, now)
            if usage_row is not None:
                conn.execute(_INSERT_USAGE, usage_row)

        await self.write("finish an exchange", work, shield=shield)

    async def history(
        self, session_id: str, *, limit: int | None = None, owner: str = DEFAULT_OWNER
    ) -> list[StoredMessage]:
        """``owner``'s session's messages in order; with ``limit``, only the last ``limit``."""
        _check_ids(session_id=session_id, owner=owner)
        last = -1 if limit is None else _check_int("limit", limit, 1)
        return await self.read("read history", lambda c: _messages(c, owner, session_id, last))

    async def sessions(
        self, *, agent: str | None = None, limit: int = 100, owner: str | None = None
    ) -> list[dict]:
        """Sessions (of ``owner``, else everyone's) as dicts, most recently updated first."""
        where, params = _filters(agent=agent, owner=owner)
        limit = _check_int("limit", limit, 1)
        keys = ("id", "owner", "agent", "created_at", "updated_at", "message_count")
        sql = f"SELECT {', '.join(keys)} FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, rowid DESC LIMIT ?"

        def work(conn: sqlite3.Connection) -> list[dict]:
            return [
                dict(zip(keys, row, strict=True)) for row in conn.execute(sql, (*params, limit))
            ]

        return await self.read("list sessions", work)

    # -- audit log and token usage --

    async def record_tool_call(self, record: AuditRecord) -> None:
        """Append one tool call to the audit log; stored even if the caller is cancelled."""
        row = audit_row(record)
        await self.write(
            "record a tool call", lambda conn: conn.execute(INSERT_AUDIT, row), shield=True
        )

    async def audit(
        self, *, agent: str | None = None, trace_id: str | None = None, limit: int = 100
    ) -> list[AuditRecord]:
        """Audit records, newest first, optionally only one agent's or one trace's."""
        limit = _check_int("limit", limit, 1)
        where, params = _filters(agent=agent, trace_id=trace_id)
        return await self.read(
            "read the audit log", lambda conn: read_audit(conn, where, params, limit)
        )

    async def record_usage(
        self,
        agent: str,
        session_id: str | None,
        provider: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
        *,
        wait: bool = True,
    ) -> None:
        """Record the tokens one model call used (``model`` may be "" when unnamed);
        ``wait=False``: written behind (a failure logged), for usage nobody is answered about."""
        row = _usage_row(agent, session_id, provider, model, input_tokens, output_tokens)
        await self.write("record usage", lambda c: c.execute(_INSERT_USAGE, row), wait=wait)

    async def usage_by_agent(self) -> dict[str, dict]:
        """Totals per agent: ``{agent: {input_tokens, output_tokens, requests}}``."""

        def work(conn: sqlite3.Connection) -> dict[str, dict]:
            rows = conn.execute(
                "SELECT agent, SUM(input_tokens), SUM(output_tokens), COUNT(*) FROM usage "
                "GROUP BY agent ORDER BY agent"
            )
            return {
                agent: {"input_tokens": i, "output_tokens": o, "requests": n}
                for agent, i, o, n in rows
            }

        return await self.read("read usage", work)


@asynccontextmanager
async def open_store(
    path: Path | str, *, synchronous: str = "normal", legacy_owner: str = DEFAULT_OWNER
) -> AsyncIterator[SqliteStore]:
    """Open (creating and upgrading) the store at ``path`` or ``":memory:"``;
    ``legacy_owner`` owns the sessions of a schema 1 database."""
    _check_id("legacy_owner", legacy_owner)
    async with SqliteStore.open(
        path, synchronous=synchronous, params={"legacy_owner": legacy_owner}
    ) as store:
        yield store
