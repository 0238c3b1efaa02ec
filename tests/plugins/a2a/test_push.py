"""Push notifications: real webhook delivery (Authorization header, token, retries with
backoff), the SSRF check on webhook URLs, and -32003 when disabled."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import trio.testing
from a2a_helpers import make_config, serve
from roost.plugins.a2a import _models as m
from roost.plugins.a2a._push import Delivery, PushDispatcher, PushSettings
from waiting import wait_until

V1 = {"A2A-Version": "1.0"}
NOTHING_LEFT = {"tasks": 0, "push_configs": 0, "open": {}, "live": []}
HOOK = "http://127.0.0.1:9/h"  # nothing listens there: deliveries fail, which is fine here


async def _left_behind(kernel) -> dict:
    """What the A2A service holds: stored tasks and push configs, each caller's unfinished
    tasks (its bound) and the tasks held in memory."""
    from roost.plugins.a2a._server import service_for

    tasks = service_for(kernel).tasks
    tasks_n, configs_n = await tasks.store.read(
        "count",
        lambda c: c.execute(
            "SELECT (SELECT COUNT(*) FROM tasks), (SELECT COUNT(*) FROM push_configs)"
        ).fetchone(),
    )
    return {
        "tasks": tasks_n,
        "push_configs": configs_n,
        "open": {owner: sorted(ids) for owner, ids in tasks._open.items()},
        "live": sorted(tasks.live),
    }


async def _break_push_configs(kernel) -> None:
    """Make SQLite itself fail every write of a push config (as a full disk would), with a
    trigger: the fault comes from the real database, through the store's real error path."""
    from roost.plugins.a2a._server import service_for

    await service_for(kernel).tasks.store.write(
        "break push configs",
        lambda c: c.execute(
            "CREATE TRIGGER no_room BEFORE INSERT ON push_configs "
            "BEGIN SELECT RAISE(ABORT, 'database or disk is full (test)'); END"
        ),
    )


async def _rpc(http, method: str, params: dict, agent: str = "echo") -> dict:
    env = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    with trio.fail_after(10):
        r = await http.post(f"/a2a/agents/{agent}/jsonrpc", json=env, headers=V1)
    return r.json()


async def _waiting_for_input(http) -> dict:
    """A new task of the ``asker`` agent, which asks for input: the task, checked waiting."""
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "question"}]}
    task = (await _rpc(http, "SendMessage", {"message": message}, agent="asker"))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    return task


@pytest.fixture
async def webhook(nursery):
    """A real HTTP receiver on 127.0.0.1 (hypercorn) that records what it gets."""
    from functools import partial

    from hypercorn.config import Config
    from hypercorn.trio import serve as hserve

    received: list[tuple[dict, dict]] = []
    failures = {"left": 0}

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                await send({"type": event["type"] + ".complete"})
                if event["type"] == "lifespan.shutdown":
                    return
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        status = 200
        if failures["left"] > 0:
            failures["left"] -= 1
            status = 503
        else:
            received.append((headers, json.loads(body)))
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config = Config()
    config.bind = ["127.0.0.1:0"]
    binds = await nursery.start(partial(hserve, app, config, mode="asgi"))
    yield binds[0], received, failures


