"""Model tiers send the tier's model, every billed call is recorded, an unavailable agent
answers 503 — against real HTTP servers on 127.0.0.1 that speak the vendors' wire.

What broke: with ``fast``/``complex`` tiers the answering call carried the manifest's main
``model.name`` (a complex tier on Anthropic received ``model=gpt-4o-mini``); the routing
call's tokens were not recorded; a run failing after billed calls recorded none of them;
an agent without its API key answered 500.
"""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest
from fake_vendor import FakeVendor, Reply
from roost.kernel import default_config, open_kernel, parse_manifest
from roost.plugins.http import open_daemon

NO_RETRY = {"max_retries": 0, "retry_backoff_s": 0.0}


def chat(text=None, tokens=(0, 0), calls=()):
    """An OpenAI Chat Completions response."""
    message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for cid, name, args in calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "whatever",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "total_tokens": sum(tokens),
        },
    }


def anthropic_message(text, tokens):
    """An Anthropic Messages response."""
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "whatever",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
    }


def tiered_agent():
    return parse_manifest(
        {
            "name": "worker",
            "description": "answers with the tier its message needs",
            "model": {
                "provider": "openai",
                "name": "gpt-4o-mini",
                "parameters": {"temperature": 0.9},
                "fast": {
                    "provider": "openai",
                    "name": "gpt-4.1-nano",
                    "parameters": {"temperature": 0},
                },
                "complex": {
                    "provider": "anthropic",
                    "name": "claude-sonnet-4-5",
                    "parameters": {"max_tokens": 777},
                },
            },
        }
    )


def usage_rows(config):
    with sqlite3.connect(config.database_path) as db:
        return sorted(
            db.execute(
                "SELECT agent, provider, model, input_tokens, output_tokens FROM usage"
            ).fetchall()
        )


@pytest.fixture
async def vendors(nursery):
    return await FakeVendor().start(nursery), await FakeVendor().start(nursery)


def tier_config(tmp_path, openai_vendor, anthropic_vendor):
    return default_config(
        home=tmp_path / "home",
        agents={"bundled": False},
        providers={
            "openai": {"base_url": openai_vendor.url + "/v1", **NO_RETRY},
            "anthropic": {"base_url": anthropic_vendor.url, **NO_RETRY},
        },
    )


async def test_a_complex_message_goes_to_the_complex_tiers_vendor_with_its_model(tmp_path, vendors):
    openai_vendor, anthropic_vendor = vendors
    openai_vendor.queue(Reply(json=chat("complex", tokens=(7, 1))))
    anthropic_vendor.queue(Reply(json=anthropic_message("the proof", (11, 5))))
    config = tier_config(tmp_path, openai_vendor, anthropic_vendor)
    async with open_kernel(config, agents=[tiered_agent()]) as kernel:
        reply = await kernel.send("worker", "prove Fermat's little theorem", timeout=20)
    assert reply.text == "the proof" and not reply.is_error
    [route] = openai_vendor.requests
    [answer] = anthropic_vendor.requests
    assert route.json["model"] == "gpt-4.1-nano" and route.json["temperature"] == 0
    assert answer.json["model"] == "claude-sonnet-4-5" and answer.json["max_tokens"] == 777
    assert "temperature" not in answer.json  # the main model's parameters stay with it
    # Both calls are recorded, each under its own provider and model.
    assert usage_rows(config) == [
        ("worker", "anthropic", "claude-sonnet-4-5", 11, 5),
        ("worker", "openai", "gpt-4.1-nano", 7, 1),
    ]


async def test_a_simple_message_stays_with_the_fast_tier_and_its_model(tmp_path, vendors):
    openai_vendor, anthropic_vendor = vendors
    openai_vendor.queue(
        Reply(json=chat("simple", tokens=(7, 1))), Reply(json=chat("hi!", tokens=(9, 2)))
    )
    config = tier_config(tmp_path, openai_vendor, anthropic_vendor)
    async with open_kernel(config, agents=[tiered_agent()]) as kernel:
        reply = await kernel.send("worker", "say hi", timeout=20)
    assert reply.text == "hi!"
    assert [r.json["model"] for r in openai_vendor.requests] == ["gpt-4.1-nano", "gpt-4.1-nano"]
    assert anthropic_vendor.requests == []
    assert usage_rows(config) == [
        ("worker", "openai", "gpt-4.1-nano", 7, 1),
        ("worker", "openai", "gpt-4.1-nano", 9, 2),
    ]


async def test_a_run_that_fails_after_billed_calls_records_their_usage(tmp_path, vendors):
    openai_vendor, _ = vendors
    openai_vendor.queue(
        Reply(json=chat(tokens=(82, 17), calls=[("call_1", "read", {"path": "notes.txt"})])),
        Reply(400, {"error": {"message": "context too long", "type": "invalid_request_error"}}),
    )
    manifest = parse_manifest(
        {
            "name": "worker",
            "description": "d",
            "model": {"provider": "openai", "name": "gpt-4o-mini"},
            "capabilities": {"tools": ["read"]},
        }
    )
    config = default_config(
        home=tmp_path / "home",
        agents={"bundled": False},
        providers={"openai": {"base_url": openai_vendor.url + "/v1", **NO_RETRY}},
    )
    workspace = config.home / "workspaces" / "worker"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("notes\n")
    async with open_kernel(config, agents=[manifest]) as kernel:
        reply = await kernel.send("worker", "summarise my notes", timeout=20)
        one_shot = await kernel.send("worker", "again", timeout=20, session_id=reply.session_id)
    assert reply.is_error and reply.stop_reason == "error" and "context too long" in reply.text
    assert one_shot.is_error  # nothing queued: the vendor answers 500 at once
    assert usage_rows(config) == [("worker", "openai", "gpt-4o-mini", 82, 17)]


async def test_an_agent_without_its_api_key_answers_503_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    manifest = parse_manifest(
        {
            "name": "worker",
            "description": "d",
            "model": {"provider": "openai", "name": "gpt-4o-mini"},
        }
    )
    config = default_config(home=tmp_path / "home", agents={"bundled": False})
    async with open_kernel(config, agents=[manifest]) as kernel, open_daemon(kernel) as url:
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(url + "/api/agents/worker/message", json={"message": "hi"})
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert error["code"] == "agent_unavailable"
    assert error["message"] == (
        "agent 'worker' is unavailable: provider 'openai' needs an API key: "
        "set OPENAI_API_KEY or choose another provider (model.provider in agent.json)"
    )
