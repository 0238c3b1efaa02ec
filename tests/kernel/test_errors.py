"""The kernel's checks of decoded JSON text: lone surrogates found, named, or escaped."""

from __future__ import annotations

import pytest
from roost.kernel import InvalidText, check_text, escape_lone_surrogates


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("plain ascii", "plain ascii"),
        ("naïve — 日本 🦜", "naïve — 日本 🦜"),  # valid text is left alone
        ("a\ud800b", "a\\ud800b"),
        ("\udfff", "\\udfff"),
        ("🦜\udc00", "🦜\\udc00"),
    ],
)
def test_escape_lone_surrogates_makes_any_text_utf8(text, escaped):
    out = escape_lone_surrogates(text)
    assert out == escaped
    out.encode("utf-8")  # never raises


def test_check_text_names_where_the_lone_surrogate_is():
    value = {"a": ["ok", {"b": "x\ud800"}]}
    with pytest.raises(InvalidText) as info:
        check_text(value, "params")
    assert info.value.field == "params.a[1].b"
    with pytest.raises(InvalidText, match="a key"):
        check_text({"\ud800": 1}, "")
    check_text({"a": ["naïve", {"b": "🦜"}]}, "params")  # valid text passes


# The wire codes clients match on (API error bodies, JSON-RPC error data, ``_meta``), as
# they were when each class set ``code`` in its body, before codes became class keywords.
_CODES = {
    "roost.kernel._errors": {
        "RoostError": "roost_error",
        "ConfigError": "config_error",
        "ManifestError": "manifest_error",
        "PluginError": "plugin_error",
        "AgentNotFound": "agent_not_found",
        "AgentUnavailable": "agent_unavailable",
        "ToolError": "tool_error",
        "ToolNotFound": "tool_not_found",
        "ToolNameCollision": "tool_name_collision",
        "ToolDenied": "tool_denied",
        "ToolArgumentsInvalid": "invalid_arguments",
        "ToolTimeout": "tool_timeout",
        "TaintViolation": "taint_violation",
        "LoopDetected": "loop_detected",
        "RecursionLimitExceeded": "recursion_limit",
        "InvalidTraceContext": "invalid_trace_context",
        "SandboxError": "sandbox_violation",
        "ActorError": "actor_error",
        "ActorCrashed": "actor_crashed",
        "ActorStopped": "actor_stopped",
        "AskTimeout": "ask_timeout",
        "MailboxFull": "mailbox_full",
        "InvalidInput": "invalid_input",
        "InvalidText": "invalid_text",
        "InvalidNumber": "invalid_number",
        "SessionConflict": "session_conflict",
    },
    "roost.kernel._netguard": {"UrlRefused": "url_refused"},
    "roost.kernel._policy": {"ToolSchemaInvalid": "tool_schema_invalid"},
    "roost.kernel._sqlite": {"StoreError": "store_error"},
}


@pytest.mark.parametrize(
    ("module", "name", "code"),
    [(module, name, code) for module, codes in _CODES.items() for name, code in codes.items()],
)
def test_every_kernel_error_keeps_its_code(module, name, code):
    import importlib

    assert getattr(importlib.import_module(module), name).code == code


def test_a_plugins_error_names_its_code_by_attribute_or_by_keyword():
    from roost.kernel import RoostError, ToolError

    class ByAttribute(ToolError):  # how plugins (and third parties) write it
        code = "plugin_attribute"

    class ByKeyword(ToolError, code="plugin_keyword"):
        pass

    class Inherits(ByAttribute):
        pass

    class Overrides(ByAttribute, code="plugin_override"):
        pass

    class Plain(RoostError):
        pass

    codes = [c.code for c in (ByAttribute, ByKeyword, Inherits, Overrides, Plain)]
    assert codes == [
        "plugin_attribute",
        "plugin_keyword",
        "plugin_attribute",
        "plugin_override",
        "roost_error",
    ]
    assert ToolError.code == "tool_error"  # a subclass's keyword never reaches its base
    assert ByKeyword("boom").to_dict() == {"code": "plugin_keyword", "message": "boom"}
    assert Inherits("x").to_dict() == {"code": "plugin_attribute", "message": "x"}
