"""Hostile numbers in every numeric field a network caller controls.

Python's ``int()`` refuses text of more than 4300 digits with a plain ``ValueError`` (not a
``json.JSONDecodeError``), and ``float()`` of an int past the largest float raises
``OverflowError``: each edge below answered HTTP 500 "internal error" (a traceback in the
daemon log per request) for such a value. Each now answers a 4xx (or a JSON-RPC error) in
its protocol's shape naming the field.
"""

from __future__ import annotations

import base64
import json
import logging

import httpx
import pytest
from robustness_helpers import V1, a2a_send, make_config, serve

DIGITS = "1" * 5000  # past Python's 4300-digit limit for int <-> text
SEND_03 = {"message": {"messageId": "m", "role": "ROLE_USER", "content": [{"text": "hi"}]}}
LEGACY_SEND = {"id": "t-1", "message": {"role": "user", "parts": [{"type": "text", "text": "hi"}]}}


def _body(value: dict, number: str) -> bytes:
    return json.dumps(value).replace('"N"', number).encode()


def _token(number: str) -> str:
    raw = f'[{number}, "t"]'.encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# (what, method, path, body or None, headers, the field the refusal names)
CASES = [
    (
        "a2a rest 1.0 send body",
        "POST",
        "/a2a/rest/message:send",
        _body(
            {**a2a_send({"text": "hi"})["params"], "configuration": {"historyLength": "N"}}, DIGITS
        ),
        V1,
        "body",
    ),
    (
        "a2a rest 0.3 send body",
        "POST",
        "/a2a/rest/v1/message:send",
        _body({**SEND_03, "configuration": {"historyLength": "N"}}, DIGITS),
        {},
        "body",
    ),
    (
        "a2a 0.1 send body",
        "POST",
        "/a2a/tasks/send",
        _body({**LEGACY_SEND, "id": "N"}, DIGITS),
        {},
        "body",
    ),
    (
        "rest message body",
        "POST",
        "/api/agents/echo/message",
        _body({"message": "hi", "extra": "N"}, DIGITS),
        {},
        "body",
    ),
    ("traces limit", "GET", f"/api/traces?limit={DIGITS}", None, {}, "limit"),
    ("a2a rest 1.0 pageSize", "GET", f"/a2a/rest/tasks?pageSize={DIGITS}", None, V1, "pageSize"),
    (
        "a2a rest 1.0 list historyLength",
        "GET",
        f"/a2a/rest/tasks?historyLength={DIGITS}",
        None,
        V1,
        "historyLength",
    ),
    (
        "a2a rest 1.0 get historyLength",
        "GET",
        f"/a2a/rest/tasks/x?historyLength={DIGITS}",
        None,
        V1,
        "historyLength",
    ),
    (
        "a2a rest 0.3 history_length",
        "GET",
        f"/a2a/rest/v1/tasks/x?history_length={DIGITS}",
        None,
        {},
        "historyLength",
    ),
    ("a2a rest 0.3 pageSize", "GET", f"/a2a/rest/v1/tasks?pageSize={DIGITS}", None, {}, "pageSize"),
    (
        "a2a 0.1 historyLength",
        "GET",
        f"/a2a/tasks/x?historyLength={DIGITS}",
        None,
        {},
        "historyLength",
    ),
    ("a2a version major", "GET", f"/a2a/rest/tasks?A2A-Version={DIGITS}.0", None, {}, "version"),
    ("a2a version minor", "GET", f"/a2a/rest/tasks?A2A-Version=1.{DIGITS}", None, {}, "version"),
    (
        "a2a rest pageToken past a float",
        "GET",
        "/a2a/rest/tasks?pageToken=" + _token("1" + "0" * 340),
        None,
        V1,
        "pageToken",
    ),
]


@pytest.mark.parametrize("what,method,path,body,headers,field", CASES, ids=[c[0] for c in CASES])
async def test_a_number_past_what_python_converts_is_refused_naming_the_field(
    tmp_path, caplog, what, method, path, body, headers, field
):
    caplog.set_level(logging.WARNING)
    async with (
        serve(make_config(tmp_path)) as (_, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        response = await http.request(
            method, path, content=body, headers={"Content-Type": "application/json", **headers}
        )
        health = await http.get("/health")
    assert 400 <= response.status_code < 500, (what, response.status_code, response.text)
    assert field in response.json()["error"]["message"], (what, response.text)
    assert len(response.text) < 2000, what  # the refusal does not echo 5000 digits
    # Python's own hint ("use sys.set_int_max_str_digits()") is not the caller's to act on.
    assert "sys." not in response.text, (what, response.text)
    assert not [r for r in caplog.records if r.exc_info], what  # no traceback logged
    assert health.status_code == 200


@pytest.mark.parametrize("number", ["1" + "0" * 340, "NaN", "Infinity", "-1e400", "true"])
async def test_a_page_token_holding_a_number_no_row_has_is_refused_naming_it(tmp_path, number):
    # float() of 10**340 raised OverflowError (HTTP 500); NaN, the infinities and true were
    # taken as a position and answered a page no token of ours leads to.
    list_tasks = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks"}
    async with (
        serve(make_config(tmp_path)) as (_, url),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        answer = await http.post(
            "/a2a/jsonrpc", json={**list_tasks, "params": {"pageToken": _token(number)}}, headers=V1
        )
    error = answer.json()["error"]
    assert error["code"] == -32602 and "pageToken" in error["message"], answer.text
