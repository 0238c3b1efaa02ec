"""The depth breaker at every entry (issue 15, items 5 and 6): (entry point × attack).

A real kernel and daemon on 127.0.0.1 with scripted agents. Each entry that starts an
agent's work — REST ``/api``, MCP ``/mcp`` and ``/agents/<name>/mcp``, A2A JSON-RPC and
HTTP+JSON, ``roost mcp`` on stdio — meets each way of claiming (or hiding) a depth:

* ``header-5``: ``X-Roost-Trace-Depth: 5`` (``roost mcp``: ``ROOST_TRACE_DEPTH=5``)
* ``body-5``: depth 5 in the request's own carrier (MCP ``_meta``, A2A message metadata)
* ``header-5-body-0`` / ``body-5-header-0``: the same, plus a forged lower depth in the other
* ``huge``: ``999999``, which must trip and be named, not wrap or read as "depth 2"
* ``garbage``: a depth that is no number: refused as invalid input (400 / -32602)

Then the bash attack end to end: an agent whose ``bash`` curls the daemon's own
``/api/agents/<self>/message`` — with no trace headers, with forged ones, and forwarding
the environment it was given — and the chain trips at depth 5 every time.

Last, a chain n1 → … → n6 whose hops mix the in-host ask, MCP over HTTP and A2A between
daemons trips at n6, as an all-in-memory chain does.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from roost.kernel import AgentManifest, EventKind, default_config, open_kernel, parse_manifest

MCP_VERSION = "2026-07-28"
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "trace-test", "version": "1"},
}
DEPTH = "io.roost/trace-depth"
PATH = "io.roost/trace-path"
FIVE = ["a", "b", "c", "d", "e"]
ROOST = Path(sys.executable).parent / "roost"


def write_agent(
    directory: Path,
    name: str,
    rules: list,
    *,
    tools: tuple[str, ...] = (),
    network: dict | None = None,
) -> None:
    manifest: dict[str, Any] = {
        "name": name,
        "description": f"{name} (trace test agent)",
        "version": "0.1.0",
        "model": {"provider": "scripted", "name": "rules", "script": {"rules": rules}},
        "a2a": {"enabled": True},
    }
    if tools:
        manifest["capabilities"] = {"tools": list(tools)}
    if network is not None and "network" in attrs.fields_dict(AgentManifest):
        manifest["network"] = (
            network  # bash may reach the daemon's port (when the sandbox has such rules)
        )
    path = directory / name / "agent.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))


def make_config(tmp_path: Path, port: int = 0, agents_extra=None):
    agents = tmp_path / "agents"
    write_agent(agents, "worker", [{"match": ".", "reply": "worked: {message}"}])
    if agents_extra is not None:
        agents_extra(agents)
    home = tmp_path / "home"
    (tmp_path / "roost.toml").write_text(
        f'home = "{home}"\n[agents]\ndirs = ["{agents}"]\nbundled = false\n[http]\nport = {port}\n'
    )
    return default_config(
        home=str(home),
        agents={"dirs": [str(agents)], "bundled": False},
        http={"port": port, "rate_limit_per_s": 100000, "rate_limit_burst": 100000},
        a2a={"default_agent": "worker"},
    )


@asynccontextmanager
async def serve(config, port: int = 0):
    from roost.plugins.http import open_daemon

    async with open_kernel(config) as kernel:
        async with open_daemon(kernel, port=port, graceful_timeout=1) as url:
            yield kernel, url


# ---- the entries --------------------------------------------------------------------------


def _mcp(path: str, tool: str):
    def build(meta: dict | None) -> tuple[str, dict, dict]:
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": {"message": "hi"},
                "_meta": {**MCP_META, **(meta or {})},
            },
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MCP_VERSION,
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
        }
        return path, body, headers

    return build


def _a2a_jsonrpc(meta: dict | None) -> tuple[str, dict, dict]:
    message = {
        "role": "ROLE_USER",
        "messageId": "m-1",
        "parts": [{"text": "hi"}],
        **({"metadata": meta} if meta else {}),
    }
    body = {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": message}}
    return "/a2a/agents/worker/jsonrpc", body, {"A2A-Version": "1.0"}


def _a2a_rest(meta: dict | None) -> tuple[str, dict, dict]:
    message = {
        "role": "ROLE_USER",
        "messageId": "m-1",
        "parts": [{"text": "hi"}],
        **({"metadata": meta} if meta else {}),
    }
    return "/a2a/agents/worker/rest/message:send", {"message": message}, {"A2A-Version": "1.0"}


def _rest(meta: dict | None) -> tuple[str, dict, dict]:
    assert meta is None  # REST has no carrier in its body
    return "/api/agents/worker/message", {"message": "hi"}, {}


def tripped(entry: str, response: httpx.Response, depth: int) -> None:
    """The refusal of a hop that would reach ``depth``, in the entry's own error shape."""
    body = response.json()
    text = json.dumps(body, ensure_ascii=False)
    assert "worked: hi" not in text, (entry, body)  # the agent never ran
    phrase = f"would reach depth {depth}, past the limit of 5"
    if entry == "rest":
        assert response.status_code == 508, body
        assert body["error"]["code"] == "recursion_limit" and body["error"]["depth"] == depth
        assert phrase in body["error"]["message"]
    elif entry in ("mcp", "agent-mcp"):
        # a tool execution error the calling model reads, with the details in _meta
        assert response.status_code == 200, body
        result = body["result"]
        assert result["isError"] is True and phrase in result["content"][0]["text"], body
        assert result["_meta"]["io.roost/error"]["depth"] == depth
    elif entry == "a2a-jsonrpc":
        assert body["error"]["code"] == -32010 and phrase in body["error"]["message"], body
    else:
        assert response.status_code == 508, body
        assert (
            body["error"]["status"] == "RESOURCE_EXHAUSTED" and phrase in body["error"]["message"]
        )


