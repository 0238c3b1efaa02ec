"""The task store: bounded (only terminal tasks evicted, oldest first), survives a restart,
and in-flight tasks of a dead daemon are marked failed with a reason on the next start."""

from __future__ import annotations

import sqlite3
import time
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing
from a2a_helpers import SLEEP_STARTED, make_config, serve
from roost.plugins.a2a._store import TaskStoreError, open_task_store
from waiting import ThreadGate, wait_until, wait_until_sync

V1 = {"A2A-Version": "1.0"}


def after(stamp: float) -> None:
    """Return once the wall clock (the store's ``updated_at``) has passed ``stamp``."""
    wait_until_sync(lambda: time.time() > stamp, "the wall clock passed a row's time")


ECHO = "/a2a/agents/echo/jsonrpc"
FINISHED = ("TASK_STATE_COMPLETED", "completed")


def task_row(tid: str, state: str = "TASK_STATE_WORKING", **fields) -> dict:
    """``store.insert``'s arguments for task ``tid`` of agent "a" in context "c" (``data``
    empty unless given); terminal when ``state`` is in FINISHED."""
    row = {"context_id": "c", "agent": "a", "data": {}, **fields}
    return {"id": tid, "state": state, "terminal": state in FINISHED, **row}


async def rpc(http, method, params, path=ECHO):
    """The JSON reply to one A2A 1.0 JSON-RPC call of ``method`` at ``path``."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return (await http.post(path, json=body, headers=V1)).json()


async def send(http, text, path=ECHO, **config):
    body = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}
    if config:
        body["configuration"] = config
    return await rpc(http, "SendMessage", body, path)


async def get(http, tid, path=ECHO):
    return await rpc(http, "GetTask", {"id": tid}, path)


async def test_tasks_survive_a_restart_and_in_flight_ones_are_marked_failed(tmp_path):
    SLEEP_STARTED.clear()
    config = make_config(tmp_path)
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        done = (await send(http, "keep me"))["result"]["task"]["id"]
        asked = (await send(http, "a question", path="/a2a/agents/asker/jsonrpc"))["result"][
            "task"
        ]["id"]
        running = (
            await send(http, "never ends", path="/a2a/agents/slow/jsonrpc", returnImmediately=True)
        )["result"]["task"]["id"]
        await wait_until(lambda: SLEEP_STARTED, "the slow agent's tool started", timeout=5)
        # Simulate a crash: the row stays "working" because the process never got to write more.
        from roost.plugins.a2a._server import service_for

        service = service_for(kernel)
        live = service.tasks.live[running]
        live.scope = None  # detach, so the shutdown below does not record a cancellation
        service.tasks.store = _Frozen(service.tasks.store)
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        kept = (await get(http, done))["result"]
        waiting = (await get(http, asked, "/a2a/agents/asker/jsonrpc"))["result"]
        failed = (await get(http, running, "/a2a/agents/slow/jsonrpc"))["result"]
        answer = {
            "messageId": "m2",
            "role": "ROLE_USER",
            "taskId": asked,
            "parts": [{"text": "x.md"}],
        }
        resumed = await rpc(http, "SendMessage", {"message": answer}, "/a2a/agents/asker/jsonrpc")
    assert kept["status"]["state"] == "TASK_STATE_COMPLETED"
    assert kept["artifacts"][0]["parts"][0]["text"] == "echo: keep me"
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert failed["status"]["state"] == "TASK_STATE_FAILED"
    assert "daemon stopped" in failed["status"]["message"]["parts"][0]["text"]
    assert resumed["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


class _Frozen:
    """A store that ignores writes (what a killed process would have written: nothing)."""

    def __init__(self, inner):
        self._inner = inner

    async def update(self, *a, **k):
        return None

    def __getattr__(self, name):
        return getattr(self._inner, name)


async def test_only_terminal_tasks_are_evicted_oldest_first():
    async with open_task_store(":memory:", max_tasks=3) as store:
        await store.insert(**task_row("run", data={"n": 0}))
        await store.insert(**task_row("old", "TASK_STATE_COMPLETED", data={"n": 1}))
        after((await store.get("old")).updated_at)  # "new" is newer, though it sorts first
        await store.insert(**task_row("new", "TASK_STATE_COMPLETED", data={"n": 2}))
        evicted = await store.insert(**task_row("x"))
        assert evicted == ["old"]
        assert await store.get("run") is not None and await store.get("old") is None
        evicted = await store.insert(**task_row("y"))
        assert evicted == ["new"]
        with pytest.raises(TaskStoreError, match="max_tasks"):
            await store.insert(**task_row("z"))
        rows, total = await store.list()
        assert total == 3 and {r.id for r in rows} == {"run", "x", "y"}


async def test_inserts_below_the_bound_do_not_count_the_table_and_the_bound_still_holds():
    async with open_task_store(":memory:", max_tasks=4) as store:
        counts = []
        store._conn.set_trace_callback(
            lambda sql: counts.append(sql) if "COUNT(*) FROM tasks" in sql else None
        )
        for i in range(3):
            await store.insert(**task_row(f"t{i}", "TASK_STATE_COMPLETED"))
        assert counts == []  # counted once when opened; the inserts keep the count
        with pytest.raises(TaskStoreError, match="already|UNIQUE"):
            await store.insert(**task_row("t0", "TASK_STATE_COMPLETED"))
        await store.insert(**task_row("t3", "TASK_STATE_COMPLETED"))
        evicted = await store.insert(**task_row("t4"))
        rows, total = await store.list()
    assert evicted == ["t0"] and total == 4 and {r.id for r in rows} == {"t1", "t2", "t3", "t4"}


async def test_max_tasks_bound_through_the_server(tmp_path):
    config = make_config(tmp_path, a2a={"max_tasks": 3})
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        ids = [(await send(http, f"t{i}"))["result"]["task"]["id"] for i in range(5)]
        listed = (await rpc(http, "ListTasks", {}))["result"]
        gone = await get(http, ids[0])
    assert listed["totalSize"] == 3
    assert {t["id"] for t in listed["tasks"]} == set(ids[2:])
    assert gone["error"]["code"] == -32001


async def test_concurrent_task_writes_share_commits_and_a_duplicate_fails_alone(tmp_path):
    db = tmp_path / "a2a.db"
    async with open_task_store(db, max_tasks=100, synchronous="full") as store:
        gate = ThreadGate()  # keeps the database thread busy so the writes below queue up
        outcomes = {}

        async def insert(tid):
            try:
                await store.insert(**task_row(tid, "TASK_STATE_SUBMITTED", data={"id": tid}))
                outcomes.setdefault(tid, []).append("ok")
            except TaskStoreError as exc:
                outcomes.setdefault(tid, []).append(str(exc))

        await insert("dup")
        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery, "hold")
            before = store.batches
            for i in range(10):
                nursery.start_soon(insert, f"t{i}")
            nursery.start_soon(insert, "dup")  # already stored: UNIQUE violation
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        assert store.batches == before + 2  # the hold, then all eleven together
        assert all(outcomes[f"t{i}"] == ["ok"] for i in range(10))
        assert (
            outcomes["dup"][0] == "ok"
            and "UNIQUE" in outcomes["dup"][1]
            and "could not store a task" in outcomes["dup"][1]
        )
    async with open_task_store(db, max_tasks=100) as store:  # committed means durable
        rows, total = await store.list(limit=50)
    assert total == 11 and {r.id for r in rows} == {"dup", *(f"t{i}" for i in range(10))}


async def test_a_full_store_refuses_only_the_insert_that_does_not_fit():
    async with open_task_store(":memory:", max_tasks=2) as store:
        results = []

        async def insert(tid):
            try:
                await store.insert(**task_row(tid))
                results.append((tid, "ok"))
            except TaskStoreError as exc:
                results.append((tid, "full" if "unfinished tasks" in str(exc) else str(exc)))

        async with trio.open_nursery() as nursery:
            for tid in ("a", "b", "c"):
                nursery.start_soon(insert, tid)
        assert sorted(outcome for _, outcome in results) == ["full", "ok", "ok"]
        refused = next(tid for tid, outcome in results if outcome == "full")
        assert await store.get(refused) is None
        _, total = await store.list()
    assert total == 2


async def test_a_blocking_sends_task_is_written_once_when_it_settles(tmp_path, monkeypatch):
    from roost.plugins.a2a._store import TaskStore

    writes = []
    insert, update = TaskStore.insert, TaskStore.update

    async def spy_insert(self, **kwargs):
        writes.append(("insert", kwargs["state"], kwargs.get("durable", True)))
        return await insert(self, **kwargs)

    async def spy_update(self, id, **kwargs):
        writes.append(("update", kwargs["state"], True))
        return await update(self, id, **kwargs)

    monkeypatch.setattr(TaskStore, "insert", spy_insert)
    monkeypatch.setattr(TaskStore, "update", spy_update)
    config = make_config(tmp_path)
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        blocking = await send(http, "wait for me")
        assert blocking["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        blocking_writes, writes[:] = list(writes), []
        early = await send(http, "tell me at once", returnImmediately=True)
        assert "result" in early
        await wait_until(lambda: len(writes) >= 2, "the early task's two writes", timeout=5)
        from roost.plugins.a2a._server import service_for

        store = service_for(kernel).tasks.store
        row = await store.get(blocking["result"]["task"]["id"])
        assert row is not None and row.state == "TASK_STATE_COMPLETED"
        assert store._reserved == 0
    # Nobody could know the blocking task's id before it settled: one durable write.
    assert blocking_writes == [("insert", "TASK_STATE_COMPLETED", True)]
    # A task announced at once is stored at once, durably, then updated.
    assert writes == [
        ("insert", "TASK_STATE_SUBMITTED", True),
        ("update", "TASK_STATE_COMPLETED", True),
    ]


async def test_a_slow_blocking_sends_task_is_stored_and_listed_while_it_runs(tmp_path):
    from roost.plugins.a2a._server import service_for

    SLEEP_STARTED.clear()
    config = make_config(tmp_path)
    path = "/a2a/agents/slow/jsonrpc"
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=30) as http:
        replies = []

        async def blocking_send():
            replies.append(await send(http, "take your time", path=path))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(blocking_send)
            await wait_until(lambda: SLEEP_STARTED, "the slow agent's tool started")

            async def listed_tasks():
                return (await rpc(http, "ListTasks", {}, path))["result"]["tasks"]

            # Listed once its run has taken FIRST_ROW_AFTER_S (the tool runs for 30 s).
            listed = await wait_until(listed_tasks, "the running task listed")
            assert len(listed) == 1, listed
            tid = listed[0]["id"]
            # Stored unfinished: a crash now would be recovered as failed on the next start.
            row = await service_for(kernel).tasks.store.get(tid)
            assert row is not None and not row.terminal
            cancelled = await rpc(http, "CancelTask", {"id": tid}, path)
            assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        row = await service_for(kernel).tasks.store.get(tid)
    assert replies[0]["result"]["task"]["id"] == tid
    assert replies[0]["result"]["task"]["status"]["state"] == "TASK_STATE_CANCELED"
    assert row.state == "TASK_STATE_CANCELED"


async def test_room_reserved_for_deferred_rows_counts_against_max_tasks():
    async with open_task_store(":memory:", max_tasks=3) as store:
        await store.insert(**task_row("done", "TASK_STATE_COMPLETED"))
        assert store.reserve() and store.reserve()
        assert not store.reserve()  # 1 row + 2 held = max_tasks
        # An insert now must leave the held room free: the finished task makes way.
        evicted = await store.insert(**task_row("run"))
        assert evicted == ["done"]
        # Full of unfinished tasks and held room: refused up front.
        with pytest.raises(TaskStoreError, match="unfinished"):
            await store.insert(**task_row("more"))
        for tid in ("r1", "r2"):  # the reserved rows always fit
            assert await store.insert(**task_row(tid, "TASK_STATE_COMPLETED", reserved=True)) == []
        assert not store.reserve()  # their room is theirs now
        _, total = await store.list()
        store.release()  # nothing held: stays at zero
        assert store.reserve() is False
    assert total == 3


async def test_room_held_for_a_first_row_that_cannot_be_written_is_given_back(
    tmp_path, monkeypatch
):
    from roost.plugins.a2a._server import service_for
    from roost.plugins.a2a._store import TaskStore

    insert = TaskStore.insert

    async def failing(self, **kwargs):
        if kwargs.get("reserved"):
            raise TaskStoreError("disk full (test)")
        return await insert(self, **kwargs)

    monkeypatch.setattr(TaskStore, "insert", failing)
    config = make_config(tmp_path, a2a={"max_tasks": 1})
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        lost = await send(http, "lost")
        store = service_for(kernel).tasks.store
        assert store._reserved == 0
        # The send failed (no task id was acknowledged), and no row was written for it.
        assert lost["error"]["code"] == -32603 and "storage failed" in lost["error"]["message"]
        tasks = service_for(kernel).tasks
        # The writer of deferred first rows has had its turn (it ends once none is due).
        await wait_until(
            lambda: not tasks._deferred.due and not tasks._deferred.running,
            "the deferred row writer idle",
        )
        assert (await store.list(limit=10))[0] == []
        monkeypatch.setattr(TaskStore, "insert", insert)
        kept = await send(http, "kept")
        row = await store.get(kept["result"]["task"]["id"])
    assert row is not None and row.state == "TASK_STATE_COMPLETED"


def _data(tid, artifacts=()):
    task = {"id": tid, "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}
    if artifacts:
        task["artifacts"] = list(artifacts)
    return {"task": task, "agent": "a", "dialect": "1.0"}


def _file(n):
    return {"artifactId": "f", "parts": [{"raw": "A" * n}]}


async def test_listing_never_reads_artifacts_unless_asked(tmp_path):
    # Regression: listing decoded every task's files on the event loop (818 ms for 30 tasks).
    async with open_task_store(tmp_path / "a2a.db") as store:
        await store.insert(**task_row("t", "completed", data=_data("t", [_file(1000)])))
        (row,), _ = await store.list()
        (full,), _ = await store.list(with_artifacts=True)
        got = await store.get("t")
    assert "artifacts" not in row.data["task"]
    assert full.data["task"]["artifacts"] == got.data["task"]["artifacts"] == [_file(1000)]


async def test_the_store_is_bounded_in_bytes_evicting_old_finished_tasks(tmp_path):
    async with open_task_store(tmp_path / "a2a.db", max_bytes=300_000) as store:
        await store.insert(**task_row("running", "working", data=_data("running")))
        for i in range(5):
            await store.insert(**task_row(f"t{i}", "completed", data=_data(f"t{i}")))
            after((await store.get(f"t{i}")).updated_at)  # each update later than the one before
            evicted = await store.update(
                f"t{i}", state="completed", terminal=True, data=_data(f"t{i}", [_file(100_000)])
            )
        rows, total = await store.list()
    assert evicted  # the last update made room by evicting the oldest finished tasks
    kept = {r.id for r in rows}
    assert (
        "running" in kept and "t4" in kept and "t0" not in kept
    )  # unfinished ones are never evicted
    assert total == len(kept) and len(kept) <= 5


async def test_a_schema_1_database_is_upgraded_and_keeps_its_artifacts(tmp_path):
    import json
    import sqlite3

    path = tmp_path / "a2a.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE tasks (id TEXT PRIMARY KEY, context_id TEXT NOT NULL, "
        "agent TEXT NOT NULL, state TEXT NOT NULL, terminal INTEGER NOT NULL, "
        "data TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL)"
    )
    conn.execute(
        "INSERT INTO tasks VALUES ('old', 'c', 'a', 'completed', 1, ?, 1.0, 1.0)",
        (json.dumps(_data("old", [_file(10)])),),
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    async with open_task_store(path, legacy_owner="default") as store:
        got = await store.get("old")
        (listed,), _ = await store.list(owner="default")
    assert got.data["task"]["artifacts"] == [_file(10)] == listed.data["task"]["artifacts"]
    assert got.owner == "default"  # tasks from before principals belong to the host principal
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (3,)


def test_one_task_keeps_a_bounded_weight_of_files_over_its_turns():
    from roost.plugins.a2a import _models as m
    from roost.plugins.a2a._tasks import MAX_TASK_FILE_BYTES, _within_task_bound

    big = m.Artifact("a", (m.Part(raw=b"\0" * (MAX_TASK_FILE_BYTES - 10), filename="big.bin"),))
    task = m.Task("t", "c", m.TaskStatus(m.INPUT_REQUIRED), (big,))
    new = (
        m.Artifact(
            "b",
            (m.Part(raw=b"\0" * 5), m.Part(raw=b"\0" * 20, filename="more.bin"), m.Part(text="hi")),
        ),
    )
    (kept,) = _within_task_bound(task, new)
    assert kept.parts[0].raw == b"\0" * 5 and kept.parts[2].text == "hi"
    assert (
        kept.parts[1].text == "[file more.bin left out: this task's files may total at most 16 MiB]"
    )


async def test_an_evicted_tasks_files_leave_the_agents_workspace(tmp_path):
    import base64

    config = make_config(tmp_path, a2a={"max_tasks": 2})
    blob = {"raw": base64.b64encode(b"payload").decode(), "filename": "f.bin"}
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        body = {
            "message": {
                "messageId": "m",
                "role": "ROLE_USER",
                "parts": [{"text": "with a file"}, blob],
            }
        }
        first = (await rpc(http, "SendMessage", body))["result"]["task"]["id"]
        from roost.plugins.a2a._inbox import folder_of

        inbox = kernel.workspace_for(kernel.agents["echo"]) / "inbox"
        assert (inbox / folder_of(first) / "f.bin").read_bytes() == b"payload"
        for i in range(2):  # two more tasks: the first is evicted (max_tasks = 2)
            await send(http, f"t{i}")
        assert (await get(http, first))["error"]["code"] == -32001
        # removed in the background
        await wait_until(
            lambda: not (inbox / folder_of(first)).exists(),
            "the evicted task's folder removed",
            timeout=5,
        )


@pytest.mark.parametrize("blocking", [True, False])
async def test_a_send_cancelled_while_its_first_row_commits_keeps_its_evictions_and_no_ghost(
    tmp_path, blocking
):
    # Regression (review): a new task's first row is written unshielded. Cancelled while that
    # row's batch ran, the send got Cancelled but the row and the eviction it made committed:
    # the evicted ids were lost (the evicted task's folder stayed in the workspace) and the
    # new task was left "submitted", run by nobody until the daemon restarted. (Blocking or
    # not, a send whose row is committed but whose caller was cancelled is stored failed.)
    import base64

    from roost.plugins.a2a import _models as m
    from roost.plugins.a2a._inbox import folder_of
    from roost.plugins.a2a._server import service_for
    from roost.plugins.a2a._tasks import STOPPED_REASON, SendOptions

    config = make_config(tmp_path, a2a={"max_tasks": 2})
    blob = {"raw": base64.b64encode(b"payload").decode(), "filename": "f.bin"}
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        body = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "f"}, blob]}}
        first = (await rpc(http, "SendMessage", body))["result"]["task"]["id"]
        second = await send(http, "second")  # the store is full (max_tasks = 2): the next evicts
        inbox = kernel.workspace_for(kernel.agents["echo"]) / "inbox"
        assert (inbox / folder_of(first)).exists()
        tasks = service_for(kernel).tasks
        store = tasks.store
        first_gate, second_gate = ThreadGate(), ThreadGate()
        scope = trio.CancelScope()

        async def sender():
            with scope:
                message = m.Message("m3", m.ROLE_USER, (m.Part(text="third"),))
                options = SendOptions()
                owner = kernel.host_principal
                await tasks.send(
                    "echo", message, options, trace=None, dialect=m.V1, owner=owner, wait=blocking
                )

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await first_gate.hold(store, nursery, "hold the thread")
                nursery.start_soon(store.write, "share the next batch", second_gate.work)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(sender)
                await trio.testing.wait_all_tasks_blocked()  # its first row queued behind
                first_gate.release.set()
                await second_gate.wait_entered()  # [hold, row] runs
                scope.cancel()  # too late to withdraw the row
                await trio.testing.wait_all_tasks_blocked()
                second_gate.release.set()
            assert scope.cancelled_caught
            assert (await store.get(first)) is None  # evicted by the cancelled send's row
            await wait_until(
                lambda: not (inbox / folder_of(first)).exists(),
                "the evicted task's folder removed",
                timeout=5,
            )
            rows, total = await store.list(agent="echo")
            (third,) = [r for r in rows if r.id != second["result"]["task"]["id"]]
            unfinished = await store.unfinished()
    # No ghost: the committed row is stored failed, and holds no room in memory.
    assert total == 2 and unfinished == []
    assert third.state == m.FAILED and third.terminal
    assert third.data["task"]["status"]["message"]["parts"][0]["text"] == STOPPED_REASON
    assert third.id not in tasks.live and not tasks._open


async def test_the_deferred_row_writer_never_overwrites_a_settled_state_being_stored(
    tmp_path, monkeypatch
):
    # Regression (review): the writer of deferred first rows woke while the run was storing
    # its settled state, waited for that write, then wrote the task as it stood when it woke
    # ("working") over it.
    from roost.plugins.a2a import _tasks
    from roost.plugins.a2a._server import service_for
    from roost.plugins.a2a._store import TaskStore

    monkeypatch.setattr(_tasks, "FIRST_ROW_AFTER_S", 0.05)
    insert, held, go = TaskStore.insert, trio.Event(), trio.Event()

    async def slow_first_row(self, **kwargs):
        if kwargs.get("reserved"):
            held.set()
            with trio.CancelScope(shield=True):
                await go.wait()
        return await insert(self, **kwargs)

    monkeypatch.setattr(TaskStore, "insert", slow_first_row)
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        replies = []
        async with trio.open_nursery() as nursery:

            async def blocking():
                replies.append(await send(http, "quick"))

            nursery.start_soon(blocking)
            with trio.fail_after(5):
                await held.wait()  # the run is storing its settled state
            tasks = service_for(kernel).tasks
            await wait_until(
                lambda: not tasks._deferred.due, "the writer due meanwhile took the task"
            )
            go.set()
        tid = replies[0]["result"]["task"]["id"]
        await wait_until(lambda: not tasks._deferred.running, "the deferred row writer done")
        row = await tasks.store.get(tid)
    assert replies[0]["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert row.state == "TASK_STATE_COMPLETED"


async def test_a_reservation_never_takes_room_an_insert_under_way_will_use(tmp_path):
    # Regression (review): an insert whose work waited on the database thread had not yet
    # counted its row, so reserve() promised that room too and the reserved row was refused.
    async with open_task_store(tmp_path / "a2a.db", max_tasks=2, synchronous="full") as store:
        await store.insert(**task_row("one"))
        gate = ThreadGate()  # keeps the database thread busy so the insert below waits
        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery, "hold")
            nursery.start_soon(partial(store.insert, **task_row("two")))
            await trio.testing.wait_all_tasks_blocked()
            try:
                assert not store.reserve()  # "two" takes the last room
            finally:
                gate.release.set()
        assert not store.reserve() and store._reserved == 0


# ---- the schema: migrations by user_version --------------------------------------------

MAIN_SCHEMA_3 = Path(__file__).resolve().parents[2] / "fixtures" / "a2a_schema3_main.sql"


def _database(path, script: str, version: int) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.executescript(script)
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()
    finally:
        conn.close()


async def test_an_a2a_db_written_by_main_opens_without_loss(tmp_path):
    db = tmp_path / "a2a.db"
    _database(db, MAIN_SCHEMA_3.read_text(encoding="utf-8"), 3)
    async with open_task_store(db, legacy_owner="someone-else") as store:
        rows, total = await store.list(with_artifacts=True)
        configs = await store.push_configs("t-run")
        await store.insert(**task_row("new", "TASK_STATE_COMPLETED"))
        mine, _ = await store.list(owner="alice", with_artifacts=True)
    assert total == 3 and {(r.id, r.owner, r.state) for r in rows} == {
        ("t-done", "alice", "TASK_STATE_COMPLETED"),
        ("t-run", "local", "TASK_STATE_WORKING"),
        ("t-bob", "bob", "TASK_STATE_INPUT_REQUIRED"),
    }
    assert [r.id for r in mine] == ["t-done"]
    assert mine[0].data["task"]["artifacts"] == [
        {"artifactId": "a1", "parts": [{"text": "echo: keep me"}]}
    ]
    assert next(r for r in rows if r.id == "t-bob").data["note"] == "é ✓"
    assert configs == [{"url": "https://example.com/hook", "token": "s3cret"}]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
        assert conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 4
    finally:
        conn.close()


_SCHEMA_2 = """
CREATE TABLE tasks (id TEXT PRIMARY KEY, context_id TEXT NOT NULL, agent TEXT NOT NULL,
    state TEXT NOT NULL, terminal INTEGER NOT NULL, data TEXT NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, artifacts TEXT, size INTEGER NOT NULL DEFAULT 0);