async def test_webhook_receives_every_event_with_authorization(tmp_path, webhook):
    hook_url, received, failures = webhook
    failures["left"] = 1  # the first attempt fails: delivery must retry
    config = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        push = {
            "url": hook_url + "/hook",
            "token": "tok-1",
            "authentication": {"scheme": "Bearer", "credentials": "hook-secret"},
        }
        body = {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a question"}]},
            "configuration": {"taskPushNotificationConfig": push},
        }
        r = await http.post(
            "/a2a/agents/asker/jsonrpc",
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": body},
            headers=V1,
        )
        task = r.json()["result"]["task"]
        listed = (
            await http.post(
                "/a2a/agents/asker/jsonrpc",
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "ListTaskPushNotificationConfigs",
                    "params": {"taskId": task["id"]},
                },
                headers=V1,
            )
        ).json()
        await wait_until(
            lambda: any(
                "statusUpdate" in b
                and b["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
                for _, b in received
            ),
            "the input-required update delivered",
        )
        cfg_id = listed["result"]["configs"][0]["id"]
        deleted = (
            await http.post(
                "/a2a/agents/asker/jsonrpc",
                json={
                    "jsonrpc": "2.0",
                    "id": 3,
                    "method": "DeleteTaskPushNotificationConfig",
                    "params": {"taskId": task["id"], "id": cfg_id},
                },
                headers=V1,
            )
        ).json()
    # Listed without its credentials (the spec is silent; they are a secret, kept to be sent
    # to the webhook, never echoed back), yet delivered with them.
    assert listed["result"]["configs"] == [
        {
            "taskId": task["id"],
            "id": listed["result"]["configs"][0]["id"],
            "url": hook_url + "/hook",
            "token": "tok-1",
            "authentication": {"scheme": "Bearer"},
        }
    ]
    headers, _ = received[0]
    assert headers["authorization"] == "Bearer hook-secret"
    assert headers["x-a2a-notification-token"] == "tok-1"
    states = [b["statusUpdate"]["status"]["state"] for _, b in received if "statusUpdate" in b]
    assert states[-1] == "TASK_STATE_INPUT_REQUIRED"
    assert deleted == {"jsonrpc": "2.0", "id": 3, "result": {}}


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data",
        "http://[fd00:ec2::254]/",
        "http://metadata.google.internal/",
    ],
)
async def test_webhook_url_pointing_at_a_metadata_address_is_refused(tmp_path, url):
    config = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    async with (
        serve(config) as (kernel, base),
        httpx.AsyncClient(base_url=base, timeout=10) as http,
    ):
        r = await http.post(
            "/a2a/agents/echo/jsonrpc",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {
                    "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}
                },
            },
            headers=V1,
        )
        tid = r.json()["result"]["task"]["id"]
        r = await http.post(
            "/a2a/agents/echo/jsonrpc",
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "CreateTaskPushNotificationConfig",
                "params": {"taskId": tid, "url": url},
            },
            headers=V1,
        )
    err = r.json()["error"]
    assert err["code"] == -32602 and err["data"][0]["metadata"]["errors"][0]["field"] == "url"


async def test_loopback_webhook_is_refused_unless_allowed(tmp_path):
    config = make_config(tmp_path, a2a={"push_notifications": True})
    async with (
        serve(config) as (kernel, base),
        httpx.AsyncClient(base_url=base, timeout=10) as http,
    ):
        body = {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
            "configuration": {"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/h"}},
        }
        r = await http.post(
            "/a2a/agents/echo/jsonrpc",
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": body},
            headers=V1,
        )
        left = await _left_behind(kernel)
    assert r.json()["error"]["code"] == -32602
    assert "push_allow_private" in r.json()["error"]["message"]
    assert left == NOTHING_LEFT  # refused before anything was stored or counted


async def test_delivery_gives_up_after_bounded_retries(autojump_clock):
    # Trio's virtual clock: the backoff is measured exactly, whatever the machine's load.
    attempts = []

    def handler(request):
        attempts.append(trio.current_time())
        return httpx.Response(500)

    async def nothing(*a):
        return []

    settings = PushSettings(retries=3, backoff_s=0.01, allow_private=True, allow_loopback=True)
    dispatcher = PushDispatcher(None, settings, transport=httpx.MockTransport(handler))
    config = m.PushConfig(task_id="t", id="c", url="http://127.0.0.1:1/h")
    ok = await dispatcher.deliver(Delivery(config, {"x": 1}))
    assert ok is False and len(attempts) == 3 and dispatcher.failed == 1
    gaps = [attempts[1] - attempts[0], attempts[2] - attempts[1]]
    assert gaps == pytest.approx([0.01, 0.02])  # the backoff doubles


@pytest.mark.parametrize("url", ["http://example.com:99999/h", "http://[::1/h", "http://h:port/"])
async def test_malformed_webhook_url_is_refused_naming_the_field(tmp_path, url):
    # A URL that urlsplit cannot read (a bad port, an open IPv6 bracket) must get the -32602
    # naming the field, as any refused webhook does, not an internal error.
    config = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    async with (
        serve(config) as (kernel, base),
        httpx.AsyncClient(base_url=base, timeout=10) as http,
    ):
        body = {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]},
            "configuration": {"taskPushNotificationConfig": {"url": url}},
        }
        r = await http.post(
            "/a2a/agents/echo/jsonrpc",
            json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": body},
            headers=V1,
        )
    err = r.json()["error"]
    assert err["code"] == -32602, err
    assert "webhook URL refused" in err["message"] and "malformed URL" in err["message"]


