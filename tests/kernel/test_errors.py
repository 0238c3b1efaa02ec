"""The kernel's checks of input: lone surrogates found, named, or escaped; numbers as text."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import pytest
from roost.kernel import (
    InvalidInput,
    InvalidNumber,
    InvalidText,
    check_json_input,
    check_text,
    escape_lone_surrogates,
    parse_int,
)


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


class _Mapping(Mapping):
    def __init__(self, data):
        self.data = data

    def __getitem__(self, key):
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


class _Dict(dict):
    pass


class _Str(str):
    pass


class _Float(float):
    pass


NAN, INF = float("nan"), float("inf")


# What the walk (d2b38cc: places spelt out only when refused, ASCII text and ints not
# pushed) must still find, and name as before, in every shape an in-host caller may pass.
@pytest.mark.parametrize(
    ("value", "error", "field"),
    [
        (MappingProxyType({"a": [1, (2, "\ud800")]}), InvalidText, "params.a[1][1]"),
        (_Mapping({"k": {"\udc00": 1}}), InvalidText, "params.k (a key)"),
        (_Dict(x=NAN), InvalidNumber, "params.x"),
        (("ok", _Float("-inf")), InvalidNumber, "params[1]"),
        ([_Str("a"), _Str("b\ud800")], InvalidText, "params[1]"),
        ({"a": True, "b": 10**400, "c": -INF}, InvalidNumber, "params.c"),
        ({1: {2: "\ud800"}}, InvalidText, "params[1][2]"),
        (["\ud800", NAN], InvalidText, "params[0]"),  # the first in document order
        ([NAN, "\ud800"], InvalidNumber, "params[0]"),
        ([{"a": ["x", 1.5]}, {"b": [2, {"c": NAN}]}], InvalidNumber, "params[1].b[1].c"),
    ],
)
def test_check_json_input_names_the_first_refused_value_in_any_shape(value, error, field):
    with pytest.raises(error) as info:
        check_json_input(value, "params")
    assert info.value.field == field


def test_check_json_input_walks_any_depth_and_passes_what_it_cannot_refuse():
    deep: object = NAN
    for i in range(100_000):
        deep = [deep] if i % 2 else {"a": deep}
    with pytest.raises(InvalidNumber) as info:
        check_json_input(deep, "p")
    assert info.value.field == "p" + "[0].a" * 50_000
    check_json_input([1, True, None, 1.5, "naïve", _Str("x"), (), {}, b"\xff"], "p")
    check_text([NAN, INF], "p")  # numbers are check_json_input's alone


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


@pytest.mark.parametrize(
    ("value", "low", "expected"),
    [
        ("12", 0, 12),
        ("0012", 0, 12),  # leading zeros are fine
        ("0" * 5000 + "7", 0, 7),  # ... however many
        ("0", 0, 0),
        (12, 0, 12),
        ("-12", -100, -12),  # a sign only where the caller allows a negative number
        ("-0", -1, 0),
        ("100", -100, 100),
    ],
)
def test_parse_int_reads_ascii_digits_and_ints_within_bounds(value, low, expected):
    got = parse_int(value, "limit", low, 100)
    assert got == expected and got.__class__ is int


@pytest.mark.parametrize(
    "value",
    [
        "١٢",  # Arabic-Indic digits: str.isdigit() and int() take them
        "²",  # isdigit() is True, int() refuses it
        "+1",
        " 1",
        "1 ",
        "1_000",  # int() takes the underscore
        "-1",
        "--1",
        "-",
        "1e3",
        "0x10",
        "1.0",
        "9" * 5000,  # refused before int(), which raises past 4,300 digits
        "",
        "101",
        True,
        1.0,
        None,
        [1],
        101,
        -1,
        pytest.param(10**5000, id="an-int-of-5001-digits"),  # its repr() raises
    ],
)
def test_parse_int_refuses_what_is_not_a_bounded_ascii_number_naming_the_field(value):
    with pytest.raises(InvalidInput) as info:
        parse_int(value, "query.limit", 0, 100)
    error = info.value
    assert error.field == "query.limit" and error.to_dict()["field"] == "query.limit"
    assert str(error).startswith("query.limit: expected an integer from 0 to 100")
    assert len(str(error)) < 160  # a 5,000-digit value is not echoed whole
    assert ("in ASCII digits" in error.problem) == isinstance(value, str)


def test_parse_int_names_the_sign_when_a_negative_number_is_allowed():
    with pytest.raises(InvalidInput, match=r"from -5 to 5 in ASCII digits \(- before a negative"):
        parse_int("+1", "offset", -5, 5)
