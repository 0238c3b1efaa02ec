"""The A2A task store: a ``roost.kernel.SqliteDatabase`` at ``<home>/a2a.db``.

Rows are A2A-agnostic (id, context id, agent, state, terminal flag, owner, JSON data). Past
``max_tasks`` rows the oldest *terminal* tasks are evicted; if every task is unfinished, a
new one is refused. Readers pass the caller's principal and never see another's tasks.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
from roost.kernel import RoostError, SqliteDatabase, jsonrpc

log = logging.getLogger("roost.a2a")
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
# Only a write this big checks the byte bound: below it, max_tasks bounds the bytes anyway
# (1000 small tasks are a few MB), and every write stays one statement.
_BIG_ROW = 64 * 1024
# Migration i takes the schema from version i to i + 1. Append, never edit.
_MIGRATIONS = (
    (
        """CREATE TABLE tasks (
            id TEXT PRIMARY KEY,
            context_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            state TEXT NOT NULL,
            terminal INTEGER NOT NULL,
            data TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        )""",
        "CREATE INDEX tasks_by_update ON tasks (updated_at, id)",
        "CREATE INDEX tasks_by_context ON tasks (context_id, updated_at)",
        """CREATE TABLE push_configs (
            task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
            id TEXT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (task_id, id)
        )""",
    ),
    # 2: a task's artifacts (files included, base64) live in their own column, so that
    # listing tasks never reads them unless asked; ``size`` (bytes of both) bounds the
    # store. Old rows keep their artifacts in data.
    (
        "ALTER TABLE tasks ADD COLUMN artifacts TEXT",
        "ALTER TABLE tasks ADD COLUMN size INTEGER NOT NULL DEFAULT 0",
        "UPDATE tasks SET size = length(data)",
    ),
    # 3: tasks belong to a principal; existing ones are given :legacy_owner. (Also the
    # indexes of schema 2 as it last was: SUM(size) from an index; eviction walks
    # tasks_by_update, without an index of its own.)
    (
        "ALTER TABLE tasks ADD COLUMN owner TEXT NOT NULL DEFAULT 'local'",
        "UPDATE tasks SET owner = :legacy_owner",
        "CREATE INDEX IF NOT EXISTS tasks_by_size ON tasks (size)",
        "DROP INDEX IF EXISTS tasks_terminal",
    ),
)


class TaskStoreError(RoostError):
    """The task store failed or refused (e.g. full of unfinished tasks)."""

    code = "a2a_store_error"


class TaskStorageFailed(TaskStoreError):
    """The database failed (e.g. the disk is full): nothing of the operation was kept."""


class TaskStoreFull(TaskStoreError):
    """Every one of the ``max_tasks`` stored tasks is unfinished: a new one is refused."""


class TooManyPushConfigs(TaskStoreError):
    """The task already has the most push configs one task may have."""


MAX_PUSH_CONFIGS = 10  # per task

PushRow = tuple[str, dict]
"""A push config to store with a task's row: (its id, its JSON data)."""


def _put_push(conn: sqlite3.Connection, task_id: str, push: PushRow, max_per_task: int) -> None:
    config_id, data = push
    (n,) = conn.execute(
        "SELECT COUNT(*) FROM push_configs WHERE task_id = ? AND id != ?", (task_id, config_id)
    ).fetchone()
    if n >= max_per_task:
        raise TooManyPushConfigs(
            f"task {task_id} already has {n} push-notification configs (at most "
            f"{max_per_task}); delete one (DeleteTaskPushNotificationConfig) first"
        )
    conn.execute(
        "INSERT OR REPLACE INTO push_configs (task_id, id, data) VALUES (?, ?, ?)",
        (task_id, config_id, json.dumps(data, ensure_ascii=False)),
    )


@attrs.frozen
class TaskRow:
    """One stored task; ``owner`` is the principal that made it."""

    id: str
    context_id: str
    agent: str
    state: str
    terminal: bool
    data: dict[str, Any]
    created_at: float
    updated_at: float
    owner: str = "local"


def _row(r: tuple) -> TaskRow:
    """A row of ``SELECT {_COLUMNS}, artifacts`` (or ``NULL`` for them) as a ``TaskRow``."""
    data = json.loads(r[5])
    if r[9] is not None and isinstance(data.get("task"), dict):
        data["task"]["artifacts"] = json.loads(r[9])
    return TaskRow(r[0], r[1], r[2], r[3], bool(r[4]), data, r[6], r[7], r[8])


