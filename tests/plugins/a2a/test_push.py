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
    assert listed["result"]["configs"][0]["url"] == hook_url + "/hook"
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
    assert r.json()["error"]["code"] == -32602
    assert "push_allow_private" in r.json()["error"]["message"]


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
