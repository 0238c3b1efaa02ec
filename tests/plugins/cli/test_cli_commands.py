"""The CLI's commands called directly, against the real daemon and a fake kernel."""

import io
import json
from functools import partial

import http_fakes as fakes  # loaded by this folder's conftest
import httpx
import pytest
import trio
from roost.kernel import AgentNotFound, ConfigError, Event
from roost.plugins.cli._client import DaemonError, event_line
from roost.plugins.cli._commands import (
    CliError,
    agents_command,
    format_table,
    run_command,
    send_command,
    tools_command,
    validate_command,
    watch_command,
)
from roost.plugins.http import find_daemon, open_daemon, write_daemon_file
from waiting import wait_until


def streams():
    return io.StringIO(), io.StringIO()


def no_kernel(config):
    raise AssertionError("should have used the running daemon, not booted a kernel")


def send(config, agent, message, *, as_json=False, out=None, err=None, **options):
    """``send_command`` in no named session and with no timeout (unless given), writing to
    ``out``/``err`` (new buffers if not given)."""
    options = {"session_id": None, "timeout": None, **options}
    out = io.StringIO() if out is None else out
    err = io.StringIO() if err is None else err
    return send_command(config, agent, message, as_json=as_json, out=out, err=err, **options)


async def test_agents_in_process_prints_a_table(fake_config):
    out, err = streams()
    code = await agents_command(
        fake_config(), as_json=False, out=out, err=err, open_kernel=fakes.open_fake_kernel
    )
    assert code == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["NAME", "MODEL", "TOOLS", "STATUS", "DESCRIPTION"]
    assert lines[1].split()[:4] == ["echo", "scripted/echo-1", "1", "ready"]
    assert "booting kernel" in err.getvalue()
    assert "loaded 2 agents" in err.getvalue()


async def test_agents_uses_the_running_daemon(fake_config):
    config = fake_config()
    kernel = fakes.FakeKernel(config, agents=("alpha", "beta", "gamma"))
    out, err = streams()
    async with open_daemon(kernel, graceful_timeout=1):
        code = await agents_command(config, as_json=True, out=out, err=err, open_kernel=no_kernel)
    assert code == 0
    assert [a["name"] for a in json.loads(out.getvalue())] == ["alpha", "beta", "gamma"]


async def test_tools_for_an_agent_via_daemon_and_in_process_agree(fake_config):
    config = fake_config()
    kernel = fakes.FakeKernel(config)
    daemon_out, in_process_out = io.StringIO(), io.StringIO()
    async with open_daemon(kernel, graceful_timeout=1):
        await tools_command(
            config,
            agent="echo",
            as_json=True,
            out=daemon_out,
            err=io.StringIO(),
            open_kernel=no_kernel,
        )
    await tools_command(
        config,
        agent="echo",
        as_json=True,
        out=in_process_out,
        err=io.StringIO(),
        open_kernel=fakes.open_fake_kernel,
    )
    assert json.loads(daemon_out.getvalue()) == json.loads(in_process_out.getvalue())
    assert [t["name"] for t in json.loads(daemon_out.getvalue())] == ["read"]


async def test_unknown_agent_via_daemon_names_the_known_ones(fake_config):
    config = fake_config()
    async with open_daemon(fakes.FakeKernel(config), graceful_timeout=1):
        with pytest.raises(DaemonError, match="known agents: coder, echo") as raised:
            await tools_command(
                config, agent="nobody", as_json=False, out=io.StringIO(), err=io.StringIO()
            )
    assert raised.value.status == 404


async def test_send_via_daemon(fake_config):
    config = fake_config()
    kernel = fakes.FakeKernel(config)
    out, err = streams()
    async with open_daemon(kernel, graceful_timeout=1) as url:
        code = await send_command(
            config,
            "echo",
            "hi there",
            session_id="s1",
            timeout=30.0,
            as_json=False,
            out=out,
            err=err,
            open_kernel=no_kernel,
        )
    assert code == 0
    assert out.getvalue() == "echo: hi there\n"
    assert f"via the daemon at {url}" in err.getvalue()
    assert "session s1" in err.getvalue()
    assert kernel.sent[0]["session_id"] == "s1"
    assert kernel.sent[0]["timeout"] == 30.0


async def test_send_in_process_as_json(fake_config):
    out, err = streams()
    code = await send(
        fake_config(),
        "coder",
        "build it",
        as_json=True,
        out=out,
        err=err,
        open_kernel=fakes.open_fake_kernel,
    )
    reply = json.loads(out.getvalue())
    assert code == 0
    assert reply["reply"] == "echo: build it"
    assert reply["agent"] == "coder"
    assert reply["is_error"] is False


