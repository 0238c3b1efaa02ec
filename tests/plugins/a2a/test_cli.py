"""``roost a2a discover`` / ``roost a2a send [--stream]`` against a real roost daemon."""

from __future__ import annotations

import io

from roost.plugins.a2a._cli import a2a_command
from roost.plugins.cli._main import build_parser


def parse(*argv):
    return build_parser().parse_args(["a2a", *argv])


async def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = await a2a_command(parse(*argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


async def test_discover_send_and_stream(daemon):
    kernel, url = daemon
    code, out, _ = await run("discover", url + "/a2a/agents/echo")
    assert code == 0 and out.startswith("echo 0.1.0 — A2A 1.0") and "skill echo" in out
    code, out, err = await run("send", url + "/a2a/agents/echo", "hello cli")
    assert code == 0 and out.strip() == "echo: hello cli" and "completed" in err
    code, out, _ = await run("send", url + "/a2a/agents/echo", "streamy", "--stream")
    lines = out.strip().splitlines()
    assert code == 0 and lines[0].startswith("task ") and lines[-1] == "status completed"
    assert "artifact response: echo: streamy" in lines


async def test_errors_are_one_line_and_exit_1(daemon):
    kernel, url = daemon
    code, out, err = await run("send", url + "/a2a/agents/echo", "x", "--task", "nope")
    assert code == 1 and "error -32001" in err
    code, out, err = await run("discover", "http://169.254.169.254/")
    assert code == 1 and "refusing" in err


async def test_send_to_the_root_url_of_the_bundled_agents_gets_the_coordinators_answer(bundled):
    code, out, err = await run("send", bundled, "hi")
    assert code == 0, err
    assert out.startswith("Done. The worker reports: I wrote draft.md") and "completed" in err
    code, out, err = await run("send", bundled, "hi", "--stream")
    lines = out.strip().splitlines()
    assert code == 0, err
    assert lines[0].startswith("task ") and lines[-1] == "status completed"
    assert any(line.startswith("artifact response: Done. The worker reports:") for line in lines)
