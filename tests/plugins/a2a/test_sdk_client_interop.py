"""The official a2a-sdk client (code nobody here wrote) against roost's A2A server, under Trio:
1.0 and 0.3, JSON-RPC and HTTP+JSON, blocking and streaming, get/list/cancel/subscribe."""

from __future__ import annotations

import httpx
import pytest
import trio
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    a2a_pb2,
)
from a2a_helpers import SLEEP_CANCELLED
from waiting import wait_until

MODES = [
    pytest.param("JSONRPC", "1.0", id="jsonrpc-1.0"),
    pytest.param("HTTP+JSON", "1.0", id="rest-1.0"),
    pytest.param("JSONRPC", "0.3", id="jsonrpc-0.3"),
]


async def sdk_client(url: str, agent: str, binding: str, version: str, *, streaming: bool):
    async with httpx.AsyncClient(timeout=10) as http:
        card = await A2ACardResolver(http, f"{url}/a2a/agents/{agent}").get_agent_card()
    keep = [
        i
        for i in card.supported_interfaces
        if i.protocol_binding == binding and i.protocol_version == version
    ]
    assert keep, f"the card offers no {binding} {version} interface"
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(keep)
    config = ClientConfig(streaming=streaming, supported_protocol_bindings=[binding])
    return ClientFactory(config).create(card)


def user_message(text: str, **kw) -> Message:
    return Message(message_id=f"m-{text[:10]}", role=Role.ROLE_USER, parts=[Part(text=text)], **kw)


async def collect(aiter):
    return [event async for event in aiter]