def refused_as_invalid(entry: str, response: httpx.Response, field: str) -> None:
    body = response.json()
    assert "worked: hi" not in json.dumps(body), (entry, body)
    if entry == "rest":
        assert response.status_code == 400 and body["error"]["field"] == field, body
        message = body["error"]["message"]
    elif entry == "a2a-rest":
        assert response.status_code == 400 and body["error"]["status"] == "INVALID_ARGUMENT", body
        message = body["error"]["message"]
    else:
        assert body["error"]["code"] == -32602, body
        message = body["error"]["message"]
    assert message.startswith(f"{field}: expected the caller's call depth, a whole number"), (
        entry,
        message,
    )


ENTRIES = {
    "rest": _rest,
    "mcp": _mcp("/mcp", "agent_worker"),
    "agent-mcp": _mcp("/agents/worker/mcp", "message"),
    "a2a-jsonrpc": _a2a_jsonrpc,
    "a2a-rest": _a2a_rest,
}
BODY_FIELD = {
    "mcp": 'params._meta["io.roost/trace-depth"]',
    "agent-mcp": 'params._meta["io.roost/trace-depth"]',
    "a2a-jsonrpc": 'message.metadata["io.roost/trace-depth"]',
    "a2a-rest": 'message.metadata["io.roost/trace-depth"]',
}