async def test_a_push_config_stored_by_an_earlier_version_is_delivered_with_its_credentials(
    tmp_path, webhook
):
    """A push config row as every version since the first wrote it (``set_push``: the 1.0
    JSON, credentials under ``authentication`` and again at the top) is read back whole by
    the dispatcher, and its delivery carries the Authorization and token headers."""
    from roost.plugins.a2a._store import open_task_store

    hook_url, received, _ = webhook
    row = {
        "taskId": "t-old",
        "id": "p1",
        "url": hook_url + "/hook",
        "token": "tok-old",
        "authentication": {"scheme": "Bearer", "credentials": "old-secret"},
        "credentials": "old-secret",
    }
    async with open_task_store(tmp_path / "a2a.db") as store:
        await store.insert(
            id="t-old",
            context_id="c",
            agent="a",
            state="TASK_STATE_WORKING",
            terminal=False,
            data={},
        )
        await store.put_push_config("t-old", "p1", row)
        dispatcher = PushDispatcher(store, PushSettings(allow_private=True, allow_loopback=True))
        configs = await dispatcher.configs("t-old")
        with trio.fail_after(10):
            delivered = await dispatcher.deliver(Delivery(configs[0], {"x": 1}))
    assert configs == [
        m.PushConfig(
            task_id="t-old",
            id="p1",
            url=hook_url + "/hook",
            token="tok-old",
            auth_scheme="Bearer",
            credentials="old-secret",
        )
    ]
    assert delivered
    headers, body = received[0]
    assert headers["authorization"] == "Bearer old-secret"
    assert headers["x-a2a-notification-token"] == "tok-old"
    assert body == {"x": 1}


async def test_deliveries_run_at_most_workers_at_a_time_and_a_full_queue_drops(nursery, caplog):
    """A slow webhook holds ``WORKERS`` deliveries at once, never more; the rest wait in
    the bounded queue, and past it a notification is dropped (logged) without waiting."""
    import logging
    import types

    from roost.plugins.a2a._push import QUEUE_SIZE, WORKERS

    release = trio.Event()
    now = {"in_flight": 0, "most": 0}

    async def slow(request):
        now["in_flight"] += 1
        now["most"] = max(now["most"], now["in_flight"])
        await release.wait()
        now["in_flight"] -= 1
        return httpx.Response(204)

    settings = PushSettings(retries=1, allow_private=True, allow_loopback=True)
    dispatcher = PushDispatcher(None, settings, transport=httpx.MockTransport(slow))
    await nursery.start(dispatcher.run)
    config = m.PushConfig(task_id="t", id="c", url="http://127.0.0.1:1/h")
    task = m.Task("t", "ctx", m.TaskStatus(m.WORKING, None, m.now_iso()), (), ())
    live = types.SimpleNamespace(push=[config], dialect=m.V1, task=task)
    event = m.StatusUpdate("t", "ctx", task.status)
    flood = QUEUE_SIZE + 2 * WORKERS
    with caplog.at_level(logging.WARNING, logger="roost.a2a.push"), trio.fail_after(10):
        for _ in range(WORKERS + 2):
            await dispatcher.notify(live, event)
        await trio.testing.wait_all_tasks_blocked()
        assert now["in_flight"] == WORKERS
        for _ in range(flood):  # never waits: a full queue drops
            await dispatcher.notify(live, event)
        dropped = sum("push queue full" in r.getMessage() for r in caplog.records)
        release.set()
        await wait_until(
            lambda: dispatcher.delivered + dropped == WORKERS + 2 + flood, "every delivery ended"
        )
    assert now["most"] == WORKERS and dispatcher.failed == 0
    # what the queue and the workers hold got through (the old dispatch loop held one more)
    assert QUEUE_SIZE + WORKERS <= dispatcher.delivered <= QUEUE_SIZE + WORKERS + 1