CREATE INDEX tasks_by_update ON tasks (updated_at, id);
CREATE INDEX tasks_by_context ON tasks (context_id, updated_at);
CREATE INDEX tasks_terminal ON tasks (terminal, updated_at);
CREATE TABLE push_configs (task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    id TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (task_id, id));
INSERT INTO tasks VALUES ('old', 'c', 'echo', 'TASK_STATE_COMPLETED', 1, '{"task": {"id": "old"}}',
    1.0, 1.0, NULL, 22);
"""


async def test_a_schema_2_db_is_upgraded_and_its_tasks_go_to_the_host_principal(tmp_path):
    db = tmp_path / "a2a.db"
    _database(db, _SCHEMA_2, 2)
    async with open_task_store(db, legacy_owner="host") as store:
        (row,), total = await store.list()
        indexes = await store.read(
            "indexes", lambda c: {r[1] for r in c.execute("PRAGMA index_list(tasks)")}
        )
    assert (total, row.id, row.owner, row.data) == (1, "old", "host", {"task": {"id": "old"}})
    assert "tasks_terminal" not in indexes and "tasks_by_size" in indexes


async def test_an_a2a_db_from_a_newer_roost_is_refused_and_left_untouched(tmp_path):
    db = tmp_path / "a2a.db"
    _database(db, _SCHEMA_2, 99)
    before = db.read_bytes()
    with pytest.raises(TaskStoreError, match=r"newer roost \(schema version 99"):
        async with open_task_store(db):
            pass  # pragma: no cover
    assert db.read_bytes() == before