FIVE_HEADERS = {"X-Roost-Trace-Depth": "5", "X-Roost-Trace-Path": ",".join(FIVE)}
FIVE_META = {DEPTH: 5, PATH: FIVE}
# (attack, headers, body carrier, expected: a depth it trips at, or the field it names)
ATTACKS = [
    ("header-5", FIVE_HEADERS, None, 6),
    ("body-5", {}, FIVE_META, 6),
    ("header-5-body-0", FIVE_HEADERS, {DEPTH: 0}, 6),
    ("body-5-header-0", {"X-Roost-Trace-Depth": "0"}, FIVE_META, 6),
    ("huge", {"X-Roost-Trace-Depth": "999999"}, None, 1_000_000),
    ("garbage-header", {"X-Roost-Trace-Depth": "5; DROP"}, None, "X-Roost-Trace-Depth"),
    ("garbage-body", {}, {DEPTH: "deep"}, "body"),
]
CASES = [
    pytest.param(entry, headers, meta, expected, id=f"{entry}-{attack}")
    for entry in ENTRIES
    for attack, headers, meta, expected in ATTACKS
    if entry != "rest" or meta is None  # REST has no body carrier
]


@pytest.fixture
async def daemon(tmp_path):
    async with serve(make_config(tmp_path)) as (kernel, url):
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            yield kernel, http


@pytest.mark.parametrize(("entry", "headers", "meta", "expected"), CASES)
async def test_every_entry_trips_or_refuses_every_depth_attack(
    daemon, entry, headers, meta, expected
):
    kernel, http = daemon
    path, body, entry_headers = ENTRIES[entry](meta)
    async with kernel.tap.subscribe(buffer=64, kinds=(EventKind.KERNEL_BREAKER,)) as events:
        response = await http.post(path, json=body, headers={**entry_headers, **headers})
        if isinstance(expected, int):
            tripped(entry, response, expected)
            with trio.fail_after(5):  # the trip is observable on the event stream too
                async for event in events:
                    assert (
                        event.payload["depth"] == expected and event.payload["path"][-1] == "worker"
                    )
                    break
        else:
            refused_as_invalid(
                entry, response, BODY_FIELD[entry] if expected == "body" else expected
            )
    listed = await http.get("/a2a/agents/worker/rest/tasks", headers={"A2A-Version": "1.0"})
    assert listed.json()["tasks"] == []  # nothing was started, not even a task that failed


# ---- roost mcp on stdio ---------------------------------------------------------------------


def _line(message: Any) -> bytes:
    return json.dumps(message).encode() + b"\n"


async def _roost_mcp(
    config: Path, env: dict[str, str], calls: list[dict], *extra: str
) -> dict[Any, dict]:
    """Spawn ``roost mcp`` (its environment: ``env``), make ``calls`` after initialize;
    the answers by id."""
    if not ROOST.exists():
        pytest.skip("the roost console script is not installed (make install)")
    init = {
        "jsonrpc": "2.0",
        "id": "init",
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    messages = [init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *calls]
    want = {m["id"] for m in messages if "id" in m}
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            lambda task_status: trio.run_process(
                [str(ROOST), "mcp", *extra],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={"ROOST_CONFIG": str(config), "PATH": "/usr/bin:/bin", **env},
                check=False,
                task_status=task_status,
            )
        )
        await process.stdin.send_all(_line(init))
        answers: dict[Any, dict] = {}
        buffer = b""
        with trio.fail_after(60):
            while want - set(answers):
                chunk = await process.stdout.receive_some(65536)
                assert chunk, "roost mcp exited early"
                buffer += chunk
                while b"\n" in buffer:
                    raw, _, buffer = buffer.partition(b"\n")
                    reply = json.loads(raw)
                    answers[reply.get("id")] = reply
                    if reply.get("id") == "init":
                        await process.stdin.send_all(b"".join(_line(m) for m in messages[1:]))
        await process.stdin.aclose()
        with trio.fail_after(15):
            await process.wait()
    return answers


def _stdio_call(rpc_id: str, meta: dict | None) -> dict:
    params: dict[str, Any] = {"name": "agent_worker", "arguments": {"message": "hi"}}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}