async def test_a_send_whose_push_config_cannot_be_stored_leaves_no_task_behind(tmp_path):
    """Regression (review): the new task's row was written first and its push config after;
    when the config's write failed, the client got an error but the task stayed behind,
    stored "submitted", never run, counted against the caller's bound and held in memory.
    Now both are one transaction: the failure keeps neither."""
    config = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        await _break_push_configs(kernel)
        body = {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            "configuration": {"taskPushNotificationConfig": {"url": HOOK}},
        }
        failed = await _rpc(http, "SendMessage", body)
        left = await _left_behind(kernel)
        quick = await _rpc(  # the same without a webhook is not affected
            http, "SendMessage", {"message": {**body["message"], "messageId": "m2"}}
        )
    assert failed["error"]["code"] == -32603, failed
    assert "storage failed" in failed["error"]["message"]
    assert "disk is full" in failed["error"]["message"]
    assert left == NOTHING_LEFT
    assert quick["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_an_answer_whose_push_config_cannot_be_stored_leaves_its_task_as_it_was(tmp_path):
    # The answer to a task waiting for input, with a webhook: its message and its push config
    # are one write, so a failed config does not leave the task "submitted" and never run.
    config = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        task = await _waiting_for_input(http)
        await _break_push_configs(kernel)
        answer = {
            "message": {
                "messageId": "m2",
                "role": "ROLE_USER",
                "taskId": task["id"],
                "parts": [{"text": "a.txt"}],
            },
            "configuration": {"taskPushNotificationConfig": {"url": HOOK}},
        }
        failed = await _rpc(http, "SendMessage", answer, agent="asker")
        after = (await _rpc(http, "GetTask", {"id": task["id"]}, agent="asker"))["result"]
        left = await _left_behind(kernel)
    assert failed["error"]["code"] == -32603 and "storage failed" in failed["error"]["message"]
    assert after["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert [m["messageId"] for m in after["history"] if m["role"] == "ROLE_USER"] == ["m1"]
    assert left["push_configs"] == 0 and left["open"] == {"local": [task["id"]]}


async def test_a_send_with_a_webhook_cancelled_while_it_is_stored_leaves_nothing_unfinished(
    tmp_path,
):
    # The client went away (its request cancelled) while the new task and its push config were
    # being written: still queued, the write is withdrawn (nothing stored); already running,
    # it commits and the task is stored failed. Either way nothing is left unfinished, counted
    # or held, and no push config outlives an unstored task.
    from roost.plugins.a2a import _tasks
    from roost.plugins.a2a._server import service_for
    from waiting import ThreadGate

    config = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    async with serve(config) as (kernel, url):
        tasks = service_for(kernel).tasks
        store = tasks.store
        message = m.Message("m", m.ROLE_USER, (m.Part(text="hi"),))
        options = _tasks.SendOptions(push=m.PushConfig(task_id="pending", id="p", url=HOOK))
        cancelled = []

        async def send(scope):
            with scope:
                await tasks.send("echo", message, options, trace=None, dialect=m.V1, owner="local")
            cancelled.append(scope.cancelled_caught)

        with trio.fail_after(20):
            # 1. Cancelled while its write is queued behind another batch.
            first, scope = ThreadGate(), trio.CancelScope()
            async with trio.open_nursery() as nursery:
                await first.hold(store, nursery)
                nursery.start_soon(send, scope)
                await wait_until(lambda: len(store._queue) == 1, "the task's write queued")
                scope.cancel()
                await wait_until(lambda: cancelled, "the send cancelled")
                first.release.set()
            queued = await _left_behind(kernel)
            # 2. Cancelled while its write runs (the database's thread is inside its batch).
            first, second, scope = ThreadGate(), ThreadGate(), trio.CancelScope()
            async with trio.open_nursery() as nursery:
                await first.hold(store, nursery)
                nursery.start_soon(store.write, "second gate", second.work)
                await wait_until(lambda: len(store._queue) == 1, "the second gate queued")
                nursery.start_soon(send, scope)
                await wait_until(lambda: len(store._queue) == 2, "the task's write queued")
                first.release.set()
                await second.wait_entered()
                scope.cancel()
                second.release.set()
            running = await _left_behind(kernel)
            states = await store.read(
                "states", lambda c: c.execute("SELECT state, terminal FROM tasks").fetchall()
            )
    assert cancelled == [True, True]
    assert queued == NOTHING_LEFT
    assert running == {"tasks": 1, "push_configs": 1, "open": {}, "live": []}
    assert states == [("TASK_STATE_FAILED", 1)]  # stopped: nobody would ever run it


async def test_an_answer_with_one_push_config_too_many_is_refused_and_changes_nothing(tmp_path):
    # A task has at most 10 push configs: the 11th, given with an answer to the task, is
    # -32602 naming the field, and the answer is not taken (the task still waits for input).
    config = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    async with serve(config) as (kernel, url), httpx.AsyncClient(base_url=url, timeout=10) as http:
        tid = (await _waiting_for_input(http))["id"]
        for i in range(10):
            made = await _rpc(
                http,
                "CreateTaskPushNotificationConfig",
                {"taskId": tid, "id": f"p{i}", "url": HOOK},
                agent="asker",
            )
            assert "result" in made, made
        direct = await _rpc(
            http,
            "CreateTaskPushNotificationConfig",
            {"taskId": tid, "id": "p10", "url": HOOK},
            agent="asker",
        )
        answer = {
            "message": {
                "messageId": "m2",
                "role": "ROLE_USER",
                "taskId": tid,
                "parts": [{"text": "a.txt"}],
            },
            "configuration": {"taskPushNotificationConfig": {"id": "p10", "url": HOOK}},
        }
        refused = await _rpc(http, "SendMessage", answer, agent="asker")
        after = (await _rpc(http, "GetTask", {"id": tid}, agent="asker"))["result"]
        left = await _left_behind(kernel)
    assert direct["error"]["code"] == -32602 and "at most 10" in direct["error"]["message"]
    error = refused["error"]
    assert error["code"] == -32602 and "at most 10" in error["message"]
    assert error["message"].startswith("configuration.taskPushNotificationConfig")
    assert after["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert [m["messageId"] for m in after["history"] if m["role"] == "ROLE_USER"] == ["m1"]
    assert left["push_configs"] == 10 and left["open"] == {"local": [tid]}


TOKEN_WITH_NEWLINE = "tok\nen-secret-1234"  # no header can carry it
CREDENTIALS_NOT_ASCII = "cred-é-secret-5678"  # nor this: httpx writes headers as ASCII


async def test_a_delivery_failing_on_a_token_or_credentials_logs_neither(tmp_path, webhook, caplog):
    # Regression: a header value the HTTP layer refuses is quoted in its error ("Illegal
    # header value b'tok\\nen-secret-1234'"), which went to the log whole; credentials it
    # cannot encode raised UnicodeEncodeError, which ended the delivery worker.
    from roost.plugins.a2a._store import open_task_store

    hook_url, received, _ = webhook
    caplog.set_level("INFO", logger="roost.a2a.push")
    rows = {
        "p1": {"url": hook_url + "/hook", "token": TOKEN_WITH_NEWLINE},
        "p2": {
            "url": hook_url + "/hook",
            "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS_NOT_ASCII},
        },
    }
    async with open_task_store(tmp_path / "a2a.db") as store:
        await store.insert(
            id="t", context_id="c", agent="a", state="TASK_STATE_WORKING", terminal=False, data={}
        )
        for config_id, row in rows.items():  # as an earlier version, which took them, stored them
            await store.put_push_config("t", config_id, {"taskId": "t", "id": config_id, **row})
        settings = PushSettings(retries=1, allow_private=True, allow_loopback=True)
        dispatcher = PushDispatcher(store, settings)
        with trio.fail_after(10):
            delivered = [
                await dispatcher.deliver(Delivery(c, {})) for c in await dispatcher.configs("t")
            ]
    assert delivered == [False, False] and received == []
    logged = caplog.text
    assert logged.count("failed (attempt 1)") == 2, logged
    for secret in ("en-secret-1234", "secret-5678"):
        assert secret not in logged, logged


@pytest.mark.parametrize(
    ("field", "config"),
    [
        ("token", {"token": TOKEN_WITH_NEWLINE}),
        (
            "authentication.credentials",
            {"authentication": {"scheme": "Bearer", "credentials": CREDENTIALS_NOT_ASCII}},
        ),
    ],
)
async def test_a_token_or_credentials_no_header_can_carry_are_refused_unquoted(
    tmp_path, field, config
):
    config_ = make_config(tmp_path, a2a={"push_notifications": True, "push_allow_private": True})
    push = {"url": "http://127.0.0.1:9/hook", **config}
    message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    params = {"message": message, "configuration": {"taskPushNotificationConfig": push}}
    async with serve(config_) as (kernel, url), httpx.AsyncClient(base_url=url) as http:
        err = (await _rpc(http, "SendMessage", params))["error"]
        left = await _left_behind(kernel)
    assert err["code"] == -32602, err
    assert f"taskPushNotificationConfig.{field}" in json.dumps(err), err
    assert "printable ASCII" in err["message"] and "secret" not in json.dumps(err), err
    assert left == NOTHING_LEFT