async def test_send_in_process_to_an_unknown_agent(fake_config):
    with pytest.raises(AgentNotFound, match="known agents: coder, echo"):
        await send(fake_config(), "ghost", "hi", open_kernel=fakes.open_fake_kernel)


async def test_send_exits_1_when_the_agent_answers_with_an_error(fake_config):
    class FailingReplies(fakes.FakeKernel):
        async def send(self, agent, message, **kwargs):
            import attrs

            return attrs.evolve(
                await super().send(agent, message, **kwargs), is_error=True, text="provider failed"
            )

    config = fake_config()
    out = io.StringIO()
    async with open_daemon(FailingReplies(config), graceful_timeout=1):
        code = await send(config, "echo", "hi", out=out)
    assert code == 1
    assert out.getvalue() == "provider failed\n"


async def test_send_rejects_an_empty_message(fake_config):
    with pytest.raises(CliError, match="MESSAGE is empty"):
        await send(fake_config(), "echo", "  ", open_kernel=no_kernel)


async def test_daemon_with_a_key_the_cli_lacks_gives_a_clear_error(fake_config, monkeypatch):
    server_config = fake_config(api_key_env="ROOST_TEST_CLI_KEY")
    monkeypatch.setenv("ROOST_TEST_CLI_KEY", "sekrit")
    async with open_daemon(fakes.FakeKernel(server_config), graceful_timeout=1):
        monkeypatch.delenv("ROOST_TEST_CLI_KEY")
        with pytest.raises(DaemonError, match="requires an API key") as raised:
            await agents_command(server_config, as_json=False, out=io.StringIO(), err=io.StringIO())
        assert raised.value.status == 401
        with pytest.raises(DaemonError, match="requires an API key"):
            await watch_command(
                server_config,
                kinds=[],
                as_json=False,
                count=1,
                out=io.StringIO(),
                err=io.StringIO(),
            )
        monkeypatch.setenv("ROOST_TEST_CLI_KEY", "sekrit")
        out = io.StringIO()
        assert await agents_command(server_config, as_json=True, out=out, err=io.StringIO()) == 0
        assert len(json.loads(out.getvalue())) == 2


async def test_stale_or_dead_daemon_files_are_ignored(fake_config):
    config = fake_config()
    write_daemon_file(config.home, "127.0.0.1", 9, pid=2**22 + 777)  # no such process
    assert await find_daemon(config.home) is None
    # Our own (live) pid, but nothing answering on that port.
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        free_port = sock.getsockname()[1]
    write_daemon_file(config.home, "127.0.0.1", free_port)
    assert await find_daemon(config.home) is None
    out = io.StringIO()
    await agents_command(
        config, as_json=True, out=out, err=io.StringIO(), open_kernel=fakes.open_fake_kernel
    )
    assert len(json.loads(out.getvalue())) == 2  # fell back to an in-process kernel


async def wait_for_subscriber(kernel, count=1):
    await wait_until(
        lambda: kernel.tap.subscriber_count >= count, f"{count} tap subscriber(s)", timeout=5
    )


async def test_watch_prints_one_line_per_event(fake_config):
    config = fake_config()
    kernel = fakes.FakeKernel(config)
    out, err = streams()
    async with open_daemon(kernel, graceful_timeout=1):
        async with trio.open_nursery() as nursery:
            done = trio.Event()

            async def watch():
                await watch_command(
                    config, kinds=["AGENT:"], as_json=False, count=2, out=out, err=err
                )
                done.set()

            nursery.start_soon(watch)
            await wait_for_subscriber(kernel)
            kernel.tap.publish(Event("KERNEL:STARTED", "kernel"))  # filtered out
            await kernel.send("echo", "hello")
            with trio.fail_after(5):
                await done.wait()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "AGENT:MESSAGE" in lines[0] and "api → echo" in lines[0] and '"hello"' in lines[0]
    assert "AGENT:REPLY" in lines[1]
    assert "kinds: AGENT:" in err.getvalue()


async def test_watch_stops_cleanly_when_asked(fake_config):
    config = fake_config()
    kernel = fakes.FakeKernel(config)
    stop = trio.Event()
    out = io.StringIO()
    async with open_daemon(kernel, graceful_timeout=1):
        async with trio.open_nursery() as nursery:
            results = []

            async def watch():
                results.append(
                    await watch_command(
                        config,
                        kinds=[],
                        as_json=True,
                        count=None,
                        out=out,
                        err=io.StringIO(),
                        stop=stop.wait,
                    )
                )

            nursery.start_soon(watch)
            await wait_for_subscriber(kernel)
            kernel.tap.publish(Event("TEST:ONE", "test", payload={"n": 1}))
            await wait_until(out.getvalue, "the event printed", timeout=5)
            stop.set()
    assert results == [0]
    assert json.loads(out.getvalue())["payload"] == {"n": 1}
    assert kernel.tap.subscriber_count == 0


