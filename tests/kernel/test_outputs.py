"""Outputs: what an agent hands over beside its answer, through the kernel and as MCP."""

from __future__ import annotations

import base64
import json

import pytest
import trio
from roost.kernel import (
    AgentReply,
    Output,
    OutputPart,
    Outputs,
    ToolArgumentsInvalid,
    ToolCall,
    default_config,
    open_kernel,
    parse_manifest,
)
from roost.kernel._outputs import MAX_RUN_BYTES, output_from_json

MAKER_STEPS = [
    {"tool": "write", "arguments": {"path": "notes.txt", "content": "hello"}},
    {"tool": "artifact", "arguments": {"name": "notes", "path": "notes.txt"}},
    {"tool": "artifact", "arguments": {"name": "facts", "data": {"topic": "{message}"}}},
]


def agent(name, tools, rules):
    return parse_manifest(
        {
            "name": name,
            "description": name,
            "model": {"provider": "scripted", "script": {"rules": rules}},
            "capabilities": {"tools": tools},
        }
    )


MAKER = agent(
    "maker", ["write", "artifact"], [{"match": ".", "steps": MAKER_STEPS, "reply": "made"}]
)
BOSS = agent(
    "boss",
    ["agent_maker"],
    [
        {
            "match": ".",
            "steps": [{"tool": "agent_maker", "arguments": {"message": "{message}"}}],
            "reply": "boss: {result}",
        }
    ],
)


@pytest.fixture
def config(tmp_path):
    return default_config(home=tmp_path, agents={"bundled": False})


async def test_a_run_returns_what_the_agent_handed_over(config):
    async with open_kernel(config, agents=[MAKER]) as kernel:
        reply = await kernel.send("maker", "birds")
    assert not reply.is_error and reply.text == "made"
    notes, facts = reply.outputs
    assert (notes.name, notes.parts[0].raw, notes.parts[0].media_type) == (
        "notes",
        b"hello",
        "text/plain",
    )
    assert facts.parts[0].data == {"topic": "birds"}
    as_json = json.loads(json.dumps(reply.to_dict()))
    assert as_json["outputs"][0]["parts"] == [
        {
            "raw": base64.b64encode(b"hello").decode(),
            "filename": "notes.txt",
            "mediaType": "text/plain",
        }
    ]


async def test_an_asked_agents_outputs_reach_the_caller_and_its_caller(config):
    async with open_kernel(config, agents=[MAKER, BOSS]) as kernel:
        direct = await kernel.call_tool("boss", ToolCall("agent_maker", {"message": "birds"}))
        reply = await kernel.send("boss", "owls")
    # The tool result an asking agent's model reads: the answer, then the artifacts.
    assert direct.content[0] == {"type": "text", "text": "made"}
    assert (
        direct.content[1]["type"] == "resource"
        and direct.content[1]["resource"]["mimeType"] == "text/plain"
    )
    assert direct.content[2] == {"type": "text", "text": '{"topic": "birds"}'}
    assert "[resource roost://artifacts/" in direct.as_text()
    # ...and, like ADK's AgentTool, the asking run hands them on to whoever asked it.
    assert [o.name for o in reply.outputs] == ["notes", "facts"]
    assert reply.outputs[1].parts[0].data == {"topic": "owls"}


def test_mcp_blocks_for_every_kind_of_part():
    output = Output(
        "bundle",
        (
            OutputPart(text="t"),
            OutputPart(data=[1, 2], has_data=True),
            OutputPart(raw=b"\x89PNG", media_type="image/png", filename="a.png"),
            OutputPart(raw=b"RIFF", media_type="audio/wav"),
            OutputPart(raw=b"%PDF", media_type="application/pdf", filename="my report.pdf"),
            OutputPart(url="https://e.com/x.zip", filename="x.zip"),
        ),
        id="out-1",
    )
    reply = AgentReply("maker", "answer", "s", "t", outputs=(output,))
    result = reply.to_mcp(session_id="s")
    shapes = [p.to_json() for p in output.parts]
    for index in (2, 3, 4):  # file parts name their content block instead of repeating the bytes
        raw = shapes[index].pop("raw")
        shapes[index] = {"content": index + 1, "size": len(base64.b64decode(raw)), **shapes[index]}
    assert result["structuredContent"] == {
        "agent": "maker",
        "text": "answer",
        "session_id": "s",
        "stop_reason": "end_turn",
        "artifacts": [{"artifactId": "out-1", "name": "bundle", "parts": shapes}],
    }
    # ...from which the outputs are rebuilt whole (how an asking agent adopts them).
    assert (
        output_from_json(result["structuredContent"]["artifacts"][0], result["content"]) == output
    )
    assert result["content"] == [
        {"type": "text", "text": "answer"},
        {"type": "text", "text": "t"},
        {"type": "text", "text": "[1, 2]"},
        {"type": "image", "data": base64.b64encode(b"\x89PNG").decode(), "mimeType": "image/png"},
        {"type": "audio", "data": base64.b64encode(b"RIFF").decode(), "mimeType": "audio/wav"},
        {
            "type": "resource",
            "resource": {
                "uri": "roost://artifacts/out-1/my%20report.pdf",
                "mimeType": "application/pdf",
                "blob": base64.b64encode(b"%PDF").decode(),
            },
        },
        {"type": "resource_link", "uri": "https://e.com/x.zip", "name": "x.zip"},
    ]
    # No outputs: no artifacts key, one text block.
    plain = AgentReply("maker", "answer", "s", "t").to_mcp()
    assert (
        plain["content"] == [{"type": "text", "text": "answer"}]
        and "artifacts" not in plain["structuredContent"]
    )


