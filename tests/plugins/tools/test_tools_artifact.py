"""The ``artifact`` tool: text, data, workspace files and links become the run's outputs;
everything else gets a clear error naming the argument."""

from __future__ import annotations

import os

import pytest
from roost.kernel import (
    MAX_FILE_BYTES,
    MAX_RUN_PARTS,
    Outputs,
    ToolArgumentsInvalid,
    ToolCall,
    ToolContext,
    validate_arguments,
)
from roost.plugins.tools import build_tools

TOOL = {t.spec.name: t for t in build_tools()}["artifact"]


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def context(workspace, outputs=None) -> ToolContext:
    return ToolContext(
        agent="maker", workspace=workspace, outputs=Outputs() if outputs is None else outputs
    )


async def run(ctx, **arguments):
    validate_arguments(TOOL.spec, arguments)
    return await TOOL.handler(ToolCall(name="artifact", arguments=arguments), ctx)


async def test_text_data_file_and_url_parts(ws):
    (ws / "chart.png").write_bytes(b"\x89PNG\r\n\x1a\nfake")
    ctx = context(ws)
    for arguments in (
        {"name": "notes", "text": "hello", "description": "my notes"},
        {"name": "stats", "data": {"n": [1, 2]}},
        {"name": "chart", "path": "chart.png"},
        {"name": "paper", "url": "https://example.org/papers/x.pdf?dl=1"},
    ):
        result = await run(ctx, **arguments)
        assert not result.is_error, result.as_text()
    notes, stats, chart, paper = ctx.outputs.snapshot()
    assert (notes.name, notes.description, notes.parts[0].text) == ("notes", "my notes", "hello")
    assert stats.parts[0].has_data and stats.parts[0].data == {"n": [1, 2]}
    part = chart.parts[0]
    assert (part.raw, part.filename, part.media_type) == (
        b"\x89PNG\r\n\x1a\nfake",
        "chart.png",
        "image/png",
    )
    assert (paper.parts[0].url, paper.parts[0].filename, paper.parts[0].media_type) == (
        "https://example.org/papers/x.pdf?dl=1",
        "x.pdf",
        "application/pdf",
    )


async def test_the_same_name_adds_a_part_and_keeps_one_artifact(ws):
    ctx = context(ws)
    await run(ctx, name="log", text="one")
    result = await run(ctx, name="log", text="two", media_type="text/markdown")
    assert "part 2" in result.as_text()
    (log,) = ctx.outputs.snapshot()
    assert [p.text for p in log.parts] == ["one", "two"] and log.parts[
        1
    ].media_type == "text/markdown"


async def test_a_file_outside_the_workspace_is_refused(ws, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("do not hand me over")
    os.symlink(secret, ws / "link.txt")
    os.symlink(tmp_path, ws / "up")
    ctx = context(ws)
    for path in (str(secret), "../secret.txt", "sub/../../secret.txt"):
        with pytest.raises(
            ToolArgumentsInvalid, match=r"arguments\.path: .* is outside your workspace"
        ):
            await run(ctx, name="x", path=path)
    for path in ("link.txt", "up/secret.txt", str(ws / "up" / "secret.txt")):
        with pytest.raises(
            ToolArgumentsInvalid, match=r"arguments\.path: .* passes through a symbolic link"
        ):
            await run(ctx, name="x", path=path)
    assert len(ctx.outputs) == 0


async def test_a_directory_swapped_for_a_symlink_after_any_check_cannot_lead_outside(
    ws, tmp_path, monkeypatch
):
    # Regression: the path was checked with realpath, then opened; a directory on the way
    # swapped for a symlink in between handed over a file from outside the workspace.
    from roost.plugins.tools import _artifact

    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.txt").write_text("TOP SECRET")
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("mine")
    real_open = _artifact._open_in_workspace

    def swap_then_open(raw, root):
        os.rename(ws / "d", ws / "d-old")
        os.symlink(tmp_path / "outside", ws / "d")
        return real_open(raw, root)

    monkeypatch.setattr(_artifact, "_open_in_workspace", swap_then_open)
    ctx = context(ws)
    with pytest.raises(ToolArgumentsInvalid, match="passes through a symbolic link"):
        await run(ctx, name="x", path="d/f.txt")
    assert len(ctx.outputs) == 0


async def test_a_hard_link_to_a_file_outside_is_refused(ws, tmp_path):
    (tmp_path / "secret.txt").write_text("outside secret")
    os.link(tmp_path / "secret.txt", ws / "linked.txt")
    with pytest.raises(ToolArgumentsInvalid, match="has other hard links"):
        await run(context(ws), name="x", path="linked.txt")


async def test_a_path_with_a_nul_character_gets_a_clear_error(ws):
    with pytest.raises(ToolArgumentsInvalid, match=r"arguments\.path: contains a NUL character"):
        await run(context(ws), name="x", path="a\0b")


@pytest.mark.parametrize(
    "arguments, pattern",
    [
        ({"name": "x"}, r"exactly one of text, data, path or url \(got none\)"),
        (
            {"name": "x", "text": "a", "url": "https://e.com/a"},
            r"exactly one of .* \(got text, url\)",
        ),
        ({"name": "x", "url": "file:///etc/passwd"}, r"arguments\.url: expected an http\(s\) URL"),
        (
            {"name": "x", "text": "a", "media_type": "not a type"},
            r"arguments\.media_type: .* is not a media type",
        ),
        ({"name": "   ", "text": "a"}, r"arguments\.name: expected a non-empty string"),
        ({"name": "x", "path": "missing.bin"}, r"arguments\.path: no such file in your workspace"),
        ({"name": "x", "path": "."}, r"arguments\.path: '\.' is (a directory|not a regular file)"),
    ],
)
async def test_bad_arguments_name_the_field(ws, arguments, pattern):
    with pytest.raises(ToolArgumentsInvalid, match=pattern):
        await run(context(ws), **arguments)


async def test_a_fifo_is_refused_without_waiting_for_a_writer(ws):
    os.mkfifo(ws / "pipe")
    with pytest.raises(ToolArgumentsInvalid, match="not a regular file"):
        await run(context(ws), name="x", path="pipe")


async def test_a_file_over_the_limit_is_refused(ws):
    (ws / "big.bin").write_bytes(b"\0" * (MAX_FILE_BYTES + 1))
    with pytest.raises(
        ToolArgumentsInvalid, match=r"arguments\.path: 'big\.bin' is larger than 4 MiB"
    ):
        await run(context(ws), name="x", path="big.bin")


async def test_one_run_hands_over_a_bounded_number_of_parts(ws):
    ctx = context(ws)
    for i in range(MAX_RUN_PARTS):
        await run(ctx, name=f"a{i}", text="x")
    with pytest.raises(
        ToolArgumentsInvalid,
        match=f"already handed over {MAX_RUN_PARTS} of the {MAX_RUN_PARTS} artifact parts",
    ):
        await run(ctx, name="one-more", text="x")


async def test_outside_an_agent_run_the_tool_says_so(ws):
    ctx = ToolContext(agent="maker", workspace=ws)
    result = await run(ctx, name="x", text="y")
    assert result.is_error and "only an agent's run can hand over artifacts" in result.as_text()
