"""The CLI's commands as async functions: results to ``out``, progress to ``err``, an exit
code back; ``open_kernel`` is injectable so the same code runs against a test kernel.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import attrs
import trio
from roost.kernel import AgentNotFound, AgentUnavailable, KernelAPI, RoostError
from roost.plugins.http import find_daemon, reply_json, resolve_api_key, tool_json

from ._client import DaemonClient, TokenRuns

KernelOpener = Callable[[Any], Any]


class CliError(RoostError):
    """A problem the user can fix; printed as one line."""

    code = "cli_error"


def say(stream: TextIO, text: str = "") -> None:
    print(text, file=stream, flush=True)


def drain(channel: Any) -> list[Any]:
    """What ``channel`` holds now, without waiting."""
    items = []
    with suppress(trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
        while True:
            items.append(channel.receive_nowait())
    return items


def _opener(open_kernel: KernelOpener | None) -> KernelOpener:
    if open_kernel is not None:
        return open_kernel
    from roost.kernel import open_kernel as real_open_kernel

    return real_open_kernel


async def _daemon(config: Any) -> DaemonClient | None:
    """A client of the daemon running for ``config.home``, or None when none is."""
    info = await find_daemon(config.home)
    # The key sent is the one the daemon takes, by its own rules.
    return None if info is None else DaemonClient(info, resolve_api_key(config.http, os.environ)[0])


class _InProcess:
    """An in-process kernel answering what ``DaemonClient`` asks of a daemon."""

    def __init__(self, kernel: KernelAPI) -> None:
        self.kernel = kernel

    async def agents(self) -> list[dict[str, Any]]:
        return self.kernel.agent_info()

    async def peers(self) -> list[dict[str, Any]]:
        return []  # roost agents shows the daemon's pending peers only

    async def tools(self, agent: str | None = None) -> list[dict[str, Any]]:
        return [tool_json(spec) for spec in self.kernel.list_tools(agent)]

    async def send(self, agent: str, message: str, **options: Any) -> dict[str, Any]:
        return reply_json(await self.kernel.send(agent, message, **options))


@asynccontextmanager
async def _connect(
    config: Any, err: TextIO, open_kernel: KernelOpener | None, agent: str | None = None
) -> AsyncIterator[DaemonClient | _InProcess]:
    """The running daemon's client, else an in-process kernel booted for one command (an
    unknown or unavailable ``agent`` refused first, then its MCP servers waited for)."""
    if (client := await _daemon(config)) is not None:
        yield client
        return
    say(err, "booting kernel…")
    async with _opener(open_kernel)(config) as kernel:
        if agent is not None and agent not in kernel.agents:
            raise AgentNotFound(agent, list(kernel.agents))
        if agent in kernel.agent_errors:  # what send would say, without the wait first
            raise AgentUnavailable(agent, kernel.agent_errors[agent])
        await wait_for_mcp_servers(kernel, err)
        say(err, f"loaded {len(kernel.agents)} agents")
        yield _InProcess(kernel)


MCP_SERVER_EVENT = "MCP:SERVER"  # what the MCP client publishes when a server connects or goes down


def _outcome(entry: Mapping[str, Any]) -> str | None:
    """``connected``, ``failed`` (an attempt failed; it retries in the background) or None."""
    if entry.get("status") == "connected":
        return "connected"
    if entry.get("error") or entry.get("status") in ("failed", "stopped"):
        return "failed"
    return None


async def wait_for_mcp_servers(kernel: KernelAPI, err: TextIO) -> None:
    """Wait until each MCP server is connected or failed (at most its ``timeout_secs``): a
    one-shot command listing or running tools after boot would miss every ``mcp_*`` tool."""
    try:
        from roost.plugins.mcp._client_plugin import manager_for
    except ImportError:  # the MCP plugin may be disabled
        return
    manager = manager_for(kernel)
    if manager is None or not manager.states:
        return
    async with kernel.tap.subscribe(kinds=(MCP_SERVER_EVENT,), buffer=16) as changes:
        deadlines: dict[str, float] = {}
        for entry in manager.status()["configured"]:
            if _outcome(entry) is None:
                limit = float(entry.get("timeout_secs") or 30.0)
                deadlines[entry["name"]] = trio.current_time() + limit
                say(err, f"waiting for MCP server {entry['name']!r} (up to {limit:g} s)…")
        while deadlines:
            with trio.move_on_at(min(deadlines.values())):
                await changes.receive()  # any change of any server: look again
            status = manager.status()
            configured = {e["name"]: e for e in status["configured"]}
            tools = {c["name"]: c.get("tools_count", 0) for c in status["connected"]}
            for name in list(deadlines):
                entry = configured.get(name, {})
                outcome = _outcome(entry)
                if outcome == "connected":
                    say(err, f"MCP server {name!r} connected ({tools.get(name, 0)} tools)")
                elif outcome == "failed":
                    reason = str(entry.get("error") or entry.get("status")).removeprefix(
                        f"MCP server {name!r}: "
                    )
                    say(err, f"MCP server {name!r} failed: {reason}; going on without its tools")
                elif trio.current_time() >= deadlines[name]:
                    say(
                        err,
                        f"MCP server {name!r} did not connect within "
                        f"{entry.get('timeout_secs', 0):g} s (its timeout_secs); "
                        "going on without its tools",
                    )
                else:
                    continue
                del deadlines[name]


def format_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, max_width: int = 60
) -> str:
    """A plain, left-aligned text table; cells longer than ``max_width`` are cut with '…'."""
    cells = [[_short("" if v is None else v, max_width) for v in row] for row in rows]
    table = [list(headers), *cells]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines)


def _agent_rows(agents: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    rows = []
    for a in agents:
        model = "/".join(str(p) for p in (a.get("provider"), a.get("model")) if p)
        count = a.get("tools")  # a list, or its length (None: format_table shows "")
        if isinstance(count, (list, tuple)):
            count = len(count)
        status = a.get("status", "")
        if a.get("error") and status != "ready":  # why it is stopped or unavailable
            status = f"{status}: {a['error']}"
        rows.append([a.get("name"), model, count, status, a.get("description", "")])
    return rows


async def agents_command(
    config: Any, *, as_json: bool, out: TextIO, err: TextIO, open_kernel: KernelOpener | None = None
) -> int:
    """``roost agents``: from the running daemon, else from an in-process kernel."""
    async with _connect(config, err, open_kernel) as client:
        agents = await client.agents()
        peers = [] if as_json else await client.peers()
    if as_json:
        say(out, json.dumps(agents, indent=2, ensure_ascii=False, default=str))
    elif not agents:
        say(err, "no agents configured (add agents.dirs to roost.toml or agents/<name>/agent.json)")
    else:
        columns = ["NAME", "MODEL", "TOOLS", "STATUS", "DESCRIPTION"]
        say(out, format_table(columns, _agent_rows(agents)))
    for line in _pending_peer_lines(peers):
        say(out, line)
    return 0


def _pending_peer_lines(peers: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per MCP server or external A2A agent that is not connected (yet)."""
    lines = []
    for peer in peers:
        if peer.get("status") == "connected":
            continue
        what = "MCP server" if peer.get("kind") == "mcp" else "A2A agent"
        line = (
            f"pending: {what} {peer.get('name')} ({peer.get('url') or peer.get('command')}) "
            f"is {peer.get('status')}"
        )
        if peer.get("error"):
            line += f": {peer['error']}"
        if isinstance(peer.get("next_retry_at"), (int, float)):
            line += f"; next try in {max(0, round(peer['next_retry_at'] - time.time()))} s"
        lines.append(line)
    return lines