def test_a_run_at_its_bounds_fits_one_mcp_stdio_message():
    # Regression: a file's base64 was sent twice (content block and structuredContent), so
    # a 4 MiB file — within the documented limit — made the stdio reply too large to send.
    from roost.kernel import MAX_FILE_BYTES
    from roost.plugins.mcp._framing import MAX_MESSAGE_BYTES

    outputs = Outputs()
    outputs.add("big", OutputPart(raw=b"\xff" * MAX_FILE_BYTES, media_type="application/pdf"))
    outputs.add("rest", OutputPart(raw=b"\x00" * (MAX_RUN_BYTES - MAX_FILE_BYTES)))
    reply = AgentReply("maker", "answer " * 1000, "s", "t", outputs=outputs.snapshot())
    message = {"jsonrpc": "2.0", "id": 1, "result": reply.to_mcp(session_id="s")}
    assert len(json.dumps(message, separators=(",", ":")).encode()) < MAX_MESSAGE_BYTES


def test_an_asked_agents_artifacts_are_adopted_whole_or_not_at_all():
    outputs = Outputs()
    outputs.add("mine", OutputPart(raw=b"\0" * (MAX_RUN_BYTES - 100)))
    two_parts = Output("report", (OutputPart(text="x" * 60), OutputPart(text="y" * 60)))
    with pytest.raises(ToolArgumentsInvalid, match="does not fit"):
        outputs.adopt(two_parts)
    outputs.adopt(Output("small", (OutputPart(text="z"),)))  # a later one that fits still does
    assert [(o.name, len(o.parts)) for o in outputs.snapshot()] == [("mine", 1), ("small", 1)]


def test_outputs_round_trip_through_json_and_junk_is_ignored():
    output = Output(
        "x",
        (
            OutputPart(raw=b"\0\1", filename="b.bin"),
            OutputPart(data=None, has_data=True),
            OutputPart(url="https://e.com"),
        ),
        "d",
    )
    assert output_from_json(output.to_json()) == output
    for junk in (
        None,
        [],
        {"name": "x"},
        {"name": "x", "parts": [{"raw": "%%%"}]},
        {"name": 1, "parts": []},
        {"name": "x", "parts": [{}]},
    ):
        assert output_from_json(junk) is None


def test_one_run_hands_over_a_bounded_weight():
    outputs = Outputs()
    outputs.add("big", OutputPart(raw=b"\0" * (MAX_RUN_BYTES - 10)))
    with pytest.raises(ToolArgumentsInvalid, match="may weigh at most 6 MiB"):
        outputs.add("more", OutputPart(raw=b"\0" * 11))
    outputs.add("small", OutputPart(text="x" * 10))
    assert [o.name for o in outputs.snapshot()] == ["big", "small"]


def test_a_part_refused_for_its_name_takes_no_room():
    # Regression: _reserve counted a part before its name was looked up, so a part that
    # add/adopt then refused (a name that is no dict key) still used up the run's room.
    outputs = Outputs()
    with pytest.raises(TypeError):
        outputs.add(["not", "a", "name"], OutputPart(raw=b"\0" * MAX_RUN_BYTES))
    with pytest.raises(TypeError):
        outputs.adopt(Output(["x"], (OutputPart(raw=b"\0" * MAX_RUN_BYTES),)))
    outputs.add("whole", OutputPart(raw=b"\0" * MAX_RUN_BYTES))
    assert [o.name for o in outputs.snapshot()] == ["whole"]


async def test_events_describe_handed_over_files_without_carrying_them(config):
    # Regression: an asked agent's EXEC:TOOL_RESULT reply carried the file's base64 (twice)
    # into the event stream, where a 600 KB file closed websocket subscribers (1009).
    secret = base64.b64encode(b"hello").decode()
    async with open_kernel(config, agents=[MAKER, BOSS]) as kernel:
        async with kernel.tap.subscribe() as events:
            reply = await kernel.send("boss", "owls")
            seen = []
            while True:
                try:
                    seen.append(events.receive_nowait())
                except trio.WouldBlock:
                    break
    assert reply.outputs and seen
    dumped = [json.dumps(e.to_dict()) for e in seen]
    assert not [d for d in dumped if secret in d]
    assert any("base64 characters>" in d for d in dumped) and any("<5 bytes>" in d for d in dumped)