STDIO_ATTACKS = [  # (id, environment, _meta, expected)
    ("env-5", {"ROOST_TRACE_DEPTH": "5", "ROOST_TRACE_PATH": ",".join(FIVE)}, None, 6),
    ("body-5", {}, FIVE_META, 6),
    ("env-5-body-0", {"ROOST_TRACE_DEPTH": "5", "ROOST_TRACE_PATH": ",".join(FIVE)}, {DEPTH: 0}, 6),
    ("body-5-env-0", {"ROOST_TRACE_DEPTH": "0"}, FIVE_META, 6),
    ("huge", {"ROOST_TRACE_DEPTH": "999999"}, None, 1_000_000),
    ("garbage-env", {"ROOST_TRACE_DEPTH": "five"}, None, "ROOST_TRACE_DEPTH"),
    ("garbage-body", {}, {DEPTH: -1}, 'params._meta["io.roost/trace-depth"]'),
]


@pytest.mark.parametrize("bridged", [True, False], ids=["bridged-to-the-daemon", "in-process"])
async def test_roost_mcp_on_stdio_trips_or_refuses_every_depth_attack(tmp_path, bridged):
    config = make_config(tmp_path)
    toml = tmp_path / "roost.toml"
    extra = () if bridged else ("--no-daemon",)
    async with serve(config):
        async with trio.open_nursery() as nursery:
            results: dict[str, dict] = {}

            async def one(name: str, env: dict, meta: dict | None) -> None:
                results[name] = (await _roost_mcp(toml, env, [_stdio_call(name, meta)], *extra))[
                    name
                ]

            for name, env, meta, _ in STDIO_ATTACKS:
                nursery.start_soon(one, name, env, meta)
    for name, _, _, expected in STDIO_ATTACKS:
        reply = results[name]
        if isinstance(expected, int):
            result = reply["result"]
            assert result["isError"] is True, (name, reply)
            assert (
                f"would reach depth {expected}, past the limit of 5" in result["content"][0]["text"]
            ), (name, reply)
            assert result["_meta"]["io.roost/error"]["depth"] == expected
        else:
            assert reply["error"]["code"] == -32602, (name, reply)
            assert reply["error"]["message"].startswith(
                f"{expected}: expected the caller's call depth"
            ), (name, reply)


# ---- the bash attack, end to end ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _curl(path: str, body: dict, headers: str = "") -> str:
    """A curl of the daemon's ``path`` (``PORT`` replaced later) with JSON ``body``."""
    data = json.dumps(body, separators=(",", ":"))
    return (
        "curl -s -m 60 -H 'Content-Type: application/json' "
        "-H 'Accept: application/json, text/event-stream' "
        f"{headers} -d '{data}' http://127.0.0.1:PORT{path}"
    )