async def tools_command(
    config: Any,
    *,
    agent: str | None,
    as_json: bool,
    out: TextIO,
    err: TextIO,
    open_kernel: KernelOpener | None = None,
) -> int:
    """``roost tools [--agent NAME]``: every tool, or those ``NAME`` may call."""
    async with _connect(config, err, open_kernel) as client:
        tools = await client.tools(agent)
    if as_json:
        say(out, json.dumps(tools, indent=2, ensure_ascii=False, default=str))
    elif not tools:
        say(err, "no tools" + (f" available to {agent}" if agent else ""))
    else:
        rows = [
            [t.get("name"), t.get("owner", ""), (t.get("description") or "").split("\n")[0]]
            for t in tools
        ]
        say(out, format_table(["NAME", "OWNER", "DESCRIPTION"], rows))
    return 0


async def send_command(
    config: Any,
    agent: str,
    message: str,
    *,
    session_id: str | None,
    timeout: float | None,
    as_json: bool,
    out: TextIO,
    err: TextIO,
    open_kernel: KernelOpener | None = None,
) -> int:
    """``roost send AGENT MESSAGE`` via the daemon, else in-process; exit code 1 on an error."""
    if not message.strip():
        raise CliError("MESSAGE is empty; pass the text to send, e.g. roost send coder 'hello'")
    async with _connect(config, err, open_kernel, agent) as client:
        via = f" via the daemon at {client.info.url}" if isinstance(client, DaemonClient) else ""
        say(err, f"sending to {agent}{via}…")
        reply = await client.send(agent, message, session_id=session_id, timeout=timeout)
    if as_json:
        say(out, json.dumps(reply, indent=2, ensure_ascii=False))
    else:
        say(out, str(reply.get("reply", "")))
        say(err, f"session {reply.get('session_id')} · trace {reply.get('trace_id')}")
    return 1 if reply.get("is_error") else 0


