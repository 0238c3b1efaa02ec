"""Artifact links resolve: the URI an agent's reply names (in its text and as an embedded
resource) is one id, and ``resources/read`` of it returns the artifact — to the session
that received it, for a bounded time.

What broke: the coordinator re-issued the worker's artifact under a new id, so the link in
the reply's text and the embedded resource named two ids, and ``resources/read`` of either
said "Resource not found".
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
import trio
from roost.kernel import Output, OutputPart, Outputs, default_config, open_kernel
from roost.plugins.http import open_daemon

HERE = Path(__file__).parent


async def run_sdk_artifacts(url: str, mode: str, tool: str, message: str) -> dict:
    with trio.fail_after(90):
        done = await trio.run_process(
            [sys.executable, str(HERE / "sdk_artifacts.py"), url, mode, tool, message],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


@pytest.fixture
async def bundled_kernel(tmp_path):
    async with open_kernel(default_config(home=tmp_path / "home")) as kernel:
        yield kernel


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_sdk_reads_the_artifact_the_coordinators_reply_links(bundled_kernel, mode):
    async with open_daemon(bundled_kernel) as url:
        seen = await run_sdk_artifacts(url + "/mcp", mode, "agent_coordinator", "write a haiku")
    draft = base64.b64encode(b"Draft: write a haiku\n").decode()
    [embedded] = seen["embedded"]
    assert embedded["blob"] == draft and embedded["mimeType"] == "text/markdown"
    # The link in the reply's text and the embedded resource are one URI...
    assert seen["linked"] == [embedded["uri"]]
    assert embedded["uri"].startswith("roost://artifacts/") and embedded["uri"].endswith(
        "/draft.md"
    )
    # ...and resources/read returns the artifact.
    assert seen["read"][embedded["uri"]] == [
        {"uri": embedded["uri"], "mimeType": "text/markdown", "blob": draft}
    ]
    # The artifact's own URI (no file name) reads all its parts: here the one file.
    assert seen["read"][embedded["uri"].rsplit("/", 1)[0]] == seen["read"][embedded["uri"]]
    if mode == "legacy":  # another session cannot read what this one received
        refused = seen["other_session"][embedded["uri"]]
        assert refused["error_code"] == -32002 and "Resource not found" in refused["message"]


def test_an_adopted_artifact_keeps_its_id():
    worker = Outputs()
    handed = worker.add(
        "draft.md", OutputPart(raw=b"x", media_type="text/markdown", filename="draft.md")
    )
    caller = Outputs()
    own = caller.add("draft.md", OutputPart(text="mine"))
    caller.adopt(handed)
    caller.adopt(handed)  # the same artifact twice is one
    ids = [o.id for o in caller.snapshot()]
    assert ids == [own.id, handed.id]


def test_an_artifact_reads_whole_or_by_its_file_uri():
    output = Output(
        "report",
        (
            OutputPart(text="summary", media_type="text/markdown"),
            OutputPart(data={"rows": 1}, has_data=True),
            OutputPart(raw=b"%PDF", media_type="application/pdf", filename="my report.pdf"),
            OutputPart(url="https://example.com/r.pdf"),
        ),
        id="art-1",
    )
    file_uri = "roost://artifacts/art-1/my%20report.pdf"
    assert Output.id_in_uri(file_uri) == Output.id_in_uri(output.uri) == "art-1"
    assert Output.id_in_uri("roost://agents/a/card") is None
    assert output.resource_contents(file_uri) == [
        {"uri": file_uri, "mimeType": "application/pdf", "blob": "JVBERg=="}
    ]
    assert [c["mimeType"] for c in output.resource_contents(output.uri)] == [
        "text/markdown",
        "application/json",
        "application/pdf",
        "text/uri-list",
    ]
    assert output.resource_contents("roost://artifacts/art-1/other.pdf") == []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def output(ident: str, size: int = 10) -> Output:
    return Output(ident, (OutputPart(raw=b"x" * size, filename=f"{ident}.bin"),), id=ident)


def test_the_shelf_keeps_artifacts_for_their_ttl_in_their_scope_only():
    from roost.plugins.mcp import ArtifactShelf

    clock = Clock()
    shelf = ArtifactShelf(ttl_s=60, clock=clock)
    shelf.keep("session-a", [output("one")])
    assert shelf.get("session-a", "one") is not None
    assert shelf.get("session-b", "one") is None
    clock.now = 59.9
    assert shelf.get("session-a", "one") is not None
    clock.now = 60.0
    assert shelf.get("session-a", "one") is None and len(shelf) == 0


def test_the_shelf_is_bounded_by_count_and_bytes_oldest_out_first():
    from roost.plugins.mcp import ArtifactShelf

    shelf = ArtifactShelf(max_items=3, max_bytes=100, clock=Clock())
    shelf.keep("s", [output(f"a{i}") for i in range(5)])
    assert [i for i in ("a0", "a1", "a2", "a3", "a4") if shelf.get("s", i)] == ["a2", "a3", "a4"]
    shelf.keep("s", [output("big", 90)])
    assert [i for i in ("a2", "a3", "a4", "big") if shelf.get("s", i)] == [
        "a4",
        "big",
    ]  # 10 + 90 bytes
    shelf.keep("s", [output("huge", 101)])  # larger than the whole shelf: not kept
    assert shelf.get("s", "huge") is None and shelf.get("s", "big") is not None