AGAIN = {"message": "again"}
REST = ("/api/agents/looper/message", AGAIN)
A2A = (
    "/a2a/agents/looper/jsonrpc",
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "again"}]}
        },
    },
)
MCP = (
    "/agents/looper/mcp",
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "message", "arguments": AGAIN, "_meta": MCP_META},
    },
)
MCP_HEADERS = (
    f"-H 'MCP-Protocol-Version: {MCP_VERSION}' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: message'"
)
FORWARD = (
    '-H "traceparent: $TRACEPARENT" -H "X-Roost-Trace-Depth: $ROOST_TRACE_DEPTH" '
    '-H "X-Roost-Trace-Path: $ROOST_TRACE_PATH"'
)
FORGED = (
    "-H 'X-Roost-Trace-Depth: 0' -H 'traceparent: "
    "00-11111111111111111111111111111111-2222222222222222-01'"
)
# curl in a new session whose parent exits at once: re-parented away from bash (to the
# sandbox supervisor, a child subreaper), it must still count as the run's.
DOUBLE_FORK = (
    """echo '{"message": "again"}' > body.json; f=$(mktemp ./reply.XXXXXX); """
    """setsid -f sh -c 'curl -s -m 60 -H "Content-Type: application/json" """
    """--data @body.json -o "$0.part" """
    """http://127.0.0.1:PORT/api/agents/looper/message && mv "$0.part" "$0"' "$f"; """
    'until [ -s "$f" ]; do sleep 0.05; done; cat "$f"'
)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(_curl(*REST), id="rest-no-trace-headers"),
        pytest.param(_curl(*REST, FORGED), id="rest-forged-depth-0"),
        pytest.param(_curl(*REST, FORWARD), id="rest-forwarding-the-environment"),
        pytest.param(DOUBLE_FORK, id="rest-double-forked-no-headers"),
        pytest.param(_curl(*A2A, "-H 'A2A-Version: 1.0'"), id="a2a-jsonrpc-no-trace-headers"),
        pytest.param(_curl(*MCP, MCP_HEADERS + " " + FORGED), id="agent-mcp-forged-depth-0"),
    ],
)
async def test_an_agents_bash_calling_the_daemon_trips_the_breaker_at_depth_5(tmp_path, command):
    # Regression (issue 15 item 5): bash curling /api/agents/<self>/message made nested
    # calls with no trace context: 8 levels and more, never tripped.
    port = _free_port()
    command = command.replace("PORT", str(port))

    def looper(agents: Path) -> None:
        write_agent(
            agents,
            "looper",
            [
                {
                    "match": ".",
                    "steps": [{"tool": "bash", "arguments": {"command": command}}],
                    "reply": "level: {result}",
                }
            ],
            tools=("bash",),
            network={"connect": [port]},
        )

    config = make_config(tmp_path, port, looper)
    async with (
        serve(config, port) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=120) as http,
    ):
        breakers, runs = [], []
        async with kernel.tap.subscribe(
            buffer=256, kinds=(EventKind.KERNEL_BREAKER, EventKind.AGENT_MESSAGE)
        ) as events:
            with trio.fail_after(60):  # 5 levels take ~2 s; unbroken, the chain never ends
                reply = await http.post("/api/agents/looper/message", json={"message": "go"})
                async for event in events:
                    (breakers if event.kind == EventKind.KERNEL_BREAKER else runs).append(event)
                    if breakers and len(runs) >= 5:
                        break
        assert kernel.process_traces is not None and len(kernel.process_traces) == 0  # all released
    body = reply.json()
    assert reply.status_code == 200, body
    assert len(runs) == 5 and [r.trace.depth for r in runs] == [1, 2, 3, 4, 5]
    assert breakers[0].payload["path"] == ["looper"] * 6 and breakers[0].payload["depth"] == 6
    # the innermost curl got the refusal, and its text climbed back up every level
    assert body["reply"].startswith("level: ")
    if "[output truncated]" not in body["reply"]:  # an MCP result says its text twice: it grows
        assert (
            body["reply"].count("level: ") == 5
            and "would reach depth 6, past the limit of 5" in body["reply"]
        )
    assert {r.trace.trace_id for r in runs} == {body["trace_id"]}  # one chain, one trace


# ---- a chain over mixed transports --------------------------------------------------------


def _chain_agent(name: str, tool: str | None, max_depth: int | None) -> Any:
    rules = []
    if tool:
        step = {"tool": tool, "arguments": {"message": "{message}"}}
        rules.append({"match": ".", "steps": [step], "reply": f"{name}<{{result}}>"})
    manifest: dict[str, Any] = {
        "name": name,
        "description": f"chain agent {name}",
        "model": {"provider": "scripted", "script": {"rules": rules, "default_reply": "reached"}},
        "capabilities": {"tools": [tool] if tool else []},
        "a2a": {"enabled": True},
    }
    if max_depth is not None:
        manifest["limits"] = {"max_depth": max_depth}
    return parse_manifest(manifest)


