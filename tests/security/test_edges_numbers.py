"""Numbers JSON cannot carry (review of issues 14 and 15, finding 9).

Regression: ``1e400`` (valid JSON syntax that decodes to infinity) and the ``NaN`` /
``Infinity`` literals (not JSON, but ``json.loads`` takes them) were accepted at the edges,
stored, and served back as the tokens ``Infinity`` / ``NaN``: not JSON, so a strict client
(a browser's ``JSON.parse``) could no longer read the task, nor the task list it is in.
Every JSON entry now refuses them with a 400 / -32602 naming the field (``-32700`` where
the parser itself refuses a literal), and no answer ever carries one.
"""

from __future__ import annotations

import json
import math

import httpx
import pytest
from robustness_helpers import V1, a2a_send, make_config, mcp_call, mcp_headers, serve
from roost.kernel import InvalidInput, InvalidNumber, InvalidText, check_json_input, check_text

HOLE = "__NUMBER__"
TOKENS = ["1e400", "-1e400", "1" + "0" * 300 + "e99", "NaN", "Infinity", "-Infinity"]

# (name, path, body with HOLE where the number goes, headers, the field the error names)
EDGES = [
    ("rest timeout", "/api/agents/echo/message", {"message": "hi", "timeout": HOLE}, {}, "timeout"),
    (
        "mcp tools/call",
        "/mcp",
        mcp_call("agent_echo", {"message": "hi", "n": HOLE}),
        mcp_headers("agent_echo"),
        "params.arguments.n",
    ),
    (
        "mcp agent endpoint",
        "/agents/echo/mcp",
        mcp_call("message", {"message": "hi", "n": HOLE}),
        mcp_headers("message"),
        "params.arguments.n",
    ),
    (
        "a2a 1.0 data part",
        "/a2a/agents/echo/jsonrpc",
        a2a_send({"data": [HOLE]}),
        V1,
        "message.parts[0].data[0]",
    ),
    (
        "a2a 1.0 metadata",
        "/a2a/jsonrpc",
        a2a_send({"text": "hi"}, params_extra={"metadata": {"n": HOLE}}),
        V1,
        "metadata.n",
    ),
    (
        "a2a 0.3",
        "/a2a/agents/echo/jsonrpc",
        {**a2a_send({"kind": "data", "data": {"n": HOLE}}), "method": "message/send"},
        {},
        "message.parts[0].data.n",
    ),
    (
        "a2a rest 1.0",
        "/a2a/agents/echo/rest/message:send",
        a2a_send({"data": {"n": HOLE}})["params"],
        V1,
        "message.parts[0].data.n",
    ),
    (
        "a2a rest 0.3",
        "/a2a/rest/v1/message:send",
        {
            "message": {
                "messageId": "m",
                "role": "ROLE_USER",
                "content": [{"data": {"data": {"n": HOLE}}}],
            }
        },
        {},
        "message.content[0].data.data.n",
    ),
    (
        "a2a 0.1 tasks/send",
        "/a2a/tasks/send",
        {
            "id": "t-01",
            "message": {"role": "user", "parts": [{"type": "data", "data": {"n": HOLE}}]},
        },
        {},
        "message.parts[0].data.n",
    ),
    (
        "a2a 0.1 envelope",
        "/a2a/tasks/send",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tasks/send",
            "params": {
                "id": "t-02",
                "message": {"role": "user", "parts": [{"type": "data", "data": {"n": HOLE}}]},
            },
        },
        {},
        "message.parts[0].data.n",
    ),
]


def _with(body: dict, token: str) -> bytes:
    return json.dumps(body).replace(f'"{HOLE}"', token).encode()


def _strict(text: str):
    def refuse(token: str):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


async def test_a_non_finite_number_is_refused_at_every_edge_naming_the_field(tmp_path):
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        for name, path, body, headers, field in EDGES:
            for token in TOKENS:
                response = await http.post(
                    path,
                    content=_with(body, token),
                    headers={"Content-Type": "application/json", **headers},
                )
                answer = _strict(response.text)  # the refusal itself is JSON
                error = answer["error"]
                if "jsonrpc" in answer:
                    # A JSON-RPC parser that refuses the literal itself answers -32700.
                    assert error["code"] in (-32602, -32700), (name, token, answer)
                    if error["code"] == -32700:
                        assert token.lstrip("-") in ("NaN", "Infinity"), (name, token, answer)
                        continue
                else:
                    assert 400 <= response.status_code < 500, (
                        name,
                        token,
                        response.status_code,
                        answer,
                    )
                assert (
                    error["message"].startswith(f"{field}: is ")
                    and "which JSON cannot carry" in error["message"]
                ), (name, token, error)
        listed = await http.get("/a2a/agents/echo/rest/tasks", headers=V1)
        legacy = await http.get("/a2a/tasks/t-01")
        agents = (await http.get("/api/agents")).json()["agents"]
    assert _strict(listed.text)["tasks"] == []  # nothing was accepted, so nothing was stored
    assert legacy.status_code == 404
    assert {a["name"]: a["status"] for a in agents} == {"echo": "ready", "fragile": "ready"}


