"""Persistence: sessions and their history, the tool-call audit log and token usage.

``Store`` is the protocol; ``SqliteStore`` the default. Reads run in a worker thread
(``trio.to_thread.run_sync``) on one connection that only one thread uses at a time; writes
go through group commit (below), so the event loop never waits on disk or on a lock. A write
returns only after its transaction is committed: nothing is acknowledged before it is stored.

Group commit (``GroupCommitter``): writes that queue up while another batch runs are
run together in ONE transaction with ONE commit (with ``full``, one fsync), each
in its own SAVEPOINT, so one failing write is rolled back alone and only its caller sees
the error; every caller returns only after the commit that holds its write. The queue is
bounded. Cancelling a caller: a write still waiting in the queue is withdrawn and never
runs; one already taken into a batch commits anyway (the caller is not told, it sees
``Cancelled``). No background task: the first waiting caller leads the next batch.

A write may be marked ``durable=False`` when nothing will be acknowledged on its strength
alone: a batch of only such writes commits without an fsync (``synchronous=NORMAL`` for
that commit). It is still committed (visible, and kept if the process dies); only a power
loss before the next durable commit on the same connection could lose it, and that commit's
fsync covers it, since the WAL is one sequential file.

Durability (``[store] synchronous``): WAL journal. ``"normal"`` (the default) commits to
the WAL without an fsync: a write that returned survives roost crashing or being killed;
only a power loss or OS crash can lose the last commits. Such a commit costs ~25 µs, so the
group commit runs on the event loop's thread (a thread hop alone costs ~200 µs); only
checkpoints, which do fsync, run in a worker thread, on a connection of their own. A batch
that finds the database locked by another process, or the connection busy in a thread,
runs on a worker thread instead and waits there, never on the event loop. ``"full"`` (or
``"extra"``) fsyncs every commit before it returns, so acknowledged writes also survive a
power loss; every batch then runs on a worker thread.

Sessions belong to a principal (``owner``; see ``roost.plugins.http.Principal``): a
session is named by ``(owner, id)``, so the same id chosen by two principals names two
sessions, and one never reads the other's history. Sessions stored before schema 2 are
given the ``legacy_owner`` that ``open_store`` is told (the kernel's host principal).

The schema is versioned with ``PRAGMA user_version`` and upgraded by forward migrations,
each in its own transaction. A database from a newer roost, a file that is not SQLite or a
corrupt one is refused with an error naming the path, and left untouched.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs
import trio

from ._errors import InvalidText, RoostError, check_text
from ._jsonrpc import make_encoder

log = logging.getLogger("roost.store")

MEMORY = ":memory:"
SQLITE_HEADER = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 5000
SYNCHRONOUS_MODES = ("FULL", "NORMAL", "EXTRA")
OUTCOMES = ("ok", "error", "denied", "timeout", "cancelled")
MAX_AUDIT_CHARS = 8192
TRUNCATED_MARK = "…[truncated]"
_MESSAGE_KEYS = ("role", "content", "data")
_MAX_ID_CHARS = 256

_T = TypeVar("_T")


# sqlite3 binds a None parameter as NULL only after looking for an adapter and failing (an
# AttributeError raised and cleared each time; audit and usage rows have several). With this
# identity adapter registered it finds one at once. Process-wide, and changes no value.
sqlite3.register_adapter(type(None), lambda value: value)


class StoreError(RoostError):
    """The store refused an operation or the database failed; says which and why."""

    code = "store_error"


# What a write's work may raise that the store reports as a StoreError: the database's
# errors, and text SQLite cannot take (a lone surrogate cannot be encoded as UTF-8).
_STORE_FAILURES = (sqlite3.Error, UnicodeError)


def _unicode_checked(name: str, value: Any) -> None:
    """StoreError naming ``name`` (and where inside it) if ``value`` holds a lone surrogate."""
    try:
        check_text(value, name)
    except InvalidText as exc:
        raise StoreError(f"{exc}; it cannot be stored") from None


def storage_failure(path: str, operation: str, exc: BaseException) -> str:
    """The message of a StoreError for a failed database operation: says that storage
    failed, where, doing what, and why (e.g. the disk is full)."""
    if isinstance(exc, UnicodeError):
        why = f"the data holds text that is not valid Unicode ({exc})"
    else:
        why = str(exc) or type(exc).__name__
    hint = "; free space on its disk" if "full" in why else ""
    return f"storage failed: {path}: could not {operation}: {why}{hint}"


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


def schema_version() -> int:
    """The schema version this roost writes (the number of migrations)."""
    return len(_MIGRATIONS)


# ---- records ---------------------------------------------------------------------------


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
            f"{type(instance).__name__}.{attribute.name}: expected a non-empty string, "
            f"got {value!r}"
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

    async def ensure_session(self, session_id: str, agent: str, *, owner: str = DEFAULT_OWNER) -> None: ...

    async def append_messages(
        self, session_id: str, agent: str, messages: Sequence[Mapping[str, Any]], *, owner: str = DEFAULT_OWNER
    ) -> None: ...

    async def start_exchange(
        self, session_id: str, agent: str, message: Mapping[str, Any], *, fresh: bool = False, owner: str = DEFAULT_OWNER
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

    async def log_tool_call(self, record: AuditRecord) -> None: ...

    def log_tool_call_nowait(self, record: AuditRecord) -> bool: ...

    async def log_usage(
        self,
        agent: str,
        session_id: str | None,
        provider: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
    ) -> None: ...

    def log_usage_nowait(
        self,
        agent: str,
        session_id: str | None,
        provider: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
    ) -> bool: ...

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


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > _MAX_ID_CHARS:
        raise StoreError(
            f"{name}: expected a string of at most {_MAX_ID_CHARS} characters, got {value!r}"
        )
    if not value.isascii():
        _unicode_checked(name, value)
    return value


def _check_limit(value: Any, *, optional: bool) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StoreError(f"limit: expected an integer ≥ 1, got {value!r}")
    return value


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreError(f"{name}: expected an integer ≥ 0, got {value!r}")
    return value


# ``JSONEncoder.encode`` builds a C encoder per call; these are built once per thread.
# They check for circular data (without the check, circular data is only stopped by the
# recursion limit, and past a raised limit by a crash), so each keeps state of its own.
_ENCODERS = threading.local()


def _encode_data(data: dict) -> str:
    try:
        encode = _ENCODERS.data
    except AttributeError:
        encode = _ENCODERS.data = make_encoder(allow_nan=False, check_circular=True)
    return encode(data)


def _encode_messages(messages: Any) -> list[tuple[str, str, str]]:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise StoreError(
            f"messages: expected a list of {{role, content, data}} dicts, got {type(messages).__name__}"
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
            encoded = "{}" if type(data) is dict and not data else _encode_data(dict(data) if type(data) is not dict else data)
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


_INSERT_AUDIT = (
    "INSERT INTO audit (ts, trace_id, span_id, agent, tool, arguments, duration_ms, "
    "outcome, error, session_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
MAX_AUDIT_BACKLOG = 4096
AUDIT_GATHER_S = 0.002  # the audit writer gathers rows this long (or this many) per commit
AUDIT_GATHER_ROWS = 256
# A backlog this long means the writer has not had a turn: loggers yield to it (the
# ``_nowait`` calls refuse, so their callers take the async path).
AUDIT_YIELD_ROWS = 2 * AUDIT_GATHER_ROWS
AUDIT_RETRY_S = 1.0  # a batch that met another process's lock is tried once more after this
AUDIT_FLUSH_TIMEOUT_S = 30.0


def _audit_row(record: Any) -> tuple:
    if not isinstance(record, AuditRecord):
        raise StoreError(f"record: expected an AuditRecord, got {type(record).__name__}")
    return (
        record.ts,
        _storable(record.trace_id),
        _storable(record.span_id),
        _storable(record.agent),
        _storable(record.tool),
        _storable(record.arguments),
        float(record.duration_ms),
        record.outcome,
        _storable(record.error),
        _storable(record.session_id),
    )


def _storable(text: str | None) -> str | None:
    """``text`` as SQLite can store it: a lone surrogate (JSON "\\ud800" decodes to one)
    cannot be encoded as UTF-8, and would fail the whole statement."""
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


# (agent, provider, model) names already checked by _usage_row: every run logs the same few.
_USAGE_NAMES_CHECKED: set[tuple[str, str, str]] = set()
_USAGE_NAMES_MAX = 1024


def _usage_row(
    agent: str, session_id: str | None, provider: str, model: str, input_tokens: int, output_tokens: int
) -> tuple:
    names = (agent, provider, model)
    exact = agent.__class__ is str and provider.__class__ is str and model.__class__ is str  # hashable
    known = exact and names in _USAGE_NAMES_CHECKED
    row = (
        time.time(),
        agent if known else _check_id("agent", agent),
        None if session_id is None else _check_id("session_id", session_id),
        provider if known else _check_id("provider", provider),
        model if known else _check_text("model", model),
        _check_count("input_tokens", input_tokens),
        _check_count("output_tokens", output_tokens),
    )
    if exact and not known:
        if len(_USAGE_NAMES_CHECKED) >= _USAGE_NAMES_MAX:
            _USAGE_NAMES_CHECKED.clear()
        _USAGE_NAMES_CHECKED.add(names)
    return row


_INSERT_USAGE = (
    "INSERT INTO usage (ts, agent, session_id, provider, model, input_tokens, output_tokens) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


MAX_PENDING_WRITES = 1024
MAX_BATCH = 256
BUSY_WINDOW_S = 100e-6  # commits closer than this: the leader yields so others can join
YIELD_EVERY_S = 1e-3  # inline writes yield when the event loop has not polled for this long
CHECKPOINT_EVERY_COMMITS = 512  # inline commits between two checkpoints in a worker thread


@attrs.define(eq=False)
class _WriteItem:
    operation: str
    work: Callable[[sqlite3.Connection], Any]
    durable: bool = True
    offload: bool = False  # may take long (e.g. reads a whole history): never on the loop
    state: str = "queued"  # queued → running → done
    result: Any = None
    error: BaseException | None = None


class _PollClock(trio.abc.Instrument):
    """When the event loop last polled for I/O: it does once per scheduler pass, so this
    tells whether tasks waiting for timers or I/O have had a turn lately."""

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def after_io_wait(self, timeout: float) -> None:
        self.last = time.perf_counter()


_POLL_CLOCK: trio.lowlevel.RunVar[_PollClock] = trio.lowlevel.RunVar("roost_store_poll_clock")


def _poll_clock() -> _PollClock:
    """This Trio run's ``_PollClock`` (installed on first use; one per run, shared)."""
    try:
        return _POLL_CLOCK.get()
    except LookupError:
        clock = _PollClock()
        trio.lowlevel.add_instrument(clock)
        _POLL_CLOCK.set(clock)
        return clock


