"""Scripted agents for the kernel's tests."""

from __future__ import annotations

from roost.kernel import parse_manifest


def agent(name, *, tools=(), rules=(), default_reply="{message}", **extra):
    """The manifest of a scripted agent ``name`` allowed ``tools``, following ``rules``;
    ``extra`` adds manifest keys (``limits``, ``mcp``...)."""
    data = {
        "name": name,
        "description": f"test agent {name}",
        "model": {
            "provider": "scripted",
            "script": {"rules": list(rules), "default_reply": default_reply},
        },
        "capabilities": {"tools": list(tools)},
    }
    data.update(extra)
    return parse_manifest(data)


def call_rule(match, tool, arguments, reply="{result}"):
    """A script rule: on a message matching ``match``, call ``tool`` once, then reply."""
    return {"match": match, "steps": [{"tool": tool, "arguments": arguments}], "reply": reply}


def fetch_then_bash(name):
    """An agent that fetches untrusted text, then hands it to bash unchanged (the taint
    check refuses that call)."""
    steps = [
        {"tool": "fetch", "arguments": {}},
        {"tool": "bash", "arguments": {"command": "{result}"}},
    ]
    rule = {"match": ".", "steps": steps, "reply": "{result}"}
    return agent(name, tools=["fetch", "bash"], rules=[rule])


def repeating_echo(name):
    """An agent that makes the same echo call 8 times (the loop guard stops it)."""
    step = {"tool": "echo", "arguments": {"text": "again"}}
    rule = {"match": ".", "steps": [step] * 8, "reply": "done"}
    return agent(name, tools=["echo"], rules=[rule], limits={"max_turns": 20})