async def watch_command(
    config: Any,
    *,
    kinds: Sequence[str],
    as_json: bool,
    count: int | None,
    out: TextIO,
    err: TextIO,
    stop: Callable[[], Awaitable[Any]] | None = None,
) -> int:
    """``roost watch``: a line per daemon event until ``count`` or ``stop`` (SIGINT, SIGTERM)."""
    client = await _daemon(config)
    if client is None:
        raise CliError(
            f"no roost daemon is running for {config.home} (no live "
            f"{Path(config.home) / 'daemon.json'}); start one with: roost run"
        )
    from trio_websocket import ConnectionClosed

    seen = 0
    runs = None if as_json else TokenRuns()  # one line per run's streamed tokens
    async with client.events(kinds) as ws:
        only = f" (kinds: {', '.join(kinds)})" if kinds else ""
        say(err, f"watching {client.info.url}/api/events{only} · Ctrl-C to stop")
        async with trio.open_nursery() as nursery:

            async def stop_watching() -> None:
                await (stop() if stop is not None else wait_for_signal(err))
                nursery.cancel_scope.cancel()

            nursery.start_soon(stop_watching)
            try:
                while count is None or seen < count:
                    text = await ws.get_message()
                    try:
                        event = json.loads(text)
                    except ValueError:
                        continue
                    if runs is None:  # as the daemon sent it: JSON text UTF-8 can carry
                        say(out, text)
                    elif isinstance(event, dict):
                        for line in runs.feed(event):
                            say(out, line)
                    seen += 1
            except ConnectionClosed as closed:
                code, why = closed.reason.code, closed.reason.reason
                say(err, f"the daemon closed the stream ({code}{': ' + why if why else ''})")
            nursery.cancel_scope.cancel()
    for line in runs.flush() if runs is not None else ():
        say(out, line)
    return 0


async def wait_for_signal(err: TextIO | None = None) -> int:
    """Wait for Ctrl-C (SIGINT) or SIGTERM; returns its number."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as received:
        async for signum in received:
            if err is not None:
                name = signal.Signals(signum).name
                say(err, f"\nreceived {name}; stopping (press Ctrl-C again to force)")
            return signum
    return 0  # pragma: no cover - the receiver never ends by itself


async def run_command(
    config: Any,
    *,
    host: str | None,
    port: int | None,
    out: TextIO,
    err: TextIO,
    open_kernel: KernelOpener | None = None,
    stop: Callable[[], Awaitable[Any]] | None = None,
    own_process: bool = False,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> int:
    """``roost run``: serve the HTTP API until SIGINT/SIGTERM (or ``stop``); the base URL goes
    to ``task_status``. ``own_process``: the process is the daemon's alone, ``_boot`` tunes it."""
    from roost.plugins.http import HttpSettings, base_url, loopback_for, serve

    host = host if host is not None else config.http.host
    port = port if port is not None else config.http.port
    settings = HttpSettings.from_config(config.http)  # bad [http] settings fail before booting
    if (running := await find_daemon(config.home)) is not None:
        raise CliError(
            f"a roost daemon is already running for {config.home} at {running.url} (pid "
            f"{running.pid}); stop it first, or set ROOST_HOME to use another data directory"
        )
    say(err, "booting kernel…")
    async with AsyncExitStack() as stack:
        kernel = await _boot(stack, _opener(open_kernel)(config), own_process)
        say(err, f"loaded {len(kernel.agents)} agents")
        trigger = stop if stop is not None else partial(wait_for_signal, err)
        bind_error: OSError | None = None
        async with trio.open_nursery() as nursery:
            try:
                bound_host, bound_port = await nursery.start(
                    partial(serve, kernel, host=host, port=port, shutdown_trigger=trigger)
                )
            except OSError as exc:  # caught here so it is not wrapped in an ExceptionGroup
                bind_error = exc
            else:
                # Local clients' URL: a wildcard address names a Host the daemon refuses.
                url = settings.public_url or base_url(loopback_for(bound_host), bound_port)
                banner(out, kernel, url, settings, host=bound_host)
                task_status.started(url)
        if bind_error is not None:
            raise CliError(
                f"cannot listen on {host}:{port}: {bind_error.strerror or bind_error}; "
                "pick another --port"
            ) from bind_error
        say(err, "daemon stopped; shutting down the kernel…")
    say(err, "stopped")
    return 0