class GroupCommitter:
    """Runs write work items on one SQLite connection, many per transaction.

    ``await write(operation, work)`` queues ``work(conn)``; it runs inside a SAVEPOINT of a
    shared ``BEGIN IMMEDIATE`` transaction and the call returns its result only after that
    transaction's COMMIT. ``work`` must not BEGIN, COMMIT or ROLLBACK itself; raising rolls
    back its own changes only. ``limiter`` is the connection's one-thread-at-a-time limiter
    (shared with readers); ``wrap_error(operation, exc)`` turns an ``sqlite3.Error`` (or a
    ``UnicodeError``: text SQLite cannot take) into the caller's error type.

    Where a batch runs: with ``synchronous="NORMAL"`` on the event loop's thread (a commit
    is a WAL append, ~25 µs; the leader first yields once, so writes from tasks that are
    ready to run join its batch), unless a worker thread is using the connection or another
    process holds the write lock — then, as always with ``FULL``, on a worker thread, where
    waiting for the lock or the fsync blocks nobody. Given the database's ``path``, it
    checkpoints the WAL after every ``CHECKPOINT_EVERY_COMMITS`` commits, in a worker thread
    on a connection of its own, since with NORMAL the connection's automatic checkpoints
    (which fsync) are off (``apply_durability``); ``close()`` closes that connection.
    """

    def __init__(
        self,
        get_connection: Callable[[], sqlite3.Connection],
        limiter: trio.CapacityLimiter,
        wrap_error: Callable[[str, BaseException], BaseException],
        *,
        max_pending: int = MAX_PENDING_WRITES,
        max_batch: int = MAX_BATCH,
        synchronous: str = "FULL",
        path: str | None = None,
    ) -> None:
        if max_pending < 1 or max_batch < 1:
            raise ValueError("max_pending and max_batch: expected integers ≥ 1")
        if synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous: expected one of {', '.join(SYNCHRONOUS_MODES)}, got {synchronous!r}")
        self._synchronous = synchronous
        self._current_sync = synchronous  # what the connection is set to now
        self._get_connection = get_connection
        self._limiter = limiter
        self._wrap_error = wrap_error
        self._max_batch = max_batch
        self._slots = trio.Semaphore(max_pending)
        self._pending: list[_WriteItem] = []
        self._leading = False
        self._batch_done = trio.Event()
        self._inline = synchronous == "NORMAL"
        self._busy_timeout_ms = BUSY_TIMEOUT_MS  # what the connection is set to now
        # NORMAL: the connection's automatic checkpoints are off (see apply_durability);
        # this one, on a connection of its own, runs in a worker thread instead.
        self._checkpoint = WalCheckpointer(path) if self._inline and path and path != MEMORY else None
        self._commits_since_checkpoint = 0
        self._last_inline_commit = -1.0
        self.batches = 0  # how many transactions were committed (for tests and benches)
        self.inline_batches = 0  # how many of them ran on the event loop's thread

    async def write(
        self,
        operation: str,
        work: Callable[[sqlite3.Connection], _T],
        *,
        durable: bool = True,
        offload: bool = False,
        shield: bool = False,
    ) -> _T:
        """Run ``work(conn)`` in the next group transaction; return after it is committed
        (and, with ``FULL`` unless ``durable=False``, fsynced). ``offload``: the work may
        take long, so its batch runs on a worker thread even with ``NORMAL``. Every write is
        a cancel point unless ``shield``: then it is written and answered even if the caller
        is cancelled meanwhile (as inside a shielded cancel scope, which it only opens when
        it has to wait). An inline write yields to the scheduler once the event loop has
        not polled for I/O for ``YIELD_EVERY_S`` (so a loop of writes never starves it)."""
        if shield and (self._leading or not self._slots.value or len(self._pending) >= self._max_batch):
            # It would wait (for a slot, or a batch ahead of it): shield the waits. Otherwise
            # it leads a batch that holds it, and leading is shielded on its own.
            with trio.CancelScope(shield=True):
                return await self.write(operation, work, durable=durable, offload=offload)
        item = _WriteItem(operation, work, durable, offload)
        try:  # a scheduler round trip saved when there is room (the common case)
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()  # back-pressure: the queue is bounded
        try:
            self._pending.append(item)
            while item.state != "done":
                if self._leading:
                    try:
                        await self._batch_done.wait()  # (a shielded write never gets here)
                    except BaseException:
                        if item.state == "queued":  # never started: withdraw it
                            self._pending.remove(item)
                        raise
                else:
                    await self._lead()  # shielded on its own
                    if not shield:  # same answer as a waiting caller gets: cancelled means Cancelled
                        await trio.lowlevel.checkpoint_if_cancelled()
        finally:
            self._slots.release()
        if item.error is not None:
            raise item.error
        return item.result

    async def _lead(self) -> None:
        self._leading = True
        committed = False
        yielded = False
        batch: list[_WriteItem] = []
        try:
            if self._inline and self._busy():
                # Let tasks that are ready to run queue their writes into this batch.
                await trio.lowlevel.cancel_shielded_checkpoint()
                yielded = True
            batch = self._pending[: self._max_batch]
            del self._pending[: self._max_batch]
            for item in batch:
                item.state = "running"
            if self._inline and not any(item.offload for item in batch) and self._run_inline(batch):
                self._last_inline_commit = time.perf_counter()
            else:
                yielded = True
                # Shielded: the batch holds other callers' writes; it must finish and wake them.
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._run_batch, batch, limiter=self._limiter)
            committed = any(item.error is None for item in batch)
        finally:
            for item in batch:
                item.state = "done"
            self._leading = False
            self.batches += 1
            done, self._batch_done = self._batch_done, trio.Event()
            done.set()
        if committed and self._checkpoint is not None:
            self._commits_since_checkpoint += 1
            if self._commits_since_checkpoint >= CHECKPOINT_EVERY_COMMITS:
                # This leader carries the checkpoint; other writers go on inline meanwhile.
                self._commits_since_checkpoint = 0
                yielded = True
                with trio.CancelScope(shield=True):  # a worker thread cannot be abandoned anyway
                    try:
                        await trio.to_thread.run_sync(self._checkpoint)
                    except Exception:  # a failed checkpoint loses nothing; the next one retries
                        pass
        if not yielded and time.perf_counter() - _poll_clock().last >= YIELD_EVERY_S:
            # A loop of inline writes must not keep the event loop to itself, so a write
            # yields once the loop has not polled for I/O for YIELD_EVERY_S; not after every
            # write: a scheduler pass costs a third of an inline commit, and the writer's
            # caller usually yields on its own right after (it answers someone).
            await trio.lowlevel.cancel_shielded_checkpoint()

    def close(self) -> None:
        """Close the checkpoint connection (blocking: call it on the database thread)."""
        if self._checkpoint is not None:
            self._checkpoint.close()

    def allow_waiting(self, conn: sqlite3.Connection) -> None:
        """Before a read on a worker thread (holding the limiter): wait for a lock as usual
        (inline batches set the connection not to wait)."""
        if self._busy_timeout_ms != BUSY_TIMEOUT_MS:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._busy_timeout_ms = BUSY_TIMEOUT_MS

    def _busy(self) -> bool:
        """Whether other writes are likely to join if the leader yields: tasks are waiting
        to run, or the last commit was moments ago (writes are coming back to back). A lone
        writer does not pay for a scheduler round trip that nobody would use."""
        return (time.perf_counter() - self._last_inline_commit < BUSY_WINDOW_S) or bool(
            trio.lowlevel.current_statistics().tasks_runnable
        )

    def _run_inline(self, batch: list[_WriteItem]) -> bool:
        """Run the batch on this thread; False (nothing done) when the connection is busy
        in a worker thread or another process holds the write lock."""
        try:
            self._limiter.acquire_nowait()
        except trio.WouldBlock:
            return False
        try:
            try:
                conn = self._get_connection()
                if self._busy_timeout_ms:
                    conn.execute("PRAGMA busy_timeout = 0")  # never wait for a lock here
                    self._busy_timeout_ms = 0
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _is_locked(exc):
                    return False
                self._fail_all(batch, exc)
                return True
            except BaseException as exc:  # closed store: every item gets the reason
                self._fail_all(batch, exc)
                return True
            self._run_items(conn, batch)
            self.inline_batches += 1
            return True
        finally:
            self._limiter.release()

    def _fail_all(self, batch: list[_WriteItem], exc: BaseException) -> None:
        for item in batch:
            item.error = self._wrap_error(item.operation, exc) if isinstance(exc, _STORE_FAILURES) else exc

    def _run_batch(self, batch: list[_WriteItem]) -> None:
        """On the database thread: BEGIN, one SAVEPOINT per item, COMMIT."""
        try:
            conn = self._get_connection()
        except BaseException as exc:  # closed store: every item gets the reason
            self._fail_all(batch, exc)
            return
        try:
            if self._busy_timeout_ms != BUSY_TIMEOUT_MS:  # here we may wait for the lock
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                self._busy_timeout_ms = BUSY_TIMEOUT_MS
            wanted = self._synchronous if any(i.durable for i in batch) else "NORMAL"
            if wanted != self._current_sync:
                conn.execute(f"PRAGMA synchronous = {wanted}")
                self._current_sync = wanted
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._fail_all(batch, exc)
            return
        self._run_items(conn, batch)

    def _run_alone(self, conn: sqlite3.Connection, item: _WriteItem) -> None:
        try:
            item.result = item.work(conn)
            conn.execute("COMMIT")
        except BaseException as exc:
            item.result = None
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            item.error = self._wrap_error(item.operation, exc) if isinstance(exc, _STORE_FAILURES) else exc
            if not isinstance(exc, Exception):
                raise

    def _run_items(self, conn: sqlite3.Connection, batch: list[_WriteItem]) -> None:
        """Inside an open transaction: one SAVEPOINT per item, then COMMIT."""
        if len(batch) == 1:  # alone: its own transaction is its savepoint
            self._run_alone(conn, batch[0])
            return
        try:
            for item in batch:
                conn.execute("SAVEPOINT roost_item")
                try:
                    item.result = item.work(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO roost_item")
                    item.error = self._wrap_error(item.operation, exc) if isinstance(exc, _STORE_FAILURES) else exc
                conn.execute("RELEASE roost_item")
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            for item in batch:
                if item.error is None:
                    item.result = None
                    item.error = (
                        self._wrap_error(item.operation, exc) if isinstance(exc, _STORE_FAILURES) else exc
                    )
            if not isinstance(exc, Exception):
                raise


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def synchronous_mode(value: Any, error: type[Exception]) -> str:
    """``[store] synchronous`` as SQLite spells it; ``error`` (naming the choices) if unknown."""
    mode = str(value).upper()
    if mode not in SYNCHRONOUS_MODES:
        raise error(f"synchronous: expected one of {', '.join(SYNCHRONOUS_MODES)}, got {value!r}")
    return mode


def apply_durability(conn: sqlite3.Connection, mode: str) -> None:
    """Set a WAL connection up for ``mode`` (see the module doc); with NORMAL its automatic
    checkpoints (which fsync) are off: its ``GroupCommitter`` runs them on a worker thread."""
    conn.execute(f"PRAGMA synchronous = {mode}")
    if mode == "NORMAL":
        conn.execute("PRAGMA wal_autocheckpoint = 0")


class WalCheckpointer:
    """Checkpoints the WAL of the database at ``path`` on a connection of its own (opened
    on first use). Blocking: call it in a worker thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self) -> None:
        with self._lock:
            if self._closed:  # the store is closing: never reopen
                return
            if self._conn is None:
                self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()


class SqliteStore:
    """The SQLite ``Store``. Create it with ``open_store``; every method is async."""

    def __init__(self, connection: sqlite3.Connection, path: str, synchronous: str = "NORMAL") -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = connection
        self._limiter = trio.CapacityLimiter(1)
        self._writer = GroupCommitter(self._connection, self._limiter, self._error, synchronous=synchronous, path=path)
        # The write-behind audit log (log_tool_call): rows waiting for the writer.
        self._audit_backlog: list[tuple[str, tuple]] = []  # (statement, row)
        self._audit_logged = 0  # rows ever logged
        self._audit_settled = 0  # rows ever committed (or failed and reported)
        self._audit_wake = trio.Event()
        self._audit_progress = trio.Event()
        self._audit_writer_running = False
        self._audit_flushing = 0  # readers waiting for the backlog to be written
        self._audit_gathering = False  # the writer is gathering a batch (see _log_behind)

    @property
    def closed(self) -> bool:
        return self._conn is None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"{self.path}: the store is closed; cannot write")
        return self._conn

    def _error(self, operation: str, exc: BaseException) -> StoreError:
        error = StoreError(storage_failure(self.path, operation, exc))
        error.__cause__ = exc
        return error

    async def write(
        self,
        operation: str,
        work: Callable[[sqlite3.Connection], _T],
        *,
        durable: bool = True,
        offload: bool = False,
        shield: bool = False,
    ) -> _T:
        """Run ``work(conn)`` as one atomic write (a SAVEPOINT of a group transaction) on
        the database thread; returns its result once committed. ``operation`` names it in
        errors ("store a task"); ``durable=False`` skips the fsync (see the module doc);
        ``shield``: written and answered even if the caller is cancelled meanwhile."""
        return await self._writer.write(operation, work, durable=durable, offload=offload, shield=shield)

    async def read(self, operation: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run the read-only ``work(conn)`` on the database thread and return its result."""
        return await self._run(operation, work)

    async def _run(self, operation: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        def call() -> _T:
            conn = self._conn
            if conn is None:
                raise StoreError(f"{self.path}: the store is closed; cannot {operation}")
            try:
                self._writer.allow_waiting(conn)
                return work(conn)
            except _STORE_FAILURES as exc:
                raise self._error(operation, exc) from exc

        # Not abandoned on cancel: a started operation finishes (and commits) first.
        return await trio.to_thread.run_sync(call, limiter=self._limiter)

    async def aclose(self) -> None:
        """Close the connection after any running operation; later calls raise StoreError."""

        def close() -> None:
            conn, self._conn = self._conn, None
            self._writer.close()
            if conn is not None:
                conn.close()

        await trio.to_thread.run_sync(close, limiter=self._limiter)

    # -- sessions and history --

    @staticmethod
    def _ensure(
        conn: sqlite3.Connection, owner: str, session_id: str, agent: str, now: float, messages: int = 0
    ) -> bool:
        """Create the session if needed (inside the write transaction); True if it is new.
        A new session is created counting the ``messages`` its caller is about to add."""
        row = conn.execute(
            "SELECT agent FROM sessions WHERE owner = ? AND id = ?", (owner, session_id)
        ).fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO sessions (owner, id, agent, created_at, updated_at, message_count) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (owner, session_id, agent, now, now, messages),
            )
            return True
        if row[0] != agent:
            raise StoreError(
                f"session {session_id!r} belongs to agent {row[0]!r}, not {agent!r}; "
                "use a new session id"
            )
        return False

    async def ensure_session(self, session_id: str, agent: str, *, owner: str = DEFAULT_OWNER) -> None:
        """Create ``owner``'s session for ``agent`` if it does not exist yet."""
        _check_id("session_id", session_id)
        _check_id("agent", agent)
        _check_id("owner", owner)
        now = time.time()
        await self.write("ensure a session", lambda c: self._ensure(c, owner, session_id, agent, now))

    def _append(
        self, conn: sqlite3.Connection, owner: str, session_id: str, agent: str, rows: list, now: float
    ) -> None:
        """Append ``rows``, creating the session if needed."""
        if self._ensure(conn, owner, session_id, agent, now, len(rows)):  # new: counted, nothing before
            self._insert_messages(conn, owner, session_id, 0, rows, now)
            return
        (last,) = conn.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE owner = ? AND session_id = ?",
            (owner, session_id),
        ).fetchone()
        self._insert_messages(conn, owner, session_id, last, rows, now)
        conn.execute(
            "UPDATE sessions SET updated_at = ?, message_count = message_count + ? "
            "WHERE owner = ? AND id = ?",
            (now, len(rows), owner, session_id),
        )

    @staticmethod
    def _insert_messages(
        conn: sqlite3.Connection, owner: str, session_id: str, last: int, rows: list, now: float
    ) -> None:
        """Insert ``rows`` after sequence number ``last`` (the session's count is the caller's)."""
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
        """Append messages (dicts of role, content, data) atomically: all or none.

        Creates ``owner``'s session if needed. Returns once they are committed.
        """
        _check_id("session_id", session_id)
        _check_id("agent", agent)
        _check_id("owner", owner)
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
        fresh: bool = False,
        owner: str = DEFAULT_OWNER,
    ) -> list[StoredMessage]:
        """Begin one exchange in a single transaction: create ``owner``'s session if needed,
        read its history so far, and append ``message`` (the user's). Returns the history
        before ``message``. ``fresh``: the caller just made the session id up, so there is
        no history to read and the write may run inline; otherwise reading a history of any
        length runs on a worker thread, never on the event loop."""
        _check_id("session_id", session_id)
        _check_id("agent", agent)
        _check_id("owner", owner)
        rows = _encode_messages([message])
        now = time.time()

        def work(conn: sqlite3.Connection) -> list[StoredMessage]:
            if self._ensure(conn, owner, session_id, agent, now, len(rows)):  # new: no history yet
                self._insert_messages(conn, owner, session_id, 0, rows, now)
                return []
            history = [
                StoredMessage(sid, seq, role, content, json.loads(data), ts)
                for sid, seq, role, content, data, ts in conn.execute(
                    "SELECT session_id, seq, role, content, data, ts FROM messages "
                    "WHERE owner = ? AND session_id = ? ORDER BY seq",
                    (owner, session_id),
                )
            ]
            self._append(conn, owner, session_id, agent, rows, now)
            return history

        return await self.write("start an exchange", work, offload=not fresh)

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
        """End one exchange in a single transaction: append ``messages`` to ``owner``'s
        session and, when given, the ``usage`` (provider, model, input_tokens,
        output_tokens) of its model calls.
        ``shield``: written and answered even if the caller is cancelled meanwhile."""
        _check_id("session_id", session_id)
        _check_id("agent", agent)
        _check_id("owner", owner)
        rows = _encode_messages(messages)
        usage_row = None
        if usage is not None:
            provider, model, input_tokens, output_tokens = usage
            usage_row = (
                time.time(),
                agent,
                session_id,
                _check_id("provider", provider),
                _check_text("model", model),
                _check_count("input_tokens", input_tokens),
                _check_count("output_tokens", output_tokens),
            )
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
        _check_id("session_id", session_id)
        _check_id("owner", owner)
        limit = _check_limit(limit, optional=True)

        def work(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows = conn.execute(
                "SELECT session_id, seq, role, content, data, ts FROM messages "
                "WHERE owner = ? AND session_id = ? ORDER BY seq DESC LIMIT ?",
                (owner, session_id, -1 if limit is None else limit),
            ).fetchall()
            return [
                StoredMessage(sid, seq, role, content, json.loads(data), ts)
                for sid, seq, role, content, data, ts in reversed(rows)
            ]

        return await self._run("read history", work)

    async def sessions(
        self, *, agent: str | None = None, limit: int = 100, owner: str | None = None
    ) -> list[dict]:
        """Sessions (of ``owner``, else everyone's), most recently updated first: id, owner,
        agent, created_at, updated_at, message_count."""
        where: list[str] = []
        params: tuple[Any, ...] = ()
        if agent is not None:
            where.append("agent = ?")
            params += (_check_id("agent", agent),)
        if owner is not None:
            where.append("owner = ?")
            params += (_check_id("owner", owner),)
        limit = _check_limit(limit, optional=False)
        sql = "SELECT id, owner, agent, created_at, updated_at, message_count FROM sessions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY updated_at DESC, rowid DESC LIMIT ?"
        keys = ("id", "owner", "agent", "created_at", "updated_at", "message_count")

        def work(conn: sqlite3.Connection) -> list[dict]:
            return [
                dict(zip(keys, row, strict=True)) for row in conn.execute(sql, (*params, limit))
            ]

        return await self._run("list sessions", work)

    # -- audit log --

    async def record_tool_call(self, record: AuditRecord) -> None:
        """Append one tool call to the audit log (committed before this returns)."""
        row = _audit_row(record)
        await self.write("record a tool call", lambda conn: conn.execute(_INSERT_AUDIT, row))

    async def log_tool_call(self, record: AuditRecord) -> None:
        """Append one tool call to the audit log, write-behind: the row is committed by the
        store's audit writer within ``AUDIT_GATHER_S`` (with the rows logged meanwhile, in
        one transaction), not before this returns — a tool's reply does not wait for its
        audit row. ``audit()`` reads include every row logged before it. Waits only when
        ``MAX_AUDIT_BACKLOG`` rows are already waiting (back-pressure). Not a cancel point:
        a cancelled caller's row is logged all the same. Without a running writer (a store
        not opened with ``open_store``) this is ``record_tool_call``, shielded."""
        if not self._audit_writer_running:
            with trio.CancelScope(shield=True):
                await self.record_tool_call(record)
            return
        await self._log_behind_waiting(_INSERT_AUDIT, _audit_row(record))

    async def _log_behind_waiting(self, sql: str, row: tuple) -> None:
        if len(self._audit_backlog) >= MAX_AUDIT_BACKLOG:
            with trio.CancelScope(deadline=trio.current_time() + AUDIT_FLUSH_TIMEOUT_S, shield=True):
                while len(self._audit_backlog) >= MAX_AUDIT_BACKLOG:
                    await self._audit_progress.wait()
            if len(self._audit_backlog) >= MAX_AUDIT_BACKLOG:
                raise StoreError(
                    f"{self.path}: the audit writer is {AUDIT_FLUSH_TIMEOUT_S:g}s behind with "
                    f"{len(self._audit_backlog)} rows waiting; this row was not recorded"
                )
        self._log_behind(sql, row)
        if len(self._audit_backlog) >= AUDIT_YIELD_ROWS:
            # Callers that never yield (calls answered without waiting for anything) would
            # keep the writer from its turn until the backlog is full; one yield gives it.
            await trio.lowlevel.cancel_shielded_checkpoint()

    def _log_behind_nowait(self, sql: str, row: tuple, *, yield_at: int) -> bool:
        waiting = len(self._audit_backlog)
        if not self._audit_writer_running or waiting >= yield_at or waiting >= MAX_AUDIT_BACKLOG:
            return False
        self._log_behind(sql, row)
        return True

    def _log_behind(self, sql: str, row: tuple) -> None:
        self._audit_backlog.append((sql, row))
        self._audit_logged += 1
        # While the writer gathers, wake it only when the batch is full (not once per row:
        # that was a task switch per tool call).
        if not self._audit_gathering or len(self._audit_backlog) >= AUDIT_GATHER_ROWS:
            self._audit_wake.set()

    def log_tool_call_nowait(self, record: AuditRecord) -> bool:
        """``log_tool_call`` without waiting: False (nothing logged) when the writer is not
        running or has a backlog to catch up with; then call ``log_tool_call``."""
        return self._log_behind_nowait(_INSERT_AUDIT, _audit_row(record), yield_at=AUDIT_YIELD_ROWS)

    async def flush_audit(self) -> None:
        """Return once every row logged before this call is committed (or, if its batch
        failed, reported in the log); bounded by ``AUDIT_FLUSH_TIMEOUT_S``."""
        target = self._audit_logged
        if not self._audit_writer_running:  # no writer (gone, or never started): write here
            await self._write_audit_backlog()
            return
        try:
            with trio.fail_after(AUDIT_FLUSH_TIMEOUT_S):
                while self._audit_settled < target:
                    self._audit_flushing += 1  # the writer stops gathering and writes now
                    self._audit_wake.set()
                    try:
                        await self._audit_progress.wait()
                    finally:
                        self._audit_flushing -= 1
        except trio.TooSlowError:
            raise StoreError(
                f"{self.path}: the audit writer did not commit {target - self._audit_settled} rows "
                f"within {AUDIT_FLUSH_TIMEOUT_S:g} s; is the database locked by another process?"
            ) from None

    async def run_audit_writer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The write-behind audit writer; runs until cancelled (``open_store`` runs it)."""
        self._audit_writer_running = True
        task_status.started()
        try:
            while True:
                await self._audit_wake.wait()
                # Gather for a moment: one transaction for the calls of the next couple of
                # milliseconds instead of one each (the replies do not wait for this).
                self._audit_gathering = True
                try:
                    with trio.move_on_after(AUDIT_GATHER_S):
                        while len(self._audit_backlog) < AUDIT_GATHER_ROWS and not self._audit_flushing:
                            self._audit_wake = trio.Event()
                            await self._audit_wake.wait()
                finally:
                    self._audit_gathering = False
                self._audit_wake = trio.Event()
                await self._write_audit_backlog()
        finally:
            self._audit_writer_running = False
            # Cancelled (at close, or from outside the store): what was logged is written.
            with trio.CancelScope(shield=True):
                await self._write_audit_backlog()

    async def _write_audit_backlog(self) -> None:
        rows, self._audit_backlog = self._audit_backlog, []
        if not rows:
            return
        try:
            with trio.CancelScope(shield=True):  # rows taken are written, even at exit
                await self._write_audit_rows(rows)
        finally:
            self._audit_settled += len(rows)
            done, self._audit_progress = self._audit_progress, trio.Event()
            done.set()

    async def _write_audit_rows(self, items: list[tuple[str, tuple]]) -> None:
        by_sql: dict[str, list[tuple]] = {}
        for sql, row in items:
            by_sql.setdefault(sql, []).append(row)

        def work(conn: sqlite3.Connection) -> None:
            for sql, rows in by_sql.items():
                conn.executemany(sql, rows)

        try:
            await self.write("record tool calls and usage", work)
            return
        except Exception as exc:
            error: Exception = exc
        if isinstance(error.__cause__, sqlite3.OperationalError) and _is_locked(error.__cause__):
            await trio.sleep(AUDIT_RETRY_S)  # another process held the lock: once more, whole
            try:
                await self.write("record tool calls and usage", work)
                return
            except Exception as exc:
                log.error("%s: %d audit/usage rows could not be written: %s", self.path, len(items), exc)
                return
        # One bad row must not cost the others theirs: write them one by one.
        lost = 0
        for sql, row in items:
            try:
                await self.write("record a row", lambda conn, sql=sql, row=row: conn.execute(sql, row))
            except Exception:
                lost += 1
        if lost:
            log.error("%s: %d of %d audit/usage rows could not be written: %s", self.path, lost, len(items), error)

    async def audit(
        self, *, agent: str | None = None, trace_id: str | None = None, limit: int = 100
    ) -> list[AuditRecord]:
        """Audit records, newest first, optionally only one agent's or one trace's
        (including every row logged before this call)."""
        limit = _check_limit(limit, optional=False)
        await self.flush_audit()
        where, params = [], []
        if agent is not None:
            where.append("agent = ?")
            params.append(_check_id("agent", agent))
        if trace_id is not None:
            where.append("trace_id = ?")
            params.append(_check_id("trace_id", trace_id))
        sql = (
            "SELECT ts, trace_id, span_id, agent, tool, arguments, duration_ms, outcome, error, "
            "session_id FROM audit"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY id DESC LIMIT ?"
        )
        names = [f.name for f in attrs.fields(AuditRecord)]

        def work(conn: sqlite3.Connection) -> list[AuditRecord]:
            return [
                AuditRecord(**dict(zip(names, row, strict=True)))
                for row in conn.execute(sql, (*params, limit))
            ]

        return await self._run("read the audit log", work)

    # -- token usage --

    async def record_usage(
        self,
        agent: str,
        session_id: str | None,
        provider: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
    ) -> None:
        """Record the tokens one model call used (``model`` may be "" when unnamed)."""
        row = _usage_row(agent, session_id, provider, model, input_tokens, output_tokens)
        await self.write("record usage", lambda c: c.execute(_INSERT_USAGE, row))

    async def log_usage(
        self,
        agent: str,
        session_id: str | None,
        provider: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
    ) -> None:
        """``record_usage``, write-behind like ``log_tool_call`` (``usage_by_agent``
        includes it; waits only when the backlog is full; not a cancel point). Without a
        running writer this is ``record_usage``, shielded."""
        if not self._audit_writer_running:
            with trio.CancelScope(shield=True):
                await self.record_usage(agent, session_id, provider, model, input_tokens, output_tokens)
            return
        row = _usage_row(agent, session_id, provider, model, input_tokens, output_tokens)
        await self._log_behind_waiting(_INSERT_USAGE, row)

    def log_usage_nowait(
        self,
        agent: str,
        session_id: str | None,
        provider: str,
        model: str,
        input_tokens: int,
        output_tokens: int,
    ) -> bool:
        """``log_usage`` without waiting: False (nothing logged) when the writer is not
        running or its backlog is full; then call ``log_usage``. Unlike the audit rows
        (logged by a tool's caller, which yields when the writer is behind), usage is logged
        inside an agent's run, which holds one of its concurrency slots: it does not yield."""
        row = _usage_row(agent, session_id, provider, model, input_tokens, output_tokens)
        return self._log_behind_nowait(_INSERT_USAGE, row, yield_at=MAX_AUDIT_BACKLOG)

    async def usage_by_agent(self) -> dict[str, dict]:
        """Totals per agent: ``{agent: {input_tokens, output_tokens, requests}}`` (including
        usage logged write-behind before this call)."""
        await self.flush_audit()

        def work(conn: sqlite3.Connection) -> dict[str, dict]:
            rows = conn.execute(
                "SELECT agent, SUM(input_tokens), SUM(output_tokens), COUNT(*) FROM usage "
                "GROUP BY agent ORDER BY agent"
            )
            return {
                agent: {"input_tokens": i, "output_tokens": o, "requests": n}
                for agent, i, o, n in rows
            }

        return await self._run("read usage", work)


# ---- opening ---------------------------------------------------------------------------


def _refuse_foreign_file(path: Path) -> None:
    """Refuse, without opening it, a path that holds something other than an SQLite DB."""
    if not path.exists():
        return
    if not path.is_file():
        raise StoreError(f"{path}: not a regular file; point the store at a file path")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the database: {exc.strerror or exc}") from exc
    if header and header != SQLITE_HEADER:
        raise StoreError(
            f"{path}: not an SQLite database; it was left untouched — move it away or "
            "choose another path"
        )


def _migrate(conn: sqlite3.Connection, label: str, legacy_owner: str) -> None:
    target = schema_version()
    while True:
        version = None
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read inside the write lock, so two processes never run the same migration.
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version >= target:
                conn.execute("ROLLBACK")
                return
            for statement in _MIGRATIONS[version]:
                if ":legacy_owner" in statement:
                    conn.execute(statement, {"legacy_owner": legacy_owner})
                else:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        except BaseException as exc:
            conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(
                    f"{label}: upgrading the schema from version {version} failed: {exc}; "
                    "the database was left at that version"
                ) from exc
            raise
        conn.execute("COMMIT")


def _connect(path: str, synchronous: str, legacy_owner: str = DEFAULT_OWNER) -> sqlite3.Connection:
    label = path
    if path != MEMORY:
        file = Path(path)
        _refuse_foreign_file(file)
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{path}: cannot create its directory: {exc.strerror or exc}") from exc
    try:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreError(f"{label}: cannot open the database: {exc}") from exc
    try:
        # Read-only probes first: a corrupt or foreign file fails here, before any write.
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if version > schema_version():
            raise StoreError(
                f"{label}: written by a newer roost (schema version {version}; this one knows "
                f"up to {schema_version()}); upgrade roost — the database was left untouched"
            )
        foreign = {t for t in tables if not t.startswith("sqlite_")}
        if version == 0 and foreign:
            raise StoreError(
                f"{label}: an SQLite database that is not roost's (tables: "
                f"{', '.join(sorted(foreign))}); it was left untouched — choose another path"
            )
        conn.execute("PRAGMA journal_mode = WAL")
        apply_durability(conn, synchronous)
        conn.execute("PRAGMA foreign_keys = ON")
        _migrate(conn, label, legacy_owner)
    except sqlite3.OperationalError as exc:  # locked, read-only, I/O error...
        conn.close()
        raise StoreError(f"{label}: cannot open the database: {exc}") from exc
    except sqlite3.DatabaseError as exc:  # not a database, or corrupt
        conn.close()
        raise StoreError(
            f"{label}: unreadable database ({exc}); it was left untouched — restore a backup "
            "or choose another path"
        ) from exc
    except BaseException:
        conn.close()
        raise
    return conn


@asynccontextmanager
async def open_store(
    path: Path | str, *, synchronous: str = "NORMAL", legacy_owner: str = DEFAULT_OWNER
) -> AsyncIterator[SqliteStore]:
    """Open (creating and upgrading if needed) the SQLite store at ``path``.

    ``legacy_owner``: the principal that sessions stored before sessions had owners
    (schema 1) are given when the schema is upgraded.

    ``":memory:"`` gives a private in-memory store (for tests). The connection is closed
    when the block exits, after any operation still running.
    """
    if not isinstance(path, (str, Path)) or not str(path):
        raise StoreError(f"path: expected a file path or ':memory:', got {path!r}")
    mode = synchronous_mode(synchronous, StoreError)
    text = path if path == MEMORY else str(Path(path).expanduser().absolute())
    _check_id("legacy_owner", legacy_owner)
    conn = await trio.to_thread.run_sync(_connect, text, mode, legacy_owner)
    store = SqliteStore(conn, text, mode)
    body_error: Exception | None = None
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run_audit_writer)
            try:
                yield store
            except Exception as exc:
                body_error = exc  # re-raised below as itself, not wrapped in the nursery's group
            finally:
                with trio.CancelScope(shield=True):
                    try:
                        await store.flush_audit()
                    except StoreError as exc:
                        log.error("%s", exc)
                nursery.cancel_scope.cancel()
        if body_error is not None:
            raise body_error
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
