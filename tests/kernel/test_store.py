"""The SQLite store: persistence across restarts, concurrency, bad input, bad files."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
import trio
from roost.kernel import (
    AuditRecord,
    SessionConflict,
    SqliteStore,
    Store,
    StoredMessage,
    StoreError,
    open_store,
)
from roost.kernel import _audit as audit_module
from roost.kernel import _sqlite as sqlite_module
from roost.kernel import _store as store_module
from waiting import ThreadGate


def msg(role: str, content: str | None, **data) -> dict:
    return {"role": role, "content": content, "data": data}


def sibling_files(path):
    return sorted(p.name for p in path.parent.iterdir())


# ---- persistence -----------------------------------------------------------------------


async def test_history_survives_a_restart(tmp_path):
    db = tmp_path / "roost.db"
    async with open_store(db) as store:
        await store.ensure_session("s1", "worker")
        await store.append_messages(
            "s1",
            "worker",
            [
                msg("user", "hello"),
                msg("assistant", None, tool_calls=[{"id": "c1", "name": "read"}]),
            ],
        )
        await store.append_messages("s1", "worker", [msg("tool", "file text", tool_call_id="c1")])
        await store.record_tool_call(AuditRecord(agent="worker", tool="read", arguments={"p": 1}))
        await store.record_usage("worker", "s1", "scripted", "rules", 10, 5)
    assert store.closed

    async with open_store(db) as store:
        history = await store.history("s1")
        assert [(m.seq, m.role, m.content) for m in history] == [
            (1, "user", "hello"),
            (2, "assistant", ""),
            (3, "tool", "file text"),
        ]
        assert history[1].data == {"tool_calls": [{"id": "c1", "name": "read"}]}
        assert history[2].data == {"tool_call_id": "c1"}
        assert all(isinstance(m, StoredMessage) and m.session_id == "s1" for m in history)
        (record,) = await store.audit()
        assert record.tool == "read" and json.loads(record.arguments) == {"p": 1}
        assert await store.usage_by_agent() == {
            "worker": {"input_tokens": 10, "output_tokens": 5, "requests": 1}
        }


async def test_a_write_is_committed_before_it_returns(tmp_path):
    db = tmp_path / "roost.db"
    async with open_store(db) as store:
        await store.append_messages("s", "a", [msg("user", "stored?")])
        # Another connection (as another process would) sees it while the store is open.
        other = sqlite3.connect(db)
        try:
            rows = other.execute("SELECT content FROM messages").fetchall()
        finally:
            other.close()
        assert rows == [("stored?",)]


def _pragmas(conn):
    return (
        conn.execute("PRAGMA journal_mode").fetchone()[0],
        conn.execute("PRAGMA synchronous").fetchone()[0],
        conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0],
        conn.execute("PRAGMA user_version").fetchone()[0],
    )


async def test_file_uses_wal_and_normal_sync_with_automatic_checkpoints(tmp_path):
    async with open_store(tmp_path / "roost.db") as store:
        pragmas = await store.read("read pragmas", _pragmas)
    # NORMAL is 1; SQLite's own checkpoints, on the database's thread.
    assert pragmas == ("wal", 1, 1000, len(store_module.SqliteStore.migrations))


async def test_full_sync_is_kept_for_those_who_ask(tmp_path):
    async with open_store(tmp_path / "roost.db", synchronous="full") as store:
        await store.append_messages("s", "a", [msg("user", "x")])
        pragmas = await store.read("read pragmas", _pragmas)
    assert pragmas == ("wal", 2, 1000, len(store_module.SqliteStore.migrations))


async def test_the_event_loop_never_waits_for_a_commit(tmp_path):
    # Regression: commits ran on the event loop's thread (synchronous = normal), so a big
    # or slow commit stopped every task. Every read and write now runs on the database's
    # own thread; here a write waits for another process's lock while a task ticks.
    db = tmp_path / "roost.db"
    threads: set[str] = set()

    def row(name):
        def work(conn):
            threads.add(threading.current_thread().name)
            conn.execute(_INSERT_USAGE_ROW, (name,))

        return work

    async with open_store(db) as store:
        await store.write("plain write", row("plain"))  # (on main: inline, on the loop)
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # as another roost process writing would
        written, ticked = trio.Event(), trio.Event()
        ticks, longest_gap = 0, 0.0

        async def write_behind_the_lock():
            await store.write("locked write", row("locked"))
            written.set()

        async def release_the_lock_once_ticked():
            await ticked.wait()
            assert not written.is_set()  # the write was waiting for the lock all along
            other.execute("COMMIT")
            other.close()

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write_behind_the_lock)
                nursery.start_soon(release_the_lock_once_ticked)
                last = time.perf_counter()
                while not written.is_set():
                    with trio.fail_after(0.5):  # the loop is never held for long
                        await trio.sleep(0.01)  # a tick of real time: the subject
                    now = time.perf_counter()
                    ticks, longest_gap, last = ticks + 1, max(longest_gap, now - last), now
                    if ticks == 50:
                        ticked.set()
        agents = [r[0] for r in await _rows(store, "SELECT agent FROM usage ORDER BY id")]
    assert agents == ["plain", "locked"]
    assert ticks >= 50 and longest_gap < 0.5
    assert threading.main_thread().name not in threads and len(threads) == 1


def test_an_acknowledged_write_survives_the_process_being_killed(tmp_path):
    db = tmp_path / "roost.db"
    script = (
        "import sys, trio\n"
        "from roost.kernel import open_store\n"
        "async def main():\n"
        "    async with open_store(sys.argv[1]) as store:\n"
        "        await store.append_messages('s', 'a', [{'role': 'user', 'content': 'kept'}])\n"
        "        print('stored', flush=True)\n"
        "        await trio.sleep(60)\n"
        "trio.run(main)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "stored"
    finally:
        proc.kill()  # SIGKILL: no close, no checkpoint
        proc.wait(timeout=10)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT content FROM messages").fetchall() == [("kept",)]
    finally:
        conn.close()


async def test_memory_store_and_protocol():
    async with open_store(":memory:") as store:
        assert isinstance(store, SqliteStore) and isinstance(store, Store)
        await store.append_messages("s", "a", [msg("user", "x")])
        assert len(await store.history("s")) == 1


# ---- history and sessions --------------------------------------------------------------


async def test_history_limit_returns_the_last_messages_in_order():
    async with open_store(":memory:") as store:
        await store.append_messages("s", "a", [msg("user", str(i)) for i in range(10)])
        last = await store.history("s", limit=3)
        assert [m.content for m in last] == ["7", "8", "9"]
        assert [m.seq for m in last] == [8, 9, 10]
        assert await store.history("unknown") == []


async def test_sessions_are_listed_newest_first_and_by_agent():
    async with open_store(":memory:") as store:
        await store.ensure_session("old", "a")
        await store.append_messages("other", "b", [msg("user", "x")])
        await store.append_messages("new", "a", [msg("user", "x"), msg("assistant", "y")])
        listed = await store.sessions()
        assert [s["id"] for s in listed] == ["new", "other", "old"]
        assert listed[0]["message_count"] == 2 and listed[0]["agent"] == "a"
        assert [s["id"] for s in await store.sessions(agent="a")] == ["new", "old"]
        assert len(await store.sessions(limit=1)) == 1
        await store.ensure_session("old", "a")  # idempotent
        assert len(await store.sessions()) == 3


async def test_a_session_of_another_agent_is_a_session_conflict_raised_by_the_store():
    # Regression: the store raised a StoreError (a storage failure, 503) and the agent
    # matched its text to turn it into the caller's mistake; now the store says so itself.
    async with open_store(":memory:") as store:
        await store.ensure_session("s", "a")
        with pytest.raises(
            SessionConflict, match="session 's' belongs to agent 'a', not 'b'"
        ) as caught:
            await store.append_messages("s", "b", [msg("user", "x")])
        assert (caught.value.session_id, caught.value.agent, caught.value.owner_agent) == (
            "s",
            "b",
            "a",
        )
        assert not isinstance(caught.value, StoreError)
        with pytest.raises(SessionConflict):
            await store.ensure_session("s", "b")
        with pytest.raises(SessionConflict):
            await store.start_exchange("s", "b", msg("user", "x"))
        assert await store.history("s") == []


async def test_session_agent_names_the_agent_of_the_owners_session():
    async with open_store(":memory:") as store:
        await store.ensure_session("s", "a", owner="alice")
        assert await store.session_agent("s", owner="alice") == "a"
        assert await store.session_agent("s", owner="bob") is None  # bob's "s" is another session
        assert await store.session_agent("nothing", owner="alice") is None
        with pytest.raises(StoreError, match="session_id"):
            await store.session_agent("", owner="alice")


# ---- concurrency -----------------------------------------------------------------------


async def test_many_tasks_writing_at_once(tmp_path):
    async with open_store(tmp_path / "roost.db") as store:

        async def writer(i: int) -> None:
            await store.append_messages(
                "shared", "a", [msg("user", f"q{i}"), msg("assistant", f"a{i}")]
            )
            await store.append_messages(f"own{i}", "a", [msg("user", "x")])
            await store.record_tool_call(AuditRecord(agent="a", tool=f"t{i}"))
            await store.record_usage("a", None, "p", "m", 1, 2)

        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(writer, i)

        history = await store.history("shared")
        assert [m.seq for m in history] == list(range(1, 81))
        # Each batch is atomic: every question is directly followed by its answer.
        for question, answer in zip(history[::2], history[1::2], strict=True):
            assert question.content[1:] == answer.content[1:]
        assert len(await store.sessions(limit=1000)) == 41
        assert len(await store.audit(limit=1000)) == 40
        assert (await store.usage_by_agent())["a"] == {
            "input_tokens": 40,
            "output_tokens": 80,
            "requests": 40,
        }


async def test_reads_and_writes_interleave_without_errors():
    async with open_store(":memory:") as store:
        seen: list[int] = []

        async def reader() -> None:
            for _ in range(20):
                seen.append(len(await store.history("s")))

        async def writer() -> None:
            for i in range(20):
                await store.append_messages("s", "a", [msg("user", str(i))])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            nursery.start_soon(writer)
        assert seen == sorted(seen) and len(await store.history("s")) == 20


# ---- bad input -------------------------------------------------------------------------


async def test_non_json_data_is_refused_and_nothing_is_stored():
    async with open_store(":memory:") as store:
        with pytest.raises(StoreError) as info:
            await store.append_messages(
                "s", "a", [msg("user", "fine"), msg("tool", "x", taint={"untrusted"})]
            )
        text = str(info.value)
        assert "messages[1].data: not JSON-serialisable" in text and "set" in text
        assert await store.history("s") == []
        with pytest.raises(StoreError, match=r"messages\[0\]\.data: not JSON-serialisable"):
            await store.append_messages("s", "a", [msg("user", "x", score=float("nan"))])
        circular: dict = {}
        circular["self"] = circular
        with pytest.raises(
            StoreError, match=r"messages\[0\]\.data: not JSON-serialisable \(Circular reference"
        ):
            await store.append_messages(
                "s", "a", [{"role": "user", "content": "x", "data": circular}]
            )
        deep = inner = {}
        for _ in range(100_000):
            inner["a"] = inner = {}
        with pytest.raises(
            StoreError, match=r"messages\[0\]\.data: not JSON-serialisable \(nested too deep"
        ):
            await store.append_messages("s", "a", [{"role": "user", "content": "x", "data": deep}])
        assert await store.history("s") == []


async def test_message_data_may_be_any_mapping_and_reads_back_as_written():
    from types import MappingProxyType

    async with open_store(":memory:") as store:
        data = MappingProxyType({"n": 1, "text": "é", "items": [None, True, 2.5]})
        await store.append_messages(
            "s", "a", [{"role": "user", "content": "x", "data": data}, msg("user", "y")]
        )
        assert [m.data for m in await store.history("s")] == [dict(data), {}]


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ("hello", "messages: expected a list"),
        ({"role": "user"}, "messages: expected a list"),
        (["hello"], "messages[0]: expected a dict"),
        ([{"role": "user", "content": "x", "tool_calls": []}], "unknown key 'tool_calls'"),
        ([{"content": "x"}], "messages[0].role: expected a non-empty string"),
        ([{"role": "user", "content": ["block"]}], "messages[0].content: expected a string"),
        ([{"role": "user", "content": "x", "data": []}], "messages[0].data: expected a dict"),
    ],
)
async def test_bad_messages_get_clear_errors(messages, fragment):
    async with open_store(":memory:") as store:
        with pytest.raises(StoreError) as info:
            await store.append_messages("s", "a", messages)
        assert fragment in str(info.value)


async def test_an_integer_past_64_bits_is_a_store_error_naming_the_field():
    # Regression: limits and token counts were checked only from below, so 2**63 reached
    # SQLite and came back as a bare OverflowError, not a StoreError naming the field (so
    # the agent's "accounting lost, not the answer" handler did not catch it either).
    huge = 2**63
    async with open_store(":memory:") as store:
        for call in (
            lambda: store.history("s", limit=huge),
            lambda: store.sessions(limit=huge),
            lambda: store.audit(limit=huge),
        ):
            with pytest.raises(
                StoreError, match=f"limit: expected an integer ≥ 1 and ≤ {huge - 1}"
            ):
                await call()
        with pytest.raises(StoreError, match="output_tokens: expected an integer ≥ 0 and ≤"):
            await store.record_usage("a", None, "p", "m", 1, huge)
        with pytest.raises(StoreError, match="input_tokens: expected an integer ≥ 0 and ≤"):
            await store.finish_exchange(
                "s", "a", [{"role": "user", "content": "hi"}], usage=("p", "m", 10**30, 0)
            )
        assert await store.history("s") == []  # nothing of the refused exchange was stored
        for value in (True, -1, 2.0):  # below the bound or no integer: the text as before
            with pytest.raises(StoreError) as info:
                await store.record_usage("a", None, "p", "m", value, 0)
            assert str(info.value) == f"input_tokens: expected an integer ≥ 0, got {value!r}"
        await store.record_usage("a", None, "p", "m", huge - 1, 0)  # the largest still fits
        assert (await store.usage_by_agent())["a"]["input_tokens"] == huge - 1


@pytest.mark.parametrize(
    ("value", "shown"),
    [(True, "True"), (1.0, "1.0"), ("1", "'1'"), (-1, "-1")],
)
async def test_a_hostile_count_is_a_store_error_naming_the_field(value, shown):
    async with open_store(":memory:") as store:
        with pytest.raises(StoreError) as info:
            await store.record_usage("a", None, "p", "m", value, 0)
        assert str(info.value) == f"input_tokens: expected an integer ≥ 0, got {shown}"
        with pytest.raises(StoreError) as info:
            await store.sessions(limit=value)
        assert str(info.value) == f"limit: expected an integer ≥ 1, got {shown}"


async def test_an_integer_past_4300_digits_is_a_store_error_naming_the_field():
    # Regression: building the message took str() of the int, which raised Python's own
    # "Exceeds the limit" ValueError: no StoreError, no field named.
    async with open_store(":memory:") as store:
        with pytest.raises(StoreError) as info:
            await store.record_usage("a", None, "p", "m", 10**5000, 0)
        assert str(info.value) == (
            f"input_tokens: expected an integer ≥ 0 and ≤ {2**63 - 1}, "
            "got an integer of over 1,000 digits"
        )


async def test_bad_ids_and_limits():
    async with open_store(":memory:") as store:
        with pytest.raises(StoreError, match="session_id: expected a non-empty string"):
            await store.ensure_session("", "a")
        with pytest.raises(StoreError, match="agent: expected a non-empty string"):
            await store.ensure_session("s", None)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="at most 256 characters"):
            await store.history("s" * 300)
        with pytest.raises(StoreError, match="limit: expected an integer ≥ 1, got 0"):
            await store.history("s", limit=0)
        with pytest.raises(StoreError, match="limit"):
            await store.sessions(limit=True)
        with pytest.raises(StoreError, match="input_tokens: expected an integer ≥ 0, got -1"):
            await store.record_usage("a", None, "p", "m", -1, 0)
        with pytest.raises(StoreError, match="provider"):
            await store.record_usage("a", None, "", "m", 1, 0)
        await store.record_usage("a", None, "scripted", "", 1, 0)  # unnamed model is fine
        with pytest.raises(StoreError, match="expected an AuditRecord"):
            await store.record_tool_call({"agent": "a"})  # type: ignore[arg-type]


# ---- audit log -------------------------------------------------------------------------


def test_audit_record_validates_and_truncates():
    with pytest.raises(StoreError, match="AuditRecord.outcome: expected one of ok, error"):
        AuditRecord(agent="a", tool="t", outcome="fail")
    with pytest.raises(StoreError, match="AuditRecord.agent"):
        AuditRecord(agent="", tool="t")
    big = AuditRecord(agent="a", tool="t", arguments={"text": "x" * 100_000}, error="e" * 100_000)
    assert len(big.arguments) == audit_module.MAX_AUDIT_CHARS
    assert big.arguments.endswith(audit_module.TRUNCATED_MARK)
    assert len(big.error) == audit_module.MAX_AUDIT_CHARS
    odd = AuditRecord(agent="a", tool="t", arguments={"when": {1, 2}})
    assert "when" in odd.arguments


async def test_audit_filters_newest_first():
    async with open_store(":memory:") as store:
        for i, (agent, trace) in enumerate([("a", "t1"), ("b", "t1"), ("a", "t2")]):
            await store.record_tool_call(
                AuditRecord(
                    agent=agent,
                    tool=f"tool{i}",
                    trace_id=trace,
                    span_id=f"s{i}",
                    duration_ms=1.5,
                    outcome="error" if i else "ok",
                    error="boom" if i else None,
                    session_id="sess",
                )
            )
        assert [r.tool for r in await store.audit()] == ["tool2", "tool1", "tool0"]
        assert [r.tool for r in await store.audit(agent="a")] == ["tool2", "tool0"]
        assert [r.tool for r in await store.audit(trace_id="t1")] == ["tool1", "tool0"]
        assert [r.tool for r in await store.audit(agent="a", trace_id="t1")] == ["tool0"]
        assert len(await store.audit(limit=1)) == 1
        newest = (await store.audit())[0]
        assert (newest.outcome, newest.error, newest.duration_ms) == ("error", "boom", 1.5)
        assert newest.span_id == "s2" and newest.session_id == "sess"


# ---- bad files -------------------------------------------------------------------------


async def test_non_sqlite_file_is_refused_and_left_untouched(tmp_path):
    db = tmp_path / "roost.db"
    content = b"this is my thesis, not a database\n" * 50
    db.write_bytes(content)
    with pytest.raises(StoreError) as info:
        async with open_store(db):
            pass  # pragma: no cover
    assert str(db) in str(info.value) and "not an SQLite database" in str(info.value)
    assert db.read_bytes() == content
    assert sibling_files(db) == ["roost.db"]


async def test_corrupt_sqlite_file_is_refused_and_left_untouched(tmp_path):
    db = tmp_path / "roost.db"
    async with open_store(db) as store:
        await store.append_messages("s", "a", [msg("user", "x")])
    raw = bytearray(db.read_bytes())
    raw[100:4096] = b"\xa5" * (4096 - 100)  # smash the schema page, keep the header
    db.write_bytes(bytes(raw))
    with pytest.raises(StoreError) as info:
        async with open_store(db):
            pass  # pragma: no cover
    assert str(db) in str(info.value) and "left untouched" in str(info.value)
    assert db.read_bytes() == bytes(raw)


async def test_database_from_a_newer_roost_is_refused(tmp_path):
    db = tmp_path / "roost.db"
    async with open_store(db) as store:
        await store.append_messages("s", "a", [msg("user", "keep me")])
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(StoreError, match=r"newer roost \(schema version 99"):
        async with open_store(db):
            pass  # pragma: no cover
    assert db.read_bytes() == before


async def test_someone_elses_sqlite_database_is_refused(tmp_path):
    db = tmp_path / "app.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(StoreError, match="not roost's.*invoices"):
        async with open_store(db):
            pass  # pragma: no cover
    assert db.read_bytes() == before


async def test_directory_path_and_bad_arguments(tmp_path):
    with pytest.raises(StoreError, match="not a regular file"):
        async with open_store(tmp_path):
            pass  # pragma: no cover
    with pytest.raises(StoreError, match="path: expected a file path"):
        async with open_store(""):
            pass  # pragma: no cover
    with pytest.raises(StoreError, match="synchronous: expected one of"):
        async with open_store(":memory:", synchronous="OFF"):
            pass  # pragma: no cover


async def test_missing_parent_directory_is_created(tmp_path):
    db = tmp_path / "nested" / "dir" / "roost.db"
    async with open_store(db) as store:
        await store.ensure_session("s", "a")
    assert db.is_file()


async def test_empty_file_becomes_a_database(tmp_path):
    db = tmp_path / "roost.db"
    db.touch()
    async with open_store(db) as store:
        await store.ensure_session("s", "a")
    assert db.read_bytes().startswith(sqlite_module.SQLITE_HEADER)


async def test_closed_store_refuses_calls():
    async with open_store(":memory:") as store:
        pass
    with pytest.raises(StoreError, match="the store is closed"):
        await store.history("s")


# ---- migrations ------------------------------------------------------------------------


async def test_forward_migration_keeps_data(tmp_path, monkeypatch):
    db = tmp_path / "roost.db"
    async with open_store(db) as store:
        await store.append_messages("s", "a", [msg("user", "old data")])
    version_two = ("CREATE TABLE tasks (id TEXT PRIMARY KEY)",)
    monkeypatch.setattr(SqliteStore, "migrations", (*SqliteStore.migrations, version_two))
    async with open_store(db) as store:
        assert [m.content for m in await store.history("s")] == ["old data"]
        version, tables = await store.read(
            "inspect",
            lambda conn: (
                conn.execute("PRAGMA user_version").fetchone()[0],
                {r[0] for r in conn.execute("SELECT name FROM sqlite_master")},
            ),
        )
    assert version == len(SqliteStore.migrations) and "tasks" in tables


async def test_failed_migration_rolls_back_and_keeps_data(tmp_path, monkeypatch):
    db = tmp_path / "roost.db"
    async with open_store(db) as store:
        await store.append_messages("s", "a", [msg("user", "precious")])
    broken = ("CREATE TABLE half (id INTEGER)", "THIS IS NOT SQL")
    current = len(store_module.SqliteStore.migrations)
    monkeypatch.setattr(SqliteStore, "migrations", (*SqliteStore.migrations, broken))
    with pytest.raises(StoreError, match=f"upgrading the schema from version {current} failed"):
        async with open_store(db):
            pass  # pragma: no cover
    monkeypatch.undo()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == current
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "half" not in tables
        assert conn.execute("SELECT content FROM messages").fetchall() == [("precious",)]
    finally:
        conn.close()


async def test_an_exchange_takes_two_transactions_and_keeps_order(tmp_path):
    from roost.kernel import open_store

    async with open_store(tmp_path / "x.db") as store:
        before = await store.start_exchange(
            "s", "a", {"role": "user", "content": "one", "data": {}}
        )
        assert before == []
        await store.finish_exchange(
            "s", "a", [{"role": "assistant", "content": "two", "data": {}}], usage=("p", "m", 3, 4)
        )
        before = await store.start_exchange(
            "s", "a", {"role": "user", "content": "three", "data": {}}
        )
        assert [m.content for m in before] == ["one", "two"]
        assert [m.content for m in await store.history("s")] == ["one", "two", "three"]
        assert (await store.usage_by_agent())["a"]["input_tokens"] == 3
        with pytest.raises(StoreError, match="provider"):
            await store.finish_exchange("s", "a", [], usage=("", "m", 1, 1))


async def test_a_session_counts_its_messages_however_it_was_created(tmp_path):
    # A new session is inserted with its first messages already counted (no UPDATE after
    # the INSERT); every way of creating one must still count right, and so must later appends.
    from roost.kernel import open_store

    async with open_store(tmp_path / "x.db") as store:
        await store.start_exchange("started", "a", msg("user", "one"))
        await store.finish_exchange("started", "a", [msg("assistant", "two")])
        await store.finish_exchange("finished", "a", [msg("user", "one"), msg("assistant", "two")])
        await store.append_messages("appended", "a", [msg("user", str(i)) for i in range(3)])
        await store.append_messages("appended", "a", [msg("user", "3")])
        await store.ensure_session("empty", "a")
        counts = {s["id"]: s["message_count"] for s in await store.sessions()}
        assert counts == {"started": 2, "finished": 2, "appended": 4, "empty": 0}
        seqs = await _rows(store, "SELECT session_id, seq FROM messages ORDER BY session_id, seq")
        assert seqs == [("appended", n) for n in (1, 2, 3, 4)] + [
            ("finished", 1),
            ("finished", 2),
        ] + [
            ("started", 1),
            ("started", 2),
        ]
        with pytest.raises(SessionConflict, match="belongs to agent"):
            await store.finish_exchange("finished", "b", [msg("user", "x")])
        assert {s["id"]: s["message_count"] for s in await store.sessions()} == counts


# ---- group commit ----------------------------------------------------------------------


class _Gate(ThreadGate):
    """A ``ThreadGate`` whose write also stores a usage row (and answers "gate")."""

    def work(self, conn):
        super().work(conn)
        conn.execute(
            "INSERT INTO usage (ts, agent, provider, model, input_tokens, output_tokens) "
            "VALUES (0, 'gate', 'p', '', 0, 0)"
        )
        return "gate"


async def _rows(store, sql):
    return await store.read("inspect", lambda conn: conn.execute(sql).fetchall())


async def test_queued_writes_commit_together_in_one_transaction(tmp_path):
    async with open_store(tmp_path / "roost.db", synchronous="full") as store:
        gate = _Gate()
        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            batches_before = store.batches
            for i in range(20):
                nursery.start_soon(store.append_messages, f"s{i}", "a", [msg("user", f"m{i}")])
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        # The gate's own batch, then all 20 writes in exactly one more transaction.
        assert store.batches == batches_before + 2
        rows = await _rows(store, "SELECT session_id, content FROM messages ORDER BY session_id")
    assert sorted(rows) == sorted((f"s{i}", f"m{i}") for i in range(20))


async def test_a_failing_write_among_good_ones_fails_alone(tmp_path):
    async with open_store(tmp_path / "roost.db", synchronous="full") as store:
        await store.ensure_session("owned", "alice")
        gate = _Gate()
        outcomes: dict[str, object] = {}

        async def append(name, session, agent):
            try:
                await store.append_messages(session, agent, [msg("user", name)])
                outcomes[name] = "ok"
            except (StoreError, SessionConflict) as exc:
                outcomes[name] = exc

        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            nursery.start_soon(append, "good1", "g1", "bob")
            nursery.start_soon(append, "bad", "owned", "mallory")  # not mallory's session
            nursery.start_soon(append, "good2", "g2", "bob")
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        assert outcomes["good1"] == "ok" and outcomes["good2"] == "ok"
        assert isinstance(outcomes["bad"], SessionConflict) and "belongs to agent 'alice'" in str(
            outcomes["bad"]
        )
        assert [m.content for m in await store.history("g1")] == ["good1"]
        assert [m.content for m in await store.history("g2")] == ["good2"]
        assert await store.history("owned") == []  # the failed item left nothing behind


async def test_a_sqlite_error_in_one_item_names_its_operation_and_spares_the_rest(tmp_path):
    async with open_store(tmp_path / "roost.db", synchronous="full") as store:
        gate = _Gate()
        results: dict[str, object] = {}

        async def run(name, work):
            try:
                results[name] = await store.write(name, work)
            except StoreError as exc:
                results[name] = exc

        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            nursery.start_soon(
                run, "insert one", lambda c: c.execute(_INSERT_USAGE_ROW, ("one",)).rowcount
            )
            nursery.start_soon(
                run, "break things", lambda c: c.execute("INSERT INTO no_such_table VALUES (1)")
            )
            nursery.start_soon(
                run, "insert two", lambda c: c.execute(_INSERT_USAGE_ROW, ("two",)).rowcount
            )
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        assert results["insert one"] == 1 and results["insert two"] == 1
        error = results["break things"]
        assert (
            isinstance(error, StoreError)
            and "could not break things" in str(error)
            and "no_such_table" in str(error)
        )
        agents = await _rows(store, "SELECT agent FROM usage ORDER BY agent")
    assert agents == [("gate",), ("one",), ("two",)]


_INSERT_USAGE_ROW = (
    "INSERT INTO usage (ts, agent, provider, model, input_tokens, output_tokens) "
    "VALUES (0, ?, 'p', '', 0, 0)"
)


async def test_a_cancelled_write_still_queued_never_runs(tmp_path):
    async with open_store(tmp_path / "roost.db", synchronous="full") as store:
        gate = _Gate()
        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            with trio.CancelScope() as scope:
                scope.cancel()  # cancelled before the gate lets its batch go
                nursery.start_soon(store.append_messages, "kept", "a", [msg("user", "kept")])
                await store.append_messages("dropped", "a", [msg("user", "dropped")])
            assert scope.cancelled_caught
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        assert [m.content for m in await store.history("kept")] == ["kept"]
        assert await store.history("dropped") == []
        assert store._queue == []


async def test_a_cancelled_write_already_in_a_batch_commits_and_is_answered(tmp_path):
    async with open_store(tmp_path / "roost.db", synchronous="full") as store:
        first, second = _Gate(), _Gate()
        outcome = []

        async def write_late(scope):
            with scope:
                await store.append_messages("late", "a", [msg("user", "late")])
                outcome.append("returned")
                await trio.lowlevel.checkpoint()
            outcome.append("cancelled" if scope.cancelled_caught else "not cancelled")

        scope = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            await first.hold(store, nursery)
            nursery.start_soon(store.write, "second gate", second.work)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(write_late, scope)
            await trio.testing.wait_all_tasks_blocked()
            first.release.set()  # next batch = [second gate, late]; the thread waits in it
            await second.wait_entered()
            scope.cancel()  # "late" is on the database thread now: it cannot be withdrawn
            second.release.set()
        # Answered (it was stored), then Cancelled at its next checkpoint: Cancelled from a
        # write means it was not done.
        assert outcome == ["returned", "cancelled"]
        assert [m.content for m in await store.history("late")] == ["late"]


async def test_a_shielded_write_is_committed_and_answered_even_when_cancelled(tmp_path):
    def row(name):
        return lambda conn: conn.execute(_INSERT_USAGE_ROW, (name,)).lastrowid

    async with open_store(tmp_path / "roost.db") as store:
        with trio.CancelScope() as scope:
            scope.cancel()
            alone = await store.write("alone", row("alone"), shield=True)
            await trio.lowlevel.checkpoint()
        assert scope.cancelled_caught and isinstance(alone, int)
        # Behind another batch (a gate holds the database thread), cancelled while it waits.
        gate, answers = _Gate(), []

        async def behind(scope):
            with scope:
                answers.append(await store.write("behind", row("behind"), shield=True))
                await trio.lowlevel.checkpoint()

        scope = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            nursery.start_soon(behind, scope)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()  # while it waits for the gate's batch
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        assert scope.cancelled_caught and len(answers) == 1
        agents = [r[0] for r in await _rows(store, "SELECT agent FROM usage ORDER BY id")]
    assert agents == ["alone", "gate", "behind"]


async def test_group_commits_survive_a_restart(tmp_path):
    db = tmp_path / "roost.db"
    async with open_store(db, synchronous="full") as store:
        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(store.append_messages, f"s{i % 4}", "a", [msg("user", f"m{i}")])
    async with open_store(db, synchronous="full") as store:
        counts = {s["id"]: s["message_count"] for s in await store.sessions(limit=10)}
        seqs = await _rows(store, "SELECT session_id, seq FROM messages ORDER BY session_id, seq")
    assert counts == {f"s{k}": 10 for k in range(4)}
    assert seqs == [(f"s{k}", n) for k in range(4) for n in range(1, 11)]


async def test_the_write_queue_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(SqliteStore, "max_pending", 2)
    async with open_store(tmp_path / "roost.db") as store:
        gate, done = _Gate(), []

        async def write(name):
            await store.write(name, lambda c: c.execute(_INSERT_USAGE_ROW, (name,)))
            done.append(name)

        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)  # taken by the thread: the queue is empty
            for name in ("one", "two", "three"):
                nursery.start_soon(write, name)
                await trio.testing.wait_all_tasks_blocked()
            # Two slots: the third waits for room, not in the queue.
            assert [op.operation for op in store._queue] == ["one", "two"]
            gate.release.set()
        agents = sorted(r[0] for r in await _rows(store, "SELECT agent FROM usage"))
    assert sorted(done) == ["one", "three", "two"] and agents == ["gate", "one", "three", "two"]


async def test_writes_after_close_fail_with_a_clear_error(tmp_path):
    async with open_store(tmp_path / "roost.db", synchronous="full") as store:
        pass
    with pytest.raises(StoreError, match="closed"):
        await store.append_messages("s", "a", [msg("user", "x")])


async def test_a_batch_of_only_non_durable_writes_skips_the_fsync(tmp_path):
    def sync_mode(conn):
        return conn.execute("PRAGMA synchronous").fetchone()[0]

    full, normal = 2, 1
    async with open_store(tmp_path / "roost.db", synchronous="full") as store:
        assert await store.write("probe", sync_mode) == full
        assert await store.write("probe", sync_mode, durable=False) == normal
        assert await store.write("probe", sync_mode) == full  # durable again afterwards
        gate = _Gate()
        seen = {}

        async def probe(name, durable):
            seen[name] = await store.write(name, sync_mode, durable=durable)

        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            nursery.start_soon(probe, "lazy", False)
            nursery.start_soon(probe, "durable", True)
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        # One durable write in a batch makes the whole batch's commit durable.
        assert seen == {"lazy": full, "durable": full}


async def test_a_non_durable_write_is_committed_and_survives_a_restart(tmp_path):
    db = tmp_path / "roost.db"
    async with open_store(db, synchronous="full") as store:
        await store.write("lazy", lambda c: c.execute(_INSERT_USAGE_ROW, ("lazy",)), durable=False)
        other = sqlite3.connect(db)  # committed: another connection sees it at once
        try:
            assert other.execute("SELECT agent FROM usage").fetchall() == [("lazy",)]
        finally:
            other.close()
    async with open_store(db, synchronous="full") as store:
        assert await _rows(store, "SELECT agent FROM usage") == [("lazy",)]


async def test_a_normal_store_never_asks_for_full_sync(tmp_path):
    async with open_store(tmp_path / "roost.db", synchronous="NORMAL") as store:
        mode = await store.write("probe", lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
    assert mode == 1


# ---- audit rows and usage ----------------------------------------------------------------


async def test_a_tool_calls_audit_row_is_stored_when_the_call_returns(tmp_path):
    # Regression: audit rows were written behind (the reply did not wait for its row), so a
    # row was missing from the database when its caller already had the result.
    from roost.kernel import ToolCall, default_config, open_kernel, parse_manifest

    def agent(name, tools):
        script = {"rules": [], "default_reply": "{message}"}
        return parse_manifest(
            {
                "name": name,
                "description": name,
                "model": {"provider": "scripted", "script": script},
                "capabilities": {"tools": tools},
            }
        )

    config = default_config(home=tmp_path, agents={"bundled": False})
    async with open_kernel(
        config, agents=[agent("caller", ["agent_callee"]), agent("callee", [])]
    ) as kernel:
        db = kernel.store.path
        for i in range(5):
            result = await kernel.call_tool(
                "caller", ToolCall("agent_callee", {"message": f"hello {i}"})
            )
            assert result.as_text() == f"hello {i}"
            other = sqlite3.connect(db)  # as another process would read it, at this moment
            try:
                rows = other.execute(
                    "SELECT tool, arguments FROM audit WHERE agent = 'caller' ORDER BY id"
                ).fetchall()
            finally:
                other.close()
            assert len(rows) == i + 1 and json.loads(rows[-1][1]) == {"message": f"hello {i}"}
            assert rows[-1][0] == "agent_callee"


async def test_usage_logged_behind_is_read_by_the_next_read_and_survives_a_restart(tmp_path):
    db = tmp_path / "roost.db"
    async with open_store(db) as store:
        for _ in range(3):
            await store.record_usage("a", None, "scripted", "", 5, 7, wait=False)
        with pytest.raises(StoreError, match="input_tokens"):
            # checked at once
            await store.record_usage("a", None, "scripted", "", -1, 7, wait=False)
        # Queued before this read: the database's thread commits it first.
        assert await store.usage_by_agent() == {
            "a": {"input_tokens": 15, "output_tokens": 21, "requests": 3}
        }
        # queued just before close
        await store.record_usage("b", None, "scripted", "", 1, 1, wait=False)
    async with open_store(db) as store:
        assert (await store.usage_by_agent())["b"]["requests"] == 1


async def test_logging_usage_is_no_cancel_point_and_waits_only_for_room(tmp_path, monkeypatch):
    monkeypatch.setattr(SqliteStore, "max_pending", 1)
    async with open_store(tmp_path / "roost.db") as store:
        gate = _Gate()
        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            with trio.CancelScope() as scope:
                scope.cancel()
                # queued at once
                await store.record_usage("a", None, "scripted", "", 1, 2, wait=False)
                gate.release.set()
                # waits for room (shielded)
                await store.record_usage("a", None, "scripted", "", 1, 2, wait=False)
            assert not scope.cancelled_caught  # nothing in there was a cancel point
        assert (await store.usage_by_agent())["a"]["requests"] == 2


async def test_a_row_sqlite_cannot_take_is_stored_escaped(tmp_path):
    # A lone surrogate (JSON "\ud800" decodes to one) cannot be encoded as UTF-8.
    async with open_store(tmp_path / "roost.db") as store:
        await store.record_tool_call(
            AuditRecord(agent="a", tool="evil", arguments=json.loads('{"x": "\\ud800"}'))
        )
        (evil,) = await store.audit()
    assert "\\ud800" in evil.arguments


async def test_a_failed_write_behind_is_logged_and_costs_only_itself(tmp_path, caplog):
    async with open_store(tmp_path / "roost.db") as store:
        gate = _Gate()
        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            await store.write(
                "break things",
                lambda c: c.execute("INSERT INTO no_such_table VALUES (1)"),
                wait=False,
            )
            await store.record_usage("a", None, "scripted", "", 1, 1, wait=False)
            gate.release.set()
        assert (await store.usage_by_agent())["a"]["requests"] == 1
    assert "could not break things" in caplog.text and "no_such_table" in caplog.text


def test_usage_names_of_a_str_subclass_without_a_hash_are_accepted():
    # Regression (review): the cache of checked names raised TypeError for them.
    class Unhashable(str):
        def __eq__(self, other):
            return str.__eq__(self, other)

        __hash__ = None

    row = store_module._usage_row(Unhashable("agent"), None, "scripted", "m", 1, 2)
    assert row[1] == "agent" and row[5:] == (1, 2)


async def test_a_shielded_write_behind_a_full_batch_is_still_written(tmp_path, monkeypatch):
    # Regression (review): a shielded write queued behind max_batch others was withdrawn
    # on cancel once the batch before it had gone.
    monkeypatch.setattr(SqliteStore, "max_batch", 1)
    async with open_store(tmp_path / "roost.db") as store:
        gate, answered = _Gate(), []

        async def shielded():
            with trio.CancelScope() as scope:
                scope.cancel()
                await store.write(
                    "shielded", lambda c: c.execute(_INSERT_USAGE_ROW, ("shielded",)), shield=True
                )
                answered.append(True)

        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            for name in ("b", "c"):
                nursery.start_soon(
                    store.write, name, lambda c, name=name: c.execute(_INSERT_USAGE_ROW, (name,))
                )
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(shielded)
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        agents = [r[0] for r in await _rows(store, "SELECT agent FROM usage ORDER BY id")]
    assert answered == [True]
    assert agents[0] == "gate" and sorted(agents[1:3]) == ["b", "c"] and agents[3] == "shielded"


# ---- a real daemon killed with SIGKILL -------------------------------------------------------


def _scripted_agent(directory, name, **manifest):
    script = {"rules": manifest.pop("rules", []), "default_reply": "{message}"}
    path = directory / name / "agent.json"
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "name": name,
                "description": name,
                "model": {"provider": "scripted", "script": script},
                **manifest,
            }
        )
    )


async def test_a_daemon_killed_after_answering_has_stored_everything_it_answered(tmp_path):
    # Regression: audit rows were written behind, a couple of milliseconds after the reply,
    # so a daemon killed right after answering lost the audit rows of its last calls.
    from roost.plugins.mcp._client import ClientOptions, open_mcp_client
    from roost.plugins.mcp.transports.http import open_http_transport

    roost = os.path.join(os.path.dirname(sys.executable), "roost")
    if not os.path.exists(roost):
        pytest.skip("the roost console script is not installed (run make install)")
    _scripted_agent(tmp_path / "agents", "worker", mcp={"expose_tools": ["list"]})
    home = tmp_path / "home"
    (tmp_path / "roost.toml").write_text(
        f'home = "{home}"\n[agents]\ndirs = ["{tmp_path / "agents"}"]\nbundled = false\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
    env.update(ROOST_HOME=str(home), ROOST_CONFIG=str(tmp_path / "roost.toml"))
    process = await trio.lowlevel.open_process(
        [roost, "run", "--host", "127.0.0.1", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    answered = 0
    try:
        with trio.fail_after(60):
            output = b""
            while b"listening on " not in output or not output.endswith(b"\n"):
                chunk = await process.stdout.receive_some()
                assert chunk, f"roost run exited: {output.decode(errors='replace')}"
                output += chunk
            url = output.decode().split("listening on ", 1)[1].split()[0]
            async with open_http_transport(
                f"{url}/agents/worker/mcp", allow_loopback=True
            ) as transport:
                async with open_mcp_client(
                    transport, ClientOptions(protocol="2025-11-25")
                ) as client:

                    async def call():
                        nonlocal answered
                        result = await client.call_tool("list", {})
                        assert not result.get("isError"), result
                        answered += 1

                    for _ in range(5):
                        async with trio.open_nursery() as nursery:
                            for _ in range(16):
                                nursery.start_soon(call)
                    process.kill()  # SIGKILL at once after the last answer: no close, no checkpoint
    finally:
        process.kill()
        with trio.fail_after(10):
            await process.wait()
    conn = sqlite3.connect(home / "roost.db")  # what a restarted daemon finds
    try:
        (audited,) = conn.execute(
            "SELECT COUNT(*) FROM audit WHERE agent = 'worker' AND tool = 'list'"
        ).fetchone()
    finally:
        conn.close()
    assert answered == 80 and audited == answered