async def test_watch_reports_the_daemon_closing_the_stream(fake_config):
    config = fake_config()
    kernel = fakes.FakeKernel(config)
    err = io.StringIO()
    results = []
    async with trio.open_nursery() as nursery:
        async with open_daemon(kernel, graceful_timeout=2):

            async def watch():
                results.append(
                    await watch_command(
                        config,
                        kinds=[],
                        as_json=False,
                        count=None,
                        out=io.StringIO(),
                        err=err,
                        stop=trio.sleep_forever,
                    )
                )

            nursery.start_soon(watch)
            await wait_for_subscriber(kernel)
        # leaving open_daemon shuts the daemon down; the watcher sees a 1001 close
    assert results == [0]
    assert "closed the stream (1001: daemon shutting down)" in err.getvalue()


async def test_watch_without_a_daemon_says_how_to_start_one(fake_config):
    with pytest.raises(CliError, match="no roost daemon is running.*roost run"):
        await watch_command(
            fake_config(), kinds=[], as_json=False, count=1, out=io.StringIO(), err=io.StringIO()
        )


async def start_run(nursery, config, stop, *, host, out, err=None, open_kernel=None):
    """Start ``run_command`` on port 0 of ``host`` (a fake kernel unless ``open_kernel``)
    until ``stop`` is set; its URL once it serves."""
    run = partial(
        run_command,
        config,
        host=host,
        port=0,
        out=out,
        err=io.StringIO() if err is None else err,
        open_kernel=open_kernel or fakes.open_fake_kernel,
        stop=stop.wait,
    )
    return await nursery.start(run)


async def test_run_serves_until_stopped_and_cleans_up(fake_config):
    config = fake_config()
    out, err = streams()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await start_run(nursery, config, stop, host="127.0.0.1", out=out, err=err)
        async with httpx.AsyncClient() as client:
            health = await client.get(url + "/health")
        assert (config.home / "daemon.json").exists()
        stop.set()
    assert health.json()["status"] == "ok"
    banner = out.getvalue()
    assert f"listening on {url}" in banner
    assert "agents (2): echo, coder" in banner
    assert "auth: off" in banner
    assert "booting kernel" in err.getvalue() and "stopped" in err.getvalue()
    assert not (config.home / "daemon.json").exists()


async def test_run_on_a_wildcard_address_prints_a_url_the_daemon_serves(fake_config, monkeypatch):
    """Bound to 0.0.0.0 the banner named http://0.0.0.0:PORT, a Host the DNS-rebinding guard
    refuses (421); it names the loopback address, which this host's clients use."""
    monkeypatch.setenv("ROOST_TEST_WILDCARD_KEY", "k" * 16)
    config = fake_config(api_key_env="ROOST_TEST_WILDCARD_KEY")
    out = io.StringIO()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await start_run(nursery, config, stop, host="0.0.0.0", out=out)
        async with httpx.AsyncClient() as client:
            health = await client.get(url + "/health")
        stop.set()
    assert url.startswith("http://127.0.0.1:") and f"listening on {url}" in out.getvalue()
    assert health.status_code == 200, health.text


async def test_run_banner_shows_auth_and_plugin_failures(fake_config, monkeypatch):
    from roost.kernel import PluginFailure

    @fakes.asynccontextmanager
    async def kernel_with_failure(config):
        async with fakes.open_fake_kernel(config) as kernel:
            kernel.plugins.failures.append(
                PluginFailure("flaky", "import", "ImportError: no module named x")
            )
            yield kernel

    monkeypatch.setenv("ROOST_TEST_RUN_KEY", "k")
    config = fake_config(api_key_env="ROOST_TEST_RUN_KEY")
    out = io.StringIO()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await start_run(nursery, config, stop, host=None, out=out, open_kernel=kernel_with_failure)
        stop.set()
    assert "auth: bearer token required (environment variable ROOST_TEST_RUN_KEY)" in out.getvalue()
    assert "flaky (import): ImportError: no module named x" in out.getvalue()
    assert "k\n" not in out.getvalue().replace("ROOST_TEST_RUN_KEY", "")


async def test_run_refuses_a_second_daemon_for_the_same_home(fake_config):
    config = fake_config()
    async with open_daemon(fakes.FakeKernel(config), graceful_timeout=1) as url:
        with pytest.raises(CliError, match=f"already running .* at {url}"):
            await run_command(
                config,
                host="127.0.0.1",
                port=0,
                out=io.StringIO(),
                err=io.StringIO(),
                open_kernel=no_kernel,
            )


