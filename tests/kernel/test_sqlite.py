"""SqliteDatabase's queue and thread under load: no write lost, none answered twice, no hang."""

from __future__ import annotations

import random

import trio
from roost.kernel import SqliteDatabase
from waiting import ThreadGate


class _Rows(SqliteDatabase):
    migrations = (("CREATE TABLE rows (name TEXT PRIMARY KEY)",),)
    max_batch = 3  # many partial batches: the thread often finds work left after one
    max_pending = 16  # and writers often wait for room


def _insert(name: str):
    return lambda conn: conn.execute("INSERT INTO rows (name) VALUES (?)", (name,)).rowcount


async def test_the_database_thread_is_woken_for_every_write_under_load(tmp_path):
    # ff0fc5e notifies the thread only when the queue goes from empty to one op. Many writers
    # and readers, cancelled ones withdrawn from the queue, written-behind ops and waits for
    # room must never leave an op queued while the thread sleeps (the test would hang).
    rng = random.Random(16)
    answered: list[str] = []
    behind: list[str] = []
    async with _Rows.open(tmp_path / "rows.db") as db:

        async def client(prefix: str) -> None:
            for i in range(12):
                name = f"{prefix}-{i}"
                kind = rng.random()
                if kind < 0.15:
                    await db.write(name, _insert(name), wait=False)
                    behind.append(name)
                elif kind < 0.3:
                    await db.read(name, lambda conn: conn.execute("SELECT 1").fetchone())
                elif kind < 0.5:
                    # Cancelled while queued (withdrawn) or while in a batch (committed).
                    with trio.move_on_after(rng.random() / 500) as scope:
                        await db.write(name, _insert(name))
                    if not scope.cancelled_caught:
                        answered.append(name)
                else:
                    assert await db.write(name, _insert(name)) == 1
                    answered.append(name)
                for _ in range(rng.randrange(3)):
                    await trio.lowlevel.checkpoint()

        with trio.fail_after(30):
            for round in range(5):
                async with trio.open_nursery() as nursery:
                    for n in range(100):
                        nursery.start_soon(client, f"{round}-{n}")
                await db.read("after", lambda conn: None)  # runs after all written behind
                assert db._queue == []
            rows = await db.read(
                "all", lambda conn: conn.execute("SELECT name FROM rows").fetchall()
            )
    stored = {name for (name,) in rows}
    assert set(answered) <= stored and set(behind) <= stored
    assert len(answered) > 1000 and db.batches > 1000 // _Rows.max_batch


async def test_a_write_answered_once_running_tells_its_cancelled_caller_what_it_committed(
    tmp_path,
):
    # Regression (review): the A2A store's first row of a task evicts old tasks in its
    # transaction; cancelled while its batch ran, its caller got Cancelled and never learnt
    # which. Every write: withdrawn while queued, answered once its batch runs (then
    # Cancelled at the next checkpoint); a failed one, which committed nothing, is Cancelled.
    first, second = ThreadGate(), ThreadGate()

    def fail(conn):
        conn.execute("INSERT INTO no_such_table VALUES (1)")

    outcomes: dict[str, list] = {}
    scopes: list[trio.CancelScope] = []

    async def write(name, work):
        got = outcomes[name] = []
        with trio.CancelScope() as scope:
            scopes.append(scope)
            got.append(await db.write(name, work))
            await trio.lowlevel.checkpoint()
            got.append("not cancelled")
        got.append("cancelled" if scope.cancelled_caught else "done")

    async with _Rows.open(tmp_path / "rows.db") as db:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await first.hold(db, nursery)
                nursery.start_soon(db.write, "hold again", second.work)
                nursery.start_soon(write, "ran", _insert("ran"))
                nursery.start_soon(write, "failed", fail)
                await trio.testing.wait_all_tasks_blocked()
                first.release.set()  # the next batch, [hold again, ran, failed], waits in its first
                await second.wait_entered()
                nursery.start_soon(write, "queued", _insert("queued"))
                await trio.testing.wait_all_tasks_blocked()
                for scope in scopes:
                    scope.cancel()
                await trio.testing.wait_all_tasks_blocked()
                second.release.set()
            rows = await db.read(
                "all", lambda conn: conn.execute("SELECT name FROM rows").fetchall()
            )
    assert outcomes == {"ran": [1, "cancelled"], "failed": ["cancelled"], "queued": ["cancelled"]}
    assert rows == [("ran",)]  # the queued one was withdrawn