async def _run_chain(tmp_path: Path, hops: tuple[str, ...], limits: dict[str, int]):
    """Agents n1 … n(len(hops)+1), hop i over ``hops[i]`` ("mem": ``agent_<name>``, "mcp":
    the next daemon's ``/agents/<name>/mcp``, "a2a": its A2A agent); a daemon per network
    hop, the last started first. n1's reply and every daemon's ``KERNEL:BREAKER`` events."""
    from roost.plugins.http import open_daemon

    names = _path(len(hops) + 1)
    groups = [[0]]  # the agents of each daemon, by index
    for i, hop in enumerate(hops, start=1):
        if hop == "mem":
            groups[-1].append(i)
        else:
            groups.append([i])
    kernels = []
    async with AsyncExitStack() as stack:
        url = None  # the next daemon's
        for g, members in reversed(list(enumerate(groups))):
            last, settings, out = members[-1], {}, None
            if last < len(hops):
                target = names[last + 1]
                if hops[last] == "mcp":
                    out = f"mcp_s{g}_message"
                    transport = {"type": "http", "url": f"{url}/agents/{target}/mcp"}
                    settings["mcp_servers"] = [
                        {"name": f"s{g}", "allow_local": True, "transport": transport}
                    ]
                else:
                    out = f"a2a_e{g}"
                    external = {"name": f"e{g}", "url": f"{url}/a2a/agents/{target}"}
                    settings["a2a"] = {"external_agents": [external]}
            agents = [
                _chain_agent(
                    names[i],
                    f"agent_{names[i + 1]}" if i != last else out,
                    limits.get(names[i]),
                )
                for i in members
            ]
            config = default_config(
                home=str(tmp_path / f"k{g}"),
                agents={"bundled": False},
                http={"port": 0},
                **settings,
            )
            kernel = await stack.enter_async_context(open_kernel(config, agents=agents))
            with trio.fail_after(20):
                while out is not None and out not in kernel.registry:
                    await trio.sleep(0.02)
            url = await stack.enter_async_context(open_daemon(kernel, graceful_timeout=1))
            kernels.append(kernel)
        streams = [
            await stack.enter_async_context(
                k.tap.subscribe(buffer=64, kinds=(EventKind.KERNEL_BREAKER,))
            )
            for k in kernels
        ]
        with trio.fail_after(60):
            reply = await kernels[-1].send("n1", "go")
        trips = []
        for stream in streams:
            while True:
                try:
                    trips.append(stream.receive_nowait().payload)
                except trio.WouldBlock:
                    break
    return reply, trips


def _path(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


MIXED = [
    ("mem", "mcp", "mem", "a2a", "mem"),
    ("mcp", "mem", "a2a", "mem", "mcp"),
    ("a2a", "mcp", "mem", "mem", "a2a"),
]


@pytest.mark.parametrize("hops", MIXED, ids=["-".join(h) for h in MIXED])
async def test_a_chain_over_mixed_transports_trips_at_the_sixth_agent(tmp_path, hops):
    # The in-host ask's trace rides its event, MCP's _meta and headers, A2A's metadata and
    # headers: whatever carries each hop, n6 is refused at depth 6 (and n1..n5 run).
    reply, trips = await _run_chain(tmp_path, hops, {})
    assert reply.text.startswith("n1<n2<n3<n4<n5<") and "reached" not in reply.text
    assert "would reach depth 6, past the limit of 5: n1 → n2 → n3 → n4 → n5 → n6" in reply.text
    assert trips and all(t["depth"] == 6 and t["path"] == _path(6) for t in trips), trips
    reply, trips = await _run_chain(tmp_path / "five", hops[:4], {})
    assert reply.text == "n1<n2<n3<n4<reached>>>>" and not trips, (reply.text, trips)


@pytest.mark.parametrize("hops", MIXED, ids=["-".join(h) for h in MIXED])
async def test_a_stricter_limit_of_the_first_agent_holds_down_a_mixed_chain(tmp_path, hops):
    reply, trips = await _run_chain(tmp_path, hops, {"n1": 3})
    assert "would reach depth 4, past the limit of 3: n1 → n2 → n3 → n4" in reply.text
    assert trips and all(t["depth"] == 4 and t["path"] == _path(4) for t in trips), trips
