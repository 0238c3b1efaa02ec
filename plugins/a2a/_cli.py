"""``roost a2a discover URL`` and ``roost a2a send URL MESSAGE [--stream]``."""

from __future__ import annotations

import json
from typing import Any, TextIO

from . import _models as m
from ._client import A2AClient, task_text


def _say(stream: TextIO, text: str = "") -> None:
    print(text, file=stream, flush=True)


def _event_line(event: m.Event) -> str:
    if isinstance(event, m.Task):
        return f"task {event.id} {m.state_to_json(event.status.state, m.V03)}"
    if isinstance(event, m.StatusUpdate):
        text = f": {event.status.message.text()}" if event.status.message else ""
        return f"status {m.state_to_json(event.status.state, m.V03)}{text}"
    if isinstance(event, m.ArtifactUpdate):
        name = f"{event.artifact.name}: " if event.artifact.name else ""
        return f"artifact {name}" + " ".join(p.summary() for p in event.artifact.parts)
    return "message " + event.text()


async def a2a_command(args: Any, *, out: TextIO, err: TextIO) -> int:
    """Run ``roost a2a ...``; returns the exit code. The user chose the URL, so private and
    loopback hosts are allowed (metadata and link-local addresses are still refused)."""
    async with A2AClient(allow_private=True, allow_loopback=True) as client:
        try:
            info = await client.discover(args.url)
            if args.a2a_command == "discover":
                if args.json:
                    _say(out, json.dumps(dict(info.card), indent=2, ensure_ascii=False))
                else:
                    _say(out, f"{info.name} {info.version} — A2A {info.protocol}")
                    if info.description:
                        _say(out, info.description)
                    _say(out, f"endpoint: {info.jsonrpc_url or info.rest_url}")
                    _say(out, f"streaming: {'yes' if info.streaming else 'no'}")
                    for skill in info.skills:
                        _say(
                            out,
                            f"  skill {skill.get('id')}: {skill.get('name')} — "
                            f"{skill.get('description', '')}",
                        )
                return 0
            if args.stream:
                async for event in client.stream(
                    info, args.message, context_id=args.context, task_id=args.task
                ):
                    _say(
                        out,
                        json.dumps(m.event_to_json(event), ensure_ascii=False)
                        if args.json
                        else _event_line(event),
                    )
                return 0
            outcome = await client.send(
                info, args.message, context_id=args.context, task_id=args.task
            )
        except m.A2AError as exc:
            _say(err, f"roost a2a: error {exc.code}: {exc.message}")
            return 1
    if args.json:
        _say(out, json.dumps(outcome.to_json(), indent=2, ensure_ascii=False))
        return 0
    _say(out, task_text(outcome))
    if isinstance(outcome, m.Task):
        state = m.state_to_json(outcome.status.state, m.V03)
        _say(err, f"[task {outcome.id} {state}; context {outcome.context_id}]")
        return 0 if outcome.status.state in (m.COMPLETED, m.INPUT_REQUIRED) else 1
    return 0