async def _boot(stack: AsyncExitStack, opening: Any, own_process: bool) -> Any:
    """Enter the kernel context ``opening`` on ``stack``, returning the kernel. In a process of
    its own, the open-file limit is raised and the cyclic GC is off during boot (what boot
    allocates lives as long as the kernel), then frozen (``gc.freeze``) so collections walk
    only what requests allocate."""
    if not own_process:
        return await stack.enter_async_context(opening)
    from roost.kernel import raise_open_file_limit

    raise_open_file_limit()  # a thousand callers need more than a soft limit of 1,024
    enabled = gc.isenabled()
    gc.disable()
    try:
        kernel = await stack.enter_async_context(opening)
    finally:
        if enabled:
            gc.enable()
    gc.freeze()
    return kernel


def banner(out: TextIO, kernel: KernelAPI, url: str, settings: Any, *, host: str) -> None:
    """What ``roost run`` prints once listening."""
    from roost.kernel import roost_version

    names = list(kernel.agents)
    say(out, f"roost {roost_version()} · listening on {url}")
    say(out, f"  dashboard: {url}/")
    say(out, f"  agents ({len(names)}): {', '.join(names) if names else 'none'}")
    if settings.keys:
        say(out, f"  auth: bearer token required ({settings.api_key_source})")
    else:
        say(out, "  auth: off (set ROOST_API_KEY to require a bearer token)")
        if host not in ("127.0.0.1", "localhost", "::1"):
            say(
                out,
                f"  warning: listening on {host} without an API key: "
                "anyone who can reach it can drive your agents",
            )
    for name, error in sorted(kernel.agent_errors.items()):
        say(out, f"  agent {name} unavailable: {error}")
    for error in kernel.manifest_errors:
        say(out, f"  manifest skipped: {error}")
    for warning in kernel.load_warnings:
        say(out, f"  warning: {warning}")
    if sandbox := _sandbox_line():
        say(out, sandbox)
    if failures := list(kernel.plugins.failures):
        say(out, f"  plugin failures ({len(failures)}):")
        for f in failures:
            say(out, f"    - {f.name} ({f.stage}): {f.error}")
    entry = json.dumps(ide_config(kernel.config.home), ensure_ascii=False)
    say(out, f"  MCP clients (IDE config): {entry}")
    if settings.api_key:
        say(out, f'    (add your key to its "env" as {kernel.config.http.api_key_env})')
    say(out, f"  events: {url.replace('http://', 'ws://', 1)}/api/events · Ctrl-C to stop")


def roost_executable() -> str:
    """The absolute path of this ``roost`` (an IDE runs MCP servers without the shell's PATH)."""
    import shutil
    import sys

    argv0 = Path(sys.argv[0])
    if argv0.stem == "roost" and argv0.is_file():
        return str(argv0.absolute())
    beside = Path(sys.executable).parent / "roost"
    if beside.is_file():
        return str(beside)
    found = shutil.which("roost")
    return str(Path(found).absolute()) if found else "roost"


def ide_config(home: Any) -> dict[str, Any]:
    """The MCP server entry that runs ``roost mcp`` against this daemon's data directory."""
    from roost.kernel import resolve_data_dir

    entry: dict[str, Any] = {"command": roost_executable(), "args": ["mcp"]}
    if Path(home).expanduser().absolute() != resolve_data_dir({}).absolute():
        entry["env"] = {"ROOST_HOME": str(home)}  # else roost mcp would look in the default home
    return entry


def _sandbox_line() -> str | None:
    """Whether bash is confined by Landlock; loud when it is not."""
    try:
        from roost.plugins.tools import landlock_status
    except Exception:  # the tools plugin may be disabled or replaced
        return None
    status = landlock_status()
    if status.available:
        return f"  sandbox: {status.describe()}"
    return f"  WARNING: {status.describe()}; only the file tools' path checks apply"


