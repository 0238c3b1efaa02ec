"""An ``expose_tools`` / ``private_tools`` entry that matches no tool (an OpenStarry-style
``fs:read_file``, say) is a warning at load naming it — logged, in ``kernel.load_warnings``,
in ``roost run``'s banner and in ``roost validate``'s output.

What broke: such an entry was silence; the tool the author meant was simply not exposed.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from functools import partial
from pathlib import Path

import pytest
import trio
from roost.kernel import default_config, open_kernel, validate_files

ROOST = Path(sys.executable).parent / "roost"

MANIFEST = {
    "name": "starry",
    "description": "an agent ported from OpenStarry",
    "model": {"provider": "scripted"},
    # fs:read_file matches nothing; read and tools:list do; mcp_github_* waits for its server.
    "mcp": {
        "expose_tools": ["fs:read_file", "read", "tools:list", "mcp_github_*"],
        "private_tools": ["fs:write_file"],
    },
}


def write_manifest(tmp_path: Path) -> Path:
    path = tmp_path / "agents" / "starry" / "agent.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(MANIFEST))
    return path


def expected(path: Path) -> list[str]:
    tail = (
        "(a pattern matches a tool's name, e.g. 'read', or its owner-qualified name, "
        "e.g. 'tools:read'; see `roost tools`)"
    )
    return [
        f"{path}: at /mcp/expose_tools/0: 'fs:read_file' matches no tool; "
        f"did you mean 'read'? {tail}",
        f"{path}: at /mcp/private_tools/0: 'fs:write_file' matches no tool; "
        f"did you mean 'write'? {tail}",
    ]


async def test_the_kernel_warns_at_load_naming_the_entries(tmp_path, caplog):
    path = write_manifest(tmp_path)
    config = default_config(
        home=tmp_path / "home", agents={"bundled": False, "dirs": [str(tmp_path / "agents")]}
    )
    with caplog.at_level(logging.WARNING, logger="roost.kernel"):
        async with open_kernel(config) as kernel:
            assert kernel.load_warnings == expected(path)
            assert [s.name for s in kernel.exposed_tools("starry")] == ["list", "read"]
    assert [
        r.getMessage() for r in caplog.records if "matches no tool" in r.getMessage()
    ] == expected(path)


def test_validate_files_reports_them_as_warnings_not_errors(tmp_path):
    path = write_manifest(tmp_path)
    warnings: list[str] = []
    assert validate_files([path], warnings=warnings) == []
    assert warnings == expected(path)


async def test_roost_validate_prints_them_and_exits_zero(tmp_path):
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (make install)")
    path = write_manifest(tmp_path)
    with trio.fail_after(60):
        done = await trio.run_process(
            [str(ROOST), "validate", str(path)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == [f"OK     {path}"] + [
        f"WARN   {w}" for w in expected(path)
    ]


async def test_roost_run_shows_them_in_its_banner(tmp_path):
    from roost.plugins.cli._commands import run_command

    path = write_manifest(tmp_path)
    config = default_config(
        home=tmp_path / "home",
        agents={"bundled": False, "dirs": [str(tmp_path / "agents")]},
        http={"port": 0},
    )
    out = io.StringIO()
    stop = trio.Event()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    run_command,
                    config,
                    host="127.0.0.1",
                    port=0,
                    out=out,
                    err=io.StringIO(),
                    stop=stop.wait,
                )
            )
            stop.set()
    banner = out.getvalue().splitlines()
    assert [line for line in banner if line.startswith("  warning: ")] == [
        f"  warning: {w}" for w in expected(path)
    ]