# Built once (``JSONEncoder.encode`` builds a C encoder per call); compact, and without
# circular checks, so it keeps no state (task data comes from the models' ``to_json``).
_encode = jsonrpc.make_encoder(allow_nan=True)


def _split(data: dict) -> tuple[str, str | None, int]:
    """``data`` as (its JSON without the task's artifacts, the artifacts' JSON, bytes)."""
    task = data.get("task")
    artifacts = None
    if isinstance(task, dict) and task.get("artifacts"):
        data = {**data, "task": {k: v for k, v in task.items() if k != "artifacts"}}
        artifacts = _encode(task["artifacts"])
    encoded = _encode(data)
    return encoded, artifacts, len(encoded) + len(artifacts or "")


_COLUMNS = "id, context_id, agent, state, terminal, data, created_at, updated_at, owner"
_INSERT = f"INSERT INTO tasks ({_COLUMNS}, artifacts, size) VALUES ({', '.join('?' * 11)})"
_UPDATE = (
    "UPDATE tasks SET state = ?, terminal = ?, data = ?, updated_at = ?, artifacts = ?, "
    "size = ? WHERE id = ?"
)


class TaskStore(SqliteDatabase):
    """Async SQLite task store; open it with ``open_task_store``."""

    migrations = _MIGRATIONS
    error = TaskStorageFailed
    what = "task store"

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: str,
        synchronous: str,
        *,
        max_tasks: int,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        super().__init__(conn, path, synchronous)
        self.max_tasks = max_tasks
        self.max_bytes = max_bytes
        # The table's row count, kept by inserts so that each need not count (O(n)); None:
        # unknown. It may be one too high, never too low; eviction follows a fresh count.
        self._count: int | None = None
        # Rows promised by ``reserve()`` and not written yet: room every insert leaves free.
        self._reserved = 0
        # Plain inserts under way: their rows are not in ``_count`` until their work has run
        # (on the database's thread, possibly after a ``reserve()``), so ``reserve`` counts them.
        self._inserting = 0

    def reserve(self) -> bool:
        """Hold room for one task whose row is written later, by ``insert(reserved=True)``
        (or given back with ``release()``). False, holding nothing, when that room is not
        known to be free without evicting: then insert the row now."""
        count = self._count
        if count is None or count + self._inserting + self._reserved + 1 > self.max_tasks:
            return False
        self._reserved += 1
        return True

    def release(self) -> None:
        """Give back a ``reserve()`` whose row will never be written."""
        if self._reserved <= 0:
            log.error("A2A task store: a reservation was given back twice (ignored)")
            return
        self._reserved -= 1

    async def insert(
        self,
        *,
        id: str,
        context_id: str,
        agent: str,
        state: str,
        terminal: bool,
        data: dict,
        owner: str = "local",
        durable: bool = True,
        reserved: bool = False,
        shield: bool = False,
        push: PushRow | None = None,
    ) -> list[str]:
        """Store a new task (and ``push``, its first push config, in the same transaction);
        returns the ids of terminal tasks evicted past ``max_tasks``
        (reserved room counts as taken), TaskStoreFull if all are unfinished.
        ``durable=False``: no fsync of its own (a later durable write covers it);
        ``reserved``: the row ``reserve()`` held room for; ``shield``: not cancellable (else
        withdrawn if cancelled while queued; once its batch runs, it is answered anyway, so
        the evicted ids are never lost, and the cancellation comes at the next checkpoint)."""
        encoded, artifacts, size = _split(data)
        now = time.time()
        row = (id, context_id, agent, state, terminal, encoded, now, now, owner, artifacts, size)

        def work(conn: sqlite3.Connection) -> list[str]:
            count = self._count
            held = self._reserved - reserved  # room promised to other tasks
            if count is None or count + 1 + held > self.max_tasks:
                (count,) = conn.execute("SELECT COUNT(*) FROM tasks").fetchone()
            evicted: list[str] = []
            excess = count + 1 + held - self.max_tasks
            if excess > 0:
                evicted = [
                    r[0]
                    for r in conn.execute(
                        "SELECT id FROM tasks WHERE terminal = 1 ORDER BY updated_at, id LIMIT ?",
                        (excess,),
                    )
                ]
                if len(evicted) < excess:
                    unfinished = count - len(evicted) + max(held, 0)
                    raise TaskStoreFull(
                        f"the task store holds {unfinished} unfinished tasks "
                        f"(a2a.max_tasks = {self.max_tasks}); "
                        "wait for some to finish, cancel them, or raise a2a.max_tasks in roost.toml"
                    )
                conn.executemany("DELETE FROM tasks WHERE id = ?", [(e,) for e in evicted])
            conn.execute(_INSERT, row)
            if push is not None:
                _put_push(conn, id, push, MAX_PUSH_CONFIGS)
            evicted += self._evict_for_bytes(conn, keep=id) if size > _BIG_ROW else []
            # Kept unless more than one row was evicted: if this transaction does not commit,
            # the count is then one too high or right (harmless: the bound recounts), never
            # too low. (A full store evicts one row per insert, so it keeps its count.)
            self._count = count + 1 - len(evicted) if len(evicted) <= 1 else None
            return evicted

        if not reserved:
            self._inserting += 1
        try:
            evicted = await self.write("store a task", work, durable=durable, shield=shield)
        except BaseException:
            self._count = None  # the transaction may not have committed: count again
            raise
        finally:
            if not reserved:
                self._inserting -= 1
        if reserved:
            self.release()
        return evicted

    def _evict_for_bytes(self, conn: sqlite3.Connection, *, keep: str) -> list[str]:
        """Past ``max_bytes``, the oldest finished tasks (not ``keep``) go first."""
        (total,) = conn.execute("SELECT COALESCE(SUM(size), 0) FROM tasks").fetchone()
        evicted: list[str] = []
        if total <= self.max_bytes:
            return evicted
        for tid, size in conn.execute(
            "SELECT id, size FROM tasks WHERE terminal = 1 AND id != ? ORDER BY updated_at, id",
            (keep,),
        ).fetchall():
            if total <= self.max_bytes:
                break
            evicted.append(tid)
            total -= size
        conn.executemany("DELETE FROM tasks WHERE id = ?", [(e,) for e in evicted])
        if evicted:
            self._count = None  # count again (update; an insert sets the count itself)
            log.info(
                "A2A task store over %d bytes: evicted %d finished task(s)",
                self.max_bytes,
                len(evicted),
            )
        return evicted

    async def update(
        self,
        id: str,
        *,
        state: str,
        terminal: bool,
        data: dict,
        shield: bool = False,
        push: PushRow | None = None,
    ) -> list[str]:
        """Replace a task's state and data (and store ``push``, in the same transaction);
        returns the finished ones evicted past ``max_bytes``."""
        encoded, artifacts, size = _split(data)
        now = time.time()

        def work(conn: sqlite3.Connection) -> list[str]:
            conn.execute(_UPDATE, (state, int(terminal), encoded, now, artifacts, size, id))
            if push is not None:
                _put_push(conn, id, push, MAX_PUSH_CONFIGS)
            return self._evict_for_bytes(conn, keep=id) if size > _BIG_ROW else []

        try:
            return await self.write("update a task", work, shield=shield)
        except BaseException:
            self._count = None  # an eviction may not have committed: count again
            raise

    async def get(self, id: str) -> TaskRow | None:
        def work(conn: sqlite3.Connection) -> TaskRow | None:
            r = conn.execute(
                f"SELECT {_COLUMNS}, artifacts FROM tasks WHERE id = ?", (id,)
            ).fetchone()
            return _row(r) if r else None

        return await self.read("read a task", work)

    async def list(
        self,
        *,
        context_id: str | None = None,
        state: str | None = None,
        agent: str | None = None,
        updated_after: float | None = None,
        limit: int = 50,
        before: tuple[float, str] | None = None,
        with_artifacts: bool = False,
        owner: str | None = None,
    ) -> tuple[list[TaskRow], int]:
        """Tasks (of ``owner``, else everyone's) newest first (by last update) and the total
        matching count; their artifacts only ``with_artifacts`` (they may hold files)."""
        given = {
            "owner = ?": owner,
            "context_id = ?": context_id,
            "state = ?": state,
            "agent = ?": agent,
            "updated_at > ?": updated_after,
        }
        where = [column for column, value in given.items() if value is not None] or ["1"]
        args: list[Any] = [value for value in given.values() if value is not None]
        clause = " AND ".join(where)

        def work(conn: sqlite3.Connection) -> tuple[list[TaskRow], int]:
            (total,) = conn.execute(f"SELECT COUNT(*) FROM tasks WHERE {clause}", args).fetchone()
            page_clause, page_args = clause, list(args)
            if before is not None:
                page_clause += " AND (updated_at < ? OR (updated_at = ? AND id < ?))"
                page_args += [before[0], before[0], before[1]]
            extra = ", artifacts" if with_artifacts else ", NULL"
            rows = conn.execute(
                f"SELECT {_COLUMNS}{extra} FROM tasks WHERE {page_clause} "
                "ORDER BY updated_at DESC, id DESC LIMIT ?",
                (*page_args, limit),
            ).fetchall()
            return [_row(r) for r in rows], total

        return await self.read("list tasks", work)

    async def unfinished(self) -> list[tuple[str, str, str, float]]:
        """``(id, owner, state, updated_at)`` of every unfinished task, oldest update first."""

        def work(conn: sqlite3.Connection) -> list[tuple[str, str, str, float]]:
            return conn.execute(
                "SELECT id, owner, state, updated_at FROM tasks "
                "WHERE terminal = 0 ORDER BY updated_at, id"
            ).fetchall()

        return await self.read("list unfinished tasks", work)

    async def fail_unfinished(
        self, failed_data: Callable[[dict], dict], states: tuple[str, ...], failed: str
    ) -> list[str]:
        """Mark tasks left in ``states`` (in flight when the daemon died) terminal in state
        ``failed``, each with ``failed_data(data)`` as its data; returns the ids changed."""

        def work(conn: sqlite3.Connection) -> list[str]:
            marks = ",".join("?" for _ in states)
            rows = conn.execute(
                f"SELECT {_COLUMNS}, artifacts FROM tasks WHERE terminal "
                f"= 0 AND state IN ({marks})",
                states,
            ).fetchall()
            changed = []
            for r in rows:
                row = _row(r)
                encoded, artifacts, size = _split(failed_data(row.data))
                conn.execute(_UPDATE, (failed, 1, encoded, time.time(), artifacts, size, row.id))
                changed.append(row.id)
            return changed

        return await self.write("recover unfinished tasks", work)

    async def put_push_config(
        self, task_id: str, config_id: str, data: dict, *, max_per_task: int = MAX_PUSH_CONFIGS
    ) -> None:
        """Store (or replace) a push config of a stored task; TooManyPushConfigs past the bound."""
        await self.write(
            "store a push config",
            lambda conn: _put_push(conn, task_id, (config_id, data), max_per_task),
        )

    async def push_configs(self, task_id: str) -> list[dict]:
        def work(conn: sqlite3.Connection) -> list[dict]:
            rows = conn.execute(
                "SELECT data FROM push_configs WHERE task_id = ? ORDER BY rowid", (task_id,)
            )
            return [json.loads(r[0]) for r in rows]

        return await self.read("read push configs", work)

    async def delete_push_config(self, task_id: str, config_id: str) -> None:
        sql, args = "DELETE FROM push_configs WHERE task_id = ? AND id = ?", (task_id, config_id)
        await self.write("delete a push config", lambda conn: conn.execute(sql, args))


@asynccontextmanager
async def open_task_store(
    path: Path | str,
    *,
    max_tasks: int = 1000,
    synchronous: str = "normal",
    max_bytes: int = DEFAULT_MAX_BYTES,
    legacy_owner: str = "local",
) -> AsyncIterator[TaskStore]:
    """Open (creating or upgrading) the task store at ``path``; ``legacy_owner`` is given
    the tasks stored before tasks had owners."""
    async with TaskStore.open(
        path,
        synchronous=synchronous,
        params={"legacy_owner": legacy_owner},
        max_tasks=max_tasks,
        max_bytes=max_bytes,
    ) as store:
        # Known from the start, so the first blocking sends may defer their rows (``reserve``).
        store._count = await store.read(
            "count the tasks", lambda c: c.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
        )
        yield store