async def test_finite_numbers_still_pass_everywhere(tmp_path):
    body = a2a_send({"data": {"n": 1.5, "big": 1e308, "tiny": 5e-324, "int": 10**30}})
    async with (
        serve(make_config(tmp_path)) as (kernel, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        response = await http.post("/a2a/agents/echo/jsonrpc", json=body, headers=V1)
    task = _strict(response.text)["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert task["history"][0]["parts"][0]["data"] == {
        "n": 1.5,
        "big": 1e308,
        "tiny": 5e-324,
        "int": 10**30,
    }


def test_an_answer_holding_a_non_finite_number_is_still_json():
    """A value stored before inputs were checked goes out as null, never as NaN/Infinity."""
    from roost.plugins.a2a._server import _json

    response = _json(
        {"task": {"data": [1.0, float("inf"), {"v": float("nan")}], "n": -float("inf")}}
    )
    assert _strict(response.body.decode()) == {
        "task": {"data": [1.0, None, {"v": None}], "n": None}
    }


@pytest.mark.parametrize(
    "raw,field,error",
    [
        (b'{"a": [1e400]}', "p.a[0]", InvalidNumber),
        (b'{"a": {"b": -1E+400}}', "p.a.b", InvalidNumber),
        (
            b'{"a": ' + b"1" + b"0" * 300 + b"e99}",
            "p.a",
            InvalidNumber,
        ),  # a 2-digit exponent overflows too
        (b'{"a": ' + b"1" * 400 + b".5}", "p.a", InvalidNumber),  # no exponent: 400 digits
        (b'{"a": NaN}', "p.a", InvalidNumber),
        (b'{"a": [1, "x", -Infinity]}', "p.a[2]", InvalidNumber),
        (b'{"a": "\\ud800"}', "p.a", InvalidText),
    ],
)
def test_check_json_input_names_the_field_whatever_the_raw_text(raw, field, error):
    value = json.loads(raw)
    for given in (raw, None):  # with the raw text (its quick probe) and without
        with pytest.raises(error) as caught:
            check_json_input(value, "p", raw=given)
        assert isinstance(caught.value, InvalidInput) and caught.value.field == field


@pytest.mark.parametrize("before", ["", "[", '{"a":', '{"a": \n\t', "[1,", "[1 , "])
def test_the_raw_probe_never_misses_a_number_that_overflows(before):
    # The probe spares the walk only when the raw text cannot decode to a non-finite float:
    # every written form that does overflow must still be found, named by its field.
    after = {"": "", "[": "]", "[1,": "]", "[1 , ": "]"}.get(before, "}")
    for digits in (1, 100, 209, 210, 300, 309, 400):
        for exponent in ("", "e99", "E+99", "e100", "e-400", "e308", "e309", "e0400"):
            for sign in ("", "-"):
                for fraction in ("", ".5"):
                    if not (exponent or fraction):
                        continue  # an integer: Python decodes it as an int, never infinite
                    token = sign + "1" * digits + fraction + exponent
                    raw = (before + token + after).encode()
                    value = json.loads(raw)
                    if all(math.isfinite(v) for v in _numbers(value)):
                        check_json_input(value, "p", raw=raw)
                        continue
                    with pytest.raises(InvalidNumber):
                        check_json_input(value, "p", raw=raw)


def _numbers(value):
    if isinstance(value, float):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)


def test_check_json_input_passes_finite_json_and_check_text_still_ignores_numbers():
    raw = (
        b'{"id": "3e5f-1e9", "n": [1.5e10, 2e-5, 12345678901234567890], "t": "Infinity and beyond"}'
    )
    check_json_input(json.loads(raw), raw=raw)
    check_text({"n": float("inf")})  # the store's check: text only


async def test_a_number_written_with_other_unicode_digits_is_refused_naming_the_field(tmp_path):
    # str.isdigit() takes "²" (and every superscript digit), which int() refuses: each
    # edge that checked a number's text with isdigit() then answered 500 "internal error",
    # a traceback in the log per request.
    sup = "\u00b2"  # ² (also a Latin-1 byte, so a header can carry it)
    mcp = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    client = {"name": "t", "version": "1"}
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
    ask = {"name": "message", "arguments": {"message": "hi"}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": ask}
    list_tasks = {"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {}}
    page_size = {**list_tasks, "params": {"pageSize": sup}}
    config = make_config(tmp_path)
    async with serve(config) as (_, url), httpx.AsyncClient(base_url=url, timeout=30) as http:
        answers = {
            "limit": await http.get(f"/api/traces?limit={sup}"),
            "historyLength": await http.get(
                f"/a2a/agents/echo/rest/tasks?historyLength={sup}", headers=V1
            ),
            "pageSize": await http.post("/a2a/jsonrpc", json=page_size, headers=V1),
            "A2A-Version": await http.post(f"/a2a/jsonrpc?A2A-Version=1.{sup}", json=list_tasks),
        }
        opened = await http.post("/agents/echo/mcp", json=init, headers=mcp)
        session = {**mcp, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        streamed = await http.post("/agents/echo/mcp", json=call, headers=session)
        event_id = next(line for line in streamed.text.splitlines() if line.startswith("id: "))
        stream_id = event_id[4:].rpartition(".")[0]
        resume = {**session, "Last-Event-ID": f"{stream_id}.{sup}".encode("latin-1")}
        answers["Last-Event-ID"] = await http.get("/agents/echo/mcp", headers=resume)
    for field, response in answers.items():
        answer = response.json()
        if "jsonrpc" in answer and response.status_code == 200:  # JSON-RPC: in its own shape
            assert answer["error"]["code"] in (-32602, -32009), (field, answer)  # -32009: version
        else:
            assert 400 <= response.status_code < 500, (field, response.status_code, answer)
        assert field in response.text, (field, response.text)
