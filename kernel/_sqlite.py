"""SQLite infrastructure shared by the kernel's store and plugins' stores (A2A tasks).

``SqliteDatabase``: one database file in WAL mode with a thread of its own; ``read`` and
``write`` queue work for it, so the event loop never waits on disk or SQLite.

Group commit: writes queued while the thread is busy run as ONE transaction, each in its
own SAVEPOINT (a failing write is rolled back alone). A read runs after the writes queued
before it; a write returns only after its commit (``wait=False``: written behind, for what
nobody is answered about). The queue is bounded; a cancelled caller's queued write is
withdrawn; one already in a batch commits and its caller gets the result (what it changed),
its cancellation coming at its next checkpoint: as in Trio, Cancelled means "not done".

Durability (``[store] synchronous``): ``"normal"`` survives roost being killed (a power
loss may lose the last commits); ``"full"`` fsyncs each batch before answering, but one of
only ``durable=False`` writes (the next durable fsync covers them: the WAL is sequential).
Another process's lock is waited for up to ``BUSY_TIMEOUT_MS``. The schema is versioned
(``PRAGMA user_version``, forward migrations); a newer roost's, a foreign, corrupt or
non-SQLite file is refused, naming the path, and left untouched.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from ._errors import RoostError

MEMORY = ":memory:"
SQLITE_HEADER = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 5000
SYNCHRONOUS_MODES = ("FULL", "NORMAL", "EXTRA")
MAX_PENDING_WRITES = 1024
MAX_BATCH = 256

log = logging.getLogger("roost.store")
_T = TypeVar("_T")
_D = TypeVar("_D", bound="SqliteDatabase")

# sqlite3 binds None as NULL only after failing to find an adapter (an AttributeError raised
# and cleared each time); this identity adapter is found at once (process-wide, no change).
sqlite3.register_adapter(type(None), lambda value: value)


class StoreError(RoostError, code="store_error"):
    """The store refused an operation or the database failed; says which and why."""


# What a write's work may raise that is reported as the store's error: the database's
# errors, and text SQLite cannot take (a lone surrogate cannot be encoded as UTF-8).
STORE_FAILURES = (sqlite3.Error, UnicodeError)


def synchronous_mode(value: Any, error: type[Exception]) -> str:
    """``[store] synchronous`` as SQLite spells it; ``error`` (naming the choices) if unknown."""
    mode = str(value).upper()
    if mode not in SYNCHRONOUS_MODES:
        raise error(f"synchronous: expected one of {', '.join(SYNCHRONOUS_MODES)}, got {value!r}")
    return mode


# ---- the database thread ---------------------------------------------------------------


@attrs.define(eq=False)
class _Op:
    operation: str
    work: Callable[[sqlite3.Connection], Any]
    write: bool = True
    durable: bool = True
    task: Any = None  # the task waiting for it (None: written behind, nobody waits)
    state: str = "queued"  # queued → running → done
    result: Any = None
    error: BaseException | None = None


Migrations = tuple[tuple[str, ...], ...]
"""Migration i takes the schema from version i to i + 1: SQL statements, which may use the
named parameters ``open`` is given (``:legacy_owner``). Append, never edit."""


class SqliteDatabase:
    """One SQLite database and its thread. Subclass it with ``migrations``, ``error`` (what
    a failed operation raises) and ``what`` (how messages name it); open it with ``open``."""

    migrations: Migrations = ()
    error: type[Exception] = StoreError
    what = "store"
    max_pending = MAX_PENDING_WRITES
    max_batch = MAX_BATCH

    def __init__(
        self, connection: sqlite3.Connection, path: str, synchronous: str = "NORMAL"
    ) -> None:
        self.path = path
        self.batches = 0  # how many batches the thread ran (for tests and benches)
        self._conn = connection
        self._synchronous = synchronous_mode(synchronous, self.error)
        self._current_sync = self._synchronous  # what the connection is set to now
        self._queue: list[_Op] = []  # guarded by _lock (the loop adds, the thread takes)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._closing = False
        self._closed = trio.Event()
        self._room = trio.Event()  # set (and replaced) after each batch
        self._token = trio.lowlevel.current_trio_token()
        trio.lowlevel.start_thread_soon(
            self._serve, self._stopped, name=f"roost sqlite {Path(path).name}"
        )

    @property
    def closed(self) -> bool:
        return self._closing

    def _wrap(self, operation: str, exc: BaseException) -> BaseException:
        """A failed operation's error: where, doing what, and why."""
        if not isinstance(exc, STORE_FAILURES):
            return exc
        if isinstance(exc, UnicodeError):
            why = f"the data holds text that is not valid Unicode ({exc})"
        else:
            why = str(exc) or type(exc).__name__
        hint = "; free space on its disk" if "full" in why else ""
        error = self.error(f"storage failed: {self.path}: could not {operation}: {why}{hint}")
        error.__cause__ = exc
        return error

    async def write(
        self,
        operation: str,
        work: Callable[[sqlite3.Connection], _T],
        *,
        durable: bool = True,
        shield: bool = False,
        wait: bool = True,
    ) -> _T:
        """``work(conn)``'s result once committed, one atomic write (``operation`` names it in
        errors; ``work`` must not BEGIN, COMMIT or ROLLBACK). Cancelled while queued, it is
        withdrawn (Cancelled); once its batch runs, the caller gets its committed result (and
        the cancellation at its next checkpoint), or Cancelled if it failed. ``shield``: never
        withdrawn, answered even if the caller is cancelled; ``wait=False``: written behind
        (None once queued, failures logged)."""
        return await self._submit(
            _Op(operation, work, True, durable), shield=shield or not wait, wait=wait
        )

    async def read(self, operation: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run the read-only ``work(conn)`` on the database's thread and return its result."""
        return await self._submit(_Op(operation, work, False), shield=False, wait=True)

    async def _submit(self, op: _Op, *, shield: bool, wait: bool) -> Any:
        if len(self._queue) >= self.max_pending:  # back-pressure: the queue is bounded
            with trio.CancelScope(shield=shield):
                while len(self._queue) >= self.max_pending and not self._closing:
                    await self._room.wait()
        if self._closing:
            raise self.error(f"{self.path}: the {self.what} is closed; cannot {op.operation}")
        if wait:
            op.task = trio.lowlevel.current_task()
        with self._lock:
            self._queue.append(op)
            if len(self._queue) == 1:  # the thread waits for work only when there is none
                self._ready.notify()
        if not wait:
            return None

        def abort(_: Any) -> trio.lowlevel.Abort:
            with self._lock:
                if shield or op.state != "queued":  # taken into a batch: it runs anyway
                    return trio.lowlevel.Abort.FAILED
                self._queue.remove(op)  # never started: withdrawn
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        if not shield and op.error is not None:
            # Failed (nothing committed) while its caller was cancelled: Cancelled.
            await trio.lowlevel.checkpoint_if_cancelled()
        if op.error is not None:
            raise op.error
        return op.result

    async def aclose(self) -> None:
        """Run what is queued, then stop the thread and close the connection."""
        with self._lock:
            self._closing = True
            self._ready.notify()
        with trio.CancelScope(shield=True):
            await self._closed.wait()

    # -- on the database's thread --

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closing:
                    self._ready.wait()
                if not self._queue:
                    break
                batch = self._queue[: self.max_batch]
                del self._queue[: self.max_batch]
                for op in batch:
                    op.state = "running"
            self._run(batch)
            self._token.run_sync_soon(self._deliver, batch)
        self._conn.close()

    def _run(self, batch: list[_Op]) -> None:
        writes: list[_Op] = []  # in queue order: a read sees the writes queued before it
        for op in batch:
            if op.write:
                writes.append(op)
                continue
            if writes:
                self._commit(writes)
                writes = []
            try:
                op.result = op.work(self._conn)
            except Exception as exc:
                op.error = self._wrap(op.operation, exc)
        if writes:
            self._commit(writes)

    def _commit(self, batch: list[_Op]) -> None:
        """BEGIN, one SAVEPOINT per write (none when alone), COMMIT."""
        conn = self._conn
        try:
            wanted = self._synchronous if any(op.durable for op in batch) else "NORMAL"
            if wanted != self._current_sync:
                conn.execute(f"PRAGMA synchronous = {wanted}")
                self._current_sync = wanted
            conn.execute("BEGIN IMMEDIATE")  # waits for another process's lock (busy_timeout)
        except Exception as exc:
            for op in batch:
                op.error = self._wrap(op.operation, exc)
            return
        alone = len(batch) == 1  # its own transaction is its savepoint
        try:
            for op in batch:
                if alone:
                    op.result = op.work(conn)
                    continue
                conn.execute("SAVEPOINT roost_item")
                try:
                    op.result = op.work(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO roost_item")
                    op.error = self._wrap(op.operation, exc)
                conn.execute("RELEASE roost_item")
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            for op in batch:
                if op.error is None:
                    op.result, op.error = None, self._wrap(op.operation, exc)
            if not isinstance(exc, Exception):
                raise

    # -- back on the event loop --

    def _deliver(self, batch: list[_Op]) -> None:
        self.batches += 1
        for op in batch:
            op.state = "done"
            if op.task is not None:
                trio.lowlevel.reschedule(op.task)
            elif op.error is not None:
                log.error("%s", op.error)
        self._room.set()
        self._room = trio.Event()

    def _stopped(self, outcome: Any) -> None:
        """On the thread, as it ends: tell the loop (an error of ``_serve`` is a bug)."""

        def done() -> None:
            self._closing = True
            try:
                outcome.unwrap()
            except BaseException:
                log.exception("%s: the database thread failed", self.path)
            self._closed.set()

        self._token.run_sync_soon(done)

    @classmethod
    @asynccontextmanager
    async def open(
        cls: type[_D],
        path: Path | str,
        *,
        synchronous: str = "normal",
        params: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[_D]:
        """Open (creating and upgrading) the database at ``path`` or ``":memory:"``; ``params``
        fill the migrations' named parameters, ``kwargs`` go to the constructor."""
        if not isinstance(path, (str, Path)) or not str(path):
            raise cls.error(f"path: expected a file path or ':memory:', got {path!r}")
        mode = synchronous_mode(synchronous, cls.error)
        text = MEMORY if str(path) == MEMORY else str(Path(path).expanduser().absolute())
        conn = await trio.to_thread.run_sync(
            _connect, text, mode, cls.migrations, dict(params or {}), cls.error
        )
        database = cls(conn, text, mode, **kwargs)
        try:
            yield database
        finally:
            await database.aclose()


def _refuse_foreign_file(path: Path, error: type[Exception]) -> None:
    """Refuse, without opening it, a path that holds something other than an SQLite DB."""
    if not path.exists():
        return
    if not path.is_file():
        raise error(f"{path}: not a regular file; point the store at a file path")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise error(f"{path}: cannot read the database: {exc.strerror or exc}") from exc
    if header and header != SQLITE_HEADER:
        raise error(
            f"{path}: not an SQLite database; it was left untouched — "
            "move it away or choose another path"
        )


def _migrate(
    conn: sqlite3.Connection,
    path: str,
    migrations: Migrations,
    params: dict,
    error: type[Exception],
) -> None:
    while True:
        version = None
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read inside the write lock, so two processes never run the same migration.
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version >= len(migrations):
                conn.execute("ROLLBACK")
                return
            for statement in migrations[version]:
                conn.execute(statement, params)
            conn.execute(f"PRAGMA user_version = {version + 1}")
        except BaseException as exc:
            conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise error(
                    f"{path}: upgrading the schema from version {version} failed: {exc}; "
                    "the database was left at that version"
                ) from exc
            raise
        conn.execute("COMMIT")


def _connect(
    path: str, synchronous: str, migrations: Migrations, params: dict, error: type[Exception]
) -> sqlite3.Connection:
    if path != MEMORY:
        _refuse_foreign_file(Path(path), error)
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise error(f"{path}: cannot create its directory: {exc.strerror or exc}") from exc
    try:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    except sqlite3.Error as exc:
        raise error(f"{path}: cannot open the database: {exc}") from exc
    try:
        # Read-only probes first: a corrupt or foreign file fails here, before any write.
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if version > len(migrations):
            raise error(
                f"{path}: written by a newer roost (schema version {version}; this one knows "
                f"up to {len(migrations)}); upgrade roost — the database was left untouched"
            )
        foreign = {t for t in tables if not t.startswith("sqlite_")}
        if version == 0 and foreign:
            raise error(
                f"{path}: an SQLite database that is not roost's (tables: "
                f"{', '.join(sorted(foreign))}); it was left untouched — choose another path"
            )
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        _migrate(conn, path, migrations, params, error)
    except BaseException as exc:
        conn.close()
        if isinstance(exc, sqlite3.OperationalError):  # locked, read-only, I/O error...
            raise error(f"{path}: cannot open the database: {exc}") from exc
        if isinstance(exc, sqlite3.DatabaseError):  # not a database, or corrupt
            raise error(
                f"{path}: unreadable database ({exc}); it was left untouched — restore a "
                "backup or choose another path"
            ) from exc
        raise
    return conn