def validate_command(paths: Sequence[str], *, out: TextIO, err: TextIO) -> int:
    """``roost validate FILE...``: OK or each error per manifest, then warnings; 1 on an error."""
    from roost.kernel import validate_files

    warnings: list[str] = []
    errors = list(validate_files(paths, warnings=warnings))
    unreported = {i: str(getattr(e, "file", "")) for i, e in enumerate(errors)}  # i -> file
    for given in map(str, paths):
        prefix = given.rstrip("/") + "/"
        mine = [i for i, file in unreported.items() if file == given or file.startswith(prefix)]
        if not mine:
            say(out, f"OK     {given}")
        for i in mine:
            del unreported[i]
            say(out, f"ERROR  {errors[i]}")
    for i in unreported:
        say(out, f"ERROR  {errors[i]}")
    for warning in warnings:
        say(out, f"WARN   {warning}")
    if errors:
        say(err, f"{len(errors)} error(s) in {len(paths)} path(s)")
        return 1
    return 0


# ---- roost demo: agents collaborating over kernel-routed MCP calls, then the breaker ----

COLLABORATION_MESSAGE = "Write a haiku about Trio nurseries"
RUNAWAY_MESSAGE = "runaway: keep passing this along forever"


async def run_demo(
    config: Any = None, out: TextIO | None = None, *, home: str | None = None
) -> int:
    """Run the demo on a throw-away data directory (unless ``home``), printing to ``out``."""
    import sys

    from roost.kernel import EventKind, default_config, open_kernel

    out = out or sys.stdout
    with tempfile.TemporaryDirectory(prefix="roost-demo-") as tmp:
        home = home or tmp
        config = default_config(home=home) if config is None else attrs.evolve(config, home=home)

        say = partial(print, file=out, flush=True)
        say("booting kernel…")
        async with open_kernel(config) as kernel:
            say(f"agents: {', '.join(kernel.agents)}  ·  tools: {len(kernel.registry)}")
            for failure in kernel.plugins.failures:
                say(f"warning: plugin {failure.name} skipped: {failure.error}")

            async with kernel.tap.subscribe(buffer=10_000) as events:
                say()
                say(f"1. coordinator ← {COLLABORATION_MESSAGE!r}")
                reply = await kernel.send("coordinator", COLLABORATION_MESSAGE, timeout=60)
                collected = drain(events)
            say()
            say("trace tree (every hop is an EXEC:TOOL_CALL event routed by the kernel):")
            for line in trace_tree(collected, reply.trace_id):
                say("  " + line)
            say()
            say(f"reply: {reply.text}")
            for output in reply.outputs:  # handed over by the worker, adopted up the chain
                sizes = ", ".join(
                    f"{p.media_type or 'file'}, {len(p.raw)} bytes"
                    if p.raw is not None
                    else (p.media_type or "text")
                    for p in output.parts
                )
                say(f"artifact: {output.name} ({sizes}) — {output.description or 'no description'}")

            async with kernel.tap.subscribe(
                buffer=10_000, kinds=(EventKind.KERNEL_BREAKER,)
            ) as breaker:
                say()
                say(
                    f"2. coordinator ← {RUNAWAY_MESSAGE!r}  (coordinator → "
                    "worker → reviewer → coordinator → …)"
                )
                with trio.move_on_after(60):
                    runaway = await kernel.send("coordinator", RUNAWAY_MESSAGE, timeout=60)
                trips = drain(breaker)
            if not trips:
                say("error: the depth breaker did not trip")
                return 1
            trip = trips[0].payload
            hop, limit = len(trip["path"]), trip["max_depth"]
            say(f"breaker tripped: hop {hop} refused, the depth limit is {limit}:")
            say("  " + " → ".join(trip["path"]))
            say(f"reply: {runaway.text}")
        say()
        say("demo finished.")
    return 0


def trace_tree(events: list[Any], trace_id: str) -> list[str]:
    """Lines of an indented tree of the tool calls in one trace, in the order they began."""
    from roost.kernel import EventKind

    lines = []
    for ev in events:
        if ev.kind != EventKind.EXEC_TOOL_CALL or ev.trace is None or ev.trace.trace_id != trace_id:
            continue
        depth = ev.trace.depth
        payload = ev.payload if isinstance(ev.payload, dict) else {}
        if "jsonrpc" in payload:  # an agent asked another agent over the in-memory MCP transport
            args = payload.get("params", {}).get("arguments", {})
            what = (
                f"{ev.source} → {ev.target}  (MCP tools/call message: "
                f"{_short(args.get('message', ''))})"
            )
        else:
            what = (
                f"{ev.source} → {payload.get('tool', ev.target)}  "
                f"{_short(str(payload.get('arguments', '')))}"
            )
        lines.append("  " * (depth - 1) + "└─ " + what)
    return lines


def _short(text: Any, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