@pytest.mark.parametrize("binding,version", MODES)
@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
async def test_sdk_client_send_and_get(daemon, binding, version, streaming):
    kernel, url = daemon
    client = await sdk_client(url, "echo", binding, version, streaming=streaming)
    try:
        with trio.fail_after(20):
            events = await collect(
                client.send_message(SendMessageRequest(message=user_message("hello sdk")))
            )
            assert events, "no response"
            if streaming:
                kinds = [e.WhichOneof("payload") for e in events]
                assert kinds[0] == "task"
                assert "artifact_update" in kinds
                assert events[-1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED
                task_id = events[0].task.id
            else:
                task = events[0].task
                assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED
                assert task.artifacts[0].parts[0].text == "echo: hello sdk"
                task_id = task.id
            got = await client.get_task(GetTaskRequest(id=task_id))
    finally:
        await client.close()
    assert got.id == task_id
    assert got.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert got.artifacts[0].parts[0].text == "echo: hello sdk"
    assert got.history[0].parts[0].text == "hello sdk"


@pytest.mark.parametrize("binding,version", MODES)
async def test_sdk_client_cancel_and_subscribe(daemon, binding, version):
    kernel, url = daemon
    client = await sdk_client(url, "slow", binding, version, streaming=False)
    streamer = await sdk_client(url, "slow", binding, version, streaming=True)
    try:
        with trio.fail_after(20):
            events = await collect(
                client.send_message(
                    SendMessageRequest(
                        message=user_message("take your time"),
                        configuration=a2a_pb2.SendMessageConfiguration(return_immediately=True),
                    )
                )
            )
            task = events[0].task
            assert task.status.state in (a2a_pb2.TASK_STATE_SUBMITTED, a2a_pb2.TASK_STATE_WORKING)
            seen = []

            async def follow():
                async for event in streamer.subscribe(SubscribeToTaskRequest(id=task.id)):
                    seen.append(event)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await wait_until(lambda: seen, "the subscription's first event")
                before = len(SLEEP_CANCELLED)

                async def cancel():
                    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
                    return (
                        canceled if canceled.status.state == a2a_pb2.TASK_STATE_CANCELED else None
                    )

                canceled = await wait_until(cancel, "the task canceled")
            listed = (
                await client.list_tasks(ListTasksRequest(page_size=10))
                if version == "1.0"
                else None
            )
    finally:
        await client.close()
        await streamer.close()
    assert canceled.status.state == a2a_pb2.TASK_STATE_CANCELED
    assert len(SLEEP_CANCELLED) > before, "the agent's tool call was not cancelled"
    assert seen[0].WhichOneof("payload") == "task"
    assert seen[-1].status_update.status.state == a2a_pb2.TASK_STATE_CANCELED
    if listed is not None:
        assert task.id in [t.id for t in listed.tasks]


# ---- the bundled agents at the root URL (issue 14, item 1) --------------------------------


async def root_client(base: str, binding: str, *, streaming: bool):
    """The a2a-sdk client made as a generic client makes it: from the card at ``base``."""
    async with httpx.AsyncClient(timeout=10) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
    config = ClientConfig(streaming=streaming, supported_protocol_bindings=[binding])
    return card, ClientFactory(config).create(card)


def answer_of(events, streaming: bool) -> str:
    """The text of the task's ``response`` artifact, from the client's events."""
    if streaming:
        assert events[-1].status_update.status.state == a2a_pb2.TASK_STATE_COMPLETED, events[-1]
        texts = [
            p.text
            for e in events
            if e.WhichOneof("payload") == "artifact_update"
            for p in e.artifact_update.artifact.parts
        ]
        return "".join(texts)
    task = events[0].task
    assert task.status.state == a2a_pb2.TASK_STATE_COMPLETED, task
    return task.artifacts[0].parts[0].text


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
@pytest.mark.parametrize("streaming", [False, True], ids=["blocking", "streaming"])
async def test_sdk_client_at_the_root_url_reaches_the_coordinator_and_per_agent_urls_their_agent(
    bundled, binding, streaming
):
    url = bundled
    card, client = await root_client(url, binding, streaming=streaming)
    worker_card, worker = await root_client(
        f"{url}/a2a/agents/worker", binding, streaming=streaming
    )
    try:
        with trio.fail_after(30):
            root_events = await collect(
                client.send_message(SendMessageRequest(message=user_message("hi")))
            )
            worker_events = await collect(
                worker.send_message(SendMessageRequest(message=user_message("hi")))
            )
    finally:
        await client.close()
        await worker.close()
    assert card.name == "coordinator" and worker_card.name == "worker"
    assert answer_of(root_events, streaming).startswith(
        "Done. The worker reports: I wrote draft.md"
    )
    assert answer_of(worker_events, streaming).startswith('I wrote draft.md for "hi".')


async def test_metadata_agent_at_the_root_endpoint_reaches_that_agent_and_its_task_continues_there(
    bundled,
):
    """No ``metadata.agent``: the coordinator. ``metadata.agent = "worker"``: the worker, and
    a follow-up to the worker's task needs no ``metadata.agent`` again."""
    from google.protobuf.struct_pb2 import Struct

    url = bundled
    _, client = await root_client(url, "JSONRPC", streaming=False)
    to_worker = Struct()
    to_worker.update({"agent": "worker"})
    try:
        with trio.fail_after(30):
            plain = (
                await collect(
                    client.send_message(SendMessageRequest(message=user_message("hello")))
                )
            )[0].task
            asked = (
                await collect(
                    client.send_message(
                        SendMessageRequest(message=user_message("a question", metadata=to_worker))
                    )
                )
            )[0].task
            follow = user_message("notes.md", task_id=asked.id, context_id=asked.context_id)
            answered = (await collect(client.send_message(SendMessageRequest(message=follow))))[
                0
            ].task
    finally:
        await client.close()
    assert plain.artifacts[0].parts[0].text.startswith("Done. The worker reports:")
    assert asked.status.state == a2a_pb2.TASK_STATE_INPUT_REQUIRED
    assert asked.status.message.parts[0].text == "Which file should I work on?"
    assert answered.id == asked.id and answered.status.state == a2a_pb2.TASK_STATE_COMPLETED
    assert answered.artifacts[-1].parts[0].text.startswith("I read notes.md")
