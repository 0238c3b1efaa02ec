"""An echo agent served by the official a2a-sdk (asyncio, uvicorn) — for interop tests and
the benchmark. Usage: ``python _a2a_sdk_server.py FD BASE_URL``: serves on the already
bound listening socket FD (so the parent knows the port without a race)."""

from __future__ import annotations

import asyncio
import socket
import sys

import uvicorn
from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskStatus,
    a2a_pb2,
)
from starlette.applications import Starlette


class Echo(AgentExecutor):
    async def execute(self, context, event_queue):
        text = context.get_user_input()
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=a2a_pb2.TASK_STATE_SUBMITTED),
                    history=[context.message],
                )
            )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        if text.startswith("slow:"):
            await asyncio.sleep(30)
        if text.startswith("ask:") and context.current_task is None:
            await updater.requires_input(updater.new_agent_message([Part(text="what else?")]))
            return
        await updater.add_artifact([Part(text="echo: " + text)], name="echo")
        await updater.complete()

    async def cancel(self, context, event_queue):
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def main() -> None:
    fd, base = int(sys.argv[1]), sys.argv[2].rstrip("/")
    card = AgentCard(
        name="SDK Echo",
        description="Echoes text (official a2a-sdk server).",
        supported_interfaces=[
            AgentInterface(
                url=f"{base}/a2a/jsonrpc", protocol_binding="JSONRPC", protocol_version="1.0"
            ),
            AgentInterface(
                url=f"{base}/a2a/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
            ),
        ],
        version="0.0.1",
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="Echo", description="Echo input text", tags=["echo"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, "/a2a/jsonrpc", enable_v0_3_compat=True),
        *create_rest_routes(handler, path_prefix="/a2a/rest"),
    ]
    app = Starlette(routes=routes)
    sock = socket.socket(fileno=fd)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