async def test_run_on_a_busy_port_is_a_clear_error(fake_config, tmp_path):
    other = fakes.FakeKernel(fakes.FakeConfig(home=tmp_path / "other"))
    async with open_daemon(other, graceful_timeout=1) as url:
        port = int(url.rsplit(":", 1)[1])
        with pytest.raises(CliError, match=f"cannot listen on 127.0.0.1:{port}"):
            await run_command(
                fake_config(),
                host="127.0.0.1",
                port=port,
                out=io.StringIO(),
                err=io.StringIO(),
                open_kernel=fakes.open_fake_kernel,
                stop=trio.sleep_forever,
            )


async def test_run_with_bad_http_settings_fails_before_booting(fake_config):
    with pytest.raises(ConfigError, match="http.rate_limit_burst"):
        await run_command(
            fake_config(rate_limit_burst=0),
            host=None,
            port=0,
            out=io.StringIO(),
            err=io.StringIO(),
            open_kernel=no_kernel,
        )


def write_manifest(path, name="pinger"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "name": name,
                "description": "answers pong",
                "version": "0.1.0",
                "model": {
                    "provider": "scripted",
                    "name": "rules",
                    "script": {"rules": [{"match": ".", "reply": "pong: {message}"}]},
                },
            }
        )
    )
    return path


def test_validate_reports_ok_and_each_error(tmp_path):
    good = write_manifest(tmp_path / "good" / "agent.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": 5}')
    out, err = streams()
    code = validate_command([str(good), str(bad)], out=out, err=err)
    lines = out.getvalue().splitlines()
    assert code == 1
    assert lines[0] == f"OK     {good}"
    assert all(line.startswith(f"ERROR  {bad}: at /") for line in lines[1:])
    assert any("/name" in line for line in lines[1:])
    assert "error(s)" in err.getvalue()
    assert validate_command([str(good)], out=io.StringIO(), err=io.StringIO()) == 0


def test_format_table_aligns_and_truncates():
    table = format_table(
        ["A", "LONG HEADER"], [["x", "y" * 100], ["wide value", None]], max_width=10
    )
    lines = table.splitlines()
    assert lines[0] == "A           LONG HEADER"
    assert lines[1] == "x           yyyyyyyyy…"
    assert lines[2] == "wide value"


def test_event_line_is_readable_and_bounded():
    line = event_line(
        {
            "kind": "EXEC:TOOL_CALL",
            "source": "coder",
            "target": "tools",
            "ts": 0.5,
            "payload": {"args": "x" * 1000},
        },
        width=50,
    )
    assert "EXEC:TOOL_CALL" in line and "coder → tools" in line
    assert line.endswith("…")
    assert len(line) < 120
    assert "KERNEL:STARTED" in event_line(
        {"kind": "KERNEL:STARTED", "source": "kernel", "payload": {}}
    )


async def test_send_json_in_process_carries_artifacts_like_the_daemon(tmp_path):
    # roost send --json without a daemon left out the reply's "artifacts": the in-process
    # path built its own copy of the daemon's reply body.
    from roost.kernel import default_config, open_kernel

    manifest = tmp_path / "agents" / "maker" / "agent.json"
    manifest.parent.mkdir(parents=True)
    steps = [{"tool": "artifact", "arguments": {"name": "facts", "data": {"ok": True}}}]
    rules = [{"match": ".", "steps": steps, "reply": "made"}]
    manifest.write_text(
        json.dumps(
            {
                "name": "maker",
                "description": "hands over an artifact (scripted)",
                "version": "0.1.0",
                "model": {"provider": "scripted", "name": "rules", "script": {"rules": rules}},
                "capabilities": {"tools": ["artifact"]},
            }
        )
    )
    config = default_config(
        home=str(tmp_path / "home"),
        agents={"dirs": [str(manifest.parent.parent)], "bundled": False},
        http={"port": 0},
    )

    async def send_json() -> dict:
        out, err = streams()
        code = await send(config, "maker", "make", as_json=True, out=out, err=err)
        assert code == 0, err.getvalue()
        return json.loads(out.getvalue())

    with trio.fail_after(30):
        in_process = await send_json()
        async with open_kernel(config) as kernel, open_daemon(kernel, graceful_timeout=1):
            via_daemon = await send_json()
    assert in_process.keys() == via_daemon.keys()

    def without_ids(reply: dict) -> list:
        return [{k: v for k, v in a.items() if k != "artifactId"} for a in reply["artifacts"]]

    assert without_ids(in_process) == without_ids(via_daemon)
    assert without_ids(in_process) == [{"name": "facts", "parts": [{"data": {"ok": True}}]}]
